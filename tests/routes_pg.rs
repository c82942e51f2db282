//! The split install on PostgreSQL: the roster side and calculation sides in databases of
//! their own, on PostgreSQL servers of their own, joined by routes that logical
//! replication carries (`broker/postgres/008_routes.sql`, `sbworker link`).

use std::time::Duration;

use sbworker::broker::postgres::{install_side, route};
use sbworker::pg_cluster::Cluster;
use sbworker::transport::Side;
use tokio_postgres::Client;

use crate::common::calc::wait_until;
use crate::common::pg::count_rows as count;

const VRAAG: &str = "/Rekenserver/LoonfactorBerekening/Vraag";
const ANTWOORD: &str = "/Rekenserver/LoonfactorBerekening/Antwoord";
const END_DIALOG: &str = "http://schemas.microsoft.com/SQL/ServiceBroker/EndDialog";
const DATA: &str = "/Rekenserver/LoonfactorBerekening/DataService";
const REKEN: &str = "/Rekenserver/LoonfactorBerekening/RekenService";
const CONTRACT: &str = "/Rekenserver/LoonfactorBerekening/DataContract";

/// A server of its own for one side: logical replication on. Commits wait for their WAL
/// (synchronous_commit on, as in production): the tests stop servers at once, and what
/// a test received in a commit that was not yet written would come back.
pub async fn server() -> Cluster {
    tokio::task::spawn_blocking(|| {
        Cluster::start(&["wal_level=logical", "max_replication_slots=10", "max_wal_senders=10"])
    })
    .await
    .unwrap()
    .expect("a PostgreSQL cluster with logical replication")
}

pub async fn client(url: &str) -> Client {
    let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    c
}

/// A database on `cluster` with the broker installed as `side`.
pub async fn side_db(cluster: &Cluster, name: &str, side: Side, roster: bool) -> String {
    let url = cluster.create_database(name).await.unwrap();
    install_side(&url, roster, Some(side)).await.unwrap();
    url
}

/// What `sbworker status` reports of the database at `url` needing attention, and its
/// routes.
async fn status(url: &str) -> (Vec<String>, sbworker::ops::status::Routes) {
    use sbworker::config::{BrokerConfig, BrokerKind};
    use sbworker::ops::Backend as _;
    use sbworker::ops::status::{Status, Thresholds, attention};
    let broker = BrokerConfig { kind: BrokerKind::Postgres, connection: url.to_owned() };
    let mut db = sbworker::broker::Database::connect(&broker, None).await.unwrap();
    let s: Status = serde_json::from_str(&db.status_json(60, 60).await.unwrap()).unwrap();
    let t = Thresholds { worker_silent_seconds: None, stale_minutes: 60 };
    (attention(&s, t), s.routes.expect("routes in the status"))
}

