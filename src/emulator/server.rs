//! The emulator's server: one task per TDS connection, each with a PostgreSQL broker
//! session of its own. PRELOGIN (no TLS: a client that requires it is refused), LOGIN7
//! against the configured credentials (error 18456 otherwise), then SQL batches, RPC
//! (`sp_executesql` with int, bigint, bit, nvarchar, varbinary and uniqueidentifier
//! parameters) and transaction-manager requests, run on the PostgreSQL broker.
//! Statements outside a transaction run in one of their own. An error rolls the
//! transaction back (`XACT_ABORT ON` behaviour) and comes back as an ERROR token with
//! SQL Server's number. An ATTENTION packet cancels the request in progress (a waiting
//! RECEIVE, say): its transaction rolls back and the answer is DONE with the attention
//! bit. [`Faults`] injects deadlocks, dropped connections and slow responses for tests.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};
use uuid::Uuid;

use super::codec::{self, ColType, Sql, Tokens, done, packet_type};
use super::tsql::{self, Column, Filter, Statement, Tran, Value};
use crate::broker::postgres::Session;
use crate::contract::{self, Limits};
use crate::shutdown::Stop;
use crate::transport::{BrokerError, ErrorKind, Message};
use crate::transport::{DeadLetter, Fault, MessageKey, Session as _};

use crate::transport::{PayrollStore, Stored};

/// Who may log in.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

/// Faults the emulator injects, for tests of what a client does about them (`sbworker
/// emulator --fault-…`). Counted over all connections; only a RECEIVE that took messages
/// (and only the COMMIT of a transaction that did) counts, so each fault hits real work:
/// its transaction rolls back and the messages return to the queue. A period of 0 is
/// off; every setting can be changed while the emulator serves (a test turns the faults
/// off to see the work finish).
#[derive(Debug, Default)]
pub struct Faults {
    /// Every Nth such RECEIVE fails with deadlock 1205 instead of returning its rows.
    deadlock_every: AtomicU64,
    /// Every Nth such RECEIVE fails with lock timeout 1222.
    lock_timeout_every: AtomicU64,
    /// Every Nth such RECEIVE drops the connection instead of answering (mid-transaction).
    drop_every: AtomicU64,
    /// Every Nth such COMMIT fails with deadlock 1205 (the transaction rolled back).
    commit_deadlock_every: AtomicU64,
    /// A request still running after this many milliseconds (blocked on a lock) drops
    /// its connection, as a killed session does; 0 is off.
    drop_blocked_after_ms: AtomicU64,
    /// Every response waits this long before it is written.
    pub delay: Duration,
    receives: AtomicU64,
    commits: AtomicU64,
    injected: AtomicU64,
}

/// What a RECEIVE meets.
enum Injected {
    Deadlock,
    LockTimeout,
    Drop,
}

impl Faults {
    pub fn new(deadlock_every: Option<u64>, drop_every: Option<u64>, delay: Duration) -> Self {
        let f = Faults { delay, ..Faults::default() };
        f.set_receive_faults(deadlock_every, None, drop_every);
        f
    }

    /// The periods of the faults at RECEIVE (None: off).
    pub fn set_receive_faults(&self, deadlock: Option<u64>, lock_timeout: Option<u64>, drop: Option<u64>) {
        self.deadlock_every.store(deadlock.unwrap_or(0), Ordering::SeqCst);
        self.lock_timeout_every.store(lock_timeout.unwrap_or(0), Ordering::SeqCst);
        self.drop_every.store(drop.unwrap_or(0), Ordering::SeqCst);
    }

    /// The period of deadlocks at COMMIT (None: off).
    pub fn set_commit_deadlock_every(&self, every: Option<u64>) {
        self.commit_deadlock_every.store(every.unwrap_or(0), Ordering::SeqCst);
    }

    /// Drop the connection of a request still running after `after` (None: off).
    pub fn set_drop_blocked_after(&self, after: Option<Duration>) {
        self.drop_blocked_after_ms.store(after.map_or(0, |d| d.as_millis().max(1) as u64), Ordering::SeqCst);
    }

    /// Every fault off (the delay stays).
    pub fn clear(&self) {
        self.set_receive_faults(None, None, None);
        self.set_commit_deadlock_every(None);
        self.set_drop_blocked_after(None);
    }

    fn drop_blocked_after(&self) -> Option<Duration> {
        let ms = self.drop_blocked_after_ms.load(Ordering::SeqCst);
        (ms > 0).then(|| Duration::from_millis(ms))
    }

    fn hit(every: &AtomicU64, n: u64) -> bool {
        let e = every.load(Ordering::SeqCst);
        e > 0 && n % e == 0
    }

    fn count(&self, fault: bool) -> bool {
        if fault {
            self.injected.fetch_add(1, Ordering::Relaxed);
        }
        fault
    }

    /// Counts a RECEIVE that took messages; the fault it meets, if any.
    fn on_receive(&self) -> Option<Injected> {
        let n = self.receives.fetch_add(1, Ordering::Relaxed) + 1;
        let fault = if Self::hit(&self.deadlock_every, n) {
            Some(Injected::Deadlock)
        } else if Self::hit(&self.lock_timeout_every, n) {
            Some(Injected::LockTimeout)
        } else if Self::hit(&self.drop_every, n) {
            Some(Injected::Drop)
        } else {
            None
        };
        self.count(fault.is_some());
        fault
    }

    /// Counts a COMMIT of a transaction that received messages; true: it deadlocks.
    fn on_commit(&self) -> bool {
        let n = self.commits.fetch_add(1, Ordering::Relaxed) + 1;
        self.count(Self::hit(&self.commit_deadlock_every, n))
    }

    /// A blocked request's connection dropped.
    fn on_blocked_drop(&self) {
        self.count(true);
    }

    /// How many faults were injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }
}

