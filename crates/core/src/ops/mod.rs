//! What an operator runs against a live installation, on either back end:
//! `sbworker status` ([`status`]), `sbworker dead-letter` ([`dead_letter`]) and the web
//! page's overview ([`page`]), through
//! one seam, [`Backend`]: [`postgres`] implements it with the PostgreSQL broker's
//! functions (`007_operations.sql`), [`mssql`] with SQL Server's procedures
//! (`broker/mssql/06_operations.sql`), which return the same shapes, and
//! [`crate::broker::Database`] dispatches to them. Times travel as ISO 8601 text (UTC).

pub mod dead_letter;
pub mod mssql;
pub mod page;
pub mod postgres;
pub mod status;

use uuid::Uuid;

use crate::broker::{Database, on_database};
use crate::transport::BrokerError;

/// One dead letter as the broker keeps it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Letter {
    pub id: i64,
    pub queue: String,
    /// The service it was received at.
    pub service: String,
    /// The service that sent it (NULL for letters diverted before it was recorded).
    pub far_service: Option<String>,
    pub message_type: String,
    #[serde(skip)]
    pub body: Option<Vec<u8>>,
    pub attempts: i32,
    pub reason: String,
    pub dead_lettered_at: String,
    pub replays: i32,
    pub replayed_at: Option<String>,
    pub replayed_by: Option<String>,
    #[serde(serialize_with = "handle_text")]
    pub replay_handle: Option<Uuid>,
}

fn handle_text<S: serde::Serializer>(h: &Option<Uuid>, s: S) -> Result<S::Ok, S::Error> {
    match h {
        Some(h) => s.serialize_str(&h.to_string()),
        None => s.serialize_none(),
    }
}

/// The request a Vraag stands for, read from its body (for showing it: the broker reads
/// the key itself when it replays one).
#[derive(Debug, Clone, Copy)]
pub struct RequestKey {
    pub vraag_id: Uuid,
    pub dienstverband_id: i32,
    pub periode_id: i32,
    pub versie: i64,
}

/// Which dead letters a page lists or a bulk action takes: each `None` picks all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LetterFilter {
    /// The queue, as the letter names it.
    pub queue: Option<String>,
    /// A text the reason holds (PostgreSQL: in any case; SQL Server: as the column's
    /// collation compares).
    pub reason: Option<String>,
    /// Whether the letter was sent again.
    pub replayed: Option<bool>,
    /// One letter, by its id.
    pub id: Option<i64>,
}

impl LetterFilter {
    /// The filter in words, for a confirmation and the action log.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(id) = self.id {
            parts.push(format!("dead letter {id}"));
        }
        if let Some(q) = &self.queue {
            parts.push(format!("queue {q}"));
        }
        if let Some(r) = &self.reason {
            parts.push(format!("reason holds \"{r}\""));
        }
        match self.replayed {
            Some(true) => parts.push("replayed".into()),
            Some(false) => parts.push("not replayed".into()),
            None => {}
        }
        if parts.is_empty() { "every dead letter".into() } else { parts.join(", ") }
    }
}

/// What a filter picks: how many letters, the highest id, and the sum of the ids (which
/// tells the confirmed set from another of the same count).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub letters: i64,
    pub last_id: Option<i64>,
    pub id_sum: i64,
}

/// One row of the action log (`sbworker.action_log`): what a person did from the page.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Action {
    pub id: i64,
    pub at: String,
    /// The database login that did it.
    pub who: String,
    pub action: String,
    pub detail: String,
    pub letters: i64,
}

/// Requests answered in one minute (the web page's plots).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Rate {
    /// Minutes back from now: 0 is the current minute.
    pub minutes_ago: i32,
    pub answered: i64,
    /// Of them, answered with a Fout.
    pub failed: i64,
    /// From the Vraag sent (the roster's commit) to its answer, median and 95th
    /// percentile, in ms.
    pub p50_ms: Option<i64>,
    pub p95_ms: Option<i64>,
}

