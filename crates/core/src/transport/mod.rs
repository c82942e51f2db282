//! The seam between the worker and a broker: a [`Transport`] opens [`Session`]s, and a
//! session speaks Service Broker (begin, receive one group, send, end, move, commit,
//! rollback) plus the worker's own bookkeeping (attempt counts, dead letters, queue
//! state). The worker is written once against these traits; each back end implements
//! them (the PostgreSQL broker, and SQL Server over TDS: `crate::broker`), and maps its
//! errors to [`BrokerError`] in exactly one function.

use std::future::Future;
use std::time::Duration;

use uuid::Uuid;

pub mod message;
pub mod payroll;

pub use message::{BrokerError, ErrorKind, Message, system};
/// The Vraag contract version this build reads (for the heartbeat).
/// Which database of a deployment an install puts in (`sbworker install --side`; on
/// SQL Server the sqlcmd variable `Side`). `Both` is one database holding the whole
/// pipeline; in the seed's topology the roster's database (`Roster`: the roster, its
/// triggers, the collector's DataService, results, log, hand-off, sweep) and the
/// calculation's (`Calc`: RekenService and its worker's bookkeeping) are installed apart,
/// on one server or two (docs/sqlserver.md, "Two databases, two servers").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Side {
    /// Both sides in one database (the default).
    #[default]
    Both,
    /// The roster's database: the dialogs' initiator and the answers.
    Roster,
    /// The calculation's database: the calculation's service and queue.
    Calc,
}

impl Side {
    /// Every side, in the order the docs name them.
    pub const ALL: [Side; 3] = [Side::Both, Side::Roster, Side::Calc];

    /// The value of the sqlcmd variable (`both`, `roster`, `calc`).
    pub fn name(self) -> &'static str {
        match self {
            Side::Both => "both",
            Side::Roster => "roster",
            Side::Calc => "calc",
        }
    }

    /// Whether this side holds the roster's part (the collector, results, roster).
    pub fn has_roster(self) -> bool {
        self != Side::Calc
    }

    /// Whether this side holds the calculation's part (RekenService and its queue).
    pub fn has_calc(self) -> bool {
        self != Side::Roster
    }
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Side {
    type Err = String;

    fn from_str(s: &str) -> Result<Side, String> {
        Side::ALL
            .into_iter()
            .find(|side| side.name() == s)
            .ok_or_else(|| format!("'{s}' is not a side: give roster, calc or both"))
    }
}

pub const CONTRACT_VERSIE: i32 = crate::contract::CONTRACT_VERSIE as i32;
pub use payroll::{PayrollStore, Stored};

/// How Service Broker identifies a received message: the receiving conversation handle
/// and the message's sequence number in that conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MessageKey {
    pub conversation_handle: Uuid,
    pub sequence: i64,
}

impl MessageKey {
    pub fn of(m: &Message) -> Self {
        Self { conversation_handle: m.conversation_handle, sequence: m.sequence }
    }
}

/// A message's attempt count after counting the current one, and what the earlier
/// attempts died of. Only attempts that count toward diversion are in `attempts`: a
/// transient failure (the environment's fault) is given back when it is noted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub key: MessageKey,
    /// Counting attempts, the current one included.
    pub attempts: i32,
    /// The latest error of an attempt that failed by the message's fault.
    pub last_error: Option<String>,
    /// Attempts that failed by the message's fault (each noted with its error).
    pub failures: i32,
    /// Attempts that failed by the environment's fault (not counted in `attempts`).
    pub transient_failures: i32,
}

impl Attempt {
    /// Counting attempts before the current one that ended without a note: their worker
    /// stopped (killed, crashed, out of memory) while handling the message.
    pub fn deaths(&self) -> i32 {
        (self.attempts - 1 - self.failures).max(0)
    }
}

/// Whose fault a failed attempt was, for the attempt accounting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The message's (or the handler's): the attempt counts toward diversion.
    Message,
    /// The environment's (deadlock, lock timeout, serialization failure, lost
    /// connection, server shutdown): the attempt is given back.
    Transient,
}

/// What the worker learns about a queue outside any transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueState {
    pub enabled: bool,
    /// Messages waiting (a backlog when above zero).
    pub messages: i64,
    /// The broker's poison-message detection (a queue disabled after five rolled-back
    /// receives in a row) is on for this queue.
    pub poison_handling: bool,
    /// The most readers the database allows on the queue across every worker process
    /// and host (SQL Server's `MAX_QUEUE_READERS`, the PostgreSQL broker's
    /// `max_readers`); `None` when it sets none (0) or the install predates it.
    pub max_readers: Option<u32>,
}

/// A message set aside, with why.
#[derive(Debug, Clone, Copy)]
pub struct DeadLetter<'a> {
    pub queue: &'a str,
    pub message: &'a Message,
    pub attempts: i32,
    pub reason: &'a str,
}

/// Opens sessions on one broker (one database).
pub trait Transport: Send + Sync + 'static {
    type Session: Session;

    /// Opens a session. Errors of kind `Connection` are worth retrying.
    fn open(&self) -> impl Future<Output = Result<Self::Session, BrokerError>> + Send;

    /// Where this transport connects, with secrets masked (for logs).
    fn describe(&self) -> String;

    /// The statement that turns the broker's poison-message handling off for `queue`
    /// (for messages telling an operator what to run).
    fn poison_handling_off(&self, queue: &str) -> String;
}

