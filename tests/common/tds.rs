//! The Service Broker emulator for the tests: on a free port over a test's PostgreSQL
//! broker (with faults injected when asked), and the worker on the SQL Server transport
//! through it; T-SQL clients of it (ours, and programs we did not write, with the round
//! trip in which a worker answers their Vraag), and a proxy that records what a client
//! sends over the wire.

use std::sync::Arc;

use sbworker::broker::mssql::MssqlTransport;
use sbworker::contract::message_types;
use sbworker::emulator::server::tls::Tls;
use sbworker::emulator::server::{Credentials, Faults, start_tls};
use sbworker::handlers::calculation;
use sbworker::worker::{self, Handlers, Metrics, RunOutcome, Stop};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::calc::{REKEN_QUEUE, calculation_handler, config, vraag_body};

/// A tiberius client of the emulator at `conn` (a connection string from [`emulator`]),
/// as the SQL Server transport opens one.
pub async fn client(conn: &str) -> sbworker::broker::mssql::Tds {
    sbworker::broker::mssql::connect(&sbworker::broker::mssql::Connection::parse(conn).unwrap()).await.unwrap()
}

/// A T-SQL initiator's request, as a DBA would send it: a dialog from the data service
/// and one Vraag on it (a valid one, for a dienstverband of its own), committed.
pub async fn send_vraag(c: &mut sbworker::broker::mssql::Tds) {
    c.execute(
        "DECLARE @h uniqueidentifier;
         BEGIN DIALOG CONVERSATION @h FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
             TO SERVICE '/Rekenserver/LoonfactorBerekening/RekenService'
             ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract] WITH ENCRYPTION = OFF;
         SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (@P1);",
        &[&super::calc::vraag_body(uuid::Uuid::new_v4()).as_slice()],
    )
    .await
    .unwrap();
}

/// The TCP port of an emulator's connection string (`Server=tcp:127.0.0.1,PORT;…`).
pub fn port(conn: &str) -> u16 {
    conn.split(',').nth(1).and_then(|r| r.split(';').next()).and_then(|p| p.parse().ok()).expect("a port in the string")
}

/// An emulator on a free port, with the tests' login: its connection string and its stop.
pub async fn emulator(url: &str) -> (String, tokio::sync::watch::Sender<bool>) {
    emulator_with(url, Arc::new(Faults::default())).await
}

/// An emulator that injects `faults`.
pub async fn emulator_with(url: &str, faults: Arc<Faults>) -> (String, tokio::sync::watch::Sender<bool>) {
    let (conn, stop, _) = emulator_tls(url, faults).await;
    (conn, stop)
}

/// An emulator that injects `faults`, and its TLS certificate (PEM) for a client to
/// trust.
pub async fn emulator_tls(url: &str, faults: Arc<Faults>) -> (String, tokio::sync::watch::Sender<bool>, String) {
    let (stop_tx, stop) = Stop::new();
    let creds = Credentials { user: "sbworker".into(), password: "p;w\"d".into() };
    let tls = Tls::generated().unwrap();
    let pem = tls.certificate_pem.clone();
    let (addr, _task) =
        start_tls("127.0.0.1:0".parse().unwrap(), url.to_owned(), creds, faults, Some(tls), stop).await.unwrap();
    let conn = format!(
        "Server=tcp:127.0.0.1,{};Database=payroll;User Id=sbworker;Password=\"p;w\"\"d\";Encrypt=false;Command Timeout=30",
        addr.port()
    );
    (conn, stop_tx, pem)
}

/// The worker on the SQL Server transport through the emulator, with the calculation.
pub fn tds_worker(
    conn: &str,
    url: &str,
    tune: impl FnOnce(&mut sbworker::config::Config),
) -> (mpsc::Sender<()>, tokio::task::JoinHandle<RunOutcome>, Arc<Metrics>) {
    tds_worker_with(conn, url, calculation_handler(), tune)
}

