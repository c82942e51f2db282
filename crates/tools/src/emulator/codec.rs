//! The emulator's server side of MS-TDS 7.4: packet framing (2.2.3.1), PRELOGIN
//! (2.2.6.5), LOGIN7 (2.2.6.4), the requests it reads (SQL batch 2.2.6.7, RPC
//! 2.2.6.6, transaction manager 2.2.6.9) and the tokens it writes (COLMETADATA,
//! ROW, DONE, DONEPROC, ERROR, ENVCHANGE, LOGINACK; 2.2.7). tiberius decodes only what
//! a client receives, so this is the mirror image, written from the specification and
//! checked against tiberius as the client.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use uuid::Uuid;

/// Packet types (2.2.3.1.1).
pub mod packet_type {
    pub const SQL_BATCH: u8 = 0x01;
    pub const RPC: u8 = 0x03;
    pub const TABULAR_RESULT: u8 = 0x04;
    pub const ATTENTION: u8 = 0x06;
    pub const TRANSACTION_MANAGER: u8 = 0x0E;
    pub const LOGIN7: u8 = 0x10;
    pub const PRELOGIN: u8 = 0x12;
}

/// Reads one message (all packets up to end-of-message): its type and payload.
pub async fn read_message<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Option<(u8, Vec<u8>)>> {
    let mut payload = Vec::new();
    loop {
        let mut header = [0u8; 8];
        match r.read_exact(&mut header).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && payload.is_empty() => return Ok(None),
            Err(e) => return Err(e),
        }
        let ty = header[0];
        let len = u16::from_be_bytes([header[2], header[3]]) as usize;
        if len < 8 {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "TDS packet shorter than its header"));
        }
        let start = payload.len();
        payload.resize(start + len - 8, 0);
        r.read_exact(&mut payload[start..]).await?;
        if header[1] & 0x01 != 0 {
            return Ok(Some((ty, payload)));
        }
        if payload.len() > 64 << 20 {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "TDS message over 64 MiB"));
        }
    }
}

/// Writes `payload` as a tabular-result message, in packets of at most `packet_size`.
pub async fn write_message<W: AsyncWrite + Unpin>(
    w: &mut W,
    ty: u8,
    payload: &[u8],
    packet_size: usize,
) -> std::io::Result<()> {
    let body = packet_size.max(512) - 8;
    let chunks: Vec<&[u8]> = if payload.is_empty() { vec![&[][..]] } else { payload.chunks(body).collect() };
    let mut out = Vec::with_capacity(payload.len() + 8 * chunks.len());
    for (i, chunk) in chunks.iter().enumerate() {
        let last = i + 1 == chunks.len();
        out.push(ty);
        out.push(if last { 0x01 } else { 0x00 });
        out.extend_from_slice(&((chunk.len() + 8) as u16).to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        out.push((i + 1) as u8);
        out.push(0);
        out.extend_from_slice(chunk);
    }
    w.write_all(&out).await?;
    w.flush().await
}

/// A cursor over a request's payload.
pub struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

/// What a request's bytes do not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed TDS request: {0}")]
pub struct Malformed(pub String);

type R<T> = Result<T, Malformed>;

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, at: 0 }
    }

    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.at.min(self.buf.len())..]
    }

    pub fn bytes(&mut self, n: usize) -> R<&'a [u8]> {
        let end =
            self.at.checked_add(n).filter(|e| *e <= self.buf.len()).ok_or_else(|| Malformed("truncated".into()))?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }

    pub fn u8(&mut self) -> R<u8> {
        Ok(self.bytes(1)?[0])
    }

    pub fn u16(&mut self) -> R<u16> {
        Ok(u16::from_le_bytes(self.bytes(2)?.try_into().expect("2 bytes")))
    }

    pub fn u32(&mut self) -> R<u32> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into().expect("4 bytes")))
    }

    pub fn u64(&mut self) -> R<u64> {
        Ok(u64::from_le_bytes(self.bytes(8)?.try_into().expect("8 bytes")))
    }

    pub fn utf16(&mut self, chars: usize) -> R<String> {
        utf16_string(self.bytes(chars * 2)?)
    }

    /// B_VARCHAR: a byte of character count, then UTF-16.
    pub fn b_varchar(&mut self) -> R<String> {
        let n = self.u8()? as usize;
        self.utf16(n)
    }

    /// ALL_HEADERS (2.2.5.3): skipped; the transaction descriptor is not needed (one
    /// transaction per connection).
    pub fn skip_all_headers(&mut self) -> R<()> {
        let total = self.u32()? as usize;
        if total < 4 {
            return Err(Malformed("ALL_HEADERS shorter than its length".into()));
        }
        self.bytes(total - 4)?;
        Ok(())
    }
}

