//! The emulator's server: one task per TDS connection, each with a PostgreSQL broker
//! session of its own. PRELOGIN with SQL Server's encryption negotiation (or TDS 8.0's
//! TLS first, `tls`), LOGIN7 against the configured credentials (error 18456
//! otherwise), then SQL batches, RPC (`sp_executesql`, ODBC's prepared statements, the
//! catalog's `sp_datatype_info`) and transaction-manager requests, run on the PostgreSQL
//! broker. Statements outside a transaction run in one of their own (autocommit). With
//! `XACT_ABORT OFF` (SQL Server's default) a failing statement inside a transaction is
//! undone alone, and a statement-level error lets the batch go on; with it ON an error
//! rolls the transaction back. Errors come back as ERROR tokens with SQL Server's
//! numbers. An ATTENTION packet cancels the request in progress (a waiting RECEIVE,
//! say): the cancelled statement is undone (the whole transaction with `XACT_ABORT ON`)
//! and the answer is DONE with the attention bit. [`Faults`] injects deadlocks, dropped
//! connections and slow responses for tests.
//!
//! Here: the listener, the login and the request loop; `execute` runs one statement,
//! `procedures` the stored procedures, `values` converts values and writes result sets,
//! `faults` holds the injected faults.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};
use uuid::Uuid;

use super::codec::{self, ColType, Sql, Tokens, done, packet_type};
use super::tsql::{self, Column, Condition, Filter, Statement, Tran, Value};
use crate::broker::postgres::Session;
use crate::contract::{self, Limits};
use crate::shutdown::Stop;
use crate::transport::{BrokerError, ErrorKind, Message};
use crate::transport::{DeadLetter, Fault, MessageKey, Session as _};

use crate::statements::postgres_emulator as emu;
use crate::transport::{PayrollStore, Stored};

/// Who may log in.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub user: String,
    pub password: String,
}

mod activation;
mod catalog;
mod execute;
mod faults;
mod procedures;
pub mod tls;
mod values;

use activation::Activation;
use execute::execute;
pub use faults::Faults;
use faults::Injected;
use values::{
    as_bytes, as_i64, as_text, as_uuid, column_type, column_value, declared, describe, endpoint_rows, equal,
    invalid_object, keys_of, pg_failure, queue_name, receive_into, receive_result, result_set, select_table, type_of,
    typed, undeclared_table, value, wait_of,
};

/// Connection tasks that panicked, over the life of the process (none, ever: the fuzz
/// target and the random-packet test check that malformed input is an error, not a panic).
static PANICS: AtomicU64 = AtomicU64::new(0);

/// Writes a result set as the server does (for the response writer's fuzz target).
pub fn write_result_set(t: &mut Tokens, cols: &[(&str, ColType)], rows: &[Vec<Sql>]) {
    result_set(t, cols, rows);
}

/// How many connection tasks panicked in this process.
pub fn connection_panics() -> u64 {
    PANICS.load(Ordering::Relaxed)
}

/// Serves TDS connections on `listener` until `stop`, each on a session of the
/// PostgreSQL broker at `pg_url`.
pub async fn serve(listener: TcpListener, pg_url: String, creds: Credentials, faults: Arc<Faults>, stop: Stop) {
    serve_tls(listener, pg_url, creds, faults, None, stop).await
}

