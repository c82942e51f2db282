//! The SQL Server transport: Service Broker over TDS with tiberius. Configured with an
//! ADO.NET connection string (TLS on by default); every session runs `SET XACT_ABORT
//! ON`, `SET NOCOUNT ON` and the ANSI options xml methods need, whatever the login's
//! defaults; transactions go through tiberius's transaction manager
//! requests; the statements are in `broker/mssql/statements/session.sql`. A session has two connections:
//! one for the work, and one outside its transactions for the durable attempt counts,
//! the queue's state and an idle supervisor's wait on event-based activation
//! (`activation.rs`). Errors are classified by SQL Server error number in [`classify`].

mod activation;
pub mod browser;
mod connection;
mod errors;
mod scripts;

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

pub use activation::{Activated, NOTIFICATION_QUEUE, event_instance};
pub use connection::{Connection, ConnectionStringError, Tds, ado_pairs, check_waits, connect};
pub use errors::{classify, error_of, quote_identifier, quote_name};
pub use scripts::{
    OPTIONAL_SCRIPTS, SCRIPTS, SET_OPTIONS, Side, SqlcmdVars, for_side, grant_roles, install, modules, region_end,
    region_sides, role_for, schema_collection_name, schema_collection_script, scripts_stamp, sqlcmd_batches,
};

use super::{BrokerError, ErrorKind, Message};
use crate::transport::{self, Attempt, DeadLetter, Fault, MessageKey, QueueState, Transport};

/// The statements this transport sends (`broker/mssql/statements/session.sql`).
pub use crate::sql::statements::mssql_session as stmt;

/// Every statement of `broker/mssql/statements/session.sql`, as sent (identifiers filled
/// in with sample names): for the emulator's recogniser tests.
pub fn statements_as_sent() -> Vec<(&'static str, String)> {
    stmt::ALL
        .iter()
        .map(|s| {
            let sent = s
                .sql
                .replace("{queue}", &quote_name("dbo.loonfactorberekening_reken").unwrap_or_default())
                .replace("{message_type}", &quote_identifier("/Rekenserver/LoonfactorBerekening/Antwoord"));
            (s.name, sent)
        })
        .collect()
}

/// Opens SQL Server sessions.
#[derive(Clone)]
pub struct MssqlTransport {
    connection: Connection,
    masked: String,
    /// The idle waits of its sessions, on SQL Server's event-based activation.
    activation: Arc<activation::Hub>,
}

impl std::fmt::Debug for MssqlTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MssqlTransport").field("connection", &self.connection).field("masked", &self.masked).finish()
    }
}

impl MssqlTransport {
    pub fn new(connection_string: &str) -> Result<Self, ConnectionStringError> {
        Ok(Self {
            connection: Connection::parse(connection_string)?,
            masked: crate::connstr::mask(connection_string),
            activation: Arc::default(),
        })
    }

    /// The longest a single statement may wait for the server (the receive's
    /// WAITFOR must stay below it).
    pub fn command_timeout(&self) -> Duration {
        self.connection.command_timeout
    }
}

impl Transport for MssqlTransport {
    type Session = MssqlSession;

    async fn open(&self) -> Result<MssqlSession, BrokerError> {
        let work = connect(&self.connection).await?;
        let side = connect(&self.connection).await?;
        // A WAITFOR ends at least 2 s before the Command Timeout (as `check_waits` asks of
        // the readers' waits).
        let longest_wait = match self.connection.command_timeout.saturating_sub(Duration::from_secs(2)) {
            d if d.is_zero() => self.connection.command_timeout / 2,
            d => d,
        };
        Ok(MssqlSession { work, side, activation: self.activation.clone(), longest_wait })
    }

    fn describe(&self) -> String {
        format!("mssql {}", self.masked)
    }

