//! The worker runtime on the SQL Server transport over TDS, against the emulator: the
//! whole pipeline (the calculation and the collector, as `sbworker demo --mssql` runs
//! them), a T-SQL sender sending as the roster triggers do with the collector keeping
//! the latest, and faults on the wire (connections dropped before a COMMIT and inside a
//! transaction, injected deadlocks), every request answered once. And where it differs
//! from PostgreSQL: an idle queue waits on SQL Server's event-based activation
//! (`broker/mssql/optional/activation.sql`), or without it is looked at every tick. The
//! emulator stands for the script with a queue named `activation` in the PostgreSQL
//! broker (docs/emulator.md, "Event-based activation").

use std::sync::Arc;
use std::time::Duration;

use sbworker::broker::mssql::MssqlTransport;
use sbworker::contract::{Limits, message_types};
use sbworker::demo::{DATA_QUEUE, REKEN_QUEUE};
use sbworker::emulator::server::Faults;
use sbworker::handlers::{calculation, collector};
use sbworker::worker::{self, Handlers, Metrics, RunOutcome};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::common::calc::{
    ask, calc_world, calculation_handler, collect, count, end_all, metric_in, vraag_body, wait_until,
};
use crate::common::tds::{emulator, emulator_with, send_vraag, tds_worker};

/// The notification queue, as the PostgreSQL broker behind the emulator names it.
const NOTIFICATIONS: &str = "activation";

/// The worker's tuning for idle queues: no reader kept, a tick every 250 ms, a reader
/// leaving after half a second without work, no heartbeat (it would be a statement).
fn idle(cfg: &mut sbworker::config::Config) {
    cfg.worker.scale_interval_ms = 250;
    cfg.worker.idle_exit_ms = 500;
    cfg.worker.heartbeat_ms = 0;
    for q in cfg.queues.values_mut() {
        q.min_readers = 0;
        q.max_readers = 2;
        q.wait_ms = 500;
    }
}

/// What the emulator was asked about each queue: (calculation, answers, notifications).
fn looks(f: &Faults) -> (u64, u64, u64) {
    (f.queue_looks(REKEN_QUEUE), f.queue_looks(DATA_QUEUE), f.queue_looks(NOTIFICATIONS))
}

/// As `worker_pg::an_idle_queue_without_readers_costs_no_statement_and_a_message_wakes_it`,
/// over TDS: with `min_readers = 0` and the notification queue installed, both
/// supervisors wait in one RECEIVE from `sbworker.activation` (one session receives for
/// the transport's sessions), so nothing looks at the queues while nothing comes; a
/// roster edit makes the calculation queue's QUEUE_ACTIVATION, its answer the answers'
/// queue's, and each wakes its supervisor: the key's result is stored, and both go back
/// to waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_queue_without_readers_waits_for_queue_activation_and_an_edit_wakes_it() {
    use sbworker::demo::check;
    use sbworker::demo::roster::Roster;

    let (url, mut c) = crate::common::pg::fresh_roster_db().await;
    // optional/activation.sql, as the emulator knows it.
    c.batch_execute(&format!("SELECT sb.create_queue('{NOTIFICATIONS}')")).await.unwrap();
    let faults = Arc::new(Faults::default());
    let (conn, _stop) = emulator_with(&url, faults.clone()).await;
    let transport = MssqlTransport::new(&conn).unwrap();
    let mut cfg = sbworker::demo::worker_config(&url, 2);
    cfg.broker.kind = sbworker::config::BrokerKind::Mssql;
    cfg.broker.connection = conn.clone();
    idle(&mut cfg);
    cfg.check().unwrap();
    let handlers = Handlers::default()
        .with(calculation::NAME, calculation_handler())
        .with(collector::NAME, Arc::new(collector::Collector::new(Limits::default())));
    let (tx, rx) = mpsc::channel(2);
    let run = tokio::spawn(async move {
        worker::run(transport, &(&cfg).into(), &handlers, Arc::new(Metrics::new()), rx).await.unwrap()
    });
    // Each supervisor looked at its queue once; one RECEIVE waits on the notifications.
    let both_wait = || {
        let f = faults.clone();
        async move {
            let (reken, data, _) = looks(&f);
            reken >= 1 && data >= 1 && f.waiting_on(NOTIFICATIONS) == 1
        }
    };
    wait_until("both idle supervisors wait for QUEUE_ACTIVATION", both_wait).await;
    // Over a second and a half (six ticks), the worker asks the emulator nothing: no look
    // at either queue, no other RECEIVE from the notifications.
    let before = looks(&faults);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(looks(&faults), before, "an idle worker asked the emulator something");
    assert_eq!(faults.waiting_on(NOTIFICATIONS), 1);
    // An edit wakes the calculation queue, and its answer the collector's: by their
    // notifications, well before the waits would have ended on their own (28 s, under
    // the connection's Command Timeout of 30 s).
    let edited = tokio::time::Instant::now();
    Roster::generate(1, 7, false).load(&mut c).await.unwrap();
    check::wait_drained(&c, Duration::from_secs(60), |_| {}).await.unwrap();
    assert!(edited.elapsed() < Duration::from_secs(20), "woken late: {:?}", edited.elapsed());
    let verdict = check::verify(&c, &sbworker::engine::Tables::built_in().unwrap()).await.unwrap();
    assert_eq!((verdict.latest, verdict.problems.len()), (1, 0), "{:?}", verdict.problems);
    let (reken, data, _) = looks(&faults);
    assert!(reken > before.0 && data > before.1, "both queues were served: {:?}", looks(&faults));
    // The readers leave once idle, and the supervisors wait again.
    wait_until("both supervisors wait again", || {
        let f = faults.clone();
        async move { f.waiting_on(NOTIFICATIONS) == 1 && f.waiting_on(REKEN_QUEUE) + f.waiting_on(DATA_QUEUE) == 0 }
    })
    .await;
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
}

