//! The PostgreSQL broker: its install scripts and a session over tokio-postgres.
//!
//! A session has a connection for the work (begin, receive, send, end, commit) and uses
//! a side connection that LISTENs, so that a waiting receive wakes as soon as a send to
//! its queue commits (notifications are delivered to a session, so the listener must be
//! a connection of its own), and that writes the attempt counts outside the transaction.
//! A worker's sessions share one side. Sends notify only while a receiver is marked
//! waiting; the working connection marks itself before it waits (`sb.begin_wait`).

mod errors;
mod install;
pub mod route;
mod side;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::watch;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Client, Row, Statement};
use uuid::Uuid;

use super::{BrokerError, ErrorKind, Message};
pub use crate::pg_tls::Endpoint;
use crate::sql::Named;
use crate::transport::{self, Attempt, DeadLetter, Fault, MessageKey, QueueState, Transport};

pub use errors::{error_of, error_of_ref};
pub use install::{
    ROSTER_SCRIPTS, SCRIPTS, SECURITY, grant_roles, install, install_side, install_with, older_workers, side_of, stamp,
};
pub use side::Side;
use side::Wakeups;

/// What the installed functions take (`Session::installed_arities`).
#[derive(Debug, Clone, Copy)]
struct Arities {
    /// `rekenserver.sla_antwoord_op` takes the engine's warnings.
    store_warnings: bool,
    /// `sbworker.heartbeat` takes the contract version.
    heartbeat_contract: bool,
    /// `sb.receive_marking` exists (the waiting mark folded into RECEIVE).
    receive_marking: bool,
    /// `sb.note_rollback` takes the messages by group and id (the messages' key).
    rollback_by_key: bool,
}

/// The statements this transport sends (`broker/postgres/statements/session.sql`).
use crate::sql::statements::postgres_operations as O;
use crate::sql::statements::postgres_session as S;

/// The one row a `SELECT function(…)` statement returns.
fn single(rows: Vec<Row>, name: &str) -> Result<Row, BrokerError> {
    rows.into_iter().next().ok_or_else(|| BrokerError {
        kind: ErrorKind::Other,
        number: 0,
        message: format!("statement {name} returned no row"),
    })
}

/// The statement `name` of `session.sql`, prepared once per connection.
async fn prepared(
    client: &Client,
    cache: &mut HashMap<&'static str, Statement>,
    named: Named,
) -> Result<Statement, BrokerError> {
    if let Some(s) = cache.get(named.name) {
        return Ok(s.clone());
    }
    let s = client.prepare(named.sql).await.map_err(error_of)?;
    cache.insert(named.name, s.clone());
    Ok(s)
}

/// `sb.receive_marking`'s answer to a mark taken (`MARK_TAKE`) with nothing found: its
/// one row with no message, taken out of `rows`; whether no send was in flight. None:
/// `rows` are messages (or none: the mark was dropped).
fn gate_row(rows: &mut Vec<Row>) -> Option<bool> {
    if rows.len() == 1 && rows[0].get::<_, Option<i64>>(0).is_none() {
        let gate_free = rows.pop().and_then(|r| r.get::<_, Option<bool>>(8));
        return Some(gate_free.unwrap_or(false));
    }
    None
}

/// Resolves a connection string once (parsed here rather than by
/// tokio_postgres::connect, whose complaints can quote a part of the string, a password;
/// TLS as its sslmode says, [`Endpoint`]).
pub fn endpoint(url: &str) -> Result<Endpoint, BrokerError> {
    Endpoint::new(url).map_err(|e| BrokerError { kind: ErrorKind::Connection, number: 0, message: e.to_string() })
}

/// Connects, driving the connection on a task; notifications go to `notify`'s wake-ups,
/// and its sender is dropped when the connection ends.
async fn connect(at: &Endpoint, notify: Option<(Arc<Wakeups>, watch::Sender<()>)>) -> Result<Client, BrokerError> {
    let (client, mut conn) = at.connect().await.map_err(|e| match e {
        crate::pg_tls::ConnectError::Connect(e) => error_of(e),
        crate::pg_tls::ConnectError::Setup(e) => {
            BrokerError { kind: ErrorKind::Connection, number: 0, message: e.to_string() }
        }
    })?;
    tokio::spawn(async move {
        let mut stream = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(msg)) = stream.next().await {
            if let (AsyncMessage::Notification(n), Some((wakeups, _))) = (msg, notify.as_ref()) {
                wakeups.deliver(n.channel(), n.payload());
            }
        }
    });
    Ok(client)
}