    fn poison_handling_off(&self, queue: &str) -> String {
        let q = quote_name(queue).unwrap_or_else(|_| queue.to_owned());
        format!("ALTER QUEUE {q} WITH POISON_MESSAGE_HANDLING (STATUS = OFF)")
    }
}

/// One SQL Server session: the working connection and the side connection.
pub struct MssqlSession {
    work: Tds,
    side: Tds,
    /// Its transport's idle waits (`activation.rs`).
    activation: Arc<activation::Hub>,
    /// The longest one WAITFOR may wait under the connection's Command Timeout.
    longest_wait: Duration,
}

fn keys_json(keys: &[MessageKey]) -> String {
    let items: Vec<String> =
        keys.iter().map(|k| format!("{{\"h\":\"{}\",\"s\":{}}}", k.conversation_handle, k.sequence)).collect();
    format!("[{}]", items.join(","))
}

fn message_of(row: &tiberius::Row) -> Result<Message, BrokerError> {
    let missing =
        |col: &str| BrokerError { kind: ErrorKind::Other, number: 0, message: format!("RECEIVE returned no {col}") };
    Ok(Message {
        id: 0,
        conversation_group_id: row.get::<Uuid, _>(0).ok_or_else(|| missing("conversation_group_id"))?,
        conversation_handle: row.get::<Uuid, _>(1).ok_or_else(|| missing("conversation_handle"))?,
        sequence: row.get::<i64, _>(2).ok_or_else(|| missing("message_sequence_number"))?,
        message_type: row.get::<&str, _>(3).ok_or_else(|| missing("message_type_name"))?.to_owned(),
        body: row.get::<&[u8], _>(4).map(<[u8]>::to_vec).unwrap_or_default(),
        service: row.get::<&str, _>(5).unwrap_or_default().to_owned(),
        contract: row.get::<&str, _>(6).unwrap_or_default().to_owned(),
    })
}

impl MssqlSession {
    /// Runs `sql` (a statement of a `.sql` file) on the working connection, inside the
    /// session's transaction: for handlers with business effects of their own.
    pub async fn execute(&mut self, sql: &str, params: &[&dyn tiberius::ToSql]) -> Result<(), BrokerError> {
        Self::exec(&mut self.work, sql, params).await
    }

    async fn rows(
        client: &mut Tds,
        sql: &str,
        params: &[&dyn tiberius::ToSql],
    ) -> Result<Vec<tiberius::Row>, BrokerError> {
        client.query(sql, params).await.map_err(error_of)?.into_first_result().await.map_err(error_of)
    }

    async fn exec(client: &mut Tds, sql: &str, params: &[&dyn tiberius::ToSql]) -> Result<(), BrokerError> {
        client.execute(sql, params).await.map_err(error_of)?;
        Ok(())
    }
}

impl MssqlSession {
    /// One RECEIVE from the notification queue (`sbworker.activation`) on the side
    /// connection, outside any transaction, waiting up to `wait` (within the Command
    /// Timeout): what it brought. A conversation that ended (its event notification
    /// dropped) is ended on this side too; the others are left open, as the event
    /// notifications need them.
    async fn receive_activations(&mut self, wait: Duration) -> Result<activation::Received, BrokerError> {
        let timeout = i32::try_from(wait.min(self.longest_wait).as_millis()).unwrap_or(i32::MAX);
        let rows = Self::rows(&mut self.side, stmt::WAIT_FOR_ACTIVATION.sql, &[&activation::TAKE, &timeout]).await?;
        let received = activation::Received::of(rows.iter().map(|r| {
            (
                r.try_get::<Uuid, _>(0).ok().flatten(),
                r.try_get::<&str, _>(1).ok().flatten(),
                r.try_get::<&[u8], _>(2).ok().flatten(),
            )
        }));
        for h in &received.ended {
            if let Err(e) = Self::exec(&mut self.side, stmt::END_CONVERSATION.sql, &[h]).await {
                tracing::warn!(conversation = %h, "cannot end an ended event notification's conversation: {e}");
            }
        }
        Ok(received)
    }