/// Without `optional/activation.sql` the RECEIVE from `sbworker.activation` fails (208):
/// the supervisor tries it once and then looks at its queue at every tick, as before the
/// script existed, and the queue is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_notification_queue_an_idle_queue_is_looked_at_every_tick_and_served() {
    let (url, _s) = calc_world().await;
    let faults = Arc::new(Faults::default());
    let (conn, _stop) = emulator_with(&url, faults.clone()).await;
    let (tx, run, _) = tds_worker(&conn, &url, idle);
    wait_until("the idle supervisor looks at every tick", || {
        let f = faults.clone();
        async move { f.queue_looks(REKEN_QUEUE) >= 5 }
    })
    .await;
    assert_eq!(faults.queue_looks(NOTIFICATIONS), 1, "the notification queue was tried once, not at every tick");
    assert_eq!(faults.waiting_on(NOTIFICATIONS), 0);
    let mut c = crate::common::tds::client(&conn).await;
    send_vraag(&mut c).await;
    let rows = c
        .query(
            "WAITFOR (RECEIVE TOP (10) conversation_handle, message_type_name
                        FROM dbo.loonfactorberekening_data), TIMEOUT 30000",
            &[],
        )
        .await
        .unwrap()
        .into_first_result()
        .await
        .unwrap();
    let types: Vec<&str> = rows.iter().map(|r| r.get::<&str, _>(1).unwrap()).collect();
    assert_eq!(types, [message_types::ANTWOORD, sbworker::broker::system::END_DIALOG]);
    let handle: uuid::Uuid = rows[0].get(0).unwrap();
    c.execute("END CONVERSATION @P1", &[&handle]).await.unwrap();
    assert_eq!(faults.queue_looks(NOTIFICATIONS), 1);
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
}