pub fn utf16_string(b: &[u8]) -> R<String> {
    let units: Vec<u16> = b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
    String::from_utf16(&units).map_err(|_| Malformed("invalid UTF-16".into()))
}

fn put_utf16(out: &mut Vec<u8>, s: &str) {
    for u in s.encode_utf16() {
        out.extend_from_slice(&u.to_le_bytes());
    }
}

fn put_b_varchar(out: &mut Vec<u8>, s: &str) {
    let s: String = s.chars().take(255).collect();
    out.push(s.encode_utf16().count() as u8);
    put_utf16(out, &s);
}

fn put_us_varchar(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.encode_utf16().count() as u16).to_le_bytes());
    put_utf16(out, s);
}

/// The client's PRELOGIN encryption option (0 off, 1 on, 2 not supported, 3 required).
pub fn prelogin_encryption(payload: &[u8]) -> Option<u8> {
    let mut i = 0;
    while i + 5 <= payload.len() && payload[i] != 0xFF {
        let (token, offset, len) = (
            payload[i],
            u16::from_be_bytes([payload[i + 1], payload[i + 2]]) as usize,
            u16::from_be_bytes([payload[i + 3], payload[i + 4]]),
        );
        if token == 0x01 && len >= 1 {
            return payload.get(offset).copied();
        }
        i += 5;
    }
    None
}

/// The server's PRELOGIN answer: version, encryption not supported, no instance, no MARS.
pub fn prelogin_response() -> Vec<u8> {
    prelogin_options(&[(0x00, &[16, 0, 0x10, 0x00, 0, 0]), (0x01, &[0x02]), (0x02, &[0x00]), (0x04, &[0x00])])
}

/// A PRELOGIN payload (2.2.6.5): the option table (token, offset, length), then the data.
fn prelogin_options(options: &[(u8, &[u8])]) -> Vec<u8> {
    let header_len = options.len() * 5 + 1;
    let (mut out, mut data) = (Vec::new(), Vec::new());
    for (token, d) in options {
        out.push(*token);
        out.extend_from_slice(&((header_len + data.len()) as u16).to_be_bytes());
        out.extend_from_slice(&(d.len() as u16).to_be_bytes());
        data.extend_from_slice(d);
    }
    out.push(0xFF);
    out.extend_from_slice(&data);
    out
}

/// A client's PRELOGIN (version and the encryption option): for tests and fuzzing of the
/// server, which reads the other side.
pub fn prelogin_request(encryption: u8) -> Vec<u8> {
    prelogin_options(&[(0x00, &[16, 0, 0x10, 0x00, 0, 0]), (0x01, &[encryption])])
}

/// A client's LOGIN7 with SQL authentication (2.2.6.4): for tests and fuzzing.
pub fn login7_request(user: &str, password: &str, database: &str) -> Vec<u8> {
    const FIXED: usize = 94;
    let utf16 = |s: &str| -> Vec<u8> { s.encode_utf16().flat_map(u16::to_le_bytes).collect() };
    let scrambled: Vec<u8> = utf16(password).iter().map(|b| b.rotate_left(4) ^ 0xA5).collect();
    // (offset of the pair in the fixed part, data): host, user, password, app, server,
    // extension, library, language, database.
    let fields: [(usize, Vec<u8>); 9] = [
        (36, utf16("test")),
        (40, utf16(user)),
        (44, scrambled),
        (48, utf16("sbworker-test")),
        (52, utf16("emulator")),
        (56, Vec::new()),
        (60, utf16("sbworker")),
        (64, Vec::new()),
        (68, utf16(database)),
    ];
    let mut fixed = vec![0u8; FIXED];
    fixed[4..8].copy_from_slice(&0x7400_0004u32.to_le_bytes());
    fixed[8..12].copy_from_slice(&4096u32.to_le_bytes());
    let mut data = Vec::new();
    for (at, d) in &fields {
        let off = (FIXED + data.len()) as u16;
        fixed[*at..at + 2].copy_from_slice(&off.to_le_bytes());
        fixed[at + 2..at + 4].copy_from_slice(&((d.len() / 2) as u16).to_le_bytes());
        data.extend_from_slice(d);
    }
    // The remaining pairs (SSPI, attach file, change password) are empty, at the end.
    for at in [78, 82, 86] {
        fixed[at..at + 2].copy_from_slice(&((FIXED + data.len()) as u16).to_le_bytes());
    }
    fixed.extend_from_slice(&data);
    let len = fixed.len() as u32;
    fixed[0..4].copy_from_slice(&len.to_le_bytes());
    fixed
}

