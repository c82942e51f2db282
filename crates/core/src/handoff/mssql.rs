//! `sbworker export` and `sbworker sweep` on SQL Server: the same claim, confirmation and
//! sweep as on PostgreSQL, through `Rekenserver.export_claim`, `Rekenserver.export_ack`
//! and `Rekenserver.sweep` (`broker/mssql/05_handoff.sql`) over the SQL Server
//! transport's connection (`broker/mssql/statements/handoff.sql`). The claim runs in a
//! transaction the caller commits once the batch is written, as on PostgreSQL. The
//! hand-off's [`Backend`](super::Backend) and the recompute's
//! ([`super::recompute::Backend`]) on SQL Server, and the evidence `explain` reads
//! (`Rekenserver.bewijs`).

use tiberius::Row as TdsRow;
use uuid::Uuid;

use super::export::{Batch, Mode, Row};
use super::keys::{KeyRow, KeySearch, Sent};
use super::runs::{ExportBatch, Run};
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

/// The first result set of `sql`.
async fn first_result(c: &mut Tds, sql: &str, params: &[&dyn tiberius::ToSql]) -> Result<Vec<TdsRow>, BrokerError> {
    c.query(sql, params).await.map_err(error_of)?.into_first_result().await.map_err(error_of)
}

fn column<'a, T: tiberius::FromSql<'a>>(row: &'a TdsRow, i: usize, name: &str) -> Result<T, BrokerError> {
    row.try_get::<T, _>(i).map_err(error_of)?.ok_or_else(|| BrokerError {
        kind: crate::broker::ErrorKind::Other,
        number: 0,
        message: format!("the procedure returned no {name}"),
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
    let found = first_result(c, stmt::CLAIM.sql, &[&periode, &mode.name(), &minutes, &id]).await?;
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
                message: "Rekenserver.export_claim returned no vervangt_versie column: install this release's \
                          scripts (sbworker install --mssql) before exporting"
                    .into(),
            })?,
            // An install older than the column has no warnings to hand on.
            waarschuwingen: super::export::warnings_of(r.try_get::<&str, _>(9).ok().flatten()),
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
    let (fuse, batch, retention, delete, evidence) = (
        i32::try_from(opts.fuse).unwrap_or(i32::MAX),
        i32::try_from(opts.batch).unwrap_or(i32::MAX),
        opts.retention_days,
        i32::try_from(opts.delete_batch).unwrap_or(i32::MAX),
        opts.evidence_retention_months,
    );
    let row = c
        .query(stmt::SWEEP.sql, &[&fuse, &batch, &retention, &delete, &evidence])
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
        deleted_evidence: n(8, "deleted_evidence")?,
        // An install older than the column did not delete any.
        deleted_requests: row.try_get::<i32, _>(9).ok().flatten().map_or(0, i64::from),
    })
}

/// `sbworker recompute --mssql`: `Rekenserver.herberekening_begin`/`_einde` (the
/// application lock and the run log), `Rekenserver.herbereken_sleutels` and
/// `Rekenserver.herbereken` (`broker/mssql/04_roster.sql`, `05_handoff.sql`); the keys
/// travel as JSON arrays (OPENJSON on the server).
impl super::recompute::Backend for Tds {
    type Error = BrokerError;

    async fn begin(&mut self) -> Result<Option<i64>, BrokerError> {
        let row =
            self.query(stmt::RECOMPUTE_BEGIN.sql, &[]).await.map_err(error_of)?.into_row().await.map_err(error_of)?;
        Ok(row.and_then(|r| r.try_get::<i64, _>(0).ok().flatten()))
    }

    async fn progress(&mut self, run: i64, keys: i64, sent: i64) -> Result<(), BrokerError> {
        let clamp = |n: i64| i32::try_from(n).unwrap_or(i32::MAX);
        self.execute(stmt::RECOMPUTE_PROGRESS.sql, &[&run, &clamp(keys), &clamp(sent)]).await.map_err(error_of)?;
        Ok(())
    }

    async fn end(&mut self, run: i64, keys: i64, sent: i64, text: Option<String>) -> Result<(), BrokerError> {
        let clamp = |n: i64| i32::try_from(n).unwrap_or(i32::MAX);
        self.query(stmt::RECOMPUTE_END.sql, &[&run, &clamp(keys), &clamp(sent), &text.as_deref()])
            .await
            .map_err(error_of)?
            .into_results()
            .await
            .map_err(error_of)?;
        Ok(())
    }

