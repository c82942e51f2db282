//! Values in statements: variables and parameters, conversions between SQL Server's
//! types and the broker's, XML checks, and the result sets the emulator writes
//! (RECEIVE's columns, procedure results).

use super::{
    ColType, Column, Duration, Failure, Message, MessageKey, Params, Sql, TableVar, Tokens, Uuid, Value, codec, fail,
    tsql,
};
use crate::emulator::codec::wire;

/// SQL Server's error for a variable used or assigned before its DECLARE.
pub(super) fn undeclared(name: &str) -> Failure {
    if name.starts_with("@@") {
        // A system function SQL Server has and the emulator does not.
        return Failure {
            number: tsql::NOT_SUPPORTED,
            class: 16,
            message: format!("{} is not supported by the emulator.", name.to_uppercase()),
        };
    }
    Failure { number: 137, class: 15, message: format!("Must declare the scalar variable \"{name}\".") }
}

/// A variable may be assigned only once declared.
pub(super) fn declared(vars: &Params, name: &str) -> Result<(), Failure> {
    if vars.contains_key(name) { Ok(()) } else { Err(undeclared(name)) }
}

/// A value as an error message names it: its type and size, never its contents (a
/// message body can be large, and private).
pub(super) fn describe(v: &Sql) -> String {
    match v {
        Sql::Null => "NULL".into(),
        Sql::Int(_) => "an int value".into(),
        Sql::BigInt(_) => "a bigint value".into(),
        Sql::Bit(_) => "a bit value".into(),
        Sql::Guid(_) => "a uniqueidentifier value".into(),
        Sql::NVarChar(s) => format!("an nvarchar value ({} characters)", s.chars().count()),
        Sql::VarChar(b) => format!("a varchar value ({} bytes)", b.len()),
        Sql::VarBinary(b) => format!("a varbinary value ({} bytes)", b.len()),
        Sql::Typed(s, _) => format!("a {} value", s.name()),
    }
}

pub(super) fn value<'a>(v: &'a Value, params: &'a Params) -> Result<Sql, Failure> {
    Ok(match v {
        Value::Var(name) => params.get(name).cloned().ok_or_else(|| undeclared(name))?,
        // An integer literal is an int where it fits, as SQL Server types it.
        Value::Int(i) => i32::try_from(*i).map_or(Sql::BigInt(*i), Sql::Int),
        Value::Str(s) => Sql::NVarChar(s.clone()),
        Value::AnsiStr(s) => Sql::ansi(s),
        Value::Bin(b) => Sql::VarBinary(b.clone()),
        Value::Null => Sql::Null,
        Value::Cast(inner, ty) => convert(ty, value(inner, params)?)?,
    })
}

/// `CAST(v AS ty)` of a value, as SQL Server converts: to `xml`, checked to be
/// well-formed and kept as SQL Server keeps xml (UTF-16LE with a byte-order mark, which
/// is what a SEND of it puts in the queue); to `varbinary`, an nvarchar as UTF-16LE and a
/// varchar as its single bytes; to `nvarchar`, a varbinary read as UTF-16LE; to
/// `varchar`, text in code page 1252 and a varbinary's bytes as they are. Anything else
/// is refused.
pub(super) fn convert(ty: &str, v: Sql) -> Result<Sql, Failure> {
    let base = ty.split('(').next().unwrap_or(ty);
    match (base, v) {
        (_, Sql::Null) => Ok(Sql::Null),
        ("varchar" | "char", v) => to_varchar(v),
        ("varbinary", Sql::VarChar(b)) => Ok(Sql::VarBinary(b)),
        // A varchar to xml is parsed as its characters (the code page of its collation).
        (_, Sql::VarChar(b)) => convert(ty, Sql::NVarChar(Sql::varchar_text(&b))),
        ("xml", v @ (Sql::NVarChar(_) | Sql::VarBinary(_))) => {
            let mut bytes = vec![0xFF, 0xFE];
            bytes.extend(xml_value(v)?.encode_utf16().flat_map(u16::to_le_bytes));
            Ok(Sql::VarBinary(bytes))
        }
        ("varbinary", Sql::NVarChar(s)) => Ok(Sql::VarBinary(s.encode_utf16().flat_map(u16::to_le_bytes).collect())),
        ("varbinary", v @ Sql::VarBinary(_)) => Ok(v),
        ("nvarchar" | "sysname", Sql::VarBinary(b)) => {
            Ok(Sql::NVarChar(codec::utf16_string(&b).map_err(|e| fail(e.to_string()))?))
        }
        ("nvarchar" | "sysname", v @ Sql::NVarChar(_)) => Ok(v),
        // A decimal, float, money, date or time value as its text (style 0).
        ("nvarchar" | "sysname", Sql::Typed(s, data)) => Ok(Sql::NVarChar(s.text(&data))),
        (_, v) => Err(fail(format!("CONVERT of {} to {ty} is not supported by the emulator", describe(&v)))),
    }
}

