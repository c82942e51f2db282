//! `sbworker selftest --postgres`: every check passes on a fresh install, the round
//! trip really answers and stores a scratch request and leaves nothing behind; each
//! failure it is for (a disabled queue, poison detection on, a login without grants, an
//! install by another version, no server) stops it at that check with what to do.

use sbworker::selftest::{Status, postgres};

use crate::common::pg::{fresh_db, fresh_roster_db};

fn statuses(r: &sbworker::selftest::Report) -> Vec<(&'static str, Status)> {
    r.checks.iter().map(|c| (c.name, c.status)).collect()
}

/// What the round trip could leave behind: scratch rows, conversations, messages.
async fn leftovers(c: &tokio_postgres::Client) -> i64 {
    c.query_one(
        "SELECT (SELECT count(*) FROM sb.endpoint) + (SELECT count(*) FROM sb.message) \
         + (SELECT count(*) FROM rekenserver.berekening_log) + (SELECT count(*) FROM rekenserver.resultaat) \
         + (SELECT count(*) FROM rekenserver.sleutel) + (SELECT count(*) FROM sbworker.answered_version) \
         + (SELECT count(*) FROM rooster.dienstverband) + (SELECT count(*) FROM rooster.cao) \
         + (SELECT count(*) FROM rooster.periode) + (SELECT count(*) FROM rooster.dienst_type) \
         + (SELECT count(*) FROM sbworker.message_attempt) + (SELECT count(*) FROM sbworker.dead_letter)",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_check_passes_and_the_round_trip_leaves_nothing_behind() {
    let (url, c) = fresh_roster_db().await;
    let r = postgres::run(&url).await;
    assert!(r.passed, "{}", r.text(false));
    assert_eq!(
        statuses(&r),
        [
            ("connection", Status::Pass),
            ("permissions", Status::Pass),
            ("broker", Status::Pass),
            ("module options", Status::Skip),
            ("version", Status::Pass),
            ("round trip", Status::Pass),
        ]
    );
    let trip = &r.checks[5].detail;
    assert!(trip.contains("by this selftest") && trip.contains("export can claim it"), "{trip}");
    let left = leftovers(&c).await;
    if left != 0 {
        for t in [
            "sb.endpoint",
            "sb.message",
            "sb.conversation_group",
            "rekenserver.berekening_log",
            "rekenserver.resultaat",
            "rekenserver.resultaat_historie",
            "rekenserver.sleutel",
            "sbworker.answered_version",
            "rooster.dienst_type",
            "sbworker.message_attempt",
        ] {
            let n: i64 = c.query_one(&format!("SELECT count(*) FROM {t}"), &[]).await.unwrap().get(0);
            eprintln!("LEFT {t} {n}");
        }
    }
    assert_eq!(left, 0, "{}", r.text(false));
    // Again: the same, nothing accumulates.
    let r = postgres::run(&url).await;
    assert!(r.passed, "{}", r.text(false));
    assert_eq!(leftovers(&c).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_roster_the_round_trip_is_skipped_saying_why() {
    let url = fresh_db().await;
    let r = postgres::run(&url).await;
    assert!(r.passed, "{}", r.text(false));
    let last = r.checks.last().unwrap();
    assert_eq!((last.name, last.status), ("round trip", Status::Skip));
    assert!(last.detail.contains("--roster"), "{}", last.detail);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_queue_or_poison_detection_stops_it_at_the_broker_check() {
    let (url, c) = fresh_roster_db().await;
    c.batch_execute("SELECT sb.alter_queue('loonfactorberekening_reken', p_enabled => false)").await.unwrap();
    let r = postgres::run(&url).await;
    assert!(!r.passed);
    let last = r.checks.last().unwrap();
    assert_eq!((last.name, last.status), ("broker", Status::Fail), "{}", r.text(false));
    assert!(last.detail.contains("loonfactorberekening_reken is disabled"), "{}", last.detail);
    assert!(last.fix.as_deref().unwrap().contains("p_enabled => true"));
    c.batch_execute(
        "SELECT sb.alter_queue('loonfactorberekening_reken', p_enabled => true); \
         SELECT sb.alter_queue('loonfactorberekening_data', p_poison_handling => true)",
    )
    .await
    .unwrap();
    let r = postgres::run(&url).await;
    let last = r.checks.last().unwrap();
    assert_eq!((last.name, last.status), ("broker", Status::Fail), "{}", r.text(false));
    assert!(last.detail.contains("poison-message detection on"), "{}", last.detail);
    assert_eq!(leftovers(&c).await, 0, "nothing was tried after the failure");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_without_grants_is_told_what_it_lacks() {
    let (url, c) = fresh_roster_db().await;
    let role = format!("selftest_nogrant_{}", std::process::id());
    c.batch_execute(&format!("DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN")).await.unwrap();
    let r = postgres::run(&format!("{url} user={role}")).await;
    assert!(!r.passed);
    let last = r.checks.last().unwrap();
    assert_eq!((last.name, last.status), ("permissions", Status::Fail), "{}", r.text(false));
    assert!(last.detail.contains("no USAGE on schema sbworker"), "{}", last.detail);
    c.batch_execute(&format!("GRANT USAGE ON SCHEMA sb, sbworker, rekenserver TO {role}")).await.unwrap();
    let r = postgres::run(&format!("{url} user={role}")).await;
    let last = r.checks.last().unwrap();
    assert_eq!((last.name, last.status), ("permissions", Status::Fail), "{}", r.text(false));
    assert!(last.detail.contains("no INSERT on sbworker.message_attempt"), "{}", last.detail);
    assert!(last.fix.as_deref().unwrap().contains("GRANT"), "{:?}", last.fix);
    c.batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}")).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_install_by_another_version_is_named() {
    let (url, c) = fresh_roster_db().await;
    c.batch_execute("UPDATE sbworker.installation SET stamp = '0.0.9+0000' WHERE part = 'broker'").await.unwrap();
    let r = postgres::run(&url).await;
    let last = r.checks.last().unwrap();
    assert_eq!((last.name, last.status), ("version", Status::Fail), "{}", r.text(false));
    assert!(last.detail.contains("0.0.9+0000"), "{}", last.detail);
    assert!(last.fix.as_deref().unwrap().contains("sbworker install --postgres"));
    // Installing again puts it right.
    sbworker::broker::postgres::install_with(&url, true).await.unwrap();
    assert!(postgres::run(&url).await.passed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_server_fails_the_first_check() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let r = postgres::run(&format!("host=127.0.0.1 port={port} user=x dbname=x connect_timeout=5")).await;
    assert_eq!(statuses(&r), [("connection", Status::Fail)]);
    assert!(r.checks[0].error_text.as_deref().unwrap().contains("refused"), "{:?}", r.checks[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_prints_json_and_exits_by_the_outcome() {
    let (url, c) = fresh_roster_db().await;
    let run = |url: String| async move {
        crate::common::within(
            600,
            "the command ends",
            tokio::process::Command::new(env!("CARGO_BIN_EXE_sbworker"))
                .args(["selftest", "--json", "--postgres", &url])
                .output(),
        )
        .await
        .unwrap()
    };
    let out = run(url.clone()).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["backend"], "postgres");
    assert_eq!(v["passed"], true);
    let names: Vec<&str> = v["checks"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["connection", "permissions", "broker", "module options", "version", "round trip"]);
    c.batch_execute("SELECT sb.alter_queue('loonfactorberekening_data', p_enabled => false)").await.unwrap();
    let out = run(url).await;
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["passed"], false);
    let last = v["checks"].as_array().unwrap().last().unwrap();
    assert_eq!((last["name"].as_str(), last["status"].as_str()), (Some("broker"), Some("fail")));
    assert!(last["fix"].as_str().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tds_the_emulator_skips_the_catalog_checks_saying_why_and_runs_the_round_trip() {
    // The emulator runs the worker's statements, not SQL Server's catalog: the selftest
    // logs in, says (by @@VERSION) that it talks to the emulator and skips what only the
    // catalog can tell, and runs the round trip through Rekenserver.selftest.
    let (url, _s) = fresh_roster_db().await;
    let (conn, _stop) = crate::common::tds::emulator_with(&url, Default::default()).await;
    let r = sbworker::selftest::mssql::run(&conn).await;
    assert_eq!(
        statuses(&r),
        [
            ("connection", Status::Pass),
            ("permissions", Status::Skip),
            ("broker", Status::Skip),
            ("module options", Status::Skip),
            ("schema collection", Status::Skip),
            ("version", Status::Skip),
            ("round trip", Status::Pass),
        ],
        "{}",
        r.text(false)
    );
    assert!(r.checks[0].detail.contains("without TLS"), "{}", r.checks[0].detail);
    assert!(r.checks[6].detail.contains("by this selftest"), "{}", r.checks[6].detail);
    // A wrong password: the connection check fails with SQL Server's 18456.
    let wrong = conn.replace("Password=\"p;w\"\"d\"", "Password=nope");
    let r = sbworker::selftest::mssql::run(&wrong).await;
    assert_eq!(statuses(&r), [("connection", Status::Fail)]);
    assert_eq!(r.checks[0].error_number, Some(18456), "{:?}", r.checks[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tds_the_calculation_side_skips_the_round_trip_saying_why() {
    // `--side calc`: the calculation's database of the seed's two. The emulator has no
    // catalog, so the side's checks (its route, the endpoint, the transmission queue) are
    // skipped as the others are; the round trip, which begins a dialog the calculation
    // side never begins, is skipped with a line naming the roster side's selftest (whose
    // round trip goes over the route: routes_pg), and the run passes. Nothing is written
    // (no scratch roster edit).
    use sbworker::broker::mssql::Side;
    let (url, c) = fresh_roster_db().await;
    let (conn, _stop) = crate::common::tds::emulator_with(&url, Default::default()).await;
    let r = sbworker::selftest::mssql::run_side(&conn, Side::Calc).await;
    assert!(r.passed, "{}", r.text(false));
    let mut expected = vec![("connection", Status::Pass)];
    for name in
        ["permissions", "broker", "module options", "schema collection", "version", "route", "endpoint", "transmission"]
    {
        expected.push((name, Status::Skip));
    }
    expected.push(("round trip", Status::Skip));
    assert_eq!(statuses(&r), expected, "{}", r.text(false));
    let last = r.checks.last().unwrap();
    assert!(last.detail.contains("the calculation side of a split deployment begins no dialogs"), "{}", last.detail);
    assert!(last.detail.contains("--side roster"), "{}", last.detail);
    assert_eq!(leftovers(&c).await, 0);
    // From the command line: a side that is not one is refused before anything runs.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_sbworker"))
        .args(["selftest", "--mssql", &conn, "--side", "middle"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("'middle' is not a side: give roster, calc or both"), "{err}");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_sbworker"))
        .args(["selftest", "--mssql", &conn, "--side", "calc"])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("SKIP  round trip") && text.contains("begins no dialogs"), "{text}");
}

#[test]
fn install_takes_a_side_and_refuses_one_it_does_not_know() {
    // Refused by the command line, before any connection is made (the address is a closed port).
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sbworker")).args(args).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let conn = "Server=tcp:127.0.0.1,1;User Id=dba;Password=x;Encrypt=false";
    let (code, err) = run(&["install", "--mssql", conn, "--side", "middle"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("'middle' is not a side: give roster, calc or both"), "{err}");
    let (code, err) = run(&["install", "--postgres", "host=127.0.0.1 port=1", "--side", "kalk"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("'kalk' is not a side: give roster, calc or both"), "{err}");
    // PostgreSQL takes one too (here it gets as far as the closed port).
    let (code, err) = run(&["install", "--postgres", "host=127.0.0.1 port=1", "--side", "calc"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("installing the PostgreSQL broker"), "{err}");
    // --side and --var Side= that disagree: refused, naming both.
    let (code, err) =
        run(&["install", "--mssql", conn, "--side", "calc", "--var", "Side=roster", "--var", "Database=d"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("--side calc and the sqlcmd variable Side=roster disagree"), "{err}");
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_sbworker")).args(["install", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--side roster") && help.contains("--side calc"), "{help}");
}

#[test]
fn the_selftest_statements_the_emulator_knows_are_recognised() {
    // The statements that call sbworker's procedures and the export's transaction are
    // forms the emulator's recogniser knows: they must parse. The catalog queries
    // (HAS_PERMS_BY_NAME, sys.databases, sys.extended_properties, SERVERPROPERTY) are
    // SQL Server's alone: declared here, run by the real-server test.
    const CATALOG: &[&str] = &["server", "permissions", "database", "stamp", "transport_state", "endpoint"];
    let statements = sbworker::selftest::mssql::statements();
    let names: Vec<&str> = statements.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            "version_text",
            "server",
            "permissions",
            "database",
            "queue",
            "module_options",
            "stamp",
            "transport_state",
            "endpoint",
            "step"
        ]
    );
    for (name, sql) in statements {
        if CATALOG.contains(&name) {
            continue;
        }
        let sent = sql.replace("@P1", "@p1").replace("@P2", "@p2");
        let parsed = sbworker::emulator::tsql::parse_batch(&sent).unwrap_or_else(|e| panic!("{name}: {e}\n{sql}"));
        assert!(!parsed.is_empty(), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deep_selftest_runs_every_t_sql_step_end_to_end_over_tds_and_leaves_nothing_behind() {
    // Over the emulator (the PostgreSQL broker behind it, with the roster installed): the
    // catalog checks are skipped, saying the emulator is not SQL Server, and every deep
    // step runs over TDS as it would on a first real server.
    let (url, c) = fresh_roster_db().await;
    let (conn, _stop) = crate::common::tds::emulator_with(&url, Default::default()).await;
    let r = sbworker::selftest::mssql::run_deep(&conn, &conn).await;
    eprintln!("{}", r.text(false));
    assert!(r.passed, "{}", r.text(false));
    let names: Vec<&str> = r.checks.iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        [
            "connection",
            "permissions",
            "broker",
            "module options",
            "schema collection",
            "version",
            "round trip",
            "deep: start",
            "deep: roster edit answered",
            "deep: export once",
            "deep: recompute dry run",
            "deep: recompute",
            "deep: same figures not exported again",
            "deep: correction names what payroll received",
            "deep: explain",
            "deep: planner before recompute",
            "deep: held group not waited for",
            "deep: lost dialog repaired by the sweep",
            "deep: cleanup",
        ],
        "{}",
        r.text(false)
    );
    for c in &r.checks[1..6] {
        assert_eq!(c.status, Status::Skip, "{}", c.name);
        assert!(c.detail.contains("emulator, not SQL Server"), "{}", c.detail);
    }
    assert!(r.checks[7].detail.contains("on the emulator"), "{}", r.checks[7].detail);
    // The held group: the emulator waits for the lock, the transport's bound ends it.
    assert!(r.checks[16].detail.contains("the bound ended it"), "{}", r.checks[16].detail);
    assert_eq!(leftovers(&c).await, 0, "{}", r.text(false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deep_selftest_will_not_start_beside_a_live_worker_or_with_messages_waiting() {
    // It answers its scratch requests itself: a worker alive (a recent heartbeat), or a
    // message waiting on a queue, stops it at its start, saying what to do, and nothing
    // is written.
    let (url, c) = fresh_roster_db().await;
    let (conn, _stop) = crate::common::tds::emulator_with(&url, Default::default()).await;
    c.batch_execute(
        "INSERT INTO sbworker.worker_instance (instance, host, pid, version, started_at)
         VALUES (gen_random_uuid(), 'host-a', 4242, 'sbworker test', now())",
    )
    .await
    .unwrap();
    let r = sbworker::selftest::mssql::run_deep(&conn, &conn).await;
    let last = r.checks.last().unwrap();
    assert_eq!((last.name, last.status), ("deep: start", Status::Fail), "{}", r.text(false));
    assert!(last.detail.contains("1 workers are alive"), "{}", last.detail);
    assert!(last.fix.as_deref().unwrap().contains("stop the workers"), "{:?}", last.fix);
    // Silent for longer than three intervals: not alive; a Vraag waiting (a T-SQL
    // initiator's) stops it instead.
    c.batch_execute("UPDATE sbworker.worker_instance SET beat_at = now() - interval '1 hour'").await.unwrap();
    crate::common::tds::send_vraag(&mut crate::common::tds::client(&conn).await).await;
    let before = leftovers(&c).await;
    let r = sbworker::selftest::mssql::run_deep(&conn, &conn).await;
    let last = r.checks.last().unwrap();
    assert_eq!((last.name, last.status), ("deep: start", Status::Fail), "{}", r.text(false));
    assert!(last.detail.contains("messages wait on dbo.loonfactorberekening_reken"), "{}", last.detail);
    assert_eq!(leftovers(&c).await, before, "the deep steps wrote nothing");
}

#[test]
fn deep_is_for_sql_server_only_and_admin_only_with_deep() {
    // Bad arguments: exit 2, saying which.
    for (args, says) in [
        (&["selftest", "--postgres", "host=db", "--deep"][..], "cannot be used with '--deep'"),
        (&["selftest", "--mssql", "Server=tcp:db,1433", "--admin", "x"][..], "--deep"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sbworker")).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
