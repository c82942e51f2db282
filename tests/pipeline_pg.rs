//! The pipeline on PostgreSQL, end to end: roster triggers, the calculation and the
//! collector; results equal to `sbworker calc`, latest wins under stress, one Vraag per
//! key for a bulk import, and `sbworker demo` itself.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rust_decimal::Decimal;
use sbworker::broker::Message;
use sbworker::broker::postgres::Session;
use sbworker::contract::{Limits, decode_antwoord};
use sbworker::demo::check::{self, wait_drained};
use sbworker::demo::edits::Edit;
use sbworker::demo::roster::{FIRST_ID, PERIODE_ID, Roster};
use sbworker::demo::{self, DATA_QUEUE, REKEN_QUEUE};
use sbworker::engine::Tables;
use sbworker::handlers::{calculation, collector};
use sbworker::worker::Handlers;
use sbworker::worker::handler::{BoxFuture, Handled, Handler, HandlerError};
use tokio::process::Command;
use tokio_postgres::Client;

use crate::common::calc::{InProcess, TempDir, calculation_handler, spawn_worker, stop_worker};
use crate::common::pg::{fresh_roster_db, lengthen_first_block};

const BIN: &str = env!("CARGO_BIN_EXE_sbworker");

async fn pipeline_world() -> (String, Client) {
    fresh_roster_db().await
}

async fn count(c: &Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).await.unwrap().get(0)
}

async fn drained(c: &Client) {
    wait_drained(c, Duration::from_secs(300), |_| {}).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roster_edits_give_the_results_sbworker_calc_gives() {
    let (url, mut c) = pipeline_world().await;
    let dir = TempDir::new("e2e");
    let worker = spawn_worker(&dir, &demo::worker_config_text(&url, 2));
    let roster = Roster::generate(12, 7, true);
    roster.load(&mut c).await.unwrap();
    drained(&c).await;
    for e in sbworker::demo::edits::burst(&roster, 40, 7) {
        e.apply(&c).await.unwrap();
    }
    drained(&c).await;
    // Every key holds its latest version's result, as the engine computes it now.
    let verdict = check::verify(&c, &Tables::built_in().unwrap()).await.unwrap();
    assert!(verdict.problems.is_empty(), "{:?}", verdict.problems);
    assert_eq!(verdict.latest + verdict.faulted.len(), 12);
    // The employee without a salary got a Fout, recorded with its reason.
    assert_eq!(verdict.faulted.len(), 1);
    assert!(verdict.faulted[0].1.contains("salary-missing"), "{:?}", verdict.faulted);
    // The check's second builder is independent of the SQL one: a SQL builder that
    // misreads one roster column is caught, key by key.
    let def: String = c.query_one("SELECT pg_get_functiondef('rekenserver.vraag'::regproc)", &[]).await.unwrap().get(0);
    let wrong = def.replace(
        "xmlelement(name \"DagenPerWeek\", dv.dagen_per_week)",
        "xmlelement(name \"DagenPerWeek\", dv.dagen_per_week + 1)",
    );
    assert_ne!(wrong, def, "the mutation applies");
    c.batch_execute("BEGIN").await.unwrap();
    c.batch_execute(&wrong).await.unwrap();
    let misread = check::verify(&c, &Tables::built_in().unwrap()).await.unwrap();
    assert_eq!(misread.problems.len(), 11, "{:?}", misread.problems);
    assert!(misread.problems.iter().all(|p| p.contains("the SQL builder's Vraag differs from the roster rows")));
    c.batch_execute("ROLLBACK").await.unwrap();
    // And what is stored equals what `sbworker calc` prints for the same Vraag.
    for dv in [FIRST_ID, FIRST_ID + 3, FIRST_ID + 11] {
        let xml: String = c
            .query_one(
                "SELECT rekenserver.vraag($1, $2, s.versie, gen_random_uuid())::text FROM rekenserver.sleutel s \
                 WHERE s.dienstverband_id = $1 AND s.periode_id = $2",
                &[&dv, &PERIODE_ID],
            )
            .await
            .unwrap()
            .get(0);
        let file = dir.0.join(format!("vraag-{dv}.xml"));
        std::fs::write(&file, &xml).unwrap();
        let out = crate::common::within(600, "the command ends", Command::new(BIN).arg("calc").arg(&file).output())
            .await
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let antwoord = decode_antwoord(&out.stdout, &Limits::default()).unwrap();
        let from_calc: BTreeMap<String, Decimal> =
            antwoord.mutaties.iter().map(|m| (m.loonfactor_code.clone(), m.waarde)).collect();
        let stored: BTreeMap<String, Decimal> = c
            .query(
                "SELECT loonfactor_code, waarde::text FROM rekenserver.resultaat_factor \
                 WHERE dienstverband_id = $1 AND periode_id = $2",
                &[&dv, &PERIODE_ID],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get::<_, String>(1).parse().unwrap()))
            .collect();
        assert_eq!(stored, from_calc, "employee {dv}");
        assert_eq!(stored.len(), 19);
    }
    // Idle: nothing waiting, no conversation open on either side.
    assert_eq!(count(&c, "SELECT count(*) FROM sb.endpoint").await, 0);
    assert_eq!(stop_worker(worker).await, Some(0));
}