/// A varchar as the text it holds (what comparisons and conversions from text see).
fn text_form(v: Sql) -> Sql {
    match v {
        Sql::VarChar(b) => Sql::NVarChar(Sql::varchar_text(&b)),
        v => v,
    }
}

/// A value as varchar: text in code page 1252 (`?` for what it lacks), a binary value's
/// bytes as they are, a number or date as its text.
fn to_varchar(v: Sql) -> Result<Sql, Failure> {
    Ok(match v {
        Sql::Null => Sql::Null,
        v @ Sql::VarChar(_) => v,
        Sql::VarBinary(b) => Sql::VarChar(b),
        Sql::NVarChar(s) => Sql::ansi(&s),
        Sql::Typed(s, data) => Sql::ansi(&s.text(&data)),
        Sql::Int(i) => Sql::ansi(&i.to_string()),
        Sql::BigInt(i) => Sql::ansi(&i.to_string()),
        Sql::Bit(b) => Sql::ansi(if b { "1" } else { "0" }),
        Sql::Guid(g) => Sql::ansi(&g.to_string().to_uppercase()),
    })
}

pub(super) fn as_uuid(v: Sql) -> Result<Uuid, Failure> {
    match text_form(v) {
        Sql::Guid(u) => Ok(u),
        // SQL Server's errors for a value that is no uniqueidentifier, which name the
        // types, never the value.
        Sql::NVarChar(s) => s.trim().parse().map_err(|_| Failure {
            number: 8169,
            class: 16,
            message: "Conversion failed when converting from a character string to uniqueidentifier.".into(),
        }),
        other => Err(Failure {
            number: 206,
            class: 16,
            message: format!("Operand type clash: {} is incompatible with uniqueidentifier", type_name(&other)),
        }),
    }
}

/// The SQL Server type of a value, for messages.
fn type_name(v: &Sql) -> String {
    match v {
        Sql::Null => "NULL".into(),
        Sql::Int(_) => "int".into(),
        Sql::BigInt(_) => "bigint".into(),
        Sql::Bit(_) => "bit".into(),
        Sql::Guid(_) => "uniqueidentifier".into(),
        Sql::NVarChar(_) => "nvarchar".into(),
        Sql::VarChar(_) => "varchar".into(),
        Sql::VarBinary(_) => "varbinary".into(),
        Sql::Typed(s, _) => s.name(),
    }
}

pub(super) fn as_i64(v: Sql) -> Result<i64, Failure> {
    match v {
        Sql::Int(i) => Ok(i64::from(i)),
        Sql::BigInt(i) => Ok(i),
        other => Err(fail(format!("{} is not an integer", describe(&other)))),
    }
}

pub(super) fn as_text(v: Sql) -> Result<String, Failure> {
    match text_form(v) {
        Sql::NVarChar(s) => Ok(s),
        Sql::VarBinary(b) => String::from_utf8(b).map_err(|_| fail("binary text is not UTF-8")),
        other => Err(fail(format!("{} is not text", describe(&other)))),
    }
}

pub(super) fn as_bytes(v: Sql) -> Result<Option<Vec<u8>>, Failure> {
    match v {
        Sql::Null => Ok(None),
        Sql::VarBinary(b) => Ok(Some(b)),
        // varchar converts to varbinary as its single bytes, as in SQL Server.
        Sql::VarChar(b) => Ok(Some(b)),
        // nvarchar converts to varbinary as UTF-16LE, as in SQL Server.
        Sql::NVarChar(s) => Ok(Some(s.encode_utf16().flat_map(u16::to_le_bytes).collect())),
        other => Err(fail(format!("{} is not a message body", describe(&other)))),
    }
}

/// How long a statement waits: nothing without WAITFOR; `TIMEOUT n` milliseconds; no
/// TIMEOUT or -1 is "no limit", held to an hour here.
pub(super) fn wait_of(waitfor: bool, timeout: Option<Value>, params: &Params) -> Result<Duration, Failure> {
    Ok(match (waitfor, timeout) {
        (false, _) => Duration::ZERO,
        (true, Some(v)) => match as_i64(value(&v, params)?)? {
            -1 => Duration::from_secs(3600),
            ms => Duration::from_millis(ms.max(0) as u64),
        },
        (true, None) => Duration::from_secs(3600),
    })
}