/// `sbworker selftest --postgres URL`: (exit code, stdout).
async fn selftest(url: &str) -> (Option<i32>, String) {
    let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_sbworker"))
        .args(["selftest", "--postgres", url])
        .env("NO_COLOR", "1")
        .output()
        .await
        .unwrap();
    (o.status.code(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

/// The messages waiting on `queue`, received and committed: (handle, type, body).
async fn receive_all(c: &Client, queue: &str) -> Vec<(uuid::Uuid, String, Vec<u8>)> {
    c.query("SELECT conversation_handle, message_type_name, coalesce(message_body, '') FROM sb.receive($1)", &[&queue])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// Receives from `queue` (committing each) until `n` messages came, within a minute.
async fn receive_until(c: &Client, queue: &str, n: usize) -> Vec<(uuid::Uuid, String, Vec<u8>)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut got = Vec::new();
    while got.len() < n {
        assert!(tokio::time::Instant::now() < deadline, "{} of {n} messages on {queue} within a minute", got.len());
        let more = receive_all(c, queue).await;
        if more.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        got.extend(more);
    }
    got
}

/// A dialog begun on the roster side, a Vraag sent: it arrives on the calculation side's
/// queue, in a new endpoint there; the Antwoord sent back and the END reach the roster
/// side; the roster side's END closes the conversation on both sides, and no row of
/// either sb.transmission is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dialog_crosses_to_another_server_and_back_and_ends_on_both_sides() {
    let (a, b) = (server().await, server().await);
    let roster = side_db(&a, "roster", Side::Roster, false).await;
    let calc = side_db(&b, "calc", Side::Calc, false).await;
    let link = route::link(&roster, &calc).await.unwrap();
    assert!(link.to_calculation.starts_with("reken_") && link.back.starts_with("data_"), "{link:?}");
    // Linking again changes nothing.
    assert_eq!(route::link(&roster, &calc).await.unwrap(), link);
    let (r, c) = (client(&roster).await, client(&calc).await);
    // Each side has its own service only.
    assert_eq!(count(&r, "SELECT count(*) FROM sb.service WHERE name LIKE '%RekenService'").await, 0);
    assert_eq!(count(&c, "SELECT count(*) FROM sb.service WHERE name LIKE '%DataService'").await, 0);

    let h: uuid::Uuid =
        r.query_one("SELECT sb.begin_dialog($1, $2, $3, NULL, 600)", &[&DATA, &REKEN, &CONTRACT]).await.unwrap().get(0);
    r.execute("SELECT sb.send($1, $2, $3)", &[&h, &VRAAG, &b"<Vraag n=\"1\"/>".as_slice()]).await.unwrap();
    r.execute("SELECT sb.send($1, $2, $3)", &[&h, &VRAAG, &b"<Vraag n=\"2\"/>".as_slice()]).await.unwrap();
    assert_eq!(count(&r, "SELECT count(*) FROM sb.transmission").await, 0, "nothing stays in transit at the sender");

    let got = receive_until(&c, "loonfactorberekening_reken", 2).await;
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].2, b"<Vraag n=\"1\"/>", "in order");
    assert_eq!(got[1].2, b"<Vraag n=\"2\"/>", "in order");
    let far = got[0].0;
    let row = c.query_one("SELECT state, route FROM sb.endpoint WHERE handle = $1", &[&far]).await.unwrap();
    assert_eq!((row.get::<_, String>(0), row.get::<_, Option<String>>(1)), ("CO".into(), Some(link.back.clone())));
    c.execute("SELECT sb.send($1, $2, $3)", &[&far, &ANTWOORD, &b"<Antwoord/>".as_slice()]).await.unwrap();
    c.execute("SELECT sb.end_conversation($1)", &[&far]).await.unwrap();

    let back = receive_until(&r, "loonfactorberekening_data", 2).await;
    let types: Vec<&str> = back.iter().map(|m| m.1.as_str()).collect();
    assert_eq!(types, [ANTWOORD, END_DIALOG]);
    assert!(back.iter().all(|m| m.0 == h));
    r.execute("SELECT sb.end_conversation($1)", &[&h]).await.unwrap();
    assert_eq!(count(&r, "SELECT count(*) FROM sb.endpoint").await, 0, "the roster side's endpoint is gone");
    wait_until("the calculation side's endpoint is gone", || {
        let c = &c;
        async move { count(c, "SELECT count(*) FROM sb.endpoint").await == 0 }
    })
    .await;
    assert_eq!(count(&c, "SELECT count(*) FROM sb.transmission").await, 0);
    assert_eq!(count(&c, "SELECT count(*) FROM sb.transmission_error").await, 0);
}

/// Sends `dialogs` dialogs of `per` Vraag messages each on the roster side, one
/// transaction per dialog, their bodies `<Vraag d="D" n="N"/>`.
async fn burst(r: &Client, first: i32, dialogs: i32, per: i32) {
    for d in first..first + dialogs {
        r.batch_execute(&format!(
            "DO $$ DECLARE h uuid; BEGIN
                 h := sb.begin_dialog('{DATA}', '{REKEN}', '{CONTRACT}', NULL, 3600);
                 FOR n IN 1..{per} LOOP
                     PERFORM sb.send(h, '{VRAAG}', convert_to(format('<Vraag d=\"%s\" n=\"%s\"/>', {d}, n), 'UTF8'));
                 END LOOP;
             END $$"
        ))
        .await
        .unwrap();
    }
}

/// (dialog, n) of a burst's message body.
fn numbers(body: &[u8]) -> (i32, i32) {
    let text = std::str::from_utf8(body).unwrap();
    let field = |name: &str| -> i32 {
        let at = text.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
        text[at..].split('"').next().unwrap().parse().unwrap()
    };
    (field("d"), field("n"))
}

/// Every dialog's messages once each and in order, on one handle: the dialogs seen.
fn each_once_in_order(got: &[(uuid::Uuid, String, Vec<u8>)], per: i32) -> std::collections::BTreeSet<i32> {
    let mut by_dialog: std::collections::BTreeMap<i32, (uuid::Uuid, Vec<i32>)> = Default::default();
    for (handle, _, body) in got {
        let (d, n) = numbers(body);
        let entry = by_dialog.entry(d).or_insert((*handle, Vec::new()));
        assert_eq!(entry.0, *handle, "dialog {d} arrived on one endpoint");
        entry.1.push(n);
    }
    for (d, (_, ns)) in &by_dialog {
        assert_eq!(*ns, (1..=per).collect::<Vec<_>>(), "dialog {d}: each message once, in order");
    }
    by_dialog.keys().copied().collect()
}