/// One broker session: a working connection, and a side connection of its own or
/// shared with other sessions.
pub struct Session {
    client: Client,
    side: std::sync::Arc<Side>,
    /// Ends when the side connection does.
    alive: watch::Receiver<()>,
    /// Whether the last wait on this session found its queue empty twice and waited: the
    /// next one marks itself waiting before its first look (one RECEIVE instead of two
    /// when the queue is still idle).
    idle: bool,
    /// Groups and ids of messages received in the open transaction (for poison counting).
    received: Vec<(Uuid, i64)>,
    /// Messages the open transaction is done with: their attempts are forgotten by a
    /// statement sent with its COMMIT (see `forget_attempts`).
    forget: Vec<MessageKey>,
    /// Prepared statements of the working connection.
    client_stmts: HashMap<&'static str, Statement>,
    /// The queue this session is marked as waiting on (`sb.begin_wait`), if any.
    waiting: Option<String>,
    /// Whether a RECEIVE that leaves messages in its group wakes the other receivers
    /// (`sb.receive`'s p_wake): yes for a T-SQL client, no for a worker's reader.
    wake_others: bool,
    /// What the installed functions take: (the store takes warnings, the heartbeat the
    /// contract version, RECEIVE takes the waiting mark); read once, before the first
    /// use. An install of a release before takes none of these: workers are upgraded
    /// first, and must work against it. Read again after a minute (an install replaces
    /// them while workers run).
    arities: Option<(Arities, std::time::Instant)>,
}

impl Session {
    /// Opens a session on the database at `url` (a libpq-style URL or key=value string),
    /// with a side connection of its own.
    pub async fn open(url: &str) -> Result<Self, BrokerError> {
        let at = endpoint(url)?;
        let side = std::sync::Arc::new(Side::open_at(&at).await?);
        Self::open_at(&at, side).await
    }

    /// Opens a session that uses `side` for what runs outside its transactions.
    pub async fn open_with(url: &str, side: std::sync::Arc<Side>) -> Result<Self, BrokerError> {
        Self::open_at(&endpoint(url)?, side).await
    }

    /// [`Session::open_with`] on a resolved endpoint.
    pub async fn open_at(at: &Endpoint, side: std::sync::Arc<Side>) -> Result<Self, BrokerError> {
        let client = connect(at, None).await?;
        Ok(Self {
            client,
            alive: side.alive.clone(),
            idle: false,
            side,
            received: Vec::new(),
            forget: Vec::new(),
            client_stmts: HashMap::new(),
            waiting: None,
            wake_others: true,
            arities: None,
        })
    }