/// The PostgreSQL broker's name of a queue: its last part (schemas are SQL Server's).
pub(super) fn queue_name(q: &str) -> &str {
    q.rsplit('.').next().unwrap_or(q)
}

/// The columns of a queue, as SQL Server names them, in `RECEIVE *` order.
pub(super) const RECEIVE_COLUMNS: [&str; 14] = [
    "status",
    "priority",
    "queuing_order",
    "conversation_group_id",
    "conversation_handle",
    "message_sequence_number",
    "service_name",
    "service_id",
    "service_contract_name",
    "service_contract_id",
    "message_type_name",
    "message_type_id",
    "validation",
    "message_body",
];

/// A queue column's type and value in a message (`None`: no such column).
pub(super) fn receive_column(m: &Message, name: &str) -> Option<(ColType, Sql)> {
    Some(match name {
        // 1: received (RETENTION OFF keeps no other state in a result).
        "status" => (ColType::TinyInt, Sql::Int(1)),
        "priority" => (ColType::TinyInt, Sql::Int(5)),
        "queuing_order" => (ColType::BigInt, Sql::BigInt(m.id)),
        "conversation_group_id" => (ColType::Guid, Sql::Guid(m.conversation_group_id)),
        "conversation_handle" => (ColType::Guid, Sql::Guid(m.conversation_handle)),
        "message_sequence_number" => (ColType::BigInt, Sql::BigInt(m.sequence)),
        "service_name" => (ColType::NVarChar, Sql::NVarChar(m.service.clone())),
        "service_contract_name" => (ColType::NVarChar, Sql::NVarChar(m.contract.clone())),
        "message_type_name" => (ColType::NVarChar, Sql::NVarChar(m.message_type.clone())),
        "validation" => {
            // E empty, X XML (system messages and bodies of XML message types), N none.
            let v = if m.body.is_empty() {
                "E"
            } else if m.body.starts_with(b"<") || m.body.starts_with(&[0xFF, 0xFE]) {
                "X"
            } else {
                "N"
            };
            (ColType::NVarChar, Sql::NVarChar(v.into()))
        }
        "message_body" => {
            (ColType::VarBinaryMax, if m.body.is_empty() { Sql::Null } else { Sql::VarBinary(m.body.clone()) })
        }
        // Ids of SQL Server's catalog: the PostgreSQL broker names things, it has no ids.
        "message_type_id" | "service_id" | "service_contract_id" => (ColType::Int, Sql::Null),
        _ => return None,
    })
}

/// `CAST(value AS ty)` of a queue column, for the types the emulator converts to.
pub(super) fn cast(ty: &str, v: Sql) -> Result<(ColType, Sql), Failure> {
    let text_type = |p: &[&str]| p.iter().any(|p| ty.starts_with(p)) || ty == "sysname";
    // To varchar: single bytes, shown to the client as text (and NULL stays NULL).
    if text_type(&["varchar", "char"]) {
        return Ok((ColType::NVarChar, to_varchar(v)?));
    }
    let v = match (ty, v) {
        ("varbinary(max)" | "varbinary", Sql::VarChar(b)) => Sql::VarBinary(b),
        (_, v) => text_form(v),
    };
    if let (true, Sql::Null) = (text_type(&["nvarchar", "nchar"]), &v) {
        return Ok((ColType::NVarChar, Sql::Null));
    }
    match (ty, v) {
        ("xml", Sql::Null) => Ok((ColType::Xml, Sql::Null)),
        ("xml", v @ (Sql::VarBinary(_) | Sql::NVarChar(_))) => Ok((ColType::Xml, Sql::NVarChar(xml_value(v)?))),
        ("varbinary(max)" | "varbinary", v @ (Sql::Null | Sql::VarBinary(_))) => Ok((ColType::VarBinaryMax, v)),
        ("uniqueidentifier", v @ (Sql::Null | Sql::Guid(_))) => Ok((ColType::Guid, v)),
        ("nvarchar(max)" | "nvarchar" | "sysname", v @ (Sql::Null | Sql::NVarChar(_))) => Ok((ColType::NVarChar, v)),
        // A binary message body read as text: its bytes as UTF-16LE, as SQL Server reads
        // them (the same conversion as an assignment to an nvarchar variable).
        (ty, v @ Sql::VarBinary(_)) if ty.starts_with("nvarchar") || ty.starts_with("nchar") || ty == "sysname" => {
            Ok((ColType::NVarChar, convert("nvarchar", v)?))
        }
        ("bigint", v @ (Sql::Null | Sql::BigInt(_))) => Ok((ColType::BigInt, v)),
        ("bigint", Sql::Int(i)) => Ok((ColType::BigInt, Sql::BigInt(i64::from(i)))),
        ("int", v @ (Sql::Null | Sql::Int(_))) => Ok((ColType::Int, v)),
        ("int", Sql::BigInt(i)) => i32::try_from(i)
            .map(|i| (ColType::Int, Sql::Int(i)))
            .map_err(|_| fail("Arithmetic overflow error converting expression to data type int.")),
        (ty, v) => Err(fail(format!("CAST of {} AS {ty} is not supported by the emulator", describe(&v)))),
    }
}