/// What the emulator reads from LOGIN7 (2.2.6.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Login {
    pub user: String,
    pub password: String,
    pub database: String,
    pub packet_size: u32,
}

pub fn parse_login7(p: &[u8]) -> R<Login> {
    let field = |at: usize| -> R<String> {
        let off = u16::from_le_bytes(
            p.get(at..at + 2).ok_or_else(|| Malformed("LOGIN7 too short".into()))?.try_into().expect("2"),
        ) as usize;
        let len = u16::from_le_bytes(
            p.get(at + 2..at + 4).ok_or_else(|| Malformed("LOGIN7 too short".into()))?.try_into().expect("2"),
        ) as usize;
        let b = p.get(off..off + len * 2).ok_or_else(|| Malformed("LOGIN7 field out of bounds".into()))?;
        utf16_string(b)
    };
    let packet_size =
        u32::from_le_bytes(p.get(8..12).ok_or_else(|| Malformed("LOGIN7 too short".into()))?.try_into().expect("4"));
    let user = field(40)?;
    // The password is scrambled: each byte's nibbles swapped, then XOR 0xA5.
    let off =
        u16::from_le_bytes(p.get(44..46).ok_or_else(|| Malformed("LOGIN7 too short".into()))?.try_into().expect("2"))
            as usize;
    let len =
        u16::from_le_bytes(p.get(46..48).ok_or_else(|| Malformed("LOGIN7 too short".into()))?.try_into().expect("2"))
            as usize;
    let scrambled = p.get(off..off + len * 2).ok_or_else(|| Malformed("LOGIN7 password out of bounds".into()))?;
    let plain: Vec<u8> = scrambled.iter().map(|b| (b ^ 0xA5).rotate_left(4)).collect();
    let password = utf16_string(&plain)?;
    let database = field(68)?;
    Ok(Login { user, password, database, packet_size })
}

