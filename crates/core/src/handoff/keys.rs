//! Keys found and a key's calculation log, for the web page's payroll pages: the keys a
//! search picks (by dienstverband, periode, CAO, state, a text in the Fout), paged on
//! the server by key, each with its roster version, its stored result and its export,
//! and the Fout at its current version if any; and every Vraag sent for one key with its
//! outcome. Read on the roster side (`rekenserver.sleutels_zoek` and
//! `rekenserver.sleutel_tijdlijn`, `Rekenserver.` procedures of the same names on SQL
//! Server).

/// What a key search picks; each `None` picks all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeySearch {
    pub dienstverband: Option<i32>,
    pub periode: Option<i32>,
    /// The CAO's code.
    pub cao: Option<String>,
    pub staat: Option<Staat>,
    /// A text the Fout at the key's current version holds.
    pub reden: Option<String>,
}

/// A key's state, as the search filters it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Staat {
    /// Its stored result is of its current roster version.
    Opgeslagen,
    /// Its roster is newer than its stored result, and no Fout answered the newer version.
    Wacht,
    /// Its current version was answered with a Fout.
    Fout,
}

impl Staat {
    /// The word the SQL and the page use.
    pub fn word(self) -> &'static str {
        match self {
            Staat::Opgeslagen => "opgeslagen",
            Staat::Wacht => "wacht",
            Staat::Fout => "fout",
        }
    }

    pub fn from_word(w: &str) -> Option<Staat> {
        [Staat::Opgeslagen, Staat::Wacht, Staat::Fout].into_iter().find(|s| s.word() == w)
    }
}

/// One key found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRow {
    pub dienstverband: i32,
    pub periode: i32,
    pub cao: Option<String>,
    /// The roster's version, and when it changed (UTC).
    pub versie: i64,
    pub gewijzigd_op: String,
    /// The stored result's version and when it was stored, if one is.
    pub opgeslagen_versie: Option<i64>,
    pub opgeslagen_op: Option<String>,
    /// 0 waiting for export, 1 claimed, 2 exported.
    pub export_status: Option<i32>,
    /// The Fout at the current version.
    pub fout: Option<String>,
}

/// One Vraag sent for a key, with its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub versie: i64,
    pub verzonden_op: String,
    pub beantwoord_op: Option<String>,
    /// opgeslagen, verouderd, vervangen or fout; none while in flight.
    pub uitkomst: Option<String>,
    pub foutmelding: Option<String>,
}