/// The worker on the SQL Server transport through the emulator, with `handler` serving
/// the calculation queue.
pub fn tds_worker_with(
    conn: &str,
    url: &str,
    handler: Arc<dyn sbworker::worker::handler::Handler<sbworker::broker::mssql::MssqlSession>>,
    tune: impl FnOnce(&mut sbworker::config::Config),
) -> (mpsc::Sender<()>, tokio::task::JoinHandle<RunOutcome>, Arc<Metrics>) {
    let transport = MssqlTransport::new(conn).unwrap();
    let mut cfg = config(url, "");
    cfg.queues.get_mut(REKEN_QUEUE).unwrap().wait_ms = 500;
    tune(&mut cfg);
    let handlers = Handlers::default().with(calculation::NAME, handler);
    let metrics = Arc::new(Metrics::new());
    let (tx, rx) = mpsc::channel(2);
    let m = metrics.clone();
    (tx, tokio::spawn(async move { worker::run(transport, &(&cfg).into(), &handlers, m, rx).await.unwrap() }), metrics)
}

/// A TCP proxy in front of `port` for one connection: what the client sent, as it
/// went over the wire.
pub async fn recording_proxy(port: u16) -> (u16, Arc<std::sync::Mutex<Vec<u8>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_port = listener.local_addr().unwrap().port();
    let sent = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = sent.clone();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (client, _) = listener.accept().await.unwrap();
        let server = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let (mut client_read, mut client_write) = client.into_split();
        let (mut server_read, mut server_write) = server.into_split();
        tokio::spawn(async move { tokio::io::copy(&mut server_read, &mut client_write).await });
        let mut buf = vec![0u8; 65536];
        while let Ok(n) = client_read.read(&mut buf).await {
            if n == 0 || server_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
            record.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    (proxy_port, sent)
}

/// `s` as UTF-16LE bytes, as SQL Server keeps an nvarchar and TDS sends a login's names.
pub fn utf16(s: &str) -> Vec<u8> {
    s.encode_utf16().flat_map(u16::to_le_bytes).collect()
}

/// Whether `needle` occurs in `haystack` (bytes seen on the wire).
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The round trip a client sends a Vraag in and a worker answers: a client program
/// (`client`, given a Vraag file as its last argument) sends that Vraag
/// through the emulator to a worker running on it as its own process (`sbworker run`,
/// configured for the emulator as a user would), reads the answer on the initiator's
/// queue and prints it as JSON: the Antwoord and the EndDialog of its own dialog. The
/// worker then drains on SIGTERM and exits 0.
pub async fn answered_by_a_worker(conn: &str, what: &str, mut client: tokio::process::Command) {
    let dir = crate::common::calc::TempDir::new(what);
    let config = format!(
        "[broker]\nkind = \"mssql\"\nconnection = {}\n\n[log]\nlevel = \"info\"\n\n\
         [queues.{REKEN_QUEUE}]\nhandler = \"loonfactor-berekening\"\nwait_ms = 500\n",
        toml::Value::String(conn.to_owned())
    );
    let mut worker = crate::common::process::Worker::start(&dir, &config);
    worker.wait_for("worker started").await;
    let vraag_file = dir.0.join("vraag.xml");
    std::fs::write(&vraag_file, vraag_body(Uuid::new_v4())).unwrap();
    client.arg(&vraag_file);
    let v = client_json(what, client).await;
    assert_eq!(
        v["answer_types"],
        serde_json::json!([message_types::ANTWOORD, sbworker::broker::system::END_DIALOG]),
        "{what}: {v}"
    );
    assert_eq!(v["answer_is_for_this_dialog"], true, "{what}: {v}");
    assert!(v["answer_root"].as_str().unwrap().contains("LoonfactorBerekeningAntwoord"), "{what}: {v}");
    worker.signal(libc::SIGTERM);
    let (code, log) = worker.exit().await;
    assert_eq!(code, Some(0), "{what}: the worker drains and exits 0:\n{log}");
}

/// Runs a client program we did not write (within 180 s): it must succeed, and what it
/// printed is one JSON object.
pub async fn client_json(what: &str, mut client: tokio::process::Command) -> serde_json::Value {
    let out = crate::common::within(180, "the client ends", client.output()).await.unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what}: {stdout}{stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{what}: {e}: {stdout}{stderr}"))
}
