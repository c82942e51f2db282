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
//! CONVERSATION; EndDialog at the far side; GET CONVERSATION GROUP; the version claim;
//! the state of a missing queue. (The worker level is `conformance_worker`.)

use std::sync::Arc;
use std::time::Duration;

use sbworker::broker::mssql::MssqlTransport;
use sbworker::broker::postgres::{PostgresTransport, Session as PgSession};
use sbworker::broker::{ErrorKind, system};
use sbworker::contract::message_types;
use sbworker::emulator::server::Faults;
use sbworker::transport::{MessageKey, PayrollStore, Session, Transport};
use uuid::Uuid;

use crate::broker_pg::state;
use crate::common::calc::*;

/// What a back end can do that another cannot, declared once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Capability {
    /// `queue_state` of a queue that does not exist is a `NotFound` error.
    MissingQueueIsNotFound,
}

struct Backend {
    name: &'static str,
    capabilities: &'static [Capability],
}

const POSTGRES: Backend = Backend { name: "postgres", capabilities: &[Capability::MissingQueueIsNotFound] };
// The emulator answers `sbworker.queue_state` for a missing queue with no row, as SQL
// Server's procedure does; the transport turns that into NotFound as well.
const TDS: Backend = Backend { name: "tds (emulator)", capabilities: &[Capability::MissingQueueIsNotFound] };

/// Sends `n` Vraags on one new dialog from the initiator (a PostgreSQL session, as the
/// roster triggers would); the initiator's handle.
async fn dialog_of(s: &mut PgSession, n: usize) -> Uuid {
    s.begin().await.unwrap();
    let h = s.begin_dialog(DATA_SERVICE, REKEN_SERVICE, CONTRACT, None, None).await.unwrap();
    for _ in 0..n {
        s.send(h, message_types::VRAAG, Some(&vraag_body(Uuid::new_v4()))).await.unwrap();
    }
    s.commit().await.unwrap();
    h
}

async fn waiting(s: &PgSession, queue: &str) -> i64 {
    count(s, &format!("SELECT count(*) FROM sb.message WHERE queue = '{queue}'")).await
}

const WAIT: Duration = Duration::from_secs(5);