    /// Runs the statement `name` of `session.sql` on the working connection (in the
    /// open transaction, if any); its rows.
    async fn work(&mut self, name: Named, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, BrokerError> {
        let st = prepared(&self.client, &mut self.client_stmts, name).await?;
        self.client.query(&st, params).await.map_err(error_of)
    }

    /// `first` and then `name` on the working connection, sent together: tokio-postgres
    /// pipelines queries polled together, so the two cost one round trip. The result of
    /// each.
    async fn work_pair(
        &mut self,
        first: Named,
        first_params: &[&(dyn ToSql + Sync)],
        name: Named,
        params: &[&(dyn ToSql + Sync)],
    ) -> (Result<Vec<Row>, BrokerError>, Result<Vec<Row>, BrokerError>) {
        let statements = async {
            let a = prepared(&self.client, &mut self.client_stmts, first).await?;
            let b = prepared(&self.client, &mut self.client_stmts, name).await?;
            Ok::<_, BrokerError>((a, b))
        };
        let (a, b) = match statements.await {
            Ok(ab) => ab,
            Err(e) => return (Err(e.clone()), Err(e)),
        };
        let (ra, rb) = tokio::join!(self.client.query(&a, first_params), self.client.query(&b, params));
        (ra.map_err(error_of), rb.map_err(error_of))
    }

    /// A side statement on the side connection, which is never in a transaction: what it
    /// writes commits at once.
    async fn side(&mut self, named: Named, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, BrokerError> {
        let Some(st) = self.side.statements.get(named.name) else {
            return Err(BrokerError {
                kind: ErrorKind::Other,
                number: 0,
                message: format!("{} is not prepared on the side connection", named.name),
            });
        };
        self.side.watch(self.side.client.query(st, params).await.map_err(error_of))
    }

    /// A heartbeat with its version and queues given as text (the emulator passes on what
    /// a T-SQL client sent).
    pub async fn heartbeat_as(
        &mut self,
        b: &transport::Heartbeat,
        version: &str,
        queues: &str,
    ) -> Result<(), BrokerError> {
        let params: [&(dyn ToSql + Sync); 8] =
            [&b.instance, &b.host, &b.pid, &version, &b.started_unix, &queues, &b.interval_ms, &b.contract_versie];
        if self.installed_arities().await?.heartbeat_contract {
            self.side.watch(self.side.client.query(O::HEARTBEAT.sql, &params).await.map_err(error_of))?;
        } else {
            // The install before records no contract version: it goes in the version
            // text, where `sbworker install` reads it (so the upgraded workers do not
            // count as older ones).
            let version = match b.contract_versie {
                Some(c) => format!("{version} contract {c}"),
                None => version.to_owned(),
            };
            let params: [&(dyn ToSql + Sync); 7] =
                [&b.instance, &b.host, &b.pid, &version, &b.started_unix, &queues, &b.interval_ms];
            self.side.watch(self.side.client.query(O::HEARTBEAT_V1.sql, &params).await.map_err(error_of))?;
        }
        Ok(())
    }

    /// What the installed functions take (see `arities`), read on the side connection
    /// (outside any transaction) the first time.
    async fn installed_arities(&mut self) -> Result<Arities, BrokerError> {
        if let Some((a, at)) = self.arities
            && at.elapsed() < std::time::Duration::from_secs(60)
        {
            return Ok(a);
        }
        let rows = self.side.watch(self.side.client.query(S::INSTALLED_ARITIES.sql, &[]).await.map_err(error_of))?;
        let row = single(rows, S::INSTALLED_ARITIES.name)?;
        let a = Arities {
            store_warnings: row.get(0),
            heartbeat_contract: row.get(1),
            receive_marking: row.get(2),
            rollback_by_key: row.get(3),
        };
        self.arities = Some((a, std::time::Instant::now()));
        Ok(a)
    }

    /// The working connection, for the caller's own statements in the same transaction.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The working connection, for a caller that opens transactions of its own on it
    /// (outside this session's: the emulator's `Rekenserver.sweep`).
    pub fn client_mut(&mut self) -> &mut Client {
        &mut self.client
    }

    pub async fn begin(&mut self) -> Result<(), BrokerError> {
        self.received.clear();
        self.forget.clear();
        self.client.batch_execute("BEGIN").await.map_err(error_of)
    }

    /// Commits; the attempts the transaction forgot are deleted by a statement sent
    /// together with the COMMIT (one round trip). When that statement fails, the COMMIT
    /// finds the transaction aborted and rolls it back: its error is returned.
    pub async fn commit(&mut self) -> Result<(), BrokerError> {
        let received = std::mem::take(&mut self.received);
        if self.forget.is_empty() {
            return self.client.batch_execute("COMMIT").await.map_err(error_of);
        }
        let (handles, seqs) = key_arrays(&std::mem::take(&mut self.forget));
        let st = prepared(&self.client, &mut self.client_stmts, S::FORGET_ATTEMPTS).await?;
        let params: [&(dyn ToSql + Sync); 2] = [&handles, &seqs];
        let (forgot, committed) = tokio::join!(self.client.query(&st, &params), self.client.batch_execute("COMMIT"));
        if let Err(e) = forgot {
            // The COMMIT found the transaction aborted and rolled it back: what it
            // received is back in the queue, and the caller's rollback counts it.
            self.received = received;
            return Err(error_of(e));
        }
        committed.map_err(error_of)
    }

    /// Rolls back; when the transaction had received messages, reports the rollback to
    /// the broker in a transaction of its own (poison detection). Returns whether that
    /// disabled the queue.
    pub async fn rollback(&mut self) -> Result<bool, BrokerError> {
        self.forget.clear();
        self.client.batch_execute("ROLLBACK").await.map_err(error_of)?;
        // A wait whose statement failed in the transaction could not drop its mark there
        // (if this fails too, the next wait drops it, or the session's end).
        if self.waiting.is_some() {
            let _ = self.end_wait().await;
        }
        let received = std::mem::take(&mut self.received);
        if received.is_empty() {
            return Ok(false);
        }
        let (groups, ids): (Vec<Uuid>, Vec<i64>) = received.into_iter().unzip();
        let rows = if self.installed_arities().await?.rollback_by_key {
            self.work(S::NOTE_ROLLBACK, &[&groups, &ids]).await?
        } else {
            self.work(S::NOTE_ROLLBACK_V1, &[&ids]).await?
        };
        Ok(single(rows, "note_rollback")?.get(0))
    }

    /// LISTENs for `queue`'s wake-ups on the side connection (once per side); its waiters.
    async fn listen(&mut self, queue: &str) -> Result<Arc<side::Waiters>, BrokerError> {
        if let Some(n) = self.side.listening.lock().expect("not poisoned").get(queue) {
            return Ok(n.clone());
        }
        let row = self.work(S::CHANNEL, &[&queue]).await?.into_iter().next();
        let Some(channel) = row.and_then(|r| r.get::<_, Option<String>>(0)) else {
            return Err(BrokerError {
                kind: ErrorKind::NotFound,
                number: 0,
                message: format!("queue {queue} is not found"),
            });
        };
        let waiters = self.side.wakeups.of(&channel);
        // The channel name is ours (sb_queue_<id>), never user text.
        self.side.watch(
            self.side.client.batch_execute(&S::LISTEN.sql.replace("{channel}", &channel)).await.map_err(error_of),
        )?;
        self.side.listening.lock().expect("not poisoned").insert(queue.to_owned(), waiters.clone());
        Ok(waiters)
    }

    /// `WAITFOR (RECEIVE TOP (max) … FROM queue [WHERE conversation_group_id = group]),
    /// TIMEOUT wait`: the messages of one conversation group, waiting up to `wait` for
    /// one to become available; empty on timeout. Call inside a transaction: the group
    /// stays locked until it ends.
    pub async fn receive(
        &mut self,
        queue: &str,
        max: i32,
        group: Option<Uuid>,
        wait: Duration,
    ) -> Result<Vec<Message>, BrokerError> {
        let wake = self.wake_others;
        let handle: Option<Uuid> = None;
        let params: [&(dyn ToSql + Sync); 5] = [&queue, &max, &group, &handle, &wake];
        let marking = self.installed_arities().await?.receive_marking.then_some(S::RECEIVE_MARKING);
        let rows = self.wait_for(queue, wait, group.is_some(), S::RECEIVE, marking, &params, |r| !r.is_empty()).await?;
        Ok(self.messages(&rows))
    }

    /// Outside any transaction: waits up to `wait` for `queue` to have work (messages,
    /// or the queue disabled), as a receiver waits (marked, woken by the sends'
    /// notifications, every one of the queue's), without polling; whether it has.
    pub async fn wait_for_work(&mut self, queue: &str, wait: Duration) -> Result<bool, BrokerError> {
        let params: [&(dyn ToSql + Sync); 1] = [&queue];
        let has = |rows: &[Row]| rows.first().is_some_and(|r| r.get::<_, bool>(0));
        let rows = self.wait_for(queue, wait, true, S::QUEUE_HAS_WORK, None, &params, has).await?;
        Ok(has(&rows))
    }

    /// Runs the attempt `name` until `found` says it found something or `wait` has
    /// passed (then its last, empty, rows), waiting on the queue's notifications in
    /// between. Before it waits it marks itself waiting (`sb.begin_wait`, sent together
    /// with one more attempt); sends notify only while a receiver is marked (the protocol
    /// is in `001_broker.sql`, at `sb.wake`). When a send was in flight as it marked
    /// itself, it looks again after a short time (1 ms, doubling to 64 ms) instead of
    /// trusting the notification alone. When its last wait found the queue idle, it marks
    /// itself before its first look, so an idle queue costs one empty attempt, not two.
    ///
    /// With `marking` (the attempt's form that takes the mark, `sb.receive_marking`, when
    /// installed), the mark is taken, or dropped, by the attempt itself: one statement
    /// where two were, and a mark taken by an attempt that finds something is dropped
    /// by it too.
    ///
    /// It registers for the queue's wake-ups before each attempt, so a send that commits
    /// during it still wakes it; a wake-up meant for one session that it no longer needs
    /// (it found something) passes to another waiting session when it is dropped
    /// (tokio's `Notified`). A `restricted` attempt (one group or conversation) is woken
    /// by every notification of the queue instead.
    #[allow(clippy::too_many_arguments)]
    async fn wait_for(
        &mut self,
        queue: &str,
        wait: Duration,
        restricted: bool,
        name: Named,
        marking: Option<Named>,
        params: &[&(dyn ToSql + Sync)],
        found: fn(&[Row]) -> bool,
    ) -> Result<Vec<Row>, BrokerError> {
        const FIRST_LOOK: Duration = Duration::from_millis(1);
        const LAST_LOOK: Duration = Duration::from_millis(64);
        const MARK_NONE: i16 = 0;
        const MARK_DROP: i16 = 1;
        const MARK_TAKE: i16 = 2;
        let with_mark = |mark: &'static i16| -> Vec<&(dyn ToSql + Sync)> {
            let mut p = params.to_vec();
            p.push(mark);
            p
        };
        let queue_waiters = self.listen(queue).await?;
        let waiters = if restricted { &queue_waiters.restricted } else { &queue_waiters.any };
        let deadline = tokio::time::Instant::now() + wait;
        let mut look = FIRST_LOOK;
        let mut mark_first = self.idle && !wait.is_zero() && self.waiting.is_none();
        loop {
            let woken = waiters.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if !mark_first {
                let rows = match (self.waiting.take(), marking) {
                    // (The mark folded in only when it is this queue's: RECEIVE drops the
                    // mark of the queue it looks at.)
                    (Some(marked), Some(m)) if marked == queue => {
                        let rows = self.work(m, &with_mark(&MARK_DROP)).await;
                        if rows.is_err() {
                            // Perhaps still marked: dropped next time (a mark not held
                            // is dropped as a no-op).
                            self.waiting = Some(marked);
                        }
                        rows?
                    }
                    (Some(marked), _) => {
                        let (ended, rows) = self.work_pair(S::END_WAIT, &[&marked], name, params).await;
                        if ended.is_err() {
                            // Still marked: drop the mark next time.
                            self.waiting = Some(marked);
                        }
                        rows?
                    }
                    (None, Some(m)) => self.work(m, &with_mark(&MARK_NONE)).await?,
                    (None, None) => self.work(name, params).await?,
                };
                if found(&rows) {
                    return Ok(rows);
                }
                if tokio::time::Instant::now() >= deadline {
                    return Ok(rows);
                }
            }
            // About to wait: mark, and look (once more) after the mark is in place.
            mark_first = false;
            self.waiting = Some(queue.to_owned());
            let (no_send_in_flight, rows) = match marking {
                Some(m) => {
                    let rows = self.work(m, &with_mark(&MARK_TAKE)).await;
                    let mut rows = self.unmarked_on_error(rows).await?;
                    match gate_row(&mut rows) {
                        Some(gate_free) => (gate_free, rows),
                        None => {
                            // Found: the attempt dropped its mark.
                            self.waiting = None;
                            self.idle = false;
                            if found(&rows) {
                                return Ok(rows);
                            }
                            continue;
                        }
                    }
                }
                None => {
                    let (mark, rows) = self.work_pair(S::BEGIN_WAIT, &[&queue], name, params).await;
                    let rows = self.unmarked_on_error(rows).await?;
                    if found(&rows) {
                        self.idle = false;
                        // What it found is returned even if the mark cannot be dropped now
                        // (the caller must know what it received); the mark is then
                        // dropped by the next wait or the rollback.
                        let _ = self.end_wait().await;
                        return Ok(rows);
                    }
                    (single(mark?, "begin_wait")?.get::<_, bool>(0), rows)
                }
            };
            self.idle = true;
            let until = if no_send_in_flight {
                look = FIRST_LOOK;
                deadline
            } else {
                let t = (tokio::time::Instant::now() + look).min(deadline);
                look = (look * 2).min(LAST_LOOK);
                t
            };
            tokio::select! {
                biased;
                () = &mut woken => {}
                Err(_) = self.alive.changed() => {
                    return self.side.watch(Err(BrokerError {
                        kind: ErrorKind::Connection,
                        number: 0,
                        message: "the side connection (LISTEN, attempt counts) closed".into(),
                    }));
                }
                () = tokio::time::sleep_until(until) => {
                    if until >= deadline {
                        self.end_wait().await?;
                        return Ok(rows);
                    }
                }
            }
        }
    }

    /// Drops the session's waiting mark, if it has one (kept, to be dropped later, if
    /// that fails).
    async fn end_wait(&mut self) -> Result<(), BrokerError> {
        if let Some(marked) = self.waiting.take() {
            if let Err(e) = self.work(S::END_WAIT, &[&marked]).await {
                self.waiting = Some(marked);
                return Err(e);
            }
        }
        Ok(())
    }

    /// `rows`, or its error after trying to drop the mark just taken: a mark must not
    /// outlive the wait (while it is held every send to the queue notifies). In a
    /// transaction the error aborted, the rollback drops it.
    async fn unmarked_on_error(&mut self, rows: Result<Vec<Row>, BrokerError>) -> Result<Vec<Row>, BrokerError> {
        if rows.is_err() {
            let _ = self.end_wait().await;
        }
        rows
    }

    /// Rows of `receive` as messages, noted as received in this transaction.
    fn messages(&mut self, rows: &[Row]) -> Vec<Message> {
        let msgs: Vec<Message> = rows
            .iter()
            .map(|r| Message {
                id: r.get(0),
                conversation_group_id: r.get(1),
                conversation_handle: r.get(2),
                sequence: r.get(3),
                message_type: r.get(4),
                body: r.get::<_, Option<Vec<u8>>>(5).unwrap_or_default(),
                service: r.get(6),
                contract: r.get(7),
            })
            .collect();
        self.received.extend(msgs.iter().map(|m| (m.conversation_group_id, m.id)));
        msgs
    }

    /// One RECEIVE attempt, without waiting.
    async fn receive_now(
        &mut self,
        queue: &str,
        max: i32,
        group: Option<Uuid>,
        handle: Option<Uuid>,
    ) -> Result<Vec<Message>, BrokerError> {
        let wake = self.wake_others;
        let rows = self.work(S::RECEIVE, &[&queue, &max, &group, &handle, &wake]).await?;
        Ok(self.messages(&rows))
    }

    /// `RECEIVE … FROM queue WHERE conversation_handle = handle`: what is left of one
    /// conversation, without waiting.
    pub async fn receive_conversation(&mut self, queue: &str, handle: Uuid) -> Result<Vec<Message>, BrokerError> {
        self.receive_conversation_taking(queue, handle, i32::MAX).await
    }

    /// `RECEIVE TOP (max) … FROM queue WHERE conversation_handle = handle`: at most `max`
    /// of what is left of one conversation, the rest staying queued.
    pub async fn receive_conversation_taking(
        &mut self,
        queue: &str,
        handle: Uuid,
        max: i32,
    ) -> Result<Vec<Message>, BrokerError> {
        self.receive_now(queue, max, None, Some(handle)).await
    }

    /// `[WAITFOR (] GET CONVERSATION GROUP @g FROM queue [), TIMEOUT wait]`.
    pub async fn get_conversation_group(&mut self, queue: &str, wait: Duration) -> Result<Option<Uuid>, BrokerError> {
        let rows = self
            .wait_for(queue, wait, false, S::GET_CONVERSATION_GROUP, None, &[&queue], |r| {
                r.first().is_some_and(|r| r.get::<_, Option<Uuid>>(0).is_some())
            })
            .await?;
        Ok(single(rows, S::GET_CONVERSATION_GROUP.name)?.get(0))
    }

    /// `BEGIN DIALOG @h FROM SERVICE from TO SERVICE 'to' ON CONTRACT contract [WITH
    /// RELATED_CONVERSATION_GROUP = g, LIFETIME = s]`.
    pub async fn begin_dialog(
        &mut self,
        from: &str,
        to: &str,
        contract: &str,
        related_group: Option<Uuid>,
        lifetime_seconds: Option<i32>,
    ) -> Result<Uuid, BrokerError> {
        let rows = self.work(S::BEGIN_DIALOG, &[&from, &to, &contract, &related_group, &lifetime_seconds]).await?;
        Ok(single(rows, S::BEGIN_DIALOG.name)?.get(0))
    }

    /// `SEND ON CONVERSATION handle MESSAGE TYPE t (body)`.
    pub async fn send(&mut self, handle: Uuid, message_type: &str, body: Option<&[u8]>) -> Result<(), BrokerError> {
        self.work(S::SEND, &[&handle, &message_type, &body]).await?;
        Ok(())
    }

    /// `END CONVERSATION handle [WITH ERROR = code DESCRIPTION = text]`.
    /// END CONVERSATION … WITH CLEANUP: this side's endpoint and its messages go; the
    /// other side is not told.
    pub async fn end_conversation_cleanup(&mut self, handle: Uuid) -> Result<(), BrokerError> {
        self.work(S::END_CONVERSATION_CLEANUP, &[&handle]).await?;
        Ok(())
    }

    pub async fn end_conversation(&mut self, handle: Uuid, error: Option<(i32, &str)>) -> Result<(), BrokerError> {
        let (code, text) = error.map_or((None, None), |(c, t)| (Some(c), Some(t)));
        self.work(S::END_CONVERSATION, &[&handle, &code, &text]).await?;
        Ok(())
    }

    /// `BEGIN CONVERSATION TIMER (handle) TIMEOUT = seconds`: a DialogTimer message on
    /// this side's queue once the timeout has passed (a new call sets a new timeout).
    pub async fn begin_conversation_timer(&mut self, handle: Uuid, timeout_seconds: i32) -> Result<(), BrokerError> {
        self.work(S::BEGIN_CONVERSATION_TIMER, &[&handle, &timeout_seconds]).await?;
        Ok(())
    }

    /// `MOVE CONVERSATION handle TO group`.
    pub async fn move_conversation(&mut self, handle: Uuid, group: Uuid) -> Result<(), BrokerError> {
        self.work(S::MOVE_CONVERSATION, &[&handle, &group]).await?;
        Ok(())
    }
}

/// Opens PostgreSQL broker sessions on one database. Its sessions share one side
/// connection (wake-ups, attempt counts): n readers take n + 1 connections. When the
/// side's connection breaks, the sessions using it fail and the next one opened makes
/// a new side.
#[derive(Clone)]
pub struct PostgresTransport {
    /// The database, resolved once: the connection string parsed and the TLS connector
    /// built (or why not: every `open` then fails with it).
    at: Result<Endpoint, BrokerError>,
    side: std::sync::Arc<tokio::sync::Mutex<Option<std::sync::Arc<Side>>>>,
}

impl std::fmt::Debug for PostgresTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresTransport").field("at", &self.at).finish()
    }
}

