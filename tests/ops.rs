//! `sbworker status` and `sbworker dead-letter` against a live installation, on the
//! PostgreSQL broker (as a housekeeping login) and over TDS through the emulator: a
//! request the calculation kept failing on is diverted, then listed, shown and replayed
//! with the real worker running, and its key ends with its latest result; `status`
//! exits 1 with no worker alive and on a disabled queue, 0 when all is well, and its
//! JSON has the documented shape.

use std::process::Output;
use std::sync::Arc;

use sbworker::broker::mssql::MssqlTransport;
use sbworker::broker::postgres::PostgresTransport;
use sbworker::demo::check;
use sbworker::demo::roster::{FIRST_ID, PERIODE_ID, Roster};
use sbworker::demo::{self, DATA_QUEUE, REKEN_QUEUE};
use sbworker::engine::Tables;
use sbworker::ops::Backend as _;
use tokio_postgres::Client;
use uuid::Uuid;

use crate::common::calc::{InProcess, TempDir, spawn_worker, stop_worker, wait_until};
use crate::common::letters::{handlers, plant};
use crate::common::pg::fresh_roster_db;
use crate::common::tds::emulator_with;
use crate::common::within;

const BIN: &str = env!("CARGO_BIN_EXE_sbworker");

async fn count(c: &Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).await.unwrap().get(0)
}

/// Runs `sbworker ARGS` with the configuration file `config`.
async fn sbworker(config: &std::path::Path, args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(&args[..1]).arg("--config").arg(config).args(&args[1..]);
    cmd.env("NO_COLOR", "1").env("USER", "ops-test").env_remove("SUDO_USER");
    within(60, "sbworker status / dead-letter", cmd.output()).await.unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Postgres,
    Tds,
}