    /// A group RECEIVE waited its bound (1 s) for the group's lock: another session holds
    /// the group, and serves it. XACT_ABORT ON rolled the (still empty) transaction back;
    /// the lock timeout is reset and a transaction begun again, so the caller finds the
    /// session as after an empty RECEIVE and goes on with other groups.
    async fn group_held_elsewhere(&mut self, group: Uuid) -> Result<(), BrokerError> {
        tracing::debug!(%group, "the group is held by another session (lock wait bounded): going on without it");
        let _ = Self::exec(&mut self.work, stmt::LOCK_TIMEOUT_RESET.sql, &[]).await;
        transport::Session::rollback(self).await?;
        transport::Session::begin(self).await
    }
}

impl transport::Session for MssqlSession {
    async fn begin(&mut self) -> Result<(), BrokerError> {
        self.work.begin_transaction().await.map_err(error_of)
    }

    async fn commit(&mut self) -> Result<(), BrokerError> {
        self.work.commit_transaction().await.map_err(error_of)
    }

    async fn rollback(&mut self) -> Result<bool, BrokerError> {
        match self.work.rollback_transaction().await.map_err(error_of) {
            // 3903: XACT_ABORT already rolled the transaction back.
            Err(e) if e.number == 3903 => Ok(false),
            Err(e) => Err(e),
            // SQL Server counts rolled-back receives itself; a disabled queue shows
            // as error 9617 at the next RECEIVE.
            Ok(()) => Ok(false),
        }
    }

    async fn receive(
        &mut self,
        queue: &str,
        max: i32,
        group: Option<Uuid>,
        wait: Duration,
    ) -> Result<Vec<Message>, BrokerError> {
        let q = quote_name(queue)?;
        let timeout = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
        let rows = match group {
            None => Self::rows(&mut self.work, &stmt::RECEIVE.sql.replace("{queue}", &q), &[&max, &timeout]).await?,
            Some(g) => {
                match Self::rows(&mut self.work, &stmt::RECEIVE_GROUP.sql.replace("{queue}", &q), &[&max, &timeout, &g])
                    .await
                {
                    Ok(rows) => rows,
                    Err(e) if e.number == 1222 => return self.group_held_elsewhere(g).await.map(|()| Vec::new()),
                    Err(e) => {
                        // The batch ended before its last line (an RPC restores the SET
                        // itself; reset anyway).
                        let _ = Self::exec(&mut self.work, stmt::LOCK_TIMEOUT_RESET.sql, &[]).await;
                        return Err(e);
                    }
                }
            }
        };
        rows.iter().map(message_of).collect()
    }

    async fn receive_conversation(&mut self, queue: &str, handle: Uuid) -> Result<Vec<Message>, BrokerError> {
        let q = quote_name(queue)?;
        let rows =
            Self::rows(&mut self.work, &stmt::RECEIVE_CONVERSATION.sql.replace("{queue}", &q), &[&handle]).await?;
        rows.iter().map(message_of).collect()
    }

    async fn send(&mut self, handle: Uuid, message_type: &str, body: Option<&[u8]>) -> Result<(), BrokerError> {
        let t = quote_identifier(message_type);
        match body {
            Some(b) => Self::exec(&mut self.work, &stmt::SEND.sql.replace("{message_type}", &t), &[&handle, &b]).await,
            None => Self::exec(&mut self.work, &stmt::SEND_EMPTY.sql.replace("{message_type}", &t), &[&handle]).await,
        }
    }

    async fn end_conversation(&mut self, handle: Uuid, error: Option<(i32, &str)>) -> Result<(), BrokerError> {
        match error {
            None => Self::exec(&mut self.work, stmt::END_CONVERSATION.sql, &[&handle]).await,
            Some((code, text)) => {
                let text: String = text.chars().take(3000).collect();
                Self::exec(&mut self.work, stmt::END_CONVERSATION_WITH_ERROR.sql, &[&handle, &code, &text.as_str()])
                    .await
            }
        }
    }

