//! `status` and `dead-letter` on PostgreSQL: the broker's functions of
//! `broker/postgres/007_operations.sql` (`broker/postgres/statements/operations.sql`),
//! and a calculation side's diverted Vraag sent again from its roster side.

use tokio_postgres::Client;
use uuid::Uuid;

use super::{Action, Letter, LetterFilter, Rate, Tally, dead_letter, other};
use crate::broker::postgres::error_of;
use crate::sql::statements::postgres_operations as pg;
use crate::transport::{BrokerError, ErrorKind};

impl super::Backend for Client {
    async fn status_json(&mut self, recent_minutes: i32, stale_minutes: i32) -> Result<String, BrokerError> {
        let row = self.query_one(pg::STATUS_REPORT.sql, &[&recent_minutes, &stale_minutes]).await.map_err(error_of)?;
        Ok(row.get(0))
    }

    async fn dead_letters(&mut self, since: Option<&str>, limit: i32) -> Result<Vec<Letter>, BrokerError> {
        Ok(self.query(pg::DEAD_LETTERS.sql, &[&since, &limit]).await.map_err(error_of)?.iter().map(letter).collect())
    }

    async fn dead_letter(&mut self, id: i64) -> Result<Option<Letter>, BrokerError> {
        Ok(self.query(pg::DEAD_LETTER.sql, &[&id]).await.map_err(error_of)?.first().map(letter))
    }

    async fn replay(&mut self, id: i64, by: &str, unless_replayed: bool) -> Result<Option<Uuid>, BrokerError> {
        let row = self.query_one(pg::REPLAY.sql, &[&id, &by, &unless_replayed]).await.map_err(error_of)?;
        Ok(row.get(0))
    }

    async fn purge_batch(&mut self, before: &str, batch: i32) -> Result<i64, BrokerError> {
        let row = self.query_one(pg::PURGE.sql, &[&before, &batch]).await.map_err(error_of)?;
        Ok(i64::from(row.get::<_, i32>(0)))
    }

    async fn letter_page(
        &mut self,
        f: &LetterFilter,
        upto: Option<i64>,
        limit: i32,
    ) -> Result<Vec<Letter>, BrokerError> {
        let rows = self
            .query(pg::DEAD_LETTER_PAGE.sql, &[&f.queue, &f.reason, &f.replayed, &upto, &limit, &f.id])
            .await
            .map_err(error_of)?;
        Ok(rows.iter().map(letter).collect())
    }

    async fn letter_count(&mut self, f: &LetterFilter, upto: Option<i64>) -> Result<Tally, BrokerError> {
        let row = self
            .query_one(pg::DEAD_LETTER_COUNT.sql, &[&f.queue, &f.reason, &f.replayed, &upto, &f.id])
            .await
            .map_err(error_of)?;
        Ok(Tally { letters: row.get(0), last_id: row.get(1), id_sum: row.get(2) })
    }

    async fn purge_matching(
        &mut self,
        f: &LetterFilter,
        upto: i64,
        expected: Tally,
        detail: &str,
    ) -> Result<i64, BrokerError> {
        let (n, sum) = (expected.letters, expected.id_sum);
        let row = self
            .query_one(pg::PURGE_MATCHING.sql, &[&f.queue, &f.reason, &f.replayed, &upto, &n, &detail, &f.id, &sum])
            .await
            .map_err(error_of)?;
        Ok(row.get(0))
    }

    async fn note_action(&mut self, action: &str, detail: &str, letters: i64) -> Result<(), BrokerError> {
        self.execute(pg::NOTE_ACTION.sql, &[&action, &detail, &letters]).await.map_err(error_of)?;
        Ok(())
    }

    async fn actions(&mut self, limit: i32) -> Result<Vec<Action>, BrokerError> {
        let rows = self.query(pg::ACTIONS.sql, &[&limit]).await.map_err(error_of)?;
        Ok(rows
            .iter()
            .map(|r| Action {
                id: r.get(0),
                at: r.get(1),
                who: r.get(2),
                action: r.get(3),
                detail: r.get(4),
                letters: r.get(5),
            })
            .collect())
    }

    async fn rates(&mut self, minutes: i32) -> Result<Vec<Rate>, BrokerError> {
        let rows = self.query(pg::RATES.sql, &[&minutes]).await.map_err(error_of)?;
        Ok(rows
            .iter()
            .map(|r| Rate {
                minutes_ago: r.get(0),
                answered: r.get(1),
                failed: r.get(2),
                p50_ms: r.get(3),
                p95_ms: r.get(4),
            })
            .collect())
    }
}

/// See [`super::replay_via_roster`]: `c` is the calculation side, `roster` its roster side.
pub async fn replay_via_roster(
    c: &Client,
    roster: &Client,
    id: i64,
    by: &str,
    unless_replayed: bool,
) -> Result<Option<Uuid>, BrokerError> {
    let Some(letter) = c.query(pg::DEAD_LETTER.sql, &[&id]).await.map_err(error_of)?.first().map(letter) else {
        return Err(BrokerError {
            kind: ErrorKind::NotFound,
            number: 0,
            message: format!("dead letter {id} does not exist"),
        });
    };
    if unless_replayed && letter.replays > 0 {
        return Ok(None);
    }
    let Some(key) = dead_letter::request_key(&letter) else {
        return Err(other(&format!(
            "dead letter {id} is a {}, not a Vraag with a key: only requests can be sent again",
            letter.message_type
        )));
    };
    let handle: Option<Uuid> =
        roster.query_one(pg::SEND_KEY.sql, &[&key.dienstverband_id, &key.periode_id]).await.map_err(error_of)?.get(0);
    let Some(handle) = handle else {
        return Err(other(&format!(
            "the roster side sent nothing for key ({}, {}): no such key there, or its Vraag cannot be built \
             (rekenserver.onverzendbaar says why)",
            key.dienstverband_id, key.periode_id
        )));
    };
    let marked: bool =
        c.query_one(pg::NOTE_REPLAYED.sql, &[&id, &by, &handle, &unless_replayed]).await.map_err(error_of)?.get(0);
    Ok(marked.then_some(handle))
}

fn letter(r: &tokio_postgres::Row) -> Letter {
    Letter {
        id: r.get(0),
        queue: r.get(1),
        service: r.get(2),
        far_service: r.get(3),
        message_type: r.get(4),
        body: r.get(5),
        attempts: r.get(6),
        reason: r.get(7),
        dead_lettered_at: r.get(8),
        replays: r.get(9),
        replayed_at: r.get(10),
        replayed_by: r.get(11),
        replay_handle: r.get(12),
    }
}
