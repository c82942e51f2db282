//! Against a real SQL Server, when one is given: `SBWORKER_MSSQL_URL` (an ADO.NET string
//! of a login that may create a database), `SBWORKER_MSSQL_WORKER_LOGIN` and
//! `SBWORKER_MSSQL_WORKER_PASSWORD` (an existing SQL login for the worker). Installs the
//! scripts into a new database, sends a Vraag as a DBA would, lets the worker answer
//! over the SQL Server transport and receives the Antwoord, then runs `sbworker
//! selftest --mssql` as the worker's login (every check, the round trip included), and
//! the deep selftest (every step of the T-SQL). Skipped, saying so, when
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
    let Some(real) = database_or_skip().await else {
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

/// Conversation reuse on a real SQL Server, when one is given: with
/// `dialog_reuse_idle_seconds` set, a key's second version goes on the dialog of its
/// first (answered by then: SQL Server reuses a dialog with no request open), both are
/// stored, and once the key has been idle the collector ends the dialog on its timer
/// (`Rekenserver.dialoog_stil`) and the key's row forgets it. The T-SQL runs nowhere else:
/// the emulator runs the PostgreSQL broker's functions in its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_conversation_reuse_against_a_real_sql_server_when_one_is_given() {
    use sbworker::handlers::collector;
    let Some(real) = database_or_skip().await else {
        return;
    };
    let mut dba = sbworker::broker::mssql::connect(&Connection::parse(&real.admin).unwrap()).await.unwrap();
    // One employee with a salary, one month, one duty; nothing sent while it is set up
    // (as the self-test's scratch key is, 05_handoff.sql), the reuse idle time 2 s.
    dba.simple_query(
        "INSERT Rekenserver.instelling (naam, waarde) VALUES ('dialog_reuse_idle_seconds', 2);
         EXEC sp_set_session_context N'vragen_uit', 1;
         INSERT Rooster.cao (id, code, is_vier_weken, naam, werkweek_uren) VALUES (9001, 'ZKH', 0, N'reuse test', 36);
         INSERT Rooster.periode (id, is_vier_weken, begin_datum, eind_datum) VALUES (9001, 0, '20991201', '20991231');
         INSERT Rooster.dienstverband (id, cao_id, dagen_per_week, datum_in_dienst, parttime_uren, salaris, soort,
                                       functiegroep)
         VALUES (9001, 9001, 5, '20990101', 36, 3000, 'FT', 45);
         INSERT Rooster.dienst_type (code, omschrijving, telt_mee_in_gewerkte_uren) VALUES ('RTEST', N'reuse test', 1);
         INSERT Rooster.dienst (dienstverband_id, datum) VALUES (9001, '20991207');
         EXEC sp_set_session_context N'vragen_uit', 0;",
    )
    .await
    .unwrap()
    .into_results()
    .await
    .unwrap();
    // The calculation and the collector, as the worker's login.
    let worker_conn = real.worker.clone();
    let transport = MssqlTransport::new(&worker_conn).unwrap();
    let cfg = sbworker::config::from_str(
        &format!(
            "[broker]\nkind = \"mssql\"\nconnection = {}\n\
             [queues.\"dbo.loonfactorberekening_reken\"]\nhandler = \"{}\"\nwait_ms = 2000\n\
             [queues.\"dbo.loonfactorberekening_data\"]\nhandler = \"{}\"\nwait_ms = 2000\n",
            toml::Value::String(worker_conn.clone()),
            calculation::NAME,
            collector::NAME
        ),
        &Vec::new(),
    )
    .unwrap();
    let handlers = Handlers::default()
        .with(calculation::NAME, calculation_handler())
        .with(collector::NAME, Arc::new(collector::Collector::new(sbworker::contract::Limits::default())));
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    let run = tokio::spawn(async move {
        worker::run(transport, &(&cfg).into(), &handlers, Arc::new(Metrics::new()), rx).await.unwrap()
    });
    // A block on the duty (the key's first Vraag), stored; then the block longer (its
    // second), stored. Each time the key's version as the trigger raised it.
    for edit in [
        "INSERT Rooster.tijdblok (dienst_id, begin_tijd, eind_tijd, dienst_type)
         SELECT id, '07:00', '15:30', 'RTEST' FROM Rooster.dienst WHERE dienstverband_id = 9001",
        "UPDATE t SET eind_tijd = '16:00' FROM Rooster.tijdblok t JOIN Rooster.dienst d ON d.id = t.dienst_id
          WHERE d.dienstverband_id = 9001",
    ] {
        dba.execute(edit, &[]).await.unwrap();
        let versie =
            scalar(&mut dba, "SELECT MAX(versie) FROM Rekenserver.sleutel WHERE dienstverband_id = 9001").await;
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let stored = scalar(&mut dba, "SELECT CAST(ISNULL(MAX(versie), 0) AS bigint) FROM Rekenserver.resultaat WHERE dienstverband_id = 9001").await;
            if stored == versie {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "version {versie} not stored within 60 s (stored: {stored})"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    // Both requests went on one dialog.
    assert_eq!(
        (
            scalar(&mut dba, "SELECT CAST(COUNT(*) AS bigint) FROM Rekenserver.berekening_log WHERE dienstverband_id = 9001").await,
            scalar(&mut dba, "SELECT CAST(COUNT(DISTINCT dialog_handle) AS bigint) FROM Rekenserver.berekening_log WHERE dienstverband_id = 9001").await,
        ),
        (2, 1)
    );
    // Idle for 2 s: the collector ends the dialog on its timer, the calculation side follows.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let open = scalar(
            &mut dba,
            "SELECT CAST(COUNT(*) AS bigint) FROM sys.conversation_endpoints e
              WHERE e.state <> 'CD' AND e.conversation_id IN (
                    SELECT i.conversation_id FROM sys.conversation_endpoints i
                      JOIN Rekenserver.berekening_log l ON l.dialog_handle = i.conversation_handle
                     WHERE l.dienstverband_id = 9001)",
        )
        .await;
        let kept = scalar(
            &mut dba,
            "SELECT CAST(COUNT(*) AS bigint) FROM Rekenserver.sleutel WHERE dienstverband_id = 9001 AND dialog_handle IS NOT NULL",
        )
        .await;
        if open == 0 && kept == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the idle dialog was not ended within 60 s ({open} endpoints open)"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
}

/// The deep selftest on a real SQL Server, when one is given: every step of the T-SQL
/// (recompute, export once and leased, the correction rule, explain, a dialog ended WITH
/// CLEANUP repaired by the sweep, the planner's priority, a held group's RECEIVE), with
/// the worker's login for the worker's part and the admin's for the rest. The review's
/// first-server questions (B1, priorities, LIFETIME, recompute/export/explain) are its
/// steps; the line of the held group says whether SQL Server waited for the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deep_selftest_passes_against_a_real_sql_server_when_one_is_given() {
    let Some(real) = database_or_skip().await else {
        return;
    };
    let report = sbworker::selftest::mssql::run_deep(&real.worker, &real.admin).await;
    eprintln!("{}", report.text(false));
    assert!(report.passed, "{}", report.text(false));
    assert!(report.checks.iter().all(|c| c.status != sbworker::selftest::Status::Skip), "{}", report.text(false));
}

/// [`database`], or `None` after saying the test is skipped and why.
async fn database_or_skip() -> Option<crate::common::mssql_real::RealDb> {
    let real = database().await;
    if real.is_none() {
        eprintln!(
            "mssql_real: SKIPPED: set SBWORKER_MSSQL_URL, SBWORKER_MSSQL_WORKER_LOGIN and \
             SBWORKER_MSSQL_WORKER_PASSWORD to run against a real SQL Server"
        );
    }
    real
}

/// The one bigint of a query.
async fn scalar(c: &mut sbworker::broker::mssql::Tds, sql: &str) -> i64 {
    c.query(sql, &[]).await.unwrap().into_row().await.unwrap().and_then(|r| r.get::<i64, _>(0)).unwrap_or(0)
}