    async fn move_conversation(&mut self, handle: Uuid, group: Uuid) -> Result<(), BrokerError> {
        Self::exec(&mut self.work, stmt::MOVE_CONVERSATION.sql, &[&handle, &group]).await
    }

    async fn get_conversation_group(&mut self, queue: &str, wait: Duration) -> Result<Option<Uuid>, BrokerError> {
        let q = quote_name(queue)?;
        let timeout = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
        let sql = stmt::GET_CONVERSATION_GROUP.sql.replace("{queue}", &q);
        // The batch's one result set is its last statement's (the SELECT).
        let results =
            self.work.query(sql, &[&timeout]).await.map_err(error_of)?.into_results().await.map_err(error_of)?;
        match results.iter().flatten().next() {
            Some(row) => row.try_get::<Uuid, _>(0).map_err(error_of),
            None => Ok(None),
        }
    }

    async fn count_attempts(&mut self, queue: &str, keys: &[MessageKey]) -> Result<Vec<Attempt>, BrokerError> {
        let json = keys_json(keys);
        let rows = Self::rows(&mut self.side, stmt::COUNT_ATTEMPTS.sql, &[&queue, &json.as_str()]).await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                Some(Attempt {
                    key: MessageKey { conversation_handle: r.get::<Uuid, _>(0)?, sequence: r.get::<i64, _>(1)? },
                    attempts: r.get::<i32, _>(2)?,
                    last_error: r.get::<&str, _>(3).map(str::to_owned),
                    failures: r.try_get::<i32, _>(4).ok().flatten().unwrap_or(0),
                    transient_failures: r.try_get::<i32, _>(5).ok().flatten().unwrap_or(0),
                })
            })
            .collect())
    }

    async fn note_failure(&mut self, keys: &[MessageKey], error: &str, fault: Fault) -> Result<(), BrokerError> {
        let json = keys_json(keys);
        let transient = fault == Fault::Transient;
        Self::exec(&mut self.side, stmt::NOTE_FAILURE.sql, &[&json.as_str(), &error, &transient]).await
    }

    async fn forget_attempts(&mut self, keys: &[MessageKey]) -> Result<(), BrokerError> {
        let json = keys_json(keys);
        Self::exec(&mut self.work, stmt::FORGET_ATTEMPTS.sql, &[&json.as_str()]).await
    }

    async fn dead_letter(&mut self, l: DeadLetter<'_>) -> Result<(), BrokerError> {
        let m = l.message;
        let body = (!m.body.is_empty()).then_some(m.body.as_slice());
        Self::exec(
            &mut self.work,
            stmt::DEAD_LETTER.sql,
            &[
                &l.queue,
                &m.service.as_str(),
                &m.contract.as_str(),
                &m.conversation_group_id,
                &m.conversation_handle,
                &m.sequence,
                &m.message_type.as_str(),
                &body,
                &l.attempts,
                &l.reason,
            ],
        )
        .await
    }

    async fn queue_state(&mut self, queue: &str) -> Result<QueueState, BrokerError> {
        let rows = Self::rows(&mut self.side, stmt::QUEUE_STATE.sql, &[&queue]).await?;
        let Some(r) = rows.first() else {
            return Err(BrokerError {
                kind: ErrorKind::NotFound,
                number: 0,
                message: format!("queue {queue} is not found"),
            });
        };
        Ok(QueueState {
            enabled: r.get::<bool, _>(0).unwrap_or(false),
            messages: r.get::<i64, _>(1).unwrap_or(0),
            // An older wachtrij_status has no such column: assume the broker's default (on).
            poison_handling: r.try_get::<bool, _>(2).ok().flatten().unwrap_or(true),
            // smallint; an install before the column, or 0 (never set): no limit.
            max_readers: r
                .try_get::<i16, _>(4)
                .map(|n| n.map(i32::from))
                .or_else(|_| r.try_get::<i32, _>(4))
                .ok()
                .flatten()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| n > 0),
        })
    }

    /// Waits on SQL Server's event-based activation (`activation.rs`): true when a
    /// QUEUE_ACTIVATION notification named `queue` (received by this session, or by
    /// another of the transport's sessions receiving for all), or at once when the
    /// notification queue cannot be read (no `optional/activation.sql`: the supervisor
    /// then looks at every tick, as before); false when `wait` passed without one.
    async fn wait_for_work(&mut self, queue: &str, wait: Duration) -> Result<bool, BrokerError> {
        use activation::Turn;
        let hub = self.activation.clone();
        let name = activation::QueueName::parse(queue);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let changed = hub.changed();
            match hub.turn(&name) {
                Turn::Work => return Ok(true),
                Turn::Receive(turn) => {
                    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                    match self.receive_activations(left).await {
                        Ok(received) => {
                            hub.received(received.activated);
                            drop(turn);
                            if hub.take(&name) {
                                return Ok(true);
                            }
                            // A wait cut short by the Command Timeout ends here too: the
                            // caller looks a moment early rather than another RECEIVE
                            // for the rest.
                            let cut = left > self.longest_wait && received.rows == 0;
                            if cut || tokio::time::Instant::now() >= deadline {
                                return Ok(false);
                            }
                        }
                        Err(e) if activation::is_unavailable(&e) => {
                            hub.unavailable(&e);
                            return Ok(true);
                        }
                        Err(e) => return Err(e),
                    }
                }
                Turn::Wait => {
                    tokio::select! {
                        () = changed => {}
                        () = tokio::time::sleep_until(deadline) => return Ok(hub.take(&name)),
                    }
                }
            }
        }
    }

    async fn take_reader_slot(&mut self, queue: &str, slots: u32) -> Result<Option<u32>, BrokerError> {
        let slots = i32::try_from(slots).unwrap_or(i32::MAX);
        let rows = Self::rows(&mut self.work, stmt::TAKE_READER_SLOT.sql, &[&queue, &slots]).await?;
        Ok(rows.first().and_then(|r| r.get::<i32, _>(0)).map(i32::unsigned_abs))
    }

    async fn free_reader_slot(&mut self, queue: &str, slot: u32) -> Result<(), BrokerError> {
        let slot = i32::try_from(slot).unwrap_or(i32::MAX);
        Self::exec(&mut self.work, stmt::FREE_READER_SLOT.sql, &[&queue, &slot]).await
    }

    async fn heartbeat(&mut self, b: &transport::Heartbeat) -> Result<(), BrokerError> {
        let queues = b.queues_json();
        let version = b.version.to_string();
        let (host, version, queues) = (b.host.as_str(), version.as_str(), queues.as_str());
        let params: [&dyn tiberius::ToSql; 8] =
            [&b.instance, &host, &b.pid, &version, &b.started_unix, &queues, &b.interval_ms, &b.contract_versie];
        match Self::exec(&mut self.side, stmt::HEARTBEAT.sql, &params).await {
            // An install of the release before (workers are upgraded first): its
            // procedure has no @contract_versie yet (8145: not a parameter of it).
            Err(e) if e.number == 8145 => {
                // The contract version then goes in the version text, where the install's
                // check reads it (so the upgraded workers do not count as older ones).
                let version = match b.contract_versie {
                    Some(c) => format!("{version} contract {c}"),
                    None => version.to_owned(),
                };
                let version = version.as_str();
                let params: [&dyn tiberius::ToSql; 7] =
                    [&b.instance, &host, &b.pid, &version, &b.started_unix, &queues, &b.interval_ms];
                Self::exec(&mut self.side, stmt::HEARTBEAT_V1.sql, &params).await?;
            }
            other => {
                other?;
            }
        }
        Ok(())
    }

    async fn heartbeat_end(&mut self, instance: Uuid) -> Result<(), BrokerError> {
        Self::exec(&mut self.side, stmt::HEARTBEAT_END.sql, &[&instance]).await?;
        Ok(())
    }
}

