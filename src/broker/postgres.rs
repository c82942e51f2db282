//! The PostgreSQL broker: its install scripts and a session over tokio-postgres.
//!
//! A session has a connection for the work (begin, receive, send, end, commit) and uses
//! a side connection that LISTENs, so that a waiting receive wakes as soon as a send to
//! its queue commits (notifications are delivered to a session, so the listener must be
//! a connection of its own), and that writes the attempt counts outside the transaction.
//! A worker's sessions share one side. Sends notify only while a receiver is marked
//! waiting; the working connection marks itself before it waits (`sb.begin_wait`).

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::watch;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Client, NoTls, Row, Statement};
use uuid::Uuid;

use super::{BrokerError, ErrorKind, Message};
use crate::sql::Named;
use crate::transport::{self, Attempt, DeadLetter, Fault, MessageKey, QueueState, Transport};

/// The install scripts, in order: (version, SQL).
pub const SCRIPTS: &[(i32, &str)] = &[
    (1, include_str!("../../broker/postgres/001_broker.sql")),
    (2, include_str!("../../broker/postgres/002_worker.sql")),
    (3, include_str!("../../broker/postgres/003_calculation.sql")),
];

/// The roster schema and its triggers (the sending side of the pipeline) and the
/// housekeeping that goes with it: installed on request, for databases that hold the
/// roster itself (the demo, the tests).
pub const ROSTER_SCRIPTS: &[(i32, &str)] = &[
    (4, include_str!("../../broker/postgres/004_roster.sql")),
    (5, include_str!("../../broker/postgres/005_housekeeping.sql")),
];

/// The stamp an install writes for the broker's scripts (`part` "broker") or the
/// roster's ("roster"): this version and a hash of the scripts.
pub fn stamp(part: &str) -> String {
    let scripts = if part == "roster" { ROSTER_SCRIPTS } else { SCRIPTS };
    crate::sql::stamp(&scripts.iter().map(|(_, s)| *s).collect::<Vec<_>>())
}

/// The statements this transport sends (`broker/postgres/statements/session.sql`).
use crate::sql::statements::postgres_session as S;
use crate::sql::statements::postgres_stamp;

/// The one row a `SELECT function(…)` statement returns.
fn single(rows: Vec<Row>, name: &str) -> Result<Row, BrokerError> {
    rows.into_iter().next().ok_or_else(|| BrokerError {
        kind: ErrorKind::Other,
        number: 0,
        message: format!("statement {name} returned no row"),
    })
}

/// A PostgreSQL error as the broker sees it: its kind and SQL Server's number.
pub fn error_of(e: tokio_postgres::Error) -> BrokerError {
    error_of_ref(&e)
}

/// [`error_of`], for an error still needed afterwards.
pub fn error_of_ref(e: &tokio_postgres::Error) -> BrokerError {
    let Some(db) = e.as_db_error() else {
        return BrokerError { kind: ErrorKind::Connection, number: 0, message: with_causes(e) };
    };
    let code = db.code().code();
    let (kind, number) = match code {
        // The environment's faults (docs/retries.md): retried, never held against the
        // message. Deadlock, serialization failure, lock timeout, a statement cancelled
        // (statement_timeout, pg_cancel_backend), insufficient resources (class 53: out of
        // memory, disk full, too many connections).
        "40P01" => (ErrorKind::Retryable, 1205),
        "40001" => (ErrorKind::Retryable, 1205),
        "55P03" => (ErrorKind::Retryable, 1222),
        "57014" => (ErrorKind::Retryable, 0),
        c if c.starts_with("53") => (ErrorKind::Retryable, 0),
        "SB617" => (ErrorKind::QueueDisabled, 9617),
        "SB426" => (ErrorKind::ConversationNotFound, 8426),
        "SB429" => (ErrorKind::InvalidState, 8429),
        "SB431" => (ErrorKind::ContractViolation, 8431),
        "SB432" => (ErrorKind::ContractViolation, 8432),
        "SB615" => (ErrorKind::Validation, 9615),
        "SB404" | "SB424" | "SB425" | "SB409" => (ErrorKind::NotFound, 0),
        // Connection exceptions, and the server shutting down or restarting (admin,
        // crash, cannot connect now) or ending an idle session.
        c if c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03" | "57P05") => (ErrorKind::Connection, 0),
        _ => (ErrorKind::Other, 0),
    };
    BrokerError { kind, number, message: db.message().to_owned() }
}

/// `e` followed by its causes ("error connecting to server: Connection refused (os error
/// 111)"): tokio-postgres' own text leaves the cause out.
fn with_causes(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let c_text = c.to_string();
        if !text.ends_with(&c_text) {
            text.push_str(": ");
            text.push_str(&c_text);
        }
        cause = c.source();
    }
    text
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