/// Two calculation servers linked to one roster database: new dialogs take them in
/// turn. One server stops in the middle of a burst: its messages wait (the roster side
/// shows its route not read and behind), the other's go on arriving, and once it is back
/// every message arrives, each once, in order per dialog, nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dialogs_take_the_calculation_servers_in_turn_and_wait_out_one_that_is_down() {
    let (a, b, c) = (server().await, server().await, server().await);
    let roster = side_db(&a, "roster", Side::Roster, false).await;
    let calc_b = side_db(&b, "calc", Side::Calc, false).await;
    let calc_c = side_db(&c, "calc", Side::Calc, false).await;
    let to_b = route::link(&roster, &calc_b).await.unwrap().to_calculation;
    route::link(&roster, &calc_c).await.unwrap();
    let r = client(&roster).await;
    burst(&r, 0, 10, 5).await;
    let cb = client(&calc_b).await;
    let mut on_b = receive_until(&cb, "loonfactorberekening_reken", 25).await;
    drop(cb);
    // The far side confirms what it applied a moment later: waited for, so that the route
    // holds only what is sent while it is down.
    let applied: String = r.query_one("SELECT pg_current_wal_lsn()::text", &[]).await.unwrap().get(0);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !r
        .query_one(
            "SELECT coalesce(bool_and(confirmed_flush_lsn >= $1::text::pg_lsn), false) FROM pg_replication_slots
              WHERE slot_name = 'sb_route_' || $2",
            &[&applied, &to_b],
        )
        .await
        .unwrap()
        .get::<_, bool>(0)
    {
        assert!(std::time::Instant::now() < deadline, "the far side never confirmed what it applied");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.stop_immediate().unwrap();
    burst(&r, 10, 10, 5).await;
    let cc = client(&calc_c).await;
    let on_c = receive_until(&cc, "loonfactorberekening_reken", 50).await;
    // The operator sees the route that is not read, and how far behind it is.
    let (needs, routes) = status(&roster).await;
    let down = routes.out.iter().find(|o| o.route == to_b).unwrap();
    assert!(down.subscribed && !down.reading && down.behind_bytes.unwrap() > 0, "{down:?}");
    // The messages it holds, counted from its slot: the five dialogs of five messages
    // each that took the route while its server was down.
    assert_eq!((down.waiting, down.waiting_counted_all), (Some(25), Some(true)), "{down:?}");
    assert!(down.oldest_waiting_seconds.is_some_and(|s| (0.0..120.0).contains(&s)), "{down:?}");
    assert!(routes.out.iter().filter(|o| o.route != to_b).all(|o| o.reading), "{routes:?}");
    assert!(
        needs.iter().any(|l| l.contains(&format!("route {to_b} to"))
            && l.contains("does not read it")
            && l.contains("25 messages wait, the oldest for")),
        "{needs:?}"
    );
    assert_eq!(routes.incoming.len(), 2, "a route back from each calculation database: {routes:?}");
    let (code, text) = selftest(&roster).await;
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("routes") && text.contains("(not read)"), "{text}");
    b.start_again().unwrap();
    let cb = client(&calc_b).await;
    on_b.extend(receive_until(&cb, "loonfactorberekening_reken", 25).await);
    let (seen_b, seen_c) = (each_once_in_order(&on_b, 5), each_once_in_order(&on_c, 5));
    assert_eq!((seen_b.len(), seen_c.len()), (10, 10), "in turn: {seen_b:?} {seen_c:?}");
    assert!(seen_b.is_disjoint(&seen_c));
    // Nothing more comes (no duplicate after the restart).
    assert!(receive_all(&cb, "loonfactorberekening_reken").await.is_empty());
}

/// A route whose slot lost its WAL (a far side down longer than `max_slot_wal_keep_size`
/// allows): `status` still answers, shows the route not read and what it knows, and
/// counts no messages it cannot read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_the_status_answers_when_a_routes_slot_has_lost_its_wal() {
    let (a, b) = (server().await, server().await);
    let roster = side_db(&a, "roster", Side::Roster, false).await;
    let calc = side_db(&b, "calc", Side::Calc, false).await;
    let to_b = route::link(&roster, &calc).await.unwrap().to_calculation;
    b.stop_immediate().unwrap();
    let r = client(&roster).await;
    burst(&r, 0, 2, 2).await;
    r.batch_execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'").await.unwrap();
    r.batch_execute("SELECT pg_reload_conf()").await.unwrap();
    // WAL past the keep size, in segments of their own, then checkpoints that remove
    // them: the slot's WAL is gone.
    r.batch_execute("CREATE TABLE filler (x bigint)").await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        for step in ["INSERT INTO filler SELECT generate_series(1, 20000)", "SELECT pg_switch_wal()", "CHECKPOINT"] {
            r.batch_execute(step).await.unwrap();
        }
        let lost: String = r
            .query_one("SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'sb_route_' || $1", &[&to_b])
            .await
            .unwrap()
            .get(0);
        if lost == "lost" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the slot kept its WAL ({lost})");
    }
    let (needs, routes) = status(&roster).await;
    let o = routes.out.iter().find(|o| o.route == to_b).unwrap();
    assert!(o.subscribed && !o.reading && o.waiting.is_none(), "{o:?}");
    assert_eq!(o.wal_status.as_deref(), Some("lost"), "{o:?}");
    assert!(
        needs
            .iter()
            .any(|l| l.contains(&format!("route {to_b} to")) && l.contains("lost WAL") && l.contains("link again")),
        "{needs:?}"
    );
}