/// The suite, on `transport`; `pg` is a PostgreSQL session on the same database for
/// the initiator's side and for looking at the broker's tables.
async fn suite<T: Transport>(backend: &Backend, transport: &T, pg: &mut PgSession)
where
    T::Session: PayrollStore,
{
    let name = backend.name;
    let mut a = transport.open().await.unwrap();
    let mut b = transport.open().await.unwrap();

    // Order within a conversation; one group per receive.
    let h = dialog_of(pg, 3).await;
    a.begin().await.unwrap();
    let got = a.receive(REKEN_Q, 10, None, WAIT).await.unwrap();
    assert_eq!(got.len(), 3, "{name}");
    assert!(got.iter().all(|m| m.conversation_group_id == got[0].conversation_group_id), "{name}: one group");
    assert_eq!(got.iter().map(|m| m.sequence).collect::<Vec<_>>(), [1, 2, 3], "{name}: in order");
    // The group stays locked until commit: another session gets nothing of it.
    b.begin().await.unwrap();
    assert!(b.receive(REKEN_Q, 10, None, Duration::from_millis(300)).await.unwrap().is_empty(), "{name}: locked");
    b.commit().await.unwrap();
    // A rollback returns the messages, in order.
    a.rollback().await.unwrap();
    a.begin().await.unwrap();
    let again = a.receive(REKEN_Q, 10, None, WAIT).await.unwrap();
    assert_eq!(again.iter().map(|m| m.sequence).collect::<Vec<_>>(), [1, 2, 3], "{name}: returned");
    let target = again[0].conversation_handle;

    // Attempt counts survive a rollback (they are written outside the transaction).
    let keys = [MessageKey::of(&again[0])];
    assert_eq!(a.count_attempts(REKEN_Q, &keys).await.unwrap()[0].attempts, 1, "{name}");
    a.rollback().await.unwrap();
    a.begin().await.unwrap();
    let third = a.receive(REKEN_Q, 10, None, WAIT).await.unwrap();
    assert_eq!(third.len(), 3, "{name}");
    assert_eq!(a.count_attempts(REKEN_Q, &keys).await.unwrap()[0].attempts, 2, "{name}: counted across a rollback");

    // ... and across a crash: a session dropped inside its transaction (its connection
    // gone, as when the worker is killed) leaves the count standing.
    a.rollback().await.unwrap();
    let mut c = transport.open().await.unwrap();
    c.begin().await.unwrap();
    assert_eq!(c.receive(REKEN_Q, 10, None, WAIT).await.unwrap().len(), 3, "{name}");
    assert_eq!(c.count_attempts(REKEN_Q, &keys).await.unwrap()[0].attempts, 3, "{name}");
    drop(c);
    a.begin().await.unwrap();
    let fourth = a.receive(REKEN_Q, 10, None, WAIT).await.unwrap();
    assert_eq!(fourth.len(), 3, "{name}: the crashed session's messages are back");
    assert_eq!(a.count_attempts(REKEN_Q, &keys).await.unwrap()[0].attempts, 4, "{name}: counted across a crash");
    a.forget_attempts(&keys).await.unwrap();

    // A send is invisible until commit.
    let answers_before = waiting(pg, ANTWOORD_Q).await;
    a.send(target, message_types::FOUT, Some(b"<Fout/>")).await.unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(waiting(pg, ANTWOORD_Q).await, answers_before, "{name}: not before commit");
    // Endpoint states as the transport drives them: the receive is not committed yet,
    // so another session still sees the target as started inbound (SI), the initiator
    // conversing (CO).
    assert_eq!((state(pg, target).await.as_deref(), state(pg, h).await.as_deref()), (Some("SI"), Some("CO")), "{name}");
    // An error end reaches the far side.
    a.end_conversation(target, Some((50001, "conformance"))).await.unwrap();
    a.commit().await.unwrap();
    assert_eq!(state(pg, h).await.as_deref(), Some("ER"), "{name}: the initiator's side is in error");
    pg.begin().await.unwrap();
    let far = pg.receive_conversation(ANTWOORD_Q, h).await.unwrap();
    pg.commit().await.unwrap();
    let types: Vec<&str> = far.iter().map(|m| m.message_type.as_str()).collect();
    assert_eq!(types, [message_types::FOUT, system::ERROR], "{name}");
    let (code, text) = sbworker::handlers::calculation::error_body(&far[1].body);
    assert_eq!((code, text.as_str()), (50001, "conformance"), "{name}");
    pg.begin().await.unwrap();
    pg.end_conversation(h, None).await.unwrap();
    pg.commit().await.unwrap();
    assert_eq!((state(pg, target).await, state(pg, h).await), (None, None), "{name}: both ended, cleaned up");

    // MOVE CONVERSATION: two dialogs in two groups; one moved into the other's group is
    // received with it, in one group.
    let (h1, h2) = (dialog_of(pg, 1).await, dialog_of(pg, 1).await);
    a.begin().await.unwrap();
    let first = a.receive(REKEN_Q, 10, None, WAIT).await.unwrap();
    assert_eq!(first.len(), 1, "{name}");
    let (t_first, g_first) = (first[0].conversation_handle, first[0].conversation_group_id);
    a.rollback().await.unwrap();
    let other = count(
        pg,
        &format!(
            "SELECT count(*) FROM sb.endpoint WHERE NOT is_initiator AND handle <> '{t_first}' \
             AND conversation_id IN (SELECT conversation_id FROM sb.endpoint WHERE handle IN ('{h1}', '{h2}'))"
        ),
    )
    .await;
    assert_eq!(other, 1, "{name}");
    let t_other: Uuid = pg
        .client()
        .query_one(
            "SELECT handle FROM sb.endpoint WHERE NOT is_initiator AND handle <> $1 \
             AND conversation_id IN (SELECT conversation_id FROM sb.endpoint WHERE handle = ANY($2))",
            &[&t_first, &vec![h1, h2]],
        )
        .await
        .unwrap()
        .get(0);
    a.begin().await.unwrap();
    a.move_conversation(t_other, g_first).await.unwrap_or_else(|e| panic!("{name}: {e}"));
    a.commit().await.unwrap();
    a.begin().await.unwrap();
    let both = a.receive(REKEN_Q, 10, None, WAIT).await.unwrap();
    assert_eq!(both.len(), 2, "{name}: both dialogs in one group");
    assert!(both.iter().all(|m| m.conversation_group_id == g_first), "{name}");
    for m in &both {
        a.end_conversation(m.conversation_handle, None).await.unwrap();
    }
    a.commit().await.unwrap();
    pg.begin().await.unwrap();
    for h in [h1, h2] {
        let end = pg.receive_conversation(ANTWOORD_Q, h).await.unwrap();
        assert_eq!(end.iter().map(|m| m.message_type.as_str()).collect::<Vec<_>>(), [system::END_DIALOG], "{name}");
        pg.end_conversation(h, None).await.unwrap();
    }
    pg.commit().await.unwrap();

    // GET CONVERSATION GROUP: the group with messages waiting, locked for this
    // transaction (another session finds none while it is); a receive of that group
    // gets its messages; once they are gone, none is found.
    let hg = dialog_of(pg, 2).await;
    a.begin().await.unwrap();
    let g = a.get_conversation_group(REKEN_Q, WAIT).await.unwrap_or_else(|e| panic!("{name}: {e}"));
    let g = g.unwrap_or_else(|| panic!("{name}: a group"));
    b.begin().await.unwrap();
    assert_eq!(b.get_conversation_group(REKEN_Q, Duration::from_millis(300)).await.unwrap(), None, "{name}: locked");
    b.commit().await.unwrap();
    let got = a.receive(REKEN_Q, 10, Some(g), WAIT).await.unwrap();
    assert_eq!(got.len(), 2, "{name}");
    assert!(got.iter().all(|m| m.conversation_group_id == g), "{name}: of that group");
    a.end_conversation(got[0].conversation_handle, None).await.unwrap();
    a.commit().await.unwrap();
    a.begin().await.unwrap();
    assert_eq!(a.get_conversation_group(REKEN_Q, Duration::from_millis(100)).await.unwrap(), None, "{name}: none left");
    a.commit().await.unwrap();
    pg.begin().await.unwrap();
    pg.receive_conversation(ANTWOORD_Q, hg).await.unwrap();
    pg.end_conversation(hg, None).await.unwrap();
    pg.commit().await.unwrap();

    // The version claim: newer claims, equal or older does not.
    a.begin().await.unwrap();
    assert!(a.claim_version(777, 1, 2).await.unwrap(), "{name}");
    assert!(!a.claim_version(777, 1, 2).await.unwrap(), "{name}: equal");
    assert!(!a.claim_version(777, 1, 1).await.unwrap(), "{name}: older");
    assert!(a.claim_version(777, 1, 3).await.unwrap(), "{name}: newer");
    a.commit().await.unwrap();

    // The broker's poison rule, where it is on: five rolled-back receives of the same
    // message in a row disable the queue (9617 to the next receive).
    pg.client().batch_execute(&format!("SELECT sb.alter_queue('{REKEN_Q}', p_poison_handling => true)")).await.unwrap();
    let hp = dialog_of(pg, 1).await;
    for round in 1..=5 {
        a.begin().await.unwrap();
        let got = a.receive(REKEN_Q, 10, None, WAIT).await.unwrap();
        assert_eq!(got.len(), 1, "{name}: round {round}");
        a.rollback().await.unwrap();
    }
    let st = a.queue_state(REKEN_Q).await.unwrap();
    assert!(!st.enabled && st.poison_handling, "{name}: disabled after five rollbacks");
    a.begin().await.unwrap();
    let e = a.receive(REKEN_Q, 10, None, Duration::from_millis(100)).await.unwrap_err();
    assert_eq!((e.kind, e.number), (ErrorKind::QueueDisabled, 9617), "{name}: {e}");
    let _ = a.rollback().await;
    pg.client()
        .batch_execute(&format!("SELECT sb.alter_queue('{REKEN_Q}', p_enabled => true, p_poison_handling => false)"))
        .await
        .unwrap();
    a.begin().await.unwrap();
    let got = a.receive(REKEN_Q, 10, None, WAIT).await.unwrap();
    assert_eq!(got.len(), 1, "{name}: served again once enabled");
    a.end_conversation(got[0].conversation_handle, None).await.unwrap();
    a.commit().await.unwrap();
    pg.begin().await.unwrap();
    pg.receive_conversation(ANTWOORD_Q, hp).await.unwrap();
    pg.end_conversation(hp, None).await.unwrap();
    pg.commit().await.unwrap();

    // The state of a queue, and of one that does not exist.
    let st = a.queue_state(REKEN_Q).await.unwrap();
    assert!(st.enabled, "{name}");
    let missing = a.queue_state("no_such_queue").await;
    if backend.capabilities.contains(&Capability::MissingQueueIsNotFound) {
        assert_eq!(missing.unwrap_err().kind, ErrorKind::NotFound, "{name}");
    } else {
        assert!(missing.is_err(), "{name}: a missing queue is an error of some kind");
    }
    // Nothing left behind on the calculation's queue.
    assert_eq!(waiting(pg, REKEN_Q).await, 0, "{name}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgresql_session_conforms() {
    let (url, mut pg) = calc_world().await;
    let transport = PostgresTransport::new(url.clone());
    suite(&POSTGRES, &transport, &mut pg).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sql_server_transport_over_tds_conforms() {
    let (url, mut pg) = calc_world().await;
    let (conn, _stop) = crate::emulator_tds::emulator_with(&url, Arc::new(Faults::default())).await;
    let transport = MssqlTransport::new(&conn).unwrap();
    suite(&TDS, &transport, &mut pg).await;
}
