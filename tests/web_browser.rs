//! `sbworker web` in a real browser: Debian's Chromium, headless, driven through its
//! ChromeDriver over WebDriver (fantoccini). Each page is opened as a person would, read
//! from the browser's own document, and photographed into the test output
//! (`target/tmp/screenshots/`).

use std::process::Stdio;

use fantoccini::{ClientBuilder, Locator};
use sbworker::demo::{self, DATA_QUEUE, REKEN_QUEUE};

use crate::common::calc::{TempDir, wait_until};
use crate::common::pg::fresh_roster_db;
use crate::common::tds::emulator_with;
use crate::common::within;

const BIN: &str = env!("CARGO_BIN_EXE_sbworker");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// ChromeDriver on a free port, and a WebDriver session of headless Chromium on it.
async fn browser() -> (tokio::process::Child, fantoccini::Client) {
    let port = free_port();
    let driver = tokio::process::Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("chromedriver (Debian's chromium-driver; .ci/run installs it)");
    let caps: serde_json::Map<String, serde_json::Value> = serde_json::from_value(serde_json::json!({
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"]
        }
    }))
    .unwrap();
    wait_until("ChromeDriver listens", || async { tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() })
        .await;
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let mut builder = ClientBuilder::new(connector);
    builder.capabilities(caps);
    let client = within(60, "a WebDriver session", builder.connect(&format!("http://127.0.0.1:{port}")))
        .await
        .expect("a WebDriver session of headless Chromium");
    (driver, client)
}

/// Writes the page's screenshot into the test output; its path.
async fn screenshot(client: &fantoccini::Client, name: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.png"));
    std::fs::write(&path, client.screenshot().await.unwrap()).unwrap();
    path
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Postgres,
    Tds,
}