/// The reused dialogs' idle hour passes: every answer an hour older, every idle timer
/// due. (A timer that fires within the idle time after the key's last answer is set
/// again, not obeyed: `rekenserver.dialoog_stil`.)
async fn an_hour_passes(c: &tokio_postgres::Client) {
    c.batch_execute(
        "UPDATE rekenserver.berekening_log SET beantwoord_op = beantwoord_op - interval '1 hour';
         UPDATE sb.conversation_timer SET due_at = now();",
    )
    .await
    .unwrap();
}

/// Conversation reuse (`dialog_reuse_idle_seconds`): a key's versions share its dialog
/// while it is open; a Fout ends it (the key's next version begins another); an idle
/// dialog is ended by the collector on its timer, and the calculation side follows. The
/// results are those of the dialog-per-request pipeline: latest wins, equal to the engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_conversation_reuse_a_keys_versions_share_its_dialog_until_it_is_idle() {
    let (url, mut c) = pipeline_world().await;
    // An hour idle: no dialog ends on its own during the test.
    c.execute("INSERT INTO rekenserver.instelling VALUES ('dialog_reuse_idle_seconds', 3600)", &[]).await.unwrap();
    let dir = TempDir::new("reuse");
    let worker = spawn_worker(&dir, &demo::worker_config_text(&url, 2));
    let roster = Roster::generate(12, 7, true);
    roster.load(&mut c).await.unwrap();
    check::wait_until(&c, Duration::from_secs(300), check::Progress::worked_off, |_| {}).await.unwrap();
    for e in sbworker::demo::edits::burst(&roster, 40, 7) {
        e.apply(&c).await.unwrap();
    }
    check::wait_until(&c, Duration::from_secs(300), check::Progress::worked_off, |_| {}).await.unwrap();
    let verdict = check::verify(&c, &Tables::built_in().unwrap()).await.unwrap();
    assert!(verdict.problems.is_empty(), "{:?}", verdict.problems);
    assert_eq!((verdict.latest, verdict.faulted.len()), (11, 1), "{:?}", verdict.faulted);
    assert!(verdict.faulted[0].1.contains("salary-missing"), "{:?}", verdict.faulted);
    // Reused: fewer dialogs than requests. (A key's next version takes a new dialog when
    // its Fout ended the last, or when the calculation held the dialog's group as it was
    // sent: a send never waits for the calculation.)
    let requests = count(&c, "SELECT count(*) FROM rekenserver.berekening_log").await;
    let dialogs = count(&c, "SELECT count(DISTINCT dialog_handle) FROM rekenserver.berekening_log").await;
    assert!(requests > 12 && dialogs < requests, "{dialogs} dialogs for {requests} requests");
    let fouten = count(&c, "SELECT count(*) FROM rekenserver.berekening_log WHERE uitkomst = 'fout'").await;
    let of_the_key = count(
        &c,
        &format!("SELECT count(*) FROM rekenserver.berekening_log WHERE dienstverband_id = {}", verdict.faulted[0].0),
    )
    .await;
    assert_eq!(fouten, of_the_key, "every request of the key without a salary, and none other, got a Fout");
    // The dialogs are open, idle; then their hour passes (the timers made due): the
    // collector ends each, the calculation side follows, nothing is left.
    assert!(count(&c, "SELECT count(*) FROM sb.endpoint").await > 0);
    // `sbworker status` counts them apart, as reused dialogs waiting idle, and none is the
    // oldest conversation in flight (nothing is in flight).
    let idle = count(
        &c,
        "SELECT count(*) FROM sb.endpoint WHERE is_initiator AND state = 'CO'
            AND contract = '/Rekenserver/LoonfactorBerekening/SleutelContract'",
    )
    .await;
    assert!(idle > 0);
    let status: serde_json::Value = serde_json::from_str(
        &c.query_one("SELECT sbworker.status_report(10, 60)::text", &[]).await.unwrap().get::<_, String>(0),
    )
    .unwrap();
    assert_eq!(status["conversations"]["reused_idle"], serde_json::json!(idle), "{status}");
    assert!(status["conversations"]["oldest_open"].is_null(), "{status}");
    an_hour_passes(&c).await;
    drained(&c).await;
    assert_eq!(
        count(&c, "SELECT count(*) FROM rekenserver.sleutel s JOIN sb.endpoint e ON e.handle = s.dialog_handle").await,
        0
    );
    // The next version of a key begins a new dialog, and is answered.
    let before = count(&c, "SELECT count(DISTINCT dialog_handle) FROM rekenserver.berekening_log").await;
    for e in sbworker::demo::edits::burst(&roster, 3, 8) {
        e.apply(&c).await.unwrap();
    }
    check::wait_until(&c, Duration::from_secs(300), check::Progress::worked_off, |_| {}).await.unwrap();
    assert!(count(&c, "SELECT count(DISTINCT dialog_handle) FROM rekenserver.berekening_log").await > before);
    let verdict = check::verify(&c, &Tables::built_in().unwrap()).await.unwrap();
    assert!(verdict.problems.is_empty(), "{:?}", verdict.problems);
    assert_eq!(stop_worker(worker).await, Some(0));
}