impl transport::PayrollStore for MssqlSession {
    async fn claim_version(
        &mut self,
        dienstverband_id: i32,
        periode_id: i32,
        versie: i64,
    ) -> Result<bool, BrokerError> {
        let rows =
            Self::rows(&mut self.work, stmt::CLAIM_VERSION.sql, &[&dienstverband_id, &periode_id, &versie]).await?;
        Ok(rows.first().and_then(|r| r.get::<bool, _>(0)).unwrap_or(false))
    }

    async fn store_antwoord(
        &mut self,
        handle: Uuid,
        a: &crate::contract::Antwoord,
        _superseded: bool,
    ) -> Result<transport::Stored, BrokerError> {
        use transport::Stored;
        // The procedure reads the Antwoord itself (nodes()/value()), superseded marker
        // included, so the in-database collector and this one store alike.
        let xml = crate::contract::encode_antwoord(a);
        let rows = Self::rows(&mut self.work, stmt::STORE_ANTWOORD.sql, &[&handle, &xml.as_str()]).await?;
        Ok(match rows.first().and_then(|r| r.get::<&str, _>(0)) {
            Some("opgeslagen") => Stored::Stored,
            Some("verouderd") => Stored::Older,
            _ => Stored::Superseded,
        })
    }

    async fn record_fout(&mut self, handle: Uuid, message: &str, repairable: bool) -> Result<(), BrokerError> {
        Self::exec(&mut self.work, stmt::RECORD_FOUT.sql, &[&handle, &fout_text(message).as_str(), &repairable]).await
    }