/// The process that applies a route's messages killed with SIGKILL in the middle of a
/// burst (its server restarts as after a crash): every message arrives once, in order per
/// dialog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_carrier_killed_mid_transfer_loses_and_repeats_nothing() {
    let (a, b) = (server().await, server().await);
    let roster = side_db(&a, "roster", Side::Roster, false).await;
    let calc = side_db(&b, "calc", Side::Calc, false).await;
    route::link(&roster, &calc).await.unwrap();
    let sender = {
        let roster = roster.clone();
        tokio::spawn(async move { burst(&client(&roster).await, 0, 150, 4).await })
    };
    // The apply worker, once it has delivered something.
    let c = client(&calc).await;
    let mut got = receive_until(&c, "loonfactorberekening_reken", 1).await;
    let pid: i32 = c
        .query_one("SELECT pid FROM pg_stat_subscription WHERE subname LIKE 'sb_route_%' AND pid IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    // SAFETY: signalling a process of the test's own server.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    drop(c);
    sender.await.unwrap();
    // The server restarts after the crash: receive on new connections until all came.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let c = loop {
        assert!(tokio::time::Instant::now() < deadline, "{} of 600 messages within a minute", got.len());
        let Ok((c, conn)) = tokio_postgres::connect(&calc, tokio_postgres::NoTls).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        tokio::spawn(conn);
        while let Ok(rows) = c
            .query(
                "SELECT conversation_handle, message_type_name, coalesce(message_body, '') FROM sb.receive($1)",
                &[&"loonfactorberekening_reken"],
            )
            .await
        {
            got.extend(rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))));
            if got.len() >= 600 {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{} of 600 messages within a minute", got.len());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if got.len() >= 600 {
            break c;
        }
    };
    assert_eq!(each_once_in_order(&got, 4).len(), 150);
    assert!(receive_all(&c, "loonfactorberekening_reken").await.is_empty());
}

/// A message the far side cannot take (a contract its service does not accept) is kept
/// aside there with its reason, its sender hears an Error, and the route goes on: the
/// next dialog arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_the_far_side_refuses_is_set_aside_and_does_not_stop_the_route() {
    let (a, b) = (server().await, server().await);
    let roster = side_db(&a, "roster", Side::Roster, false).await;
    let calc = side_db(&b, "calc", Side::Calc, false).await;
    route::link(&roster, &calc).await.unwrap();
    let r = client(&roster).await;
    r.batch_execute(&format!("SELECT sb.create_contract('/t/Alleen', ARRAY[['{VRAAG}', 'INITIATOR']])")).await.unwrap();
    let bad: uuid::Uuid =
        r.query_one("SELECT sb.begin_dialog($1, $2, '/t/Alleen')", &[&DATA, &REKEN]).await.unwrap().get(0);
    r.execute("SELECT sb.send($1, $2, '<Vraag/>')", &[&bad, &VRAAG]).await.unwrap();
    burst(&r, 0, 1, 1).await;
    let c = client(&calc).await;
    let got = receive_until(&c, "loonfactorberekening_reken", 1).await;
    assert_eq!(numbers(&got[0].2), (0, 1), "the next dialog arrived");
    let row = c.query_one("SELECT sqlstate, error, to_service FROM sb.transmission_error", &[]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), "SB425");
    assert!(row.get::<_, String>(1).contains("does not accept contract /t/Alleen"), "{}", row.get::<_, String>(1));
    let back = receive_until(&r, "loonfactorberekening_data", 1).await;
    assert_eq!((back[0].0, back[0].1.as_str()), (bad, "http://schemas.microsoft.com/SQL/ServiceBroker/Error"));
    assert!(String::from_utf8_lossy(&back[0].2).contains("<Code>-8408</Code>"));
    let state: String = r.query_one("SELECT state FROM sb.endpoint WHERE handle = $1", &[&bad]).await.unwrap().get(0);
    assert_eq!(state, "ER");
    // The operator of the far side sees it.
    let (needs, routes) = status(&calc).await;
    assert_eq!((routes.undeliverable.count, routes.undeliverable.recent), (1, 1));
    assert!(needs.iter().any(|l| l.contains("could not be delivered") && l.contains("/t/Alleen")), "{needs:?}");
    assert!(routes.incoming.iter().all(|i| i.applying), "{routes:?}");
}

/// A worker configuration serving one queue of one database.
fn one_queue_config(url: &str, queue: &str, handler: &str, readers: u32) -> String {
    format!(
        "[broker]\nkind = \"postgres\"\nconnection = {}\n\n\
         [worker]\nretry_min_delay_ms = 20\nretry_max_delay_ms = 1000\nscale_interval_ms = 250\n\n\
         [queues.{queue}]\nhandler = \"{handler}\"\nmin_readers = 1\nmax_readers = {readers}\nbatch = 10\nwait_ms = 1000\n",
        toml::Value::String(url.to_owned()),
    )
}