/// [`serve`], with TLS for the clients that ask for it.
pub async fn serve_tls(
    listener: TcpListener,
    pg_url: String,
    creds: Credentials,
    faults: Arc<Faults>,
    tls: Option<tls::Tls>,
    mut stop: Stop,
) {
    let tls = tls.map(Arc::new);
    let pg_url = Arc::new(pg_url);
    let creds = Arc::new(creds);
    let activation = Activation::new(pg_url.clone(), faults.clone(), stop.clone());
    loop {
        let accepted = tokio::select! {
            _ = stop.stopped() => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, peer)) => {
                let (pg_url, creds, faults, tls) = (pg_url.clone(), creds.clone(), faults.clone(), tls.clone());
                let activation = activation.clone();
                let task = tokio::spawn(async move {
                    if let Err(e) = connection(stream, &pg_url, &creds, faults, activation, tls).await {
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
    /// The emulated event-based activation, shared by every connection.
    activation: Arc<Activation>,
    in_tran: bool,
    /// `BEGIN TRANSACTION`s inside the open one (`@@TRANCOUNT` is one more): a COMMIT
    /// of an inner one only counts down, a ROLLBACK rolls back them all.
    nested: u32,
    /// `@@SPID`: this connection's number.
    spid: i32,
    /// `SET XACT_ABORT ON`: an error rolls the whole transaction back (SQL Server's
    /// default is OFF: only the failing statement is undone).
    xact_abort: bool,
    /// `SET LOCK_TIMEOUT`: how long (ms) a group RECEIVE waits for a group another
    /// session holds before error 1222; -1 (the default) waits as long as it takes.
    lock_timeout_ms: i64,
    /// Statements prepared with sp_prepare or sp_prepexec, by handle, until sp_unprepare:
    /// the text and its parameters' names in declared order.
    prepared: HashMap<i32, (String, Vec<String>)>,
    descriptor: u64,
    packet_size: usize,
    faults: Arc<Faults>,
    /// Set by an injected fault: close the connection without answering.
    drop_now: bool,
    /// The open transaction received messages (a COMMIT fault hits only real work).
    received: bool,
    /// `SET NOCOUNT ON`: DONE tokens carry no row count.
    nocount: bool,
    /// A statement of the open transaction runs under its savepoint (XACT_ABORT OFF): a
    /// cancel undoes that statement alone.
    statement_savepoint: bool,
    /// The database session behind this connection is gone: the connection closes
    /// without an answer, as a killed SQL Server session's does.
    session_gone: bool,
    /// The batch's declared variable types (an assignment converts to them) and table
    /// variables: both live for one batch.
    var_types: HashMap<String, String>,
    tables: HashMap<String, TableVar>,
}

/// A table variable: its columns (name, type) and rows.
#[derive(Debug, Default)]
struct TableVar {
    columns: Vec<(String, String)>,
    rows: Vec<Vec<Sql>>,
}

type Params = HashMap<String, Sql>;

/// A statement's failure: SQL Server's number, class and text.
struct Failure {
    number: i32,
    class: u8,
    message: String,
}

/// The severity from which SQL Server ends the connection: the client is not answered,
/// its connection closes.
const FATAL: u8 = 20;

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
        if e.kind == ErrorKind::Connection {
            // The database session is gone (killed, or the server restarting): fatal, as a
            // killed SQL Server session is (severity 20 and above end the connection).
            return Failure { number: 0, class: FATAL, message: e.message };
        }
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
    stream: TcpStream,
    pg_url: &str,
    creds: &Credentials,
    faults: Arc<Faults>,
    activation: Arc<Activation>,
    tls: Option<Arc<tls::Tls>>,
) -> std::io::Result<()> {
    stream.set_nodelay(true).ok();
    // TDS 8.0 (strict) begins with a TLS handshake record, TDS 7 with a PRELOGIN packet.
    let mut first = [0u8; 1];
    if stream.peek(&mut first).await? == 0 {
        return Ok(());
    }
    if first[0] == 0x16 {
        let Some(tls) = tls else {
            warn!("refused a TDS 8.0 (Encrypt=strict) client: this emulator runs without TLS");
            return Ok(());
        };
        let mut s = tokio_rustls::TlsAcceptor::from(tls.strict.clone()).accept(stream).await?;
        let Some((ty, payload)) = codec::read_message(&mut s).await? else { return Ok(()) };
        if ty != packet_type::PRELOGIN {
            return Ok(());
        }
        // The connection is encrypted already: PRELOGIN's encryption option is not
        // negotiated again (a TDS 8.0 client ignores it), so the answer mirrors the ask.
        let answer = codec::prelogin_encryption(&payload).unwrap_or(codec::ENCRYPT_NOT_SUP);
        codec::write_message(&mut s, packet_type::TABULAR_RESULT, &codec::prelogin_response_with(answer), 4096).await?;
        return logged_in(s, None, pg_url, creds, faults, activation).await;
    }
    let mut stream = stream;
    let Some((ty, payload)) = codec::read_message(&mut stream).await? else { return Ok(()) };
    if ty != packet_type::PRELOGIN {
        return Ok(());
    }
    // As SQL Server answers (2.2.6.5): a client that asks for encryption (ENCRYPT_ON,
    // ENCRYPT_REQ) gets it over the whole connection; one that offers it (ENCRYPT_OFF)
    // gets ENCRYPT_OFF, the login encrypted if it runs the handshake; one that cannot
    // (ENCRYPT_NOT_SUP) is served in plain text.
    let asked = codec::prelogin_encryption(&payload);
    let answer = match (asked, &tls) {
        (Some(1 | 3), Some(_)) => codec::ENCRYPT_ON,
        (Some(0), Some(_)) => codec::ENCRYPT_OFF,
        _ => codec::ENCRYPT_NOT_SUP,
    };
    debug!(asked = ?asked, answer, "PRELOGIN encryption");
    codec::write_message(&mut stream, packet_type::TABULAR_RESULT, &codec::prelogin_response_with(answer), 4096)
        .await?;
    match (tls, answer) {
        (Some(tls), codec::ENCRYPT_ON) => {
            let s = tls.accept_in_prelogin(stream).await?;
            logged_in(s, None, pg_url, creds, faults, activation).await
        }
        (Some(tls), codec::ENCRYPT_OFF) => {
            // A handshake (in PRELOGIN packets) means the login comes encrypted; a LOGIN7
            // straight away, that the client chose to send it in plain text.
            let mut header = [0u8; 1];
            if stream.peek(&mut header).await? == 0 {
                return Ok(());
            }
            if header[0] != packet_type::PRELOGIN {
                debug!("a login in plain text after ENCRYPT_OFF");
                return logged_in(stream, None, pg_url, creds, faults, activation).await;
            }
            debug!("the login encrypted (ENCRYPT_OFF)");
            let mut s = tls.accept_in_prelogin(stream).await?;
            let Some(login) = codec::read_message(&mut s).await? else { return Ok(()) };
            // The login only: from here on the client talks in plain text.
            let (prelogin, _) = s.into_inner();
            logged_in(prelogin.into_inner()?, Some(login), pg_url, creds, faults, activation).await
        }
        _ if matches!(asked, Some(1 | 3)) => {
            warn!("refused a client that requires TLS: this emulator runs without TLS");
            Ok(())
        }
        _ => logged_in(stream, None, pg_url, creds, faults, activation).await,
    }
}

/// The rest of a connection after PRELOGIN (and TLS, when the client asked for it):
/// LOGIN7 (`login`, when it was read already, encrypted), then requests until the
/// client goes.
async fn logged_in<S>(
    mut stream: S,
    login: Option<(u8, Vec<u8>)>,
    pg_url: &str,
    creds: &Credentials,
    faults: Arc<Faults>,
    activation: Arc<Activation>,
) -> std::io::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (ty, payload) = match login {
        Some(read) => read,
        None => match codec::read_message(&mut stream).await? {
            Some(read) => read,
            None => return Ok(()),
        },
    };
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
        activation,
        in_tran: false,
        nested: 0,
        spid: next_spid(),
        xact_abort: false,
        lock_timeout_ms: -1,
        prepared: HashMap::new(),
        descriptor: 0,
        packet_size,
        faults,
        drop_now: false,
        received: false,
        nocount: false,
        statement_savepoint: false,
        session_gone: false,
        var_types: HashMap::new(),
        tables: HashMap::new(),
    };

    // Requests are read on a task of their own, so that an ATTENTION can arrive while a
    // request runs (a client cancels a waiting RECEIVE that way).
    let (mut read, mut write) = tokio::io::split(stream);
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
                // As SQL Server answers
                // an ATTENTION: the cancelled request's response ends (its own message),
                // then the acknowledgement comes in a message of its own (tedious waits
                // for that second message; other clients read on to the DONE with the
                // attention bit either way).
                t = Tokens::default();
                // With XACT_ABORT OFF the cancelled statement alone is undone and the
                // transaction stays open, as in SQL Server (a client's timeout does not
                // end its transaction); with it ON, or outside a transaction, what the
                // request did is rolled back.
                let kept = conn.in_tran
                    && !conn.xact_abort
                    && (!conn.statement_savepoint
                        || conn.session.client().batch_execute(emu::STATEMENT_UNDO.sql).await.is_ok());
                conn.statement_savepoint = false;
                if !kept {
                    let _ = conn.session.rollback().await;
                    if conn.in_tran {
                        conn.in_tran = false;
                        conn.nested = 0;
                        t.env_change_tran(10, conn.descriptor);
                    }
                }
                t.done(0xFD, 0, 0);
                codec::write_message(&mut write, packet_type::TABULAR_RESULT, &t.out, conn.packet_size).await?;
                t = Tokens::default();
                t.done(0xFD, done::ATTN, 0);
            }
        }
        if conn.drop_now {
            warn!("fault injected: connection dropped mid-transaction");
            break;
        }
        if conn.session_gone {
            warn!("the database session is gone: connection closed without an answer");
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
    match codec::parse_rpc(payload) {
        Ok((procedure, params)) if procedure.eq_ignore_ascii_case("sp_executesql") => {
            // The statement is sp_executesql's first parameter, whatever the client
            // names it (`@stmt`; tedious sends `@statement`), or none; the declaration of
            // the others (`@params`) and their values follow.
            let mut params = params.into_iter();
            let sql = match params.next() {
                Some((_, Sql::NVarChar(s))) => s,
                Some((_, Sql::VarChar(b))) => Sql::varchar_text(&b),
                _ => {
                    t.error(214, 2, 16, "Procedure expects parameter '@statement' of type 'ntext/nchar/nvarchar'.");
                    t.done(0xFE, done::ERROR, 0);
                    return;
                }
            };
            let params: Params = params.collect();
            let ok = run(conn, &sql, &params, t, 0xFF).await;
            t.done(0xFE, if ok { 0 } else { done::ERROR }, 0);
        }
        Ok((procedure, params))
            if ["sp_prepare", "sp_execute", "sp_prepexec", "sp_unprepare"]
                .iter()
                .any(|p| procedure.eq_ignore_ascii_case(p)) =>
        {
            prepared(conn, &procedure.to_lowercase(), params, t).await;
        }
        Ok((procedure, params))
            if matches!(catalog::bare_name(&procedure).as_str(), "sp_datatype_info" | "sp_datatype_info_100") =>
        {
            let ok = match catalog::datatype_info(&params, t) {
                Ok(()) => true,
                Err(f) => {
                    t.error(f.number, 1, f.class, &f.message);
                    false
                }
            };
            t.return_status(if ok { 0 } else { 1 });
            t.done(0xFE, if ok { 0 } else { done::ERROR }, 0);
        }
        Ok((procedure, _)) if catalog::bare_name(&procedure).starts_with("sp_") => {
            // A system procedure SQL Server has: not supported, rather than not found.
            debug!(procedure, "refused: a system procedure the emulator does not have");
            let name = catalog::bare_name(&procedure);
            t.error(
                tsql::NOT_SUPPORTED,
                1,
                16,
                &format!("The system procedure {name} is not supported by the emulator."),
            );
            t.done(0xFE, done::ERROR, 0);
        }
        Ok((procedure, _)) => {
            debug!(procedure, "refused: no such stored procedure");
            t.error(2812, 1, 16, &format!("Could not find stored procedure '{procedure}'."));
            t.done(0xFE, done::ERROR, 0);
        }
        Err(e) => {
            t.error(50000, 1, 16, &e.to_string());
            t.done(0xFE, done::ERROR, 0);
        }
    }
}

