//! The hand-off's [`Backend`](super::Backend) on PostgreSQL: the claim, confirmation,
//! sweep and evidence of [`super::export`], [`super::sweep`] and [`super::evidence`]
//! (`broker/postgres/statements/handoff.sql`), and the recompute's steps
//! (`rekenserver.herbereken_sleutels` and `rekenserver.herbereken` of
//! `broker/postgres/004_roster.sql`, an advisory lock, `rekenserver.run_log`). Errors
//! are the broker's ([`crate::broker::postgres::error_of`]).

use tokio_postgres::Client;
use uuid::Uuid;

use super::evidence::{self, Version};
use super::export::{self, Batch, Mode};
use super::keys::{KeyRow, KeySearch, Sent};
use super::recompute::{Backend as RecomputeBackend, Selection};
use super::runs::{ExportBatch, Run};
use super::{stmt, sweep};
use crate::broker::BrokerError;
use crate::broker::ErrorKind;
use crate::broker::postgres::error_of;

impl super::Backend for Client {
    async fn claim(&mut self, periode: i32, mode: Mode) -> Result<Batch, BrokerError> {
        self.batch_execute(stmt::BEGIN.sql).await.map_err(error_of)?;
        match export::claim(self, periode, mode).await {
            Ok(batch) => Ok(batch),
            Err(e) => {
                let _ = self.batch_execute(stmt::ROLLBACK.sql).await;
                Err(error_of(e))
            }
        }
    }

    async fn commit_claim(&mut self) -> Result<(), BrokerError> {
        self.batch_execute(stmt::COMMIT.sql).await.map_err(error_of)
    }

    async fn rollback_claim(&mut self) -> Result<(), BrokerError> {
        self.batch_execute(stmt::ROLLBACK.sql).await.map_err(error_of)
    }

    async fn ack(&mut self, batch: Uuid) -> Result<i64, BrokerError> {
        export::ack(self, batch).await.map_err(error_of)
    }

    async fn sweep(&mut self, opts: sweep::Options) -> Result<sweep::Outcome, BrokerError> {
        sweep::run(self, opts).await.map_err(|e| {
            let inner = error_of(e.source);
            BrokerError { message: format!("sweep step {} failed: {}", e.step, inner.message), ..inner }
        })
    }

    async fn expire_only(&mut self) -> Result<i64, BrokerError> {
        let n: i32 = self.query_one(stmt::EXPIRE_ONLY.sql, &[]).await.map_err(error_of)?.get(0);
        Ok(i64::from(n))
    }

    async fn versions(&mut self, dv: i32, periode: i32) -> Result<Vec<Version>, BrokerError> {
        evidence::versions(self, dv, periode).await.map_err(error_of)
    }

    async fn search_keys(
        &mut self,
        k: &KeySearch,
        after: Option<(i32, i32)>,
        limit: i32,
    ) -> Result<Vec<KeyRow>, BrokerError> {
        let (na_dv, na_periode) = (after.map(|a| a.0), after.map(|a| a.1));
        let staat = k.staat.map(|s| s.word());
        let rows = self
            .query(
                stmt::KEY_SEARCH.sql,
                &[&k.dienstverband, &k.periode, &k.cao, &staat, &k.reden, &na_dv, &na_periode, &limit],
            )
            .await
            .map_err(error_of)?;
        Ok(rows
            .iter()
            .map(|r| KeyRow {
                dienstverband: r.get(0),
                periode: r.get(1),
                cao: r.get(2),
                versie: r.get(3),
                gewijzigd_op: r.get(4),
                opgeslagen_versie: r.get(5),
                opgeslagen_op: r.get(6),
                export_status: r.get(7),
                fout: r.get(8),
            })
            .collect())
    }

    async fn runs(&mut self, limit: i32) -> Result<Vec<Run>, BrokerError> {
        let rows = self.query(stmt::RUNS.sql, &[&limit]).await.map_err(error_of)?;
        Ok(rows
            .iter()
            .map(|r| Run {
                id: r.get(0),
                stap: r.get(1),
                start: r.get(2),
                eind: r.get(3),
                ms: r.get(4),
                kandidaten: r.get(5),
                verzonden: r.get(6),
                verwijderd: r.get(7),
                fout: r.get(8),
            })
            .collect())
    }

    async fn export_batches(&mut self, limit: i32) -> Result<Vec<ExportBatch>, BrokerError> {
        let rows = self.query(stmt::EXPORT_BATCHES.sql, &[&limit]).await.map_err(error_of)?;
        Ok(rows
            .iter()
            .map(|r| ExportBatch {
                batch: r.get(0),
                periode: r.get(1),
                claimed_at: r.get(2),
                results: r.get(3),
                confirmed: r.get(4),
            })
            .collect())
    }

