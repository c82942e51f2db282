//! `sbworker dead-letter`: the request a dead letter stands for (read from its body with
//! the contract's decoder, the same on both back ends), and its body pretty-printed.

use quick_xml::events::Event;
use quick_xml::{Reader, Writer};

use super::{Letter, RequestKey};
use crate::contract::{self, Limits};

/// The key of a dead-lettered Vraag (None for another message type, or a body the
/// decoder refuses).
pub fn request_key(l: &Letter) -> Option<RequestKey> {
    if l.message_type != contract::message_types::VRAAG {
        return None;
    }
    let v = contract::decode_vraag(l.body.as_deref()?, &Limits::default()).ok()?;
    Some(RequestKey {
        vraag_id: v.id,
        dienstverband_id: v.dienstverband.id,
        periode_id: v.periode.id,
        versie: v.versie,
    })
}

/// "dienstverband/periode v versie" for a Vraag, "-" otherwise.
pub fn key_text(l: &Letter) -> String {
    request_key(l).map_or_else(|| "-".into(), |k| format!("{}/{} v{}", k.dienstverband_id, k.periode_id, k.versie))
}

/// The body as text: UTF-8, or UTF-16 after a byte-order mark or with a zero byte in
/// its first character (as SQL Server reads xml).
pub fn body_text(body: &[u8]) -> String {
    let utf16 = |le: bool, b: &[u8]| {
        let units: Vec<u16> = b
            .chunks_exact(2)
            .map(|c| if le { u16::from_le_bytes([c[0], c[1]]) } else { u16::from_be_bytes([c[0], c[1]]) })
            .collect();
        String::from_utf16_lossy(&units)
    };
    match body {
        [0xFF, 0xFE, rest @ ..] => utf16(true, rest),
        [0xFE, 0xFF, rest @ ..] => utf16(false, rest),
        [_, 0, ..] => utf16(true, body),
        [0, _, ..] => utf16(false, body),
        [0xEF, 0xBB, 0xBF, rest @ ..] => String::from_utf8_lossy(rest).into_owned(),
        _ => String::from_utf8_lossy(body).into_owned(),
    }
}

/// The body indented for reading; the text as it is when it is not well-formed XML.
pub fn pretty(body: &[u8]) -> String {
    let text = body_text(body);
    let mut reader = Reader::from_str(&text);
    reader.config_mut().trim_text(true);
    let mut writer = Writer::new_with_indent(Vec::new(), b' ', 2);
    loop {
        match reader.read_event() {
            Ok(Event::Eof) => break,
            Ok(e) => {
                if writer.write_event(e).is_err() {
                    return text;
                }
            }
            Err(_) => return text,
        }
    }
    String::from_utf8(writer.into_inner()).unwrap_or(text)
}