/// The calculation, after a random pause of up to 3 ms: completions come out of order.
struct Delayed {
    inner: Arc<calculation::Calculation>,
    seed: std::sync::atomic::AtomicU64,
}

impl Handler<Session> for Delayed {
    fn handle<'a>(&'a self, s: &'a mut Session, msgs: &'a [Message]) -> BoxFuture<'a, Result<Handled, HandlerError>> {
        Box::pin(async move {
            let x = self.seed.fetch_add(0x9E37_79B9_7F4A_7C15, std::sync::atomic::Ordering::Relaxed);
            let micros = (x.wrapping_mul(0xBF58_476D_1CE4_E5B9) >> 40) % 3000;
            tokio::time::sleep(Duration::from_micros(micros)).await;
            self.inner.handle(s, msgs).await
        })
    }

    fn divert_reply(&self, m: &Message, reason: &str) -> Option<(&'static str, Vec<u8>)> {
        <calculation::Calculation as Handler<Session>>::divert_reply(&self.inner, m, reason)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_latest_wins_with_300_keys_edited_10_times_and_4_readers() {
    latest_wins_race(false).await;
}

/// The same race with conversation reuse: a key's versions go on its open dialog while
/// the calculation does not hold it, on new dialogs while it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_latest_wins_with_conversation_reuse_300_keys_edited_10_times_and_4_readers() {
    latest_wins_race(true).await;
}