/// Connects, driving the connection on a task; notifications go to `notify`.
async fn connect(url: &str, notify: Option<watch::Sender<u64>>) -> Result<Client, BrokerError> {
    // Read here rather than by tokio_postgres::connect, whose complaints can quote a part
    // of the string (a password).
    let config = crate::connstr::postgres_config(url).map_err(|e| BrokerError {
        kind: ErrorKind::Connection,
        number: 0,
        message: e.to_string(),
    })?;
    let (client, mut conn) = config.connect(NoTls).await.map_err(error_of)?;
    tokio::spawn(async move {
        let mut stream = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(msg)) = stream.next().await {
            if let (AsyncMessage::Notification(_), Some(tx)) = (msg, notify.as_ref()) {
                tx.send_modify(|n| *n += 1);
            }
        }
    });
    Ok(client)
}

/// Installs (or brings up to date) the broker in the database at `url`. Each script is
/// idempotent and runs in a transaction of its own.
pub async fn install(url: &str) -> Result<Vec<i32>, BrokerError> {
    install_with(url, false).await
}

/// [`install`], plus the roster schema when `roster` is set.
pub async fn install_with(url: &str, roster: bool) -> Result<Vec<i32>, BrokerError> {
    let client = connect(url, None).await?;
    let mut applied = Vec::new();
    let extra = if roster { ROSTER_SCRIPTS } else { &[] };
    for (version, sql) in SCRIPTS.iter().chain(extra) {
        client
            .batch_execute(&format!("BEGIN;\nSET LOCAL client_min_messages = warning;\n{sql}\nCOMMIT;"))
            .await
            .map_err(error_of)?;
        applied.push(*version);
    }
    for part in ["broker"].into_iter().chain(roster.then_some("roster")) {
        client.execute(postgres_stamp::RECORD_STAMP.sql, &[&part, &stamp(part)]).await.map_err(error_of)?;
    }
    Ok(applied)
}

/// The statements that run on the side connection, prepared when it opens.
const SIDE_STATEMENTS: [Named; 3] = [S::COUNT_ATTEMPTS, S::NOTE_FAILURE, S::QUEUE_STATE];

/// The side connection: never in a transaction, it LISTENs for the queues' wake-ups and
/// writes what must outlive a rollback (attempt counts, failure notes). One side serves
/// one session ([`Session::open`]) or every session of a [`PostgresTransport`], whose
/// readers then cost one connection each plus one in all. tokio-postgres pipelines the
/// queries of sessions sharing it on the one connection; none of them waits for a lock
/// a session's open transaction holds (a message's count is written only by the
/// transaction that received it, and while no transaction holds the message).
pub struct Side {
    client: Client,
    wakeups: watch::Receiver<u64>,
    /// The queues LISTENed for (LISTEN twice is harmless: two sessions may race here).
    listening: std::sync::Mutex<Vec<String>>,
    statements: HashMap<&'static str, Statement>,
    /// Set when a query on it failed for its connection: it is not handed out again.
    broken: std::sync::atomic::AtomicBool,
}

impl Side {
    /// Connects the side connection and prepares its statements.
    pub async fn open(url: &str) -> Result<Self, BrokerError> {
        let (tx, rx) = watch::channel(0u64);
        let client = connect(url, Some(tx)).await?;
        // What the side writes (attempt counts, failure notes) commits without
        // waiting for the WAL flush: such a commit survives a crash of the worker (the
        // server writes it out within wal_writer_delay), and the receiving transaction's
        // own synchronous commit flushes it first. Only a crash of PostgreSQL itself can
        // lose a count, of an attempt whose transaction it rolled back too. One flush per
        // message instead of two.
        client.batch_execute(S::SIDE_ASYNC_COMMIT.sql).await.map_err(error_of)?;
        let mut statements = HashMap::new();
        for named in SIDE_STATEMENTS {
            statements.insert(named.name, client.prepare(named.sql).await.map_err(error_of)?);
        }
        Ok(Self {
            client,
            wakeups: rx,
            listening: std::sync::Mutex::new(Vec::new()),
            statements,
            broken: Default::default(),
        })
    }

    /// Whether its connection has closed (a new one is needed).
    pub fn is_closed(&self) -> bool {
        self.broken.load(std::sync::atomic::Ordering::Relaxed) || self.client.is_closed()
    }