/// The pages in Chromium, on the PostgreSQL broker or over TDS through the emulator:
/// the overview's queues' table holds both queues, the attention list says no worker is
/// alive, both plots are drawn; the dead letters, one letter and the action log open; no
/// page carries a script or the connection's password; the overview's screenshot is a
/// PNG.
async fn the_overview_loads_in_chromium(kind: Kind) {
    let (url, c) = fresh_roster_db().await;
    let letter = crate::common::letters::plant(&c, "planted: shown on the page").await;
    let dir = TempDir::new("web-browser");
    let (text, secret, _emulator) = match kind {
        Kind::Postgres => {
            // The cluster trusts local logins: the password is carried, never checked.
            let secret = "geheim-Wachtwoord-5521".to_owned();
            (demo::worker_config_text(&format!("{url} password={secret}"), 1), secret, None)
        }
        Kind::Tds => {
            // (The page asks the emulator over TDS; the emulator's status procedure answers
            // with the document of the PostgreSQL it runs on, so the page says so.)
            let (conn, stop) = emulator_with(&url, std::sync::Arc::new(Default::default())).await;
            // The emulator's password (tests/common/tds.rs), which its connection string
            // quotes.
            let secret = "p;w\"d".to_owned();
            assert!(conn.contains("p;w\"\"d"), "{conn}");
            let pg = format!("kind = \"postgres\"\nconnection = {}\n", toml::Value::String(url.clone()));
            let ms = format!("kind = \"mssql\"\nconnection = {}\n", toml::Value::String(conn.clone()));
            let text = demo::worker_config_text(&url, 1);
            assert!(text.contains(&pg));
            (text.replace(&pg, &ms), secret, Some(stop))
        }
    };
    let config = dir.0.join("sbworker.toml");
    std::fs::write(&config, text).unwrap();
    let port = free_port();
    let _web = tokio::process::Command::new(BIN)
        .arg("web")
        .arg("--config")
        .arg(&config)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--silent-seconds", "30", "--refresh-seconds", "3600"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let page = format!("http://127.0.0.1:{port}/");
    wait_until("the page is served", || async { tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() })
        .await;
    let (_driver, client) = browser().await;
    // Checked in a block of its own, so the session is closed (and Chromium with it)
    // whatever the checks find.
    let checked = async {
        within(60, "the overview opens", client.goto(&page)).await?;
        let title = within(60, "the title", client.title()).await?;
        let queues = within(60, "the queues", async { client.find(Locator::Id("queues")).await?.text().await }).await?;
        let attention =
            within(60, "the attention", async { client.find(Locator::Id("attention")).await?.text().await }).await?;
        let mut source = within(60, "the source", client.source()).await?;
        let plots = client.find_all(Locator::Css("svg#plot-throughput, svg#plot-latency")).await?.len();
        let name = if kind == Kind::Postgres { "overview-postgresql" } else { "overview-sqlserver-emulator" };
        let shot = screenshot(&client, name).await;
        // The other pages, read-only: the dead letters (one planted), one letter, the
        // action log, a key without results, a search that finds none.
        let mut texts = Vec::new();
        let one = format!("letters/{letter}");
        let pages = [
            ("letters", "letters"),
            (one.as_str(), "letter"),
            ("actions", "actions"),
            ("sleutel?dienstverband=1&periode=1", "geen"),
            ("sleutels?staat=fout&cao=X", "geen"),
            ("runs", "exports"),
        ];
        for (path, id) in pages {
            within(60, "a page opens", client.goto(&format!("{page}{path}"))).await?;
            texts.push(text_of(&client, id).await?);
            source.push_str(&client.source().await?);
        }
        Ok::<_, fantoccini::error::CmdError>((title, queues, attention, source, shot, plots, texts))
    }
    .await;
    let _ = within(60, "the session closes", client.close()).await;
    let (title, queues, attention, source, shot, plots, texts) = checked.unwrap();
    assert_eq!(plots, 2, "both plots are drawn (empty)");
    assert!(texts[0].contains("planted: shown on the page"), "{}", texts[0]);
    assert!(texts[1].contains("planted: shown on the page"), "{}", texts[1]);
    assert!(texts[2].contains("who"), "the action log's table: {}", texts[2]);
    assert!(texts[3].contains("No stored version of dienstverband 1, periode 1"), "{}", texts[3]);
    assert!(texts[4].contains("No key found"), "{}", texts[4]);
    assert_eq!(title, "sbworker: overzicht");
    assert!(queues.contains(REKEN_QUEUE) && queues.contains(DATA_QUEUE), "{queues}");
    assert!(attention.contains("no worker alive"), "{attention}");
    let escaped = secret.replace('"', "&quot;");
    assert!(!source.contains(&secret) && !source.contains(&escaped), "no password on the page");
    assert!(!source.contains("<script"), "no script");
    assert!(std::fs::read(&shot).unwrap().starts_with(b"\x89PNG"), "{}", shot.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_loads_in_chromium_on_postgresql() {
    the_overview_loads_in_chromium(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_loads_in_chromium_over_tds() {
    the_overview_loads_in_chromium(Kind::Tds).await;
}

/// The text of the element with `id` on the page open in `client`, waited for (a click
/// that submits a form may return before the next page is there).
async fn text_of(client: &fantoccini::Client, id: &str) -> Result<String, fantoccini::error::CmdError> {
    let waited = client.wait().at_most(std::time::Duration::from_secs(30)).for_element(Locator::Id(id));
    within(60, "an element's text", async { waited.await?.text().await }).await
}

/// What the clerk's session read from the pages, checked after the browser is closed.
#[derive(Default)]
struct Seen {
    who: String,
    listed: String,
    key: String,
    reason: String,
    body: String,
    replayed: String,
    forged: String,
    counted: String,
    asked: String,
    purged: String,
    log: String,
    source: String,
    in_fout: String,
    found: String,
    versies: String,
    sent: String,
    changed: String,
    explained: String,
    runs: String,
    bars: usize,
    points: usize,
}

/// A clerk (a login with the housekeeping role) in Chromium, on the PostgreSQL broker:
/// signs in with the database login, opens the dead letter of a request the
/// calculation kept failing on, reads its body and reason, replays it from the page (its
/// key then ends on its latest result, with the real worker running); a form posted
/// without the session's token is refused and deletes nothing; a purge by filter asks
/// first, saying how many, and deletes exactly that set; the action log names the
/// clerk. Every page is photographed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clerk_replays_a_dead_letter_and_purges_by_filter_in_chromium() {
    use sbworker::broker::postgres::PostgresTransport;
    use sbworker::demo::roster::{FIRST_ID, PERIODE_ID, Roster};

    use crate::common::calc::{InProcess, spawn_worker, stop_worker};

    let (url, mut c) = fresh_roster_db().await;
    let keys = 4;
    let bad = FIRST_ID + 2;
    Roster::generate(keys, 5, false).load(&mut c).await.unwrap();
    let tag = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let clerk = format!("klerk_{tag}");
    c.batch_execute(&format!("CREATE ROLE {clerk} LOGIN; GRANT sbworker_housekeeping TO {clerk};")).await.unwrap();
    let count = |sql: String| {
        let c = &c;
        async move { c.query_one(&sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    // A worker whose calculation fails one key's requests: that Vraag is diverted.
    let dir = TempDir::new("web-clerk");
    let worker_cfg = demo::worker_config_text(&url, 2);
    let config = sbworker::config::from_str(&worker_cfg, &Vec::new()).unwrap();
    let w = InProcess::start_on(PostgresTransport::new(&url), config, crate::common::letters::handlers(bad));
    wait_until("the failing request is diverted", || async {
        count("SELECT count(*) FROM sbworker.dead_letter".into()).await == 1
            && count("SELECT count(*) FROM rekenserver.resultaat".into()).await == keys as i64 - 1
    })
    .await;
    w.finish().await;
    // (The Fout sent back for it is recorded by the collector, in its own time.)
    wait_until("the Fout is in the calculation log", || async {
        count(format!(
            "SELECT count(*) FROM rekenserver.berekening_log WHERE dienstverband_id = {bad} AND uitkomst = 'fout'"
        ))
        .await
            >= 1
    })
    .await;
    let vraag: i64 = count("SELECT id FROM sbworker.dead_letter".into()).await;
    for _ in 0..3 {
        crate::common::letters::plant(&c, "planted: purge me").await;
    }
    crate::common::letters::plant(&c, "planted: keep me").await;
    // The real worker, as a process, and the page with actions on.
    let worker = spawn_worker(&dir, &worker_cfg);
    let web_cfg = dir.0.join("web.toml");
    std::fs::write(&web_cfg, &worker_cfg).unwrap();
    let port = free_port();
    let _web = tokio::process::Command::new(BIN)
        .arg("web")
        .arg("--config")
        .arg(&web_cfg)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--silent-seconds", "30", "--refresh-seconds", "3600"])
        .arg("--actions")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_until("the page is served", || async { tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() })
        .await;
    // A planner removes a duty of the first key: its version 2 is stored beside version 1.
    c.execute(
        &format!("DELETE FROM rooster.dienst WHERE id = (SELECT min(id) FROM rooster.dienst WHERE dienstverband_id = {FIRST_ID})"),
        &[],
    )
    .await
    .unwrap();
    wait_until("the edited key's version 2 is stored", || async {
        count(format!("SELECT count(*) FROM rekenserver.resultaat WHERE dienstverband_id = {FIRST_ID} AND versie = 2"))
            .await
            == 1
    })
    .await;
    let at = |path: &str| format!("http://127.0.0.1:{port}{path}");
    let (_driver, client) = browser().await;
    let checked = async {
        let mut seen = Seen::default();
        // Sign in with the database login.
        within(60, "the sign-in page", client.goto(&at("/signin"))).await?;
        client.find(Locator::Css("input[name=login]")).await?.send_keys(&clerk).await?;
        client.find(Locator::Css("input[name=password]")).await?.send_keys("any").await?;
        screenshot(&client, "signin").await;
        client.find(Locator::Id("signin-button")).await?.click().await?;
        seen.who = text_of(&client, "who").await?;
        // The keys whose current version got a Fout that says why.
        within(60, "the keys in Fout", client.goto(&at("/sleutels?staat=fout&reden=CHOKED"))).await?;
        seen.in_fout = text_of(&client, "sleutels").await?;
        screenshot(&client, "sleutels").await;
        // The list, then the diverted request: its key, reason and body.
        within(60, "the dead letters", client.goto(&at("/letters"))).await?;
        seen.listed = text_of(&client, "letters").await?;
        screenshot(&client, "dead-letters").await;
        client.find(Locator::LinkText(&vraag.to_string())).await?.click().await?;
        seen.key = text_of(&client, "key").await?;
        seen.reason = text_of(&client, "reason").await?;
        seen.body = text_of(&client, "body").await?;
        screenshot(&client, "dead-letter").await;
        client.find(Locator::Id("replay-button")).await?.click().await?;
        seen.replayed = text_of(&client, "done").await?;
        // A form without the session's token (made by a script in the page, as another
        // page's form would be): refused.
        within(60, "the list again", client.goto(&at("/letters"))).await?;
        client
            .execute(
                "const f = document.createElement('form'); f.method = 'post'; f.action = '/letters/purge'; \
                 for (const [k, v] of [['reason', 'purge me'], ['upto', '999999'], ['expected', '3']]) { \
                   const i = document.createElement('input'); i.name = k; i.value = v; f.appendChild(i); } \
                 document.body.appendChild(f); f.submit();",
                vec![],
            )
            .await?;
        seen.forged = text_of(&client, "problem").await?;
        // The purge by filter: asked first, with the count.
        within(60, "the filtered list", client.goto(&at("/letters?reason=purge+me"))).await?;
        seen.counted = text_of(&client, "count").await?;
        client.find(Locator::Id("purge-all")).await?.click().await?;
        seen.asked = text_of(&client, "confirm-count").await?;
        screenshot(&client, "purge-confirm").await;
        client.find(Locator::Id("confirm-button")).await?.click().await?;
        seen.purged = text_of(&client, "done").await?;
        within(60, "the action log", client.goto(&at("/actions"))).await?;
        seen.log = text_of(&client, "actions").await?;
        screenshot(&client, "actions").await;
        seen.source = client.source().await?;
        // The edited key, looked up by the payroll office: its versions, what changed
        // since version 1, the Vraag explained.
        within(60, "the key search", client.goto(&at("/sleutels"))).await?;
        client.find(Locator::Css("input[name=dienstverband]")).await?.send_keys(&FIRST_ID.to_string()).await?;
        client.find(Locator::Id("zoek-knop")).await?.click().await?;
        // (The form's page has a table of the same id: the answer is waited for by its
        // form, whose field's attribute, not only its typed value, holds the number.)
        let answered = format!("input[name=dienstverband][value=\"{FIRST_ID}\"]");
        client.wait().at_most(std::time::Duration::from_secs(30)).for_element(Locator::Css(&answered)).await?;
        seen.found = text_of(&client, "sleutels").await?;
        client.find(Locator::LinkText(&format!("{FIRST_ID}/{PERIODE_ID}"))).await?.click().await?;
        seen.versies = text_of(&client, "versies").await?;
        seen.sent = text_of(&client, "tijdlijn").await?;
        seen.changed = text_of(&client, "verschillen").await?;
        seen.explained = text_of(&client, "uitleg").await?;
        screenshot(&client, "sleutel").await;
        // The runs: a recompute running (its row planted, as one mid-way leaves it).
        let planted = "INSERT INTO rekenserver.run_log (stap, kandidaten, verzonden) VALUES ('herberekening', 7, 5)";
        c.execute(planted, &[]).await.unwrap();
        within(60, "the runs", client.goto(&at("/runs"))).await?;
        seen.runs = text_of(&client, "runs").await?;
        screenshot(&client, "runs").await;
        // The overview's plots, with the hour's answers in them.
        within(60, "the overview", client.goto(&at("/"))).await?;
        seen.bars = client.find_all(Locator::Css("#plot-throughput rect.bar")).await?.len();
        seen.points = client.find_all(Locator::Css("#plot-latency circle.p95")).await?.len();
        screenshot(&client, "overview").await;
        Ok::<_, fantoccini::error::CmdError>(seen)
    }
    .await;
    let _ = within(60, "the session closes", client.close()).await;
    let Seen {
        who,
        listed,
        key,
        reason,
        body,
        replayed,
        forged,
        counted,
        asked,
        purged,
        log,
        source,
        in_fout,
        found,
        versies,
        sent,
        changed,
        explained,
        runs,
        bars,
        points,
    } = checked.unwrap();
    assert!(runs.contains("loopt: 7 keys, 5 Vraags so far"), "{runs}");
    assert!(in_fout.contains(&format!("{bad}/{PERIODE_ID}")) && in_fout.contains("choked"), "{in_fout}");
    assert_eq!(in_fout.lines().count(), 2, "only the key in Fout: {in_fout}");
    assert_eq!(found.lines().count(), 2, "one key of that dienstverband: {found}");
    assert!(found.contains(&format!("{FIRST_ID}/{PERIODE_ID}")), "{found}");
    assert_eq!(sent.matches("opgeslagen").count(), 2, "both versions sent and stored: {sent}");
    assert!(versies.lines().count() >= 3, "the header and versions 2 and 1: {versies}");
    assert!(versies.lines().nth(1).unwrap().starts_with("2 "), "the newest first: {versies}");
    assert!(changed.contains("versie 1") && changed.contains("versie 2"), "what changed since version 1: {changed}");
    assert!(changed.lines().count() >= 2, "at least one loonfactor changed: {changed}");
    assert!(!explained.trim().is_empty(), "the engine's explanation");
    assert!(bars >= 1 && points >= 1, "the plots have data: {bars} bars, {points} points");
    assert_eq!(who, clerk);
    assert!(listed.contains(&format!("{bad}/{PERIODE_ID} v1")), "{listed}");
    assert_eq!(key, format!("{bad}/{PERIODE_ID} v1"));
    assert!(reason.contains(&format!("choked on dienstverband {bad}")), "{reason}");
    assert!(body.contains(&format!("<Dienstverband Id=\"{bad}\">")), "decoded and indented: {body}");
    assert!(replayed.contains("was sent again, on dialog"), "{replayed}");
    assert!(forged.contains("token"), "{forged}");
    assert!(counted.starts_with("3 dead letters"), "{counted}");
    assert!(asked.contains("This will purge 3 dead letters"), "{asked}");
    assert!(purged.contains("Purged 3 dead letters"), "{purged}");
    assert!(log.contains(&format!("{clerk} purge")) && log.contains(&format!("{clerk} replay")), "{log}");
    assert!(!source.contains("<script"), "no script");
    // The replayed key ends on its latest result; the purge took exactly the three.
    wait_until("the replayed key is stored", || async {
        count(format!(
            "SELECT count(*) FROM rekenserver.resultaat r JOIN rekenserver.sleutel s USING (dienstverband_id, periode_id) \
             WHERE r.dienstverband_id = {bad} AND r.versie = s.versie"
        ))
        .await
            == 1
    })
    .await;
    assert_eq!(count("SELECT count(*) FROM sbworker.dead_letter".into()).await, 2);
    assert_eq!(count("SELECT count(*) FROM sbworker.dead_letter WHERE reason LIKE '%keep me'".into()).await, 1);
    assert_eq!(count(format!("SELECT replays::bigint FROM sbworker.dead_letter WHERE id = {vraag}")).await, 1);
    assert_eq!(stop_worker(worker).await, Some(0));
}
