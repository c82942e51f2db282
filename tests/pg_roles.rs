//! The PostgreSQL broker's roles, as strict as Service Broker's permissions: four logins
//! (none superuser) given sbworker's roles by `sbworker install --…-role`, the pipeline
//! end to end with each doing its part, everything else refused with a clear error, the
//! Service Broker rights checked per queue and service, PUBLIC given nothing, and a
//! search_path attack that changes nothing a broker function runs.

use std::time::Duration;

use sbworker::demo::check::{verify, wait_drained};
use sbworker::demo::roster::{PERIODE_ID, Roster};
use sbworker::engine::Tables;
use tokio::process::Command;
use tokio_postgres::Client;
use uuid::Uuid;

use crate::common::calc::{TempDir, spawn_worker, stop_worker};
use crate::common::pg::fresh_roster_db;

const BIN: &str = env!("CARGO_BIN_EXE_sbworker");

/// Logins of one test (role names are the cluster's: each test has its own).
struct Logins {
    worker: String,
    sender: String,
    payroll: String,
    housekeeping: String,
    nobody: String,
}

impl Logins {
    fn new() -> Self {
        let tag = Uuid::new_v4().simple().to_string()[..8].to_owned();
        Self {
            worker: format!("w_{tag}"),
            sender: format!("s_{tag}"),
            payroll: format!("p_{tag}"),
            housekeeping: format!("h_{tag}"),
            nobody: format!("n_{tag}"),
        }
    }
}

/// `url` as `login`.
fn as_login(url: &str, login: &str) -> String {
    let out = url.replace("user=postgres", &format!("user={login}"));
    assert_ne!(out, url);
    out
}

async fn client(url: &str) -> Client {
    let (c, conn) = sbworker::pg_tls::connect(url).await.unwrap();
    tokio::spawn(conn);
    c
}

/// The error of `sql` as `c` (panics when it runs).
async fn refused(c: &Client, sql: &str) -> String {
    match c.batch_execute(sql).await {
        Ok(()) => panic!("ran, but must be refused: {sql}"),
        Err(e) => e.as_db_error().map(|d| d.message().to_owned()).unwrap_or_else(|| e.to_string()),
    }
}

