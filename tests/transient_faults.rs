//! Aimed faults: a transient failure (a session killed while it waits on a lock, a lock
//! timeout, an injected deadlock at RECEIVE or COMMIT, a dropped connection) never moves
//! a message toward diversion and never disables its queue; a worker that dies inside
//! the same message's handler again and again does divert it. Every test ends with the
//! end state: the answer is the calculation of the request, nothing is queued, no
//! conversation is open, no attempt is left and nothing was set aside unless meant.

use std::sync::Arc;

use sbworker::broker::postgres::Session;
use sbworker::contract::{Limits, decode_antwoord, encode_vraag, message_types};
use sbworker::emulator::server::Faults;
use sbworker::worker::RunOutcome;
use uuid::Uuid;

use crate::common::build::{dienst, maart, w};
use crate::common::calc::*;
use crate::emulator_tds::{emulator_with, tds_worker};

/// A Vraag for dienstverband `dv` (a key no other test uses), period 7.
pub(crate) fn vraag_for(dv: i32) -> Vec<u8> {
    let mut v = maart(vec![dienst("2026-03-10", vec![w("07:00", "15:30")])]);
    v.id = Uuid::new_v4();
    v.dienstverband.id = dv;
    encode_vraag(&v).into_bytes()
}

/// A key of its own for each test.
pub(crate) fn fresh_key() -> i32 {
    static NEXT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(700_000);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
}

/// The answer to `asked` is an Antwoord equal to the calculation of `body`; then the
/// initiator ends its side and the end state is checked.
pub(crate) async fn answered_correctly_and_all_clean(s: &mut Session, asked: Uuid, body: &[u8]) {
    let got = collect(s, 1).await;
    assert_eq!(got[0].conversation_handle, asked);
    assert_eq!(got[0].message_type, message_types::ANTWOORD, "{}", String::from_utf8_lossy(&got[0].body));
    let expected = calculation_handler().answer(body).expect("the request is valid");
    let want = decode_antwoord(expected.as_bytes(), &Limits::default()).unwrap();
    let have = decode_antwoord(&got[0].body, &Limits::default()).unwrap();
    assert_eq!(have, want, "the stored answer is the calculation of the request");
    end_all(s, [asked]).await;
    the_end_state_is_clean(s, 0).await;
}

/// Nothing queued, no conversation open, no attempt left, `dead` messages set aside,
/// both queues enabled.
pub(crate) async fn the_end_state_is_clean(s: &Session, dead: i64) {
    wait_until("every conversation is closed", || async {
        count(s, "SELECT count(*) FROM sb.endpoint").await == 0
            && count(s, "SELECT count(*) FROM sb.message").await == 0
    })
    .await;
    assert_eq!(count(s, "SELECT count(*) FROM sbworker.message_attempt").await, 0);
    assert_eq!(count(s, "SELECT count(*) FROM sbworker.dead_letter").await, dead);
    assert_eq!(count(s, "SELECT count(*) FROM sb.queue WHERE NOT enabled").await, 0, "a queue was disabled");
}

/// Holds the row lock the calculation's version claim of key `dv` needs, in an open
/// transaction of its own (dropping the session releases it).
pub(crate) async fn hold_version_lock(url: &str, dv: i32) -> Session {
    let holder = Session::open(url).await.unwrap();
    holder
        .client()
        .execute(
            "INSERT INTO sbworker.answered_version (dienstverband_id, periode_id, versie) VALUES ($1, 7, 0)",
            &[&dv],
        )
        .await
        .unwrap();
    holder.client().batch_execute("BEGIN").await.unwrap();
    holder
        .client()
        .execute(
            "SELECT 1 FROM sbworker.answered_version WHERE dienstverband_id = $1 AND periode_id = 7 FOR UPDATE",
            &[&dv],
        )
        .await
        .unwrap();
    holder
}