    async fn page(
        &mut self,
        sel: &super::recompute::Selection,
        after: Option<(i32, i32)>,
        n: i64,
    ) -> Result<Vec<(i32, i32)>, BrokerError> {
        let periodes = (!sel.periodes.is_empty()).then(|| serde_json::to_string(&sel.periodes).unwrap_or_default());
        let named = (!sel.keys.is_empty()).then(|| keys_json(&sel.keys));
        let rows = first_result(
            self,
            stmt::RECOMPUTE_KEYS.sql,
            &[
                &periodes.as_deref(),
                &sel.cao.as_deref(),
                &sel.dienstverband_from,
                &sel.dienstverband_to,
                &after.map(|a| a.0),
                &after.map(|a| a.1),
                &i32::try_from(n).unwrap_or(i32::MAX),
                &named.as_deref(),
            ],
        )
        .await?;
        rows.iter()
            .map(|r| Ok((column::<i32>(r, 0, "dienstverband_id")?, column::<i32>(r, 1, "periode_id")?)))
            .collect()
    }

    async fn batch(&mut self, keys: &[(i32, i32)]) -> Result<i64, BrokerError> {
        begin(self).await?;
        let sent = async {
            let row = self
                .query(stmt::RECOMPUTE_BATCH.sql, &[&keys_json(keys)])
                .await
                .map_err(error_of)?
                .into_row()
                .await
                .map_err(error_of)?;
            let n = match row {
                Some(r) => column::<i32>(&r, 0, "verzonden")?,
                None => 0,
            };
            commit(self).await?;
            Ok(i64::from(n))
        }
        .await;
        if sent.is_err() {
            let _ = rollback(self).await;
        }
        sent
    }

    fn transient(&self, e: &BrokerError) -> bool {
        e.kind == crate::broker::ErrorKind::Retryable
    }

    fn message(e: &BrokerError) -> String {
        e.message.clone()
    }
}

/// Keys as the procedures read them: `[{"dv":1001,"p":202604},…]`.
fn keys_json(keys: &[(i32, i32)]) -> String {
    serde_json::Value::Array(keys.iter().map(|(dv, p)| serde_json::json!({ "dv": dv, "p": p })).collect()).to_string()
}

/// A key's stored versions with their evidence (`Rekenserver.bewijs`), oldest first; the
/// factors come as a JSON array of `{"c": code, "w": value as text}`.
pub async fn versions(c: &mut Tds, dv: i32, periode: i32) -> Result<Vec<super::evidence::Version>, BrokerError> {
    #[derive(serde::Deserialize)]
    struct Factor {
        c: String,
        w: String,
    }
    let rows = first_result(c, stmt::EVIDENCE.sql, &[&dv, &periode]).await?;
    let text = |r: &TdsRow, i: usize| r.try_get::<&str, _>(i).ok().flatten().map(str::to_owned);
    rows.iter()
        .map(|r| {
            let factoren = match text(r, 3) {
                None => Default::default(),
                Some(json) => serde_json::from_str::<Vec<Factor>>(&json)
                    .map_err(|e| BrokerError {
                        kind: crate::broker::ErrorKind::Other,
                        number: 0,
                        message: format!("Rekenserver.bewijs: the factors are not the JSON array it writes: {e}"),
                    })?
                    .into_iter()
                    .filter_map(|f| f.w.parse().ok().map(|w| (f.c, w)))
                    .collect(),
            };
            Ok(super::evidence::Version {
                versie: column::<i64>(r, 0, "versie")?,
                opgeslagen_op: text(r, 1).unwrap_or_default(),
                vraag: text(r, 2),
                factoren,
                rekenversie: text(r, 4),
                geexporteerd_op: text(r, 5),
            })
        })
        .collect()
}

impl super::Backend for Tds {
    async fn claim(&mut self, periode: i32, mode: Mode) -> Result<Batch, BrokerError> {
        begin(self).await?;
        match claim(self, periode, mode).await {
            Ok(b) => Ok(b),
            Err(e) => {
                let _ = rollback(self).await;
                Err(e)
            }
        }
    }

    async fn commit_claim(&mut self) -> Result<(), BrokerError> {
        commit(self).await
    }

