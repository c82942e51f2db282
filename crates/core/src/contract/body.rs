//! Message bodies as bytes: size limit and character encoding.
//!
//! Service Broker hands out `message_body` as varbinary. A body sent from an `xml` or
//! `nvarchar` value is UTF-16 (little-endian, usually with a byte-order mark); one from
//! `varchar` or from PostgreSQL is UTF-8. This module turns any of them into text.

use std::borrow::Cow;

use super::error::DecodeError;
use super::model::Reden;

/// Limits applied before and during decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest body accepted, in bytes as received (default 1 MiB).
    pub max_body_bytes: usize,
    /// Deepest element nesting accepted (default 16; the contract needs 5).
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_body_bytes: 1024 * 1024, max_depth: 16 }
    }
}

/// Decodes a body to text: UTF-8 (with or without BOM) or UTF-16 LE/BE (BOM, or
/// detected from a leading `<` and a zero byte).
pub fn body_text<'a>(bytes: &'a [u8], limits: &Limits) -> Result<Cow<'a, str>, DecodeError> {
    if bytes.len() > limits.max_body_bytes {
        return Err(DecodeError::new(
            Reden::BodyTooLarge,
            "",
            format!("the body is {} bytes, more than the limit of {} bytes", bytes.len(), limits.max_body_bytes),
        ));
    }
    match bytes {
        [0xEF, 0xBB, 0xBF, rest @ ..] => utf8(rest),
        [0xFF, 0xFE, rest @ ..] => utf16(rest, u16::from_le_bytes).map(Cow::Owned),
        [0xFE, 0xFF, rest @ ..] => utf16(rest, u16::from_be_bytes).map(Cow::Owned),
        [b'<', 0, ..] => utf16(bytes, u16::from_le_bytes).map(Cow::Owned),
        [0, b'<', ..] => utf16(bytes, u16::from_be_bytes).map(Cow::Owned),
        _ => utf8(bytes),
    }
}

fn utf8(bytes: &[u8]) -> Result<Cow<'_, str>, DecodeError> {
    std::str::from_utf8(bytes).map(Cow::Borrowed).map_err(|e| {
        DecodeError::new(
            Reden::BadEncoding,
            "",
            format!("the body is not valid UTF-8 (bad byte at offset {})", e.valid_up_to()),
        )
    })
}

fn utf16(bytes: &[u8], unit: fn([u8; 2]) -> u16) -> Result<String, DecodeError> {
    if bytes.len() % 2 != 0 {
        return Err(DecodeError::new(Reden::BadEncoding, "", "a UTF-16 body has an odd number of bytes"));
    }
    let units = bytes.chunks_exact(2).map(|c| unit([c[0], c[1]]));
    char::decode_utf16(units).collect::<Result<String, _>>().map_err(|e| {
        DecodeError::new(
            Reden::BadEncoding,
            "",
            format!("the body is not valid UTF-16 (unpaired surrogate {:#06x})", e.unpaired_surrogate()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc16(s: &str, bom: bool, le: bool) -> Vec<u8> {
        let mut out = Vec::new();
        if bom {
            out.extend(if le { [0xFF, 0xFE] } else { [0xFE, 0xFF] });
        }
        for u in s.encode_utf16() {
            out.extend(if le { u.to_le_bytes() } else { u.to_be_bytes() });
        }
        out
    }

    #[test]
    fn decodes_every_encoding() {
        let s = "<a>é€</a>";
        let l = Limits::default();
        assert_eq!(body_text(s.as_bytes(), &l).unwrap(), s);
        assert_eq!(body_text(&[b"\xEF\xBB\xBF".as_slice(), s.as_bytes()].concat(), &l).unwrap(), s);
        for (bom, le) in [(true, true), (true, false), (false, true), (false, false)] {
            assert_eq!(body_text(&enc16(s, bom, le), &l).unwrap(), s, "bom={bom} le={le}");
        }
    }

    #[test]
    fn rejects_bad_bytes_and_size() {
        let l = Limits { max_body_bytes: 4, ..Limits::default() };
        assert_eq!(body_text(b"12345", &l).unwrap_err().reden, Reden::BodyTooLarge);
        let l = Limits::default();
        assert_eq!(body_text(b"<a>\xFF</a>", &l).unwrap_err().reden, Reden::BadEncoding);
        assert_eq!(body_text(&[0xFF, 0xFE, 0x3C], &l).unwrap_err().reden, Reden::BadEncoding);
        assert_eq!(body_text(&[0xFF, 0xFE, 0x00, 0xD8], &l).unwrap_err().reden, Reden::BadEncoding);
    }
}