/// Connection tasks that panicked, over the life of the process (none, ever: the fuzz
/// target and the random-packet test check that malformed input is an error, not a panic).
static PANICS: AtomicU64 = AtomicU64::new(0);

/// How many connection tasks panicked in this process.
pub fn connection_panics() -> u64 {
    PANICS.load(Ordering::Relaxed)
}

/// Serves TDS connections on `listener` until `stop`, each on a session of the
/// PostgreSQL broker at `pg_url`.
pub async fn serve(listener: TcpListener, pg_url: String, creds: Credentials, faults: Arc<Faults>, mut stop: Stop) {
    let pg_url = Arc::new(pg_url);
    let creds = Arc::new(creds);
    loop {
        let accepted = tokio::select! {
            _ = stop.stopped() => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, peer)) => {
                let (pg_url, creds, faults) = (pg_url.clone(), creds.clone(), faults.clone());
                let task = tokio::spawn(async move {
                    if let Err(e) = connection(stream, &pg_url, &creds, faults).await {
                        debug!(%peer, "connection ended: {e}");
                    }
                });
                tokio::spawn(async move {
                    if let Err(e) = task.await
                        && e.is_panic()
                    {
                        PANICS.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(%peer, "a connection task panicked: {e}");
                    }
                });
            }
            Err(e) => warn!("accept failed: {e}"),
        }
    }
}

struct Conn {
    session: Session,
    in_tran: bool,
    descriptor: u64,
    packet_size: usize,
    faults: Arc<Faults>,
    /// Set by an injected fault: close the connection without answering.
    drop_now: bool,
    /// The open transaction received messages (a COMMIT fault hits only real work).
    received: bool,
    /// `SET NOCOUNT ON`: DONE tokens carry no row count.
    nocount: bool,
}

type Params = HashMap<String, Sql>;

/// A statement's failure: SQL Server's number, class and text.
struct Failure {
    number: i32,
    class: u8,
    message: String,
}

/// SQL Server's error 1205, as it writes it (severity 13).
fn deadlock() -> Failure {
    Failure {
        number: 1205,
        class: 13,
        message: "Transaction (Process ID 57) was deadlocked on lock resources with another process and has been \
                  chosen as the deadlock victim. Rerun the transaction."
            .into(),
    }
}

fn lock_timeout() -> Failure {
    Failure { number: 1222, class: 16, message: "Lock request time out period exceeded.".into() }
}

impl From<BrokerError> for Failure {
    fn from(e: BrokerError) -> Self {
        match e.number {
            1205 => deadlock(),
            1222 => lock_timeout(),
            0 => Failure { number: 50000, class: 16, message: e.message },
            n => Failure { number: n, class: 16, message: e.message },
        }
    }
}

impl From<tsql::TsqlError> for Failure {
    fn from(e: tsql::TsqlError) -> Self {
        Failure { number: e.number, class: if e.number == 102 { 15 } else { 16 }, message: e.message }
    }
}

fn fail(message: impl Into<String>) -> Failure {
    Failure { number: 50000, class: 16, message: message.into() }
}

