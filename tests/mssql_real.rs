//! Against a real SQL Server, when one is given: `SBWORKER_MSSQL_URL` (an ADO.NET string
//! of a login that may create a database), `SBWORKER_MSSQL_WORKER_LOGIN` and
//! `SBWORKER_MSSQL_WORKER_PASSWORD` (an existing SQL login for the worker). Installs the
//! scripts into a new database, sends a Vraag as a DBA would, lets the worker answer
//! over the SQL Server transport and receives the Antwoord, then runs `sbworker
//! selftest --mssql` as the worker's login (every check, the round trip included). Skipped, saying so, when
//! the variables are not set (on the development machines no SQL Server can run).

use std::sync::Arc;

use sbworker::broker::mssql::{Connection, MssqlTransport};
use sbworker::contract::message_types;
use sbworker::handlers::calculation;
use sbworker::worker::{self, Handlers, Metrics, RunOutcome};
use uuid::Uuid;

use crate::common::calc::{calculation_handler, vraag_body};
use crate::common::mssql_real::database;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_a_real_sql_server_when_one_is_given() {
    let Some(real) = database().await else {
        eprintln!(
            "mssql_real: SKIPPED: set SBWORKER_MSSQL_URL, SBWORKER_MSSQL_WORKER_LOGIN and \
             SBWORKER_MSSQL_WORKER_PASSWORD to run against a real SQL Server"
        );
        return;
    };
    // A DBA's session in the new database sends a Vraag.
    let mut dba = sbworker::broker::mssql::connect(&Connection::parse(&real.admin).unwrap()).await.unwrap();
    let body = String::from_utf8(vraag_body(Uuid::new_v4())).unwrap();
    let row = dba
        .query(
            "DECLARE @h uniqueidentifier;
             BEGIN DIALOG CONVERSATION @h FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
                 TO SERVICE '/Rekenserver/LoonfactorBerekening/RekenService'
                 ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract] WITH ENCRYPTION = OFF;
             SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (CAST(@P1 AS xml));
             SELECT @h;",
            &[&body.as_str()],
        )
        .await
        .unwrap()
        .into_row()
        .await
        .unwrap()
        .unwrap();
    let handle: Uuid = row.get(0).unwrap();
    // The worker, as its own login, answers.
    let worker_conn = real.worker.clone();
    let transport = MssqlTransport::new(&worker_conn).unwrap();
    let cfg = sbworker::config::from_str(
        &format!(
            "[broker]\nkind = \"mssql\"\nconnection = {}\n[queues.\"dbo.loonfactorberekening_reken\"]\nhandler = \"{}\"\nwait_ms = 2000\n",
            toml::Value::String(worker_conn.clone()),
            calculation::NAME
        ),
        &Vec::new(),
    )
    .unwrap();
    let handlers = Handlers::default().with(calculation::NAME, calculation_handler());
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    let run = tokio::spawn(async move {
        worker::run(transport, &(&cfg).into(), &handlers, Arc::new(Metrics::new()), rx).await.unwrap()
    });
    let rows = dba
        .query(
            "WAITFOR (RECEIVE conversation_handle, message_type_name FROM dbo.loonfactorberekening_data), TIMEOUT 30000",
            &[],
        )
        .await
        .unwrap()
        .into_first_result()
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<Uuid, _>(0), Some(handle));
    assert_eq!(rows[0].get::<&str, _>(1), Some(message_types::ANTWOORD));
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
    // The selftest, as the worker's login, passes every check, the round trip included.
    let report = sbworker::selftest::mssql::run(&worker_conn).await;
    assert!(report.passed, "{}", report.text(false));
    assert!(report.checks.last().unwrap().detail.contains("by this selftest"), "{}", report.text(false));
}
