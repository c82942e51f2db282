//! Where results leave the system and the housekeeping around it:
//! [`export`] claims a period's unexported results for payroll in one statement (mode
//! once: at-most-once; mode lease: at-least-once with confirmation), and [`sweep`]
//! sends the keys whose roster is newer than their result, under a lock, a fuse and a
//! run log with retention, and [`recompute`] computes chosen keys again after a change no
//! roster edit makes, and [`evidence`] explains a stored result from what it kept;
//! [`keys`] finds keys and reads a key's calculation log, and [`runs`] the run log and
//! the export batches, for the web page.
//!
//! The commands reach a back end through one seam, [`Backend`]: [`postgres`] implements
//! it for a PostgreSQL client (`broker/postgres/statements/handoff.sql`), [`mssql`] for a
//! SQL Server one (the procedures of `broker/mssql/04_roster.sql`, `03_results.sql` and
//! `05_handoff.sql`), and [`crate::broker::Database`] dispatches to them. The
//! implementations live here rather than under `broker/`: they speak the hand-off's
//! types, and the broker layer sits below this one. `tests/conformance_handoff.rs` runs
//! the same scenarios on both.

pub mod evidence;
pub mod export;
pub mod keys;
pub mod mssql;
pub mod postgres;
pub mod recompute;
pub mod runs;
pub mod sweep;

use uuid::Uuid;

use crate::broker::{BrokerError, Database, on_database};

/// The statements (`broker/postgres/statements/handoff.sql`).
use crate::sql::statements::postgres_handoff as stmt;

/// What the hand-off and the housekeeping need of a back end. A recompute's steps are
/// [`recompute::Backend`]'s. One connection per command: the locks (sweep, recompute)
/// and the claim's transaction belong to the session.
#[allow(async_fn_in_trait)]
pub trait Backend: recompute::Backend<Error = BrokerError> {
    /// Opens a transaction and claims the period's unexported results in it. The caller
    /// writes them, then [`commit_claim`](Self::commit_claim)s (what it took is marked)
    /// or [`rollback_claim`](Self::rollback_claim)s (nothing is). A failed claim is
    /// rolled back here.
    async fn claim(&mut self, periode: i32, mode: export::Mode) -> Result<export::Batch, BrokerError>;
    async fn commit_claim(&mut self) -> Result<(), BrokerError>;
    async fn rollback_claim(&mut self) -> Result<(), BrokerError>;
    /// Confirms a leased batch; how many results it confirmed (0: unknown, confirmed
    /// already, or claimed again after its lease passed).
    async fn ack(&mut self, batch: Uuid) -> Result<i64, BrokerError>;
    /// One sweep run (the roster side).
    async fn sweep(&mut self, opts: sweep::Options) -> Result<sweep::Outcome, BrokerError>;
    /// The calculation side's sweep: ends the dialogs past their LIFETIME; how many.
    /// SQL Server ends them itself (0).
    async fn expire_only(&mut self) -> Result<i64, BrokerError>;
    /// A key's stored versions with their evidence, oldest first.
    async fn versions(&mut self, dv: i32, periode: i32) -> Result<Vec<evidence::Version>, BrokerError>;
    /// The keys `search` picks, in key order, after the key `after`, at most `limit`.
    async fn search_keys(
        &mut self,
        search: &keys::KeySearch,
        after: Option<(i32, i32)>,
        limit: i32,
    ) -> Result<Vec<keys::KeyRow>, BrokerError>;
    /// Every Vraag sent for a key that the calculation log still holds, oldest first.
    async fn timeline(&mut self, dv: i32, periode: i32) -> Result<Vec<keys::Sent>, BrokerError>;
    /// The newest sweeps and recomputes, at most `limit`.
    async fn runs(&mut self, limit: i32) -> Result<Vec<runs::Run>, BrokerError>;
    /// The newest export batches, at most `limit`.
    async fn export_batches(&mut self, limit: i32) -> Result<Vec<runs::ExportBatch>, BrokerError>;
}

impl Backend for Database {
    async fn claim(&mut self, periode: i32, mode: export::Mode) -> Result<export::Batch, BrokerError> {
        on_database!(self, b => b.claim(periode, mode).await)
    }
    async fn commit_claim(&mut self) -> Result<(), BrokerError> {
        on_database!(self, b => b.commit_claim().await)
    }
    async fn rollback_claim(&mut self) -> Result<(), BrokerError> {
        on_database!(self, b => b.rollback_claim().await)
    }
    async fn ack(&mut self, batch: Uuid) -> Result<i64, BrokerError> {
        on_database!(self, b => b.ack(batch).await)
    }
    async fn sweep(&mut self, opts: sweep::Options) -> Result<sweep::Outcome, BrokerError> {
        on_database!(self, b => Backend::sweep(b, opts).await)
    }
    async fn expire_only(&mut self) -> Result<i64, BrokerError> {
        on_database!(self, b => b.expire_only().await)
    }
    async fn versions(&mut self, dv: i32, periode: i32) -> Result<Vec<evidence::Version>, BrokerError> {
        on_database!(self, b => b.versions(dv, periode).await)
    }
    async fn search_keys(
        &mut self,
        search: &keys::KeySearch,
        after: Option<(i32, i32)>,
        limit: i32,
    ) -> Result<Vec<keys::KeyRow>, BrokerError> {
        on_database!(self, b => b.search_keys(search, after, limit).await)
    }
    async fn timeline(&mut self, dv: i32, periode: i32) -> Result<Vec<keys::Sent>, BrokerError> {
        on_database!(self, b => b.timeline(dv, periode).await)
    }
    async fn runs(&mut self, limit: i32) -> Result<Vec<runs::Run>, BrokerError> {
        on_database!(self, b => b.runs(limit).await)
    }
    async fn export_batches(&mut self, limit: i32) -> Result<Vec<runs::ExportBatch>, BrokerError> {
        on_database!(self, b => b.export_batches(limit).await)
    }
}

impl recompute::Backend for Database {
    type Error = BrokerError;

    async fn begin(&mut self) -> Result<Option<i64>, BrokerError> {
        on_database!(self, b => recompute::Backend::begin(b).await)
    }
    async fn progress(&mut self, run: i64, keys: i64, sent: i64) -> Result<(), BrokerError> {
        on_database!(self, b => b.progress(run, keys, sent).await)
    }
    async fn end(&mut self, run: i64, keys: i64, sent: i64, text: Option<String>) -> Result<(), BrokerError> {
        on_database!(self, b => b.end(run, keys, sent, text).await)
    }
    async fn page(
        &mut self,
        sel: &recompute::Selection,
        after: Option<(i32, i32)>,
        n: i64,
    ) -> Result<Vec<(i32, i32)>, BrokerError> {
        on_database!(self, b => b.page(sel, after, n).await)
    }
    async fn batch(&mut self, keys: &[(i32, i32)]) -> Result<i64, BrokerError> {
        on_database!(self, b => recompute::Backend::batch(b, keys).await)
    }
    fn transient(&self, e: &BrokerError) -> bool {
        match self {
            Database::Postgres(c) => c.transient(e),
            Database::Mssql(t) => t.transient(e),
        }
    }
    fn message(e: &BrokerError) -> String {
        e.message.clone()
    }
}
