//! The Service Broker emulator for the tests: on a free port over a test's PostgreSQL
//! broker (with faults injected when asked), and the worker on the SQL Server transport
//! through it.

use std::sync::Arc;

use sbworker::broker::mssql::MssqlTransport;
use sbworker::emulator::server::tls::Tls;
use sbworker::emulator::server::{Credentials, Faults, start_tls};
use sbworker::handlers::calculation;
use sbworker::worker::{self, Handlers, Metrics, RunOutcome, Stop};
use tokio::sync::mpsc;

use super::calc::{REKEN_QUEUE, calculation_handler, config};

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