/// An nvarchar or varbinary as an `xml` value: its text, checked to be well-formed,
/// without its declaration. SQL Server reads a binary body as UTF-16 with a byte-order
/// mark, else as the encoding its declaration names (UTF-8 here).
fn xml_value(v: Sql) -> Result<String, Failure> {
    let utf16 = |b: &[u8]| codec::utf16_string(b).map_err(|e| fail(e.to_string()));
    let swapped = |b: &[u8]| b.chunks(2).flat_map(|c| c.iter().rev().copied()).collect::<Vec<u8>>();
    let text = match v {
        Sql::NVarChar(s) => s,
        // The encoding as the XML specification's appendix F detects it: a byte-order
        // mark, else a first character with a zero byte (UTF-16 without a mark, as an
        // NVARCHAR body is sent), else UTF-8.
        Sql::VarBinary(b) => match (b.first(), b.get(1)) {
            (Some(0xFF), Some(0xFE)) => utf16(&b[2..])?,
            (Some(0xFE), Some(0xFF)) => utf16(&swapped(&b[2..]))?,
            (Some(&x), Some(0)) if x != 0 => utf16(&b)?,
            (Some(0), Some(&y)) if y != 0 => utf16(&swapped(&b))?,
            _ => {
                let body = b.strip_prefix(&[0xEF, 0xBB, 0xBF]).unwrap_or(&b);
                String::from_utf8(body.to_vec()).map_err(|_| xml_error("the body is neither UTF-16 nor UTF-8"))?
            }
        },
        other => return Err(fail(format!("{} is not an xml value", describe(&other)))),
    };
    well_formed(&text)?;
    Ok(strip_declaration(&text))
}

/// SQL Server keeps no XML declaration in an `xml` value.
pub(super) fn strip_declaration(s: &str) -> String {
    let t = s.trim_start_matches('\u{feff}');
    match t.strip_prefix("<?xml").and_then(|r| r.find("?>").map(|i| &r[i + 2..])) {
        Some(rest) => rest.to_owned(),
        None => t.to_owned(),
    }
}

pub(super) fn xml_error(why: &str) -> Failure {
    Failure { number: 9420, class: 16, message: format!("XML parsing: {why}") }
}

/// Error 94xx unless `s` is one well-formed XML document (or fragment of elements).
pub(super) fn well_formed(s: &str) -> Result<(), Failure> {
    let mut r = quick_xml::Reader::from_str(s);
    r.config_mut().check_end_names = true;
    loop {
        match r.read_event() {
            Ok(quick_xml::events::Event::Eof) => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(xml_error(&e.to_string())),
        }
    }
}

/// What a RECEIVE returns: a result set of its columns, or (when it assigns to
/// variables) nothing, the variables holding the last row's values.
/// One output column of a RECEIVE: its name, what it gives, the variable it goes into.
struct Out {
    name: String,
    expr: Expr,
    var: Option<String>,
}

enum Expr {
    /// A queue column, perhaps cast (a CASE's operands are the same thing).
    Column(tsql::Operand),
    Case(tsql::Case),
}

fn column(source: &str, cast: Option<String>) -> Expr {
    Expr::Column(tsql::Operand::Column { source: source.to_owned(), cast })
}

fn invalid_column(name: &str) -> Failure {
    Failure { number: 207, class: 16, message: format!("Invalid column name '{name}'.") }
}

fn known_column(name: &str) -> Result<(), Failure> {
    if receive_column(&PROBE, name).is_some() { Ok(()) } else { Err(invalid_column(name)) }
}