/// 300 keys edited ten times each by four planners, four readers whose calculations end
/// in random order: every key holds its latest version, none ever went back.
async fn latest_wins_race(reuse: bool) {
    let (url, mut c) = pipeline_world().await;
    if reuse {
        // An hour idle: the dialogs stay open until the test makes their timers due.
        c.execute("INSERT INTO rekenserver.instelling VALUES ('dialog_reuse_idle_seconds', 3600)", &[]).await.unwrap();
    }
    let keys = 300;
    let roster = Roster::generate(keys, 11, false);
    roster.load(&mut c).await.unwrap();
    let mut config = demo::worker_config(&url, 4);
    config.queues.get_mut(REKEN_QUEUE).unwrap().min_readers = 4;
    config.queues.get_mut(DATA_QUEUE).unwrap().min_readers = 2;
    let handlers = Handlers::default()
        .with(calculation::NAME, Arc::new(Delayed { inner: calculation_handler(), seed: 1.into() }))
        .with(collector::NAME, Arc::new(collector::Collector::new(Limits::default())));
    let w = InProcess::start(&url, config, handlers);
    // Four planners; every key is edited ten times, the versions racing each other.
    let mut planners = tokio::task::JoinSet::new();
    for p in 0..4 {
        let (pc, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        planners.spawn(async move {
            // A key's ten edits follow each other closely, so its versions are in
            // flight together and the readers race on them.
            for k in (p..keys).step_by(4) {
                for round in 0..10 {
                    let minutes = if round % 2 == 0 { 15 } else { -15 };
                    Edit::ShiftEnd { dienstverband_id: FIRST_ID + k as i32, pick: round, minutes }
                        .apply(&pc)
                        .await
                        .unwrap();
                }
            }
        });
    }
    while let Some(r) = planners.join_next().await {
        r.unwrap();
    }
    if reuse {
        check::wait_until(&c, Duration::from_secs(300), check::Progress::worked_off, |_| {}).await.unwrap();
        let requests = count(&c, "SELECT count(*) FROM rekenserver.berekening_log").await;
        let dialogs = count(&c, "SELECT count(DISTINCT dialog_handle) FROM rekenserver.berekening_log").await;
        eprintln!("conversation reuse: {dialogs} dialogs for {requests} requests");
        assert!(dialogs < requests, "{dialogs} dialogs for {requests} requests: none was reused");
        // Their hour passes: the collector ends each idle dialog, the calculation follows.
        an_hour_passes(&c).await;
    }
    drained(&c).await;
    if reuse {
        assert_eq!(count(&c, "SELECT count(*) FROM sb.endpoint").await, 0, "every reused dialog ended");
    }
    let metrics = w.finish().await;
    let verdict = check::verify(&c, &Tables::built_in().unwrap()).await.unwrap();
    assert!(verdict.problems.is_empty(), "{:?}", &verdict.problems[..verdict.problems.len().min(5)]);
    assert_eq!((verdict.keys, verdict.latest), (keys, keys));
    // Every key reached version 11 (the import, then ten edits), and the log of stored
    // versions never went back for any key.
    assert_eq!(count(&c, "SELECT count(*) FROM rekenserver.sleutel WHERE versie = 11").await, keys as i64);
    assert_eq!(count(&c, "SELECT count(*) FROM rekenserver.resultaat WHERE versie = 11").await, keys as i64);
    let backwards = count(
        &c,
        "SELECT count(*) FROM (SELECT versie, lag(versie) OVER (PARTITION BY dienstverband_id, periode_id ORDER BY id) v0 \
         FROM rekenserver.resultaat_historie) h WHERE v0 >= versie",
    )
    .await;
    assert_eq!(backwards, 0);
    let superseded = crate::common::calc::metric_in(
        &metrics,
        &format!("sbworker_requests_superseded_total{{queue=\"{REKEN_QUEUE}\"}}"),
    );
    let stored = count(&c, "SELECT count(*) FROM rekenserver.resultaat_historie").await;
    let older =
        count(&c, "SELECT count(*) FROM rekenserver.berekening_log WHERE uitkomst IN ('vervangen', 'verouderd')").await;
    eprintln!("latest wins: {stored} results stored, {superseded} requests answered as superseded, {older} not stored");
    if !reuse {
        // The race did happen: some versions were overtaken by newer ones. (With reuse a
        // key's versions mostly follow each other on its dialog, in order.)
        assert!(older > 0 && superseded > 0.0, "no version was overtaken: the test did not race");
    }
}

#[tokio::test]
async fn a_bulk_import_sends_one_vraag_per_key() {
    let (_url, mut c) = pipeline_world().await;
    // One transaction, three statements (employees, duties, blocks), each touching
    // every key: one Vraag per employee.
    Roster::generate(1000, 3, false).load(&mut c).await.unwrap();
    assert_eq!(count(&c, "SELECT count(*) FROM rekenserver.berekening_log").await, 1000);
    assert_eq!(count(&c, &format!("SELECT count(*) FROM sb.message WHERE queue = '{REKEN_QUEUE}'")).await, 1000);
    assert_eq!(
        count(&c, "SELECT count(DISTINCT (dienstverband_id, periode_id)) FROM rekenserver.berekening_log").await,
        1000
    );
    assert_eq!(count(&c, "SELECT count(*) FROM rekenserver.te_berekenen").await, 0);
    // Thousands of rows of five employees changed in one transaction, statement after
    // statement: five more Vraags, each with the key's next version.
    let blocks = count(
        &c,
        &format!("SELECT count(*) FROM rooster.tijdblok t JOIN rooster.dienst d ON d.id = t.dienst_id WHERE d.dienstverband_id < {}", FIRST_ID + 5),
    )
    .await;
    c.batch_execute(&format!(
        "BEGIN;
         UPDATE rooster.tijdblok t SET is_ziek = NOT t.is_ziek FROM rooster.dienst d WHERE d.id = t.dienst_id AND d.dienstverband_id < {0};
         UPDATE rooster.tijdblok t SET is_ziek = NOT t.is_ziek FROM rooster.dienst d WHERE d.id = t.dienst_id AND d.dienstverband_id < {0};
         UPDATE rooster.dienstverband SET salaris = salaris + 1 WHERE id < {0};
         COMMIT;",
        FIRST_ID + 5
    ))
    .await
    .unwrap();
    assert!(blocks > 50, "{blocks}");
    assert_eq!(count(&c, "SELECT count(*) FROM rekenserver.berekening_log").await, 1005);
    assert_eq!(count(&c, "SELECT count(*) FROM rekenserver.berekening_log WHERE versie = 2").await, 5);
    // A transaction that rolls back sends nothing.
    c.batch_execute(&format!("BEGIN; UPDATE rooster.dienstverband SET salaris = 1 WHERE id = {FIRST_ID}; ROLLBACK;"))
        .await
        .unwrap();
    assert_eq!(count(&c, "SELECT count(*) FROM rekenserver.berekening_log").await, 1005);
}

/// `sbworker demo ARGS`, which must succeed within 10 minutes: its output.
async fn demo(args: &[&str]) -> String {
    let out = crate::common::within(600, "the command ends", Command::new(BIN).arg("demo").args(args).output())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[tokio::test]
async fn sbworker_demo_runs_and_checks_itself() {
    let stdout = demo(&["--size", "20"]).await;
    assert!(stdout.contains("OK: every key holds the result of its latest roster version"), "{stdout}");
    assert!(stdout.contains("roster import"), "{stdout}");
}

#[tokio::test]
async fn sbworker_demo_runs_on_the_sql_server_transport_through_the_emulator() {
    let stdout = demo(&["--size", "15", "--mssql"]).await;
    assert!(stdout.contains("workers on the SQL Server transport through the Service Broker emulator"), "{stdout}");
    assert!(stdout.contains("OK: every key holds the result of its latest roster version"), "{stdout}");
}

/// Conversation reuse on the SQL Server transport: the collector over TDS ends a key's
/// dialog on its idle timer (`Rekenserver.dialoog_stil`), and a Fout on a reused dialog
/// answers its oldest open request (`Rekenserver.noteer_fout @eerste = 1`); the demo
/// checks every key's latest result and that no conversation is left open.
#[tokio::test]
async fn sbworker_demo_reuses_dialogs_on_the_sql_server_transport_and_ends_them_idle() {
    let stdout = demo(&["--size", "15", "--mssql", "--dialog-reuse-idle-seconds", "1"]).await;
    assert!(stdout.contains("OK: every key holds the result of its latest roster version"), "{stdout}");
    assert!(stdout.contains("no conversation left open"), "{stdout}");
    let line = stdout.lines().find(|l| l.contains("conversation reuse:")).expect("the reuse line");
    let numbers: Vec<i64> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    assert!(numbers.len() >= 2 && numbers[1] < numbers[0], "no dialog carried two requests: {line}");
}

/// Upgrade in place: `sbworker install` run again over a live database, while planners
/// edit and the worker runs, replaces every function in one transaction (the same
/// version's scripts: the paths that only an older install takes, a column added or a
/// function dropped, are not run here). No message
/// fails by it (no counted failure, no dead letter), and every key ends on its latest
/// version's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_installing_again_over_running_workers_fails_no_message() {
    installing_again_over_running_workers(false).await;
}

/// The same with conversation reuse on (a second idle: keys' dialogs are reused and
/// ended while the installs replace the functions that reuse and end them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_with_conversation_reuse_installing_again_over_running_workers_fails_no_message() {
    installing_again_over_running_workers(true).await;
}