    /// Marks it broken when `result` failed for the connection.
    fn watch<T>(&self, result: Result<T, BrokerError>) -> Result<T, BrokerError> {
        if let Err(e) = &result
            && e.kind == ErrorKind::Connection
        {
            self.broken.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        result
    }
}

/// One broker session: a working connection, and a side connection of its own or
/// shared with other sessions.
pub struct Session {
    client: Client,
    side: std::sync::Arc<Side>,
    wakeups: watch::Receiver<u64>,
    /// Ids of messages received in the open transaction (for poison counting).
    received: Vec<i64>,
    /// Prepared statements of the working connection.
    client_stmts: HashMap<&'static str, Statement>,
    /// The queue this session is marked as waiting on (`sb.begin_wait`), if any.
    waiting: Option<String>,
    /// Whether a RECEIVE that leaves messages in its group wakes the other receivers
    /// (`sb.receive`'s p_wake): yes for a T-SQL client, no for a worker's reader.
    wake_others: bool,
}

impl Session {
    /// Opens a session on the database at `url` (a libpq-style URL or key=value string),
    /// with a side connection of its own.
    pub async fn open(url: &str) -> Result<Self, BrokerError> {
        let side = std::sync::Arc::new(Side::open(url).await?);
        Self::open_with(url, side).await
    }

