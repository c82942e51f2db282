//! The requests the emulator reads: SQL batch (2.2.6.7), RPC (2.2.6.6) with its typed
//! parameter values (TYPE_INFO 2.2.5.5.1, PLP 2.2.5.2.3), transaction manager (2.2.6.9).

use super::{Malformed, R, Reader, Scalar, utf16_string};
use uuid::Uuid;

/// An RPC request (2.2.6.6): the procedure's name (`sp_executesql` for its id 10) and
/// the parameters, names lower case (`#i` for the i-th when unnamed).
pub fn parse_rpc(payload: &[u8]) -> R<(String, Vec<(String, Sql)>)> {
    let mut r = Reader::new(payload);
    r.skip_all_headers()?;
    let n = r.u16()?;
    let procedure = if n == 0xFFFF {
        // The procedure ids of MS-TDS 2.2.6.6 the emulator runs (ODBC sends its
        // parameterised statements as sp_prepexec, or sp_prepare and sp_execute).
        match r.u16()? {
            10 => "sp_executesql".to_owned(),
            11 => "sp_prepare".to_owned(),
            12 => "sp_execute".to_owned(),
            13 => "sp_prepexec".to_owned(),
            15 => "sp_unprepare".to_owned(),
            id => return Err(Malformed(format!("procedure id {id} is not supported by the emulator"))),
        }
    } else {
        r.utf16(n as usize)?
    };
    r.u16()?; // option flags
    let mut params = Vec::new();
    while !r.rest().is_empty() {
        let name = r.b_varchar()?.to_lowercase();
        r.u8()?; // status flags
        let v = read_value(&mut r)?;
        params.push((if name.is_empty() { format!("#{}", params.len()) } else { name }, v));
    }
    Ok((procedure, params))
}

/// A SQL batch (2.2.6.7): its text.
pub fn parse_sql_batch(payload: &[u8]) -> R<String> {
    let mut r = Reader::new(payload);
    r.skip_all_headers()?;
    utf16_string(r.rest())
}

/// A transaction-manager request (2.2.6.9): its type (5 begin, 7 commit, 8 rollback)
/// and, for commit and rollback, whether a new transaction begins at once (fBeginXact).
pub fn parse_tm(payload: &[u8]) -> R<(u16, bool)> {
    let mut r = Reader::new(payload);
    r.skip_all_headers()?;
    let kind = r.u16()?;
    let again = matches!(kind, 7 | 8) && r.b_varchar().is_ok() && r.u8().is_ok_and(|b| b & 1 == 1);
    Ok((kind, again))
}

/// A value of a column or parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum Sql {
    Null,
    Int(i32),
    BigInt(i64),
    Bit(bool),
    NVarChar(String),
    /// varchar (or char): single bytes, as the client sent them or a `'…'` literal makes
    /// them; a SEND of one puts these bytes in the queue, as in SQL Server.
    VarChar(Vec<u8>),
    VarBinary(Vec<u8>),
    Guid(Uuid),
    /// A decimal, float, money, date or time value: its type and its bytes as sent.
    Typed(Scalar, Vec<u8>),
}

impl Sql {
    /// Text as a varchar of the emulator's collation (SQL_Latin1_General_CP1_CI_AS, code
    /// page 1252): a character the code page lacks becomes `?`, as SQL Server converts it.
    pub fn ansi(s: &str) -> Self {
        let mut out = Vec::with_capacity(s.len());
        let mut buf = [0u8; 4];
        for c in s.chars() {
            let (bytes, _, unmappable) = encoding_rs::WINDOWS_1252.encode(c.encode_utf8(&mut buf));
            if unmappable || bytes.len() != 1 { out.push(b'?') } else { out.push(bytes[0]) }
        }
        Sql::VarChar(out)
    }

    /// A varchar's bytes (code page 1252) as text.
    pub fn varchar_text(b: &[u8]) -> String {
        encoding_rs::WINDOWS_1252.decode_without_bom_handling(b).0.into_owned()
    }
}

/// Column types the emulator returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColType {
    TinyInt,
    SmallInt,
    Int,
    BigInt,
    Bit,
    /// nvarchar(4000): values of at most 4,000 characters.
    NVarChar,
    /// nvarchar(max), sent as PLP.
    NVarCharMax,
    VarBinaryMax,
    Guid,
    /// `xml` (untyped): text, sent as UTF-16 in PLP chunks.
    Xml,
    /// A decimal, float, money, date or time type, as a client sent it.
    Typed(Scalar),
}

/// A uniqueidentifier as TDS carries it: its first three fields little-endian.
pub(super) fn guid_from_wire(b: [u8; 16]) -> Uuid {
    // The swap is its own inverse.
    Uuid::from_bytes(guid_wire(&Uuid::from_bytes(b)))
}

pub(super) fn guid_wire(u: &Uuid) -> [u8; 16] {
    let mut b = *u.as_bytes();
    b.swap(0, 3);
    b.swap(1, 2);
    b.swap(4, 5);
    b.swap(6, 7);
    b
}