    async fn record_request_fout(&mut self, handle: Uuid, message: &str, repairable: bool) -> Result<(), BrokerError> {
        let text = fout_text(message);
        Self::exec(&mut self.work, stmt::RECORD_REQUEST_FOUT.sql, &[&handle, &text.as_str(), &repairable]).await
    }

    async fn dialog_idle(&mut self, handle: Uuid) -> Result<bool, BrokerError> {
        let rows = Self::rows(&mut self.work, stmt::DIALOG_IDLE.sql, &[&handle]).await?;
        Ok(rows.first().and_then(|r| r.get::<bool, _>(0)).unwrap_or(false))
    }
}

/// A Fout's text as `Rekenserver.noteer_fout` takes it (`@melding nvarchar(3000)`).
fn fout_text(message: &str) -> String {
    message.chars().take(3000).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_utf16_body_as_a_trigger_sends_it_is_answered() {
        // An `xml` value sent by a trigger arrives as UTF-16LE with a byte-order mark.
        let xml = include_str!("../../../../../schemas/examples/valid/vraag-voorbeeld2.xml");
        let mut body = vec![0xFF, 0xFE];
        body.extend(xml.encode_utf16().flat_map(u16::to_le_bytes));
        let calc = crate::handlers::calculation::Calculation::new(
            std::sync::Arc::new(crate::engine::Tables::built_in().unwrap()),
            crate::contract::Limits::default(),
        );
        let answer = calc.answer(&body).expect("answered");
        assert!(answer.contains("Versie=\"17\""), "{answer}");
        assert_eq!(
            keys_json(&[MessageKey { conversation_handle: Uuid::nil(), sequence: 3 }]),
            "[{\"h\":\"00000000-0000-0000-0000-000000000000\",\"s\":3}]"
        );
    }

    #[test]
    fn every_statement_has_its_placeholders_filled() {
        for (name, sent) in statements_as_sent() {
            assert!(!sent.contains('{'), "{name}: {sent}");
        }
    }
}