/// The output columns of a RECEIVE's column list, every queue column named checked.
fn outs_of(columns: &[Column], vars: &Params) -> Result<Vec<Out>, Failure> {
    let mut outs = Vec::new();
    for c in columns {
        match c {
            Column::Star => outs.extend(RECEIVE_COLUMNS.iter().map(|n| Out {
                name: (*n).to_owned(),
                expr: column(n, None),
                var: None,
            })),
            Column::Item { source, cast, alias, var } => {
                known_column(source)?;
                if let Some(v) = var {
                    declared(vars, v)?;
                }
                outs.push(Out {
                    name: alias.clone().unwrap_or_else(|| if cast.is_some() { String::new() } else { source.clone() }),
                    expr: column(source, cast.clone()),
                    var: var.clone(),
                });
            }
            Column::Case(case) => {
                for (column, _, then) in &case.whens {
                    known_column(column)?;
                    if let tsql::Operand::Column { source, .. } = then {
                        known_column(source)?;
                    }
                }
                if let Some(tsql::Operand::Column { source, .. }) = &case.otherwise {
                    known_column(source)?;
                }
                outs.push(Out {
                    name: case.alias.clone().unwrap_or_default(),
                    expr: Expr::Case(case.clone()),
                    var: None,
                });
            }
        }
    }
    Ok(outs)
}

/// The type of a plain value.
pub(super) fn type_of(v: &Sql) -> ColType {
    match v {
        Sql::Guid(_) => ColType::Guid,
        Sql::Int(_) => ColType::Int,
        Sql::BigInt(_) => ColType::BigInt,
        Sql::Bit(_) => ColType::Bit,
        Sql::VarBinary(_) => ColType::VarBinaryMax,
        Sql::Typed(s, _) => ColType::Typed(*s),
        Sql::NVarChar(_) | Sql::VarChar(_) | Sql::Null => ColType::NVarChar,
    }
}

/// A CASE operand's type and value in message `m`.
fn operand(m: &Message, o: &tsql::Operand, vars: &Params) -> Result<(ColType, Sql), Failure> {
    match o {
        tsql::Operand::Column { source, cast: to } => {
            let (ty, v) = receive_column(m, source).ok_or_else(|| invalid_column(source))?;
            match to {
                Some(to) => cast(to, v),
                None => Ok((ty, v)),
            }
        }
        tsql::Operand::Literal { value: lit, cast: to } => {
            let v = value(lit, vars)?;
            match to {
                Some(to) => cast(to, v),
                None => Ok((type_of(&v), v)),
            }
        }
    }
}

/// An output column's type and value in message `m`.
fn cell(m: &Message, e: &Expr, vars: &Params) -> Result<(ColType, Sql), Failure> {
    match e {
        Expr::Column(o) => operand(m, o, vars),
        Expr::Case(case) => {
            // The CASE's type is its first branch's, widened to the widest integer type of
            // its branches (SQL Server takes the highest of them; the documented forms
            // give every branch the same type).
            let rank = |t: ColType| match t {
                ColType::BigInt => 3,
                ColType::Int => 2,
                ColType::TinyInt => 1,
                _ => 0,
            };
            let (mut ty, _) = operand(&PROBE, &case.whens[0].2, vars)?;
            for o in case.whens.iter().map(|w| &w.2).chain(case.otherwise.as_ref()) {
                let (t, _) = operand(&PROBE, o, vars)?;
                if rank(ty) > 0 && rank(t) > rank(ty) {
                    ty = t;
                }
            }
            for (column, equals, then) in &case.whens {
                let (_, v) = receive_column(m, column).ok_or_else(|| invalid_column(column))?;
                if equal(v, value(equals, vars)?)? == Some(true) {
                    return Ok((ty, operand(m, then, vars)?.1));
                }
            }
            match &case.otherwise {
                Some(o) => Ok((ty, operand(m, o, vars)?.1)),
                None => Ok((ty, Sql::Null)),
            }
        }
    }
}

pub(super) fn receive_result(
    columns: &[Column],
    msgs: &[Message],
    vars: &mut Params,
    t: &mut Tokens,
) -> Result<Option<u64>, Failure> {
    let outs = outs_of(columns, vars)?;
    if outs.iter().any(|o| o.var.is_some()) {
        // SQL Server leaves the variables as they were when no row comes back.
        if let Some(last) = msgs.last() {
            let mut values = Vec::with_capacity(outs.len());
            for o in &outs {
                values.push(cell(last, &o.expr, vars)?.1);
            }
            for (o, v) in outs.iter().zip(values) {
                vars.insert(o.var.clone().expect("all assign"), v);
            }
        }
        return Ok(Some(msgs.len() as u64));
    }
    // The type of a column does not depend on its value, so an empty probe gives it.
    let mut types: Vec<ColType> = Vec::new();
    for o in &outs {
        types.push(match &o.expr {
            Expr::Column(tsql::Operand::Column { cast: Some(to), .. }) => cast(to, Sql::Null)?.0,
            e => cell(&PROBE, e, vars)?.0,
        });
    }
    let mut rows = Vec::with_capacity(msgs.len());
    for m in msgs {
        rows.push(outs.iter().map(|o| cell(m, &o.expr, vars).map(|(_, v)| v)).collect::<Result<Vec<_>, _>>()?);
    }
    let cols: Vec<(&str, ColType)> = outs.iter().map(|o| o.name.as_str()).zip(types).collect();
    Ok(result_set(t, &cols, &rows))
}