/// The pipeline split as the seed draws it: planners edit the roster on one server, two
/// calculation databases on two more compute (each with a worker of its own), the
/// collector stores the answers on the roster side. Every key ends on its latest version,
/// the requests spread over both calculation servers, and each calculation database kept
/// its own version claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roster_edits_are_calculated_on_two_other_servers_and_every_key_ends_on_its_latest_version() {
    use sbworker::demo::roster::Roster;
    use sbworker::demo::{DATA_QUEUE, REKEN_QUEUE, check};
    use sbworker::handlers::{calculation, collector};

    use crate::common::calc::{TempDir, spawn_worker, stop_worker};

    let (a, b, c) = (server().await, server().await, server().await);
    let roster = side_db(&a, "roster", Side::Roster, true).await;
    let calc_b = side_db(&b, "calc", Side::Calc, false).await;
    let calc_c = side_db(&c, "calc", Side::Calc, false).await;
    // Linked as an operator does it, both calculation databases at once.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_sbworker"))
        .args(["link", "--roster", &roster, "--calc", &calc_b, "--calc", &calc_c])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text.lines().filter(|l| l.starts_with("linked ")).count(), 2, "{text}");
    let dir = TempDir::new("split");
    let (mut r, conn) = tokio_postgres::connect(&roster, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let plan = Roster::generate(12, 7, true);
    plan.load(&mut r).await.unwrap();
    // Requests in flight to the calculation servers (no worker there yet) are not lost
    // dialogs to the sweep: their far sides are elsewhere, not gone.
    let (mut sweeper, conn) = tokio_postgres::connect(&roster, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    match sbworker::handoff::sweep::run(&mut sweeper, sbworker::handoff::sweep::Options::default()).await.unwrap() {
        sbworker::handoff::sweep::Outcome::Ran { lost, expired, .. } => assert_eq!((lost, expired), (0, 0)),
        sbworker::handoff::sweep::Outcome::Skipped => panic!("nothing else holds the sweep's lock"),
    }
    let workers = [
        spawn_worker(&dir, &one_queue_config(&roster, DATA_QUEUE, collector::NAME, 2)),
        spawn_worker(&dir, &one_queue_config(&calc_b, REKEN_QUEUE, calculation::NAME, 2)),
        spawn_worker(&dir, &one_queue_config(&calc_c, REKEN_QUEUE, calculation::NAME, 2)),
    ];
    for e in sbworker::demo::edits::burst(&plan, 60, 7) {
        e.apply(&r).await.unwrap();
    }
    if let Err(e) = check::wait_drained(&r, Duration::from_secs(120), |_| {}).await {
        // What each side holds, to say where the work stopped.
        let mut state = Vec::new();
        for (name, url) in [("roster", &roster), ("calc b", &calc_b), ("calc c", &calc_c)] {
            let c = client(url).await;
            let row = c
                .query_one(
                    "SELECT (SELECT count(*) FROM sb.message), (SELECT count(*) FROM sb.endpoint),
                            (SELECT string_agg(state || ':' || coalesce(route, '-'), ',') FROM sb.endpoint),
                            (SELECT count(*) FROM sb.transmission_error),
                            (SELECT string_agg(error, '; ') FROM sb.transmission_error),
                            (SELECT count(*) FROM sbworker.dead_letter),
                            (SELECT string_agg(route || ' ' || subscribed || ' ' || reading || ' ' || coalesce(behind_bytes, -1), ', ') FROM sb.route_state),
                            (SELECT string_agg(subname || ' errors ' || apply_error_count, ', ') FROM pg_stat_subscription_stats)",
                    &[],
                )
                .await
                .unwrap();
            state.push(format!(
                "{name}: messages {} endpoints {} [{:?}] undeliverable {} {:?} dead {} routes {:?} subs {:?}",
                row.get::<_, i64>(0),
                row.get::<_, i64>(1),
                row.get::<_, Option<String>>(2),
                row.get::<_, i64>(3),
                row.get::<_, Option<String>>(4),
                row.get::<_, i64>(5),
                row.get::<_, Option<String>>(6),
                row.get::<_, Option<String>>(7),
            ));
        }
        panic!("{e}\n{}", state.join("\n"));
    }
    let verdict = check::verify(&r, &sbworker::engine::Tables::built_in().unwrap()).await.unwrap();
    assert!(verdict.problems.is_empty(), "{:?}", verdict.problems);
    // The employee without a salary is answered with a Fout, across the servers too.
    assert_eq!(verdict.latest + verdict.faulted.len(), 12);
    assert_eq!(verdict.faulted.len(), 1);
    assert!(verdict.faulted[0].1.contains("salary-missing"), "{:?}", verdict.faulted);
    for url in [&calc_b, &calc_c] {
        let claims = count(&client(url).await, "SELECT count(*) FROM sbworker.answered_version").await;
        assert!(claims > 0, "both calculation servers computed");
    }
    assert_eq!(count(&r, "SELECT count(*) FROM sbworker.dead_letter").await, 0);
    // Each side's selftest checks its own queue and its routes; the roster side's round
    // trip goes over a route to a calculation worker and back. Twice: the calculation
    // side keeps its claim of the first run's scratch version (the same version again is
    // computed, not answered as superseded).
    for (url, side, routes) in [(&roster, "roster", 2), (&calc_b, "calc", 1), (&roster, "roster", 2)] {
        let (code, text) = selftest(url).await;
        assert_eq!(code, Some(0), "{text}");
        assert!(text.contains(&format!("the {side} side of a split install")), "{text}");
        assert!(text.contains(&format!("{routes} route(s) out, each read by its far database")), "{text}");
        let round_trip = text.lines().find(|l| l.contains("round trip")).unwrap_or_default();
        if side == "roster" {
            assert!(round_trip.contains("PASS") && round_trip.contains("by a running worker"), "{text}");
        } else {
            assert!(round_trip.contains("SKIP") && round_trip.contains("roster side"), "{text}");
        }
    }
    // The same over TDS, as `selftest --mssql --side roster` runs it against SQL Server
    // (the emulator in front of the roster database).
    let (conn, _stop) = crate::common::tds::emulator(&roster).await;
    let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_sbworker"))
        .args(["selftest", "--mssql", &conn, "--side", "roster"])
        .env("NO_COLOR", "1")
        .output()
        .await
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{text}");
    let round_trip = text.lines().find(|l| l.contains("round trip")).unwrap_or_default();
    assert!(round_trip.contains("PASS") && round_trip.contains("by a running worker"), "{text}");
    for w in workers {
        assert_eq!(stop_worker(w).await, Some(0));
    }
}

/// What `link` and `install --side` refuse, each saying why: a database installed as
/// one side installed again as another; a database of both services linked; a server
/// without logical replication.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_side_stays_a_side_and_link_refuses_what_cannot_carry_a_route() {
    let shared = crate::common::pg::cluster();
    let both = crate::common::pg::fresh_db().await;
    let roster = side_db(shared, &format!("r{}", uuid::Uuid::new_v4().simple()), Side::Roster, false).await;
    let calc = side_db(shared, &format!("c{}", uuid::Uuid::new_v4().simple()), Side::Calc, false).await;
    let again = install_side(&calc, false, Some(Side::Roster)).await.unwrap_err();
    assert!(again.message.contains("holds the calc side") && again.message.contains("as the roster side"), "{again}");
    // So does the command line, saying which side the database holds.
    let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_sbworker"))
        .args(["install", "--postgres", &calc, "--side", "roster"])
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("holds the calc side"), "{err}");
    // Installed again without a side, it stays what it was.
    install_side(&calc, false, None).await.unwrap();
    let c = client(&calc).await;
    assert_eq!(count(&c, "SELECT count(*) FROM sb.service WHERE name LIKE '%DataService'").await, 0);
    let roster_on_calc = install_side(&calc, true, Some(Side::Calc)).await.unwrap_err();
    assert!(roster_on_calc.message.contains("roster side"), "{roster_on_calc}");
    // The roster side's commands refuse the calculation side; its sweep only ends the
    // dialogs past their LIFETIME.
    let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_sbworker"))
        .args(["sweep", "--postgres", &calc])
        .output()
        .await
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.contains("0 dialogs past their LIFETIME ended"), "{out}");
    for args in [vec!["export", "--periode", "1"], vec!["explain", "--dienstverband", "1", "--periode", "1"]] {
        let o = tokio::process::Command::new(env!("CARGO_BIN_EXE_sbworker"))
            .args(&args)
            .args(["--postgres", &calc])
            .output()
            .await
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("is the calculation side of a split install"), "{args:?}: {err}");
    }
    let e = route::link(&both, &calc).await.unwrap_err();
    assert!(e.message.contains("holds the both side") && e.message.contains("--side roster"), "{e}");
    let e = route::link(&roster, &both).await.unwrap_err();
    assert!(e.message.contains("holds the both side") && e.message.contains("--side calc"), "{e}");
    let e = route::link(&roster, &calc).await.unwrap_err();
    assert!(e.message.contains("wal_level is replica") && e.message.contains("wal_level = logical"), "{e}");
}