/// A database with the broker and the roster, the logins made and given their roles by
/// `sbworker install`.
async fn world() -> (String, Client, Logins) {
    let (url, admin) = fresh_roster_db().await;
    let l = Logins::new();
    for login in [&l.worker, &l.sender, &l.payroll, &l.housekeeping, &l.nobody] {
        admin.batch_execute(&format!("CREATE ROLE {login} LOGIN")).await.unwrap();
    }
    let out = crate::common::within(
        120,
        "sbworker install",
        Command::new(BIN)
            .args(["install", "--postgres", &url, "--roster"])
            .args(["--worker-role", &l.worker, "--sender-role", &l.sender])
            .args(["--payroll-role", &l.payroll, "--housekeeping-role", &l.housekeeping])
            .output(),
    )
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains(&format!("sbworker_worker granted to {}", l.worker)), "{stdout}");
    (url, admin, l)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_runs_with_the_four_roles_none_of_them_superuser() {
    let (url, admin, l) = world().await;
    // The worker: its selftest passes as its login, round trip included.
    let out = crate::common::within(
        120,
        "selftest",
        Command::new(BIN).args(["selftest", "--postgres", &as_login(&url, &l.worker)]).output(),
    )
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let dir = TempDir::new("roles");
    let worker = spawn_worker(&dir, &sbworker::demo::worker_config_text(&as_login(&url, &l.worker), 2));
    // The planners, as the sender: the roster loaded and edited; its triggers send.
    let mut planner = client(&as_login(&url, &l.sender)).await;
    let roster = Roster::generate(8, 3, true);
    roster.load(&mut planner).await.unwrap();
    for e in sbworker::demo::edits::burst(&roster, 16, 3) {
        e.apply(&planner).await.unwrap();
    }
    wait_drained(&admin, Duration::from_secs(120), |_| {}).await.unwrap();
    let verdict = verify(&admin, &Tables::built_in().unwrap()).await.unwrap();
    assert!(verdict.problems.is_empty(), "{:?}", verdict.problems);
    assert_eq!(verdict.latest + verdict.faulted.len(), 8);
    // Payroll exports, as its login.
    let out = crate::common::within(
        120,
        "export",
        Command::new(BIN)
            .args(["export", "--postgres", &as_login(&url, &l.payroll), "--periode", &PERIODE_ID.to_string()])
            .output(),
    )
    .await
    .unwrap();
    let csv = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{csv}{}", String::from_utf8_lossy(&out.stderr));
    assert!(csv.lines().count() > verdict.latest, "{csv}");
    // Housekeeping sweeps, as its login: after a bulk edit that sent nothing.
    let edit_first = async || {
        admin
            .batch_execute(&format!(
                "UPDATE rooster.dienstverband SET dagen_per_week = dagen_per_week WHERE id = {}",
                sbworker::demo::roster::FIRST_ID
            ))
            .await
            .unwrap();
    };
    let sweep = async || {
        let out = crate::common::within(
            120,
            "sweep",
            Command::new(BIN).args(["sweep", "--postgres", &as_login(&url, &l.housekeeping)]).output(),
        )
        .await
        .unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{said}");
        said
    };
    admin.batch_execute("SET rekenserver.vragen_uit = on").await.unwrap();
    edit_first().await;
    let said = sweep().await;
    assert!(said.contains("1 Vraags sent"), "{said}");
    wait_drained(&admin, Duration::from_secs(120), |_| {}).await.unwrap();
    let verdict = verify(&admin, &Tables::built_in().unwrap()).await.unwrap();
    assert!(verdict.problems.is_empty(), "{:?}", verdict.problems);
    assert_eq!(stop_worker(worker).await, Some(0));
    // A dialog whose far side an operator ended WITH CLEANUP while its request waited:
    // housekeeping's sweep finds it lost and sends the key again, as its login.
    admin.batch_execute("SET rekenserver.vragen_uit = off").await.unwrap();
    edit_first().await;
    admin
        .batch_execute("SELECT sb.end_conversation_cleanup(t.handle) FROM sb.endpoint t WHERE NOT t.is_initiator")
        .await
        .unwrap();
    let said = sweep().await;
    let lost: i64 = admin
        .query_one("SELECT count(*) FROM rekenserver.berekening_log WHERE foutmelding LIKE 'lost: %'", &[])
        .await
        .unwrap()
        .get(0);
    assert!(lost >= 1, "{said}");
    // None of them is a superuser, or may create roles or databases.
    let mighty: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_roles WHERE rolname = ANY($1) AND (rolsuper OR rolcreaterole OR rolcreatedb)",
            &[&vec![l.worker.clone(), l.sender.clone(), l.payroll.clone(), l.housekeeping.clone()]],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(mighty, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_is_refused_what_is_not_its_job() {
    let (url, admin, l) = world().await;
    let worker = client(&as_login(&url, &l.worker)).await;
    let sender = client(&as_login(&url, &l.sender)).await;
    let payroll = client(&as_login(&url, &l.payroll)).await;
    let housekeeping = client(&as_login(&url, &l.housekeeping)).await;
    let nobody = client(&as_login(&url, &l.nobody)).await;
    let reken = "loonfactorberekening_reken";
    // The worker: not the roster, not the broker's tables, no DDL, not payroll's export.
    assert!(
        refused(&worker, "SELECT count(*) FROM rooster.tijdblok")
            .await
            .contains("permission denied for schema rooster")
    );
    assert!(refused(&worker, "SELECT count(*) FROM sb.message").await.contains("permission denied for table message"));
    assert!(
        refused(&worker, "SELECT sb.create_queue('mine')")
            .await
            .contains("permission denied for function create_queue")
    );
    assert!(
        refused(&worker, "CREATE TABLE sbworker.mine (x int)").await.contains("permission denied for schema sbworker")
    );
    assert!(refused(&worker, "UPDATE rekenserver.resultaat SET export_status = 2").await.contains("permission denied"));
    assert!(
        refused(&worker, "SELECT rekenserver.stuur_vraag(1, 1)")
            .await
            .contains("permission denied for function stuur_vraag")
    );
    // The sender: sends only through the roster's triggers (which build the Vraag from
    // the roster): no Vraag of its own making, no receiving, no bookkeeping.
    for sql in [
        format!("SELECT * FROM sb.receive('{reken}')"),
        "SELECT sb.begin_dialog('/Rekenserver/LoonfactorBerekening/DataService', \
         '/Rekenserver/LoonfactorBerekening/RekenService', '/Rekenserver/LoonfactorBerekening/DataContract')"
            .to_owned(),
        "SELECT sb.send(gen_random_uuid(), '/Rekenserver/LoonfactorBerekening/Vraag', '<x/>')".to_owned(),
    ] {
        assert!(refused(&sender, &sql).await.contains("permission denied for schema sb"), "{sql}");
    }
    assert!(
        refused(&sender, "SELECT count(*) FROM sbworker.dead_letter")
            .await
            .contains("permission denied for schema sbworker")
    );
    // Payroll: no sending, no claiming versions.
    assert!(
        refused(&payroll, "SELECT sb.send(gen_random_uuid(), 'x', NULL)")
            .await
            .contains("permission denied for schema sb")
    );
    assert!(
        refused(&payroll, "INSERT INTO sbworker.answered_version VALUES (1, 1, 1)").await.contains("permission denied")
    );
    assert!(
        refused(&payroll, "DELETE FROM rekenserver.resultaat").await.contains("permission denied for table resultaat")
    );
    // Housekeeping: no receiving.
    assert!(
        refused(&housekeeping, &format!("SELECT * FROM sb.receive('{reken}')"))
            .await
            .contains("permission denied for schema sb")
    );
    // A login with no role: nothing at all.
    for sql in [
        format!("SELECT sb.channel('{reken}')"),
        "SELECT sb.begin_dialog('a', 'b', 'c')".to_owned(),
        "SELECT count(*) FROM sbworker.message_attempt".to_owned(),
        "SELECT rekenserver.noteer_fout(gen_random_uuid(), 'x')".to_owned(),
        "SELECT count(*) FROM rekenserver.resultaat".to_owned(),
        "SELECT count(*) FROM rooster.dienst".to_owned(),
    ] {
        assert!(refused(&nobody, &sql).await.contains("permission denied"), "{sql}");
    }
    // Service Broker's rights per queue and service: a queue and a service the worker was
    // not granted are refused though it may call the functions, and allowed once granted.
    admin
        .batch_execute(
            "SELECT sb.create_queue('other_q', p_poison_handling => false);
             SELECT sb.create_service('/Other', 'other_q', ARRAY['/Rekenserver/LoonfactorBerekening/DataContract']);",
        )
        .await
        .unwrap();
    let e = refused(&worker, "SELECT * FROM sb.receive('other_q')").await;
    assert!(e.contains("The RECEIVE permission was denied on queue other_q"), "{e}");
    // A dialog from /Other to the calculation: the worker receives it, but may not
    // answer to /Other.
    admin
        .batch_execute(
            "SELECT sb.send(sb.begin_dialog('/Other', '/Rekenserver/LoonfactorBerekening/RekenService', \
             '/Rekenserver/LoonfactorBerekening/DataContract'), '/Rekenserver/LoonfactorBerekening/Vraag', '<x/>')",
        )
        .await
        .unwrap();
    worker.batch_execute("BEGIN").await.unwrap();
    let target: Uuid =
        worker.query_one(&format!("SELECT conversation_handle FROM sb.receive('{reken}')"), &[]).await.unwrap().get(0);
    let e = worker
        .execute("SELECT sb.send($1, '/Rekenserver/LoonfactorBerekening/Antwoord', '<y/>')", &[&target])
        .await
        .unwrap_err();
    let e = e.as_db_error().unwrap().message().to_owned();
    assert!(e.contains("The SEND permission was denied on service /Other"), "{e}");
    worker.batch_execute("ROLLBACK").await.unwrap();
    // Through the transport, the refusal is SQL Server's 229, named.
    let mut s = sbworker::broker::postgres::Session::open(&as_login(&url, &l.worker)).await.unwrap();
    s.begin().await.unwrap();
    let e = s.receive("other_q", 1, None, Duration::ZERO).await.unwrap_err();
    assert_eq!(e.number, 229, "{e}");
    assert!(e.message.contains("The RECEIVE permission was denied on queue other_q"), "{e}");
    let _ = s.rollback().await;
    admin.batch_execute("SELECT sb.grant_receive('other_q', 'sbworker_worker')").await.unwrap();
    worker.batch_execute("SELECT * FROM sb.receive('other_q')").await.expect("granted now");
    // The selftest, as payroll, says what the worker's login lacks and how to grant it.
    let out = crate::common::within(
        120,
        "selftest",
        Command::new(BIN).args(["selftest", "--postgres", &as_login(&url, &l.payroll)]).output(),
    )
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("--worker-role"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_gets_nothing_and_a_search_path_attack_changes_nothing() {
    let (url, admin, l) = world().await;
    // Every function of the broker's schemas: none executable by PUBLIC; every one a role
    // may call, and every SECURITY DEFINER one, has its search_path pinned.
    let open: Vec<String> = admin
        .query(
            "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname IN ('sb', 'sbworker', 'rekenserver', 'rooster')
                AND (p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0))",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(open.is_empty(), "executable by PUBLIC: {open:?}");
    let unpinned: Vec<String> = admin
        .query(
            "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname IN ('sb', 'sbworker', 'rekenserver', 'rooster')
                AND (p.prosecdef OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a
                                             JOIN pg_roles r ON r.oid = a.grantee WHERE r.rolname LIKE 'sbworker\\_%'))
                AND NOT (p.prosecdef AND coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false))",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(unpinned.is_empty(), "callable but not definer with a pinned search_path: {unpinned:?}");
    let schema_public: i64 = admin
        .query_one(
            "SELECT count(*) FROM pg_namespace n, aclexplode(n.nspacl) a
              WHERE n.nspname IN ('sb', 'sbworker', 'rekenserver', 'rooster') AND a.grantee = 0",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(schema_public, 0, "PUBLIC has a right on a broker schema");
    // The attack: housekeeping puts a schema of its own before pg_catalog, with a
    // gen_random_uuid that always gives the same value, and sends a key again
    // (rekenserver.stuur_vraag, which draws the Vraag's id with gen_random_uuid).
    let mut loader = client(&url).await;
    loader.batch_execute("SET rekenserver.vragen_uit = on").await.unwrap();
    Roster::generate(1, 1, false).load(&mut loader).await.unwrap();
    let key = (sbworker::demo::roster::FIRST_ID, PERIODE_ID);
    let evil = format!("evil_{}", &l.housekeeping);
    admin.batch_execute(&format!("CREATE SCHEMA {evil} AUTHORIZATION {}", l.housekeeping)).await.unwrap();
    let keeper = client(&as_login(&url, &l.housekeeping)).await;
    keeper
        .batch_execute(&format!(
            "CREATE FUNCTION {evil}.gen_random_uuid() RETURNS uuid LANGUAGE sql AS $$ SELECT '00000000-0000-0000-0000-000000000001'::uuid $$;
             SET search_path = {evil}, pg_catalog;"
        ))
        .await
        .unwrap();
    let fixed: Uuid = keeper.query_one("SELECT gen_random_uuid()", &[]).await.unwrap().get(0);
    assert_eq!(fixed, Uuid::from_u128(1), "the attacker's function wins in its own session");
    let send_again = async || -> Uuid {
        let handle: Uuid =
            keeper.query_one("SELECT rekenserver.stuur_vraag($1, $2)", &[&key.0, &key.1]).await.unwrap().get(0);
        admin
            .query_one("SELECT vraag_id FROM rekenserver.berekening_log WHERE dialog_handle = $1", &[&handle])
            .await
            .unwrap()
            .get(0)
    };
    let pinned = send_again().await;
    assert_ne!(pinned, fixed, "the pinned function used pg_catalog's gen_random_uuid");
    // The same attack on the function with its search_path not pinned does take: the
    // check above can fail.
    admin.batch_execute("ALTER FUNCTION rekenserver.stuur_vraag(int, int, boolean) RESET search_path").await.unwrap();
    let hijacked = send_again().await;
    assert_eq!(hijacked, fixed, "unpinned, the caller's search_path reaches inside");
    admin
        .batch_execute(
            "ALTER FUNCTION rekenserver.stuur_vraag(int, int, boolean) SET search_path = pg_catalog, pg_temp",
        )
        .await
        .unwrap();
}
