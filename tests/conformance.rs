//! One conformance suite, written once against the transport's traits and run on every
//! back end: the PostgreSQL session, and the SQL Server transport over TDS through the
//! emulator. What a back end cannot do is declared in its capability list, which the
//! suite reads; no assertion is silently left out. (A real SQL Server is exercised by
//! `mssql_real` when `SBWORKER_MSSQL_URL` is set.)
//!
//! Session level: endpoint states; order within a conversation and one group per receive; a
//! rollback returns the messages; a send is invisible until commit; the group stays
//! locked until commit; an error end reaches the far side; attempt counts survive a
//! rollback and a crash; the broker's poison rule (five rollbacks) where it is on; MOVE
//! CONVERSATION; EndDialog at the far side; GET CONVERSATION GROUP, and a receive of a
//! group another session holds (empty within a bound); the version claim;
//! the state of a missing queue; reader slots held per session. (The worker level is `conformance_worker`.)

use std::sync::Arc;
use std::time::Duration;

use sbworker::broker::mssql::{Connection, MssqlTransport, Tds};
use sbworker::broker::postgres::{PostgresTransport, Session as PgSession};
use sbworker::broker::{ErrorKind, Message, system};
use sbworker::contract::message_types;
use sbworker::emulator::server::Faults;
use sbworker::transport::{MessageKey, PayrollStore, Session, Transport};
use uuid::Uuid;

use crate::common::calc::*;

/// What a back end does differently, declared once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Capability {
    /// `queue_state` of a queue that does not exist is a `NotFound` error.
    MissingQueueIsNotFound,
    /// A target endpoint is "started inbound" (SI) until the receive of its first
    /// message commits (the PostgreSQL broker); SQL Server creates it conversing (CO)
    /// when the whole first message arrives at once, as it does within one instance.
    TargetStartsInbound,
    /// Once both sides have ended, both endpoints are gone. SQL Server keeps the
    /// target's, closed (CD), for a while (against replayed messages).
    EndedEndpointsRemoved,
}

struct Backend {
    name: &'static str,
    capabilities: &'static [Capability],
}

impl Backend {
    fn can(&self, c: Capability) -> bool {
        self.capabilities.contains(&c)
    }
}

use Capability::*;
const POSTGRES: Backend =
    Backend { name: "postgres", capabilities: &[MissingQueueIsNotFound, TargetStartsInbound, EndedEndpointsRemoved] };
// The emulator runs on the PostgreSQL broker: its endpoints are that broker's. It answers
// `sbworker.queue_state` for a missing queue with no row, as SQL Server's procedure does;
// the transport turns that into NotFound.
const TDS: Backend = Backend {
    name: "tds (emulator)",
    capabilities: &[MissingQueueIsNotFound, TargetStartsInbound, EndedEndpointsRemoved],
};
const SQL_SERVER: Backend = Backend { name: "sql server", capabilities: &[MissingQueueIsNotFound] };

/// The far side of the conversations (the initiator, as the roster triggers) and a look
/// at the broker, as each back end offers them: the PostgreSQL broker's functions and
/// tables, or T-SQL (`BEGIN DIALOG`, `SEND`, `SELECT COUNT(*) FROM queue`,
/// `sys.conversation_endpoints`, `ALTER QUEUE`).
trait Far {
    /// Begins a dialog from the data service and sends `n` Vraags on it, committed; the
    /// initiator's handle.
    async fn dialog(&mut self, n: usize) -> Uuid;
    /// The messages waiting (committed) on `queue`.
    async fn waiting(&mut self, queue: &str) -> i64;
    /// The state of an endpoint (`None`: gone).
    async fn state(&mut self, handle: Uuid) -> Option<String>;
    /// Receives what is left of the initiator's conversation and ends its side.
    async fn finish(&mut self, initiator: Uuid) -> Vec<Message>;
    /// Sets the queue's status and its poison message handling.
    async fn alter_queue(&mut self, queue: &str, enabled: bool, poison_handling: bool);
    /// Sets the most readers the database allows on the queue (0: no limit).
    async fn limit_readers(&mut self, queue: &str, n: i32);
}

