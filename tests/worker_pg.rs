//! The worker runtime in this process against the PostgreSQL broker: answers, Fouts,
//! EndDialog and Error, a real deadlock retried, a failing handler diverted with the
//! queue left enabled, readers scaling up and down, a disabled queue, metrics.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use sbworker::broker::postgres::Session;
use sbworker::broker::{Message, system};
use sbworker::contract::{Limits, decode_antwoord, decode_fout, message_types};
use sbworker::handlers::calculation::error_body;
use sbworker::worker::handler::{BoxFuture, Handled, Handler, HandlerError};
use sbworker::worker::{Handlers, RunOutcome};
use tokio::sync::{Notify, mpsc};
use uuid::Uuid;

use crate::common::calc::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_requests_and_ends_on_end_dialog() {
    let (url, mut s) = calc_world().await;
    let w = InProcess::start(&url, config(&url, ""), calc_handlers());
    let ids: Vec<Uuid> = (0..10).map(|_| Uuid::new_v4()).collect();
    let mut handles = Vec::new();
    for id in &ids {
        handles.push(ask(&mut s, &vraag_body(*id)).await);
    }
    let answers = collect(&mut s, ids.len()).await;
    for m in &answers {
        assert_eq!(m.message_type, message_types::ANTWOORD);
        let a = decode_antwoord(&m.body, &Limits::default()).expect("an Antwoord");
        assert!(ids.contains(&a.id), "answer to an unknown Vraag {}", a.id);
        assert!(!a.mutaties.is_empty());
    }
    let mut answered: Vec<Uuid> = answers.iter().map(|m| m.conversation_handle).collect();
    answered.sort();
    handles.sort();
    assert_eq!(answered, handles, "one answer per dialog");
    // The initiator ends; the worker ends its side on EndDialog; nothing is left.
    end_all(&mut s, handles).await;
    wait_until("every endpoint is gone", || async { count(&s, "SELECT count(*) FROM sb.endpoint").await == 0 }).await;
    assert_eq!(count(&s, "SELECT count(*) FROM sbworker.message_attempt").await, 0);
    let m = w.finish().await;
    assert_eq!(metric_in(&m, "sbworker_requests_answered_total{queue=\"loonfactorberekening_reken\"}"), 10.0);
    assert_eq!(metric_in(&m, "sbworker_conversations_ended_total{queue=\"loonfactorberekening_reken\"}"), 10.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_vraag_gets_a_fout_naming_the_problem_and_an_error_end() {
    let (url, mut s) = calc_world().await;
    let w = InProcess::start(&url, config(&url, ""), calc_handlers());
    let body = br#"<LoonfactorBerekeningVraag xmlns="http://www.sdbgroep.nl/MPlus/Rekenserver/2008" Id="not-a-guid"/>"#;
    let h = ask(&mut s, body).await;
    let got = collect(&mut s, 2).await;
    assert_eq!(got[0].message_type, message_types::FOUT);
    assert_eq!(got[0].conversation_handle, h);
    let fout = decode_fout(&got[0].body, &Limits::default()).expect("a RekenserverFout");
    assert!(fout.error_message.contains("Id"), "the Fout names the problem: {}", fout.error_message);
    assert_eq!(got[1].message_type, system::ERROR);
    let (code, text) = error_body(&got[1].body);
    assert_eq!(code, fout.error_number);
    assert_eq!(text, fout.error_message);
    // Our side ended with the error; the initiator ends too and nothing is left.
    end_all(&mut s, [h]).await;
    assert_eq!(count(&s, "SELECT count(*) FROM sb.endpoint").await, 0);
    let m = w.finish().await;
    assert_eq!(metric_in(&m, "sbworker_requests_faulted_total{queue=\"loonfactorberekening_reken\"}"), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_from_the_initiator_ends_our_side_without_an_answer() {
    let (url, mut s) = calc_world().await;
    // Vraag and Error reach the queue before the worker starts: one batch.
    let h = ask(&mut s, &vraag_body(Uuid::new_v4())).await;
    s.begin().await.unwrap();
    s.end_conversation(h, Some((4711, "roster withdrawn"))).await.unwrap();
    s.commit().await.unwrap();
    let w = InProcess::start(&url, config(&url, ""), calc_handlers());
    wait_until("the worker ended its side", || async { count(&s, "SELECT count(*) FROM sb.endpoint").await == 0 })
        .await;
    assert_eq!(count(&s, "SELECT count(*) FROM sb.message").await, 0, "no answer on an ended conversation");
    let m = w.finish().await;
    assert_eq!(metric_in(&m, "sbworker_conversations_ended_total{queue=\"loonfactorberekening_reken\"}"), 1.0);
    assert_eq!(metric_in(&m, "sbworker_requests_answered_total{queue=\"loonfactorberekening_reken\"}"), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_message_type_is_a_contract_breach_ended_with_an_error() {
    let (url, mut s) = calc_world().await;
    s.client()
        .batch_execute(&format!(
            "SELECT sb.create_message_type('/x/Anders', 'NONE');
             SELECT sb.create_contract('/x/Breed', ARRAY[['/x/Anders','ANY'],['{}','ANY']]);
             SELECT sb.create_service('{REKEN_SERVICE}', '{REKEN_Q}', ARRAY['{CONTRACT}', '/x/Breed']);",
            message_types::FOUT
        ))
        .await
        .unwrap();
    s.begin().await.unwrap();
    let h = s.begin_dialog(DATA_SERVICE, REKEN_SERVICE, "/x/Breed", None, None).await.unwrap();
    s.send(h, "/x/Anders", Some(b"?")).await.unwrap();
    s.commit().await.unwrap();
    let w = InProcess::start(&url, config(&url, ""), calc_handlers());
    let got = collect(&mut s, 1).await;
    assert_eq!(got[0].message_type, system::ERROR);
    let (code, text) = error_body(&got[0].body);
    assert_eq!(code, sbworker::handlers::calculation::CONTRACT_BREACH);
    assert!(text.contains("/x/Anders"), "{text}");
    assert_eq!(w.shutdown().await, RunOutcome::Drained);
}

/// Wraps the calculation; on its first call it takes part in a real deadlock: it locks
/// row 1, lets the test lock row 2, then wants row 2 while the test wants row 1.
struct Deadlocking {
    calls: AtomicU32,
    locked_one: Arc<Notify>,
    test_locked_two: Arc<Notify>,
}

impl Handler<Session> for Deadlocking {
    fn handle<'a>(&'a self, s: &'a mut Session, msgs: &'a [Message]) -> BoxFuture<'a, Result<Handled, HandlerError>> {
        Box::pin(async move {
            if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
                let c = s.client();
                // This side gives up first: it is the deadlock victim.
                c.batch_execute("SET LOCAL deadlock_timeout = '50ms'").await.map_err(pg)?;
                c.batch_execute("UPDATE lockpair SET n = n + 1 WHERE id = 1").await.map_err(pg)?;
                self.locked_one.notify_one();
                self.test_locked_two.notified().await;
                c.batch_execute("UPDATE lockpair SET n = n + 1 WHERE id = 2").await.map_err(pg)?;
            }
            calculation_handler().handle(s, msgs).await
        })
    }

    fn divert_reply(&self, m: &Message, reason: &str) -> Option<(&'static str, Vec<u8>)> {
        <sbworker::handlers::calculation::Calculation as Handler<Session>>::divert_reply(
            &calculation_handler(),
            m,
            reason,
        )
    }
}

fn pg(e: tokio_postgres::Error) -> HandlerError {
    // The transport's own mapping (a deadlock is retryable 1205), not a copy of it.
    HandlerError::Broker(sbworker::broker::postgres::error_of(e))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_inside_the_handler_is_retried_and_then_answered() {
    let (url, mut s) = calc_world().await;
    s.client()
        .batch_execute("CREATE TABLE lockpair (id int PRIMARY KEY, n int); INSERT INTO lockpair VALUES (1, 0), (2, 0);")
        .await
        .unwrap();
    let locked_one = Arc::new(Notify::new());
    let test_locked_two = Arc::new(Notify::new());
    let handler = Arc::new(Deadlocking {
        calls: AtomicU32::new(0),
        locked_one: locked_one.clone(),
        test_locked_two: test_locked_two.clone(),
    });
    let w =
        InProcess::start(&url, config(&url, ""), Handlers::default().with("loonfactor-berekening", handler.clone()));
    let h = ask(&mut s, &vraag_body(Uuid::new_v4())).await;
    locked_one.notified().await;
    let other = Session::open(&url).await.unwrap();
    let c = other.client();
    c.batch_execute("BEGIN; SET LOCAL deadlock_timeout = '10s'; UPDATE lockpair SET n = n + 10 WHERE id = 2")
        .await
        .unwrap();
    test_locked_two.notify_one();
    // Blocks until the handler's transaction is chosen as the victim and rolls back.
    c.batch_execute("UPDATE lockpair SET n = n + 10 WHERE id = 1; COMMIT").await.unwrap();
    let got = collect(&mut s, 1).await;
    assert_eq!(got[0].message_type, message_types::ANTWOORD);
    assert_eq!(got[0].conversation_handle, h);
    assert_eq!(handler.calls.load(Ordering::SeqCst), 2, "one failed attempt, one that answered");
    // The victim's updates were rolled back with its receive.
    assert_eq!(count(&s, "SELECT sum(n)::bigint FROM lockpair").await, 20);
    assert_eq!(count(&s, "SELECT count(*) FROM sbworker.message_attempt").await, 0);
    let m = w.finish().await;
    assert_eq!(metric_in(&m, "sbworker_groups_retried_total{queue=\"loonfactorberekening_reken\"}"), 1.0);
}

/// Fails every Vraag whose body contains "poison"; the rest goes to the calculation.
struct Poisoned;

impl Handler<Session> for Poisoned {
    fn handle<'a>(&'a self, s: &'a mut Session, msgs: &'a [Message]) -> BoxFuture<'a, Result<Handled, HandlerError>> {
        Box::pin(async move {
            if msgs.iter().any(|m| String::from_utf8_lossy(&m.body).contains("poison")) {
                return Err(HandlerError::Failed("the handler choked on poison".into()));
            }
            calculation_handler().handle(s, msgs).await
        })
    }

    fn divert_reply(&self, m: &Message, reason: &str) -> Option<(&'static str, Vec<u8>)> {
        <sbworker::handlers::calculation::Calculation as Handler<Session>>::divert_reply(
            &calculation_handler(),
            m,
            reason,
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_keeps_failing_is_diverted_and_the_queue_stays_enabled() {
    let (url, mut s) = calc_world().await;
    let w =
        InProcess::start(&url, config(&url, ""), Handlers::default().with("loonfactor-berekening", Arc::new(Poisoned)));
    let mut body = vraag_body(Uuid::new_v4());
    body.extend_from_slice(b"<!-- poison -->");
    let bad = ask(&mut s, &body).await;
    let good = ask(&mut s, &vraag_body(Uuid::new_v4())).await;
    let got = collect(&mut s, 3).await;
    let for_bad: Vec<&Message> = got.iter().filter(|m| m.conversation_handle == bad).collect();
    let for_good: Vec<&Message> = got.iter().filter(|m| m.conversation_handle == good).collect();
    assert_eq!(for_good.len(), 1);
    assert_eq!(for_good[0].message_type, message_types::ANTWOORD);
    assert_eq!(
        for_bad.iter().map(|m| m.message_type.as_str()).collect::<Vec<_>>(),
        [message_types::FOUT, system::ERROR]
    );
    let fout = decode_fout(&for_bad[0].body, &Limits::default()).unwrap();
    assert!(fout.error_message.contains("diverted after 3 failed attempts"), "{}", fout.error_message);
    assert!(fout.error_message.contains("choked on poison"), "{}", fout.error_message);
    let row =
        s.client().query_one("SELECT attempts, reason, message_body FROM sbworker.dead_letter", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 3);
    assert!(row.get::<_, String>(1).contains("choked on poison"));
    assert_eq!(row.get::<_, Vec<u8>>(2), body, "the message is kept byte for byte");
    let enabled: bool =
        s.client().query_one("SELECT enabled FROM sb.queue WHERE name = $1", &[&REKEN_Q]).await.unwrap().get(0);
    assert!(enabled, "the queue must stay enabled");
    let m = w.finish().await;
    assert_eq!(metric_in(&m, "sbworker_messages_dead_lettered_total{queue=\"loonfactorberekening_reken\"}"), 1.0);
    assert_eq!(metric_in(&m, "sbworker_groups_retried_total{queue=\"loonfactorberekening_reken\"}"), 3.0);
}

/// Holds every group until the test lets it go.
struct Held {
    entered: mpsc::UnboundedSender<()>,
    release: Arc<tokio::sync::Semaphore>,
}

impl Handler<Session> for Held {
    fn handle<'a>(&'a self, s: &'a mut Session, msgs: &'a [Message]) -> BoxFuture<'a, Result<Handled, HandlerError>> {
        Box::pin(async move {
            let _ = self.entered.send(());
            self.release.acquire().await.map_err(|e| HandlerError::Failed(e.to_string()))?.forget();
            calculation_handler().handle(s, msgs).await
        })
    }

    fn divert_reply(&self, _: &Message, _: &str) -> Option<(&'static str, Vec<u8>)> {
        None
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_scale_up_under_a_backlog_and_back_down_when_idle() {
    let (url, mut s) = calc_world().await;
    for _ in 0..12 {
        ask(&mut s, &vraag_body(Uuid::new_v4())).await;
    }
    let (entered_tx, mut entered) = mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let handler = Arc::new(Held { entered: entered_tx, release: release.clone() });
    let mut cfg = config(&url, "");
    cfg.worker.scale_interval_ms = 100;
    cfg.worker.idle_exit_ms = 300;
    let q = cfg.queues.get_mut(REKEN_Q).unwrap();
    (q.min_readers, q.max_readers, q.batch, q.wait_ms) = (1, 3, 1, 100);
    let w = InProcess::start(&url, cfg, Handlers::default().with("loonfactor-berekening", handler));
    // Each reader holds a group: with a backlog and all busy, readers are added.
    for _ in 0..3 {
        entered.recv().await.unwrap();
    }
    assert_eq!(w.metric("sbworker_readers{queue=\"loonfactorberekening_reken\"}"), 3.0);
    assert_eq!(w.metric("sbworker_readers_busy{queue=\"loonfactorberekening_reken\"}"), 3.0);
    release.add_permits(100);
    collect(&mut s, 12).await;
    wait_until("idle readers leave down to the minimum", || async {
        w.metric("sbworker_readers{queue=\"loonfactorberekening_reken\"}") == 1.0
    })
    .await;
    // Never below the minimum, and never above the maximum on the way.
    assert_eq!(w.metric("sbworker_readers{queue=\"loonfactorberekening_reken\"}"), 1.0);
    assert_eq!(w.shutdown().await, RunOutcome::Drained);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_queue_stops_its_readers_while_other_queues_go_on() {
    let (url, mut s) = calc_world().await;
    // A second calculation queue and service next to the first.
    s.client()
        .batch_execute(&format!(
            "SELECT sb.create_queue('reken_q2'); SELECT sb.create_service('/Reken2', 'reken_q2', ARRAY['{CONTRACT}']);
             SELECT sb.alter_queue('{REKEN_Q}', false);"
        ))
        .await
        .unwrap();
    let mut cfg = config(&url, "");
    cfg.worker.disabled_recheck_ms = 100;
    cfg.worker.scale_interval_ms = 50;
    let mut q2 = cfg.queues[REKEN_Q].clone();
    q2.wait_ms = 200;
    cfg.queues.insert("reken_q2".into(), q2);
    let w = InProcess::start(&url, cfg, calc_handlers());
    let stuck = ask(&mut s, &vraag_body(Uuid::new_v4())).await;
    s.begin().await.unwrap();
    let h2 = s.begin_dialog(DATA_SERVICE, "/Reken2", CONTRACT, None, None).await.unwrap();
    s.send(h2, message_types::VRAAG, Some(&vraag_body(Uuid::new_v4()))).await.unwrap();
    s.commit().await.unwrap();
    let got = collect(&mut s, 1).await;
    assert_eq!(got[0].conversation_handle, h2, "the enabled queue is served");
    wait_until("the disabled queue shows as such", || async {
        w.metric("sbworker_queue_enabled{queue=\"loonfactorberekening_reken\"}") == 0.0
            && w.metrics.readiness().is_err_and(|e| e.contains(&format!("{REKEN_Q}: Disabled")))
    })
    .await;
    assert_eq!(count(&s, "SELECT count(*) FROM sb.message WHERE queue = 'loonfactorberekening_reken'").await, 1);
    // Enabled again: the re-check notices and readers serve it.
    s.client().batch_execute(&format!("SELECT sb.alter_queue('{REKEN_Q}', true)")).await.unwrap();
    let got = collect(&mut s, 1).await;
    assert_eq!(got[0].conversation_handle, stuck);
    assert_eq!(w.shutdown().await, RunOutcome::Drained);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_health_are_served_over_http() {
    let (url, mut s) = calc_world().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cfg = config(&url, &format!("[http]\nlisten = \"127.0.0.1:{port}\""));
    let w = InProcess::start(&url, cfg, calc_handlers());
    ask(&mut s, &vraag_body(Uuid::new_v4())).await;
    collect(&mut s, 1).await;
    // The counters move just after the commit the test has seen.
    wait_until("the group is counted", || async {
        w.metric("sbworker_group_processing_seconds_count{queue=\"loonfactorberekening_reken\"}") == 1.0
    })
    .await;
    let metrics = http_get(port, "/metrics").await;
    assert!(metrics.starts_with("HTTP/1.1 200 OK"), "{metrics}");
    assert_eq!(metric_in(&metrics, "sbworker_requests_answered_total{queue=\"loonfactorberekening_reken\"}"), 1.0);
    assert_eq!(metric_in(&metrics, "sbworker_messages_received_total{queue=\"loonfactorberekening_reken\"}"), 1.0);
    assert_eq!(
        metric_in(&metrics, "sbworker_group_processing_seconds_count{queue=\"loonfactorberekening_reken\"}"),
        1.0
    );
    assert!(
        metrics.contains("sbworker_group_processing_seconds_bucket{le=\"0.016\",queue=\"loonfactorberekening_reken\"}")
            || metrics.contains(
                "sbworker_group_processing_seconds_bucket{queue=\"loonfactorberekening_reken\",le=\"0.016\"}"
            ),
        "{metrics}"
    );
    assert!(http_get(port, "/healthz").await.starts_with("HTTP/1.1 200 OK"));
    wait_until("ready", || async { http_get(port, "/readyz").await.starts_with("HTTP/1.1 200") }).await;
    assert!(http_get(port, "/nope").await.starts_with("HTTP/1.1 404"));
    assert_eq!(w.shutdown().await, RunOutcome::Drained);
}

async fn http_get(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut c = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    c.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).await.unwrap();
    out
}

/// Fails every group, and its diversion reply is a message type the contract does not
/// have, so the first diversion fails too.
struct PoisonedTwice;

impl Handler<Session> for PoisonedTwice {
    fn handle<'a>(&'a self, _: &'a mut Session, _: &'a [Message]) -> BoxFuture<'a, Result<Handled, HandlerError>> {
        Box::pin(async { Err(HandlerError::Failed("always fails".into())) })
    }

    fn divert_reply(&self, _: &Message, _: &str) -> Option<(&'static str, Vec<u8>)> {
        Some(("/not/in/the/contract", b"<x/>".to_vec()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_diverting_fails_too_the_message_is_still_set_aside_before_the_broker_disables_the_queue() {
    let (url, mut s) = calc_world().await;
    // Where an operator keeps the broker's poison detection on (allowed by configuration),
    // the worker still diverts within its four rollbacks.
    s.client().batch_execute(&format!("SELECT sb.alter_queue('{REKEN_Q}', p_poison_handling => true)")).await.unwrap();
    let w = InProcess::start(
        &url,
        config(&url, ""),
        Handlers::default().with("loonfactor-berekening", Arc::new(PoisonedTwice)),
    );
    let h = ask(&mut s, &vraag_body(Uuid::new_v4())).await;
    wait_until("the message is set aside", || async {
        count(&s, "SELECT count(*) FROM sbworker.dead_letter").await == 1
    })
    .await;
    let m = w.finish().await;
    // Three failures, one failed diversion, then the minimal one: four rollbacks, one
    // below the broker's limit.
    let attempts: i32 = s.client().query_one("SELECT attempts FROM sbworker.dead_letter", &[]).await.unwrap().get(0);
    assert_eq!(attempts, 4);
    let enabled: bool =
        s.client().query_one("SELECT enabled FROM sb.queue WHERE name = $1", &[&REKEN_Q]).await.unwrap().get(0);
    assert!(enabled, "the queue must stay enabled");
    assert_eq!(count(&s, "SELECT count(*) FROM sb.message").await, 0);
    // No reply could be sent: the conversation stays open for an operator.
    let state: String =
        s.client().query_one("SELECT state FROM sb.endpoint WHERE handle = $1", &[&h]).await.unwrap().get(0);
    assert_eq!(state, "CO");
    assert_eq!(metric_in(&m, "sbworker_groups_retried_total{queue=\"loonfactorberekening_reken\"}"), 4.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_connections_are_reopened_and_work_goes_on() {
    let (url, mut s) = calc_world().await;
    let w = InProcess::start(&url, config(&url, ""), calc_handlers());
    ask(&mut s, &vraag_body(Uuid::new_v4())).await;
    collect(&mut s, 1).await;
    // Cut every other connection to the database: the worker's readers (waiting in
    // RECEIVE), their listeners, the supervisor's monitor, and this test's listener.
    let killed: i64 = s
        .client()
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(killed >= 3, "killed {killed}");
    let mut s = Session::open(&url).await.unwrap();
    let h = ask(&mut s, &vraag_body(Uuid::new_v4())).await;
    let got = collect(&mut s, 1).await;
    assert_eq!((got[0].conversation_handle, got[0].message_type.as_str()), (h, message_types::ANTWOORD));
    w.finish().await;
}

/// Never finishes a group (its transaction stays open until the worker gives up on it).
struct Stuck;

impl Handler<Session> for Stuck {
    fn handle<'a>(&'a self, _: &'a mut Session, _: &'a [Message]) -> BoxFuture<'a, Result<Handled, HandlerError>> {
        Box::pin(std::future::pending())
    }

    fn divert_reply(&self, _: &Message, _: &str) -> Option<(&'static str, Vec<u8>)> {
        None
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_aborted_by_the_shutdown_is_given_back_not_counted() {
    let (url, mut s) = calc_world().await;
    let mut cfg = config(&url, "");
    cfg.worker.shutdown_grace_ms = 100;
    let w = InProcess::start(&url, cfg, Handlers::default().with("loonfactor-berekening", Arc::new(Stuck)));
    ask(&mut s, &vraag_body(Uuid::new_v4())).await;
    wait_until("the attempt is counted", || async {
        count(&s, "SELECT count(*) FROM sbworker.message_attempt WHERE attempts = 1").await == 1
    })
    .await;
    // The grace period runs out with the group in flight: the worker aborts it.
    assert!(matches!(w.shutdown().await, RunOutcome::Aborted { .. }));
    let r = s
        .client()
        .query_one("SELECT attempts, transient_failures, last_transient_error FROM sbworker.message_attempt", &[])
        .await
        .unwrap();
    let (attempts, transient, why): (i32, i32, String) = (r.get(0), r.get(1), r.get(2));
    assert_eq!((attempts, transient), (0, 1), "the interrupted attempt was given back");
    assert!(why.contains("interrupted by the worker's shutdown"), "{why}");
    assert_eq!(count(&s, "SELECT count(*) FROM sb.message").await, 1, "the message is still queued");
}

/// Handles the one conversation `handle` of `queue` with `handler`, in a transaction.
async fn handle_one(s: &mut Session, queue: &str, handle: Uuid, handler: &dyn Handler<Session>) -> Handled {
    s.begin().await.unwrap();
    let msgs = s.receive_conversation(queue, handle).await.unwrap();
    assert!(!msgs.is_empty(), "nothing on {queue} for {handle}");
    let done = handler.handle(s, &msgs).await.unwrap();
    s.commit().await.unwrap();
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_2_answered_before_version_1_keeps_version_2() {
    // Out of order on purpose: version 2 of a key is computed and stored first, then
    // version 1 arrives. It is answered as superseded without computing, and the stored
    // result stays version 2's. The expected factors come from the engine run on the
    // test's own Vraag (not from the SQL that builds the Vraags in the pipeline).
    use sbworker::contract::{decode_vraag, encode_vraag};
    let (_url, mut s) = calc_world().await;
    let dv = 900_001;
    let mut v1 = decode_vraag(&vraag_body(Uuid::new_v4()), &Limits::default()).unwrap();
    v1.dienstverband.id = dv;
    v1.versie = 1;
    let mut v2 = v1.clone();
    v2.id = Uuid::new_v4();
    v2.versie = 2;
    let mut second = v2.diensten.dienst[0].clone();
    second.datum = "2026-03-11".parse().unwrap();
    v2.diensten.dienst.push(second);
    let h1 = ask(&mut s, encode_vraag(&v1).as_bytes()).await;
    let h2 = ask(&mut s, encode_vraag(&v2).as_bytes()).await;
    let target = |h: Uuid| {
        let c = s.client();
        async move {
            c.query_one(
                "SELECT t.handle FROM sb.endpoint i JOIN sb.endpoint t ON t.conversation_id = i.conversation_id \
                 AND t.handle <> i.handle WHERE i.handle = $1",
                &[&h],
            )
            .await
            .unwrap()
            .get::<_, Uuid>(0)
        }
    };
    let (t1, t2) = (target(h1).await, target(h2).await);
    let calc = calculation_handler();
    let collector = sbworker::handlers::collector::Collector::new(Limits::default());
    // Version 2 first, through to the store.
    assert_eq!(handle_one(&mut s, REKEN_Q, t2, &*calc).await.answered, 1);
    assert_eq!(handle_one(&mut s, ANTWOORD_Q, h2, &collector).await.answered, 1);
    // Version 1 afterwards: superseded at the calculation, nothing stored.
    assert_eq!(handle_one(&mut s, REKEN_Q, t1, &*calc).await.superseded, 1);
    let stored = handle_one(&mut s, ANTWOORD_Q, h1, &collector).await;
    assert_eq!((stored.answered, stored.superseded), (0, 1));
    // The stored result is version 2's, factor for factor as the engine computes it.
    let row = s
        .client()
        .query_one("SELECT versie FROM rekenserver.resultaat WHERE dienstverband_id = $1", &[&dv])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 2);
    let tables = sbworker::engine::Tables::built_in().unwrap();
    let expected = sbworker::engine::calculate(&v2, &tables, false).unwrap().antwoord;
    let rows = s
        .client()
        .query(
            "SELECT loonfactor_code, waarde::text FROM rekenserver.resultaat_factor WHERE dienstverband_id = $1 \
             ORDER BY loonfactor_code",
            &[&dv],
        )
        .await
        .unwrap();
    let got: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let want: Vec<(String, String)> =
        expected.mutaties.iter().map(|m| (m.loonfactor_code.clone(), m.waarde.to_string())).collect();
    assert_eq!(got.len(), want.len());
    for ((gc, gv), (wc, wv)) in got.iter().zip(&want) {
        assert_eq!(gc, wc);
        assert_eq!(gv.parse::<rust_decimal::Decimal>().unwrap(), wv.parse::<rust_decimal::Decimal>().unwrap(), "{gc}");
    }
    // The two versions differ, so the check tells them apart.
    let v1_factors = sbworker::engine::calculate(&v1, &tables, false).unwrap().antwoord.mutaties;
    assert_ne!(v1_factors, expected.mutaties);
}