async fn installing_again_over_running_workers(reuse: bool) {
    let (url, mut c) = pipeline_world().await;
    if reuse {
        c.execute("INSERT INTO rekenserver.instelling VALUES ('dialog_reuse_idle_seconds', 1)", &[]).await.unwrap();
    }
    let dir = TempDir::new("upgrade");
    let config = dir.0.join("worker.toml");
    std::fs::write(&config, demo::worker_config_text(&url, 2)).unwrap();
    let log = dir.0.join("worker.log");
    let worker = Command::new(BIN)
        .args(["run", "--config"])
        .arg(&config)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let roster = Roster::generate(12, 8, false);
    roster.load(&mut c).await.unwrap();
    let edits = sbworker::demo::edits::burst(&roster, 300, 8);
    let planner = {
        let url = url.clone();
        tokio::spawn(async move {
            let (p, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(conn);
            for e in edits {
                e.apply(&p).await.unwrap();
            }
        })
    };
    // Installs one after another for as long as the planner edits (and the worker
    // calculates); at least one must have run in the middle of it.
    let mut during = 0;
    while !planner.is_finished() {
        let out = Command::new(BIN).args(["install", "--postgres", &url, "--roster"]).output().await.unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        during += 1;
    }
    assert!(during >= 1, "no install ran while the planner edited");
    planner.await.unwrap();
    drained(&c).await;
    let verdict = check::verify(&c, &Tables::built_in().unwrap()).await.unwrap();
    assert!(verdict.problems.is_empty(), "{:?}", verdict.problems);
    assert_eq!(verdict.latest, verdict.keys);
    assert_eq!(count(&c, "SELECT count(*) FROM sbworker.dead_letter").await, 0);
    assert_eq!(stop_worker(worker).await, Some(0));
    let text = std::fs::read_to_string(&log).unwrap();
    let counted: Vec<&str> =
        text.lines().filter(|l| l.contains("group rolled back") && !l.contains("transient=true")).collect();
    assert!(counted.is_empty(), "failures counted against messages during the installs: {counted:#?}");
    if reuse {
        let requests = count(&c, "SELECT count(*) FROM rekenserver.berekening_log").await;
        let dialogs = count(&c, "SELECT count(DISTINCT dialog_handle) FROM rekenserver.berekening_log").await;
        assert!(dialogs < requests, "{dialogs} dialogs for {requests} requests: none was reused");
    }
}

/// Installing again over a current install waits for no lock the running system holds.
/// Open while it runs, each in its transaction: a planner's edit (the roster's tables,
/// the keys' notes), a worker's receive (its group held FOR UPDATE), a sweep's read of
/// the stale keys and its send (the key's row held FOR UPDATE, a dialog begun), the
/// worker's bookkeeping (an attempt, a dead letter through its trigger, a version
/// claimed, a heartbeat) with an operator's read of the broker's views, and a writer's
/// lock (ROW EXCLUSIVE) on every table of the four schemas. `sbworker install --roster`
/// finishes all the same (it waits at most 5 s for a lock, eight tries: a lock it waited
/// for would fail it; before, it did), and each of them commits after it, the planner's
/// edit sending its Vraag through the triggers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installing_again_waits_for_no_lock_of_planners_workers_and_housekeeping() {
    let (url, mut c) = pipeline_world().await;
    // Two keys, their Vraags waiting on the calculation queue (no worker runs).
    Roster::generate(2, 15, false).load(&mut c).await.unwrap();
    let open = || async {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        client.batch_execute("BEGIN").await.unwrap();
        client
    };
    let planner = open().await;
    lengthen_first_block(&planner, FIRST_ID, 15).await;
    planner
        .batch_execute(&format!(
            "UPDATE rooster.dienstverband SET salaris = salaris WHERE id = {FIRST_ID};
             WITH d AS (INSERT INTO rooster.dienst (dienstverband_id, datum) VALUES ({FIRST_ID}, DATE '2026-04-30')
                        RETURNING id)
             INSERT INTO rooster.tijdblok (dienst_id, begin_tijd, eind_tijd, dienst_type)
             SELECT d.id, TIME '07:00', TIME '15:00', (SELECT min(dienst_type) FROM rooster.tijdblok) FROM d;"
        ))
        .await
        .unwrap();
    let mut worker = Session::open(&url).await.unwrap();
    worker.begin().await.unwrap();
    assert!(!worker.receive(REKEN_QUEUE, 10, None, Duration::ZERO).await.unwrap().is_empty());
    let sweep = open().await;
    sweep
        .batch_execute(&format!(
            "SELECT count(*) FROM rekenserver.verouderde_sleutel;
             SELECT 1 FROM rekenserver.sleutel WHERE dienstverband_id = {0} FOR UPDATE;
             SELECT rekenserver.stuur_vraag({0}, {PERIODE_ID});
             INSERT INTO rekenserver.run_log (stap) VALUES ('run');",
            FIRST_ID + 1
        ))
        .await
        .unwrap();
    let bookkeeping = open().await;
    bookkeeping
        .batch_execute(&format!(
            "INSERT INTO sbworker.message_attempt (conversation_handle, message_sequence_number, queue, attempts)
                 VALUES (gen_random_uuid(), 1, '{REKEN_QUEUE}', 1);
             INSERT INTO sbworker.dead_letter (queue, service_name, service_contract_name, conversation_group_id,
                                               conversation_handle, message_sequence_number, message_type_name,
                                               attempts, reason)
                 VALUES ('{REKEN_QUEUE}', 's', 'c', gen_random_uuid(), gen_random_uuid(), 1, 't', 5, 'test');
             INSERT INTO sbworker.answered_version (dienstverband_id, periode_id, versie) VALUES (-1, -1, 1);
             SELECT sbworker.heartbeat(gen_random_uuid(), 'host', 1, 'test', 0, '{{}}', 1000, {});
             SELECT * FROM sb.queue_depth;
             SELECT * FROM sb.endpoints_by_state;
             SELECT * FROM sb.disabled_queues;",
            sbworker::contract::CONTRACT_VERSIE
        ))
        .await
        .unwrap();
    let writer = open().await;
    let tables: Vec<String> = writer
        .query(
            "SELECT c.oid::regclass::text FROM pg_class c
              WHERE c.relnamespace::regnamespace::text IN ('sb', 'sbworker', 'rekenserver', 'rooster')
                AND c.relkind = 'r' ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    writer.batch_execute(&format!("LOCK TABLE {} IN ROW EXCLUSIVE MODE", tables.join(", "))).await.unwrap();

    let out = crate::common::within(
        60,
        "the install over open transactions",
        Command::new(BIN).args(["install", "--postgres", &url, "--roster"]).output(),
    )
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    for client in [&bookkeeping, &sweep, &writer] {
        client.batch_execute("COMMIT").await.unwrap();
    }
    worker.commit().await.unwrap();
    let sent_before = count(&c, "SELECT count(*) FROM rekenserver.berekening_log").await;
    planner.batch_execute("COMMIT").await.unwrap();
    let sent = count(&c, "SELECT count(*) FROM rekenserver.berekening_log").await;
    assert_eq!(sent, sent_before + 1, "the planner's commit sent its key's Vraag");
}

/// The SQL builder (what the roster trigger sends) carries a block's leave (`Verlof`) and
/// the stored results of the periods that begin in the 12 months before the period
/// (`Historie`), exactly as the demo's second builder reads them from the rows; and the
/// engine turns them into ORT over statutory vacation (art. 12.1.2 lid 2), by hand: March
/// 2026 stored 140 worked hours with 20 at 47%, so the average is 20 x 47 / 140 =
/// 6.7142857%; 8 hours of statutory vacation at 25.00 give 8 x 25.00 x 6.7142857% =
/// 13.43, with the short-history warning (31 of the 182 days since 1 October 2025). A
/// period that began more than 12 months before is left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sql_builder_adds_leave_and_the_stored_history_as_the_oracle_reads_them() {
    use sbworker::contract::{Verlof, decode_vraag};
    let (_url, c) = pipeline_world().await;
    let dv = 9001;
    c.batch_execute(&format!(
        "INSERT INTO rooster.cao (id, code, is_vier_weken, naam, werkweek_uren)
             VALUES (100, 'ZKH', false, 'CAO Ziekenhuizen', 36) ON CONFLICT DO NOTHING;
         INSERT INTO rooster.periode (id, is_vier_weken, begin_datum, eind_datum) VALUES
             (202503, false, '2025-03-01', '2025-03-31'), (202603, false, '2026-03-01', '2026-03-31'),
             ({PERIODE_ID}, false, '2026-04-01', '2026-04-30') ON CONFLICT DO NOTHING;
         INSERT INTO rooster.dienst_type (code, omschrijving, telt_mee_in_gewerkte_uren)
             VALUES ('VAK', 'vakantie', false), ('D', 'dagdienst', true) ON CONFLICT DO NOTHING;
         INSERT INTO rooster.dienstverband (id, cao_id, dagen_per_week, datum_in_dienst, parttime_uren, salaris,
                                            soort, functiegroep)
             VALUES ({dv}, 100, 5, '2015-01-01', 36, 3900, 'FT', 45);
         -- Results stored earlier for March 2026 and March 2025.
         INSERT INTO rekenserver.resultaat (dienstverband_id, periode_id, versie, vraag_id, dialog_handle)
             VALUES ({dv}, 202603, 1, gen_random_uuid(), gen_random_uuid()),
                    ({dv}, 202503, 1, gen_random_uuid(), gen_random_uuid());
         INSERT INTO rekenserver.resultaat_factor (dienstverband_id, periode_id, kaart_soort, loonfactor_code, waarde)
             VALUES ({dv}, 202603, 5, '100', 140), ({dv}, 202603, 5, '212', 20), ({dv}, 202603, 5, '230', 0),
                    ({dv}, 202503, 5, '100', 999);
         -- The roster: a day shift and a day of statutory vacation in April.
         WITH d AS (INSERT INTO rooster.dienst (dienstverband_id, datum) VALUES ({dv}, '2026-04-01'), ({dv}, '2026-04-02')
                    RETURNING id, datum)
         INSERT INTO rooster.tijdblok (dienst_id, begin_tijd, eind_tijd, dienst_type, verlof)
             SELECT id, '08:00', '16:00', CASE WHEN datum = '2026-04-01' THEN 'D' ELSE 'VAK' END,
                    CASE WHEN datum = '2026-04-02' THEN 'Wettelijk' END FROM d;"
    ))
    .await
    .unwrap();
    // The table refuses a leave block that is sick.
    let e = c
        .batch_execute(&format!(
            "UPDATE rooster.tijdblok SET is_ziek = true WHERE verlof IS NOT NULL
               AND dienst_id IN (SELECT id FROM rooster.dienst WHERE dienstverband_id = {dv})"
        ))
        .await
        .unwrap_err();
    assert_eq!(e.as_db_error().and_then(|d| d.constraint()), Some("tijdblok_verlof"), "{e:?}");
    let row = c
        .query_one(
            "SELECT rekenserver.vraag($1, $2, s.versie, gen_random_uuid())::text, s.versie FROM rekenserver.sleutel s
              WHERE s.dienstverband_id = $1 AND s.periode_id = $2",
            &[&dv, &PERIODE_ID],
        )
        .await
        .unwrap();
    let xml: String = row.get(0);
    crate::common::xmllint(&crate::common::xsd("LoonfactorBerekeningVraag"), xml.as_bytes()).unwrap();
    let sent = decode_vraag(xml.as_bytes(), &Limits::default()).unwrap();
    let leave: Vec<Option<Verlof>> =
        sent.diensten.dienst.iter().flat_map(|d| d.tijdblokken.iter().map(|b| b.verlof)).collect();
    assert_eq!(leave, [None, Some(Verlof::Wettelijk)]);
    assert_eq!(sent.historie.len(), 1, "March 2025 is more than 12 months back: {:?}", sent.historie);
    assert_eq!(sent.historie[0].id, 202603);
    let factors: Vec<(String, Decimal)> = sent.historie[0].factoren.iter().map(|(c, v)| (c.to_string(), *v)).collect();
    assert_eq!(
        factors,
        [("100".into(), Decimal::from(140)), ("212".into(), Decimal::from(20)), ("230".into(), Decimal::ZERO)]
    );
    // The second builder agrees.
    let oracle = sbworker::demo::oracle::vraag(&c, dv, PERIODE_ID, row.get(1), sent.id, sent.timestamp.clone())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(oracle, sent);
    // And the engine pays ORT over the vacation day.
    let calc = sbworker::engine::calculate(&sent, &Tables::built_in().unwrap(), false).unwrap();
    let got: BTreeMap<String, String> =
        calc.antwoord.mutaties.iter().map(|m| (m.loonfactor_code.clone(), m.waarde.to_string())).collect();
    assert_eq!((got["100"].as_str(), got["130"].as_str(), got["133"].as_str()), ("8.00", "8.00", "8.00"));
    assert_eq!(got["240"], "13.43");
    let codes: Vec<&str> = calc.antwoord.waarschuwingen.iter().map(|w| w.code.as_str()).collect();
    assert_eq!(codes, ["ort-vakantie-korte-historie"]);
}