/// The initiator's side through the PostgreSQL broker's own functions.
struct PgFar(PgSession);

impl Far for PgFar {
    async fn dialog(&mut self, n: usize) -> Uuid {
        let s = &mut self.0;
        s.begin().await.unwrap();
        let h = s.begin_dialog(DATA_SERVICE, REKEN_SERVICE, CONTRACT, None, None).await.unwrap();
        for _ in 0..n {
            s.send(h, message_types::VRAAG, Some(&vraag_body(Uuid::new_v4()))).await.unwrap();
        }
        s.commit().await.unwrap();
        h
    }

    async fn waiting(&mut self, queue: &str) -> i64 {
        count(&self.0, &format!("SELECT count(*) FROM sb.message WHERE queue = '{queue}'")).await
    }

    async fn state(&mut self, handle: Uuid) -> Option<String> {
        crate::common::broker::state(&self.0, handle).await
    }

    async fn finish(&mut self, initiator: Uuid) -> Vec<Message> {
        finish_on(&mut self.0, initiator).await
    }

    async fn alter_queue(&mut self, queue: &str, enabled: bool, poison_handling: bool) {
        self.0
            .client()
            .execute(
                "SELECT sb.alter_queue($1, p_enabled => $2, p_poison_handling => $3)",
                &[&queue, &enabled, &poison_handling],
            )
            .await
            .unwrap();
    }

    async fn limit_readers(&mut self, queue: &str, n: i32) {
        self.0.client().execute("SELECT sb.alter_queue($1, p_max_readers => $2)", &[&queue, &n]).await.unwrap();
    }
}

async fn finish_on<S: Session>(s: &mut S, initiator: Uuid) -> Vec<Message> {
    s.begin().await.unwrap();
    let got = s.receive_conversation(DATA_QUEUE, initiator).await.unwrap();
    s.end_conversation(initiator, None).await.unwrap();
    s.commit().await.unwrap();
    got
}

/// The initiator's side in T-SQL, over its own TDS connection (a login allowed to
/// begin dialogs on the data service and to alter the queues).
struct TsqlFar {
    client: Tds,
    /// The initiator's receives and ends go through the SQL Server transport.
    session: sbworker::broker::mssql::MssqlSession,
}

impl TsqlFar {
    async fn connect(conn: &str) -> Self {
        let client = sbworker::broker::mssql::connect(&Connection::parse(conn).unwrap()).await.unwrap();
        let session = MssqlTransport::new(conn).unwrap().open().await.unwrap();
        Self { client, session }
    }

    async fn batch(&mut self, sql: &str) {
        self.client.simple_query(sql).await.unwrap().into_results().await.unwrap();
    }
}

impl Far for TsqlFar {
    async fn dialog(&mut self, n: usize) -> Uuid {
        self.batch("BEGIN TRANSACTION").await;
        let row = self
            .client
            .query(
                "DECLARE @h uniqueidentifier;
                 BEGIN DIALOG CONVERSATION @h
                     FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
                     TO SERVICE N'/Rekenserver/LoonfactorBerekening/RekenService'
                     ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract]
                     WITH ENCRYPTION = OFF;
                 SELECT @h;",
                &[],
            )
            .await
            .unwrap()
            .into_row()
            .await
            .unwrap()
            .expect("the handle");
        let h: Uuid = row.get(0).unwrap();
        for _ in 0..n {
            let body = vraag_body(Uuid::new_v4());
            self.client
                .execute(
                    "SEND ON CONVERSATION @P1 MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (@P2)",
                    &[&h, &body.as_slice()],
                )
                .await
                .unwrap();
        }
        self.batch("COMMIT TRANSACTION").await;
        h
    }

    async fn waiting(&mut self, queue: &str) -> i64 {
        // READPAST: a message another transaction holds (an uncommitted send) is not
        // waiting yet.
        let sql = format!("SELECT COUNT(*) FROM [{queue}] WITH (READPAST)");
        let row = self.client.query(sql, &[]).await.unwrap().into_row().await.unwrap().unwrap();
        i64::from(row.get::<i32, _>(0).unwrap())
    }

    async fn state(&mut self, handle: Uuid) -> Option<String> {
        let row = self
            .client
            .query("SELECT state FROM sys.conversation_endpoints WHERE conversation_handle = @P1", &[&handle])
            .await
            .unwrap()
            .into_row()
            .await
            .unwrap();
        row.map(|r| r.get::<&str, _>(0).unwrap().trim().to_owned())
    }

    async fn finish(&mut self, initiator: Uuid) -> Vec<Message> {
        finish_on(&mut self.session, initiator).await
    }

    async fn alter_queue(&mut self, queue: &str, enabled: bool, poison_handling: bool) {
        let on = |b: bool| if b { "ON" } else { "OFF" };
        self.batch(&format!(
            "ALTER QUEUE [{queue}] WITH STATUS = {}, POISON_MESSAGE_HANDLING (STATUS = {})",
            on(enabled),
            on(poison_handling)
        ))
        .await;
    }

    async fn limit_readers(&mut self, queue: &str, n: i32) {
        self.batch(&format!("ALTER QUEUE [{queue}] WITH ACTIVATION (STATUS = OFF, MAX_QUEUE_READERS = {n})")).await;
    }
}