/// One broker session: one transaction at a time. Every failure leaves the transaction
/// to be rolled back by the caller (`SET XACT_ABORT ON` behaviour); a session whose
/// connection broke is dropped, which rolls back on the server.
pub trait Session: Send + 'static {
    fn begin(&mut self) -> impl Future<Output = Result<(), BrokerError>> + Send;
    fn commit(&mut self) -> impl Future<Output = Result<(), BrokerError>> + Send;
    /// Rolls back. Returns true when the broker's poison-message detection disabled a
    /// queue because of this rollback.
    fn rollback(&mut self) -> impl Future<Output = Result<bool, BrokerError>> + Send;

    /// `WAITFOR (RECEIVE TOP (max) … FROM queue [WHERE conversation_group_id = group]),
    /// TIMEOUT wait`: messages of one conversation group, empty on timeout. A `group`
    /// another session holds comes back empty within a bound (a second at most), never
    /// waiting for that session's transaction; ask for a group only first thing in a
    /// transaction (on SQL Server the transaction may be begun anew).
    fn receive(
        &mut self,
        queue: &str,
        max: i32,
        group: Option<Uuid>,
        wait: Duration,
    ) -> impl Future<Output = Result<Vec<Message>, BrokerError>> + Send;

    /// `RECEIVE … FROM queue WHERE conversation_handle = handle` (no wait): what is left
    /// of one conversation, in order.
    fn receive_conversation(
        &mut self,
        queue: &str,
        handle: Uuid,
    ) -> impl Future<Output = Result<Vec<Message>, BrokerError>> + Send;

    fn send(
        &mut self,
        handle: Uuid,
        message_type: &str,
        body: Option<&[u8]>,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// `END CONVERSATION handle [WITH ERROR = code DESCRIPTION = text]`.
    fn end_conversation(
        &mut self,
        handle: Uuid,
        error: Option<(i32, &str)>,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send;

    fn move_conversation(&mut self, handle: Uuid, group: Uuid) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// `WAITFOR (GET CONVERSATION GROUP @g FROM queue), TIMEOUT wait`: the next group with
    /// messages waiting, locked for this transaction (no other session receives from it
    /// until commit or rollback); `None` on timeout.
    fn get_conversation_group(
        &mut self,
        queue: &str,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<Uuid>, BrokerError>> + Send;

    /// Counts one more attempt of each message, durably and outside the transaction
    /// (it must survive a rollback and a crash). Returns the counts after this one.
    fn count_attempts(
        &mut self,
        queue: &str,
        keys: &[MessageKey],
    ) -> impl Future<Output = Result<Vec<Attempt>, BrokerError>> + Send;

    /// Records why the last attempt failed, outside the transaction (on a connection
    /// that may outlive the one the attempt broke). A [`Fault::Transient`] failure gives
    /// the attempt back.
    fn note_failure(
        &mut self,
        keys: &[MessageKey],
        error: &str,
        fault: Fault,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// Inside the transaction: these messages are done; forget their counts.
    fn forget_attempts(&mut self, keys: &[MessageKey]) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// Inside the transaction: keep a diverted message.
    fn dead_letter(&mut self, letter: DeadLetter<'_>) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// Outside any transaction: is the queue enabled, and how deep is it? `NotFound`
    /// error when there is no such queue.
    fn queue_state(&mut self, queue: &str) -> impl Future<Output = Result<QueueState, BrokerError>> + Send;

    /// Outside any transaction: waits up to `wait` for `queue` to have work (messages
    /// waiting, or a change of its state) without polling, where the broker can say so;
    /// true when it has work. The supervisor of a queue with no reader waits here
    /// instead of looking at every tick. A back end that cannot wait so answers true at
    /// once (the supervisor then looks at every tick, as before).
    fn wait_for_work(&mut self, queue: &str, wait: Duration) -> impl Future<Output = Result<bool, BrokerError>> + Send {
        let _ = (queue, wait);
        std::future::ready(Ok(true))
    }

    /// Outside any transaction: takes one of the queue's first `slots` reader slots for
    /// this session, held until freed or the session's connection ends (a session-owned
    /// application lock on SQL Server, an advisory lock on PostgreSQL): its number, or
    /// `None` when every one is held (by this or any other worker process).
    fn take_reader_slot(
        &mut self,
        queue: &str,
        slots: u32,
    ) -> impl Future<Output = Result<Option<u32>, BrokerError>> + Send;

    /// Outside any transaction: gives a slot of [`Session::take_reader_slot`] back.
    fn free_reader_slot(&mut self, queue: &str, slot: u32) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// Outside any transaction: this worker instance is alive, with its readers
    /// (`sbworker status` reads it).
    fn heartbeat(&mut self, beat: &Heartbeat) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// Outside any transaction: this worker instance stops; its heartbeat goes.
    fn heartbeat_end(&mut self, instance: Uuid) -> impl Future<Output = Result<(), BrokerError>> + Send;
}

/// A worker instance's heartbeat.
#[derive(Debug, Clone)]
pub struct Heartbeat {
    pub instance: Uuid,
    pub host: String,
    pub pid: i32,
    pub version: &'static str,
    /// When the instance started, seconds since the Unix epoch.
    pub started_unix: i64,
    /// Per queue: readers running, readers holding a group.
    pub queues: Vec<(String, u32, u32)>,
    /// How often it beats, milliseconds (`sbworker status` judges its silence by it).
    pub interval_ms: i32,
    /// The Vraag contract version its calculation reads (`None`: a worker of a release
    /// before the version was recorded): the install refuses to replace the senders
    /// while a live worker reads an older one.
    pub contract_versie: Option<i32>,
}

impl Heartbeat {
    /// The queues as the JSON object the broker keeps: {"queue": {"readers": n, "busy": n}}.
    pub fn queues_json(&self) -> String {
        let map: serde_json::Map<String, serde_json::Value> = self
            .queues
            .iter()
            .map(|(q, readers, busy)| (q.clone(), serde_json::json!({ "readers": readers, "busy": busy })))
            .collect();
        serde_json::Value::Object(map).to_string()
    }
}