/// The backend (not `except`) that waits on a row or transaction lock in this database,
/// once there is one (polled every 20 ms, for at most 60 s). Advisory locks are left
/// out: a receiver about to wait takes one, and can meet a sender's brief try of it.
pub(crate) async fn lock_waiter(s: &Session, except: &[i32]) -> i32 {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let rows = s
            .client()
            .query(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
                 AND wait_event_type = 'Lock' AND wait_event <> 'advisory' AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .unwrap();
        if let Some(p) = rows.iter().map(|r| r.get::<_, i32>(0)).find(|p| !except.contains(p)) {
            return p;
        }
        assert!(tokio::time::Instant::now() < deadline, "no session waits on the lock");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_refuses_a_queue_whose_broker_poison_detection_is_on() {
    let (url, s) = calc_world().await;
    let transport = sbworker::broker::postgres::PostgresTransport::new(&url);
    sbworker::worker::preflight(&transport, &config(&url, "")).await.expect("installed with it off");
    s.client().batch_execute(&format!("SELECT sb.alter_queue('{REKEN_Q}', p_poison_handling => true)")).await.unwrap();
    let e = sbworker::worker::preflight(&transport, &config(&url, "")).await.unwrap_err().to_string();
    assert!(e.contains("poison-message handling is on") && e.contains("p_poison_handling => false"), "{e}");
    let allowed = config(&url, "").worker;
    let mut cfg = config(&url, "");
    cfg.worker = sbworker::config::WorkerSettings { allow_broker_poison_detection: true, ..allowed };
    sbworker::worker::preflight(&transport, &cfg).await.expect("allowed by configuration");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tds_a_deadlock_at_every_receive_and_commit_for_many_rounds_leaves_the_queue_enabled() {
    let (url, mut s) = calc_world().await;
    let faults = Arc::new(Faults::default());
    faults.set_receive_faults(Some(1), None, None);
    let (conn, _stop) = emulator_with(&url, faults.clone()).await;
    let (tx, run, metrics) = tds_worker(&conn, &url, |c| c.queues.get_mut(REKEN_Q).unwrap().max_readers = 1);
    let body = vraag_for(fresh_key());
    let asked = ask(&mut s, &body).await;
    // Every RECEIVE that takes the message is a deadlock victim: well past five rounds.
    wait_until("eight deadlocks at RECEIVE", || async { faults.injected() >= 8 }).await;
    // Then every COMMIT of a transaction that received it.
    faults.set_receive_faults(None, None, None);
    faults.set_commit_deadlock_every(Some(1));
    wait_until("eight deadlocks at COMMIT", || async { faults.injected() >= 16 }).await;
    let rollbacks: i32 =
        s.client().query_one("SELECT rollbacks FROM sb.message WHERE queue = $1", &[&REKEN_Q]).await.unwrap().get(0);
    assert!(rollbacks >= 16, "each fault rolled the receive back: {rollbacks}");
    assert_eq!(count(&s, "SELECT count(*) FROM sb.queue WHERE NOT enabled").await, 0, "the queue stays enabled");
    faults.clear();
    answered_correctly_and_all_clean(&mut s, asked, &body).await;
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
    let text = metrics.encode();
    assert_eq!(metric_in(&text, &format!("sbworker_messages_dead_lettered_total{{queue=\"{REKEN_Q}\"}}")), 0.0);
    assert!(metric_in(&text, &format!("sbworker_transient_failures_total{{queue=\"{REKEN_Q}\"}}")) >= 8.0, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tds_deadlocks_lock_timeouts_and_dropped_connections_lose_nothing_and_divert_nothing() {
    let (url, mut s) = calc_world().await;
    let faults = Arc::new(Faults::default());
    // About one RECEIVE in five meets one of the three.
    faults.set_receive_faults(Some(13), Some(11), Some(7));
    faults.set_commit_deadlock_every(Some(9));
    let (conn, _stop) = emulator_with(&url, faults.clone()).await;
    let (tx, run, _) = tds_worker(&conn, &url, |c| c.queues.get_mut(REKEN_Q).unwrap().max_readers = 2);
    let mut asked = Vec::new();
    for _ in 0..30 {
        let body = vraag_for(fresh_key());
        asked.push((ask(&mut s, &body).await, body));
    }
    let got = collect(&mut s, asked.len()).await;
    assert!(faults.injected() >= 5, "{}", faults.injected());
    for (h, body) in &asked {
        let m = got.iter().find(|m| m.conversation_handle == *h).expect("every request answered");
        assert_eq!(m.message_type, message_types::ANTWOORD);
        let want = calculation_handler().answer(body).unwrap();
        assert_eq!(
            decode_antwoord(&m.body, &Limits::default()).unwrap(),
            decode_antwoord(want.as_bytes(), &Limits::default()).unwrap()
        );
    }
    assert_eq!(got.len(), asked.len(), "exactly one answer each");
    faults.clear();
    end_all(&mut s, asked.iter().map(|(h, _)| *h)).await;
    the_end_state_is_clean(&s, 0).await;
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tds_a_session_killed_while_blocked_on_a_lock_five_times_is_answered_and_never_diverted() {
    let (url, mut s) = calc_world().await;
    let faults = Arc::new(Faults::default());
    // A request still running after 300 ms has its connection dropped (a killed session).
    faults.set_drop_blocked_after(Some(std::time::Duration::from_millis(300)));
    let (conn, _stop) = emulator_with(&url, faults.clone()).await;
    let dv = fresh_key();
    let holder = hold_version_lock(&url, dv).await;
    let (tx, run, metrics) = tds_worker(&conn, &url, |c| c.queues.get_mut(REKEN_Q).unwrap().max_readers = 1);
    let body = vraag_for(dv);
    let asked = ask(&mut s, &body).await;
    wait_until("five blocked sessions dropped", || async { faults.injected() >= 5 }).await;
    faults.clear();
    assert_eq!(count(&s, "SELECT count(*) FROM sbworker.dead_letter").await, 0);
    drop(holder);
    answered_correctly_and_all_clean(&mut s, asked, &body).await;
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
    let text = metrics.encode();
    assert!(metric_in(&text, &format!("sbworker_transient_failures_total{{queue=\"{REKEN_Q}\"}}")) >= 5.0, "{text}");
}

/// A client on `url`, retrying the connection until the server accepts it again (for
/// at most 60 s).
async fn reconnect(url: &str) -> tokio_postgres::Client {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match tokio_postgres::connect(url, tokio_postgres::NoTls).await {
            Ok((c, conn)) => {
                tokio::spawn(conn);
                if c.batch_execute("SELECT 1").await.is_ok() {
                    return c;
                }
            }
            Err(e) => assert!(tokio::time::Instant::now() < deadline, "the server did not come back: {e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgresql_crash_restart_under_load_loses_nothing_and_diverts_nothing() {
    use sbworker::demo::{self, edits, roster::Roster};
    // A cluster of its own: the crash ends every session on it.
    let cluster = sbworker::pg_cluster::Cluster::start(&[]).expect("a PostgreSQL cluster");
    let url = cluster.create_database("crash").await.unwrap();
    sbworker::broker::postgres::install_with(&url, true).await.unwrap();
    let mut c = reconnect(&url).await;
    let roster = Roster::generate(40, 5, false);
    roster.load(&mut c).await.unwrap();
    // Two worker processes, left running through the crash.
    let dir = TempDir::new("crash-restart");
    let mut workers = [
        spawn_worker(&dir, &demo::worker_config_text(&url, 2)),
        spawn_worker(&dir, &demo::worker_config_text(&url, 2)),
    ];
    // A planner edits; halfway, the server is restarted as `pg_ctl restart -m immediate`
    // does: every session ends at once and the server recovers from its WAL on start.
    let all = edits::burst(&roster, 160, 9);
    let mut planner = reconnect(&url).await;
    let mut crashed = false;
    let mut reconnects = 0;
    for (i, e) in all.iter().enumerate() {
        if i == all.len() / 2 {
            tokio::task::block_in_place(|| cluster.restart_immediate()).expect("an immediate restart");
            crashed = true;
        }
        // A planner whose session the crash ended edits again on a new one (an edit
        // whose commit was lost is not in the roster either: both went together).
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        while let Err(err) = e.apply(&planner).await {
            assert!(tokio::time::Instant::now() < deadline, "the edit never went through: {err}");
            planner = reconnect(&url).await;
            reconnects += 1;
        }
    }
    assert!(crashed);
    assert!(reconnects > 0, "the crash ended the planner's session too (every session ends)");
    c = reconnect(&url).await;
    wait_drained_or_panic(&c).await;
    for w in &mut workers {
        assert!(w.try_wait().unwrap().is_none(), "a worker process ended");
    }
    let verdict = sbworker::demo::check::verify(&c, &sbworker::engine::Tables::built_in().unwrap()).await.unwrap();
    assert!(verdict.problems.is_empty(), "{:?}", &verdict.problems[..verdict.problems.len().min(5)]);
    assert_eq!((verdict.keys, verdict.latest, verdict.faulted.len()), (40, 40, 0));
    let left: i64 = c
        .query_one(
            "SELECT (SELECT count(*) FROM sbworker.dead_letter) + (SELECT count(*) FROM sb.message) \
             + (SELECT count(*) FROM sbworker.message_attempt)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "nothing diverted, queued or left half-attempted");
    for w in workers {
        assert_eq!(stop_worker(w).await, Some(0));
    }
}

async fn wait_drained_or_panic(c: &tokio_postgres::Client) {
    sbworker::demo::check::wait_drained(c, std::time::Duration::from_secs(120), |_| {}).await.unwrap();
}