/// Reads one TYPE_INFO + value, as a client sends RPC parameters (2.2.5.5.1, 2.2.5.6).
pub fn read_value(r: &mut Reader<'_>) -> R<Sql> {
    let ty = r.u8()?;
    if let Some(scalar) = Scalar::read_info(ty, r)? {
        return read_scalar(r, scalar, Scalar::fixed(ty));
    }
    match ty {
        0x1F => Ok(Sql::Null),
        // The fixed-length integers and bit (2.2.5.4.1): no length byte.
        0x30 => Ok(Sql::Int(i32::from(r.u8()?))),
        0x34 => Ok(Sql::Int(i32::from(r.u16()? as i16))),
        0x38 => Ok(Sql::Int(r.u32()? as i32)),
        0x7F => Ok(Sql::BigInt(r.u64()? as i64)),
        0x32 => Ok(Sql::Bit(r.u8()? != 0)),
        0x26 => {
            let _max = r.u8()?;
            match r.u8()? {
                0 => Ok(Sql::Null),
                1 => Ok(Sql::Int(i32::from(r.u8()?))),
                2 => Ok(Sql::Int(i32::from(r.u16()? as i16))),
                4 => Ok(Sql::Int(r.u32()? as i32)),
                8 => Ok(Sql::BigInt(r.u64()? as i64)),
                n => Err(Malformed(format!("INTN of {n} bytes"))),
            }
        }
        0x68 => {
            let _max = r.u8()?;
            match r.u8()? {
                0 => Ok(Sql::Null),
                _ => Ok(Sql::Bit(r.u8()? != 0)),
            }
        }
        0x24 => {
            let _max = r.u8()?;
            match r.u8()? {
                0 => Ok(Sql::Null),
                16 => Ok(Sql::Guid(guid_from_wire(r.bytes(16)?.try_into().expect("16")))),
                n => Err(Malformed(format!("GUID of {n} bytes"))),
            }
        }
        // nvarchar, varbinary; and nchar, varchar, char, binary, as ODBC sends a short
        // value: the same layout, a collation for the text types.
        0xE7 | 0xA5 | 0xEF | 0xA7 | 0xAF | 0xAD => {
            let max = r.u16()?;
            // The collation (2.2.5.1.2): its fUTF8 flag says a varchar's bytes are UTF-8.
            let utf8 = matches!(ty, 0xE7 | 0xEF | 0xA7 | 0xAF)
                && u32::from_le_bytes(r.bytes(5)?[..4].try_into().expect("4")) & (1 << 26) != 0;
            let bytes = if max == 0xFFFF {
                match read_plp(r)? {
                    None => return Ok(Sql::Null),
                    Some(b) => b,
                }
            } else {
                let n = r.u16()?;
                if n == 0xFFFF {
                    return Ok(Sql::Null);
                }
                r.bytes(n as usize)?.to_vec()
            };
            Ok(match ty {
                0xE7 | 0xEF => Sql::NVarChar(utf16_string(&bytes)?),
                // Kept in the emulator's code page, as a varchar of its collation.
                0xA7 | 0xAF if utf8 => Sql::ansi(&String::from_utf8_lossy(&bytes)),
                0xA7 | 0xAF => Sql::VarChar(bytes),
                _ => Sql::VarBinary(bytes),
            })
        }
        0xF1 => {
            // XML_INFO: a schema collection may be named; the value is UTF-16 in PLP.
            if r.u8()? == 1 {
                r.b_varchar()?;
                r.b_varchar()?;
                let n = r.u16()?;
                r.utf16(n as usize)?;
            }
            // Kept as SQL Server keeps an xml value (what a SEND of it puts in the queue):
            // UTF-16LE with a byte-order mark.
            match read_plp(r)? {
                None => Ok(Sql::Null),
                Some(b) => {
                    let text = utf16_string(b.strip_prefix(&[0xFF, 0xFE]).unwrap_or(&b))?;
                    let mut kept = vec![0xFF, 0xFE];
                    kept.extend(text.encode_utf16().flat_map(u16::to_le_bytes));
                    Ok(Sql::VarBinary(kept))
                }
            }
        }
        other => Err(Malformed(format!("parameter type 0x{other:02X} is not supported by the emulator"))),
    }
}

/// The value of a decimal, float, money, date or time type: a length byte (0 for NULL)
/// and the bytes, or the bytes alone for a fixed-length type.
pub fn read_scalar(r: &mut Reader<'_>, scalar: Scalar, fixed: bool) -> R<Sql> {
    let n = if fixed { scalar.max_len() } else { usize::from(r.u8()?) };
    if n == 0 {
        return Ok(Sql::Null);
    }
    let data = r.bytes(n)?.to_vec();
    scalar.check(&data)?;
    Ok(Sql::Typed(scalar, data))
}

pub(super) fn read_plp(r: &mut Reader<'_>) -> R<Option<Vec<u8>>> {
    let total = r.u64()?;
    if total == u64::MAX {
        return Ok(None);
    }
    let mut out = Vec::new();
    loop {
        let n = r.u32()? as usize;
        if n == 0 {
            return Ok(Some(out));
        }
        out.extend_from_slice(r.bytes(n)?);
    }
}