/// ODBC's prepared statements (sp_prepare, sp_execute, sp_prepexec, sp_unprepare), by
/// position as the driver sends them: the handle (an OUTPUT parameter of sp_prepare and
/// sp_prepexec, returned as a RETURNVALUE), the declaration of the parameters, the
/// statement, then the parameters' values. A prepared statement is its text, run again
/// at each sp_execute; it lives until sp_unprepare or the end of the connection.
async fn prepared(conn: &mut Conn, procedure: &str, params: Vec<(String, Sql)>, t: &mut Tokens) {
    let mut params = params.into_iter();
    let handle_name = |p: &Option<(String, Sql)>| {
        p.as_ref().map(|(n, _)| if n.starts_with('#') { String::new() } else { n.clone() }).unwrap_or_default()
    };
    let refuse = |t: &mut Tokens, message: &str| {
        t.error(8179, 1, 16, message);
        t.done(0xFE, done::ERROR, 0);
    };
    match procedure {
        "sp_prepare" | "sp_prepexec" => {
            let handle_param = params.next();
            let names = match params.next() {
                Some((_, Sql::NVarChar(d))) => declared_names(&d),
                Some((_, Sql::VarChar(d))) => declared_names(&Sql::varchar_text(&d)),
                _ => Vec::new(),
            };
            let sql = match params.next() {
                Some((_, Sql::NVarChar(s))) => s,
                Some((_, Sql::VarChar(b))) => Sql::varchar_text(&b),
                _ => return refuse(t, &format!("{procedure} without a statement.")),
            };
            let handle = i32::try_from(conn.prepared.len()).unwrap_or(i32::MAX).saturating_add(1);
            let handle = (handle..).find(|h| !conn.prepared.contains_key(h)).unwrap_or(handle);
            conn.prepared.insert(handle, (sql.clone(), names.clone()));
            let mut ok = true;
            if procedure == "sp_prepexec" {
                let values = bind(&names, params);
                ok = run(conn, &sql, &values, t, 0xFF).await;
            }
            t.return_status(if ok { 0 } else { 1 });
            t.return_value_int(0, &handle_name(&handle_param), handle);
            t.done(0xFE, if ok { 0 } else { done::ERROR }, 0);
        }
        "sp_execute" => {
            let found = match params.next() {
                Some((_, Sql::Int(h))) => conn.prepared.get(&h).cloned(),
                Some((_, Sql::BigInt(h))) => i32::try_from(h).ok().and_then(|h| conn.prepared.get(&h).cloned()),
                _ => None,
            };
            let Some((sql, names)) = found else {
                return refuse(t, "Could not find prepared statement with handle given to sp_execute.");
            };
            let values = bind(&names, params);
            let ok = run(conn, &sql, &values, t, 0xFF).await;
            t.return_status(if ok { 0 } else { 1 });
            t.done(0xFE, if ok { 0 } else { done::ERROR }, 0);
        }
        _ => {
            let known = match params.next() {
                Some((_, Sql::Int(h))) => conn.prepared.remove(&h).is_some(),
                _ => false,
            };
            if !known {
                return refuse(t, "Could not find prepared statement with handle given to sp_unprepare.");
            }
            t.return_status(0);
            t.done(0xFE, 0, 0);
        }
    }
}