async fn a_diverted_request_is_listed_shown_replayed_and_its_key_ends_with_its_latest_result(kind: Kind) {
    let (url, mut c) = fresh_roster_db().await;
    let keys = 4;
    let bad = FIRST_ID + 1;
    Roster::generate(keys, 5, false).load(&mut c).await.unwrap();
    let dir = TempDir::new("ops");
    // The worker's configuration, on this back end; the operator's: the same, as a
    // login with the housekeeping role on PostgreSQL (through the emulator, the
    // emulator's own).
    let mut worker_cfg = demo::worker_config_text(&url, 2);
    let ops_cfg;
    let mut monitor_cfg = None;
    let _emulator = match kind {
        Kind::Postgres => {
            let tag = &Uuid::new_v4().simple().to_string()[..8];
            let (login, monitor) = (format!("ops_{tag}"), format!("mon_{tag}"));
            c.batch_execute(&format!(
                "CREATE ROLE {login} LOGIN; GRANT sbworker_housekeeping TO {login}; \
                 CREATE ROLE {monitor} LOGIN; GRANT sbworker_monitor TO {monitor};"
            ))
            .await
            .unwrap();
            let as_login = |l: &str| {
                let u = url.replace("user=postgres", &format!("user={l}"));
                assert_ne!(u, url);
                demo::worker_config_text(&u, 2)
            };
            ops_cfg = as_login(&login);
            monitor_cfg = Some(as_login(&monitor));
            None
        }
        Kind::Tds => {
            let (conn, stop) = emulator_with(&url, Arc::new(Default::default())).await;
            let pg_broker = format!("kind = \"postgres\"\nconnection = {}\n", toml::Value::String(url.clone()));
            let ms_broker = format!("kind = \"mssql\"\nconnection = {}\n", toml::Value::String(conn.clone()));
            assert!(worker_cfg.contains(&pg_broker));
            worker_cfg = worker_cfg.replace(&pg_broker, &ms_broker);
            ops_cfg = worker_cfg.clone();
            Some((conn, stop))
        }
    };
    let ops = dir.0.join("ops.toml");
    std::fs::write(&ops, &ops_cfg).unwrap();

    // A worker whose calculation fails every request of one key: it is diverted after
    // three attempts; the other keys are stored.
    let mut config = sbworker::config::from_str(&worker_cfg, &Vec::new()).unwrap();
    config.worker.heartbeat_ms = 200;
    let w = match kind {
        Kind::Postgres => InProcess::start_on(PostgresTransport::new(&url), config, handlers(bad)),
        Kind::Tds => {
            let conn = &config.broker.connection;
            InProcess::start_on(MssqlTransport::new(conn).unwrap(), config.clone(), handlers(bad))
        }
    };
    wait_until("the failing request is diverted and the others are stored", || async {
        count(&c, "SELECT count(*) FROM sbworker.dead_letter").await == 1
            && count(&c, "SELECT count(*) FROM rekenserver.resultaat").await == keys as i64 - 1
    })
    .await;
    // While it runs, status sees it (its heartbeat) and the dead letter.
    let o = sbworker(&ops, &["status", "--json"]).await;
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
    assert_eq!(s["workers"].as_array().unwrap().len(), 1, "{s}");
    // Its queues with their readers (how many depends on timing: once the work is done
    // an idle queue's supervisor lets its readers go and waits for work itself).
    let q = &s["workers"][0]["queues"][REKEN_QUEUE];
    assert!(q["readers"].as_i64().is_some() && q["busy"].as_i64().is_some(), "{s}");
    w.finish().await;

    // Stopped cleanly, it removed its heartbeat: no worker alive needs attention.
    let o = sbworker(&ops, &["status"]).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("no worker alive"), "{}", text(&o));

    // The real worker, as a process.
    let worker = spawn_worker(&dir, &worker_cfg);
    wait_until("the worker beats", || async { count(&c, "SELECT count(*) FROM sbworker.worker_instance").await == 1 })
        .await;

    // list: the id, the queue, the key, the attempts, the reason.
    let o = sbworker(&ops, &["dead-letter", "list"]).await;
    assert!(o.status.success(), "{}", text(&o));
    let listed = text(&o);
    let id: i64 = count(&c, "SELECT id FROM sbworker.dead_letter").await;
    assert!(listed.contains(&format!("{bad}/{PERIODE_ID} v1")), "{listed}");
    assert!(listed.contains(REKEN_QUEUE) && listed.contains("choked on dienstverband"), "{listed}");
    assert!(listed.lines().any(|l| l.trim_start().starts_with(&id.to_string())), "{listed}");

    // show: where it came from, the reason, the body indented.
    let o = sbworker(&ops, &["dead-letter", "show", &id.to_string()]).await;
    assert!(o.status.success(), "{}", text(&o));
    let shown = text(&o);
    assert!(shown.contains("sent by /Rekenserver/LoonfactorBerekening/DataService"), "{shown}");
    assert!(shown.contains(&format!("\n  <Dienstverband Id=\"{bad}\">")), "the body is indented: {shown}");
    assert!(shown.contains("attempts:      3"), "{shown}");

    // The key waits for its result: with a threshold of 0 minutes it is stale.
    let o = sbworker(&ops, &["status", "--stale-minutes", "0"]).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("1 keys are stale"), "{}", text(&o));

    // An entry whose Vraag asks for a version the roster never reached (planted by hand
    // here, as a compromised worker could) is refused: it would block the key's real
    // results. The sending service is always the conversation's, whatever the row said.
    let forged: i64 = c
        .query_one(
            "INSERT INTO sbworker.dead_letter (queue, service_name, service_contract_name, conversation_group_id, \
             conversation_handle, message_sequence_number, message_type_name, message_body, attempts, reason, \
             far_service) \
             SELECT queue, service_name, service_contract_name, conversation_group_id, conversation_handle, \
                    message_sequence_number, message_type_name, \
                    convert_to(replace(convert_from(message_body, 'UTF8'), 'Versie=\"1\"', 'Versie=\"99\"'), 'UTF8'), \
                    attempts, 'planted', 'forged' \
               FROM sbworker.dead_letter WHERE id = $1 RETURNING id",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    let far: Option<String> =
        c.query_one("SELECT far_service FROM sbworker.dead_letter WHERE id = $1", &[&forged]).await.unwrap().get(0);
    assert_ne!(far.as_deref(), Some("forged"));
    let o = sbworker(&ops, &["dead-letter", "replay", &forged.to_string()]).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("which the roster never reached"), "{}", text(&o));
    c.execute("DELETE FROM sbworker.dead_letter WHERE id = $1", &[&forged]).await.unwrap();

    // replay: sent again; the key ends with its latest result.
    let o = sbworker(&ops, &["dead-letter", "replay", &id.to_string()]).await;
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("sent again on dialog"), "{}", text(&o));
    wait_until("the replayed key is stored", || async {
        count(
            &c,
            &format!(
                "SELECT count(*) FROM rekenserver.resultaat r JOIN rekenserver.sleutel s USING (dienstverband_id, periode_id) \
                 WHERE r.dienstverband_id = {bad} AND r.versie = s.versie"
            ),
        )
        .await
            == 1
    })
    .await;
    check::wait_drained(&c, std::time::Duration::from_secs(60), |_| {}).await.unwrap();
    let verdict = check::verify(&c, &Tables::built_in().unwrap()).await.unwrap();
    assert!(verdict.problems.is_empty(), "{:?}", verdict.problems);
    assert_eq!(verdict.latest, keys);
    // The replayed version keeps its evidence: the Vraag as sent again.
    assert_eq!(
        count(
            &c,
            &format!(
                "SELECT count(*) FROM rekenserver.resultaat_historie h JOIN rekenserver.sleutel s USING (dienstverband_id, periode_id)
                  WHERE h.dienstverband_id = {bad} AND h.versie = s.versie AND h.vraag LIKE '%LoonfactorBerekeningVraag%'"
            )
        )
        .await,
        1
    );
    // The replay is in the calculation log, answered and stored.
    assert_eq!(
        count(
            &c,
            &format!(
                "SELECT count(*) FROM rekenserver.berekening_log WHERE dienstverband_id = {bad} AND uitkomst = 'opgeslagen'"
            )
        )
        .await,
        1
    );

    // The entry stays, marked replayed: by whom, when, on which dialog.
    let o = sbworker(&ops, &["dead-letter", "list", "--json"]).await;
    let line: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().next().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
    assert_eq!(line["replays"], 1, "{line}");
    assert!(line["replayed_by"].as_str().unwrap().starts_with("ops-test"), "{line}");
    assert!(line["replay_handle"].as_str().unwrap().parse::<Uuid>().is_ok(), "{line}");
    assert_eq!(line["key"], format!("{bad}/{PERIODE_ID} v1"), "{line}");

    // A missing entry is said, and the exit status says it.
    let o = sbworker(&ops, &["dead-letter", "replay", "999999"]).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("dead letter 999999 does not exist"), "{}", text(&o));

    // Only a request can begin a dialog again: an answer set aside on the data side is
    // refused with the reason.
    let answer: i64 = c
        .query_one(
            "INSERT INTO sbworker.dead_letter (queue, service_name, service_contract_name, conversation_group_id, \
             conversation_handle, message_sequence_number, message_type_name, message_body, attempts, reason, \
             far_service) VALUES ($1, '/Rekenserver/LoonfactorBerekening/DataService', \
             '/Rekenserver/LoonfactorBerekening/DataContract', gen_random_uuid(), gen_random_uuid(), 1, \
             '/Rekenserver/LoonfactorBerekening/Antwoord', '\\x3c612f3e', 3, 'the collector failed', \
             '/Rekenserver/LoonfactorBerekening/RekenService') RETURNING id",
            &[&DATA_QUEUE],
        )
        .await
        .unwrap()
        .get(0);
    let o = sbworker(&ops, &["dead-letter", "replay", &answer.to_string()]).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("only requests can be sent again"), "{}", text(&o));

    // replay --all: the answer set aside on the data side is not a request, the Vraag is
    // replayed already: nothing is sent, nothing fails.
    let o = sbworker(&ops, &["dead-letter", "replay", "--all"]).await;
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("replayed 0 dead letters, left 1 alone"), "{}", text(&o));

    // status: all is well (exit 0), and the documented shape.
    let o = sbworker(&ops, &["status", "--json"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["attention"], serde_json::json!([]), "{s}");
    for field in ["backend", "at", "queues", "workers", "conversations", "stale_keys", "sweeps", "last_export"] {
        assert!(s.get(field).is_some(), "{field} missing: {s}");
    }
    let queue = |name: &str| s["queues"].as_array().unwrap().iter().find(|q| q["queue"] == name).cloned().unwrap();
    let reken = queue(REKEN_QUEUE);
    assert_eq!((reken["enabled"].as_bool(), reken["dead_letters"].as_i64()), (Some(true), Some(1)), "{reken}");
    assert_eq!(reken["dead_letters_not_replayed"], 0, "{reken}");
    assert!(queue(DATA_QUEUE)["messages"].is_i64(), "{s}");
    assert_eq!(s["stale_keys"]["count"], 0, "{s}");
    assert!(s["conversations"]["by_state"].is_object(), "{s}");

    // The monitor's login reads the status and nothing else.
    if let Some(cfg) = &monitor_cfg {
        let monitor = dir.0.join("monitor.toml");
        std::fs::write(&monitor, cfg).unwrap();
        let o = sbworker(&monitor, &["status"]).await;
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let o = sbworker(&monitor, &["dead-letter", "list"]).await;
        assert_eq!(o.status.code(), Some(69), "{}", text(&o));
        assert!(text(&o).contains("permission denied"), "{}", text(&o));
    }

    // A disabled queue needs attention: exit 1, said in the table.
    c.batch_execute(&format!("SELECT sb.alter_queue('{REKEN_QUEUE}', p_enabled => false)")).await.unwrap();
    let o = sbworker(&ops, &["status"]).await;
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("DISABLED"), "{}", text(&o));
    assert!(text(&o).contains(&format!("queue {REKEN_QUEUE} is disabled")), "{}", text(&o));
    c.batch_execute(&format!("SELECT sb.alter_queue('{REKEN_QUEUE}', p_enabled => true)")).await.unwrap();
    let o = sbworker(&ops, &["status"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("all is well"), "{}", text(&o));

    // purge: by date, in batches, said.
    let o = sbworker(&ops, &["dead-letter", "purge", "--before", "2000-01-01"]).await;
    assert!(text(&o).contains("purged 0"), "{}", text(&o));
    let o = sbworker(&ops, &["dead-letter", "purge", "--before", "2999-01-01", "--batch", "1"]).await;
    assert!(o.status.success() && text(&o).contains("purged 2"), "{}", text(&o));
    assert!(
        text(&o).contains("deleted 1 dead letters diverted before 2999-01-01T00:00:00.000Z (2 so far)"),
        "{}",
        text(&o)
    );
    assert_eq!(count(&c, "SELECT count(*) FROM sbworker.dead_letter").await, 0);

    assert_eq!(stop_worker(worker).await, Some(0));
    assert_eq!(
        count(&c, "SELECT count(*) FROM sbworker.worker_instance").await,
        0,
        "a clean stop removes its heartbeat"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_diverted_request_is_listed_shown_replayed_and_its_key_ends_with_its_latest_result() {
    a_diverted_request_is_listed_shown_replayed_and_its_key_ends_with_its_latest_result(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tds_a_diverted_request_is_listed_shown_replayed_and_its_key_ends_with_its_latest_result() {
    a_diverted_request_is_listed_shown_replayed_and_its_key_ends_with_its_latest_result(Kind::Tds).await;
}

/// The status of an installation nobody serves, through the library, on the PostgreSQL
/// broker: the document parses into the documented type, and needs attention.
#[tokio::test]
async fn status_without_workers_needs_attention_and_parses_into_the_documented_type() {
    let (url, _c) = fresh_roster_db().await;
    let cfg = sbworker::config::from_str(&demo::worker_config_text(&url, 1), &Vec::new()).unwrap();
    let mut db = sbworker::broker::Database::connect(&cfg.broker, None).await.unwrap();
    let json = db.status_json(10, 60).await.unwrap();
    let s: sbworker::ops::status::Status = serde_json::from_str(&json).unwrap();
    assert_eq!(s.backend, "postgresql");
    assert_eq!(s.queues.len(), 2);
    let t = sbworker::ops::status::Thresholds { worker_silent_seconds: Some(30.0), stale_minutes: 60 };
    let needs = sbworker::ops::status::attention(&s, t);
    assert_eq!(
        needs,
        vec![
            "no worker alive (no heartbeat in the last 30 s; a worker with worker.heartbeat_ms = 0 does not beat)"
                .to_string()
        ]
    );
    let table = sbworker::ops::status::render(&s, t, false);
    assert!(table.contains(REKEN_QUEUE) && table.contains("needs attention"), "{table}");
    // A request in flight for longer than the stale threshold needs attention too (a
    // worker behind, or a dialog lost out of the sweep's sight).
    assert_eq!(s.conversations.oldest_request_seconds, None, "no request is in flight");
    let mut late = s.clone();
    late.conversations.oldest_request_seconds = Some(2.0 * 3600.0);
    let needs = sbworker::ops::status::attention(&late, t);
    assert!(needs.iter().any(|l| l.starts_with("the oldest request in flight has waited")), "{needs:?}");
    late.conversations.oldest_request_seconds = Some(30.0 * 60.0);
    assert_eq!(sbworker::ops::status::attention(&late, t).len(), 1, "within the threshold: only the workers");
    // SQL Server's transmission queue (none on PostgreSQL): a message waiting to leave
    // for another instance for minutes needs attention, saying why it waits; one just
    // sent is only listed.
    assert!(s.transmission.is_none(), "PostgreSQL has no transmission queue");
    let mut routed = s.clone();
    let waiting = |secs: f64, status: &str| sbworker::ops::status::Transmission {
        far_service: Some("/Rekenserver/LoonfactorBerekening/RekenService".into()),
        messages: 3,
        oldest_seconds: Some(secs),
        status: Some(status.into()),
    };
    routed.transmission = Some(vec![waiting(5.0, "")]);
    assert_eq!(sbworker::ops::status::attention(&routed, t).len(), 1, "a message just sent: only the workers");
    assert!(sbworker::ops::status::render(&routed, t, false).contains("RekenService: 3 messages, the oldest 5 s"));
    routed.transmission = Some(vec![waiting(600.0, "Connection attempt failed with error: '10061(No connection)'.")]);
    let needs = sbworker::ops::status::attention(&routed, t);
    assert!(
        needs.iter().any(|l| l.starts_with(
            "3 messages for /Rekenserver/LoonfactorBerekening/RekenService wait in \
             sys.transmission_queue, the oldest for 10 min: Connection attempt failed"
        )),
        "{needs:?}"
    );
}

/// `sbworker web` on the PostgreSQL broker: the overview (queues, the attention line of
/// `status`), its document, read-only (another method refused), never the connection's
/// password, and it stops on SIGTERM with 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_overview_shows_the_queues_read_only_and_never_the_password() {
    let (url, _c) = fresh_roster_db().await;
    let dir = TempDir::new("web");
    // The cluster trusts local logins: the password is never checked, only carried.
    let secret = "geheim-Wachtwoord-9137";
    let config = dir.0.join("sbworker.toml");
    std::fs::write(&config, demo::worker_config_text(&format!("{url} password={secret}"), 1)).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let web = tokio::process::Command::new(BIN)
        .arg("web")
        .arg("--config")
        .arg(&config)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--silent-seconds", "30"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let curl = |path: &'static str, extra: &'static [&'static str]| crate::common::calc::curl(port, path, extra);
    wait_until("the page is served", || async { curl("/", &[]).await.starts_with("HTTP/1.1 200") }).await;
    let page = curl("/", &[]).await;
    assert!(page.contains("text/html"), "{page}");
    assert!(page.contains(REKEN_QUEUE) && page.contains(DATA_QUEUE), "{page}");
    assert!(page.contains("no worker alive"), "the attention line of status: {page}");
    assert!(!page.contains(secret), "no password on the page");
    let doc = curl("/status.json", &[]).await;
    assert!(doc.starts_with("HTTP/1.1 200") && doc.contains("\"queues\""), "{doc}");
    assert!(!doc.contains(secret));
    assert!(curl("/", &["-X", "POST"]).await.starts_with("HTTP/1.1 405"), "read-only");
    assert!(curl("/nope", &[]).await.starts_with("HTTP/1.1 404"));
    // Another host's name (a site rebinding its name to 127.0.0.1): refused.
    let rebound = curl("/status.json", &["-H", "Host: rebound.example:80"]).await;
    assert!(rebound.starts_with("HTTP/1.1 421") && !rebound.contains("\"queues\""), "{rebound}");
    assert!(page.contains("content-security-policy: default-src 'none'"), "{page}");
    let pid = web.id().unwrap() as i32;
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let out = within(60, "sbworker web stops", web.wait_with_output()).await.unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains(secret), "no password in its output");
}

/// Starts `sbworker web` with `config` on a free port (`extra` flags after it); the
/// child and its port, once it serves.
async fn web(config: &std::path::Path, extra: &[&str]) -> (tokio::process::Child, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = tokio::process::Command::new(BIN)
        .arg("web")
        .arg("--config")
        .arg(config)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--silent-seconds", "30", "--refresh-seconds", "3600"])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_until("the page is served", || async {
        crate::common::calc::curl(port, "/status.json", &[]).await.starts_with("HTTP/1.1 200")
    })
    .await;
    (child, port)
}