/// A message with nothing in it: its columns' types are those of every message.
pub(super) static PROBE: Message = Message {
    id: 0,
    conversation_group_id: Uuid::nil(),
    conversation_handle: Uuid::nil(),
    sequence: 0,
    message_type: String::new(),
    body: Vec::new(),
    service: String::new(),
    contract: String::new(),
};

/// A result set.
pub(super) fn result_set(t: &mut Tokens, cols: &[(&str, ColType)], rows: &[Vec<Sql>]) -> Option<u64> {
    // An nvarchar column holding a value over 4,000 characters is nvarchar(max), sent
    // as PLP: nvarchar(n) has at most 4,000 (8,000 bytes).
    let cols: Vec<(&str, ColType)> = cols
        .iter()
        .enumerate()
        .map(|(i, &(name, ty))| {
            let long = |r: &Vec<Sql>| match r.get(i) {
                Some(Sql::NVarChar(s)) => s.encode_utf16().count() > 4000,
                Some(Sql::VarChar(b)) => Sql::varchar_text(b).encode_utf16().count() > 4000,
                _ => false,
            };
            (name, if ty == ColType::NVarChar && rows.iter().any(long) { ColType::NVarCharMax } else { ty })
        })
        .collect();
    t.col_metadata(&cols);
    let types: Vec<ColType> = cols.iter().map(|(_, c)| *c).collect();
    for r in rows {
        t.row(&types, r);
    }
    Some(rows.len() as u64)
}

pub(super) fn keys_of(json: &str) -> Result<Vec<MessageKey>, Failure> {
    let mut keys = Vec::new();
    for item in json.split('{').skip(1) {
        let h =
            item.split("\"h\":\"").nth(1).and_then(|r| r.split('"').next()).ok_or_else(|| fail("keys: no \"h\""))?;
        let s = item
            .split("\"s\":")
            .nth(1)
            .map(|r| r.chars().take_while(|c| c.is_ascii_digit() || *c == '-').collect::<String>())
            .ok_or_else(|| fail("keys: no \"s\""))?;
        keys.push(MessageKey {
            conversation_handle: h.parse().map_err(|_| fail("keys: bad handle"))?,
            sequence: s.parse().map_err(|_| fail("keys: bad sequence"))?,
        });
    }
    Ok(keys)
}

/// `a = b` as SQL Server compares: `None` when either is NULL; text as the default
/// collation does (case and trailing spaces ignored); a uniqueidentifier with its text.
pub(super) fn equal(a: Sql, b: Sql) -> Result<Option<bool>, Failure> {
    Ok(Some(match (text_form(a), text_form(b)) {
        (Sql::Null, _) | (_, Sql::Null) => return Ok(None),
        (Sql::NVarChar(x), Sql::NVarChar(y)) => x.trim_end().to_lowercase() == y.trim_end().to_lowercase(),
        (Sql::Guid(g), Sql::NVarChar(s)) | (Sql::NVarChar(s), Sql::Guid(g)) => as_uuid(Sql::NVarChar(s))? == g,
        (Sql::Guid(x), Sql::Guid(y)) => x == y,
        (Sql::VarBinary(x), Sql::VarBinary(y)) => x == y,
        // Decimals by their value (one value has several lengths); others of one type by
        // their bytes.
        (Sql::Typed(a, x), Sql::Typed(b, y))
            if matches!(a.ty, wire::DECIMALN | wire::NUMERICN) && matches!(b.ty, wire::DECIMALN | wire::NUMERICN) =>
        {
            // 1.50 = 1.5, and -0.00 = 0.
            let key = |t: String| {
                let t = if t.contains('.') { t.trim_end_matches('0').trim_end_matches('.').to_owned() } else { t };
                if t == "-0" { "0".to_owned() } else { t }
            };
            key(a.text(&x)) == key(b.text(&y))
        }
        // A float by its value (0 = -0); a datetimeoffset by its UTC instant (the offset
        // is not part of the value compared); others by their bytes.
        (Sql::Typed(a, x), Sql::Typed(b, y)) if a == b && a.ty == wire::FLTN => {
            let f = |d: &[u8]| {
                if d.len() == 4 {
                    f64::from(f32::from_le_bytes(d.try_into().expect("4")))
                } else {
                    f64::from_le_bytes(d.try_into().expect("8"))
                }
            };
            f(&x) == f(&y)
        }
        (Sql::Typed(a, x), Sql::Typed(b, y)) if a == b && a.ty == wire::DATETIMEOFFSETN => {
            x[..x.len() - 2] == y[..y.len() - 2]
        }
        (Sql::Typed(a, x), Sql::Typed(b, y)) if a == b => x == y,
        (x @ (Sql::Int(_) | Sql::BigInt(_) | Sql::Bit(_)), y @ (Sql::Int(_) | Sql::BigInt(_) | Sql::Bit(_))) => {
            int_of(x) == int_of(y)
        }
        (x, y) => {
            return Err(fail(format!(
                "comparing {} with {} is not supported by the emulator",
                describe(&x),
                describe(&y)
            )));
        }
    }))
}

