//! PRELOGIN (2.2.6.5) and LOGIN7 (2.2.6.4): what a client sends to begin, read and (for
//! the tests' own client side) written.

use super::{Malformed, R, utf16_string};

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
    prelogin_response_with(ENCRYPT_NOT_SUP)
}

/// PRELOGIN's ENCRYPTION values (2.2.6.5).
pub const ENCRYPT_OFF: u8 = 0x00;
pub const ENCRYPT_ON: u8 = 0x01;
pub const ENCRYPT_NOT_SUP: u8 = 0x02;

/// The server's PRELOGIN answer with this ENCRYPTION value.
pub fn prelogin_response_with(encryption: u8) -> Vec<u8> {
    prelogin_options(&[(0x00, &[16, 0, 0x10, 0x00, 0, 0]), (0x01, &[encryption]), (0x02, &[0x00]), (0x04, &[0x00])])
}

/// A PRELOGIN payload (2.2.6.5): the option table (token, offset, length), then the data.
pub(super) fn prelogin_options(options: &[(u8, &[u8])]) -> Vec<u8> {
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