/// The names a parameter declaration gives, in order (`@P1 int,@P2 decimal(10,2)` →
/// `@p1`, `@p2`), lower case as variables are kept.
fn declared_names(declaration: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut depth = 0;
    let mut part = String::new();
    for c in declaration.chars().chain(std::iter::once(',')) {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                if let Some(name) = part.split_whitespace().next().filter(|n| n.starts_with('@')) {
                    names.push(name.to_lowercase());
                }
                part.clear();
                continue;
            }
            _ => {}
        }
        part.push(c);
    }
    names
}

/// The values of a prepared statement's call as its variables: a value with a name
/// under that name, an unnamed one (as ODBC sends them) under the declared name of its
/// position.
fn bind(names: &[String], values: impl Iterator<Item = (String, Sql)>) -> Params {
    values
        .enumerate()
        .map(
            |(i, (name, v))| {
                if name.starts_with('#') { (names.get(i).cloned().unwrap_or(name), v) } else { (name, v) }
            },
        )
        .collect()
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
                // As SQL Server: an inner BEGIN only counts up @@TRANCOUNT.
                conn.nested += 1;
                return Ok(());
            }
            if conn.faults.on_begin() {
                warn!("fault injected: BEGIN TRANSACTION refused (3988)");
                return Err(Failure {
                    number: 3988,
                    class: 16,
                    message: "New transaction is not allowed because there are other threads running in the session."
                        .into(),
                });
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
            if what == Tran::Commit && conn.nested > 0 {
                // The COMMIT of an inner transaction commits nothing: it counts down.
                conn.nested -= 1;
                return Ok(());
            }
            // A ROLLBACK rolls back to the outermost BEGIN, whatever the nesting.
            conn.nested = 0;
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
    conn.var_types.clear();
    conn.tables.clear();
    let mut pending: VecDeque<Statement> = statements.into();
    let mut had_error = false;
    while let Some(st) = pending.pop_front() {
        // `@@TRANCOUNT` and the others as of this statement (an IF may test them).
        system_variables(conn, &mut vars);
        // Control of flow: a block's statements, or the branch an IF takes, run next.
        let st = match st {
            Statement::Block(body) => {
                for s in body.into_iter().rev() {
                    pending.push_front(s);
                }
                continue;
            }
            Statement::ExecSql { statement, args } => {
                // sp_executesql in a batch: its statements run as a batch of their own,
                // their parameters its variables; the caller's variables and table
                // variables are not theirs, and stay as they were.
                let inner = (|| -> Result<(String, Params), Failure> {
                    let sql = match values::value(&statement, &vars)? {
                        Sql::NVarChar(s) => s,
                        Sql::VarChar(b) => Sql::varchar_text(&b),
                        _ => {
                            return Err(Failure {
                                number: 214,
                                class: 16,
                                message: "Procedure expects parameter '@statement' of type 'ntext/nchar/nvarchar'."
                                    .into(),
                            });
                        }
                    };
                    let mut p = Params::new();
                    for (name, v) in &args {
                        p.insert(name.clone(), values::value(v, &vars)?);
                    }
                    Ok((sql, p))
                })();
                let (sql, inner_params) = match inner {
                    Ok(x) => x,
                    Err(f) => {
                        let keep = !conn.xact_abort;
                        failed(conn, f, t, done_token, in_proc, keep).await;
                        return false;
                    }
                };
                let saved = (std::mem::take(&mut conn.var_types), std::mem::take(&mut conn.tables));
                let ok = Box::pin(run(conn, &sql, &inner_params, t, 0xFF)).await;
                (conn.var_types, conn.tables) = saved;
                if conn.drop_now || conn.session_gone {
                    return false;
                }
                if !ok {
                    // Its error ends the caller's batch here (as an error that is not
                    // statement-level does): the last DONE, without MORE.
                    t.done(done_token, done::ERROR | in_proc, 0);
                    return false;
                }
                let more = if pending.is_empty() { in_proc } else { done::MORE };
                t.done(done_token, more, 0);
                continue;
            }
            Statement::If { condition, then, otherwise } => match holds(&condition, &vars) {
                Ok(true) => {
                    pending.push_front(*then);
                    continue;
                }
                Ok(false) => {
                    if let Some(o) = otherwise {
                        pending.push_front(*o);
                    }
                    continue;
                }
                Err(f) => {
                    let keep = !conn.xact_abort;
                    failed(conn, f, t, done_token, in_proc, keep).await;
                    return false;
                }
            },
            st => st,
        };
        let more = if pending.is_empty() { in_proc } else { done::MORE };
        if conn.in_tran && commits_itself(&st) {
            // As the procedure does (05_handoff.sql): its batches commit, which would
            // commit the caller's work too.
            let f = Failure {
                number: 50000,
                class: 16,
                message: "Rekenserver.sweep commits its own batches: run it outside a transaction".into(),
            };
            let keep = !conn.xact_abort;
            failed(conn, f, t, done_token, in_proc, keep).await;
            return false;
        }
        let implicit = !conn.in_tran && needs_transaction(&st);
        // Inside a transaction with XACT_ABORT OFF a failing statement is undone alone.
        let guarded = conn.in_tran && !conn.xact_abort && needs_transaction(&st);
        let mut savepoint_lost = false;
        let result = async {
            if implicit {
                conn.session.begin().await?;
            }
            if guarded && let Err(e) = conn.session.client().batch_execute(emu::STATEMENT_SAVEPOINT.sql).await {
                savepoint_lost = true;
                return Err(pg_failure(e));
            }
            conn.statement_savepoint = guarded;
            let r = execute(conn, st, &mut vars, t).await;
            conn.statement_savepoint = false;
            if guarded && conn.in_tran && !conn.drop_now {
                let undo = match &r {
                    Ok(_) => emu::STATEMENT_RELEASE.sql,
                    Err(_) => emu::STATEMENT_UNDO.sql,
                };
                if let Err(e) = conn.session.client().batch_execute(undo).await {
                    // The statement could not be undone alone: the transaction goes.
                    savepoint_lost = true;
                    return Err(pg_failure(e));
                }
            }
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
            Err(f) if f.class >= FATAL => {
                debug!("fatal: {}", f.message);
                conn.session_gone = true;
                return false;
            }
            Err(f) if !conn.xact_abort && !savepoint_lost && statement_level(f.number) => {
                // The statement ends, undone alone; the batch and the transaction go on.
                t.error(f.number, 1, f.class, &f.message);
                t.done(done_token, done::ERROR | more, 0);
                had_error = true;
            }
            Err(f) => {
                // With XACT_ABORT OFF the transaction stays (the statement was undone
                // alone, or ran outside the database); a deadlock's victim loses it
                // whatever XACT_ABORT.
                // An undeclared variable (137) is a compile error in SQL Server: its batch
                // never runs, so no transaction is touched.
                let keep = (!conn.xact_abort || f.number == 137) && f.number != 1205 && !savepoint_lost;
                failed(conn, f, t, done_token, in_proc, keep).await;
                return false;
            }
        }
    }
    !had_error
}