/// What `status` and `dead-letter` need of a back end.
#[allow(async_fn_in_trait)]
pub trait Backend {
    /// The status document (JSON text), see [`status::Status`].
    async fn status_json(&mut self, recent_minutes: i32, stale_minutes: i32) -> Result<String, BrokerError>;
    /// Dead letters, newest first: those diverted at or after `since` (ISO 8601), at
    /// most `limit`.
    async fn dead_letters(&mut self, since: Option<&str>, limit: i32) -> Result<Vec<Letter>, BrokerError>;
    /// One dead letter.
    async fn dead_letter(&mut self, id: i64) -> Result<Option<Letter>, BrokerError>;
    /// Sends letter `id` again on a new dialog and marks it replayed by `by`; the new
    /// handle. With `unless_replayed`, an entry replayed already is left alone (`None`).
    async fn replay(&mut self, id: i64, by: &str, unless_replayed: bool) -> Result<Option<Uuid>, BrokerError>;
    /// Deletes one batch of letters diverted before `before` (ISO 8601); how many.
    async fn purge_batch(&mut self, before: &str, batch: i32) -> Result<i64, BrokerError>;
    /// The letters `filter` picks, newest first, none above `upto`, at most `limit`.
    async fn letter_page(
        &mut self,
        filter: &LetterFilter,
        upto: Option<i64>,
        limit: i32,
    ) -> Result<Vec<Letter>, BrokerError>;
    /// What `filter` picks at or below `upto`.
    async fn letter_count(&mut self, filter: &LetterFilter, upto: Option<i64>) -> Result<Tally, BrokerError>;
    /// Deletes the letters `filter` picks at or below `upto`, when they are still the
    /// `expected` letters (their count and the sum of their ids; otherwise an error, and
    /// nothing deleted); written to the action log with `detail`. How many.
    async fn purge_matching(
        &mut self,
        filter: &LetterFilter,
        upto: i64,
        expected: Tally,
        detail: &str,
    ) -> Result<i64, BrokerError>;
    /// Writes an action to the action log, as this connection's login.
    async fn note_action(&mut self, action: &str, detail: &str, letters: i64) -> Result<(), BrokerError>;
    /// The newest actions, at most `limit`.
    async fn actions(&mut self, limit: i32) -> Result<Vec<Action>, BrokerError>;
    /// Requests answered per minute over the last `minutes`, minutes without any left out.
    async fn rates(&mut self, minutes: i32) -> Result<Vec<Rate>, BrokerError>;
}

impl Backend for Database {
    async fn status_json(&mut self, recent_minutes: i32, stale_minutes: i32) -> Result<String, BrokerError> {
        on_database!(self, b => b.status_json(recent_minutes, stale_minutes).await)
    }
    async fn dead_letters(&mut self, since: Option<&str>, limit: i32) -> Result<Vec<Letter>, BrokerError> {
        on_database!(self, b => b.dead_letters(since, limit).await)
    }
    async fn dead_letter(&mut self, id: i64) -> Result<Option<Letter>, BrokerError> {
        on_database!(self, b => b.dead_letter(id).await)
    }
    async fn replay(&mut self, id: i64, by: &str, unless_replayed: bool) -> Result<Option<Uuid>, BrokerError> {
        on_database!(self, b => b.replay(id, by, unless_replayed).await)
    }
    async fn purge_batch(&mut self, before: &str, batch: i32) -> Result<i64, BrokerError> {
        on_database!(self, b => b.purge_batch(before, batch).await)
    }
    async fn letter_page(
        &mut self,
        filter: &LetterFilter,
        upto: Option<i64>,
        limit: i32,
    ) -> Result<Vec<Letter>, BrokerError> {
        on_database!(self, b => b.letter_page(filter, upto, limit).await)
    }
    async fn letter_count(&mut self, filter: &LetterFilter, upto: Option<i64>) -> Result<Tally, BrokerError> {
        on_database!(self, b => b.letter_count(filter, upto).await)
    }
    async fn purge_matching(
        &mut self,
        filter: &LetterFilter,
        upto: i64,
        expected: Tally,
        detail: &str,
    ) -> Result<i64, BrokerError> {
        on_database!(self, b => b.purge_matching(filter, upto, expected, detail).await)
    }
    async fn note_action(&mut self, action: &str, detail: &str, letters: i64) -> Result<(), BrokerError> {
        on_database!(self, b => b.note_action(action, detail, letters).await)
    }
    async fn actions(&mut self, limit: i32) -> Result<Vec<Action>, BrokerError> {
        on_database!(self, b => b.actions(limit).await)
    }
    async fn rates(&mut self, minutes: i32) -> Result<Vec<Rate>, BrokerError> {
        on_database!(self, b => b.rates(minutes).await)
    }
}

/// A Vraag diverted on the calculation side of a split PostgreSQL install (which begins
/// no dialogs): its key sent again from the roster side (`roster`), at the key's current
/// roster version (latest wins, so never an older one), and the letter marked replayed
/// here. `None` with `unless_replayed` when it was replayed already.
pub async fn replay_via_roster(
    db: &mut Database,
    roster: &tokio_postgres::Client,
    id: i64,
    by: &str,
    unless_replayed: bool,
) -> Result<Option<Uuid>, BrokerError> {
    let Database::Postgres(c) = db else {
        return Err(other("--roster is for a split PostgreSQL install"));
    };
    postgres::replay_via_roster(c, roster, id, by, unless_replayed).await
}

pub(crate) fn other(message: &str) -> BrokerError {
    BrokerError { kind: crate::transport::ErrorKind::Other, number: 0, message: message.into() }
}