    async fn rollback_claim(&mut self) -> Result<(), BrokerError> {
        rollback(self).await
    }

    async fn ack(&mut self, batch: Uuid) -> Result<i64, BrokerError> {
        ack(self, batch).await
    }

    async fn sweep(&mut self, opts: Options) -> Result<Outcome, BrokerError> {
        sweep(self, opts).await
    }

    /// SQL Server ends a dialog past its LIFETIME itself.
    async fn expire_only(&mut self) -> Result<i64, BrokerError> {
        Ok(0)
    }

    async fn versions(&mut self, dv: i32, periode: i32) -> Result<Vec<super::evidence::Version>, BrokerError> {
        versions(self, dv, periode).await
    }

    async fn search_keys(
        &mut self,
        k: &KeySearch,
        after: Option<(i32, i32)>,
        limit: i32,
    ) -> Result<Vec<KeyRow>, BrokerError> {
        let (na_dv, na_periode) = (after.map(|a| a.0), after.map(|a| a.1));
        let (cao, staat, reden) = (k.cao.as_deref(), k.staat.map(|s| s.word()), k.reden.as_deref());
        let rows = first_result(
            self,
            stmt::KEY_SEARCH.sql,
            &[&k.dienstverband, &k.periode, &cao, &staat, &reden, &na_dv, &na_periode, &limit],
        )
        .await?;
        let text = |r: &TdsRow, i: usize| r.get::<&str, _>(i).map(str::to_owned);
        rows.iter()
            .map(|r| {
                Ok(KeyRow {
                    dienstverband: column::<i32>(r, 0, "dienstverband_id")?,
                    periode: column::<i32>(r, 1, "periode_id")?,
                    cao: text(r, 2),
                    versie: column::<i64>(r, 3, "versie")?,
                    gewijzigd_op: text(r, 4).unwrap_or_default(),
                    opgeslagen_versie: r.get::<i64, _>(5),
                    opgeslagen_op: text(r, 6),
                    export_status: r.get::<i32, _>(7),
                    fout: text(r, 8),
                })
            })
            .collect()
    }

    async fn runs(&mut self, limit: i32) -> Result<Vec<Run>, BrokerError> {
        let rows = first_result(self, stmt::RUNS.sql, &[&limit]).await?;
        let text = |r: &TdsRow, i: usize| r.get::<&str, _>(i).map(str::to_owned);
        rows.iter()
            .map(|r| {
                Ok(Run {
                    id: column::<i64>(r, 0, "id")?,
                    stap: text(r, 1).unwrap_or_default(),
                    start: text(r, 2).unwrap_or_default(),
                    eind: text(r, 3),
                    ms: r.get::<i32, _>(4),
                    kandidaten: r.get::<i32, _>(5),
                    verzonden: r.get::<i32, _>(6),
                    verwijderd: r.get::<i32, _>(7),
                    fout: text(r, 8),
                })
            })
            .collect()
    }

    async fn export_batches(&mut self, limit: i32) -> Result<Vec<ExportBatch>, BrokerError> {
        let rows = first_result(self, stmt::EXPORT_BATCHES.sql, &[&limit]).await?;
        rows.iter()
            .map(|r| {
                Ok(ExportBatch {
                    batch: column::<Uuid>(r, 0, "export_batch")?.to_string(),
                    periode: r.get::<i32, _>(1).unwrap_or(0),
                    claimed_at: r.get::<&str, _>(2).map(str::to_owned),
                    results: r.get::<i64, _>(3).unwrap_or(0),
                    confirmed: r.get::<i64, _>(4).unwrap_or(0),
                })
            })
            .collect()
    }

    async fn timeline(&mut self, dv: i32, periode: i32) -> Result<Vec<Sent>, BrokerError> {
        let rows = first_result(self, stmt::KEY_TIMELINE.sql, &[&dv, &periode]).await?;
        let text = |r: &TdsRow, i: usize| r.get::<&str, _>(i).map(str::to_owned);
        rows.iter()
            .map(|r| {
                Ok(Sent {
                    versie: column::<i64>(r, 0, "versie")?,
                    verzonden_op: text(r, 1).unwrap_or_default(),
                    beantwoord_op: text(r, 2),
                    uitkomst: text(r, 3),
                    foutmelding: text(r, 4),
                })
            })
            .collect()
    }
}