impl PostgresTransport {
    /// `url`: a libpq-style URL or key=value connection string, resolved here once; a
    /// string that cannot be used fails every `open` saying why.
    pub fn new(url: impl AsRef<str>) -> Self {
        Self { at: endpoint(url.as_ref()), side: Default::default() }
    }

    /// On an endpoint resolved at the edge (the command line checks it at start-up).
    pub fn at(at: Endpoint) -> Self {
        Self { at: Ok(at), side: Default::default() }
    }

    fn endpoint(&self) -> Result<&Endpoint, BrokerError> {
        self.at.as_ref().map_err(Clone::clone)
    }

    /// The side connection its sessions share, opened (again) when there is none or
    /// its connection closed.
    async fn shared_side(&self) -> Result<std::sync::Arc<Side>, BrokerError> {
        let mut side = self.side.lock().await;
        match side.as_ref() {
            Some(s) if !s.is_closed() => Ok(s.clone()),
            _ => {
                let s = std::sync::Arc::new(Side::open_at(self.endpoint()?).await?);
                *side = Some(s.clone());
                Ok(s)
            }
        }
    }
}

fn key_arrays(keys: &[MessageKey]) -> (Vec<Uuid>, Vec<i64>) {
    keys.iter().map(|k| (k.conversation_handle, k.sequence)).unzip()
}