/// An RPC request (2.2.6.6): the procedure's name (`sp_executesql` for its id 10) and
/// the parameters, names lower case (`#i` for the i-th when unnamed).
pub fn parse_rpc(payload: &[u8]) -> R<(String, Vec<(String, Sql)>)> {
    let mut r = Reader::new(payload);
    r.skip_all_headers()?;
    let n = r.u16()?;
    let procedure = if n == 0xFFFF {
        match r.u16()? {
            10 => "sp_executesql".to_owned(),
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
    VarBinary(Vec<u8>),
    Guid(Uuid),
}

/// Column types the emulator returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColType {
    TinyInt,
    Int,
    BigInt,
    Bit,
    NVarChar,
    VarBinaryMax,
    Guid,
    /// `xml` (untyped): text, sent as UTF-16 in PLP chunks.
    Xml,
}

fn guid_wire(u: &Uuid) -> [u8; 16] {
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
    match ty {
        0x1F => Ok(Sql::Null),
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
                16 => {
                    let mut b: [u8; 16] = r.bytes(16)?.try_into().expect("16");
                    b.swap(0, 3);
                    b.swap(1, 2);
                    b.swap(4, 5);
                    b.swap(6, 7);
                    Ok(Sql::Guid(Uuid::from_bytes(b)))
                }
                n => Err(Malformed(format!("GUID of {n} bytes"))),
            }
        }
        0xE7 | 0xA5 => {
            let max = r.u16()?;
            if ty == 0xE7 {
                r.bytes(5)?; // collation
            }
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
            Ok(if ty == 0xE7 { Sql::NVarChar(utf16_string(&bytes)?) } else { Sql::VarBinary(bytes) })
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

fn read_plp(r: &mut Reader<'_>) -> R<Option<Vec<u8>>> {
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

/// A PLP value in one chunk (2.2.5.2.3).
fn put_plp(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u64).to_le_bytes());
    if !b.is_empty() {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    }
    out.extend_from_slice(&0u32.to_le_bytes());
}

/// The token stream of a response, written in order.
#[derive(Default)]
pub struct Tokens {
    pub out: Vec<u8>,
}

pub mod done {
    pub const MORE: u16 = 0x0001;
    pub const ERROR: u16 = 0x0002;
    pub const COUNT: u16 = 0x0010;
    /// The acknowledgement of an attention (cancel) request.
    pub const ATTN: u16 = 0x0020;
}

impl Tokens {
    pub fn login_ack(&mut self) {
        let mut body = vec![0x01];
        body.extend_from_slice(&0x7400_0004u32.to_be_bytes());
        put_b_varchar(&mut body, "sbworker emulator");
        body.extend_from_slice(&[16, 0, 0, 0]);
        self.out.push(0xAD);
        self.out.extend_from_slice(&(body.len() as u16).to_le_bytes());
        self.out.extend_from_slice(&body);
    }

    /// ENVCHANGE with string values (database: type 1; packet size: type 4).
    pub fn env_change_text(&mut self, kind: u8, new: &str, old: &str) {
        let mut body = vec![kind];
        put_b_varchar(&mut body, new);
        put_b_varchar(&mut body, old);
        self.env(&body);
    }

    /// ENVCHANGE of a transaction: 8 begin (new descriptor), 9 commit and 10 rollback
    /// (old descriptor).
    pub fn env_change_tran(&mut self, kind: u8, descriptor: u64) {
        let mut body = vec![kind];
        if kind == 8 {
            body.push(8);
            body.extend_from_slice(&descriptor.to_le_bytes());
            body.push(0);
        } else {
            body.push(0);
            body.push(8);
            body.extend_from_slice(&descriptor.to_le_bytes());
        }
        self.env(&body);
    }

    fn env(&mut self, body: &[u8]) {
        self.out.push(0xE3);
        self.out.extend_from_slice(&(body.len() as u16).to_le_bytes());
        self.out.extend_from_slice(body);
    }

    pub fn col_metadata(&mut self, cols: &[(&str, ColType)]) {
        self.out.push(0x81);
        self.out.extend_from_slice(&(cols.len() as u16).to_le_bytes());
        for (name, ty) in cols {
            self.out.extend_from_slice(&0u32.to_le_bytes());
            self.out.extend_from_slice(&0x0001u16.to_le_bytes()); // nullable
            match ty {
                ColType::TinyInt => self.out.extend_from_slice(&[0x26, 1]),
                ColType::Int => self.out.extend_from_slice(&[0x26, 4]),
                ColType::BigInt => self.out.extend_from_slice(&[0x26, 8]),
                ColType::Bit => self.out.extend_from_slice(&[0x68, 1]),
                ColType::Guid => self.out.extend_from_slice(&[0x24, 16]),
                ColType::NVarChar => {
                    self.out.push(0xE7);
                    self.out.extend_from_slice(&8000u16.to_le_bytes());
                    self.out.extend_from_slice(&[0x09, 0x04, 0xD0, 0x00, 0x34]); // Latin1_General_CI_AS
                }
                ColType::VarBinaryMax => {
                    self.out.push(0xA5);
                    self.out.extend_from_slice(&0xFFFFu16.to_le_bytes());
                }
                ColType::Xml => self.out.extend_from_slice(&[0xF1, 0x00]),
            }
            put_b_varchar(&mut self.out, name);
        }
    }

    pub fn row(&mut self, cols: &[ColType], values: &[Sql]) {
        self.out.push(0xD1);
        for (ty, v) in cols.iter().zip(values) {
            match (ty, v) {
                (ColType::VarBinaryMax | ColType::Xml, Sql::Null) => {
                    self.out.extend_from_slice(&u64::MAX.to_le_bytes())
                }
                (ColType::Xml, Sql::NVarChar(s)) => {
                    let mut b = Vec::new();
                    put_utf16(&mut b, s);
                    put_plp(&mut self.out, &b);
                }
                (ColType::NVarChar, Sql::Null) => self.out.extend_from_slice(&0xFFFFu16.to_le_bytes()),
                (_, Sql::Null) => self.out.push(0),
                (ColType::TinyInt, Sql::Int(i)) => self.out.extend_from_slice(&[1, *i as u8]),
                (_, Sql::Int(i)) => {
                    self.out.push(4);
                    self.out.extend_from_slice(&i.to_le_bytes());
                }
                (_, Sql::BigInt(i)) => {
                    self.out.push(8);
                    self.out.extend_from_slice(&i.to_le_bytes());
                }
                (_, Sql::Bit(b)) => {
                    self.out.push(1);
                    self.out.push(u8::from(*b));
                }
                (_, Sql::Guid(u)) => {
                    self.out.push(16);
                    self.out.extend_from_slice(&guid_wire(u));
                }
                (_, Sql::NVarChar(s)) => {
                    let mut b = Vec::new();
                    put_utf16(&mut b, s);
                    self.out.extend_from_slice(&(b.len() as u16).to_le_bytes());
                    self.out.extend_from_slice(&b);
                }
                (_, Sql::VarBinary(b)) => put_plp(&mut self.out, b),
            }
        }
    }

    /// DONE (0xFD), DONEPROC (0xFE) or DONEINPROC (0xFF).
    pub fn done(&mut self, token: u8, status: u16, count: u64) {
        self.out.push(token);
        self.out.extend_from_slice(&status.to_le_bytes());
        self.out.extend_from_slice(&0u16.to_le_bytes());
        self.out.extend_from_slice(&count.to_le_bytes());
    }

    /// ERROR (0xAA) as SQL Server writes it.
    pub fn error(&mut self, number: i32, state: u8, class: u8, message: &str) {
        let mut body = Vec::new();
        body.extend_from_slice(&number.to_le_bytes());
        body.push(state);
        body.push(class);
        put_us_varchar(&mut body, message);
        put_b_varchar(&mut body, "sbworker-emulator");
        put_b_varchar(&mut body, "");
        body.extend_from_slice(&1u32.to_le_bytes());
        self.out.push(0xAA);
        self.out.extend_from_slice(&(body.len() as u16).to_le_bytes());
        self.out.extend_from_slice(&body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guid_and_a_plp_value_read_back() {
        let u = Uuid::from_u128(0x0011_2233_4455_6677_8899_aabb_ccdd_eeff);
        let mut req = vec![0x24, 16, 16];
        req.extend_from_slice(&guid_wire(&u));
        req.extend_from_slice(&[0xA5, 0xFF, 0xFF]);
        req.extend_from_slice(&(3u64).to_le_bytes());
        req.extend_from_slice(&(3u32).to_le_bytes());
        req.extend_from_slice(b"abc");
        req.extend_from_slice(&0u32.to_le_bytes());
        req.push(0x1F);
        let mut r = Reader::new(&req);
        assert_eq!(read_value(&mut r).unwrap(), Sql::Guid(u));
        assert_eq!(read_value(&mut r).unwrap(), Sql::VarBinary(b"abc".to_vec()));
        assert_eq!(read_value(&mut r).unwrap(), Sql::Null);
        assert!(r.rest().is_empty());
    }

    #[test]
    fn a_login7_reads_back() {
        let l = parse_login7(&login7_request("ik", "geheim;\"", "payroll")).unwrap();
        assert_eq!((l.user.as_str(), l.password.as_str(), l.database.as_str()), ("ik", "geheim;\"", "payroll"));
        assert_eq!(prelogin_encryption(&prelogin_request(3)), Some(3));
    }

    #[test]
    fn the_prelogin_answer_says_no_encryption() {
        let p = prelogin_response();
        assert_eq!(prelogin_encryption(&p), Some(2));
    }
}