fn int_of(v: Sql) -> i64 {
    match v {
        Sql::Int(i) => i64::from(i),
        Sql::BigInt(i) => i,
        Sql::Bit(b) => i64::from(b),
        _ => 0,
    }
}

/// The base of a type name, for the text types under the one the emulator keeps.
fn base_type(ty: &str) -> &str {
    match ty.split('(').next().unwrap_or(ty) {
        "nchar" | "sysname" | "nvarchar" => "nvarchar",
        "char" | "varchar" => "varchar",
        other => other,
    }
}

/// A value assigned to a variable declared `ty`, converted as SQL Server converts it
/// (a binary message body into an nvarchar is read as UTF-16LE; into xml, checked).
pub(super) fn typed(ty: Option<&String>, v: Sql) -> Result<Sql, Failure> {
    match ty.map(|t| base_type(t)) {
        Some(base @ ("nvarchar" | "varchar" | "varbinary" | "xml")) => convert(base, v),
        _ => Ok(v),
    }
}

/// The wire type of a table variable's column.
pub(super) fn column_type(ty: &str) -> Result<ColType, Failure> {
    Ok(match base_type(ty) {
        "uniqueidentifier" => ColType::Guid,
        "bigint" => ColType::BigInt,
        "int" => ColType::Int,
        "tinyint" => ColType::TinyInt,
        "bit" => ColType::Bit,
        "varbinary" => ColType::VarBinaryMax,
        "xml" => ColType::Xml,
        "nvarchar" | "varchar" => ColType::NVarChar,
        other => return Err(fail(format!("a table variable column of type {other} is not supported by the emulator"))),
    })
}

/// A value stored in a table variable's column of type `ty`.
pub(super) fn column_value(ty: &str, v: Sql) -> Result<Sql, Failure> {
    let v = match (base_type(ty), v) {
        ("varbinary" | "xml" | "varchar", v) => v,
        (_, v) => text_form(v),
    };
    match (base_type(ty), v) {
        (_, Sql::Null) => Ok(Sql::Null),
        ("varchar", v) => to_varchar(v),
        ("xml", v) => Ok(cast("xml", v)?.1),
        ("nvarchar", v @ Sql::NVarChar(_)) => Ok(v),
        (base @ ("nvarchar" | "varbinary"), v) => convert(base, v),
        ("uniqueidentifier", v) => Ok(Sql::Guid(as_uuid(v)?)),
        ("bigint", v) => Ok(Sql::BigInt(as_i64(v)?)),
        ("tinyint", v) => {
            let i = as_i64(v)?;
            if !(0..=255).contains(&i) {
                return Err(fail("Arithmetic overflow error for data type tinyint"));
            }
            Ok(Sql::Int(i as i32))
        }
        ("int", v) => {
            Ok(Sql::Int(i32::try_from(as_i64(v)?).map_err(|_| fail("Arithmetic overflow converting to int"))?))
        }
        (_, Sql::Bit(b)) => Ok(Sql::Bit(b)),
        // Any number but 0 is 1, as SQL Server converts to bit.
        ("bit", v @ (Sql::Int(_) | Sql::BigInt(_))) => Ok(Sql::Bit(as_i64(v)? != 0)),
        (other, v) => {
            Err(fail(format!("storing {} in a column of type {other} is not supported by the emulator", describe(&v))))
        }
    }
}

/// SQL Server's error for a table variable used before its DECLARE.
pub(super) fn undeclared_table(name: &str) -> Failure {
    Failure { number: 1087, class: 15, message: format!("Must declare the table variable \"{name}\".") }
}