    async fn timeline(&mut self, dv: i32, periode: i32) -> Result<Vec<Sent>, BrokerError> {
        let rows = self.query(stmt::KEY_TIMELINE.sql, &[&dv, &periode]).await.map_err(error_of)?;
        Ok(rows
            .iter()
            .map(|r| Sent {
                versie: r.get(0),
                verzonden_op: r.get(1),
                beantwoord_op: r.get(2),
                uitkomst: r.get(3),
                foutmelding: r.get(4),
            })
            .collect())
    }
}

/// PostgreSQL: `rekenserver.herbereken_sleutels` and `rekenserver.herbereken`
/// (`broker/postgres/004_roster.sql`), an advisory lock, `rekenserver.run_log`.
impl RecomputeBackend for Client {
    type Error = BrokerError;

    async fn begin(&mut self) -> Result<Option<i64>, Self::Error> {
        let locked: bool = self.query_one(stmt::RECOMPUTE_TRY_LOCK.sql, &[]).await.map_err(error_of)?.get(0);
        if !locked {
            return Ok(None);
        }
        match self.query_one(stmt::LOG_START.sql, &[&None::<i64>, &"herberekening"]).await {
            Ok(r) => Ok(Some(r.get(0))),
            Err(e) => {
                let _ = self.query_one(stmt::RECOMPUTE_UNLOCK.sql, &[]).await;
                Err(error_of(e))
            }
        }
    }

    async fn progress(&mut self, run: i64, keys: i64, sent: i64) -> Result<(), Self::Error> {
        let clamp = |n: i64| i32::try_from(n).unwrap_or(i32::MAX);
        self.execute(stmt::LOG_PROGRESS.sql, &[&run, &clamp(keys), &clamp(sent)]).await.map_err(error_of)?;
        Ok(())
    }

    async fn end(&mut self, run: i64, keys: i64, sent: i64, text: Option<String>) -> Result<(), Self::Error> {
        let clamp = |n: i64| Some(i32::try_from(n).unwrap_or(i32::MAX));
        let logged = self.execute(stmt::LOG_END.sql, &[&run, &clamp(keys), &clamp(sent), &None::<i32>, &text]).await;
        let unlocked = self.query_one(stmt::RECOMPUTE_UNLOCK.sql, &[]).await;
        logged.map_err(error_of)?;
        unlocked.map_err(error_of)?;
        Ok(())
    }

    async fn page(
        &mut self,
        sel: &Selection,
        after: Option<(i32, i32)>,
        n: i64,
    ) -> Result<Vec<(i32, i32)>, Self::Error> {
        // Named keys are recomputed only where they are known keys (a mistyped one is
        // not made a key).
        let (dvs, pers): (Vec<i32>, Vec<i32>) = sel.keys.iter().copied().unzip();
        let named = (!sel.keys.is_empty()).then_some((&dvs, &pers));
        let periodes = (!sel.periodes.is_empty()).then_some(&sel.periodes);
        let rows = self
            .query(
                stmt::RECOMPUTE_KEYS.sql,
                &[
                    &periodes,
                    &sel.cao,
                    &sel.dienstverband_from,
                    &sel.dienstverband_to,
                    &after.map(|a| a.0),
                    &after.map(|a| a.1),
                    &i32::try_from(n).unwrap_or(i32::MAX),
                    &named.map(|k| k.0),
                    &named.map(|k| k.1),
                ],
            )
            .await
            .map_err(error_of)?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    async fn batch(&mut self, keys: &[(i32, i32)]) -> Result<i64, Self::Error> {
        let (dvs, ps): (Vec<i32>, Vec<i32>) = keys.iter().copied().unzip();
        let tx = self.transaction().await.map_err(error_of)?;
        let n: i32 = tx.query_one(stmt::RECOMPUTE_BATCH.sql, &[&dvs, &ps]).await.map_err(error_of)?.get(0);
        tx.commit().await.map_err(error_of)?;
        Ok(i64::from(n))
    }

    /// Deadlock, serialization failure (40P01, 40001: the broker's 1205), and
    /// `rekenserver.herbereken` giving way to a planner's lock after 200 ms (55P03: its
    /// 1222). Not the broker's other retryable errors: a statement an operator cancelled
    /// (57014) stops the run, and so does a server out of resources.
    fn transient(&self, e: &Self::Error) -> bool {
        e.kind == ErrorKind::Retryable && matches!(e.number, 1205 | 1222)
    }

    fn message(e: &Self::Error) -> String {
        e.message.clone()
    }
}
