//! `sbworker export` and `sbworker sweep` on SQL Server: the same claim, confirmation and
//! sweep as on PostgreSQL, through `Rekenserver.export_claim`, `Rekenserver.export_ack`
//! and `Rekenserver.sweep` (`broker/mssql/05_handoff.sql`) over the SQL Server
//! transport's connection (`broker/mssql/statements/handoff.sql`). The claim runs in a
//! transaction the caller commits once the batch is written, as on PostgreSQL.

use tiberius::Row as TdsRow;
use uuid::Uuid;

use super::export::{Batch, Mode, Row};
use super::sweep::{Options, Outcome};
use crate::broker::BrokerError;
use crate::broker::mssql::{Tds, error_of};
use crate::sql::statements::mssql_handoff as stmt;

async fn batch(c: &mut Tds, sql: &str) -> Result<(), BrokerError> {
    c.simple_query(sql).await.map_err(error_of)?.into_results().await.map_err(error_of)?;
    Ok(())
}

/// Opens the claim's transaction.
pub async fn begin(c: &mut Tds) -> Result<(), BrokerError> {
    batch(c, stmt::BEGIN.sql).await
}

/// Commits the claim: what it took is marked.
pub async fn commit(c: &mut Tds) -> Result<(), BrokerError> {
    batch(c, stmt::COMMIT.sql).await
}

/// Rolls the claim back: nothing is marked.
pub async fn rollback(c: &mut Tds) -> Result<(), BrokerError> {
    batch(c, stmt::ROLLBACK.sql).await
}

fn column<'a, T: tiberius::FromSql<'a>>(row: &'a TdsRow, i: usize, name: &str) -> Result<T, BrokerError> {
    row.try_get::<T, _>(i).map_err(error_of)?.ok_or_else(|| BrokerError {
        kind: crate::broker::ErrorKind::Other,
        number: 0,
        message: format!("Rekenserver.export_claim returned no {name}"),
    })
}

/// Claims the period's unexported results in the open transaction. A lease is given
/// in whole minutes (rounded up), as the procedure takes it.
pub async fn claim(c: &mut Tds, periode: i32, mode: Mode) -> Result<Batch, BrokerError> {
    let id = Uuid::new_v4();
    let minutes: i32 = match mode {
        Mode::Once => 15,
        Mode::Lease { seconds } => (seconds / 60.0).ceil().clamp(1.0, f64::from(i32::MAX)) as i32,
    };
    let found = c
        .query(stmt::CLAIM.sql, &[&periode, &mode.name(), &minutes, &id])
        .await
        .map_err(error_of)?
        .into_first_result()
        .await
        .map_err(error_of)?;
    let mut rows = Vec::with_capacity(found.len());
    for r in &found {
        rows.push(Row {
            dienstverband_id: column(r, 2, "dienstverband_id")?,
            periode_id: column(r, 3, "periode_id")?,
            versie: column(r, 4, "versie")?,
            kaart_soort: column(r, 5, "kaart_soort")?,
            loonfactor_code: column::<&str>(r, 6, "loonfactor_code")?.to_owned(),
            waarde: column::<&str>(r, 7, "waarde")?.to_owned(),
            // NULL: not a correction. An install older than the column cannot say, so it
            // is refused rather than exported with corrections unmarked.
            vervangt_versie: r.try_get::<i64, _>(8).map_err(|_| BrokerError {
                kind: crate::broker::ErrorKind::Other,
                number: 0,
                message: "Rekenserver.export_claim returned no vervangt_versie column: install this release's                           scripts (sbworker install --mssql) before exporting"
                    .into(),
            })?,
        });
    }
    Ok(Batch { id, periode_id: periode, mode, rows })
}

/// Confirms a leased batch; how many results it marked exported.
pub async fn ack(c: &mut Tds, batch: Uuid) -> Result<i64, BrokerError> {
    let row = c.query(stmt::ACK.sql, &[&batch]).await.map_err(error_of)?.into_row().await.map_err(error_of)?;
    Ok(row.and_then(|r| r.get::<i32, _>(0)).map_or(0, i64::from))
}

/// One run of `Rekenserver.sweep`. SQL Server ends dialogs past their LIFETIME itself, so
/// `expired` is always 0 here.
pub async fn sweep(c: &mut Tds, opts: Options) -> Result<Outcome, BrokerError> {
    let (fuse, batch, retention, delete) = (
        i32::try_from(opts.fuse).unwrap_or(i32::MAX),
        i32::try_from(opts.batch).unwrap_or(i32::MAX),
        opts.retention_days,
        i32::try_from(opts.delete_batch).unwrap_or(i32::MAX),
    );
    let row = c
        .query(stmt::SWEEP.sql, &[&fuse, &batch, &retention, &delete])
        .await
        .map_err(error_of)?
        .into_row()
        .await
        .map_err(error_of)?
        .ok_or_else(|| BrokerError {
            kind: crate::broker::ErrorKind::Other,
            number: 0,
            message: "Rekenserver.sweep returned no row".into(),
        })?;
    let n = |i: usize, name: &str| column::<i32>(&row, i, name).map(i64::from);
    if column::<bool>(&row, 0, "skipped")? {
        return Ok(Outcome::Skipped);
    }
    Ok(Outcome::Ran {
        expired: 0,
        lost: n(1, "lost")?,
        candidates: n(2, "candidates")?,
        sent: n(3, "sent")?,
        repaired: n(4, "repaired")?,
        fuse_reached: column::<bool>(&row, 5, "fuse_reached")?,
        deleted_log_rows: n(6, "deleted_log_rows")?,
        deleted_dead_letters: n(7, "deleted_dead_letters")?,
        // SQL Server keeps no evidence of stored versions yet.
        deleted_evidence: 0,
    })
}