async fn connection(
    mut stream: TcpStream,
    pg_url: &str,
    creds: &Credentials,
    faults: Arc<Faults>,
) -> std::io::Result<()> {
    stream.set_nodelay(true).ok();
    let Some((ty, payload)) = codec::read_message(&mut stream).await? else { return Ok(()) };
    if ty != packet_type::PRELOGIN {
        return Ok(());
    }
    let tls = codec::prelogin_encryption(&payload);
    codec::write_message(&mut stream, packet_type::TABULAR_RESULT, &codec::prelogin_response(), 4096).await?;
    if matches!(tls, Some(1) | Some(3)) {
        warn!("refused a client that requires TLS: the emulator speaks TDS without encryption (Encrypt=false)");
        return Ok(());
    }
    let Some((ty, payload)) = codec::read_message(&mut stream).await? else { return Ok(()) };
    if ty != packet_type::LOGIN7 {
        return Ok(());
    }
    let mut t = Tokens::default();
    let login = match codec::parse_login7(&payload) {
        Ok(l) => l,
        Err(e) => {
            t.error(18456, 1, 14, &format!("Login failed: {e}"));
            t.done(0xFD, done::ERROR, 0);
            return codec::write_message(&mut stream, packet_type::TABULAR_RESULT, &t.out, 4096).await;
        }
    };
    if login.user != creds.user || login.password != creds.password {
        t.error(18456, 1, 14, &format!("Login failed for user '{}'.", login.user));
        t.done(0xFD, done::ERROR, 0);
        return codec::write_message(&mut stream, packet_type::TABULAR_RESULT, &t.out, 4096).await;
    }
    let session = match Session::open(pg_url).await {
        Ok(s) => s,
        Err(e) => {
            t.error(4060, 1, 11, &format!("Cannot open the database: {}", e.message));
            t.done(0xFD, done::ERROR, 0);
            return codec::write_message(&mut stream, packet_type::TABULAR_RESULT, &t.out, 4096).await;
        }
    };
    let packet_size = login.packet_size.clamp(512, 32767) as usize;
    t.env_change_text(1, if login.database.is_empty() { "sbworker" } else { &login.database }, "master");
    t.env_change_text(4, &packet_size.to_string(), "4096");
    t.login_ack();
    t.done(0xFD, 0, 0);
    codec::write_message(&mut stream, packet_type::TABULAR_RESULT, &t.out, packet_size).await?;
    let mut conn = Conn {
        session,
        in_tran: false,
        descriptor: 0,
        packet_size,
        faults,
        drop_now: false,
        received: false,
        nocount: false,
    };

    // Requests are read on a task of their own, so that an ATTENTION can arrive while a
    // request runs (a client cancels a waiting RECEIVE that way).
    let (mut read, mut write) = stream.into_split();
    let (tx, mut requests) = mpsc::channel::<(u8, Vec<u8>)>(4);
    let reader = tokio::spawn(async move {
        while let Ok(Some(m)) = codec::read_message(&mut read).await {
            if tx.send(m).await.is_err() {
                break;
            }
        }
    });
    let mut early: VecDeque<(u8, Vec<u8>)> = VecDeque::new();
    while let Some((ty, payload)) = match early.pop_front() {
        Some(m) => Some(m),
        None => requests.recv().await,
    } {
        let mut t = Tokens::default();
        if ty == packet_type::ATTENTION {
            // Nothing runs: the request it meant to cancel has finished.
            t.done(0xFD, done::ATTN, 0);
        } else {
            let (mut cancelled, mut gone) = (false, false);
            // Only requests of a transaction that took messages (not an idle WAITFOR).
            let blocked_after = if conn.received { conn.faults.drop_blocked_after() } else { None };
            let faults = conn.faults.clone();
            // A request whose connection goes away is cancelled on the database too: a
            // backend waiting on a lock would otherwise hold what it locked until then.
            let cancel = conn.session.client().cancel_token();
            {
                let work = handle(&mut conn, ty, &payload, &mut t);
                tokio::pin!(work);
                let blocked = async {
                    match blocked_after {
                        Some(d) => tokio::time::sleep(d).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::pin!(blocked);
                loop {
                    tokio::select! {
                        () = &mut work => break,
                        () = &mut blocked => {
                            // An injected fault: the request waits (on a lock, say) and its
                            // session is killed; the work is dropped with the connection.
                            warn!("fault injected: a request still running after {blocked_after:?}: connection dropped");
                            faults.on_blocked_drop();
                            gone = true;
                            break;
                        }
                        m = requests.recv() => match m {
                            Some((packet_type::ATTENTION, _)) => {
                                cancelled = true;
                                break;
                            }
                            // A client waits for the answer before its next request;
                            // one that does not is served in order.
                            Some(m) => early.push_back(m),
                            // The client went away: what ran is dropped with the session.
                            None => {
                                gone = true;
                                break;
                            }
                        },
                    }
                }
            }
            if gone {
                let _ = cancel.cancel_query(tokio_postgres::NoTls).await;
                break;
            }
            if cancelled {
                // What the request did is undone (XACT_ABORT ON), then acknowledged.
                t = Tokens::default();
                let _ = conn.session.rollback().await;
                if conn.in_tran {
                    conn.in_tran = false;
                    t.env_change_tran(10, conn.descriptor);
                }
                t.done(0xFD, done::ATTN, 0);
            }
        }
        if conn.drop_now {
            warn!("fault injected: connection dropped mid-transaction");
            break;
        }
        if !conn.faults.delay.is_zero() {
            tokio::time::sleep(conn.faults.delay).await;
        }
        codec::write_message(&mut write, packet_type::TABULAR_RESULT, &t.out, conn.packet_size).await?;
        if conn.session.client().is_closed() {
            // The database session behind this connection is gone (killed, or the server
            // restarted): so is the connection, as on SQL Server.
            warn!("the database session is gone: connection closed");
            break;
        }
    }
    reader.abort();
    Ok(())
}

async fn handle(conn: &mut Conn, ty: u8, payload: &[u8], t: &mut Tokens) {
    match ty {
        packet_type::SQL_BATCH => batch(conn, payload, t).await,
        packet_type::RPC => rpc(conn, payload, t).await,
        packet_type::TRANSACTION_MANAGER => tm(conn, payload, t).await,
        other => {
            t.error(50000, 1, 16, &format!("TDS message type {other} is not supported by the emulator"));
            t.done(0xFD, done::ERROR, 0);
        }
    }
}

async fn batch(conn: &mut Conn, payload: &[u8], t: &mut Tokens) {
    match codec::parse_sql_batch(payload) {
        Ok(sql) => {
            run(conn, &sql, &Params::new(), t, 0xFD).await;
        }
        Err(e) => {
            t.error(50000, 1, 16, &e.to_string());
            t.done(0xFD, done::ERROR, 0);
        }
    }
}

async fn rpc(conn: &mut Conn, payload: &[u8], t: &mut Tokens) {
    let parsed =
        codec::parse_rpc(payload).map(|(procedure, params)| (procedure, params.into_iter().collect::<Params>()));
    match parsed {
        Ok((procedure, mut params)) if procedure.eq_ignore_ascii_case("sp_executesql") => {
            let sql = match params.remove("@stmt").or_else(|| params.remove("stmt")).or_else(|| params.remove("#0")) {
                Some(Sql::NVarChar(s)) => s,
                _ => {
                    t.error(50000, 1, 16, "sp_executesql without a statement");
                    t.done(0xFE, done::ERROR, 0);
                    return;
                }
            };
            let ok = run(conn, &sql, &params, t, 0xFF).await;
            t.done(0xFE, if ok { 0 } else { done::ERROR }, 0);
        }
        Ok((procedure, _)) => {
            t.error(2812, 1, 16, &format!("Could not find stored procedure '{procedure}'."));
            t.done(0xFE, done::ERROR, 0);
        }
        Err(e) => {
            t.error(50000, 1, 16, &e.to_string());
            t.done(0xFE, done::ERROR, 0);
        }
    }
}

async fn tm(conn: &mut Conn, payload: &[u8], t: &mut Tokens) {
    // COMMIT and ROLLBACK requests may ask for a new transaction at once (fBeginXact):
    // clients that never run outside a transaction use it.
    let result = match codec::parse_tm(payload) {
        Ok((5, _)) => transaction(conn, Tran::Begin, t).await,
        Ok((k @ (7 | 8), again)) => {
            let what = if k == 7 { Tran::Commit } else { Tran::Rollback };
            match transaction(conn, what, t).await {
                Ok(()) if again => transaction(conn, Tran::Begin, t).await,
                other => other,
            }
        }
        Ok((k, _)) => Err(fail(format!("transaction manager request {k} is not supported by the emulator"))),
        Err(e) => Err(fail(e.to_string())),
    };
    match result {
        Ok(()) => t.done(0xFD, 0, 0),
        Err(f) => {
            t.error(f.number, 1, f.class, &f.message);
            t.done(0xFD, done::ERROR, 0);
        }
    }
}

async fn transaction(conn: &mut Conn, what: Tran, t: &mut Tokens) -> Result<(), Failure> {
    match what {
        Tran::Begin => {
            if conn.in_tran {
                return Err(fail("nested transactions are not supported by the emulator"));
            }
            conn.session.begin().await?;
            conn.in_tran = true;
            conn.received = false;
            conn.descriptor += 1;
            t.env_change_tran(8, conn.descriptor);
        }
        Tran::Commit | Tran::Rollback => {
            if !conn.in_tran {
                let verb = if what == Tran::Commit { "COMMIT" } else { "ROLLBACK" };
                return Err(Failure {
                    number: if what == Tran::Commit { 3902 } else { 3903 },
                    class: 16,
                    message: format!("The {verb} TRANSACTION request has no corresponding BEGIN TRANSACTION."),
                });
            }
            conn.in_tran = false;
            let received = std::mem::take(&mut conn.received);
            if what == Tran::Commit && received && conn.faults.on_commit() {
                warn!("fault injected: deadlock 1205 at the COMMIT of a transaction that received messages");
                conn.session.rollback().await?;
                t.env_change_tran(10, conn.descriptor);
                return Err(deadlock());
            }
            if what == Tran::Commit {
                conn.session.commit().await?;
                t.env_change_tran(9, conn.descriptor);
            } else {
                conn.session.rollback().await?;
                t.env_change_tran(10, conn.descriptor);
            }
        }
    }
    Ok(())
}

/// Runs a batch's statements; `done_token` is DONE for a batch, DONEINPROC inside RPC
/// (where every one has the MORE bit: the DONEPROC that ends the call follows). False
/// when a statement failed.
async fn run(conn: &mut Conn, sql: &str, params: &Params, t: &mut Tokens, done_token: u8) -> bool {
    let in_proc = if done_token == 0xFF { done::MORE } else { 0 };
    // T-SQL variables live for the batch; parameters are variables set by the caller.
    let mut vars = params.clone();
    let statements = match tsql::parse_batch(sql) {
        Ok(s) => s,
        Err(e) => {
            debug!(batch = sql, "refused: {e}");
            let f = Failure::from(e);
            t.error(f.number, 1, f.class, &f.message);
            t.done(done_token, done::ERROR | in_proc, 0);
            return false;
        }
    };
    let n = statements.len();
    for (i, st) in statements.into_iter().enumerate() {
        let more = if i + 1 < n { done::MORE } else { in_proc };
        let implicit = !conn.in_tran && needs_transaction(&st);
        let result = async {
            if implicit {
                conn.session.begin().await?;
            }
            let r = execute(conn, st, &mut vars, t).await;
            if implicit && !conn.drop_now {
                if r.is_ok() {
                    conn.session.commit().await?;
                } else {
                    let _ = conn.session.rollback().await;
                }
            }
            r
        }
        .await;
        if conn.drop_now {
            // An injected fault: nothing more runs, nothing commits; the connection closes.
            return false;
        }
        match result {
            Ok(rows) => {
                let counted = if rows.is_some() && !conn.nocount { done::COUNT } else { 0 };
                t.done(done_token, more | counted, rows.unwrap_or(0))
            }
            Err(f) => {
                // XACT_ABORT ON: the whole transaction rolls back.
                if conn.in_tran {
                    conn.in_tran = false;
                    let _ = conn.session.rollback().await;
                    t.env_change_tran(10, conn.descriptor);
                }
                t.error(f.number, 1, f.class, &f.message);
                t.done(done_token, done::ERROR | in_proc, 0);
                return false;
            }
        }
    }
    true
}

fn needs_transaction(st: &Statement) -> bool {
    !matches!(
        st,
        Statement::Transaction(_)
            | Statement::SetOption { .. }
            | Statement::Declare(_)
            | Statement::SetVar { .. }
            | Statement::AssignVars(_)
            | Statement::SelectVars(_)
    )
}

/// SQL Server's error for a variable used or assigned before its DECLARE.
fn undeclared(name: &str) -> Failure {
    Failure { number: 137, class: 15, message: format!("Must declare the scalar variable \"{name}\".") }
}

/// A variable may be assigned only once declared.
fn declared(vars: &Params, name: &str) -> Result<(), Failure> {
    if vars.contains_key(name) { Ok(()) } else { Err(undeclared(name)) }
}

fn value<'a>(v: &'a Value, params: &'a Params) -> Result<Sql, Failure> {
    Ok(match v {
        Value::Var(name) => params.get(name).cloned().ok_or_else(|| undeclared(name))?,
        Value::Int(i) => Sql::BigInt(*i),
        Value::Str(s) => Sql::NVarChar(s.clone()),
        Value::Null => Sql::Null,
    })
}

fn as_uuid(v: Sql) -> Result<Uuid, Failure> {
    match v {
        Sql::Guid(u) => Ok(u),
        Sql::NVarChar(s) => s.parse().map_err(|_| fail(format!("'{s}' is not a uniqueidentifier"))),
        other => Err(fail(format!("{other:?} is not a uniqueidentifier"))),
    }
}

fn as_i64(v: Sql) -> Result<i64, Failure> {
    match v {
        Sql::Int(i) => Ok(i64::from(i)),
        Sql::BigInt(i) => Ok(i),
        other => Err(fail(format!("{other:?} is not an integer"))),
    }
}

fn as_text(v: Sql) -> Result<String, Failure> {
    match v {
        Sql::NVarChar(s) => Ok(s),
        Sql::VarBinary(b) => String::from_utf8(b).map_err(|_| fail("binary text is not UTF-8")),
        other => Err(fail(format!("{other:?} is not text"))),
    }
}

fn as_bytes(v: Sql) -> Result<Option<Vec<u8>>, Failure> {
    match v {
        Sql::Null => Ok(None),
        Sql::VarBinary(b) => Ok(Some(b)),
        // nvarchar converts to varbinary as UTF-16LE, as in SQL Server.
        Sql::NVarChar(s) => Ok(Some(s.encode_utf16().flat_map(u16::to_le_bytes).collect())),
        other => Err(fail(format!("{other:?} is not a message body"))),
    }
}

/// How long a statement waits: nothing without WAITFOR; `TIMEOUT n` milliseconds; no
/// TIMEOUT or -1 is "no limit", held to an hour here.
fn wait_of(waitfor: bool, timeout: Option<Value>, params: &Params) -> Result<Duration, Failure> {
    Ok(match (waitfor, timeout) {
        (false, _) => Duration::ZERO,
        (true, Some(v)) => match as_i64(value(&v, params)?)? {
            -1 => Duration::from_secs(3600),
            ms => Duration::from_millis(ms.max(0) as u64),
        },
        (true, None) => Duration::from_secs(3600),
    })
}

/// The PostgreSQL broker's name of a queue: its last part (schemas are SQL Server's).
fn queue_name(q: &str) -> &str {
    q.rsplit('.').next().unwrap_or(q)
}

/// The columns of a queue, as SQL Server names them, in `RECEIVE *` order.
const RECEIVE_COLUMNS: [&str; 14] = [
    "status",
    "priority",
    "queuing_order",
    "conversation_group_id",
    "conversation_handle",
    "message_sequence_number",
    "service_name",
    "service_id",
    "service_contract_name",
    "service_contract_id",
    "message_type_name",
    "message_type_id",
    "validation",
    "message_body",
];

/// A queue column's type and value in a message (`None`: no such column).
fn receive_column(m: &Message, name: &str) -> Option<(ColType, Sql)> {
    Some(match name {
        // 1: received (RETENTION OFF keeps no other state in a result).
        "status" => (ColType::TinyInt, Sql::Int(1)),
        "priority" => (ColType::TinyInt, Sql::Int(5)),
        "queuing_order" => (ColType::BigInt, Sql::BigInt(m.id)),
        "conversation_group_id" => (ColType::Guid, Sql::Guid(m.conversation_group_id)),
        "conversation_handle" => (ColType::Guid, Sql::Guid(m.conversation_handle)),
        "message_sequence_number" => (ColType::BigInt, Sql::BigInt(m.sequence)),
        "service_name" => (ColType::NVarChar, Sql::NVarChar(m.service.clone())),
        "service_contract_name" => (ColType::NVarChar, Sql::NVarChar(m.contract.clone())),
        "message_type_name" => (ColType::NVarChar, Sql::NVarChar(m.message_type.clone())),
        "validation" => {
            // E empty, X XML (system messages and bodies of XML message types), N none.
            let v = if m.body.is_empty() {
                "E"
            } else if m.body.starts_with(b"<") || m.body.starts_with(&[0xFF, 0xFE]) {
                "X"
            } else {
                "N"
            };
            (ColType::NVarChar, Sql::NVarChar(v.into()))
        }
        "message_body" => {
            (ColType::VarBinaryMax, if m.body.is_empty() { Sql::Null } else { Sql::VarBinary(m.body.clone()) })
        }
        // Ids of SQL Server's catalog: the PostgreSQL broker names things, it has no ids.
        "message_type_id" | "service_id" | "service_contract_id" => (ColType::Int, Sql::Null),
        _ => return None,
    })
}

/// `CAST(value AS ty)` of a queue column, for the types the emulator converts to.
fn cast(ty: &str, v: Sql) -> Result<(ColType, Sql), Failure> {
    match (ty, v) {
        ("xml", Sql::Null) => Ok((ColType::Xml, Sql::Null)),
        ("xml", Sql::VarBinary(b)) => {
            // SQL Server reads a binary XML body as UTF-16 with a byte-order mark, else as
            // the encoding its declaration names (UTF-8 here).
            let text = match b.strip_prefix(&[0xFF, 0xFE]) {
                Some(u16) => codec::utf16_string(u16).map_err(|e| fail(e.to_string()))?,
                None => String::from_utf8(b).map_err(|_| xml_error("the body is neither UTF-16 nor UTF-8"))?,
            };
            well_formed(&text)?;
            Ok((ColType::Xml, Sql::NVarChar(strip_declaration(&text))))
        }
        ("xml", Sql::NVarChar(s)) => {
            well_formed(&s)?;
            Ok((ColType::Xml, Sql::NVarChar(strip_declaration(&s))))
        }
        ("varbinary(max)" | "varbinary", v @ (Sql::Null | Sql::VarBinary(_))) => Ok((ColType::VarBinaryMax, v)),
        ("uniqueidentifier", v @ (Sql::Null | Sql::Guid(_))) => Ok((ColType::Guid, v)),
        ("nvarchar(max)" | "nvarchar" | "sysname", v @ (Sql::Null | Sql::NVarChar(_))) => Ok((ColType::NVarChar, v)),
        ("bigint", v @ (Sql::Null | Sql::BigInt(_))) => Ok((ColType::BigInt, v)),
        ("int", v @ (Sql::Null | Sql::Int(_))) => Ok((ColType::Int, v)),
        (ty, v) => Err(fail(format!("CAST of {v:?} AS {ty} is not supported by the emulator"))),
    }
}

/// SQL Server keeps no XML declaration in an `xml` value.
fn strip_declaration(s: &str) -> String {
    let t = s.trim_start_matches('\u{feff}');
    match t.strip_prefix("<?xml").and_then(|r| r.find("?>").map(|i| &r[i + 2..])) {
        Some(rest) => rest.to_owned(),
        None => t.to_owned(),
    }
}

fn xml_error(why: &str) -> Failure {
    Failure { number: 9420, class: 16, message: format!("XML parsing: {why}") }
}

/// Error 94xx unless `s` is one well-formed XML document (or fragment of elements).
fn well_formed(s: &str) -> Result<(), Failure> {
    let mut r = quick_xml::Reader::from_str(s);
    r.config_mut().check_end_names = true;
    loop {
        match r.read_event() {
            Ok(quick_xml::events::Event::Eof) => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(xml_error(&e.to_string())),
        }
    }
}

/// What a RECEIVE returns: a result set of its columns, or (when it assigns to
/// variables) nothing, the variables holding the last row's values.
fn receive_result(
    columns: &[Column],
    msgs: &[Message],
    vars: &mut Params,
    t: &mut Tokens,
) -> Result<Option<u64>, Failure> {
    struct Out {
        name: String,
        source: String,
        cast: Option<String>,
        var: Option<String>,
    }
    let mut outs = Vec::new();
    for c in columns {
        match c {
            Column::Star => outs.extend(RECEIVE_COLUMNS.iter().map(|n| Out {
                name: (*n).to_owned(),
                source: (*n).to_owned(),
                cast: None,
                var: None,
            })),
            Column::Item { source, cast, alias, var } => {
                if receive_column(&PROBE, source).is_none() {
                    return Err(Failure {
                        number: 207,
                        class: 16,
                        message: format!("Invalid column name '{source}'."),
                    });
                }
                if let Some(v) = var {
                    declared(vars, v)?;
                }
                outs.push(Out {
                    name: alias.clone().unwrap_or_else(|| if cast.is_some() { String::new() } else { source.clone() }),
                    source: source.clone(),
                    cast: cast.clone(),
                    var: var.clone(),
                });
            }
        }
    }
    let cell = |m: &Message, o: &Out| -> Result<(ColType, Sql), Failure> {
        let (ty, v) = receive_column(m, &o.source).expect("checked above");
        match &o.cast {
            Some(to) => cast(to, v),
            None => Ok((ty, v)),
        }
    };
    if outs.iter().any(|o| o.var.is_some()) {
        // SQL Server leaves the variables as they were when no row comes back.
        if let Some(last) = msgs.last() {
            for o in &outs {
                let (_, v) = cell(last, o)?;
                vars.insert(o.var.clone().expect("all assign"), v);
            }
        }
        return Ok(Some(msgs.len() as u64));
    }
    let mut types: Vec<ColType> = Vec::new();
    for o in &outs {
        // The type of a column does not depend on its value, so an empty probe gives it.
        let (ty, _) = match &o.cast {
            Some(to) => cast(to, Sql::Null)?,
            None => receive_column(&PROBE, &o.source).expect("checked above"),
        };
        types.push(ty);
    }
    let mut rows = Vec::with_capacity(msgs.len());
    for m in msgs {
        rows.push(outs.iter().map(|o| cell(m, o).map(|(_, v)| v)).collect::<Result<Vec<_>, _>>()?);
    }
    let cols: Vec<(&str, ColType)> = outs.iter().map(|o| o.name.as_str()).zip(types).collect();
    Ok(result_set(t, &cols, &rows))
}

/// A message with nothing in it: its columns' types are those of every message.
static PROBE: Message = Message {
    id: 0,
    conversation_group_id: Uuid::nil(),
    conversation_handle: Uuid::nil(),
    sequence: 0,
    message_type: String::new(),
    body: Vec::new(),
    service: String::new(),
    contract: String::new(),
};

/// A result set.
fn result_set(t: &mut Tokens, cols: &[(&str, ColType)], rows: &[Vec<Sql>]) -> Option<u64> {
    t.col_metadata(cols);
    let types: Vec<ColType> = cols.iter().map(|(_, c)| *c).collect();
    for r in rows {
        t.row(&types, r);
    }
    Some(rows.len() as u64)
}

fn keys_of(json: &str) -> Result<Vec<MessageKey>, Failure> {
    let mut keys = Vec::new();
    for item in json.split('{').skip(1) {
        let h =
            item.split("\"h\":\"").nth(1).and_then(|r| r.split('"').next()).ok_or_else(|| fail("keys: no \"h\""))?;
        let s = item
            .split("\"s\":")
            .nth(1)
            .map(|r| r.chars().take_while(|c| c.is_ascii_digit() || *c == '-').collect::<String>())
            .ok_or_else(|| fail("keys: no \"s\""))?;
        keys.push(MessageKey {
            conversation_handle: h.parse().map_err(|_| fail("keys: bad handle"))?,
            sequence: s.parse().map_err(|_| fail("keys: bad sequence"))?,
        });
    }
    Ok(keys)
}

/// Runs one statement; `Some(rows)` when it produced a result set or counted rows.
async fn execute(conn: &mut Conn, st: Statement, vars: &mut Params, t: &mut Tokens) -> Result<Option<u64>, Failure> {
    let params = &*vars;
    let s = &mut conn.session;
    match st {
        Statement::Transaction(what) => {
            transaction(conn, what, t).await?;
            Ok(None)
        }
        Statement::SetOption { option, on } => {
            // XACT_ABORT: the emulator always behaves as ON (an error ends the transaction).
            if option == "NOCOUNT" {
                conn.nocount = on;
            }
            Ok(None)
        }
        Statement::Declare(declared) => {
            for d in declared {
                let v = match d.value {
                    Some(v) => value(&v, vars)?,
                    None => Sql::Null,
                };
                vars.insert(d.var, v);
            }
            Ok(None)
        }
        Statement::SetVar { var, value: v } => {
            declared(vars, &var)?;
            let v = value(&v, params)?;
            vars.insert(var, v);
            Ok(None)
        }
        Statement::AssignVars(assignments) => {
            for (var, v) in assignments {
                declared(vars, &var)?;
                let v = value(&v, vars)?;
                vars.insert(var, v);
            }
            Ok(None)
        }
        Statement::SelectVars(names) => {
            let mut cols = Vec::new();
            let mut row = Vec::new();
            for n in &names {
                let v = value(&Value::Var(n.clone()), params)?;
                let ty = match &v {
                    Sql::Guid(_) => ColType::Guid,
                    Sql::Int(_) => ColType::Int,
                    Sql::BigInt(_) => ColType::BigInt,
                    Sql::Bit(_) => ColType::Bit,
                    Sql::VarBinary(_) => ColType::VarBinaryMax,
                    Sql::NVarChar(_) | Sql::Null => ColType::NVarChar,
                };
                cols.push(("", ty));
                row.push(v);
            }
            Ok(result_set(t, &cols, &[row]))
        }
        Statement::Receive { waitfor, top, columns, queue, filter, timeout } => {
            let max = match top {
                Some(v) => i32::try_from(as_i64(value(&v, params)?)?).unwrap_or(i32::MAX),
                None => i32::MAX,
            };
            let wait = wait_of(waitfor, timeout, params)?;
            let q = queue_name(&queue);
            let s = &mut conn.session;
            let msgs = match filter {
                None => s.receive(q, max, None, wait).await?,
                Some(Filter::Group(v)) => s.receive(q, max, Some(as_uuid(value(&v, params)?)?), wait).await?,
                Some(Filter::Handle(v)) => {
                    let mut m = s.receive_conversation(q, as_uuid(value(&v, params)?)?).await?;
                    m.truncate(max.max(0) as usize);
                    m
                }
            };
            if !msgs.is_empty()
                && let Some(f) = conn.faults.on_receive()
            {
                return match f {
                    Injected::Deadlock => {
                        warn!("fault injected: deadlock 1205 on a RECEIVE of {} messages", msgs.len());
                        Err(deadlock())
                    }
                    Injected::LockTimeout => {
                        warn!("fault injected: lock timeout 1222 on a RECEIVE of {} messages", msgs.len());
                        Err(lock_timeout())
                    }
                    Injected::Drop => {
                        conn.drop_now = true;
                        Ok(None)
                    }
                };
            }
            conn.received |= !msgs.is_empty();
            receive_result(&columns, &msgs, vars, t)
        }
        Statement::GetConversationGroup { waitfor, var, queue, timeout } => {
            declared(vars, &var)?;
            let wait = wait_of(waitfor, timeout, params)?;
            let g = s.get_conversation_group(queue_name(&queue), wait).await?;
            vars.insert(var, g.map_or(Sql::Null, Sql::Guid));
            Ok(None)
        }
        Statement::BeginDialog { handle_var, from_service, to_service, contract, related_group, lifetime, .. } => {
            declared(vars, &handle_var)?;
            let to = as_text(value(&to_service, params)?)?;
            let related = match related_group {
                Some(v) => Some(as_uuid(value(&v, params)?)?),
                None => None,
            };
            let lifetime = match lifetime {
                Some(v) => Some(i32::try_from(as_i64(value(&v, params)?)?).map_err(|_| fail("LIFETIME out of range"))?),
                None => None,
            };
            let h = s.begin_dialog(&from_service, &to, &contract, related, lifetime).await?;
            vars.insert(handle_var, Sql::Guid(h));
            Ok(None)
        }
        Statement::Send { handle, message_type, body } => {
            let h = as_uuid(value(&handle, params)?)?;
            let ty = message_type.unwrap_or_else(|| "DEFAULT".into());
            let body = match body {
                Some(v) => as_bytes(value(&v, params)?)?,
                None => None,
            };
            s.send(h, &ty, body.as_deref()).await?;
            Ok(None)
        }
        Statement::EndConversation { handle, error, cleanup } => {
            let h = as_uuid(value(&handle, params)?)?;
            if cleanup {
                s.end_conversation_cleanup(h).await?;
                return Ok(None);
            }
            match error {
                None => s.end_conversation(h, None).await?,
                Some((code, text)) => {
                    let code =
                        i32::try_from(as_i64(value(&code, params)?)?).map_err(|_| fail("error code out of range"))?;
                    let text = as_text(value(&text, params)?)?;
                    s.end_conversation(h, Some((code, &text))).await?
                }
            }
            Ok(None)
        }
        Statement::MoveConversation { handle, group } => {
            s.move_conversation(as_uuid(value(&handle, params)?)?, as_uuid(value(&group, params)?)?).await?;
            Ok(None)
        }
        Statement::Exec { procedure, args } => {
            let mut a: HashMap<String, Sql> = HashMap::new();
            for (name, v) in args {
                a.insert(name, value(&v, params)?);
            }
            let mut arg = |n: &str| a.remove(n).ok_or_else(|| fail(format!("{procedure}: argument {n} is missing")));
            match procedure.to_lowercase().as_str() {
                "sbworker.count_attempts" => {
                    let queue = as_text(arg("@queue")?)?;
                    let keys = keys_of(&as_text(arg("@keys")?)?)?;
                    let attempts = s.count_attempts(queue_name(&queue), &keys).await?;
                    let rows: Vec<Vec<Sql>> = attempts
                        .into_iter()
                        .map(|x| {
                            vec![
                                Sql::Guid(x.key.conversation_handle),
                                Sql::BigInt(x.key.sequence),
                                Sql::Int(x.attempts),
                                x.last_error.map_or(Sql::Null, Sql::NVarChar),
                                Sql::Int(x.failures),
                                Sql::Int(x.transient_failures),
                            ]
                        })
                        .collect();
                    let cols = [
                        ("conversation_handle", ColType::Guid),
                        ("message_sequence_number", ColType::BigInt),
                        ("attempts", ColType::Int),
                        ("last_error", ColType::NVarChar),
                        ("failures", ColType::Int),
                        ("transient_failures", ColType::Int),
                    ];
                    Ok(result_set(t, &cols, &rows))
                }
                "sbworker.note_failure" => {
                    let keys = keys_of(&as_text(arg("@keys")?)?)?;
                    let error = as_text(arg("@error")?)?;
                    // @transient bit = 0 (optional, as the procedure declares it).
                    let fault = match arg("@transient").ok() {
                        Some(Sql::Bit(true)) => Fault::Transient,
                        Some(Sql::Int(i)) if i != 0 => Fault::Transient,
                        Some(Sql::BigInt(i)) if i != 0 => Fault::Transient,
                        _ => Fault::Message,
                    };
                    s.note_failure(&keys, &error, fault).await?;
                    Ok(None)
                }
                "sbworker.forget_attempts" => {
                    s.forget_attempts(&keys_of(&as_text(arg("@keys")?)?)?).await?;
                    Ok(None)
                }
                "sbworker.set_aside" => {
                    let queue = as_text(arg("@queue")?)?;
                    let message = Message {
                        id: 0,
                        service: as_text(arg("@service")?)?,
                        contract: as_text(arg("@contract")?)?,
                        conversation_group_id: as_uuid(arg("@group")?)?,
                        conversation_handle: as_uuid(arg("@handle")?)?,
                        sequence: as_i64(arg("@seq")?)?,
                        message_type: as_text(arg("@type")?)?,
                        body: as_bytes(arg("@body")?)?.unwrap_or_default(),
                    };
                    let attempts = i32::try_from(as_i64(arg("@attempts")?)?).unwrap_or(i32::MAX);
                    let reason = as_text(arg("@reason")?)?;
                    s.dead_letter(DeadLetter {
                        queue: queue_name(&queue),
                        message: &message,
                        attempts,
                        reason: &reason,
                    })
                    .await?;
                    Ok(None)
                }
                "sbworker.claim_version" => {
                    let dv = i32::try_from(as_i64(arg("@dv")?)?).map_err(|_| fail("@dv out of range"))?;
                    let p = i32::try_from(as_i64(arg("@periode")?)?).map_err(|_| fail("@periode out of range"))?;
                    let claimed = s.claim_version(dv, p, as_i64(arg("@versie")?)?).await?;
                    Ok(result_set(t, &[("claimed", ColType::Bit)], &[vec![Sql::Bit(claimed)]]))
                }
                "sbworker.queue_state" => {
                    let queue = as_text(arg("@queue")?)?;
                    let rows = match s.queue_state(queue_name(&queue)).await {
                        Ok(q) => vec![vec![Sql::Bit(q.enabled), Sql::BigInt(q.messages), Sql::Bit(q.poison_handling)]],
                        Err(e) if e.kind == ErrorKind::NotFound => Vec::new(),
                        Err(e) => return Err(e.into()),
                    };
                    let cols = [
                        ("is_receive_enabled", ColType::Bit),
                        ("messages", ColType::BigInt),
                        ("is_poison_message_handling_enabled", ColType::Bit),
                    ];
                    Ok(result_set(t, &cols, &rows))
                }
                "rekenserver.sla_antwoord_op" => {
                    let handle = as_uuid(arg("@handle")?)?;
                    let xml = as_text(arg("@antwoord")?)?;
                    let a = contract::decode_antwoord(xml.as_bytes(), &Limits::default()).map_err(|e| Failure {
                        number: 9400,
                        class: 16,
                        message: format!("XML parsing: {e}"),
                    })?;
                    let superseded = a.waarschuwingen.iter().any(|w| w.code == crate::contract::VERVANGEN);
                    let outcome = match s.store_antwoord(handle, &a, superseded).await? {
                        Stored::Stored => "opgeslagen",
                        Stored::Older => "verouderd",
                        Stored::Superseded => "vervangen",
                    };
                    Ok(result_set(t, &[("uitkomst", ColType::NVarChar)], &[vec![Sql::NVarChar(outcome.into())]]))
                }
                // The benchmark's business effect (`sbworker bench`): a PostgreSQL function.
                "bench.apply" => {
                    let conversation = as_uuid(arg("@conversation")?)?;
                    let seq = as_i64(arg("@seq")?)?;
                    let body = as_bytes(arg("@body")?)?;
                    s.client()
                        .execute(
                            crate::sql::statements::postgres_emulator::BENCH_APPLY.sql,
                            &[&conversation, &seq, &body],
                        )
                        .await
                        .map_err(|e| Failure::from(crate::broker::postgres::error_of(e)))?;
                    Ok(None)
                }
                "rekenserver.noteer_fout" => {
                    let handle = as_uuid(arg("@handle")?)?;
                    s.record_fout(handle, &as_text(arg("@melding")?)?).await?;
                    Ok(None)
                }
                other => Err(Failure {
                    number: 2812,
                    class: 16,
                    message: format!(
                        "Could not find stored procedure '{other}' (the emulator runs sbworker's procedures only)."
                    ),
                }),
            }
        }
    }
}

/// Binds `addr` and serves until `stop`; the bound address (for port 0).
pub async fn start(
    addr: std::net::SocketAddr,
    pg_url: String,
    creds: Credentials,
    stop: Stop,
) -> std::io::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
    start_with(addr, pg_url, creds, Arc::new(Faults::default()), stop).await
}

/// [`start`], injecting `faults`.
pub async fn start_with(
    addr: std::net::SocketAddr,
    pg_url: String,
    creds: Credentials,
    faults: Arc<Faults>,
    stop: Stop,
) -> std::io::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    info!(%bound, "Service Broker emulator listening (TDS 7.4, no TLS)");
    Ok((bound, tokio::spawn(serve(listener, pg_url, creds, faults, stop))))
}