/// The value of the first form field `name` on `page`.
fn field(page: &str, name: &str) -> String {
    let at = page.find(&format!("name=\"{name}\" value=\"")).unwrap_or_else(|| panic!("no field {name}: {page}"));
    let rest = &page[at + name.len() + 15..];
    rest[..rest.find('"').unwrap()].to_owned()
}

/// The web page's actions on the PostgreSQL broker, driven with curl: refused (and
/// nothing changed) on a read-only page, without a person signed in, without the form's
/// token or with another, and for a login whose role may not; a purge by filter takes
/// exactly the confirmed set (not a letter diverted after the confirmation) or, when the
/// set changed, nothing; each action is in the action log with the login that did it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_actions_need_a_signed_in_login_its_token_and_its_rights_and_purge_the_confirmed_set() {
    let (url, c) = fresh_roster_db().await;
    let dir = TempDir::new("web-actions");
    let tag = &Uuid::new_v4().simple().to_string()[..8];
    let (clerk, payer, monitor) = (format!("clerk_{tag}"), format!("payer_{tag}"), format!("mon_{tag}"));
    c.batch_execute(&format!(
        "CREATE ROLE {clerk} LOGIN; GRANT sbworker_housekeeping TO {clerk}; \
         CREATE ROLE {payer} LOGIN; GRANT sbworker_payroll TO {payer}; \
         CREATE ROLE {monitor} LOGIN; GRANT sbworker_monitor TO {monitor};"
    ))
    .await
    .unwrap();
    for _ in 0..3 {
        plant(&c, "planted: purge me").await;
    }
    for _ in 0..2 {
        plant(&c, "planted: keep me").await;
    }
    let letters = || count(&c, "SELECT count(*) FROM sbworker.dead_letter");
    // The page's own login: the monitor's (the status, not the dead letters); a password
    // the cluster (trusting local logins) carries and never checks.
    let secret = "geheim-Wachtwoord-7731";
    let config = dir.0.join("web.toml");
    let u = url.replace("user=postgres", &format!("user={monitor} password={secret}"));
    assert_ne!(u, url);
    std::fs::write(&config, demo::worker_config_text(&u, 1)).unwrap();
    let curl = |port: u16, path: &str, args: &[&str]| {
        let (path, args): (String, Vec<String>) = (path.into(), args.iter().map(|s| s.to_string()).collect());
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            crate::common::calc::curl(port, &path, &args).await
        }
    };

    // Read-only: no sign-in, every action refused.
    let (ro, port) = web(&config, &[]).await;
    assert!(curl(port, "/signin", &[]).await.starts_with("HTTP/1.1 404"));
    let r = curl(port, "/letters/purge", &["-d", "reason=purge&upto=999&expected=3&csrf=x"]).await;
    assert!(r.starts_with("HTTP/1.1 403") && r.contains("read-only"), "{r}");
    // Read-only, the dead letters are asked on the page's own login, which may not
    // read them: the database says so.
    let r = curl(port, "/letters", &[]).await;
    assert!(r.contains("permission denied"), "{r}");
    drop(ro);
    // Actions on a non-loopback address: refused at start; so is every address without
    // the names it is reached by.
    let o = sbworker(&config, &["web", "--actions", "--listen", "0.0.0.0:0"]).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--actions needs a loopback --listen address"), "{}", text(&o));
    let o = sbworker(&config, &["web", "--listen", "0.0.0.0:0"]).await;
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--host NAME:PORT"), "{}", text(&o));
    // Beyond this machine, read-only: the overview, and nothing of payroll.
    let wide = std::net::TcpListener::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port();
    let host = format!("payroll-box:{wide}");
    let _beyond = tokio::process::Command::new(BIN)
        .arg("web")
        .arg("--config")
        .arg(&config)
        .args(["--listen", &format!("0.0.0.0:{wide}"), "--host", &host, "--silent-seconds", "30"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let h = format!("Host: {host}");
    wait_until("the page beyond this machine is served", || async {
        curl(wide, "/status.json", &["-H", &h]).await.starts_with("HTTP/1.1 200")
    })
    .await;
    assert!(curl(wide, "/", &["-H", &h]).await.starts_with("HTTP/1.1 200"));
    assert!(curl(wide, "/", &[]).await.starts_with("HTTP/1.1 421"), "another Host is refused");
    for p in ["/letters", "/sleutels", "/runs", "/actions"] {
        let r = curl(wide, p, &["-H", &h]).await;
        assert!(r.starts_with("HTTP/1.1 403") && r.contains("Not served on this address"), "{p}: {r}");
    }

    let (page, port) = web(&config, &["--actions"]).await;
    let jar = dir.0.join("cookies");
    let jar = jar.to_str().unwrap();
    let session = |extra: &[&str]| {
        let mut a = vec!["-b", jar, "-c", jar];
        a.extend_from_slice(extra);
        a.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let with = |port: u16, path: &str, extra: &[&str]| {
        let a = session(extra);
        let path = path.to_owned();
        async move {
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            crate::common::calc::curl(port, &path, &a).await
        }
    };
    // No one signed in: refused.
    let r = curl(port, "/letters/purge", &["-d", "reason=purge&upto=999&expected=3&csrf=x"]).await;
    assert!(r.starts_with("HTTP/1.1 401") && r.contains("Sign in first"), "{r}");
    // With actions on, the dead letters and the action log are for signed-in people.
    for p in ["/letters", "/letters/1", "/actions", "/sleutels", "/sleutel?dienstverband=1&periode=1", "/runs"] {
        let r = curl(port, p, &[]).await;
        assert!(r.starts_with("HTTP/1.1 401") && r.contains("Sign in to see this"), "{p}: {r}");
    }
    // A login the database does not know is refused.
    let form = with(port, "/signin", &[]).await;
    let t = field(&form, "csrf");
    let r = with(port, "/signin", &["-d", &format!("login=nobody_{tag}&password=x&csrf={t}")]).await;
    assert!(r.starts_with("HTTP/1.1 401") && r.contains("refused this login"), "{r}");
    // A password is needed, and the sign-in form's token.
    let r = with(port, "/signin", &["-d", &format!("login={clerk}&password=&csrf={t}")]).await;
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    let r = with(port, "/signin", &["-d", &format!("login={clerk}&password=x&csrf=wrong")]).await;
    assert!(r.starts_with("HTTP/1.1 403"), "{r}");

    // The clerk signs in (housekeeping): sees the letters and may act.
    let form = with(port, "/signin", &[]).await;
    let t = field(&form, "csrf");
    let r = with(port, "/signin", &["-d", &format!("login={clerk}&password=x&csrf={t}")]).await;
    assert!(r.starts_with("HTTP/1.1 303"), "{r}");
    let list = with(port, "/letters?reason=purge+me", &[]).await;
    assert!(list.contains("3 dead letters: reason holds"), "{list}");
    assert!(list.contains(&format!("signed in as <b id=\"who\">{clerk}</b>")), "{list}");
    let token = field(&list, "csrf");
    let confirm = with(port, "/letters/confirm?action=purge&reason=purge+me", &[]).await;
    assert!(confirm.contains("This will purge <b>3</b> dead letters"), "{confirm}");
    let (upto, expected, sum) = (field(&confirm, "upto"), field(&confirm, "expected"), field(&confirm, "sum"));
    assert_eq!(expected, "3");
    let purge = |csrf: String| {
        let body = format!("reason=purge+me&replayed=&queue=&upto={upto}&expected={expected}&sum={sum}&csrf={csrf}");
        with(port, "/letters/purge", &["-d", &body])
    };
    // Without the token, or with another: refused, nothing deleted.
    let r = with(port, "/letters/purge", &["-d", &format!("reason=purge+me&upto={upto}&expected=3")]).await;
    assert!(r.starts_with("HTTP/1.1 403") && r.contains("token"), "{r}");
    let r = purge("0".repeat(64)).await;
    assert!(r.starts_with("HTTP/1.1 403") && r.contains("token"), "{r}");
    assert_eq!(letters().await, 5);
    // A letter diverted after the confirmation is not taken; the confirmed 3 are.
    let late = plant(&c, "planted: purge me too").await;
    let r = purge(token.clone()).await;
    assert!(r.starts_with("HTTP/1.1 200") && r.contains("Purged 3 dead letters"), "{r}");
    assert_eq!(letters().await, 3);
    assert_eq!(count(&c, &format!("SELECT count(*) FROM sbworker.dead_letter WHERE id = {late}")).await, 1);
    // A set that changed since its confirmation: nothing is deleted. By its count; and
    // with the same count but another letter (one gone, and one committed late with an
    // id below the confirmed bound, as a diverting transaction that began earlier does).
    let body = format!("reason=keep+me&upto={late}&expected=5&sum=0&csrf={token}");
    let r = with(port, "/letters/purge", &["-d", &body]).await;
    assert!(r.starts_with("HTTP/1.1 409") && r.contains("picks 2 dead letters now, not the 5 confirmed"), "{r}");
    assert_eq!(letters().await, 3);
    let confirm = with(port, "/letters/confirm?action=purge&reason=keep+me", &[]).await;
    let (keep_upto, keep_sum) = (field(&confirm, "upto"), field(&confirm, "sum"));
    let gone: i64 = count(&c, "SELECT min(id) FROM sbworker.dead_letter WHERE reason = 'planted: keep me'").await;
    c.execute("DELETE FROM sbworker.dead_letter WHERE id = $1", &[&gone]).await.unwrap();
    c.execute(
        "INSERT INTO sbworker.dead_letter (id, queue, service_name, service_contract_name, conversation_group_id, \
         conversation_handle, message_sequence_number, message_type_name, attempts, reason) OVERRIDING SYSTEM VALUE \
         VALUES (1, 'q', 's', 'c', gen_random_uuid(), gen_random_uuid(), 1, 't', 3, 'planted: keep me, late')",
        &[],
    )
    .await
    .unwrap();
    let body = format!("reason=keep+me&upto={keep_upto}&expected=2&sum={keep_sum}&csrf={token}");
    let r = with(port, "/letters/purge", &["-d", &body]).await;
    assert!(r.starts_with("HTTP/1.1 409") && r.contains("not the same ones"), "the same count, not the same set: {r}");
    assert_eq!(letters().await, 3);
    c.execute("DELETE FROM sbworker.dead_letter WHERE id = 1", &[]).await.unwrap();
    plant(&c, "planted: keep me").await;
    // The action log names the clerk's login.
    let log = with(port, "/actions", &[]).await;
    assert!(log.contains(&format!("<td>{clerk}</td><td>purge</td>")), "{log}");
    let who: String = c.query_one("SELECT who FROM sbworker.action_log", &[]).await.unwrap().get(0);
    assert_eq!(who, clerk);
    // A replay by filter: the two left are answers, which cannot begin a dialog again;
    // each is said, nothing is sent, and the action is logged.
    let confirm = with(port, "/letters/confirm?action=replay&reason=keep+me", &[]).await;
    assert!(confirm.contains("This will replay <b>2</b> dead letters"), "{confirm}");
    let body = format!(
        "reason=keep+me&upto={}&expected=2&sum={}&csrf={token}",
        field(&confirm, "upto"),
        field(&confirm, "sum")
    );
    let r = with(port, "/letters/replay", &["-d", &body]).await;
    assert!(r.contains("Replayed 0 dead letters") && r.contains("2 could not be sent"), "{r}");
    assert!(r.contains("only requests can be sent again"), "{r}");
    assert_eq!(count(&c, "SELECT count(*) FROM sbworker.action_log WHERE action = 'replay'").await, 1);
    // One letter purged from its own page: asked first, then that letter alone.
    let page_of = with(port, &format!("/letters/{late}"), &[]).await;
    assert!(page_of.contains(&format!("/letters/confirm?action=purge&amp;id={late}")), "{page_of}");
    let confirm = with(port, &format!("/letters/confirm?action=purge&id={late}"), &[]).await;
    assert!(confirm.contains("This will purge <b>1</b> dead letters: dead letter"), "{confirm}");
    let body = format!("id={late}&upto={}&expected=1&sum={late}&csrf={token}", field(&confirm, "upto"));
    let r = with(port, "/letters/purge", &["-d", &body]).await;
    assert!(r.contains("Purged 1 dead letters"), "{r}");
    assert_eq!(letters().await, 2);
    assert_eq!(count(&c, &format!("SELECT count(*) FROM sbworker.dead_letter WHERE id = {late}")).await, 0);
    // Signed out, the session's cookie and token are worth nothing (the cookie sent
    // again by hand: curl drops it when told to).
    let jar_text = std::fs::read_to_string(jar).unwrap();
    let cookie = jar_text.lines().find(|l| l.contains("sbworker_session")).unwrap().split('\t').next_back().unwrap();
    let cookie = format!("Cookie: sbworker_session={cookie}");
    let r = with(port, "/signout", &["-d", &format!("csrf={token}")]).await;
    assert!(r.starts_with("HTTP/1.1 303"), "{r}");
    let body = format!("reason=keep+me&upto={late}&expected=2&sum=0&csrf={token}");
    let r = curl(port, "/letters/purge", &["-H", &cookie, "-d", &body]).await;
    assert!(r.starts_with("HTTP/1.1 401"), "{r}");
    assert_eq!(letters().await, 2);

    // The payroll login: the page has its rights, so no dead letters and no purge.
    let form = with(port, "/signin", &[]).await;
    let t = field(&form, "csrf");
    let r = with(port, "/signin", &["-d", &format!("login={payer}&password=x&csrf={t}")]).await;
    assert!(r.starts_with("HTTP/1.1 303"), "{r}");
    let list = with(port, "/letters", &[]).await;
    assert!(list.contains("permission denied"), "{list}");
    let token = field(&list, "csrf");
    let r = with(port, "/actions", &[]).await;
    assert!(r.contains("permission denied"), "{r}");
    // It may not read the status: the overview is the page's own, and says so.
    let r = with(port, "/", &[]).await;
    assert!(r.starts_with("HTTP/1.1 200") && r.contains("id=\"not-yours\""), "{r}");
    // It reads the keys and the exports (not the runs).
    let r = with(port, "/sleutels", &[]).await;
    assert!(r.starts_with("HTTP/1.1 200") && r.contains("id=\"sleutels\""), "{r}");
    let r = with(port, "/runs", &[]).await;
    assert!(r.starts_with("HTTP/1.1 200") && r.contains("The runs could not be read"), "{r}");
    assert!(r.contains("No export claimed yet"), "{r}");
    let body = format!("reason=keep+me&upto={late}&expected=2&sum=0&csrf={token}");
    let r = with(port, "/letters/purge", &["-d", &body]).await;
    assert!(r.contains("permission denied"), "{r}");
    assert_eq!(letters().await, 2);

    // No page said the page's password.
    for p in ["/", "/letters", "/actions", "/signin"] {
        assert!(!with(port, p, &[]).await.contains(secret), "{p}");
    }
    drop(page);
}
