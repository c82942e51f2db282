//! The worker runtime in this process against the PostgreSQL broker, where a scenario
//! needs PostgreSQL itself: a deadlock in the handler's own SQL, metrics and health over
//! HTTP, a group aborted by the shutdown, versions answered out of order. (What every
//! back end must do is in the conformance suite, `conformance_worker`.)

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use sbworker::broker::Message;
use sbworker::broker::postgres::Session;
use sbworker::contract::{Limits, message_types};
use sbworker::worker::handler::{BoxFuture, Handled, Handler, HandlerError};
use sbworker::worker::{Handlers, RunOutcome};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::common::calc::*;

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
    crate::common::within(60, "the handler locks its row", locked_one.notified()).await;
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
    crate::common::calc::curl(port, path, &[]).await
}

/// The endpoint's refusals: another method, a head larger than 8 KiB, and a client that
/// never finishes its head (dropped, not kept for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_endpoint_refuses_other_methods_large_heads_and_unfinished_heads() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (url, _s) = calc_world().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cfg = config(&url, &format!("[http]\nlisten = \"127.0.0.1:{port}\""));
    let w = InProcess::start(&url, cfg, calc_handlers());
    wait_until("serving", || async { http_get(port, "/healthz").await.starts_with("HTTP/1.1 200") }).await;
    let posted = crate::common::calc::curl(port, "/metrics", &["-X", "POST"]).await;
    assert!(posted.starts_with("HTTP/1.1 405"), "{posted}");
    let big = format!("X-Big: {}", "x".repeat(9000));
    let refused = crate::common::calc::curl(port, "/metrics", &["-H", &big]).await;
    assert!(refused.starts_with("HTTP/1.1 431"), "{refused}");
    // A head never finished: the server closes the connection (its 5 s head timeout, or
    // at the latest its 30 s limit a connection: this does not tell them apart), so the
    // read ends; the deadline only bounds the test.
    let mut slow = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(60), slow.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the slow client's connection is closed by the server");
    assert!(!String::from_utf8_lossy(&rest).contains("sbworker_"), "no metrics for an unfinished head");
    assert_eq!(w.shutdown().await, RunOutcome::Drained);
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
    assert_eq!(handle_one(&mut s, REKEN_QUEUE, t2, &*calc).await.answered, 1);
    assert_eq!(handle_one(&mut s, DATA_QUEUE, h2, &collector).await.answered, 1);
    // Version 1 afterwards: superseded at the calculation, nothing stored.
    assert_eq!(handle_one(&mut s, REKEN_QUEUE, t1, &*calc).await.superseded, 1);
    let stored = handle_one(&mut s, DATA_QUEUE, h1, &collector).await;
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

/// The database's limit on a queue's readers (the broker's `max_readers`, SQL Server's
/// MAX_QUEUE_READERS) holds across two worker processes' readers, each of which would
/// run three to four, and follows a change live: 2 under a burst of requests, then 4,
/// then 1, then none (the slots given back). Each reader holds a slot, an advisory lock
/// on its session, counted here in `pg_locks`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_databases_reader_limit_holds_across_two_workers_and_follows_a_change_live() {
    let (url, mut s) = calc_world().await;
    let admin = Session::open(&url).await.unwrap();
    let limit = |n: i32| {
        let c = admin.client();
        async move {
            c.execute("SELECT sb.alter_queue($1, p_max_readers => $2)", &[&REKEN_QUEUE, &n]).await.unwrap();
        }
    };
    limit(2).await;
    let text = format!("{}min_readers = 3\nmax_readers = 4\n", config_text(&url, ""));
    let config = || sbworker::config::from_str(&text, &Vec::new()).unwrap();
    let (a, b) = (InProcess::start(&url, config(), calc_handlers()), InProcess::start(&url, config(), calc_handlers()));
    let held_sql = format!(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2
            AND classid = (hashtext('sbworker.reader:{REKEN_QUEUE}')::bigint & 4294967295)::oid"
    );
    let held = async |s: &Session| count(s, &held_sql).await;
    // Backends whose last statement was a RECEIVE of the broker (the readers'; not this
    // test's own session) that hold no slot: none may read without one.
    let own: i32 = s.client().query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    let unslotted_sql = format!(
        "SELECT count(*) FROM pg_stat_activity a
          WHERE a.datname = current_database() AND a.pid NOT IN ({own}, pg_backend_pid())
            AND a.query LIKE '%FROM sb.receive(%'
            AND NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory'
                               AND l.objsubid = 2
                               AND l.classid = (hashtext('sbworker.reader:{REKEN_QUEUE}')::bigint & 4294967295)::oid)"
    );
    let unslotted = async |s: &Session| count(s, &unslotted_sql).await;
    wait_until("two slots are held", || async { held(&admin).await == 2 }).await;
    // A burst, answered by the two readers; never more than two hold a slot.
    let handles: Vec<Uuid> = {
        let mut v = Vec::new();
        for _ in 0..40 {
            v.push(ask(&mut s, &vraag_body(Uuid::new_v4())).await);
        }
        v
    };
    let gauge = format!("sbworker_readers{{queue=\"{REKEN_QUEUE}\"}}");
    let running = || a.metric(&gauge) + b.metric(&gauge);
    let mut answered = Vec::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while answered.len() < handles.len() {
        assert!(tokio::time::Instant::now() < deadline, "{} of {} answered within 60 s", answered.len(), handles.len());
        assert!(held(&admin).await <= 2, "more readers than the database allows");
        assert_eq!(unslotted(&admin).await, 0, "a reader receives without a slot");
        // A reader runs only with a slot. A process below its own minimum tries one more
        // reader every few seconds, which leaves at once when none is free: two such at
        // most. Without the limit, six would run.
        assert!(running() <= 4.0, "{} readers run", running());
        s.begin().await.unwrap();
        let batch = s.receive(DATA_QUEUE, 1000, None, std::time::Duration::from_millis(200)).await.unwrap();
        s.commit().await.unwrap();
        answered.extend(batch.into_iter().filter(|m| m.message_type == message_types::ANTWOORD));
        assert!(held(&admin).await <= 2, "more readers than the database allows");
    }
    end_all(&mut s, handles).await;
    wait_until("two readers run", || async { running() == 2.0 }).await;
    // Raised: each process adds readers up to its own minimum, four in all.
    limit(4).await;
    wait_until("four slots are held", || async { held(&admin).await == 4 }).await;
    // Lowered: readers above it leave at their next look.
    limit(1).await;
    wait_until("one slot is held", || async { held(&admin).await == 1 }).await;
    // No limit: the slot is given back (each process runs its own three).
    limit(0).await;
    wait_until("no slot is held", || async { held(&admin).await == 0 }).await;
    assert_eq!(a.shutdown().await, RunOutcome::Drained);
    assert_eq!(b.shutdown().await, RunOutcome::Drained);
}