/// N1 of the fourth SQL Server review, on PostgreSQL: workers first. `sbworker install
/// --roster` replaces the sender, which writes this release's contract version; while a
/// live calculation worker reads an older one (or records none: a release before the
/// column) it refuses, naming the worker, unless told to go on. A worker of this
/// release, or one whose beat is old, does not stop it.
#[tokio::test]
async fn the_install_refuses_to_replace_the_sender_while_an_older_worker_is_live() {
    let (url, c) = fresh_roster_db().await;
    let install = |extra: &'static [&'static str]| {
        let url = url.clone();
        async move {
            Command::new(BIN).args(["install", "--postgres", &url, "--roster"]).args(extra).output().await.unwrap()
        }
    };
    let beat = |host: &str, contract: Option<i32>, seconds_ago: i32| {
        format!(
            "INSERT INTO sbworker.worker_instance (instance, host, pid, version, started_at, beat_at, interval_ms, contract_versie)
             VALUES (gen_random_uuid(), '{host}', 42, '0.0.9', clock_timestamp(),
                     clock_timestamp() - make_interval(secs => {seconds_ago}), 10000, {})",
            contract.map_or("NULL".to_owned(), |v| v.to_string())
        )
    };
    let now = sbworker::contract::CONTRACT_VERSIE as i32;
    // This release's worker, and an old one that has not beaten for a minute: no refusal.
    c.batch_execute(&format!("{}; {}", beat("nieuw", Some(now), 1), beat("weg", None, 60))).await.unwrap();
    let out = install(&[]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A live worker of a release before the recorded version: refused, saying why.
    c.batch_execute(&beat("oud", None, 1)).await.unwrap();
    let out = install(&[]).await;
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("1 live calculation worker(s) read an older Vraag contract"), "{said}");
    assert!(
        said.contains("oud pid 42 (sbworker 0.0.9, contract before 2)") && said.contains("--allow-older-workers"),
        "{said}"
    );
    // Told to go on, it does.
    let out = install(&["--allow-older-workers"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Workers first: this release's worker against an install of the release before, whose
/// collector store takes no warnings, whose heartbeat no contract version and whose
/// RECEIVE no waiting mark (simulated by putting functions of the older shapes in their
/// place). The worker receives, stores every result and beats all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_of_this_release_works_against_the_install_before() {
    let (url, mut c) = fresh_roster_db().await;
    c.batch_execute(
        "ALTER FUNCTION rekenserver.sla_antwoord_op(uuid, uuid, int, int, bigint, boolean, int[], text[], numeric[],
                                                 text, jsonb) RENAME TO sla_antwoord_op_nu;
         CREATE FUNCTION rekenserver.sla_antwoord_op(p_handle uuid, p_vraag_id uuid, p_dv int, p_periode int,
             p_versie bigint, p_vervangen boolean, p_kaart_soorten int[], p_codes text[], p_waarden numeric[],
             p_rekenversie text DEFAULT NULL)
         RETURNS text LANGUAGE sql AS $$
             SELECT rekenserver.sla_antwoord_op_nu(p_handle, p_vraag_id, p_dv, p_periode, p_versie, p_vervangen,
                                                   p_kaart_soorten, p_codes, p_waarden, p_rekenversie, NULL) $$;
         ALTER FUNCTION sbworker.heartbeat(uuid, text, int, text, bigint, jsonb, int, int) RENAME TO heartbeat_nu;
         CREATE FUNCTION sbworker.heartbeat(p_instance uuid, p_host text, p_pid int, p_version text,
             p_started_unix bigint, p_queues jsonb, p_interval_ms int)
         RETURNS void LANGUAGE sql AS $$
             SELECT sbworker.heartbeat_nu(p_instance, p_host, p_pid, p_version, p_started_unix, p_queues,
                                          p_interval_ms, NULL) $$;
         ALTER FUNCTION sb.receive_marking(text, int, uuid, uuid, boolean, smallint) RENAME TO receive_marking_nu;
         CREATE OR REPLACE FUNCTION sb.receive(p_queue text, p_max int DEFAULT 1000000, p_group uuid DEFAULT NULL,
             p_handle uuid DEFAULT NULL, p_wake boolean DEFAULT true)
         RETURNS TABLE (message_id bigint, conversation_group_id uuid, conversation_handle uuid,
                        message_sequence_number bigint, message_type_name text, message_body bytea,
                        service_name text, service_contract_name text)
         LANGUAGE sql AS $$
             SELECT m.message_id, m.conversation_group_id, m.conversation_handle, m.message_sequence_number,
                    m.message_type_name, m.message_body, m.service_name, m.service_contract_name
               FROM sb.receive_marking_nu(p_queue, p_max, p_group, p_handle, p_wake, 0::smallint) m $$;",
    )
    .await
    .unwrap();
    let dir = TempDir::new("install-before");
    let worker = spawn_worker(&dir, &demo::worker_config_text(&url, 2));
    Roster::generate(3, 19, false).load(&mut c).await.unwrap();
    drained(&c).await;
    let verdict = check::verify(&c, &Tables::built_in().unwrap()).await.unwrap();
    assert!(verdict.problems.is_empty(), "{:?}", verdict.problems);
    assert_eq!(verdict.latest, verdict.keys);
    crate::common::calc::wait_until("the worker's heartbeat is recorded", || async {
        c.query_one("SELECT count(*) FROM sbworker.worker_instance", &[]).await.unwrap().get::<_, i64>(0) == 1
    })
    .await;
    // The older heartbeat has no contract version: it went in the version text, so the
    // next step of the upgrade, this release's install, does not take this (upgraded)
    // worker for an older one.
    let version: String = c.query_one("SELECT version FROM sbworker.worker_instance", &[]).await.unwrap().get(0);
    assert!(version.ends_with(&format!(" contract {}", sbworker::contract::CONTRACT_VERSIE)), "{version}");
    let out = Command::new(BIN).args(["install", "--postgres", &url, "--roster"]).output().await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stop_worker(worker).await, Some(0));
}
