//! Aimed faults: a transient failure (a session killed while it waits on a lock, a lock
//! timeout, an injected deadlock at RECEIVE or COMMIT, a dropped connection) never moves
//! a message toward diversion and never disables its queue; a worker that dies inside
//! the same message's handler again and again does divert it. Every test ends with the
//! end state: the answer is the calculation of the request, nothing is queued, no
//! conversation is open, no attempt is left and nothing was set aside unless meant.

use std::sync::Arc;

use sbworker::contract::{Limits, decode_antwoord, message_types};
use sbworker::emulator::server::Faults;
use sbworker::worker::RunOutcome;

use crate::common::calc::*;
use crate::common::faults::{
    answered_correctly_and_all_clean, fresh_key, hold_version_lock, the_end_state_is_clean, vraag_for,
};
use crate::common::tds::{emulator_with, tds_worker, tds_worker_with};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_refuses_a_queue_whose_broker_poison_detection_is_on() {
    let (url, s) = calc_world().await;
    let transport = sbworker::broker::postgres::PostgresTransport::new(&url);
    sbworker::worker::preflight(&transport, &(&config(&url, "")).into()).await.expect("installed with it off");
    s.client()
        .batch_execute(&format!("SELECT sb.alter_queue('{REKEN_QUEUE}', p_poison_handling => true)"))
        .await
        .unwrap();
    let e = sbworker::worker::preflight(&transport, &(&config(&url, "")).into()).await.unwrap_err().to_string();
    assert!(e.contains("poison-message handling is on") && e.contains("p_poison_handling => false"), "{e}");
    let allowed = config(&url, "").worker;
    let mut cfg = config(&url, "");
    cfg.worker = sbworker::config::WorkerSettings { allow_broker_poison_detection: true, ..allowed };
    sbworker::worker::preflight(&transport, &(&cfg).into()).await.expect("allowed by configuration");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tds_a_deadlock_at_every_receive_and_commit_for_many_rounds_leaves_the_queue_enabled() {
    let (url, mut s) = calc_world().await;
    let faults = Arc::new(Faults::default());
    faults.set_receive_faults(Some(1), None, None);
    let (conn, _stop) = emulator_with(&url, faults.clone()).await;
    let (tx, run, metrics) = tds_worker(&conn, &url, |c| c.queues.get_mut(REKEN_QUEUE).unwrap().max_readers = 1);
    let body = vraag_for(fresh_key());
    let asked = ask(&mut s, &body).await;
    // Every RECEIVE that takes the message is a deadlock victim: well past five rounds.
    wait_until("eight deadlocks at RECEIVE", || async { faults.injected() >= 8 }).await;
    // Then every COMMIT of a transaction that received it.
    faults.set_receive_faults(None, None, None);
    faults.set_commit_deadlock_every(Some(1));
    wait_until("eight deadlocks at COMMIT", || async { faults.injected() >= 16 }).await;
    // Each fault rolled the receive back: the message's count of rollbacks reaches 16
    // (it is written when the rollback is noted, just after the fault is counted).
    wait_until("each fault rolled the receive back", || async {
        let rollbacks: i32 = s
            .client()
            .query_one("SELECT rollbacks FROM sb.message WHERE queue = $1", &[&REKEN_QUEUE])
            .await
            .unwrap()
            .get(0);
        rollbacks >= 16
    })
    .await;
    assert_eq!(count(&s, "SELECT count(*) FROM sb.queue WHERE NOT enabled").await, 0, "the queue stays enabled");
    faults.clear();
    answered_correctly_and_all_clean(&mut s, asked, &body).await;
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
    let text = metrics.encode();
    assert_eq!(metric_in(&text, &format!("sbworker_messages_dead_lettered_total{{queue=\"{REKEN_QUEUE}\"}}")), 0.0);
    assert!(
        metric_in(&text, &format!("sbworker_transient_failures_total{{queue=\"{REKEN_QUEUE}\"}}")) >= 8.0,
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tds_deadlocks_lock_timeouts_and_dropped_connections_lose_nothing_and_divert_nothing() {
    let (url, mut s) = calc_world().await;
    let faults = Arc::new(Faults::default());
    // About one RECEIVE in five meets one of the three.
    faults.set_receive_faults(Some(13), Some(11), Some(7));
    faults.set_commit_deadlock_every(Some(9));
    let (conn, _stop) = emulator_with(&url, faults.clone()).await;
    let (tx, run, _) = tds_worker(&conn, &url, |c| c.queues.get_mut(REKEN_QUEUE).unwrap().max_readers = 2);
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

/// A server that refuses BEGIN TRANSACTION on a live connection (here the next three,
/// error 3988): the reader takes a new connection after a pause that grows with each
/// refusal in a row (no storm of logins), and the request is answered once BEGIN works
/// again, with nothing diverted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tds_refused_begins_are_met_with_growing_pauses_and_lose_nothing() {
    let (url, mut s) = calc_world().await;
    let faults = Arc::new(Faults::default());
    faults.set_begin_fail_next(3);
    let (conn, _stop) = emulator_with(&url, faults.clone()).await;
    let started = std::time::Instant::now();
    let (tx, run, _) = tds_worker(&conn, &url, |c| {
        c.queues.get_mut(REKEN_QUEUE).unwrap().max_readers = 1;
        c.worker.retry_min_delay_ms = 100;
        c.worker.retry_max_delay_ms = 1_000;
    });
    let body = vraag_for(fresh_key());
    let h = ask(&mut s, &body).await;
    let got = collect(&mut s, 1).await;
    assert_eq!(faults.injected(), 3, "the three BEGINs were refused");
    // One reader, three refusals in a row: it paused at least 100 + 200 + 400 ms (the
    // jitter only adds). Without the pauses it reconnects at once.
    assert!(started.elapsed() >= std::time::Duration::from_millis(700), "{:?}", started.elapsed());
    assert_eq!(got[0].conversation_handle, h);
    assert_eq!(got[0].message_type, message_types::ANTWOORD);
    let want = calculation_handler().answer(&body).unwrap();
    assert_eq!(
        decode_antwoord(&got[0].body, &Limits::default()).unwrap(),
        decode_antwoord(want.as_bytes(), &Limits::default()).unwrap()
    );
    end_all(&mut s, [h]).await;
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
    let (tx, run, metrics) = tds_worker(&conn, &url, |c| c.queues.get_mut(REKEN_QUEUE).unwrap().max_readers = 1);
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
    assert!(
        metric_in(&text, &format!("sbworker_transient_failures_total{{queue=\"{REKEN_QUEUE}\"}}")) >= 5.0,
        "{text}"
    );
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
    crash_restart_under_load(false).await;
}

/// The same crash with conversation reuse on: keys' dialogs open across the crash (and
/// their timers) carry the next versions or are ended idle; nothing is lost or left open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_conversation_reuse_a_postgresql_crash_restart_under_load_loses_nothing() {
    crash_restart_under_load(true).await;
}

async fn crash_restart_under_load(reuse: bool) {
    use sbworker::demo::{self, edits, roster::Roster};
    // A cluster of its own: the crash ends every session on it.
    let cluster = sbworker::pg_cluster::Cluster::start(&[]).expect("a PostgreSQL cluster");
    let url = cluster.create_database("crash").await.unwrap();
    sbworker::broker::postgres::install_with(&url, true).await.unwrap();
    let mut c = reconnect(&url).await;
    if reuse {
        // A second idle: dialogs end during the test, and others are reused.
        c.execute("INSERT INTO rekenserver.instelling VALUES ('dialog_reuse_idle_seconds', 1)", &[]).await.unwrap();
    }
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
    if reuse {
        let (requests, dialogs): (i64, i64) = c
            .query_one("SELECT count(*), count(DISTINCT dialog_handle) FROM rekenserver.berekening_log", &[])
            .await
            .map(|r| (r.get(0), r.get(1)))
            .unwrap();
        assert!(dialogs < requests, "{dialogs} dialogs for {requests} requests: none was reused");
    }
    for w in workers {
        assert_eq!(stop_worker(w).await, Some(0));
    }
}

async fn wait_drained_or_panic(c: &tokio_postgres::Client) {
    sbworker::demo::check::wait_drained(c, std::time::Duration::from_secs(120), |_| {}).await.unwrap();
}

/// Fails the first group it is given (by that group's own fault: a retry one message at
/// a time follows) and then has the emulator refuse the next BEGIN; every later group is
/// the calculation's. Records how many messages each call was given.
struct ChokesOnceThenBeginRefused {
    faults: Arc<Faults>,
    calls: std::sync::Mutex<Vec<usize>>,
}

impl<S: sbworker::transport::PayrollStore> sbworker::worker::handler::Handler<S> for ChokesOnceThenBeginRefused {
    fn handle<'a>(
        &'a self,
        s: &'a mut S,
        msgs: &'a [sbworker::broker::Message],
    ) -> sbworker::worker::handler::BoxFuture<
        'a,
        Result<sbworker::worker::handler::Handled, sbworker::worker::handler::HandlerError>,
    > {
        Box::pin(async move {
            let first = {
                let mut calls = self.calls.lock().unwrap();
                calls.push(msgs.len());
                calls.len() == 1
            };
            if first {
                self.faults.set_begin_fail_next(1);
                return Err(sbworker::worker::handler::HandlerError::Failed("choked once".into()));
            }
            sbworker::worker::handler::Handler::<S>::handle(&*calculation_handler(), s, msgs).await
        })
    }

    fn divert_reply(&self, m: &sbworker::broker::Message, reason: &str) -> Option<(&'static str, Vec<u8>)> {
        sbworker::worker::handler::Handler::<S>::divert_reply(&*calculation_handler(), m, reason)
    }
}

/// A group retry keeps its place across a refused BEGIN: after a group's own failure the
/// reader takes it again one message at a time (isolating the bad one); when that
/// retry's BEGIN is refused, the retry on the new connection still takes one message,
/// not a batch of the group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tds_a_group_retry_keeps_its_place_across_a_refused_begin() {
    let (url, mut s) = calc_world().await;
    let faults = Arc::new(Faults::default());
    let (conn, _stop) = emulator_with(&url, faults.clone()).await;
    // Two Vraags on one dialog: one conversation group, taken whole by a plain RECEIVE.
    s.begin().await.unwrap();
    let h = s.begin_dialog(DATA_SERVICE, REKEN_SERVICE, CONTRACT, None, None).await.unwrap();
    for _ in 0..2 {
        s.send(h, message_types::VRAAG, Some(&vraag_for(fresh_key()))).await.unwrap();
    }
    s.commit().await.unwrap();
    let handler = Arc::new(ChokesOnceThenBeginRefused { faults: faults.clone(), calls: Default::default() });
    let (tx, run, _) =
        tds_worker_with(&conn, &url, handler.clone(), |c| c.queues.get_mut(REKEN_QUEUE).unwrap().max_readers = 1);
    let got = collect(&mut s, 1).await;
    assert_eq!(got[0].conversation_handle, h);
    assert_eq!(faults.injected(), 1, "the retry's BEGIN was refused");
    let calls = handler.calls.lock().unwrap().clone();
    assert_eq!(calls[..2], [2, 1], "the group whole, then its retry one message at a time: {calls:?}");
    tx.send(()).await.unwrap();
    crate::common::within(60, "the worker stops", run).await.unwrap();
}