/// The longest a receive that expects messages waits (it returns as soon as they are
/// there; under load, a crashed session's rollback can take seconds to be seen).
const WAIT: Duration = Duration::from_secs(30);

/// The suite, on `transport`; `far` is the initiator's side on the same database.
async fn suite<T: Transport, F: Far>(backend: &Backend, transport: &T, far: &mut F)
where
    T::Session: PayrollStore,
{
    let name = backend.name;
    let mut a = transport.open().await.unwrap();
    let mut b = transport.open().await.unwrap();

    // Order within a conversation; one group per receive.
    let h = far.dialog(3).await;
    a.begin().await.unwrap();
    let got = a.receive(REKEN_QUEUE, 10, None, WAIT).await.unwrap();
    assert_eq!(got.len(), 3, "{name}");
    assert!(got.iter().all(|m| m.conversation_group_id == got[0].conversation_group_id), "{name}: one group");
    assert_eq!(got.iter().map(|m| m.sequence).collect::<Vec<_>>(), [1, 2, 3], "{name}: in order");
    // The group stays locked until commit: another session gets nothing of it.
    b.begin().await.unwrap();
    assert!(b.receive(REKEN_QUEUE, 10, None, Duration::from_millis(300)).await.unwrap().is_empty(), "{name}: locked");
    b.commit().await.unwrap();
    // A rollback returns the messages, in order.
    a.rollback().await.unwrap();
    a.begin().await.unwrap();
    let again = a.receive(REKEN_QUEUE, 10, None, WAIT).await.unwrap();
    assert_eq!(again.iter().map(|m| m.sequence).collect::<Vec<_>>(), [1, 2, 3], "{name}: returned");
    let target = again[0].conversation_handle;

    // Attempt counts survive a rollback (they are written outside the transaction).
    let keys = [MessageKey::of(&again[0])];
    assert_eq!(a.count_attempts(REKEN_QUEUE, &keys).await.unwrap()[0].attempts, 1, "{name}");
    a.rollback().await.unwrap();
    a.begin().await.unwrap();
    let third = a.receive(REKEN_QUEUE, 10, None, WAIT).await.unwrap();
    assert_eq!(third.len(), 3, "{name}");
    assert_eq!(a.count_attempts(REKEN_QUEUE, &keys).await.unwrap()[0].attempts, 2, "{name}: counted across a rollback");

    // ... and across a crash: a session dropped inside its transaction (its connection
    // gone, as when the worker is killed) leaves the count standing.
    a.rollback().await.unwrap();
    let mut c = transport.open().await.unwrap();
    c.begin().await.unwrap();
    assert_eq!(c.receive(REKEN_QUEUE, 10, None, WAIT).await.unwrap().len(), 3, "{name}");
    assert_eq!(c.count_attempts(REKEN_QUEUE, &keys).await.unwrap()[0].attempts, 3, "{name}");
    drop(c);
    // The server rolls the dropped session back once it sees the connection gone. A
    // rollback wakes no waiting receiver (on either back end's broker here: a session
    // that dies calls nothing), so the messages are found by looking again, as the
    // worker's readers do after their wait: a receive of half a second, repeated for at
    // most 30 s.
    let deadline = tokio::time::Instant::now() + WAIT;
    let fourth = loop {
        a.begin().await.unwrap();
        let got = a.receive(REKEN_QUEUE, 10, None, Duration::from_millis(500)).await.unwrap();
        if !got.is_empty() || tokio::time::Instant::now() > deadline {
            break got;
        }
        a.rollback().await.unwrap();
    };
    assert_eq!(fourth.len(), 3, "{name}: the crashed session's messages are back");
    assert_eq!(a.count_attempts(REKEN_QUEUE, &keys).await.unwrap()[0].attempts, 4, "{name}: counted across a crash");
    a.forget_attempts(&keys).await.unwrap();

    // A send is invisible until commit.
    let answers_before = far.waiting(DATA_QUEUE).await;
    a.send(target, message_types::FOUT, Some(b"<Fout/>")).await.unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(far.waiting(DATA_QUEUE).await, answers_before, "{name}: not before commit");
    // Endpoint states as the transport drives them: the initiator is conversing (CO);
    // where the broker has the state, the target is still started inbound (SI) while
    // the receive is not committed.
    assert_eq!(far.state(h).await.as_deref(), Some("CO"), "{name}");
    if backend.can(TargetStartsInbound) {
        assert_eq!(far.state(target).await.as_deref(), Some("SI"), "{name}");
    }
    // An error end reaches the far side.
    a.end_conversation(target, Some((50001, "conformance"))).await.unwrap();
    a.commit().await.unwrap();
    assert_eq!(far.state(h).await.as_deref(), Some("ER"), "{name}: the initiator's side is in error");
    let got = far.finish(h).await;
    let types: Vec<&str> = got.iter().map(|m| m.message_type.as_str()).collect();
    // The Error first, before the Fout sent ahead of it ("Broker System Messages").
    assert_eq!(types, [system::ERROR, message_types::FOUT], "{name}");
    let (code, text) = sbworker::transport::system::error_body(&got[0].body);
    assert_eq!((code, text.as_str()), (50001, "conformance"), "{name}");
    assert_eq!(far.state(h).await, None, "{name}: the initiator's endpoint is gone once it ends");
    if backend.can(EndedEndpointsRemoved) {
        assert_eq!(far.state(target).await, None, "{name}: both ended, cleaned up");
    } else {
        assert_eq!(far.state(target).await.as_deref(), Some("CD"), "{name}: the target's is closed");
    }

    // MOVE CONVERSATION: two dialogs in two groups; one moved into the other's group is
    // received with it, in one group.
    let (h1, h2) = (far.dialog(1).await, far.dialog(1).await);
    a.begin().await.unwrap();
    let first = a.receive(REKEN_QUEUE, 10, None, WAIT).await.unwrap();
    assert_eq!(first.len(), 1, "{name}");
    let g_first = first[0].conversation_group_id;
    // While `a` holds the first group, `b` receives the other: its target handle.
    b.begin().await.unwrap();
    let second = b.receive(REKEN_QUEUE, 10, None, WAIT).await.unwrap();
    assert_eq!(second.len(), 1, "{name}");
    assert_ne!(second[0].conversation_group_id, g_first, "{name}: two groups");
    let t_other = second[0].conversation_handle;
    b.rollback().await.unwrap();
    a.rollback().await.unwrap();
    a.begin().await.unwrap();
    a.move_conversation(t_other, g_first).await.unwrap_or_else(|e| panic!("{name}: {e}"));
    a.commit().await.unwrap();
    a.begin().await.unwrap();
    let both = a.receive(REKEN_QUEUE, 10, None, WAIT).await.unwrap();
    assert_eq!(both.len(), 2, "{name}: both dialogs in one group");
    assert!(both.iter().all(|m| m.conversation_group_id == g_first), "{name}");
    for m in &both {
        a.end_conversation(m.conversation_handle, None).await.unwrap();
    }
    a.commit().await.unwrap();
    for h in [h1, h2] {
        let end = far.finish(h).await;
        assert_eq!(end.iter().map(|m| m.message_type.as_str()).collect::<Vec<_>>(), [system::END_DIALOG], "{name}");
    }

    // GET CONVERSATION GROUP: the group with messages waiting, locked for this
    // transaction (another session finds none while it is); a receive of that group
    // gets its messages; once they are gone, none is found.
    let hg = far.dialog(2).await;
    a.begin().await.unwrap();
    let g = a.get_conversation_group(REKEN_QUEUE, WAIT).await.unwrap_or_else(|e| panic!("{name}: {e}"));
    let g = g.unwrap_or_else(|| panic!("{name}: a group"));
    b.begin().await.unwrap();
    assert_eq!(
        b.get_conversation_group(REKEN_QUEUE, Duration::from_millis(300)).await.unwrap(),
        None,
        "{name}: locked"
    );
    b.commit().await.unwrap();
    // A receive of a group another session holds does not wait for that session's
    // transaction: it comes back empty within its bound (SQL Server may wait for the
    // group's lock; the transport bounds that wait to a second), and the session goes on
    // with another group in the same transaction.
    let hx = far.dialog(1).await;
    b.begin().await.unwrap();
    let held =
        crate::common::within(10, "a receive of a held group", b.receive(REKEN_QUEUE, 10, Some(g), Duration::ZERO))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(held.is_empty(), "{name}: a held group is not taken");
    let other = b.receive(REKEN_QUEUE, 10, None, WAIT).await.unwrap();
    assert_eq!(other.len(), 1, "{name}: another group is served");
    assert_ne!(other[0].conversation_group_id, g, "{name}");
    b.end_conversation(other[0].conversation_handle, None).await.unwrap();
    b.commit().await.unwrap();
    far.finish(hx).await;
    let got = a.receive(REKEN_QUEUE, 10, Some(g), WAIT).await.unwrap();
    assert_eq!(got.len(), 2, "{name}");
    assert!(got.iter().all(|m| m.conversation_group_id == g), "{name}: of that group");
    a.end_conversation(got[0].conversation_handle, None).await.unwrap();
    a.commit().await.unwrap();
    a.begin().await.unwrap();
    assert_eq!(
        a.get_conversation_group(REKEN_QUEUE, Duration::from_millis(100)).await.unwrap(),
        None,
        "{name}: none left"
    );
    a.commit().await.unwrap();
    far.finish(hg).await;

    // The version claim: newer and equal (a repair, a replay) claim, older does not.
    a.begin().await.unwrap();
    assert!(a.claim_version(777, 1, 2).await.unwrap(), "{name}");
    assert!(a.claim_version(777, 1, 2).await.unwrap(), "{name}: equal");
    assert!(!a.claim_version(777, 1, 1).await.unwrap(), "{name}: older");
    assert!(a.claim_version(777, 1, 3).await.unwrap(), "{name}: newer");
    a.commit().await.unwrap();

    // The broker's poison rule, where it is on: five rolled-back receives of the same
    // message in a row disable the queue (9617 to the next receive).
    far.alter_queue(REKEN_QUEUE, true, true).await;
    let hp = far.dialog(1).await;
    for round in 1..=5 {
        a.begin().await.unwrap();
        let got = a.receive(REKEN_QUEUE, 10, None, WAIT).await.unwrap();
        assert_eq!(got.len(), 1, "{name}: round {round}");
        a.rollback().await.unwrap();
    }
    let st = a.queue_state(REKEN_QUEUE).await.unwrap();
    assert!(!st.enabled && st.poison_handling, "{name}: disabled after five rollbacks");
    a.begin().await.unwrap();
    let e = a.receive(REKEN_QUEUE, 10, None, Duration::from_millis(100)).await.unwrap_err();
    assert_eq!((e.kind, e.number), (ErrorKind::QueueDisabled, 9617), "{name}: {e}");
    let _ = a.rollback().await;
    far.alter_queue(REKEN_QUEUE, true, false).await;
    a.begin().await.unwrap();
    let got = a.receive(REKEN_QUEUE, 10, None, WAIT).await.unwrap();
    assert_eq!(got.len(), 1, "{name}: served again once enabled");
    a.end_conversation(got[0].conversation_handle, None).await.unwrap();
    a.commit().await.unwrap();
    far.finish(hp).await;

    // The state of a queue, and of one that does not exist.
    let st = a.queue_state(REKEN_QUEUE).await.unwrap();
    assert!(st.enabled, "{name}");
    let missing = a.queue_state("no_such_queue").await;
    if backend.capabilities.contains(&Capability::MissingQueueIsNotFound) {
        assert_eq!(missing.unwrap_err().kind, ErrorKind::NotFound, "{name}");
    } else {
        assert!(missing.is_err(), "{name}: a missing queue is an error of some kind");
    }
    // Nothing left behind on the calculation's queue.
    assert_eq!(far.waiting(REKEN_QUEUE).await, 0, "{name}");

    // Reader slots (the database's limit on a queue's readers across every worker): held
    // by a session until given back or its connection ends.
    let mut c = transport.open().await.unwrap();
    assert_eq!(a.take_reader_slot(REKEN_QUEUE, 2).await.unwrap(), Some(0), "{name}");
    assert_eq!(b.take_reader_slot(REKEN_QUEUE, 2).await.unwrap(), Some(1), "{name}");
    assert_eq!(c.take_reader_slot(REKEN_QUEUE, 2).await.unwrap(), None, "{name}: both held");
    b.free_reader_slot(REKEN_QUEUE, 1).await.unwrap();
    assert_eq!(c.take_reader_slot(REKEN_QUEUE, 2).await.unwrap(), Some(1), "{name}: given back");
    drop(a);
    let mut d = transport.open().await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match d.take_reader_slot(REKEN_QUEUE, 2).await.unwrap() {
            Some(n) => {
                assert_eq!(n, 0, "{name}: the ended session's slot");
                break;
            }
            None => assert!(tokio::time::Instant::now() < deadline, "{name}: a dropped session's slot stays held"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The queue's limit on readers as the worker reads it: 0 (none) by default, then what
    // the database says.
    assert_eq!(d.queue_state(REKEN_QUEUE).await.unwrap().max_readers, None, "{name}: no limit");
    far.limit_readers(REKEN_QUEUE, 3).await;
    assert_eq!(d.queue_state(REKEN_QUEUE).await.unwrap().max_readers, Some(3), "{name}");
    far.limit_readers(REKEN_QUEUE, 0).await;
    assert_eq!(d.queue_state(REKEN_QUEUE).await.unwrap().max_readers, None, "{name}: none again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgresql_session_conforms() {
    let (url, pg) = calc_world().await;
    let transport = PostgresTransport::new(url.clone());
    suite(&POSTGRES, &transport, &mut PgFar(pg)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sql_server_transport_over_tds_conforms() {
    // The initiator's side in T-SQL too: the emulator serves both.
    let (url, _pg) = calc_world().await;
    let faults = Arc::new(Faults::default());
    let (conn, _stop) = crate::common::tds::emulator_with(&url, faults.clone()).await;
    let transport = MssqlTransport::new(&conn).unwrap();
    suite(&TDS, &transport, &mut TsqlFar::connect(&conn).await).await;
    // The receive of the held group waited for its lock (as SQL Server most likely does)
    // and the transport's bound ended the wait.
    assert!(faults.group_lock_waits() >= 1, "the emulator saw no wait for a held group");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_sql_server_conforms_when_one_is_given() {
    let Some(real) = crate::common::mssql_real::database().await else {
        eprintln!(
            "conformance on a real SQL Server: SKIPPED (set SBWORKER_MSSQL_URL and a worker login: tests/mssql_real.rs)"
        );
        return;
    };
    let transport = MssqlTransport::new(&real.worker).unwrap();
    suite(&SQL_SERVER, &transport, &mut TsqlFar::connect(&real.admin).await).await;
}
