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

/// The overview in Chromium, on the PostgreSQL broker or over TDS through the emulator:
/// the queues' table holds both queues, the attention list says no worker is alive, the
/// page carries no script and not the connection's password, and its screenshot is a
/// PNG.
async fn the_overview_loads_in_chromium(kind: Kind) {
    let (url, _c) = fresh_roster_db().await;
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
        let source = within(60, "the source", client.source()).await?;
        let name = if kind == Kind::Postgres { "overview-postgresql" } else { "overview-sqlserver-emulator" };
        let shot = screenshot(&client, name).await;
        Ok::<_, fantoccini::error::CmdError>((title, queues, attention, source, shot))
    }
    .await;
    let _ = within(60, "the session closes", client.close()).await;
    let (title, queues, attention, source, shot) = checked.unwrap();
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
