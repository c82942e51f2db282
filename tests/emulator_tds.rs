//! The SQL Server transport over real TDS (tiberius) against the Service Broker
//! emulator, which runs the statements on the PostgreSQL broker: the worker answers
//! requests end to end as it does on PostgreSQL.

use std::sync::Arc;

use sbworker::broker::mssql::MssqlTransport;
use sbworker::contract::{Limits, decode_antwoord, message_types};
use sbworker::emulator::server::{Credentials, start};
use sbworker::worker::{self, Handlers, Metrics, RunOutcome, Stop, calculation};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::common::calc::*;

async fn emulator(url: &str) -> (String, tokio::sync::watch::Sender<bool>) {
    let (stop_tx, stop) = Stop::new();
    let creds = Credentials { user: "sbworker".into(), password: "p;w\"d".into() };
    let (addr, _task) = start("127.0.0.1:0".parse().unwrap(), url.to_owned(), creds, stop).await.unwrap();
    let conn = format!(
        "Server=tcp:127.0.0.1,{};Database=payroll;User Id=sbworker;Password=\"p;w\"\"d\";Encrypt=false;Command Timeout=30",
        addr.port()
    );
    (conn, stop_tx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_answers_over_tds_through_the_emulator() {
    if std::env::var("SBWORKER_TEST_LOG").is_ok() {
        let _ = tracing_subscriber::fmt().with_env_filter("sbworker=debug").with_test_writer().try_init();
    }
    let (url, mut s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let transport = MssqlTransport::new(&conn).unwrap();
    let mut cfg = config(&url, "");
    cfg.queues.get_mut(REKEN_Q).unwrap().wait_ms = 1000;
    let handlers = Handlers::default().with(calculation::NAME, calculation_handler());
    let metrics = Arc::new(Metrics::new());
    let (tx, rx) = mpsc::channel(2);
    let m = metrics.clone();
    let run = tokio::spawn(async move { worker::run(transport, &cfg, &handlers, m, rx).await.unwrap() });
    let mut handles = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..5 {
        let id = Uuid::new_v4();
        ids.push(id);
        handles.push(ask(&mut s, &vraag_body(id)).await);
    }
    let bad =
        ask(&mut s, b"<LoonfactorBerekeningVraag xmlns=\"http://www.sdbgroep.nl/MPlus/Rekenserver/2008\"/>").await;
    let got = collect(&mut s, 7).await;
    let answers: Vec<_> = got.iter().filter(|m| m.message_type == message_types::ANTWOORD).collect();
    assert_eq!(answers.len(), 5);
    for a in answers {
        let a = decode_antwoord(&a.body, &Limits::default()).unwrap();
        assert!(ids.contains(&a.id));
    }
    let for_bad: Vec<&str> =
        got.iter().filter(|m| m.conversation_handle == bad).map(|m| m.message_type.as_str()).collect();
    assert_eq!(for_bad, [message_types::FOUT, sbworker::broker::system::ERROR]);
    end_all(&mut s, handles).await;
    end_all(&mut s, [bad]).await;
    wait_until("every endpoint is gone", || async { count(&s, "SELECT count(*) FROM sb.endpoint").await == 0 }).await;
    tx.send(()).await.unwrap();
    assert_eq!(run.await.unwrap(), RunOutcome::Drained);
    let text = metrics.encode();
    assert_eq!(metric_in(&text, &format!("sbworker_requests_answered_total{{queue=\"{REKEN_Q}\"}}")), 5.0);
}

#[tokio::test]
async fn a_wrong_password_is_login_failed_18456() {
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let wrong = conn.replace("Password=\"p;w\"\"d\"", "Password=nope");
    let transport = MssqlTransport::new(&wrong).unwrap();
    let e = match sbworker::transport::Transport::open(&transport).await {
        Ok(_) => panic!("logged in with a wrong password"),
        Err(e) => e,
    };
    assert_eq!(e.number, 18456, "{e}");
}