impl Transport for PostgresTransport {
    type Session = Session;

    /// A worker's session: its reader comes straight back to RECEIVE after each commit,
    /// so it serves what is left in a group itself instead of waking the others.
    async fn open(&self) -> Result<Session, BrokerError> {
        let mut s = Session::open_at(self.endpoint()?, self.shared_side().await?).await?;
        s.wake_others = false;
        Ok(s)
    }

    fn describe(&self) -> String {
        match &self.at {
            Ok(at) => format!("postgres {} ({})", at.masked(), at.tls().describe()),
            Err(e) => format!("postgres ({})", e.message),
        }
    }

    fn poison_handling_off(&self, queue: &str) -> String {
        format!("SELECT sb.alter_queue('{}', p_poison_handling => false)", queue.replace('\'', "''"))
    }
}

impl transport::Session for Session {
    async fn begin(&mut self) -> Result<(), BrokerError> {
        Session::begin(self).await
    }

    async fn wait_for_work(&mut self, queue: &str, wait: Duration) -> Result<bool, BrokerError> {
        Session::wait_for_work(self, queue, wait).await
    }

    async fn commit(&mut self) -> Result<(), BrokerError> {
        Session::commit(self).await
    }

    async fn rollback(&mut self) -> Result<bool, BrokerError> {
        Session::rollback(self).await
    }

