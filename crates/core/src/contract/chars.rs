//! The characters XML 1.0 allows (its `Char` production), for both directions: the
//! decoder looks for the first one a body holds that XML does not allow, the encoder
//! and the Fout replace any they are given, so that what is written always parses.
//!
//! `Char ::= #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]`.
//! A Rust `str` holds no surrogates, so in one the characters left out are the C0
//! controls but tab, LF and CR (bytes 0x00 to 0x1F) and U+FFFE and U+FFFF (the UTF-8
//! sequences EF BF BE and EF BF BF). Every other byte of UTF-8 is allowed.

/// Whether XML 1.0 allows `c` in a document (as itself or as a character reference).
pub fn is_xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFF}')
}

/// A byte that may begin a character XML does not allow: a control other than tab, LF
/// and CR, or 0xEF (the lead byte of U+F000 to U+FFFF, which are allowed but for the
/// last two). Written without short-circuits so that a loop over it vectorises;
/// `b | 4 == 13` holds for tab (9) and CR (13) and no other byte.
#[inline(always)]
fn suspect(b: u8) -> bool {
    ((b < 0x20) & ((b | 4) != 13) & (b != b'\n')) | (b == 0xEF)
}

/// Whether the character at byte `i` (where `suspect` held) is one XML does not allow.
#[inline]
fn forbidden_at(b: &[u8], i: usize) -> bool {
    b[i] != 0xEF || (b.get(i + 1) == Some(&0xBF) && matches!(b.get(i + 2), Some(0xBE | 0xBF)))
}

/// The byte offset of the first character of `s` that XML 1.0 does not allow.
///
/// The hot path of the decoder runs this over every body: it tests 64 bytes at a time
/// for a suspect byte (branch-free, so the compiler vectorises it) and looks closer
/// only at a block that has one; a body without controls or 0xEF is one quick pass
/// (about a third of a microsecond for the 7 kB month of `benches/codec.rs`).
pub fn first_forbidden(s: &str) -> Option<usize> {
    const BLOCK: usize = 64;
    let b = s.as_bytes();
    let mut base = 0;
    for block in b.chunks_exact(BLOCK) {
        let mut any = 0u8;
        for &c in block {
            any |= u8::from(suspect(c));
        }
        if any != 0 {
            if let Some(i) = (base..base + BLOCK).find(|&i| suspect(b[i]) && forbidden_at(b, i)) {
                return Some(i);
            }
        }
        base += BLOCK;
    }
    (base..b.len()).find(|&i| suspect(b[i]) && forbidden_at(b, i))
}

/// `U+0001`: how an error message names a character (never the character itself).
pub fn describe(c: char) -> String {
    format!("U+{:04X}", u32::from(c))
}

/// Appends what stands in for a character XML does not allow: its Rust escape,
/// e.g. `\u{1}`, so the reader still sees which character it was.
pub fn push_replacement(out: &mut String, c: char) {
    out.extend(c.escape_unicode());
}

/// `s` with every character XML does not allow replaced (see [`push_replacement`]);
/// `s` itself when there is none, which is the usual case.
pub fn xml_safe(s: String) -> String {
    if first_forbidden(&s).is_none() {
        return s;
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if is_xml_char(c) {
            out.push(c);
        } else {
            push_replacement(&mut out, c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scan_agrees_with_the_char_production() {
        // Every forbidden character a str can hold, at every offset around a block edge.
        let forbidden: Vec<char> =
            (0u32..0x20).chain([0xFFFE, 0xFFFF]).filter_map(char::from_u32).filter(|c| !is_xml_char(*c)).collect();
        assert_eq!(forbidden.len(), 31);
        for c in forbidden {
            for at in [0usize, 1, 31, 32, 62, 63, 64, 65, 127, 128, 130] {
                let s = format!("{}{c}{}", "a".repeat(at), "b".repeat(70));
                assert_eq!(first_forbidden(&s), Some(at), "{} at {at}", describe(c));
            }
        }
        // Allowed neighbours, alone and in blocks full of them.
        let allowed = "\t\n\r \u{7F}\u{85}\u{D7FF}\u{E000}\u{EFFF}\u{F000}\u{FFFD}\u{FEFF}\u{10000}\u{10FFFF}€é";
        assert!(allowed.chars().all(is_xml_char));
        assert_eq!(first_forbidden(allowed), None);
        assert_eq!(first_forbidden(&allowed.repeat(20)), None);
        assert_eq!(first_forbidden(""), None);
        // Each character of the first planes (and the last), alone: the scan and the
        // production agree.
        for c in (0u32..0x1_1000).chain(0x10_F000..=0x10_FFFF).filter_map(char::from_u32) {
            let mut buf = [0u8; 4];
            assert_eq!(first_forbidden(c.encode_utf8(&mut buf)).is_some(), !is_xml_char(c), "{}", describe(c));
        }
    }

    #[test]
    fn replacement_names_the_character() {
        assert_eq!(xml_safe("a\u{1}b\u{FFFF}c\0".to_owned()), "a\\u{1}b\\u{ffff}c\\u{0}");
        assert_eq!(xml_safe("gewoon € tekst\n".to_owned()), "gewoon € tekst\n");
        assert_eq!(describe('\u{1}'), "U+0001");
        assert_eq!(describe('\u{FFFE}'), "U+FFFE");
    }
}