/// Errors that end their statement only, as SQL Server's do: with XACT_ABORT OFF the
/// batch goes on after them. A lock timeout (1222: the SET LOCK_TIMEOUT page has the
/// transaction and the batch go on) and Service Broker's errors (84xx, 96xx: an unknown
/// conversation, a conversation in the wrong state, a disabled queue). The others here
/// (conversion errors, a deadlock, the emulator's refusals) end the batch.
fn statement_level(number: i32) -> bool {
    number == 1222 || (8400..8500).contains(&number) || (9600..9800).contains(&number)
}

/// A statement failed: the batch ends with the error, as SQL Server's batch-aborting
/// errors end it. The transaction rolls back with XACT_ABORT ON (or a deadlock); with it
/// OFF only the statement was undone (`keep`) and the transaction stays open.
async fn failed(conn: &mut Conn, f: Failure, t: &mut Tokens, done_token: u8, in_proc: u16, keep: bool) {
    if conn.in_tran && !keep {
        conn.in_tran = false;
        conn.nested = 0;
        let _ = conn.session.rollback().await;
        t.env_change_tran(10, conn.descriptor);
    }
    t.error(f.number, 1, f.class, &f.message);
    t.done(done_token, done::ERROR | in_proc, 0);
}

/// Whether an IF's condition holds (a comparison with NULL does not, as with ANSI_NULLS
/// ON).
fn holds(c: &Condition, vars: &Params) -> Result<bool, Failure> {
    Ok(match c {
        Condition::IsNull(v) => matches!(value(v, vars)?, Sql::Null),
        Condition::IsNotNull(v) => !matches!(value(v, vars)?, Sql::Null),
        Condition::Equal(a, b) => equal(value(a, vars)?, value(b, vars)?)? == Some(true),
        Condition::NotEqual(a, b) => equal(value(a, vars)?, value(b, vars)?)? == Some(false),
        Condition::Greater(a, b) => {
            let int = |v: Sql| match v {
                Sql::Null => Ok(None),
                Sql::Int(n) => Ok(Some(i64::from(n))),
                Sql::BigInt(n) => Ok(Some(n)),
                _ => Err(Failure {
                    number: 50100,
                    class: 16,
                    message: "a > comparison of other than integers is not supported by the emulator.".into(),
                }),
            };
            matches!((int(value(a, vars)?)?, int(value(b, vars)?)?), (Some(x), Some(y)) if x > y)
        }
    })
}

