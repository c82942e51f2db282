//! `status` and `dead-letter` on SQL Server: the procedures of
//! `broker/mssql/06_operations.sql` (`broker/mssql/statements/operations.sql`), which
//! return the PostgreSQL functions' shapes.

use uuid::Uuid;

use super::{Action, Letter, LetterFilter, Rate, Tally, other};
use crate::broker::mssql::{Tds, error_of};
use crate::sql::statements::mssql_operations as ms;
use crate::transport::BrokerError;

impl super::Backend for Tds {
    async fn status_json(&mut self, recent_minutes: i32, stale_minutes: i32) -> Result<String, BrokerError> {
        let rows = rows(self, ms::STATUS_REPORT.sql, &[&recent_minutes, &stale_minutes]).await?;
        rows.first()
            .and_then(|r| r.get::<&str, _>(0).map(str::to_owned))
            .ok_or_else(|| other("sbworker.status_report returned no document"))
    }

    async fn dead_letters(&mut self, since: Option<&str>, limit: i32) -> Result<Vec<Letter>, BrokerError> {
        rows(self, ms::DEAD_LETTERS.sql, &[&since, &limit]).await?.iter().map(letter).collect()
    }

    async fn dead_letter(&mut self, id: i64) -> Result<Option<Letter>, BrokerError> {
        rows(self, ms::DEAD_LETTER.sql, &[&id]).await?.first().map(letter).transpose()
    }

    async fn replay(&mut self, id: i64, by: &str, unless_replayed: bool) -> Result<Option<Uuid>, BrokerError> {
        let rows = rows(self, ms::REPLAY.sql, &[&id, &by, &unless_replayed]).await?;
        let Some(row) = rows.first() else {
            return Err(other("sbworker.replay_dead_letter returned no row"));
        };
        Ok(row.get::<Uuid, _>(0))
    }

    async fn purge_batch(&mut self, before: &str, batch: i32) -> Result<i64, BrokerError> {
        let rows = rows(self, ms::PURGE.sql, &[&before, &batch]).await?;
        Ok(rows.first().and_then(|r| r.get::<i32, _>(0)).map_or(0, i64::from))
    }

    async fn letter_page(
        &mut self,
        f: &LetterFilter,
        upto: Option<i64>,
        limit: i32,
    ) -> Result<Vec<Letter>, BrokerError> {
        let (q, r) = (f.queue.as_deref(), f.reason.as_deref());
        rows(self, ms::DEAD_LETTER_PAGE.sql, &[&q, &r, &f.replayed, &upto, &limit, &f.id])
            .await?
            .iter()
            .map(letter)
            .collect()
    }

    async fn letter_count(&mut self, f: &LetterFilter, upto: Option<i64>) -> Result<Tally, BrokerError> {
        let (q, r) = (f.queue.as_deref(), f.reason.as_deref());
        let rows = rows(self, ms::DEAD_LETTER_COUNT.sql, &[&q, &r, &f.replayed, &upto, &f.id]).await?;
        let row = rows.first().ok_or_else(|| other("sbworker.dead_letter_count returned no row"))?;
        Ok(Tally {
            letters: row.get::<i64, _>(0).unwrap_or(0),
            last_id: row.get::<i64, _>(1),
            id_sum: row.get::<i64, _>(2).unwrap_or(0),
        })
    }

    async fn purge_matching(
        &mut self,
        f: &LetterFilter,
        upto: i64,
        expected: Tally,
        detail: &str,
    ) -> Result<i64, BrokerError> {
        let (q, r) = (f.queue.as_deref(), f.reason.as_deref());
        let (n, sum) = (expected.letters, expected.id_sum);
        let params: [&dyn tiberius::ToSql; 8] = [&q, &r, &f.replayed, &upto, &n, &detail, &f.id, &sum];
        let rows = rows(self, ms::PURGE_MATCHING.sql, &params).await?;
        rows.first()
            .and_then(|r| r.get::<i64, _>(0))
            .ok_or_else(|| other("sbworker.purge_dead_letters_matching returned no count"))
    }

    async fn note_action(&mut self, action: &str, detail: &str, letters: i64) -> Result<(), BrokerError> {
        self.execute(ms::NOTE_ACTION.sql, &[&action, &detail, &letters]).await.map_err(error_of)?;
        Ok(())
    }

    async fn actions(&mut self, limit: i32) -> Result<Vec<Action>, BrokerError> {
        let rows = rows(self, ms::ACTIONS.sql, &[&limit]).await?;
        rows.iter()
            .map(|r| {
                let text = |i: usize| r.get::<&str, _>(i).map(str::to_owned).unwrap_or_default();
                Ok(Action {
                    id: r.get::<i64, _>(0).ok_or_else(|| other("action without id"))?,
                    at: text(1),
                    who: text(2),
                    action: text(3),
                    detail: text(4),
                    letters: r.get::<i64, _>(5).unwrap_or(0),
                })
            })
            .collect()
    }

    async fn rates(&mut self, minutes: i32) -> Result<Vec<Rate>, BrokerError> {
        let rows = rows(self, ms::RATES.sql, &[&minutes]).await?;
        Ok(rows
            .iter()
            .map(|r| Rate {
                minutes_ago: r.get::<i32, _>(0).unwrap_or(0),
                answered: r.get::<i64, _>(1).unwrap_or(0),
                failed: r.get::<i64, _>(2).unwrap_or(0),
                p50_ms: r.get::<i64, _>(3),
                p95_ms: r.get::<i64, _>(4),
            })
            .collect())
    }
}

async fn rows(t: &mut Tds, sql: &str, params: &[&dyn tiberius::ToSql]) -> Result<Vec<tiberius::Row>, BrokerError> {
    t.query(sql, params).await.map_err(error_of)?.into_first_result().await.map_err(error_of)
}

fn letter(r: &tiberius::Row) -> Result<Letter, BrokerError> {
    let text = |i: usize| r.get::<&str, _>(i).map(str::to_owned);
    let need = |i: usize, what: &str| text(i).ok_or_else(|| other(&format!("dead letter without {what}")));
    Ok(Letter {
        id: r.get::<i64, _>(0).ok_or_else(|| other("dead letter without id"))?,
        queue: need(1, "queue")?,
        service: need(2, "service")?,
        far_service: text(3),
        message_type: need(4, "message type")?,
        body: r.get::<&[u8], _>(5).map(<[u8]>::to_vec),
        attempts: r.get::<i32, _>(6).unwrap_or(0),
        reason: need(7, "reason")?,
        dead_lettered_at: need(8, "time")?,
        replays: r.get::<i32, _>(9).unwrap_or(0),
        replayed_at: text(10),
        replayed_by: text(11),
        replay_handle: r.get::<Uuid, _>(12),
    })
}
