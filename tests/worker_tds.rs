//! The worker runtime on the SQL Server transport over TDS, against the emulator, where
//! it differs from PostgreSQL: an idle queue waits on SQL Server's event-based
//! activation (`broker/mssql/optional/activation.sql`), or without it is looked at every
//! tick. The emulator stands for the script with a queue named `activation` in the
//! PostgreSQL broker (docs/emulator.md, "Event-based activation").

use std::sync::Arc;
use std::time::Duration;

use sbworker::broker::mssql::MssqlTransport;
use sbworker::contract::{Limits, message_types};
use sbworker::demo::{DATA_QUEUE, REKEN_QUEUE};
use sbworker::emulator::server::Faults;
use sbworker::handlers::{calculation, collector};
use sbworker::worker::{self, Handlers, Metrics, RunOutcome};
use tokio::sync::mpsc;

use crate::common::calc::{calc_world, calculation_handler, wait_until};
use crate::common::tds::{emulator_with, send_vraag, tds_worker};

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