    /// Opens a session that uses `side` for what runs outside its transactions.
    pub async fn open_with(url: &str, side: std::sync::Arc<Side>) -> Result<Self, BrokerError> {
        let client = connect(url, None).await?;
        Ok(Self {
            client,
            wakeups: side.wakeups.clone(),
            side,
            received: Vec::new(),
            client_stmts: HashMap::new(),
            waiting: None,
            wake_others: true,
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

    /// The working connection, for the caller's own statements in the same transaction.
    pub fn client(&self) -> &Client {
        &self.client
    }

    pub async fn begin(&mut self) -> Result<(), BrokerError> {
        self.received.clear();
        self.client.batch_execute("BEGIN").await.map_err(error_of)
    }

    pub async fn commit(&mut self) -> Result<(), BrokerError> {
        self.received.clear();
        self.client.batch_execute("COMMIT").await.map_err(error_of)
    }

    /// Rolls back; when the transaction had received messages, reports the rollback to
    /// the broker in a transaction of its own (poison detection). Returns whether that
    /// disabled the queue.
    pub async fn rollback(&mut self) -> Result<bool, BrokerError> {
        self.client.batch_execute("ROLLBACK").await.map_err(error_of)?;
        let ids = std::mem::take(&mut self.received);
        if ids.is_empty() {
            return Ok(false);
        }
        Ok(single(self.work(S::NOTE_ROLLBACK, &[&ids]).await?, "note_rollback")?.get(0))
    }

    async fn listen(&mut self, queue: &str) -> Result<(), BrokerError> {
        if self.side.listening.lock().expect("not poisoned").iter().any(|q| q == queue) {
            return Ok(());
        }
        let row = self.work(S::CHANNEL, &[&queue]).await?.into_iter().next();
        let Some(channel) = row.and_then(|r| r.get::<_, Option<String>>(0)) else {
            return Err(BrokerError {
                kind: ErrorKind::NotFound,
                number: 0,
                message: format!("queue {queue} is not found"),
            });
        };
        // The channel name is ours (sb_queue_<id>), never user text.
        self.side.watch(self.side.client.batch_execute(&format!("LISTEN {channel}")).await.map_err(error_of))?;
        self.side.listening.lock().expect("not poisoned").push(queue.to_owned());
        Ok(())
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
        let rows =
            self.wait_for(queue, wait, S::RECEIVE, &[&queue, &max, &group, &handle, &wake], |r| !r.is_empty()).await?;
        Ok(self.messages(&rows))
    }

    /// Runs the attempt `name` until `found` says it found something or `wait` has
    /// passed (then its last, empty, rows), waiting on the queue's notifications in
    /// between. Before it waits it marks itself waiting (`sb.begin_wait`, sent together
    /// with one more attempt); sends notify only while a receiver is marked (the protocol
    /// is in `001_broker.sql`, at `sb.wake`). When a send was in flight as it marked
    /// itself, it looks again after a short time (1 ms, doubling to 64 ms) instead of
    /// trusting the notification alone.
    async fn wait_for(
        &mut self,
        queue: &str,
        wait: Duration,
        name: Named,
        params: &[&(dyn ToSql + Sync)],
        found: fn(&[Row]) -> bool,
    ) -> Result<Vec<Row>, BrokerError> {
        const FIRST_LOOK: Duration = Duration::from_millis(1);
        const LAST_LOOK: Duration = Duration::from_millis(64);
        self.listen(queue).await?;
        let deadline = tokio::time::Instant::now() + wait;
        let mut look = FIRST_LOOK;
        loop {
            // Taken before the attempt, so a send that commits during it still wakes us.
            self.wakeups.borrow_and_update();
            let rows = match self.waiting.take() {
                Some(marked) => {
                    let (ended, rows) = self.work_pair(S::END_WAIT, &[&marked], name, params).await;
                    if ended.is_err() {
                        // Still marked: drop the mark next time.
                        self.waiting = Some(marked);
                    }
                    rows?
                }
                None => self.work(name, params).await?,
            };
            if found(&rows) {
                return Ok(rows);
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(rows);
            }
            // About to wait: mark, and look once more after the mark is in place.
            self.waiting = Some(queue.to_owned());
            let (mark, rows) = self.work_pair(S::BEGIN_WAIT, &[&queue], name, params).await;
            let rows = rows?;
            if found(&rows) {
                self.end_wait().await?;
                return Ok(rows);
            }
            let no_send_in_flight = single(mark?, "begin_wait")?.get::<_, bool>(0);
            let until = if no_send_in_flight {
                look = FIRST_LOOK;
                deadline
            } else {
                let t = (tokio::time::Instant::now() + look).min(deadline);
                look = (look * 2).min(LAST_LOOK);
                t
            };
            match tokio::time::timeout_at(until, self.wakeups.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    return self.side.watch(Err(BrokerError {
                        kind: ErrorKind::Connection,
                        number: 0,
                        message: "the side connection (LISTEN, attempt counts) closed".into(),
                    }));
                }
                Err(_) if until < deadline => {}
                Err(_) => {
                    self.end_wait().await?;
                    return Ok(rows);
                }
            }
        }
    }

    /// Drops the session's waiting mark, if it has one.
    async fn end_wait(&mut self) -> Result<(), BrokerError> {
        if let Some(marked) = self.waiting.take() {
            self.work(S::END_WAIT, &[&marked]).await?;
        }
        Ok(())
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
        self.received.extend(msgs.iter().map(|m| m.id));
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
        self.receive_now(queue, i32::MAX, None, Some(handle)).await
    }

    /// `[WAITFOR (] GET CONVERSATION GROUP @g FROM queue [), TIMEOUT wait]`.
    pub async fn get_conversation_group(&mut self, queue: &str, wait: Duration) -> Result<Option<Uuid>, BrokerError> {
        let rows = self
            .wait_for(queue, wait, S::GET_CONVERSATION_GROUP, &[&queue], |r| {
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
    url: String,
    side: std::sync::Arc<tokio::sync::Mutex<Option<std::sync::Arc<Side>>>>,
}

impl std::fmt::Debug for PostgresTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresTransport").field("url", &crate::connstr::mask(&self.url)).finish()
    }
}

impl PostgresTransport {
    /// `url`: a libpq-style URL or key=value connection string.
    pub fn new(url: impl Into<String>) -> Self {
        Self { url: url.into(), side: Default::default() }
    }

    /// The side connection its sessions share, opened (again) when there is none or
    /// its connection closed.
    async fn shared_side(&self) -> Result<std::sync::Arc<Side>, BrokerError> {
        let mut side = self.side.lock().await;
        match side.as_ref() {
            Some(s) if !s.is_closed() => Ok(s.clone()),
            _ => {
                let s = std::sync::Arc::new(Side::open(&self.url).await?);
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
        let mut s = Session::open_with(&self.url, self.shared_side().await?).await?;
        s.wake_others = false;
        Ok(s)
    }

    fn describe(&self) -> String {
        format!("postgres {}", crate::connstr::mask(&self.url))
    }

    fn poison_handling_off(&self, queue: &str) -> String {
        format!("SELECT sb.alter_queue('{}', p_poison_handling => false)", queue.replace('\'', "''"))
    }
}

impl transport::Session for Session {
    async fn begin(&mut self) -> Result<(), BrokerError> {
        Session::begin(self).await
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

    async fn forget_attempts(&mut self, keys: &[MessageKey]) -> Result<(), BrokerError> {
        let (handles, seqs) = key_arrays(keys);
        self.work(S::FORGET_ATTEMPTS, &[&handles, &seqs]).await?;
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
        Ok(QueueState { enabled: row.get(0), messages: row.get(1), poison_handling: row.get(2) })
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
        let rows = self
            .work(
                S::STORE_ANTWOORD,
                &[&handle, &a.id, &a.dienstverband_id, &a.periode_id, &a.versie, &superseded, &kaart, &codes, &waarden],
            )
            .await?;
        let row = single(rows, S::STORE_ANTWOORD.name)?;
        Ok(match row.get::<_, &str>(0) {
            "opgeslagen" => Stored::Stored,
            "verouderd" => Stored::Older,
            _ => Stored::Superseded,
        })
    }

    async fn record_fout(&mut self, handle: Uuid, message: &str) -> Result<(), BrokerError> {
        self.work(S::RECORD_FOUT, &[&handle, &message]).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_connection_error_names_its_cause() {
        // A port nobody listens on: bound, then released.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("host=127.0.0.1 port={port} user=x dbname=x connect_timeout=5");
        let e = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.err().expect("nothing listens");
        let b = super::error_of(e);
        assert_eq!(b.kind, super::ErrorKind::Connection);
        assert!(b.message.contains("refused"), "{}", b.message);
    }
}