    async fn receive(
        &mut self,
        queue: &str,
        max: i32,
        group: Option<Uuid>,
        wait: Duration,
    ) -> Result<Vec<Message>, BrokerError> {
        Session::receive(self, queue, max, group, wait).await
    }

    async fn receive_conversation(&mut self, queue: &str, handle: Uuid) -> Result<Vec<Message>, BrokerError> {
        Session::receive_conversation(self, queue, handle).await
    }

    async fn send(&mut self, handle: Uuid, message_type: &str, body: Option<&[u8]>) -> Result<(), BrokerError> {
        Session::send(self, handle, message_type, body).await
    }

    async fn end_conversation(&mut self, handle: Uuid, error: Option<(i32, &str)>) -> Result<(), BrokerError> {
        Session::end_conversation(self, handle, error).await
    }

    async fn move_conversation(&mut self, handle: Uuid, group: Uuid) -> Result<(), BrokerError> {
        Session::move_conversation(self, handle, group).await
    }

    async fn get_conversation_group(&mut self, queue: &str, wait: Duration) -> Result<Option<Uuid>, BrokerError> {
        Session::get_conversation_group(self, queue, wait).await
    }

    async fn count_attempts(&mut self, queue: &str, keys: &[MessageKey]) -> Result<Vec<Attempt>, BrokerError> {
        let (handles, seqs) = key_arrays(keys);
        // On the side connection: it is never inside a transaction, so the count
        // commits at once and survives whatever happens to the receiving transaction.
        let rows = self.side(S::COUNT_ATTEMPTS, &[&queue, &handles, &seqs]).await?;
        Ok(rows
            .iter()
            .map(|r| Attempt {
                key: MessageKey { conversation_handle: r.get(0), sequence: r.get(1) },
                attempts: r.get(2),
                last_error: r.get(3),
                failures: r.get(4),
                transient_failures: r.get(5),
            })
            .collect())
    }