/// The connection's number for `@@SPID`: from 51, as SQL Server numbers user sessions.
fn next_spid() -> i32 {
    static NEXT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(51);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The system variables the emulator knows, as of the statement about to run:
/// `@@TRANCOUNT`, `@@SPID`, `@@VERSION`. Any other `@@name` is refused as not supported.
fn system_variables(conn: &Conn, vars: &mut Params) {
    let trancount = if conn.in_tran { 1 + conn.nested } else { 0 };
    vars.insert("@@trancount".into(), Sql::Int(i32::try_from(trancount).unwrap_or(i32::MAX)));
    vars.insert("@@spid".into(), Sql::Int(conn.spid));
    vars.insert(
        "@@version".into(),
        Sql::NVarChar(format!(
            "sbworker emulator {}: the Service Broker statements of SQL Server over TDS 7.4, on PostgreSQL",
            env!("CARGO_PKG_VERSION")
        )),
    );
}

/// A procedure that commits transactions of its own (`Rekenserver.sweep`, the selftest's
/// scratch steps): never run in one of the client's, nor in an implicit one.
fn commits_itself(st: &Statement) -> bool {
    matches!(st, Statement::Exec { procedure, .. }
        if procedure.eq_ignore_ascii_case("rekenserver.sweep") || procedure.eq_ignore_ascii_case("rekenserver.selftest"))
}

fn needs_transaction(st: &Statement) -> bool {
    !commits_itself(st)
        && !matches!(
            st,
            Statement::Transaction(_)
                | Statement::SetOption { .. }
                | Statement::SetSession { .. }
                | Statement::Declare(_)
                | Statement::DeclareTable { .. }
                | Statement::SelectTable { .. }
                | Statement::If { .. }
                | Statement::Block(_)
                | Statement::SetVar { .. }
                | Statement::AssignVars(_)
                | Statement::SelectVars(_)
        )
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
    let tls = tls::Tls::generated().map_err(std::io::Error::other)?;
    start_tls(addr, pg_url, creds, faults, Some(tls), stop).await
}

/// [`start_with`], with this TLS (none: every client is served in plain text, and one
/// that requires encryption is refused).
pub async fn start_tls(
    addr: std::net::SocketAddr,
    pg_url: String,
    creds: Credentials,
    faults: Arc<Faults>,
    tls: Option<tls::Tls>,
    stop: Stop,
) -> std::io::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    match &tls {
        Some(t) => {
            info!(%bound, fingerprint = %t.fingerprint, "Service Broker emulator listening (TDS 7.4, TLS for clients that ask or offer, TDS 8.0 strict)")
        }
        None => info!(%bound, "Service Broker emulator listening (TDS 7.4, no TLS)"),
    }
    Ok((bound, tokio::spawn(serve_tls(listener, pg_url, creds, faults, tls, stop))))
}
