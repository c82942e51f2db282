//! What an operator runs against a live installation, on either back end:
//! `sbworker status` ([`status`]) and `sbworker dead-letter` ([`dead_letter`]). [`Db`]
//! is the connection: the PostgreSQL broker's functions (`007_operations.sql`) or
//! SQL Server's procedures (`broker/mssql/06_operations.sql`), which return the same
//! shapes. Times travel as ISO 8601 text (UTC).

pub mod dead_letter;
pub mod status;

use anyhow::Context;
use uuid::Uuid;

use crate::broker::mssql::{self, Tds};
use crate::config::{BrokerConfig, BrokerKind};
use crate::sql::statements::mssql_operations as ms;
use crate::sql::statements::postgres_operations as pg;
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

/// A connection to the installation.
pub enum Db {
    Postgres(tokio_postgres::Client),
    Mssql(Box<Tds>),
}

impl Db {
    /// Connects as the configuration's broker says.
    pub async fn connect(broker: &BrokerConfig) -> anyhow::Result<Db> {
        let masked = crate::config::mask_secrets(&broker.connection);
        match broker.kind {
            BrokerKind::Postgres => {
                let (client, conn) = crate::pg_tls::connect(&broker.connection)
                    .await
                    .with_context(|| format!("cannot connect to {masked}"))?;
                tokio::spawn(conn);
                Ok(Db::Postgres(client))
            }
            BrokerKind::Mssql => {
                let c = mssql::Connection::parse(&broker.connection)
                    .map_err(|e| anyhow::anyhow!("the connection string: {e}"))?;
                let tds = mssql::connect(&c).await.with_context(|| format!("cannot connect to {masked}"))?;
                Ok(Db::Mssql(Box::new(tds)))
            }
        }
    }

    /// The status document (JSON text), see [`status::Status`].
    pub async fn status_json(&mut self, recent_minutes: i32, stale_minutes: i32) -> Result<String, BrokerError> {
        match self {
            Db::Postgres(c) => {
                let row =
                    c.query_one(pg::STATUS_REPORT.sql, &[&recent_minutes, &stale_minutes]).await.map_err(pg_err)?;
                Ok(row.get(0))
            }
            Db::Mssql(t) => {
                let rows = ms_rows(t, ms::STATUS_REPORT.sql, &[&recent_minutes, &stale_minutes]).await?;
                rows.first()
                    .and_then(|r| r.get::<&str, _>(0).map(str::to_owned))
                    .ok_or_else(|| other("sbworker.status_report returned no document"))
            }
        }
    }

    /// Dead letters, newest first: those diverted at or after `since` (ISO 8601), at most `limit`.
    pub async fn dead_letters(&mut self, since: Option<&str>, limit: i32) -> Result<Vec<Letter>, BrokerError> {
        match self {
            Db::Postgres(c) => Ok(c
                .query(pg::DEAD_LETTERS.sql, &[&since, &limit])
                .await
                .map_err(pg_err)?
                .iter()
                .map(pg_letter)
                .collect()),
            Db::Mssql(t) => ms_rows(t, ms::DEAD_LETTERS.sql, &[&since, &limit]).await?.iter().map(ms_letter).collect(),
        }
    }

    /// One dead letter.
    pub async fn dead_letter(&mut self, id: i64) -> Result<Option<Letter>, BrokerError> {
        match self {
            Db::Postgres(c) => Ok(c.query(pg::DEAD_LETTER.sql, &[&id]).await.map_err(pg_err)?.first().map(pg_letter)),
            Db::Mssql(t) => ms_rows(t, ms::DEAD_LETTER.sql, &[&id]).await?.first().map(ms_letter).transpose(),
        }
    }

    /// Sends letter `id` again on a new dialog and marks it replayed by `by`; the new
    /// handle. With `unless_replayed`, an entry replayed already is left alone (`None`).
    pub async fn replay(&mut self, id: i64, by: &str, unless_replayed: bool) -> Result<Option<Uuid>, BrokerError> {
        match self {
            Db::Postgres(c) => {
                let row = c.query_one(pg::REPLAY.sql, &[&id, &by, &unless_replayed]).await.map_err(pg_err)?;
                Ok(row.get(0))
            }
            Db::Mssql(t) => {
                let rows = ms_rows(t, ms::REPLAY.sql, &[&id, &by, &unless_replayed]).await?;
                let Some(row) = rows.first() else {
                    return Err(other("sbworker.replay_dead_letter returned no row"));
                };
                Ok(row.get::<Uuid, _>(0))
            }
        }
    }

    /// A Vraag diverted on the calculation side of a split PostgreSQL install (which
    /// begins no dialogs): its key sent again from the roster side (`roster`), at the
    /// key's current roster version (latest wins, so never an older one), and the letter
    /// marked replayed here. `None` with `unless_replayed` when it was replayed already.
    pub async fn replay_via_roster(
        &mut self,
        roster: &tokio_postgres::Client,
        id: i64,
        by: &str,
        unless_replayed: bool,
    ) -> Result<Option<Uuid>, BrokerError> {
        let Db::Postgres(c) = self else {
            return Err(other("--roster is for a split PostgreSQL install"));
        };
        let Some(letter) = c.query(pg::DEAD_LETTER.sql, &[&id]).await.map_err(pg_err)?.first().map(pg_letter) else {
            return Err(BrokerError {
                kind: crate::transport::ErrorKind::NotFound,
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
            roster.query_one(pg::SEND_KEY.sql, &[&key.dienstverband_id, &key.periode_id]).await.map_err(pg_err)?.get(0);
        let Some(handle) = handle else {
            return Err(other(&format!(
                "the roster side sent nothing for key ({}, {}): no such key there, or its Vraag cannot be built \
                 (rekenserver.onverzendbaar says why)",
                key.dienstverband_id, key.periode_id
            )));
        };
        let marked: bool =
            c.query_one(pg::NOTE_REPLAYED.sql, &[&id, &by, &handle, &unless_replayed]).await.map_err(pg_err)?.get(0);
        Ok(marked.then_some(handle))
    }

    /// Deletes one batch of letters diverted before `before` (ISO 8601); how many.
    pub async fn purge_batch(&mut self, before: &str, batch: i32) -> Result<i64, BrokerError> {
        match self {
            Db::Postgres(c) => {
                let row = c.query_one(pg::PURGE.sql, &[&before, &batch]).await.map_err(pg_err)?;
                Ok(i64::from(row.get::<_, i32>(0)))
            }
            Db::Mssql(t) => {
                let rows = ms_rows(t, ms::PURGE.sql, &[&before, &batch]).await?;
                Ok(rows.first().and_then(|r| r.get::<i32, _>(0)).map_or(0, i64::from))
            }
        }
    }
}

fn other(message: &str) -> BrokerError {
    BrokerError { kind: crate::transport::ErrorKind::Other, number: 0, message: message.into() }
}

fn pg_err(e: tokio_postgres::Error) -> BrokerError {
    crate::broker::postgres::error_of(e)
}

async fn ms_rows(t: &mut Tds, sql: &str, params: &[&dyn tiberius::ToSql]) -> Result<Vec<tiberius::Row>, BrokerError> {
    t.query(sql, params).await.map_err(mssql::error_of)?.into_first_result().await.map_err(mssql::error_of)
}

fn pg_letter(r: &tokio_postgres::Row) -> Letter {
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

fn ms_letter(r: &tiberius::Row) -> Result<Letter, BrokerError> {
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
