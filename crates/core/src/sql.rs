//! The SQL the code sends lives in `.sql` files under `broker/`: install scripts, and
//! statement files (`broker/*/statements/*.sql`) with named sections (`-- name: NAME`
//! above each statement), so every statement can be read, reviewed and checked on its
//! own. The build script turns each section into a constant of [`statements`]; a name
//! that does not exist is a compile error.

/// A named statement of a `.sql` file under `broker/*/statements/`, as the build script
/// turns it into a constant: `crate::sql::statements::postgres_session::RECEIVE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Named {
    /// Its name in the file (`-- name: receive`).
    pub name: &'static str,
    /// The statement.
    pub sql: &'static str,
}

/// The statements of every file under `broker/*/statements/`, one module per file.
pub mod statements {
    use super::Named as Statement;
    include!(concat!(env!("OUT_DIR"), "/statements.rs"));
}

/// The version stamp of a set of install scripts: the crate's version and a 64-bit
/// FNV-1a hash of their text, lines naming the stamp itself (`sbworker_version`) left
/// out. `sbworker selftest` compares what an install wrote with its own.
pub fn stamp(scripts: &[&str]) -> String {
    let text: Vec<u8> = scripts
        .iter()
        .flat_map(|s| s.lines())
        .filter(|l| !l.contains("sbworker_version"))
        .flat_map(|l| l.bytes().chain([b'\n']))
        .collect();
    format!("{}+{:016x}", env!("CARGO_PKG_VERSION"), fnv1a(&text))
}

/// The 64-bit FNV-1a hash of `bytes` (stable across builds and platforms).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}