/// `RECEIVE columns … INTO @t`: one row per message, each column converted to the
/// table's column in order.
pub(super) fn receive_into(
    columns: &[Column],
    msgs: &[Message],
    vars: &Params,
    table: &mut TableVar,
) -> Result<u64, Failure> {
    let outs = outs_of(columns, vars)?;
    if outs.len() != table.columns.len() {
        return Err(Failure {
            number: 213,
            class: 16,
            message: "Column name or number of supplied values does not match table definition.".into(),
        });
    }
    for m in msgs {
        let mut row = Vec::with_capacity(outs.len());
        for (o, (_, ty)) in outs.iter().zip(&table.columns) {
            let (_, v) = cell(m, &o.expr, vars)?;
            row.push(column_value(ty, v)?);
        }
        table.rows.push(row);
    }
    Ok(msgs.len() as u64)
}

/// `SELECT * | columns FROM @t`.
pub(super) fn select_table(
    columns: Option<&[String]>,
    table: &TableVar,
    t: &mut Tokens,
) -> Result<Option<u64>, Failure> {
    let picked: Vec<usize> = match columns {
        None => (0..table.columns.len()).collect(),
        Some(names) => names
            .iter()
            .map(|n| {
                table.columns.iter().position(|(c, _)| c == n).ok_or_else(|| Failure {
                    number: 207,
                    class: 16,
                    message: format!("Invalid column name '{n}'."),
                })
            })
            .collect::<Result<_, _>>()?,
    };
    let mut cols = Vec::with_capacity(picked.len());
    for &i in &picked {
        let (name, ty) = &table.columns[i];
        cols.push((name.as_str(), column_type(ty)?));
    }
    let rows: Vec<Vec<Sql>> = table.rows.iter().map(|r| picked.iter().map(|&i| r[i].clone()).collect()).collect();
    Ok(result_set(t, &cols, &rows))
}

/// A PostgreSQL error of a statement the emulator runs itself, as SQL Server's.
pub(super) fn pg_failure(e: tokio_postgres::Error) -> Failure {
    Failure::from(crate::broker::postgres::error_of(e))
}

/// SQL Server's error for a name that is not an object.
pub(super) fn invalid_object(name: &str) -> Failure {
    Failure { number: 208, class: 16, message: format!("Invalid object name '{name}'.") }
}

/// The columns of `sys.conversation_endpoints` the emulator has, in its order.
const ENDPOINT_COLUMNS: [&str; 7] = [
    "conversation_handle",
    "conversation_id",
    "is_initiator",
    "conversation_group_id",
    "state",
    "state_desc",
    "far_service",
];

/// `SELECT … FROM sys.conversation_endpoints`: the rows of `sb.endpoint` (handle,
/// conversation_id, is_initiator, group_id, state, far_service) as SQL Server's columns.
pub(super) fn endpoint_rows(
    columns: Option<&[String]>,
    rows: &[tokio_postgres::Row],
    t: &mut Tokens,
) -> Result<Option<u64>, Failure> {
    let names: Vec<&str> = match columns {
        None => ENDPOINT_COLUMNS.to_vec(),
        Some(c) => c.iter().map(String::as_str).collect(),
    };
    let mut cols = Vec::with_capacity(names.len());
    for n in &names {
        let ty = match *n {
            "conversation_handle" | "conversation_id" | "conversation_group_id" => ColType::Guid,
            "is_initiator" => ColType::TinyInt,
            "state" | "state_desc" | "far_service" => ColType::NVarChar,
            other => {
                return Err(Failure {
                    number: 207,
                    class: 16,
                    message: format!("Invalid column name '{other}' (or one the emulator does not have)."),
                });
            }
        };
        cols.push((*n, ty));
    }
    let out: Vec<Vec<Sql>> = rows
        .iter()
        .map(|r| {
            names
                .iter()
                .map(|n| match *n {
                    "conversation_handle" => Sql::Guid(r.get(0)),
                    "conversation_id" => Sql::Guid(r.get(1)),
                    "is_initiator" => Sql::Int(i32::from(r.get::<_, bool>(2))),
                    "conversation_group_id" => Sql::Guid(r.get(3)),
                    "state" => Sql::NVarChar(r.get(4)),
                    "state_desc" => Sql::NVarChar(state_desc(r.get(4)).to_owned()),
                    _ => Sql::NVarChar(r.get(5)),
                })
                .collect()
        })
        .collect();
    Ok(result_set(t, &cols, &out))
}

/// `state_desc` of a `state` code, as SQL Server spells it.
fn state_desc(state: &str) -> &'static str {
    match state {
        "SO" => "STARTED_OUTBOUND",
        "SI" => "STARTED_INBOUND",
        "CO" => "CONVERSING",
        "DI" => "DISCONNECTED_INBOUND",
        "DO" => "DISCONNECTED_OUTBOUND",
        "ER" => "ERROR",
        _ => "CLOSED",
    }
}