/// With `min_readers = 0` an idle queue costs nothing: its supervisor, with no reader,
/// waits for the broker's wake-up instead of looking at the queue at every tick (250 ms
/// here), so the worker's sessions run no statement while nothing comes; and a roster
/// edit wakes it: a reader starts and the key's result is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_queue_without_readers_costs_no_statement_and_a_message_wakes_it() {
    use sbworker::demo::roster::Roster;
    use sbworker::demo::{DATA_QUEUE, REKEN_QUEUE, check};
    use sbworker::handlers::{calculation, collector};

    let (url, mut c) = crate::common::pg::fresh_roster_db().await;
    let worker_url = format!("{url} application_name=idle-test");
    let config = format!(
        "[broker]\nkind = \"postgres\"\nconnection = {}\n\n\
         [worker]\nscale_interval_ms = 250\nidle_exit_ms = 500\nheartbeat_ms = 0\n\n\
         [queues.{REKEN_QUEUE}]\nhandler = \"{}\"\nmin_readers = 0\nmax_readers = 2\nwait_ms = 500\n\n\
         [queues.{DATA_QUEUE}]\nhandler = \"{}\"\nmin_readers = 0\nmax_readers = 2\nwait_ms = 500\n",
        toml::Value::String(worker_url),
        calculation::NAME,
        collector::NAME,
    );
    let dir = TempDir::new("idle");
    let worker = spawn_worker(&dir, &config);
    // Both supervisors wait, each marked as a receiver waiting on its queue.
    let waiting = "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                    WHERE l.locktype = 'advisory' AND l.classid = 1396834305 AND a.application_name = 'idle-test'";
    wait_until("both idle supervisors wait for work", || {
        let c = &c;
        async move { crate::common::pg::count_rows(c, waiting).await == 2 }
    })
    .await;
    // Over a second and a half (six ticks), no session of the worker starts a statement.
    let last = "SELECT max(query_start)::text FROM pg_stat_activity WHERE application_name = 'idle-test'";
    let before: String = c.query_one(last, &[]).await.unwrap().get(0);
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let after: String = c.query_one(last, &[]).await.unwrap().get(0);
    assert_eq!(before, after, "an idle worker ran statements");
    // An edit wakes the calculation queue, and its answer the collector's.
    Roster::generate(1, 7, false).load(&mut c).await.unwrap();
    check::wait_drained(&c, std::time::Duration::from_secs(60), |_| {}).await.unwrap();
    let verdict = check::verify(&c, &sbworker::engine::Tables::built_in().unwrap()).await.unwrap();
    assert_eq!((verdict.latest, verdict.problems.len()), (1, 0), "{:?}", verdict.problems);
    assert_eq!(stop_worker(worker).await, Some(0));
}