    async fn note_failure(&mut self, keys: &[MessageKey], error: &str, fault: Fault) -> Result<(), BrokerError> {
        let (handles, seqs) = key_arrays(keys);
        let transient = fault == Fault::Transient;
        self.side(S::NOTE_FAILURE, &[&handles, &seqs, &error, &transient]).await?;
        Ok(())
    }

    /// Kept, and sent with the COMMIT in the same round trip, inside the transaction
    /// still (`Session::commit`): a rollback forgets nothing.
    async fn forget_attempts(&mut self, keys: &[MessageKey]) -> Result<(), BrokerError> {
        self.forget.extend_from_slice(keys);
        Ok(())
    }

    async fn dead_letter(&mut self, l: DeadLetter<'_>) -> Result<(), BrokerError> {
        let m = l.message;
        let body = (!m.body.is_empty()).then_some(m.body.as_slice());
        self.work(
            S::DEAD_LETTER,
            &[
                &l.queue,
                &m.service,
                &m.contract,
                &m.conversation_group_id,
                &m.conversation_handle,
                &m.sequence,
                &m.message_type,
                &body,
                &l.attempts,
                &l.reason,
            ],
        )
        .await?;
        Ok(())
    }

    async fn queue_state(&mut self, queue: &str) -> Result<QueueState, BrokerError> {
        let Some(row) = self.side(S::QUEUE_STATE, &[&queue]).await?.into_iter().next() else {
            return Err(BrokerError {
                kind: ErrorKind::NotFound,
                number: 0,
                message: format!("queue {queue} is not found"),
            });
        };
        // An install before sb.queue_max_readers has no database limit to say (42883).
        let max_readers = match self.side.client.query_opt(S::QUEUE_MAX_READERS.sql, &[&queue]).await {
            Ok(r) => r.and_then(|r| r.get::<_, Option<i32>>(0)).and_then(|n| u32::try_from(n).ok()).filter(|&n| n > 0),
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_FUNCTION) => None,
            Err(e) => return self.side.watch(Err(error_of(e))),
        };
        Ok(QueueState { enabled: row.get(0), messages: row.get(1), poison_handling: row.get(2), max_readers })
    }

    async fn take_reader_slot(&mut self, queue: &str, slots: u32) -> Result<Option<u32>, BrokerError> {
        for slot in 0..i32::try_from(slots).unwrap_or(i32::MAX) {
            let row = self.client.query_one(S::TAKE_READER_SLOT.sql, &[&queue, &slot]).await.map_err(error_of)?;
            if row.get::<_, bool>(0) {
                return Ok(Some(slot.unsigned_abs()));
            }
        }
        Ok(None)
    }

    async fn free_reader_slot(&mut self, queue: &str, slot: u32) -> Result<(), BrokerError> {
        let slot = i32::try_from(slot).unwrap_or(i32::MAX);
        self.client.query_one(S::FREE_READER_SLOT.sql, &[&queue, &slot]).await.map_err(error_of)?;
        Ok(())
    }

    async fn heartbeat(&mut self, b: &transport::Heartbeat) -> Result<(), BrokerError> {
        self.heartbeat_as(b, b.version, &b.queues_json()).await
    }

    async fn heartbeat_end(&mut self, instance: Uuid) -> Result<(), BrokerError> {
        self.side.watch(self.side.client.query(O::HEARTBEAT_END.sql, &[&instance]).await.map_err(error_of))?;
        Ok(())
    }
}