/// The calculation and the collector over TDS, as `sbworker demo --mssql` runs them.
fn tds_pipeline(conn: &str, url: &str) -> (mpsc::Sender<()>, tokio::task::JoinHandle<RunOutcome>) {
    let transport = MssqlTransport::new(conn).unwrap();
    let mut cfg = sbworker::demo::worker_config(url, 3);
    cfg.broker.kind = sbworker::config::BrokerKind::Mssql;
    cfg.broker.connection = conn.to_owned();
    cfg.check().unwrap();
    let limits = Limits::default();
    let handlers = Handlers::default()
        .with(calculation::NAME, calculation_handler())
        .with(sbworker::handlers::collector::NAME, Arc::new(sbworker::handlers::collector::Collector::new(limits)));
    let (tx, rx) = mpsc::channel(2);
    let run = tokio::spawn(async move {
        worker::run(transport, &(&cfg).into(), &handlers, Arc::new(Metrics::new()), rx).await.unwrap()
    });
    (tx, run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_pipeline_runs_over_tds_and_latest_wins() {
    use sbworker::demo::check::{verify, wait_drained};
    use sbworker::demo::roster::Roster;
    let (url, mut c) = crate::common::pg::fresh_roster_db().await;
    let (conn, _stop) = emulator(&url).await;
    let (tx, run) = tds_pipeline(&conn, &url);
    let roster = Roster::generate(15, 5, true);
    roster.load(&mut c).await.unwrap();
    wait_drained(&c, std::time::Duration::from_secs(120), |_| {}).await.unwrap();
    for e in sbworker::demo::edits::burst(&roster, 45, 5) {
        e.apply(&c).await.unwrap();
    }
    wait_drained(&c, std::time::Duration::from_secs(120), |_| {}).await.unwrap();
    let verdict = verify(&c, &sbworker::engine::Tables::built_in().unwrap()).await.unwrap();
    assert!(verdict.problems.is_empty(), "{:?}", verdict.problems);
    assert_eq!((verdict.latest, verdict.faulted.len()), (14, 1));
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_t_sql_sender_sends_as_the_roster_triggers_do_and_the_collector_keeps_the_latest() {
    use sbworker::demo::check::{verify, wait_drained};
    use sbworker::demo::roster::{PERIODE_ID, Roster};
    let (url, mut c) = crate::common::pg::fresh_roster_db().await;
    let (conn, _stop) = emulator(&url).await;
    let (tx, run) = tds_pipeline(&conn, &url);
    // The roster, its versions raised by the triggers but nothing sent: the T-SQL sender
    // below sends instead.
    c.batch_execute("SET rekenserver.vragen_uit = on").await.unwrap();
    Roster::generate(6, 11, true).load(&mut c).await.unwrap();
    let mut sender = crate::common::tds::client(&conn).await;
    // As the SQL Server trigger sends one key's Vraag: in the key's conversation group,
    // the body an `xml` value (UTF-16LE with a byte-order mark in the queue), the log
    // row in the same transaction (written here through PostgreSQL before the COMMIT).
    async fn send(
        sender: &mut sbworker::broker::mssql::Tds,
        c: &tokio_postgres::Client,
        dv: i32,
        versie: i64,
        xml: &str,
        id: Uuid,
        group: Uuid,
    ) {
        sender.simple_query("BEGIN TRANSACTION").await.unwrap().into_results().await.unwrap();
        let row = sender
            .query(
                "DECLARE @h uniqueidentifier;
                 BEGIN DIALOG CONVERSATION @h
                     FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
                     TO SERVICE N'/Rekenserver/LoonfactorBerekening/RekenService'
                     ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract]
                     WITH RELATED_CONVERSATION_GROUP = @P2, ENCRYPTION = OFF;
                 SEND ON CONVERSATION (@h) MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (CAST(@P1 AS xml));
                 SELECT @h;",
                &[&xml, &group],
            )
            .await
            .unwrap()
            .into_row()
            .await
            .unwrap()
            .expect("the handle");
        let handle: Uuid = row.get(0).unwrap();
        c.execute(
            "INSERT INTO rekenserver.berekening_log (dialog_handle, vraag_id, dienstverband_id, periode_id, versie) VALUES ($1, $2, $3, $4, $5)",
            &[&handle, &id, &dv, &PERIODE_ID, &versie],
        )
        .await
        .unwrap();
        sender.simple_query("COMMIT TRANSACTION").await.unwrap().into_results().await.unwrap();
    }
    let vraag = |dv: i32, versie: i64, id: Uuid| {
        let c = &c;
        async move {
            let r = c
                .query_one(
                    "SELECT rekenserver.vraag($1, $2, $3, $4)::text, group_id FROM rekenserver.sleutel WHERE dienstverband_id = $1 AND periode_id = $2",
                    &[&dv, &PERIODE_ID, &versie, &id],
                )
                .await
                .unwrap();
            (r.get::<_, String>(0), r.get::<_, Uuid>(1))
        }
    };
    let keys: Vec<(i32, i64)> = c
        .query("SELECT dienstverband_id, versie FROM rekenserver.sleutel ORDER BY 1", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(keys.len(), 6);
    // One key goes out twice: its Vraag of now, then (after a planner's edit) the newer
    // one sent first and the older one after it, as two senders racing might.
    let (edited, v1) = keys[0];
    let id1 = Uuid::new_v4();
    let (old_xml, group) = vraag(edited, v1, id1).await;
    c.execute(
        "UPDATE rooster.tijdblok SET is_ziek = NOT is_ziek WHERE id = (SELECT min(t.id) FROM rooster.tijdblok t JOIN rooster.dienst d ON d.id = t.dienst_id WHERE d.dienstverband_id = $1)",
        &[&edited],
    )
    .await
    .unwrap();
    let v2: i64 = c
        .query_one("SELECT versie FROM rekenserver.sleutel WHERE dienstverband_id = $1", &[&edited])
        .await
        .unwrap()
        .get(0);
    assert_eq!(v2, v1 + 1, "the edit raised the version");
    let id2 = Uuid::new_v4();
    let (new_xml, _) = vraag(edited, v2, id2).await;
    send(&mut sender, &c, edited, v2, &new_xml, id2, group).await;
    send(&mut sender, &c, edited, v1, &old_xml, id1, group).await;
    for &(dv, versie) in &keys[1..] {
        let id = Uuid::new_v4();
        let (xml, group) = vraag(dv, versie, id).await;
        send(&mut sender, &c, dv, versie, &xml, id, group).await;
    }
    wait_drained(&c, std::time::Duration::from_secs(120), |_| {}).await.unwrap();
    // Every key holds the result of its latest version (the second builder's
    // calculation); the older Vraag of the edited key was answered but not stored.
    let verdict = verify(&c, &sbworker::engine::Tables::built_in().unwrap()).await.unwrap();
    assert!(verdict.problems.is_empty(), "{:?}", verdict.problems);
    assert_eq!((verdict.latest, verdict.faulted.len()), (5, 1));
    let outcome = |id: Uuid| {
        let c = &c;
        async move {
            c.query_one("SELECT uitkomst FROM rekenserver.berekening_log WHERE vraag_id = $1", &[&id])
                .await
                .unwrap()
                .get::<_, String>(0)
        }
    };
    assert_eq!(outcome(id2).await, "opgeslagen");
    assert_ne!(outcome(id1).await, "opgeslagen", "the older version is never stored over the newer");
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
}

/// Asks `n` questions, collects the answers: each request answered exactly once.
async fn every_request_answered_once(s: &mut sbworker::broker::postgres::Session, n: usize) {
    let mut asked = Vec::new();
    for _ in 0..n {
        asked.push(ask(s, &vraag_body(Uuid::new_v4())).await);
    }
    let got = collect(s, n).await;
    let mut answered: Vec<Uuid> =
        got.iter().filter(|m| m.message_type == message_types::ANTWOORD).map(|m| m.conversation_handle).collect();
    answered.sort();
    asked.sort();
    assert_eq!(answered, asked, "{got:?}");
    // Once the calculation's queue is empty and no attempt is open, nothing more comes:
    // no second answer to any request, nothing set aside.
    wait_until("the calculation queue is done", || async {
        count(
            s,
            &format!(
                "SELECT (SELECT count(*) FROM sb.message WHERE queue = '{REKEN_QUEUE}') \
                 + (SELECT count(*) FROM sbworker.message_attempt)"
            ),
        )
        .await
            == 0
    })
    .await;
    assert_eq!(
        count(s, &format!("SELECT count(*) FROM sb.message WHERE queue = '{DATA_QUEUE}'")).await,
        0,
        "no answer beyond one per request"
    );
    assert_eq!(count(s, "SELECT count(*) FROM sbworker.dead_letter").await, 0);
    end_all(s, asked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_dropped_between_send_and_commit_loses_nothing_and_answers_once() {
    // Every other reply's SEND is followed by a dropped connection before its COMMIT: the
    // transaction rolls back (the Antwoord with it), the Vraag returns to the queue, and
    // the worker, given the attempt back as the environment's fault, answers it once.
    let (url, mut s) = calc_world().await;
    let faults = Arc::new(Faults::default());
    faults.set_send_drop_every(Some(2));
    let (conn, _stop) = emulator_with(&url, faults.clone()).await;
    let (tx, run, metrics) = tds_worker(&conn, &url, |c| c.queues.get_mut(REKEN_QUEUE).unwrap().max_readers = 1);
    every_request_answered_once(&mut s, 6).await;
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
    assert!(faults.injected() >= 3, "{}", faults.injected());
    let text = metrics.encode();
    assert_eq!(
        metric_in(&text, &format!("sbworker_requests_answered_total{{queue=\"{REKEN_QUEUE}\"}}")),
        6.0,
        "{text}"
    );
    assert!(
        metric_in(&text, &format!("sbworker_transient_failures_total{{queue=\"{REKEN_QUEUE}\"}}")) >= 3.0,
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_deadlocks_1205_are_retried_and_every_request_is_answered_once() {
    let (url, mut s) = calc_world().await;
    let faults = Arc::new(Faults::new(Some(2), None, std::time::Duration::from_millis(2)));
    let (conn, _stop) = emulator_with(&url, faults.clone()).await;
    // One reader: receives come one after another, so no message meets two faults in a row.
    let (tx, run, metrics) = tds_worker(&conn, &url, |c| c.queues.get_mut(REKEN_QUEUE).unwrap().max_readers = 1);
    every_request_answered_once(&mut s, 6).await;
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
    // Every other RECEIVE that took a message failed, its transaction rolled back, and the
    // reader received the same message again after a backoff.
    assert!(faults.injected() >= 5, "{}", faults.injected());
    let text = metrics.encode();
    assert_eq!(metric_in(&text, &format!("sbworker_requests_answered_total{{queue=\"{REKEN_QUEUE}\"}}")), 6.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_dropped_mid_transaction_is_reopened_and_nothing_is_lost() {
    let (url, mut s) = calc_world().await;
    let faults = Arc::new(Faults::new(None, Some(2), std::time::Duration::ZERO));
    let (conn, _stop) = emulator_with(&url, faults.clone()).await;
    let (tx, run, _) = tds_worker(&conn, &url, |c| c.queues.get_mut(REKEN_QUEUE).unwrap().max_readers = 1);
    every_request_answered_once(&mut s, 6).await;
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
    assert!(faults.injected() >= 3, "{}", faults.injected());
}
