//! The emulator's server side of MS-TDS 7.4: packet framing (2.2.3.1), PRELOGIN
//! (2.2.6.5), LOGIN7 (2.2.6.4), the requests it reads (SQL batch 2.2.6.7, RPC
//! 2.2.6.6, transaction manager 2.2.6.9) and the tokens it writes (COLMETADATA,
//! ROW, DONE, DONEPROC, ERROR, ENVCHANGE, LOGINACK; 2.2.7). tiberius decodes only what
//! a client receives, so this is the mirror image, written from the specification and
//! checked against tiberius as the client.

//!
//! Layout, by what is on the wire: the framing, the payload cursor and the string
//! helpers here; `login` (PRELOGIN and LOGIN7), `requests` (SQL batch, RPC and its
//! typed values, transaction manager), `scalar` (the decimal, float, money and date and
//! time values carried as they came) and `tokens` (the response's token stream).

mod decode;
mod login;
mod requests;
mod scalar;
#[cfg(test)]
mod tests;
mod tokens;

pub use decode::*;
pub use login::*;
pub use requests::*;
pub use scalar::*;
pub use tokens::*;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

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