impl transport::PayrollStore for Session {
    async fn claim_version(
        &mut self,
        dienstverband_id: i32,
        periode_id: i32,
        versie: i64,
    ) -> Result<bool, BrokerError> {
        Ok(!self.work(S::CLAIM_VERSION, &[&dienstverband_id, &periode_id, &versie]).await?.is_empty())
    }

    async fn store_antwoord(
        &mut self,
        handle: Uuid,
        a: &crate::contract::Antwoord,
        superseded: bool,
    ) -> Result<transport::Stored, BrokerError> {
        use transport::Stored;
        let kaart: Vec<i32> = a.mutaties.iter().map(|m| m.kaart_soort).collect();
        let codes: Vec<&str> = a.mutaties.iter().map(|m| m.loonfactor_code.as_str()).collect();
        let waarden: Vec<String> = a.mutaties.iter().map(|m| m.waarde.to_string()).collect();
        // The warnings for payroll, as JSON (the superseded marker is none); NULL for none.
        let warnings: Vec<serde_json::Value> = a
            .waarschuwingen
            .iter()
            .filter(|w| w.code != crate::contract::VERVANGEN)
            .map(|w| serde_json::json!({"code": w.code.as_str(), "tekst": w.tekst.as_str()}))
            .collect();
        let warnings = (!warnings.is_empty()).then(|| serde_json::Value::Array(warnings).to_string());
        let params: [&(dyn ToSql + Sync); 11] = [
            &handle,
            &a.id,
            &a.dienstverband_id,
            &a.periode_id,
            &a.versie,
            &superseded,
            &kaart,
            &codes,
            &waarden,
            &a.rekenversie,
            &warnings,
        ];
        // Against an install of the release before (workers first): without warnings.
        let rows = if self.installed_arities().await?.store_warnings {
            self.work(S::STORE_ANTWOORD, &params).await?
        } else {
            self.work(S::STORE_ANTWOORD_V1, &params[..10]).await?
        };
        let row = single(rows, S::STORE_ANTWOORD.name)?;
        Ok(match row.get::<_, &str>(0) {
            "opgeslagen" => Stored::Stored,
            "verouderd" => Stored::Older,
            _ => Stored::Superseded,
        })
    }

    async fn record_fout(&mut self, handle: Uuid, message: &str, repairable: bool) -> Result<(), BrokerError> {
        self.work(S::RECORD_FOUT, &[&handle, &message, &repairable]).await?;
        Ok(())
    }

    async fn record_request_fout(&mut self, handle: Uuid, message: &str, repairable: bool) -> Result<(), BrokerError> {
        self.work(S::RECORD_REQUEST_FOUT, &[&handle, &message, &repairable]).await?;
        Ok(())
    }

    async fn dialog_idle(&mut self, handle: Uuid) -> Result<bool, BrokerError> {
        let rows = self.work(S::DIALOG_IDLE, &[&handle]).await?;
        Ok(single(rows, S::DIALOG_IDLE.name)?.get(0))
    }
}
