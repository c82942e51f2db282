//! SQL kept in `.sql` files with named sections (`-- name: NAME` above each
//! statement), so every statement can be read, reviewed and checked on its own; the
//! code includes the file with `include_str!` and takes statements by name.

use std::sync::OnceLock;

/// A `.sql` file of named statements.
pub struct SqlFile {
    path: &'static str,
    text: &'static str,
    parsed: OnceLock<Vec<(&'static str, &'static str)>>,
}

impl SqlFile {
    pub const fn new(path: &'static str, text: &'static str) -> Self {
        Self { path, text, parsed: OnceLock::new() }
    }

    /// Every (name, statement) of the file, in order.
    pub fn all(&self) -> &[(&'static str, &'static str)] {
        self.parsed.get_or_init(|| {
            self.text
                .split("-- name: ")
                .skip(1)
                .filter_map(|section| {
                    // A statement runs to its first semicolon; comments after it belong
                    // to the next section.
                    let (name, body) = section.split_once('\n')?;
                    Some((name.trim(), body.split(';').next()?.trim()))
                })
                .collect()
        })
    }

    /// The statement `name` (a bug if missing: unit tests read every name used).
    pub fn get(&self, name: &str) -> &'static str {
        self.all()
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| *s)
            .unwrap_or_else(|| panic!("no statement '{name}' in {}", self.path))
    }
}

/// The version stamp of a set of install scripts: the crate's version and a 64-bit
/// FNV-1a hash of their text, lines naming the stamp itself (`sbworker_version`) left
/// out. `sbworker selftest` compares what an install wrote with its own.
pub fn stamp(scripts: &[&str]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for script in scripts {
        for line in script.lines().filter(|l| !l.contains("sbworker_version")) {
            for b in line.bytes().chain([b'\n']) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    format!("{}+{h:016x}", env!("CARGO_PKG_VERSION"))
}