/// A Vraag diverted on the calculation side of a split install is sent again through
/// the roster side: `dead-letter replay` on the calculation side says so, and with
/// `--roster` the roster side sends the key again (at its current version) and the
/// letter is marked replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vraag_diverted_on_the_calculation_side_is_sent_again_through_the_roster_side() {
    use sbworker::demo::roster::Roster;

    use crate::common::calc::TempDir;

    let (a, b) = (server().await, server().await);
    let roster = side_db(&a, "roster", Side::Roster, true).await;
    let calc = side_db(&b, "calc", Side::Calc, false).await;
    route::link(&roster, &calc).await.unwrap();
    let (mut r, conn) = tokio_postgres::connect(&roster, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    Roster::generate(2, 7, false).load(&mut r).await.unwrap();
    let c = client(&calc).await;
    // One Vraag as a worker would divert it: received, and set aside with its dialog's ids.
    // (It arrives over the route: received once it is there, within a minute.)
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let row = loop {
        let got = c
            .query_opt(
                "SELECT conversation_group_id, conversation_handle, message_sequence_number, message_body
                   FROM sb.receive('loonfactorberekening_reken', 1)",
                &[],
            )
            .await
            .unwrap();
        if let Some(row) = got {
            break row;
        }
        assert!(tokio::time::Instant::now() < deadline, "a Vraag on the calculation side within a minute");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (group, handle, seq, body): (uuid::Uuid, uuid::Uuid, i64, Vec<u8>) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    let id: i64 = c
        .query_one(
            "INSERT INTO sbworker.dead_letter (queue, service_name, service_contract_name, conversation_group_id,
                 conversation_handle, message_sequence_number, message_type_name, message_body, attempts, reason)
             VALUES ('loonfactorberekening_reken', $1, $2, $3, $4, $5, $6, $7, 3, 'a test') RETURNING id",
            &[&REKEN, &CONTRACT, &group, &handle, &seq, &VRAAG, &body],
        )
        .await
        .unwrap()
        .get(0);
    let dv: i32 = {
        let text = String::from_utf8(body).unwrap();
        let at = text.find("<Dienstverband Id=\"").unwrap() + "<Dienstverband Id=\"".len();
        text[at..].split('"').next().unwrap().parse().unwrap()
    };
    let sent_before =
        count(&r, &format!("SELECT count(*) FROM rekenserver.berekening_log WHERE dienstverband_id = {dv}")).await;
    let dir = TempDir::new("replay");
    let config = dir.0.join("calc.toml");
    std::fs::write(&config, one_queue_config(&calc, "loonfactorberekening_reken", "loonfactor-berekening", 1)).unwrap();
    let replay = |extra: Vec<String>| {
        let config = config.clone();
        async move {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_sbworker"))
                .args(["dead-letter", "--config"])
                .arg(&config)
                .args(["replay", &id.to_string()])
                .args(extra)
                .env("USER", "ops-test")
                .output()
                .await
                .unwrap()
        }
    };
    let o = replay(vec![]).await;
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--roster"), "{err}");
    let o = replay(vec!["--roster".into(), roster.clone()]).await;
    assert!(o.status.success(), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let sent_after =
        count(&r, &format!("SELECT count(*) FROM rekenserver.berekening_log WHERE dienstverband_id = {dv}")).await;
    assert_eq!(sent_after, sent_before + 1, "the roster side sent the key again");
    let replays = count(&c, &format!("SELECT replays::bigint FROM sbworker.dead_letter WHERE id = {id}")).await;
    assert_eq!(replays, 1);
}

/// An answer that arrives before the sending transaction's commit is visible at its
/// sender (a commit is carried as soon as it is in WAL; here the sender's commit waits
/// for a synchronous standby that does not exist, so it stays invisible as long as the
/// test likes): its delivery waits for that commit, then it is delivered, not dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_arrives_before_its_request_is_visible_waits_for_it() {
    let (a, b) = (server().await, server().await);
    let roster = side_db(&a, "roster", Side::Roster, false).await;
    let calc = side_db(&b, "calc", Side::Calc, false).await;
    route::link(&roster, &calc).await.unwrap();
    let r = client(&roster).await;
    r.batch_execute("ALTER SYSTEM SET synchronous_standby_names = 'nosuch'").await.unwrap();
    r.batch_execute("SELECT pg_reload_conf()").await.unwrap();
    // The request: its commit is in WAL (and carried) but waits, not yet visible here.
    let sender = {
        let roster = roster.clone();
        tokio::spawn(async move {
            let s = client(&roster).await;
            s.query_one(
                &format!(
                    "SELECT h FROM (SELECT sb.begin_dialog('{DATA}', '{REKEN}', '{CONTRACT}', NULL, 600) AS h) d,
                     LATERAL (SELECT sb.send(d.h, '{VRAAG}', convert_to('<Vraag/>', 'UTF8'))) s"
                ),
                &[],
            )
            .await
            .unwrap()
            .get::<_, uuid::Uuid>(0)
        })
    };
    let c = client(&calc).await;
    let got = receive_until(&c, "loonfactorberekening_reken", 1).await;
    c.execute("SELECT sb.send($1, $2, '<Antwoord/>')", &[&got[0].0, &ANTWOORD]).await.unwrap();
    c.execute("SELECT sb.end_conversation($1)", &[&got[0].0]).await.unwrap();
    // The answer reached the roster side: it waits there for the request's commit (a lock
    // not granted), or (were it not waiting) the route back has nothing left to carry.
    wait_until("the answer reached the roster side", || {
        let (r, c) = (&r, &c);
        async move {
            count(r, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").await == 1
                || count(c, "SELECT count(*) FROM sb.route_state WHERE reading AND behind_bytes = 0").await == 1
                    && count(r, "SELECT count(*) FROM pg_stat_subscription WHERE latest_end_lsn IS NOT NULL").await == 1
        }
    })
    .await;
    assert!(!sender.is_finished(), "the request's commit waits for its standby");
    r.batch_execute("ALTER SYSTEM RESET synchronous_standby_names").await.unwrap();
    r.batch_execute("SELECT pg_reload_conf()").await.unwrap();
    let h = sender.await.unwrap();
    let back = receive_until(&r, "loonfactorberekening_data", 2).await;
    let types: Vec<&str> = back.iter().map(|m| m.1.as_str()).collect();
    assert_eq!(types, [ANTWOORD, END_DIALOG]);
    assert!(back.iter().all(|m| m.0 == h));
    assert_eq!(count(&r, "SELECT count(*) FROM sb.transmission_error").await, 0);
}

/// One worker process serving queues in two databases of a split install: the answers'
/// queue in the roster database (`[broker]`'s connection) and the calculation queue in
/// the calculation database (the queue's own `connection`); over PostgreSQL, or over TDS
/// with two emulated databases (each emulator serving one side). Every key ends on its
/// latest version, each database has the worker's heartbeat, and one SIGTERM stops it.
async fn one_worker_serves_two_databases(tds: bool) {
    use sbworker::demo::roster::Roster;
    use sbworker::demo::{DATA_QUEUE, REKEN_QUEUE, check};
    use sbworker::handlers::{calculation, collector};

    use crate::common::calc::{TempDir, spawn_worker, stop_worker};

    let (a, b) = (server().await, server().await);
    let roster = side_db(&a, "roster", Side::Roster, true).await;
    let calc = side_db(&b, "calc", Side::Calc, false).await;
    route::link(&roster, &calc).await.unwrap();
    let (kind, roster_conn, calc_conn, _stops) = if tds {
        let (r, r_stop) = crate::common::tds::emulator(&roster).await;
        let (c, c_stop) = crate::common::tds::emulator(&calc).await;
        ("mssql", r, c, Some((r_stop, c_stop)))
    } else {
        ("postgres", roster.clone(), calc.clone(), None)
    };
    let config = format!(
        "[broker]\nkind = \"{kind}\"\nconnection = {}\n\n\
         [worker]\nretry_min_delay_ms = 20\nretry_max_delay_ms = 1000\nscale_interval_ms = 250\nheartbeat_ms = 200\n\n\
         [queues.{DATA_QUEUE}]\nhandler = \"{}\"\nmin_readers = 1\nmax_readers = 2\nbatch = 10\nwait_ms = 1000\n\n\
         [queues.{REKEN_QUEUE}]\nhandler = \"{}\"\nconnection = {}\nmin_readers = 1\nmax_readers = 2\nbatch = 10\nwait_ms = 1000\n",
        toml::Value::String(roster_conn),
        collector::NAME,
        calculation::NAME,
        toml::Value::String(calc_conn),
    );
    let dir = TempDir::new("two-databases");
    let worker = spawn_worker(&dir, &config);
    let (mut r, conn) = tokio_postgres::connect(&roster, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let plan = Roster::generate(8, 7, true);
    plan.load(&mut r).await.unwrap();
    for e in sbworker::demo::edits::burst(&plan, 30, 7) {
        e.apply(&r).await.unwrap();
    }
    check::wait_drained(&r, Duration::from_secs(120), |_| {}).await.unwrap();
    let verdict = check::verify(&r, &sbworker::engine::Tables::built_in().unwrap()).await.unwrap();
    assert!(verdict.problems.is_empty(), "{:?}", verdict.problems);
    assert_eq!(verdict.latest + verdict.faulted.len(), 8);
    let c = client(&calc).await;
    assert!(count(&c, "SELECT count(*) FROM sbworker.answered_version").await > 0, "the calculation side computed");
    for (name, db) in [("roster", &r), ("calculation", &c)] {
        let beats = count(db, "SELECT count(*) FROM sbworker.worker_instance").await;
        assert_eq!(beats, 1, "the worker beats in the {name} database");
    }
    assert_eq!(stop_worker(worker).await, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_process_serves_queues_in_two_databases() {
    one_worker_serves_two_databases(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tds_one_worker_process_serves_queues_in_two_emulated_databases() {
    one_worker_serves_two_databases(true).await;
}

/// A worker serving two databases whose HTTP port is taken does not go on serving the
/// other database alone: the run that cannot bind stops the other, and the process
/// exits with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_database_worker_that_cannot_serve_http_stops_entirely() {
    use sbworker::demo::{DATA_QUEUE, REKEN_QUEUE};
    use sbworker::handlers::{calculation, collector};

    let (a, b) = (server().await, server().await);
    let roster = side_db(&a, "roster", Side::Roster, true).await;
    let calc = side_db(&b, "calc", Side::Calc, false).await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let config = format!(
        "[broker]\nkind = \"postgres\"\nconnection = {}\n\n[http]\nlisten = \"{}\"\n\n\
         [queues.{DATA_QUEUE}]\nhandler = \"{}\"\n\n\
         [queues.{REKEN_QUEUE}]\nhandler = \"{}\"\nconnection = {}\n",
        toml::Value::String(roster),
        taken.local_addr().unwrap(),
        collector::NAME,
        calculation::NAME,
        toml::Value::String(calc),
    );
    let dir = crate::common::calc::TempDir::new("two-databases-http");
    let path = dir.0.join("worker.toml");
    std::fs::write(&path, config).unwrap();
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_sbworker"))
        .args(["run", "--config"])
        .arg(&path)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run).await.expect("the worker exits").unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(&taken.local_addr().unwrap().to_string()), "{err}");
}
