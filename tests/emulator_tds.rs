//! The SQL Server transport over real TDS (tiberius) against the Service Broker
//! emulator, which runs the statements on the PostgreSQL broker: the worker answers
//! requests end to end as it does on PostgreSQL.

use std::sync::Arc;

use sbworker::broker::mssql::MssqlTransport;
use sbworker::contract::{Limits, decode_antwoord, message_types};
use sbworker::emulator::server::Faults;
use sbworker::handlers::calculation;
use sbworker::worker::{self, Handlers, Metrics, RunOutcome, Stop};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::common::calc::*;
use crate::common::tds::{emulator, emulator_with, tds_worker};

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

#[tokio::test]
async fn the_emulator_command_serves_a_throwaway_broker() {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_sbworker"))
        .args(["emulator", "--listen", "127.0.0.1:0", "--password", "pw"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut conn = None;
    while let Some(line) = lines.next_line().await.unwrap() {
        if let Some(c) = line.trim().strip_prefix("Server=") {
            conn = Some(format!("Server={}", c.replace("Password=…", "Password=pw")));
            break;
        }
    }
    let conn = conn.expect("the emulator prints its connection string");
    let transport = MssqlTransport::new(&conn).unwrap();
    let mut session = sbworker::transport::Transport::open(&transport).await.unwrap();
    let state =
        sbworker::transport::Session::queue_state(&mut session, "dbo.loonfactorberekening_reken").await.unwrap();
    assert!(state.enabled);
    assert_eq!(state.messages, 0);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGTERM) };
    assert_eq!(crate::common::within(60, "the process exits", child.wait()).await.unwrap().code(), Some(0));
}

/// The calculation and the collector over TDS, as `sbworker demo --mssql` runs them.
fn tds_pipeline(conn: &str, url: &str) -> (mpsc::Sender<()>, tokio::task::JoinHandle<RunOutcome>) {
    let transport = MssqlTransport::new(conn).unwrap();
    let mut cfg = sbworker::demo::worker_config(url, 3);
    cfg.broker.kind = sbworker::config::BrokerKind::Mssql;
    cfg.broker.connection = conn.to_owned();
    cfg.check().unwrap();
    let limits = Limits::default();
    let handlers = Handlers::default()
        .with(calculation::NAME, calculation_handler())
        .with(sbworker::handlers::collector::NAME, Arc::new(sbworker::handlers::collector::Collector::new(limits)));
    let (tx, rx) = mpsc::channel(2);
    let run = tokio::spawn(async move {
        worker::run(transport, &(&cfg).into(), &handlers, Arc::new(Metrics::new()), rx).await.unwrap()
    });
    (tx, run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_pipeline_runs_over_tds_and_latest_wins() {
    use sbworker::demo::check::{verify, wait_drained};
    use sbworker::demo::roster::Roster;
    let (url, mut c) = crate::common::pg::fresh_roster_db().await;
    let (conn, _stop) = emulator(&url).await;
    let (tx, run) = tds_pipeline(&conn, &url);
    let roster = Roster::generate(15, 5, true);
    roster.load(&mut c).await.unwrap();
    wait_drained(&c, std::time::Duration::from_secs(120), |_| {}).await.unwrap();
    for e in sbworker::demo::edits::burst(&roster, 45, 5) {
        e.apply(&c).await.unwrap();
    }
    wait_drained(&c, std::time::Duration::from_secs(120), |_| {}).await.unwrap();
    let verdict = verify(&c, &sbworker::engine::Tables::built_in().unwrap()).await.unwrap();
    assert!(verdict.problems.is_empty(), "{:?}", verdict.problems);
    assert_eq!((verdict.latest, verdict.faulted.len()), (14, 1));
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
}

#[tokio::test]
async fn sp_executesql_written_in_a_batch_runs_with_its_parameters() {
    // As scripts and ORMs send it: `EXEC sp_executesql N'…', N'@a int, …', @a = …` in a
    // batch (tiberius here; pymssql in its own test). The statements see the parameters
    // (not the caller's variables), a Service Broker statement runs inside, and values by
    // position or OUTPUT parameters are refused as not supported, not as a syntax error.
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let mut c = crate::common::tds::client(&conn).await;
    let rows = c
        .simple_query(
            "DECLARE @outer int = 5; \
             EXEC sp_executesql N'SELECT @a AS a, @b AS b', N'@a int, @b nvarchar(10)', @a = @outer, @b = N'x'; \
             EXEC sys.sp_executesql N'SELECT COUNT(*) AS n FROM dbo.loonfactorberekening_reken'; \
             SELECT @outer AS outer_after",
        )
        .await
        .unwrap()
        .into_results()
        .await
        .unwrap();
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!((rows[0][0].get::<i32, _>(0), rows[0][0].get::<&str, _>(1)), (Some(5), Some("x")));
    assert_eq!(rows[1][0].get::<i32, _>(0), Some(0));
    assert_eq!(rows[2][0].get::<i32, _>(0), Some(5));
    // The error's number, as the transport reads it (`error_of`).
    let mut number = async |sql: &str| {
        let e = match c.simple_query(sql).await {
            Ok(s) => s.into_results().await.expect_err(sql),
            Err(e) => e,
        };
        sbworker::broker::mssql::error_of(e).number
    };
    // The caller's variables are not the statements': 137, as SQL Server says.
    assert_eq!(number("DECLARE @outer int = 5; EXEC sp_executesql N'SELECT @outer AS o'").await, 137);
    for refused in [
        "EXEC sp_executesql N'SELECT @a AS a', N'@a int', 1",
        "DECLARE @b int; EXEC sp_executesql N'SELECT @a AS a', N'@a int OUTPUT', @a = @b OUTPUT",
    ] {
        assert_eq!(number(refused).await, 50100, "{refused}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_receive_waits_for_a_held_group_until_its_lock_timeout() {
    // The emulator runs `RECEIVE … WHERE conversation_group_id = g` as SQL Server most
    // likely does: a group another session holds is waited for, up to the connection's
    // LOCK_TIMEOUT (1222), or until that session's transaction ends (-1). The transport
    // relies on the bound (the conformance suite shows it going on with other groups).
    let (url, _s) = calc_world().await;
    let faults = Arc::new(Faults::default());
    let (conn, _stop) = emulator_with(&url, faults.clone()).await;
    crate::common::tds::send_vraag(&mut crate::common::tds::client(&conn).await).await;
    // Session A holds the group in an open transaction.
    let mut a = crate::common::tds::client(&conn).await;
    let g: Uuid = a
        .simple_query(
            "BEGIN TRANSACTION; DECLARE @g uniqueidentifier;
             WAITFOR (GET CONVERSATION GROUP @g FROM dbo.loonfactorberekening_reken), TIMEOUT 10000;
             SELECT @g AS g",
        )
        .await
        .unwrap()
        .into_row()
        .await
        .unwrap()
        .and_then(|r| r.get(0))
        .expect("a group");
    let mut b = crate::common::tds::client(&conn).await;
    let receive = "RECEIVE conversation_group_id FROM dbo.loonfactorberekening_reken WHERE conversation_group_id = @P1";
    for bound in ["SET LOCK_TIMEOUT 0", "SET LOCK_TIMEOUT 200"] {
        b.simple_query(bound).await.unwrap().into_results().await.unwrap();
        let e = match b.query(receive, &[&g]).await {
            Ok(stream) => stream.into_results().await.expect_err(bound),
            Err(e) => e,
        };
        assert_eq!(sbworker::broker::mssql::error_of(e).number, 1222, "{bound}");
    }
    assert_eq!(faults.group_lock_waits(), 2);
    // Without a bound it waits until A's transaction ends, then takes the group.
    b.simple_query("SET LOCK_TIMEOUT -1").await.unwrap().into_results().await.unwrap();
    let waiting =
        tokio::spawn(async move { b.query(receive, &[&g]).await.unwrap().into_first_result().await.unwrap().len() });
    wait_until("B's receive begins to wait", || async { faults.group_lock_waits() >= 3 }).await;
    assert!(!waiting.is_finished(), "B waits while A holds the group");
    a.simple_query("ROLLBACK TRANSACTION").await.unwrap().into_results().await.unwrap();
    assert_eq!(crate::common::within(30, "B's receive after A's rollback", waiting).await.unwrap(), 1);
}

#[tokio::test]
async fn error_tokens_from_the_wire_are_classified_by_number() {
    use sbworker::broker::ErrorKind;
    use sbworker::broker::mssql::error_of;
    let (url, s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let mut c = crate::common::tds::client(&conn).await;
    let mut fails = async |sql: &str, params: &[&dyn tiberius::ToSql]| {
        let e = match c.query(sql, params).await {
            Ok(stream) => stream.into_results().await.expect_err(sql),
            Err(e) => e,
        };
        error_of(e)
    };
    let e = fails("END CONVERSATION @P1", &[&Uuid::new_v4()]).await;
    assert_eq!((e.number, e.kind), (8426, ErrorKind::ConversationNotFound), "{e}");
    let e = fails("SELECT name FROM sys.tables", &[]).await;
    assert_eq!(e.number, 50100, "{e}");
    assert!(e.message.contains("not supported by the emulator"), "{e}");
    let e = fails("SEND ON", &[]).await;
    assert_eq!(e.number, 102, "{e}");
    s.client().batch_execute(&format!("SELECT sb.alter_queue('{REKEN_QUEUE}', false)")).await.unwrap();
    let e = fails("RECEIVE * FROM dbo.loonfactorberekening_reken", &[]).await;
    assert_eq!((e.number, e.kind), (9617, ErrorKind::QueueDisabled), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_t_sql_initiator_begins_a_dialog_sends_and_receives_the_answer_over_tds() {
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let (tx, run, _) = tds_worker(&conn, &url, |_| {});
    let mut c = crate::common::tds::client(&conn).await;
    // The body in each form a T-SQL sender uses: varbinary UTF-8; NVARCHAR (UTF-16LE, no
    // byte-order mark); and as SQL Server keeps an `xml` value, as the roster triggers
    // send it (UTF-16LE with a byte-order mark).
    for form in
        ["varbinary utf-8", "nvarchar", "xml as utf-16 with a mark", "CAST(nvarchar AS xml)", "an xml parameter"]
    {
        let id = Uuid::new_v4();
        let text = String::from_utf8(vraag_body(id)).unwrap();
        let sql = "DECLARE @h uniqueidentifier;
             BEGIN DIALOG CONVERSATION @h
                 FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
                 TO SERVICE '/Rekenserver/LoonfactorBerekening/RekenService'
                 ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract]
                 WITH ENCRYPTION = OFF;
             SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (@P1);
             SELECT @h;";
        let result = match form {
            "varbinary utf-8" => c.query(sql, &[&text.as_bytes()]).await,
            "nvarchar" => c.query(sql, &[&text.as_str()]).await,
            "an xml parameter" => {
                // A parameter of type xml (TDS type 0xF1), as a client binding an xml value sends it.
                let xml = tiberius::xml::XmlData::new(text.replace("encoding=\"UTF-8\"", "encoding=\"UTF-16\""));
                c.query(sql, &[&xml]).await
            }
            "CAST(nvarchar AS xml)" => {
                // As a trigger does: SEND ON CONVERSATION (@h) … (CAST(… AS xml)).
                let cast = sql
                    .replace("SEND ON CONVERSATION @h", "SEND ON CONVERSATION (@h)")
                    .replace("(@P1);", "(CAST(@P1 AS xml));");
                let text = text.replace("encoding=\"UTF-8\"", "encoding=\"UTF-16\"");
                c.query(cast, &[&text.as_str()]).await
            }
            _ => {
                let mut b = vec![0xFF, 0xFE];
                b.extend(
                    text.replace("encoding=\"UTF-8\"", "encoding=\"UTF-16\"").encode_utf16().flat_map(u16::to_le_bytes),
                );
                c.query(sql, &[&b.as_slice()]).await
            }
        };
        let row = result.unwrap().into_row().await.unwrap().expect("the handle");
        let handle: Uuid = row.get(0).unwrap();
        let rows = c
            .query(
                "WAITFOR (RECEIVE TOP (10) conversation_handle, message_type_name, message_body
                            FROM dbo.loonfactorberekening_data), TIMEOUT 30000",
                &[],
            )
            .await
            .unwrap()
            .into_first_result()
            .await
            .unwrap();
        // The Antwoord, and the EndDialog the calculation sends with it (it ends its
        // side in the same transaction): both in one receive.
        let types: Vec<&str> = rows.iter().map(|r| r.get::<&str, _>(1).unwrap()).collect();
        assert_eq!(types, [message_types::ANTWOORD, sbworker::broker::system::END_DIALOG], "{form}");
        assert_eq!(rows[0].get::<Uuid, _>(0), Some(handle), "{form}");
        assert_eq!(rows[0].get::<&str, _>(1), Some(message_types::ANTWOORD), "{form}");
        let answer = decode_antwoord(rows[0].get::<&[u8], _>(2).unwrap(), &Limits::default()).unwrap();
        assert_eq!(answer.id, id, "{form}: the answer to this Vraag");
        assert!(!answer.mutaties.is_empty(), "{form}");
        c.execute("END CONVERSATION @P1", &[&handle]).await.unwrap();
    }
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
}

/// BEGIN CONVERSATION TIMER from a T-SQL client: the DialogTimer arrives on the side's
/// own queue once due, with sequence number 0; an unknown handle is refused (8426).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_t_sql_client_sets_a_conversation_timer_and_receives_its_dialog_timer_over_tds() {
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let mut c = crate::common::tds::client(&conn).await;
    // No worker runs: the Vraag waits on the calculation's queue; the timer is the data
    // side's own.
    let row = c
        .query(
            "DECLARE @h uniqueidentifier;
             BEGIN DIALOG CONVERSATION @h
                 FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
                 TO SERVICE '/Rekenserver/LoonfactorBerekening/RekenService'
                 ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract]
                 WITH ENCRYPTION = OFF;
             SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (@P1);
             BEGIN CONVERSATION TIMER (@h) TIMEOUT = 3600;
             SELECT @h;",
            &[&vraag_body(Uuid::new_v4()).as_slice()],
        )
        .await
        .unwrap()
        .into_row()
        .await
        .unwrap()
        .expect("the handle");
    let handle: Uuid = row.get(0).unwrap();
    let receive = "WAITFOR (RECEIVE TOP (10) conversation_handle, message_type_name, message_sequence_number
                     FROM dbo.loonfactorberekening_data), TIMEOUT ";
    let rows = c.query(format!("{receive}100"), &[]).await.unwrap().into_first_result().await.unwrap();
    assert!(rows.is_empty(), "an hour away: nothing yet");
    // A new timeout, from a parameter: due at once.
    c.execute("BEGIN CONVERSATION TIMER (@P1) TIMEOUT = @P2", &[&handle, &0i32]).await.unwrap();
    let rows = c.query(format!("{receive}30000"), &[]).await.unwrap().into_first_result().await.unwrap();
    let got: Vec<(Uuid, &str, i64)> =
        rows.iter().map(|r| (r.get(0).unwrap(), r.get(1).unwrap(), r.get(2).unwrap())).collect();
    assert_eq!(got, [(handle, sbworker::broker::system::DIALOG_TIMER, 0)]);
    let e = c.execute("BEGIN CONVERSATION TIMER (@P1) TIMEOUT = 10", &[&Uuid::new_v4()]).await.unwrap_err();
    assert!(e.to_string().contains("8426") || e.to_string().contains("not found"), "{e}");
    c.execute("END CONVERSATION @P1 WITH CLEANUP", &[&handle]).await.unwrap();
}

/// Asks `n` questions, collects the answers: each request answered exactly once.
async fn every_request_answered_once(s: &mut sbworker::broker::postgres::Session, n: usize) {
    let mut asked = Vec::new();
    for _ in 0..n {
        asked.push(ask(s, &vraag_body(Uuid::new_v4())).await);
    }
    let got = collect(s, n).await;
    let mut answered: Vec<Uuid> =
        got.iter().filter(|m| m.message_type == message_types::ANTWOORD).map(|m| m.conversation_handle).collect();
    answered.sort();
    asked.sort();
    assert_eq!(answered, asked, "{got:?}");
    // Once the calculation's queue is empty and no attempt is open, nothing more comes:
    // no second answer to any request, nothing set aside.
    wait_until("the calculation queue is done", || async {
        count(
            s,
            &format!(
                "SELECT (SELECT count(*) FROM sb.message WHERE queue = '{REKEN_QUEUE}') \
                 + (SELECT count(*) FROM sbworker.message_attempt)"
            ),
        )
        .await
            == 0
    })
    .await;
    assert_eq!(
        count(s, &format!("SELECT count(*) FROM sb.message WHERE queue = '{DATA_QUEUE}'")).await,
        0,
        "no answer beyond one per request"
    );
    assert_eq!(count(s, "SELECT count(*) FROM sbworker.dead_letter").await, 0);
    end_all(s, asked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_dropped_between_send_and_commit_loses_nothing_and_answers_once() {
    // Every other reply's SEND is followed by a dropped connection before its COMMIT: the
    // transaction rolls back (the Antwoord with it), the Vraag returns to the queue, and
    // the worker, given the attempt back as the environment's fault, answers it once.
    let (url, mut s) = calc_world().await;
    let faults = Arc::new(Faults::default());
    faults.set_send_drop_every(Some(2));
    let (conn, _stop) = emulator_with(&url, faults.clone()).await;
    let (tx, run, metrics) = tds_worker(&conn, &url, |c| c.queues.get_mut(REKEN_QUEUE).unwrap().max_readers = 1);
    every_request_answered_once(&mut s, 6).await;
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
    assert!(faults.injected() >= 3, "{}", faults.injected());
    let text = metrics.encode();
    assert_eq!(
        metric_in(&text, &format!("sbworker_requests_answered_total{{queue=\"{REKEN_QUEUE}\"}}")),
        6.0,
        "{text}"
    );
    assert!(
        metric_in(&text, &format!("sbworker_transient_failures_total{{queue=\"{REKEN_QUEUE}\"}}")) >= 3.0,
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_deadlocks_1205_are_retried_and_every_request_is_answered_once() {
    let (url, mut s) = calc_world().await;
    let faults = Arc::new(Faults::new(Some(2), None, std::time::Duration::from_millis(2)));
    let (conn, _stop) = emulator_with(&url, faults.clone()).await;
    // One reader: receives come one after another, so no message meets two faults in a row.
    let (tx, run, metrics) = tds_worker(&conn, &url, |c| c.queues.get_mut(REKEN_QUEUE).unwrap().max_readers = 1);
    every_request_answered_once(&mut s, 6).await;
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
    // Every other RECEIVE that took a message failed, its transaction rolled back, and the
    // reader received the same message again after a backoff.
    assert!(faults.injected() >= 5, "{}", faults.injected());
    let text = metrics.encode();
    assert_eq!(metric_in(&text, &format!("sbworker_requests_answered_total{{queue=\"{REKEN_QUEUE}\"}}")), 6.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_dropped_mid_transaction_is_reopened_and_nothing_is_lost() {
    let (url, mut s) = calc_world().await;
    let faults = Arc::new(Faults::new(None, Some(2), std::time::Duration::ZERO));
    let (conn, _stop) = emulator_with(&url, faults.clone()).await;
    let (tx, run, _) = tds_worker(&conn, &url, |c| c.queues.get_mut(REKEN_QUEUE).unwrap().max_readers = 1);
    every_request_answered_once(&mut s, 6).await;
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
    assert!(faults.injected() >= 3, "{}", faults.injected());
}

/// TLS as SQL Server negotiates it: a client that asks for encryption (tiberius with
/// `Encrypt=true`, as the worker's transport connects to SQL Server) gets it, with the
/// handshake inside PRELOGIN packets, and the worker answers over it; one that does not
/// trust the emulator's certificate (made at start, self-signed) is refused by its own
/// check, as with a real server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_asks_for_tls_gets_it_and_checks_the_certificate() {
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let untrusted = MssqlTransport::new(&conn.replace("Encrypt=false", "Encrypt=true")).unwrap();
    let e = match sbworker::transport::Transport::open(&untrusted).await {
        Ok(_) => panic!("a certificate nobody vouched for was trusted"),
        Err(e) => e,
    };
    assert_eq!(e.kind, sbworker::broker::ErrorKind::Connection, "{e}");
    let encrypted = conn.replace("Encrypt=false", "Encrypt=true;TrustServerCertificate=true");
    let (tx, run, _) = tds_worker(&encrypted, &url, |_| {});
    let mut c = sbworker::broker::mssql::connect(&sbworker::broker::mssql::Connection::parse(&encrypted).unwrap())
        .await
        .unwrap();
    let id = Uuid::new_v4();
    let sql = "DECLARE @h uniqueidentifier;
         BEGIN DIALOG CONVERSATION @h FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
             TO SERVICE '/Rekenserver/LoonfactorBerekening/RekenService'
             ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract] WITH ENCRYPTION = OFF;
         SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (@P1);
         SELECT @h;";
    let text = String::from_utf8(vraag_body(id)).unwrap();
    let row = c.query(sql, &[&text.as_str()]).await.unwrap().into_row().await.unwrap().unwrap();
    let handle: Uuid = row.get(0).unwrap();
    let rows = c
        .query(
            "WAITFOR (RECEIVE conversation_handle, message_type_name, message_body
                      FROM dbo.loonfactorberekening_data), TIMEOUT 30000",
            &[],
        )
        .await
        .unwrap()
        .into_first_result()
        .await
        .unwrap();
    assert_eq!(rows[0].get::<Uuid, _>(0), Some(handle));
    assert_eq!(rows[0].get::<&str, _>(1), Some(message_types::ANTWOORD));
    let answer = decode_antwoord(rows[0].get::<&[u8], _>(2).unwrap(), &Limits::default()).unwrap();
    assert_eq!(answer.id, id);
    c.execute("END CONVERSATION @P1", &[&handle]).await.unwrap();
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
}

/// A TCP proxy in front of `port` for one connection: what the client sent, as it
/// went over the wire.
async fn recording_proxy(port: u16) -> (u16, Arc<std::sync::Mutex<Vec<u8>>>) {
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

fn utf16(s: &str) -> Vec<u8> {
    s.encode_utf16().flat_map(u16::to_le_bytes).collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// TLS as SQL Server negotiates it, seen on the wire through a proxy, with tiberius as
/// the client: TDS 8.0 (`Encrypt=strict`: TLS first, ALPN `tds/8.0`) encrypts everything;
/// a client that offers encryption without requiring it (tiberius's `EncryptionLevel::Off`,
/// ENCRYPT_OFF) has its login encrypted and the rest in plain text, as SQL Server does;
/// `Encrypt=false` (ENCRYPT_NOT_SUP) sends everything in plain text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_login_only_and_no_encryption_are_negotiated_as_sql_server_does() {
    use sbworker::broker::mssql::Connection;
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let port = crate::common::tds::port(&conn);
    let login_name = utf16("sbworker");
    for (mode, level) in [
        ("strict", tiberius::EncryptionLevel::Strict),
        ("login only", tiberius::EncryptionLevel::Off),
        ("none", tiberius::EncryptionLevel::NotSupported),
    ] {
        let (proxy, sent) = recording_proxy(port).await;
        let mut c = Connection::parse(
            &conn
                .replace(&format!(",{port};"), &format!(",{proxy};"))
                .replace("Encrypt=false", "TrustServerCertificate=true"),
        )
        .unwrap();
        c.encrypt = level;
        let mut client = sbworker::broker::mssql::connect(&c).await.unwrap_or_else(|e| panic!("{mode}: {e}"));
        let row = client.simple_query("SELECT 42 AS answer").await.unwrap().into_row().await.unwrap().unwrap();
        assert_eq!(row.get::<i32, _>(0), Some(42), "{mode}");
        drop(client);
        let sent = sent.lock().unwrap().clone();
        let (login_plain, query_plain) = (contains(&sent, &login_name), contains(&sent, &utf16("SELECT 42 AS answer")));
        match mode {
            "strict" => {
                assert_eq!(sent.first(), Some(&0x16), "strict: a TLS handshake record comes first");
                assert!(!login_plain && !query_plain, "strict: nothing in plain text");
            }
            "login only" => assert!(!login_plain && query_plain, "login only: the login encrypted, the query not"),
            _ => assert!(login_plain && query_plain, "no encryption: both in plain text"),
        }
    }
}

/// A client that offers encryption (ENCRYPT_OFF) is answered ENCRYPT_OFF; one that then
/// sends its LOGIN7 in plain text instead of running the handshake is logged in all the
/// same (no client tested here does: pymssql's FreeTDS encrypts its login, tedious and
/// python-tds offer no encryption), rather than hanging on a handshake that never comes.
#[tokio::test]
async fn a_plain_login_after_encrypt_off_is_served() {
    use sbworker::emulator::codec::{self, packet_type};
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let port = crate::common::tds::port(&conn);
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    codec::write_message(&mut s, packet_type::PRELOGIN, &codec::prelogin_request(codec::ENCRYPT_OFF), 4096)
        .await
        .unwrap();
    let (_, answer) = codec::read_message(&mut s).await.unwrap().unwrap();
    assert_eq!(codec::prelogin_encryption(&answer), Some(codec::ENCRYPT_OFF));
    codec::write_message(&mut s, packet_type::LOGIN7, &codec::login7_request("sbworker", "p;w\"d", "payroll"), 4096)
        .await
        .unwrap();
    let (_, tokens) =
        crate::common::within(10, "the login's answer", codec::read_message(&mut s)).await.unwrap().unwrap();
    assert!(tokens.contains(&0xAD), "a LOGINACK: {tokens:02X?}");
}

/// The same negotiation with ODBC Driver 18 (mssql-python) and tedious, each through a
/// proxy that records what it sends: `Encrypt=strict` with the certificate given
/// (ODBC's `ServerCertificate`, tedious's `ca`; TDS 8.0 checks the certificate and
/// ignores TrustServerCertificate) encrypts everything; ODBC's `Encrypt=no` offers
/// encryption (ENCRYPT_OFF) and the driver encrypts its login alone; tedious's
/// `encrypt: false` offers none (ENCRYPT_NOT_SUP): everything in plain text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odbc_and_tedious_connect_strict_and_with_login_only_encryption() {
    let (url, _s) = calc_world().await;
    let (conn, _stop, pem) = crate::common::tds::emulator_tls(&url, Arc::new(Faults::default())).await;
    let port = crate::common::tds::port(&conn);
    let dir = crate::common::calc::TempDir::new("tls-clients");
    let ca = dir.0.join("emulator.pem");
    std::fs::write(&ca, &pem).unwrap();
    let mssql_python = crate::common::python_package("mssql-python", "mssql_python", "mssql-python==1.16.0");
    let tedious = crate::common::npm_package("tedious", "tedious", "tedious@19.2.2");
    let login_name = utf16("sbworker");
    let cases = [
        ("odbc strict", "odbc", format!("Encrypt=strict;ServerCertificate={};", ca.display()), "everything"),
        ("odbc Encrypt=no", "odbc", "Encrypt=no;".to_owned(), "the login"),
        ("tedious strict", "tedious", "strict".to_owned(), "everything"),
        ("tedious encrypt false", "tedious", "false".to_owned(), "nothing"),
    ];
    for (what, client, setting, encrypted) in cases {
        let (proxy, sent) = recording_proxy(port).await;
        let proxy = proxy.to_string();
        let mut command = if client == "odbc" {
            let mut c = tokio::process::Command::new("python3");
            c.env("PYTHONPATH", &mssql_python)
                .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/odbc_connect.py"))
                .args([proxy.as_str(), "sbworker", "p;w\"d", setting.as_str()]);
            c
        } else {
            let mut c = tokio::process::Command::new("node");
            c.env("NODE_PATH", &tedious)
                .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/tedious_connect.js"))
                .args([proxy.as_str(), "sbworker", "p;w\"d", setting.as_str()]);
            if setting == "strict" {
                c.arg(&ca);
            }
            c
        };
        command.kill_on_drop(true);
        let v = client_json(what, command).await;
        assert_eq!(v["answer"], 42, "{what}: {v}");
        let sent = sent.lock().unwrap().clone();
        let (login_plain, query_plain) = (contains(&sent, &login_name), contains(&sent, &utf16("SELECT 42 AS answer")));
        match encrypted {
            "everything" => {
                assert_eq!(sent.first(), Some(&0x16), "{what}: a TLS handshake record comes first");
                assert!(!login_plain && !query_plain, "{what}: nothing in plain text");
            }
            "the login" => assert!(!login_plain && query_plain, "{what}: the login encrypted, the query not"),
            _ => assert!(login_plain && query_plain, "{what}: both in plain text"),
        }
    }
}

/// python-tds, installed from PyPI into the test target directory when missing.
fn python_tds() -> std::path::PathBuf {
    crate::common::python_package("python-tds", "pytds", "python-tds==1.17.1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_tds_a_client_we_did_not_write_sends_receives_reads_every_column_and_cancels() {
    let (url, s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let port = crate::common::tds::port(&conn).to_string();
    let out = tokio::process::Command::new("python3")
        .env("PYTHONPATH", python_tds())
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/pytds_client.py"))
        .args([port.as_str(), "sbworker", "p;w\"d"])
        .output();
    let out = crate::common::within(120, "python-tds ends", out).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Every queue column, in SQL Server's order, with its type as python-tds decoded it.
    let columns: Vec<&str> = v["columns"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    assert_eq!(
        columns,
        [
            "status",
            "priority",
            "queuing_order",
            "conversation_group_id",
            "conversation_handle",
            "message_sequence_number",
            "service_name",
            "service_id",
            "service_contract_name",
            "service_contract_id",
            "message_type_name",
            "message_type_id",
            "validation",
            "message_body"
        ]
    );
    // The payroll hand-off's procedures, called by python-tds.
    let export: Vec<&str> = v["export_columns"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    assert_eq!(
        export,
        [
            "batch",
            "sleutel",
            "dienstverband_id",
            "periode_id",
            "versie",
            "kaart_soort",
            "loonfactor_code",
            "waarde",
            "vervangt_versie",
            "waarschuwingen"
        ]
    );
    assert_eq!((v["export_rows"].as_i64(), v["export_confirmed"].as_i64()), (Some(0), Some(0)), "{v}");
    let row = &v["row"];
    let types = &v["types"];
    assert_eq!(row["message_type_name"], "/Rekenserver/LoonfactorBerekening/Vraag");
    assert_eq!(row["service_name"], "/Rekenserver/LoonfactorBerekening/RekenService");
    assert_eq!(row["service_contract_name"], "/Rekenserver/LoonfactorBerekening/DataContract");
    assert_eq!(row["message_sequence_number"], "1");
    assert_eq!(row["validation"], "X");
    let body = hex_decode(row["message_body"].as_str().unwrap());
    assert_eq!(body, br#"<Hallo xmlns="urn:test">wereld</Hallo>"#);
    for (c, t) in [
        ("conversation_group_id", "UUID"),
        ("conversation_handle", "UUID"),
        ("message_body", "bytes"),
        ("status", "int"),
        ("queuing_order", "int"),
    ] {
        assert_eq!(types[c], t, "{c}");
    }
    assert_ne!(row["conversation_handle"], v["initiator"], "the target has a handle of its own");
    // Variables assigned by RECEIVE, the body read as XML.
    assert_eq!(v["assigned"], serde_json::json!(["/Rekenserver/LoonfactorBerekening/Antwoord", "1"]));
    assert_eq!(v["xml"], r#"<Hallo xmlns="urn:test">wereld</Hallo>"#);
    // An NVARCHAR body into a WELL_FORMED_XML type is validated as UTF-16 and kept as sent.
    let utf16: String = "<RequestMsg>Message for Target service: Zoë</RequestMsg>"
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(v["nvarchar_body"], utf16, "{v}");
    let xml: String = [0xFF, 0xFE]
        .into_iter()
        .chain("<RequestMsg>As xml</RequestMsg>".encode_utf16().flat_map(u16::to_le_bytes))
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(v["xml_body"], xml, "CAST(… AS xml) is kept as SQL Server keeps xml: {v}");
    // A waiting RECEIVE cancelled with an ATTENTION; the connection serves the next request.
    assert_eq!(v["cancel"], "timed out", "{v}");
    assert_eq!(v["after_cancel"], 42, "{v}");
    // Both sides ended WITH CLEANUP: nothing left behind.
    assert_eq!(count(&s, "SELECT count(*) FROM sb.endpoint").await, 0);
    assert_eq!(count(&s, "SELECT count(*) FROM sb.message").await, 0);
}

fn hex_decode(h: &str) -> Vec<u8> {
    (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap()).collect()
}

/// Writes `payload` as one TDS message of type `ty`.
async fn send_packet(w: &mut tokio::net::TcpStream, ty: u8, payload: &[u8]) -> std::io::Result<()> {
    sbworker::emulator::codec::write_message(w, ty, payload, 4096).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_packets_and_garbage_bytes_never_panic_the_emulator() {
    use sbworker::emulator::codec::{self, packet_type};
    use tokio::io::AsyncWriteExt;
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let port = crate::common::tds::port(&conn);
    let addr = ("127.0.0.1", port);
    let mut rng = sbworker::demo::rng::Rng::new(9);
    let types = [
        packet_type::SQL_BATCH,
        packet_type::RPC,
        packet_type::TRANSACTION_MANAGER,
        packet_type::ATTENTION,
        packet_type::LOGIN7,
        packet_type::PRELOGIN,
        0x00,
        0xFF,
    ];
    for round in 0..150 {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let len = rng.below(600);
        let mut junk: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        match round % 3 {
            // Raw garbage on a fresh connection.
            0 => {
                let _ = tcp.write_all(&junk).await;
            }
            // A well-framed PRELOGIN/LOGIN7 with a random payload.
            1 => {
                let _ = send_packet(&mut tcp, packet_type::PRELOGIN, &codec::prelogin_request(2)).await;
                let _ = codec::read_message(&mut tcp).await;
                if rng.chance(0.5) {
                    let good = codec::login7_request("sbworker", "p;w\"d", "payroll");
                    let at = rng.below(good.len());
                    junk = [&good[..at], &junk[..]].concat();
                }
                let _ = send_packet(&mut tcp, packet_type::LOGIN7, &junk).await;
            }
            // Logged in, then requests of every type with random payloads, some built on a
            // valid ALL_HEADERS prefix so the parser gets past it.
            _ => {
                let _ = send_packet(&mut tcp, packet_type::PRELOGIN, &codec::prelogin_request(2)).await;
                let _ = codec::read_message(&mut tcp).await;
                let login = codec::login7_request("sbworker", "p;w\"d", "payroll");
                send_packet(&mut tcp, packet_type::LOGIN7, &login).await.unwrap();
                codec::read_message(&mut tcp).await.unwrap().expect("login answered");
                for _ in 0..4 {
                    let ty = types[rng.below(types.len())];
                    let mut payload = if rng.chance(0.5) {
                        let mut h = 22u32.to_le_bytes().to_vec();
                        h.extend_from_slice(&18u32.to_le_bytes());
                        h.extend_from_slice(&2u16.to_le_bytes());
                        h.extend_from_slice(&[0; 12]);
                        h
                    } else {
                        Vec::new()
                    };
                    payload.extend((0..rng.below(300)).map(|_| rng.next_u64() as u8));
                    if send_packet(&mut tcp, ty, &payload).await.is_err() {
                        break;
                    }
                    if ty != packet_type::ATTENTION
                        && tokio::time::timeout(std::time::Duration::from_secs(10), codec::read_message(&mut tcp))
                            .await
                            .map_or(true, |r| r.is_err())
                    {
                        break;
                    }
                }
            }
        }
        drop(tcp);
    }
    // Still serving, and no connection task panicked.
    let transport = MssqlTransport::new(&conn).unwrap();
    let mut session = sbworker::transport::Transport::open(&transport).await.unwrap();
    let state = sbworker::transport::Session::queue_state(&mut session, REKEN_QUEUE).await.unwrap();
    assert!(state.enabled);
    assert_eq!(sbworker::emulator::server::connection_panics(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_tds_runs_the_tutorials_conversation_steps_and_the_reference_pages_forms_unchanged() {
    use serde_json::json;
    let (url, s) = calc_world().await;
    // The tutorial's objects, made as its set-up lesson makes them (CREATE MESSAGE TYPE …
    // VALIDATION = WELL_FORMED_XML, a contract with one type each way, two queues, two
    // services): here through the broker's own functions.
    s.client()
        .batch_execute(
            "SELECT sb.create_message_type('//sbworker/Tutorial/RequestMessage', 'WELL_FORMED_XML');
             SELECT sb.create_message_type('//sbworker/Tutorial/ReplyMessage', 'WELL_FORMED_XML');
             SELECT sb.create_contract('//sbworker/Tutorial/Contract',
                 ARRAY[['//sbworker/Tutorial/RequestMessage', 'INITIATOR'], ['//sbworker/Tutorial/ReplyMessage', 'TARGET']]);
             SELECT sb.create_queue('TutorialTargetQueue');
             SELECT sb.create_queue('TutorialInitiatorQueue');
             SELECT sb.create_service('//sbworker/Tutorial/TargetService', 'TutorialTargetQueue',
                 ARRAY['//sbworker/Tutorial/Contract']);
             SELECT sb.create_service('//sbworker/Tutorial/InitiatorService', 'TutorialInitiatorQueue');",
        )
        .await
        .unwrap();
    let (conn, _stop) = emulator(&url).await;
    let port = crate::common::tds::port(&conn).to_string();
    let out = tokio::process::Command::new("python3")
        .env("PYTHONPATH", python_tds())
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/pytds_tutorial.py"))
        .args([port.as_str(), "sbworker", "p;w\"d"])
        .output();
    let out = crate::common::within(120, "python-tds ends", out).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Step 1 shows the request it sent; step 2 the request it received (an nvarchar
    // variable reads the UTF-16 body as text) and, inside the IF, the reply it sent;
    // step 3 the reply.
    assert_eq!(v["step1"], json!([[["<RequestMsg>A request for the target</RequestMsg>"]]]), "{v}");
    assert_eq!(
        v["step2"],
        json!([
            [["<RequestMsg>A request for the target</RequestMsg>"]],
            [["<ReplyMsg>A reply for the initiator</ReplyMsg>"]]
        ]),
        "{v}"
    );
    assert_eq!(v["step3"], json!([[["<ReplyMsg>A reply for the initiator</ReplyMsg>"]]]), "{v}");
    // One SEND on two conversations; GET CONVERSATION GROUP, then RECEIVE … INTO @t of
    // that group and SELECT from @t; the IF took its ELSE.
    let initiators = v["initiators"].as_array().unwrap();
    assert_eq!(initiators.len(), 2, "{v}");
    let table = v["table"].as_array().unwrap();
    assert_eq!(table.len(), 4, "four result sets: {v}");
    let group = table[0][0][0].as_str().unwrap();
    let row = table[1][0].as_array().unwrap();
    assert_eq!(row.len(), 8, "{v}");
    assert_eq!(row[0], group, "the row of the group GET CONVERSATION GROUP locked: {v}");
    assert_eq!(
        (&row[2], &row[3], &row[4], &row[5], &row[6]),
        (
            &json!("1"),
            &json!("//sbworker/Tutorial/TargetService"),
            &json!("//sbworker/Tutorial/Contract"),
            &json!("//sbworker/Tutorial/RequestMessage"),
            &json!("X")
        ),
        "{v}"
    );
    // An nvarchar body is kept as SQL Server keeps it: UTF-16LE.
    let body: String = "<Both/>".encode_utf16().flat_map(u16::to_le_bytes).map(|b| format!("{b:02x}")).collect();
    assert_eq!(row[7], json!(body), "{v}");
    assert_eq!(table[2][0][0], row[1], "{v}");
    assert_eq!(table[3], json!([["a group"]]), "{v}");
    // A CASE in the column list, into a table variable: the request's body as xml
    // (validation X: an NVARCHAR body, UTF-16 without a mark), the initiator's EndDialog
    // (validation E) as the ELSE branch's stand-in.
    assert_eq!(
        v["case_into"],
        json!([
            ["//sbworker/Tutorial/RequestMessage", "<Expense>42</Expense>"],
            ["http://schemas.microsoft.com/SQL/ServiceBroker/EndDialog", "<none/>"]
        ]),
        "{v}"
    );
    // What the emulator does not run is refused, loudly; so is one handle twice in a SEND.
    assert!(v["refused"].as_str().unwrap().contains("not supported by the emulator"), "{v}");
    // The timer's reference-page form, then a timer due at once: its DialogTimer on the
    // initiator's own queue.
    let timer = &v["timer"];
    assert_eq!(
        timer["received"],
        json!([[[sbworker::broker::system::DIALOG_TIMER, timer["dialog"].as_str().unwrap()]]]),
        "{v}"
    );
    assert!(v["twice"].as_str().unwrap().contains("more than once"), "{v}");
    // Every conversation ended: nothing left behind.
    assert_eq!(count(&s, "SELECT count(*) FROM sb.endpoint").await, 0, "{v}");
    assert_eq!(count(&s, "SELECT count(*) FROM sb.message").await, 0, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_t_sql_sender_sends_as_the_roster_triggers_do_and_the_collector_keeps_the_latest() {
    use sbworker::demo::check::{verify, wait_drained};
    use sbworker::demo::roster::{PERIODE_ID, Roster};
    let (url, mut c) = crate::common::pg::fresh_roster_db().await;
    let (conn, _stop) = emulator(&url).await;
    let (tx, run) = tds_pipeline(&conn, &url);
    // The roster, its versions raised by the triggers but nothing sent: the T-SQL sender
    // below sends instead.
    c.batch_execute("SET rekenserver.vragen_uit = on").await.unwrap();
    Roster::generate(6, 11, true).load(&mut c).await.unwrap();
    let mut sender = crate::common::tds::client(&conn).await;
    // As the SQL Server trigger sends one key's Vraag: in the key's conversation group,
    // the body an `xml` value (UTF-16LE with a byte-order mark in the queue), the log
    // row in the same transaction (written here through PostgreSQL before the COMMIT).
    async fn send(
        sender: &mut sbworker::broker::mssql::Tds,
        c: &tokio_postgres::Client,
        dv: i32,
        versie: i64,
        xml: &str,
        id: Uuid,
        group: Uuid,
    ) {
        sender.simple_query("BEGIN TRANSACTION").await.unwrap().into_results().await.unwrap();
        let row = sender
            .query(
                "DECLARE @h uniqueidentifier;
                 BEGIN DIALOG CONVERSATION @h
                     FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
                     TO SERVICE N'/Rekenserver/LoonfactorBerekening/RekenService'
                     ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract]
                     WITH RELATED_CONVERSATION_GROUP = @P2, ENCRYPTION = OFF;
                 SEND ON CONVERSATION (@h) MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (CAST(@P1 AS xml));
                 SELECT @h;",
                &[&xml, &group],
            )
            .await
            .unwrap()
            .into_row()
            .await
            .unwrap()
            .expect("the handle");
        let handle: Uuid = row.get(0).unwrap();
        c.execute(
            "INSERT INTO rekenserver.berekening_log (dialog_handle, vraag_id, dienstverband_id, periode_id, versie) VALUES ($1, $2, $3, $4, $5)",
            &[&handle, &id, &dv, &PERIODE_ID, &versie],
        )
        .await
        .unwrap();
        sender.simple_query("COMMIT TRANSACTION").await.unwrap().into_results().await.unwrap();
    }
    let vraag = |dv: i32, versie: i64, id: Uuid| {
        let c = &c;
        async move {
            let r = c
                .query_one(
                    "SELECT rekenserver.vraag($1, $2, $3, $4)::text, group_id FROM rekenserver.sleutel WHERE dienstverband_id = $1 AND periode_id = $2",
                    &[&dv, &PERIODE_ID, &versie, &id],
                )
                .await
                .unwrap();
            (r.get::<_, String>(0), r.get::<_, Uuid>(1))
        }
    };
    let keys: Vec<(i32, i64)> = c
        .query("SELECT dienstverband_id, versie FROM rekenserver.sleutel ORDER BY 1", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(keys.len(), 6);
    // One key goes out twice: its Vraag of now, then (after a planner's edit) the newer
    // one sent first and the older one after it, as two senders racing might.
    let (edited, v1) = keys[0];
    let id1 = Uuid::new_v4();
    let (old_xml, group) = vraag(edited, v1, id1).await;
    c.execute(
        "UPDATE rooster.tijdblok SET is_ziek = NOT is_ziek WHERE id = (SELECT min(t.id) FROM rooster.tijdblok t JOIN rooster.dienst d ON d.id = t.dienst_id WHERE d.dienstverband_id = $1)",
        &[&edited],
    )
    .await
    .unwrap();
    let v2: i64 = c
        .query_one("SELECT versie FROM rekenserver.sleutel WHERE dienstverband_id = $1", &[&edited])
        .await
        .unwrap()
        .get(0);
    assert_eq!(v2, v1 + 1, "the edit raised the version");
    let id2 = Uuid::new_v4();
    let (new_xml, _) = vraag(edited, v2, id2).await;
    send(&mut sender, &c, edited, v2, &new_xml, id2, group).await;
    send(&mut sender, &c, edited, v1, &old_xml, id1, group).await;
    for &(dv, versie) in &keys[1..] {
        let id = Uuid::new_v4();
        let (xml, group) = vraag(dv, versie, id).await;
        send(&mut sender, &c, dv, versie, &xml, id, group).await;
    }
    wait_drained(&c, std::time::Duration::from_secs(120), |_| {}).await.unwrap();
    // Every key holds the result of its latest version (the second builder's
    // calculation); the older Vraag of the edited key was answered but not stored.
    let verdict = verify(&c, &sbworker::engine::Tables::built_in().unwrap()).await.unwrap();
    assert!(verdict.problems.is_empty(), "{:?}", verdict.problems);
    assert_eq!((verdict.latest, verdict.faulted.len()), (5, 1));
    let outcome = |id: Uuid| {
        let c = &c;
        async move {
            c.query_one("SELECT uitkomst FROM rekenserver.berekening_log WHERE vraag_id = $1", &[&id])
                .await
                .unwrap()
                .get::<_, String>(0)
        }
    };
    assert_eq!(outcome(id2).await, "opgeslagen");
    assert_ne!(outcome(id1).await, "opgeslagen", "the older version is never stored over the newer");
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
}

/// `Server=host\INSTANCE` without a port is found through the SQL Server
/// Browser's protocol (MC-SQLR over real UDP), as a Windows shop's named instance is;
/// an instance the browser does not have gets no answer, and the error says what to check.
#[tokio::test]
async fn a_named_instance_is_found_through_the_sql_server_browser() {
    use sbworker::broker::mssql::Connection;
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let port: u16 = conn.split("127.0.0.1,").nth(1).unwrap().split(';').next().unwrap().parse().unwrap();
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let browser_port = socket.local_addr().unwrap().port();
    let (_browser_stop, stop) = Stop::new();
    tokio::spawn(sbworker::emulator::browser::serve(socket, "PAYROLL".into(), port, stop));
    let named = conn.replace(&format!("tcp:127.0.0.1,{port}"), "127.0.0.1\\payroll");
    let mut c = Connection::parse(&named).unwrap();
    assert_eq!((c.instance.as_deref(), c.port_given), (Some("payroll"), false));
    c.browser_port = browser_port;
    let mut client = sbworker::broker::mssql::connect(&c).await.unwrap();
    let n: i32 = client
        .query("SELECT COUNT(*) FROM dbo.loonfactorberekening_reken", &[])
        .await
        .unwrap()
        .into_row()
        .await
        .unwrap()
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(n, 0);
    c.instance = Some("OTHER".into());
    let e = match sbworker::broker::mssql::connect(&c).await {
        Ok(_) => panic!("connected to an instance the browser does not have"),
        Err(e) => e,
    };
    assert!(e.message.contains("no answer from the SQL Server Browser") && e.message.contains("OTHER"), "{e}");
}

/// `sbworker sweep --mssql` and `sbworker export --mssql` (the real binary, over TDS):
/// the sweep sends the keys of a bulk import, and the payroll export claims, writes and
/// confirms them through `Rekenserver.sweep`, `export_claim` and `export_ack` (the
/// emulator runs the PostgreSQL hand-off behind them; the T-SQL procedures themselves
/// are checked by the script tests and the doc review, no SQL Server runs here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_and_sweep_run_on_the_sql_server_transport() {
    use sbworker::demo::roster::Roster;
    let (url, c) = crate::common::pg::fresh_roster_db().await;
    let (conn, _stop) = emulator(&url).await;
    let (mut loader, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    loader.batch_execute("SET rekenserver.vragen_uit = on").await.unwrap();
    Roster::generate(5, 21, false).load(&mut loader).await.unwrap();
    let keys: i64 = c.query_one("SELECT count(*) FROM rekenserver.sleutel", &[]).await.unwrap().get(0);
    let bin = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_sbworker"))
            .args(args)
            .env_remove("SBWORKER__BROKER__CONNECTION")
            .env("SBWORKER_HANDOFF_MSSQL", &conn)
            .output()
            .unwrap()
    };
    let swept = bin(&["sweep"]);
    let said = String::from_utf8_lossy(&swept.stdout);
    assert!(swept.status.success(), "{said} {}", String::from_utf8_lossy(&swept.stderr));
    assert!(said.contains(&format!("{keys} stale keys")) && said.contains(&format!("{keys} Vraags sent")), "{said}");
    // A string that cannot be used is refused without a piece of its password: here an
    // unquoted ';' makes the password's tail read as a key.
    let leaky = conn.replace("Password=\"p;w\"\"d\"", "Password=s3cr;et=Tail9");
    assert_ne!(leaky, conn);
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_sbworker"))
        .args(["sweep", "--mssql", &leaky])
        .env_remove("SBWORKER__BROKER__CONNECTION")
        .env_remove("SBWORKER_HANDOFF_MSSQL")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && err.contains("does not know"), "{err}");
    assert!(!err.contains("s3cr") && !err.contains("Tail9") && !err.contains("'et'"), "a secret shown: {err}");

    let dir = TempDir::new("mssql-handoff");
    let worker = spawn_worker(&dir, &sbworker::demo::worker_config_text(&url, 2));
    sbworker::demo::check::wait_drained(&c, std::time::Duration::from_secs(60), |_| {}).await.unwrap();
    assert_eq!(stop_worker(worker).await, Some(0));
    let stored: i64 = c
        .query_one("SELECT count(*) FROM rekenserver.resultaat_factor WHERE periode_id = 202604", &[])
        .await
        .unwrap()
        .get(0);
    assert!(stored > 0);

    // A leased claim to a file, confirmed by its batch; then nothing is left to claim.
    let out = dir.0.join("april.csv");
    let exported = bin(&["export", "--periode", "202604", "--mode", "lease", "--out", out.to_str().unwrap()]);
    let summary = String::from_utf8_lossy(&exported.stderr).into_owned();
    assert!(exported.status.success(), "{summary}");
    let csv = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "batch,sleutel,dienstverband_id,periode_id,versie,kaart_soort,loonfactor_code,waarde,correctie,vervangt_versie,waarschuwingen"
    );
    assert!(lines[1..].iter().all(|l| l.split(',').nth(8) == Some("0")), "nothing was exported before: no corrections");
    assert_eq!(lines.len() as i64 - 1, stored, "{summary}");
    // The amounts exactly as stored.
    let first: Vec<&str> = lines[1].split(',').collect();
    let (dv, code): (i32, &str) = (first[2].parse().unwrap(), first[6]);
    let waarde: String = c
        .query_one(
            "SELECT waarde::text FROM rekenserver.resultaat_factor WHERE dienstverband_id = $1 AND loonfactor_code = $2",
            &[&dv, &code],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(first[7], waarde);
    let batch = summary.split("--ack ").nth(1).expect("the confirmation command").trim().to_owned();
    let acked = bin(&["export", "--ack", &batch]);
    assert!(acked.status.success(), "{}", String::from_utf8_lossy(&acked.stderr));
    let results: i64 = c
        .query_one("SELECT count(*) FROM rekenserver.resultaat WHERE periode_id = 202604 AND export_status = 2", &[])
        .await
        .unwrap()
        .get(0);
    assert!(String::from_utf8_lossy(&acked.stderr).contains(&format!("{results} results confirmed")));
    let again = bin(&["export", "--periode", "202604"]);
    assert!(again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("exported 0 results"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    // Confirming it twice: nothing to confirm, an error.
    assert!(!bin(&["export", "--ack", &batch]).status.success());
    // Computed again after its export (a roster edit): the next export carries the
    // employee's full new set, each row marked as a correction of the version exported.
    let exported_version: i64 = c
        .query_one(
            "SELECT versie FROM rekenserver.resultaat WHERE dienstverband_id = $1 AND periode_id = 202604",
            &[&dv],
        )
        .await
        .unwrap()
        .get(0);
    crate::common::pg::lengthen_first_block(&c, dv, 30).await;
    let worker = spawn_worker(&dir, &sbworker::demo::worker_config_text(&url, 2));
    sbworker::demo::check::wait_drained(&c, std::time::Duration::from_secs(60), |_| {}).await.unwrap();
    assert_eq!(stop_worker(worker).await, Some(0));
    let out = dir.0.join("april-corrections.csv");
    let corrected = bin(&["export", "--periode", "202604", "--out", out.to_str().unwrap()]);
    assert!(corrected.status.success(), "{}", String::from_utf8_lossy(&corrected.stderr));
    let csv = std::fs::read_to_string(&out).unwrap();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert!(!rows.is_empty(), "{csv}");
    assert!(
        rows.iter().all(|l| l.split(',').nth(2) == Some(&dv.to_string())
            && l.split(',').skip(8).take(2).collect::<Vec<_>>() == ["1", &exported_version.to_string()]),
        "the recomputed employee alone, as a correction of version {exported_version}:\n{csv}"
    );
    // Recompute on the SQL Server transport (Rekenserver.herbereken_sleutels and
    // herbereken): a dry run counts April's keys; a named key is recomputed from the
    // recompute's own contract, at priority 3, with a run-log row.
    let april: i64 =
        c.query_one("SELECT count(*) FROM rekenserver.sleutel WHERE periode_id = 202604", &[]).await.unwrap().get(0);
    let dry = bin(&["recompute", "--periode", "202604", "--dry-run"]);
    assert_eq!(String::from_utf8_lossy(&dry.stdout).trim(), format!("dry run: {april} keys would be recomputed"));
    let before: i64 = c
        .query_one("SELECT versie FROM rekenserver.sleutel WHERE dienstverband_id = $1 AND periode_id = 202604", &[&dv])
        .await
        .unwrap()
        .get(0);
    let key = format!("{dv}:202604");
    let ran = bin(&["recompute", "--sleutel", &key]);
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout).trim(),
        "1 keys recomputed in 1 transactions, 1 Vraags sent",
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let sent: (String, i16) = c
        .query_one("SELECT contract, priority FROM sb.endpoint WHERE NOT is_initiator", &[])
        .await
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!(sent, ("/Rekenserver/LoonfactorBerekening/HerberekenContract".to_owned(), 3));
    let logged: i64 = c
        .query_one("SELECT count(*) FROM rekenserver.run_log WHERE stap = 'herberekening' AND kandidaten = 1", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(logged, 1);
    let worker = spawn_worker(&dir, &sbworker::demo::worker_config_text(&url, 2));
    sbworker::demo::check::wait_drained(&c, std::time::Duration::from_secs(60), |_| {}).await.unwrap();
    assert_eq!(stop_worker(worker).await, Some(0));
    // Explained over TDS (Rekenserver.bewijs): the exported version says when it went
    // out; the newest is the recompute's, not exported.
    let explain = |versie: Option<i64>| {
        let mut args = vec![
            "explain".to_owned(),
            "--dienstverband".into(),
            dv.to_string(),
            "--periode".into(),
            "202604".into(),
            "--json".into(),
        ];
        if let Some(v) = versie {
            args.extend(["--versie".into(), v.to_string()]);
        }
        let out = bin(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let newest = explain(None);
    assert_eq!(newest["versie"], before + 1, "{newest}");
    assert!(newest["geexporteerd_op"].is_null(), "{newest}");
    assert!(newest["uitleg"].is_string(), "the Vraag as sent is kept and explained: {newest}");
    assert_eq!(newest["afwijkingen_nu"], serde_json::json!({}), "{newest}");
    let exported = explain(Some(exported_version));
    assert!(exported["geexporteerd_op"].is_string(), "{exported}");
    // The sweep prunes evidence on SQL Server too: the key's older versions backdated
    // past the retention go, its latest stays.
    c.execute(
        "UPDATE rekenserver.resultaat_historie SET opgeslagen_op = now() - interval '3 years',
                vervangen_op = CASE WHEN vervangen_op IS NOT NULL THEN now() - interval '3 years' END
          WHERE dienstverband_id = $1",
        &[&dv],
    )
    .await
    .unwrap();
    let versions =
        "SELECT count(*) FROM rekenserver.resultaat_historie WHERE dienstverband_id = $1 AND periode_id = 202604";
    let kept: i64 = c.query_one(versions, &[&dv]).await.unwrap().get(0);
    assert!(kept >= 3, "{kept}");
    // ... and the request log: the key's answered requests, backdated past the retention,
    // go (none of them is a Fout).
    let answered =
        "SELECT count(*) FROM rekenserver.berekening_log WHERE dienstverband_id = $1 AND uitkomst IS NOT NULL";
    c.execute(
        "UPDATE rekenserver.berekening_log SET beantwoord_op = now() - interval '3 years'
          WHERE dienstverband_id = $1 AND uitkomst IS NOT NULL",
        &[&dv],
    )
    .await
    .unwrap();
    let logged: i64 = c.query_one(answered, &[&dv]).await.unwrap().get(0);
    assert!(logged >= 3, "{logged}");
    let swept = bin(&["sweep", "--evidence-retention-months", "24", "--retention-days", "30"]);
    assert!(swept.status.success(), "{}", String::from_utf8_lossy(&swept.stderr));
    let out = String::from_utf8_lossy(&swept.stdout);
    let left: i64 = c.query_one(versions, &[&dv]).await.unwrap().get(0);
    assert_eq!(left, 1, "{out}");
    assert_eq!(c.query_one(answered, &[&dv]).await.unwrap().get::<_, i64>(0), 0, "{out}");
    assert!(out.contains(&format!(" {logged} answered requests' log rows")), "{out}");
}

/// A lost dialog on the SQL Server side: the far side of one request ended WITH CLEANUP
/// over TDS before any receive, and every request's LIFETIME over. `sbworker sweep
/// --mssql` ends them (the emulator's broker), the worker on the SQL Server transport
/// records the broker's Error as the environment's fault (`Rekenserver.noteer_fout
/// @herstelbaar = 1`), and the next sweep sends the keys again: every key ends on its
/// latest version's result and no conversation is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_dialog_is_answered_again_on_the_sql_server_transport() {
    use sbworker::demo::roster::Roster;
    let (url, c) = crate::common::pg::fresh_roster_db().await;
    let (conn, _stop) = emulator(&url).await;
    c.batch_execute("INSERT INTO rekenserver.instelling VALUES ('dialog_lifetime_seconds', 3600)").await.unwrap();
    let (mut loader, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    Roster::generate(2, 22, false).load(&mut loader).await.unwrap();
    c.batch_execute("DELETE FROM rekenserver.instelling").await.unwrap();
    let count = |sql: &'static str| {
        let c = &c;
        async move { c.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    let keys = count("SELECT count(*) FROM rekenserver.sleutel").await;
    let target: Uuid = c
        .query_one(
            "SELECT t.handle FROM rekenserver.berekening_log l JOIN sb.endpoint i ON i.handle = l.dialog_handle
               JOIN sb.endpoint t ON t.conversation_id = i.conversation_id AND NOT t.is_initiator
              ORDER BY l.dienstverband_id LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let mut tds = crate::common::tds::client(&conn).await;
    tds.execute("END CONVERSATION @P1 WITH CLEANUP", &[&target]).await.unwrap();
    // The hour passes (the dialogs are made older rather than the clock waited for).
    c.batch_execute("UPDATE sb.endpoint SET expires_at = now() - interval '1 second' WHERE is_initiator")
        .await
        .unwrap();
    let sweep = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_sbworker"))
            .arg("sweep")
            .env_remove("SBWORKER__BROKER__CONNECTION")
            .env("SBWORKER_HANDOFF_MSSQL", &conn)
            .output()
            .unwrap()
    };
    let first = sweep();
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let pg_broker = format!("kind = \"postgres\"\nconnection = {}\n", toml::Value::String(url.clone()));
    let ms_broker = format!("kind = \"mssql\"\nconnection = {}\n", toml::Value::String(conn.clone()));
    let config = sbworker::demo::worker_config_text(&url, 2);
    assert!(config.contains(&pg_broker));
    let dir = TempDir::new("mssql-lost");
    let worker = spawn_worker(&dir, &config.replace(&pg_broker, &ms_broker));
    wait_until("the collector on the SQL Server transport recorded every expiry", || async {
        count(
            "SELECT count(*) FROM rekenserver.berekening_log
              WHERE uitkomst = 'fout' AND herstelbaar AND foutmelding LIKE 'error -8489: %'",
        )
        .await
            == keys
    })
    .await;
    let second = sweep();
    let said = String::from_utf8_lossy(&second.stdout);
    assert!(second.status.success(), "{}", String::from_utf8_lossy(&second.stderr));
    assert!(
        said.contains(&format!("{keys} stale keys ({keys} of them repairs"))
            && said.contains(&format!("{keys} Vraags sent")),
        "{said}"
    );
    sbworker::demo::check::wait_drained(&c, std::time::Duration::from_secs(60), |_| {}).await.unwrap();
    let verdict = sbworker::demo::check::verify(&c, &sbworker::engine::Tables::built_in().unwrap()).await.unwrap();
    assert!(verdict.problems.is_empty(), "{:?}", verdict.problems);
    assert_eq!(verdict.latest as i64, keys);
    wait_until("every conversation ended on both sides", || async {
        count("SELECT count(*) FROM sb.endpoint").await == 0
    })
    .await;
    assert_eq!(stop_worker(worker).await, Some(0));
}

/// python-tds, a client we did not write, finds a named instance through the emulator's
/// SQL Server Browser with its default settings (`host\INSTANCE`, no port: it asks UDP
/// 1434 with CLNT_UCAST_EX and reads the answer). The browser's port is fixed, so this
/// needs 127.0.0.1:1434 free; when another process has it, the test says so and stops
/// (our own client's lookup is tested above on a free port).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_tds_finds_a_named_instance_through_the_sql_server_browser() {
    let socket = match tokio::net::UdpSocket::bind("127.0.0.1:1434").await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("not run: cannot bind the SQL Server Browser's port 127.0.0.1:1434 ({e})");
            return;
        }
    };
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let port: u16 = conn.split("127.0.0.1,").nth(1).unwrap().split(';').next().unwrap().parse().unwrap();
    let (_browser_stop, stop) = Stop::new();
    tokio::spawn(sbworker::emulator::browser::serve(socket, "PAYROLL".into(), port, stop));
    let script = r#"
import sys, pytds
with pytds.connect("127.0.0.1\\PAYROLL", database="payroll", user="sbworker", password=sys.argv[1],
                   autocommit=True, timeout=30) as conn:
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM dbo.loonfactorberekening_reken")
        print(cur.fetchone()[0])
"#;
    let out =
        tokio::process::Command::new("python3").env("PYTHONPATH", python_tds()).args(["-c", script, "p;w\"d"]).output();
    let out = crate::common::within(120, "python-tds ends", out).await.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0");
}

/// What drivers set up and ask first, and the values they read back, as SQL Server types
/// them: the login SET batches of pymssql and tedious, `@@TRANCOUNT` through nested
/// transactions, `@@VERSION` and `@@SPID`, an integer literal as int and variables as
/// declared (bit, xml), an nvarchar over 4,000 characters read back whole, a binary
/// literal, `CAST(message_body AS NVARCHAR(MAX))` in a RECEIVE, and a refused statement
/// about a large value whose error stays small, the connection usable after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_drivers_send_first_and_read_back_is_served_as_sql_server_types_it() {
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let mut c = crate::common::tds::client(&conn).await;
    // pymssql's and tedious's login batches.
    for login in [
        "SET ARITHABORT ON;SET CONCAT_NULL_YIELDS_NULL ON;SET ANSI_NULLS ON;SET ANSI_NULL_DFLT_ON ON;SET ANSI_PADDING ON;\
         SET ANSI_WARNINGS ON;SET ANSI_NULL_DFLT_ON ON;SET CURSOR_CLOSE_ON_COMMIT ON;SET QUOTED_IDENTIFIER ON;\
         SET TEXTSIZE 2147483647;",
        "set textsize 2147483647\nset quoted_identifier on\nset arithabort off\nset numeric_roundabort off\n\
         set ansi_warnings on\nset ansi_padding on\nset ansi_nulls on\nset concat_null_yields_null on\n\
         set cursor_close_on_commit off\nset implicit_transactions off\nset language us_english\n\
         set dateformat mdy\nset datefirst 7\nset transaction isolation level read committed",
    ] {
        c.simple_query(login).await.unwrap().into_results().await.unwrap();
    }
    let one = |sql: &'static str| sql;
    let trancounts = c
        .simple_query(one("SELECT @@TRANCOUNT; BEGIN TRAN; SELECT @@TRANCOUNT; BEGIN TRANSACTION; SELECT @@TRANCOUNT;
             COMMIT; SELECT @@TRANCOUNT; COMMIT; SELECT @@TRANCOUNT"))
        .await
        .unwrap()
        .into_results()
        .await
        .unwrap();
    let counts: Vec<i32> = trancounts.iter().map(|r| r[0].get::<i32, _>(0).unwrap()).collect();
    assert_eq!(counts, [0, 1, 2, 1, 0]);
    // A ROLLBACK inside a nested transaction undoes everything to the outermost BEGIN.
    let sent_then_rolled_back = "BEGIN TRAN; BEGIN TRAN;
        DECLARE @h uniqueidentifier;
        BEGIN DIALOG CONVERSATION @h FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
            TO SERVICE '/Rekenserver/LoonfactorBerekening/RekenService'
            ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract] WITH ENCRYPTION = OFF;
        SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (N'<a/>');
        COMMIT; ROLLBACK; SELECT @@TRANCOUNT; SELECT COUNT(*) FROM dbo.loonfactorberekening_reken";
    let r = c.simple_query(sent_then_rolled_back).await.unwrap().into_results().await.unwrap();
    assert_eq!((r[0][0].get::<i32, _>(0), r[1][0].get::<i32, _>(0)), (Some(0), Some(0)), "nothing left queued");
    let r = c.simple_query("SELECT @@VERSION, @@SPID, 1 AS one").await.unwrap().into_row().await.unwrap().unwrap();
    assert!(r.get::<&str, _>(0).unwrap().contains("sbworker emulator"));
    assert!(r.get::<i32, _>(1).unwrap() >= 51);
    // An integer literal is an int (tiberius refuses an i32 read of a bigint).
    assert_eq!(r.get::<i32, _>(2), Some(1));
    let e = match c.simple_query("SELECT @@SERVERNAME").await {
        Ok(s) => s.into_results().await.unwrap_err(),
        Err(e) => e,
    };
    assert!(matches!(&e, tiberius::error::Error::Server(t) if t.code() == 50100), "{e:?}");
    // Variables as declared: bit, int, xml (text, not bytes).
    let r = c
        .simple_query("DECLARE @b BIT = 1, @i INT = 42, @x XML = N'<a>é</a>'; SELECT @b, @i, @x")
        .await
        .unwrap()
        .into_row()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.get::<bool, _>(0), Some(true));
    assert_eq!(r.get::<i32, _>(1), Some(42));
    assert_eq!(r.get::<&tiberius::xml::XmlData, _>(2).map(|x| x.to_string()), Some("<a>é</a>".to_owned()));
    // 5,000 characters come back whole, as nvarchar(max).
    let long: String = "é".repeat(5000);
    let r = c.query("SELECT @P1", &[&long.as_str()]).await.unwrap().into_row().await.unwrap().unwrap();
    assert_eq!(r.get::<&str, _>(0).map(str::len), Some(long.len()));
    // A binary literal as a body, read back with CAST … AS NVARCHAR(MAX) in the RECEIVE.
    let text = format!("<Berichten>{}</Berichten>", "<Bericht>héél groot</Bericht>".repeat(1000)); // over 20,000 characters
    let hex: String = text.encode_utf16().flat_map(u16::to_le_bytes).map(|b| format!("{b:02X}")).collect();
    let send = format!(
        "DECLARE @h uniqueidentifier;
         BEGIN DIALOG CONVERSATION @h FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
             TO SERVICE '/Rekenserver/LoonfactorBerekening/RekenService'
             ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract] WITH ENCRYPTION = OFF;
         SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (0x{hex});"
    );
    c.simple_query(send).await.unwrap().into_results().await.unwrap();
    let r = c
        .simple_query(
            "WAITFOR (RECEIVE TOP (1) conversation_handle, CAST(message_body AS NVARCHAR(MAX)) AS body
             FROM dbo.loonfactorberekening_reken), TIMEOUT 5000",
        )
        .await
        .unwrap()
        .into_row()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.get::<&str, _>(1), Some(text.as_str()));
    // A refused conversion of that large a value: a short error naming the type, not the
    // value; the connection goes on.
    let big = "x".repeat(100_000);
    let e = match c.query("END CONVERSATION @P1", &[&big.as_str()]).await {
        Ok(s) => s.into_results().await.map(|_| ()),
        Err(e) => Err(e),
    };
    match e {
        Err(tiberius::error::Error::Server(t)) => {
            assert!(t.message().chars().count() <= 2047, "{}", t.message().len());
            assert!(!t.message().contains("xxxx"), "the value is not quoted: {}", t.message());
            assert_eq!(t.code(), 8169, "{}", t.message());
            assert!(t.message().contains("character string to uniqueidentifier"), "{}", t.message());
        }
        other => panic!("a refused CAST: {other:?}"),
    }
    let r = c.simple_query("SELECT 2").await.unwrap().into_row().await.unwrap().unwrap();
    assert_eq!(r.get::<i32, _>(0), Some(2));
}

/// An outside client with its default settings, nothing tuned for the emulator:
/// pymssql (FreeTDS; installed from PyPI into the build folder when missing) logs in
/// with its own session settings, runs Microsoft's tutorial batch inside its own
/// transaction, passes bodies as parameters (nvarchar, and bytes as a binary literal),
/// reads them back with `CAST(message_body AS NVARCHAR(MAX))`, a body over 100 KB
/// included, rolls back, survives a refused statement, and has a Vraag answered by a
/// running worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pymssql_with_its_default_settings_runs_the_tutorial_and_a_round_trip() {
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let port = crate::common::tds::port(&conn).to_string();
    let pymssql = crate::common::python_package("pymssql", "pymssql", "pymssql==2.4.6");
    let script = |step: &str| {
        let mut client = tokio::process::Command::new("python3");
        client
            .env("PYTHONPATH", &pymssql)
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/pymssql_defaults.py"))
            .args([port.as_str(), "sbworker", "p;w\"d", step]);
        client_json("pymssql", client)
    };
    let v = script("tutorial").await;
    assert_eq!(v["trancount_at_start"], 1, "pymssql works inside its own transaction: {v}");
    assert_eq!(
        v["received"],
        serde_json::json!([
            "<Hallo xmlns=\"urn:test\">wereld</Hallo>",
            "\u{feff}<Hallo xmlns=\"urn:test\">wereld, binair</Hallo>"
        ]),
        "{v}"
    );
    assert_eq!(v["big_roundtrip"], true, "{v}");
    assert_eq!(v["queued_after_rollback"], 0, "{v}");
    assert_eq!(v["refused"], 50100, "{v}");
    assert_eq!(v["after_refusal"], 1, "{v}");
    // sp_executesql written in a batch (the fourth SQL Server review's list): its
    // statements run with its parameters; the caller's @n is its own.
    assert_eq!(v["executesql"], serde_json::json!([41, "x", 9]), "{v}");
    assert_eq!(v["executesql_caller_n"], 7, "{v}");
    // Now a worker serves the calculation queue.
    let mut client = tokio::process::Command::new("python3");
    client
        .env("PYTHONPATH", &pymssql)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/pymssql_defaults.py"))
        .args([port.as_str(), "sbworker", "p;w\"d", "worker"]);
    answered_by_a_worker(&conn, "pymssql", client).await;
}

/// Microsoft's ODBC Driver 18, as mssql-python (PyPI; it bundles the driver, which needs
/// the system's libltdl7) sets it up: its parameters come as sp_prepexec with unnamed
/// values, strings as varchar; a 5,000-character value comes back whole; Microsoft's
/// tutorial batch runs in the driver's own transaction with the body as a parameter
/// (text, which goes as varchar and is kept as its single bytes as SQL Server keeps it,
/// and bytes); a refused conversion of a 20,000-character value is an ordinary
/// error and the connection goes on; the driver's rollback leaves nothing queued.
/// With the driver's default `Encrypt=yes` and the emulator's certificate trusted
/// (`TrustServerCertificate=yes`), nothing else changed. Then a Vraag it sends is
/// answered by a worker on the emulator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odbc_driver_18_sends_its_parameters_and_reads_long_values() {
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let port = crate::common::tds::port(&conn).to_string();
    let ltdl = std::process::Command::new("ldconfig").arg("-p").output().unwrap();
    assert!(
        String::from_utf8_lossy(&ltdl.stdout).contains("libltdl.so.7"),
        "ODBC Driver 18 needs libltdl7 (apt-get install libltdl7; .ci/run installs it)"
    );
    let odbc = || {
        let mut client = tokio::process::Command::new("python3");
        client
            .env("PYTHONPATH", crate::common::python_package("mssql-python", "mssql_python", "mssql-python==1.16.0"))
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/odbc_defaults.py"))
            .args([port.as_str(), "sbworker", "p;w\"d", "TrustServerCertificate=yes;"]);
        client
    };
    let v = client_json("odbc", odbc()).await;
    assert_eq!(v["trancount_at_start"], 1, "{v}");
    assert_eq!(v["params"], serde_json::json!([42, "tekst"]), "{v}");
    assert_eq!(v["long_roundtrip"], true, "{v}");
    // The text went as varchar: its single bytes are the body, as SQL Server keeps them;
    // the bytes went as they were.
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let mut binary = vec![0xFF, 0xFE];
    binary.extend("<Hallo>binair</Hallo>".encode_utf16().flat_map(u16::to_le_bytes));
    assert_eq!(
        v["received"],
        serde_json::json!([hex(b"<Hallo xmlns=\"urn:test\">wereld</Hallo>"), hex(&binary)]),
        "{v}"
    );
    assert_eq!(v["refused"], true, "{v}");
    assert_eq!(v["after_refusal"], 7, "{v}");
    assert_eq!(v["queued_after_rollback"], 0, "{v}");
    // A Vraag sent by the driver, answered by a worker on the emulator.
    answered_by_a_worker(&conn, "odbc", odbc()).await;
}

/// pyodbc (PyPI) on Microsoft's ODBC Driver 18 (the library mssql-python bundles; pyodbc
/// needs the system's unixODBC driver manager, libodbc2), with their default settings
/// and the certificate trusted: the driver's catalog queries at connect
/// (`sp_datatype_info_100`), every type pyodbc binds sent as a parameter and read back
/// unchanged (int, bigint, bit, decimal, float, datetime2, date, uniqueidentifier,
/// nvarchar and varbinary, short and max), the tutorial with the body as nvarchar,
/// varbinary and xml, a body over 100 KB, a rollback, the driver's query timeout
/// cancelling a waiting RECEIVE with the connection and its transaction going on (XACT_ABORT
/// OFF: the send before the wait commits afterwards), a refused statement then
/// a working one; then a Vraag it sends is answered by a worker on the emulator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyodbc_with_odbc_driver_18_binds_every_type_and_cancels_on_its_timeout() {
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let port = crate::common::tds::port(&conn).to_string();
    let odbc = std::process::Command::new("ldconfig").arg("-p").output().unwrap();
    assert!(
        String::from_utf8_lossy(&odbc.stdout).contains("libodbc.so.2"),
        "pyodbc needs unixODBC's driver manager (apt-get install libodbc2; .ci/run installs it)"
    );
    let bundled = crate::common::python_package("mssql-python", "mssql_python", "mssql-python==1.16.0")
        .join("mssql_python_odbc/libs/linux/debian_ubuntu/x86_64/lib");
    let driver = std::fs::read_dir(&bundled)
        .unwrap_or_else(|e| panic!("{}: {e}", bundled.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("libmsodbcsql-18")))
        .expect("mssql-python bundles ODBC Driver 18");
    let pyodbc = crate::common::python_package("pyodbc", "pyodbc", "pyodbc==5.5.0");
    let client = || {
        let mut client = tokio::process::Command::new("python3");
        client
            .env("PYTHONPATH", &pyodbc)
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/pyodbc_defaults.py"))
            .arg(&driver)
            .args([port.as_str(), "sbworker", "p;w\"d"]);
        client
    };
    let v = client_json("pyodbc", client()).await;
    assert_eq!(v["trancount_at_start"], 1, "{v}");
    for ty in [
        "int",
        "bigint",
        "bit",
        "decimal",
        "float",
        "datetime2",
        "date",
        "uniqueidentifier",
        "nvarchar",
        "nvarchar(max)",
        "varbinary",
        "varbinary(max)",
        "null",
    ] {
        assert_eq!(v["types"][ty], true, "{ty} comes back as it was sent: {v}");
    }
    assert_eq!(v["as_text"], serde_json::json!(["7.50", "2026-04-01"]), "{v}");
    assert_eq!(
        v["received"],
        serde_json::json!([
            "<Hallo xmlns=\"urn:test\">wereld</Hallo>",
            "\u{feff}<Hallo>binair</Hallo>",
            "\u{feff}<Hallo>als xml</Hallo>"
        ]),
        "{v}"
    );
    assert_eq!(v["big_roundtrip"], true, "{v}");
    assert_eq!(v["queued_after_rollback"], 0, "{v}");
    assert_eq!(v["cancelled"], "HYT00", "the driver's query timeout: {v}");
    assert_eq!(v["trancount_after_cancel"], 1, "the cancel leaves the transaction open: {v}");
    assert_eq!(v["queued_after_cancel"], 1, "what it did before the cancel commits: {v}");
    assert_eq!(v["after_cancel"], 2, "{v}");
    assert_eq!(v["refused"], true, "{v}");
    assert_eq!(v["after_refusal"], 3, "{v}");
    answered_by_a_worker(&conn, "pyodbc", client()).await;
}

/// tedious (npm; installed into the build folder when missing) with its default
/// settings, the emulator's certificate trusted: TLS, its login settings, parameters as
/// it sends them (`sp_executesql` with `@statement`), integers as numbers, the tutorial's
/// steps with nvarchar, varbinary and 100 KB bodies as parameters, its own transaction
/// rolled back, its request timeout cancelling a waiting RECEIVE with the connection
/// going on, a refused statement then a working one; then a Vraag it sends is answered by
/// a worker on the emulator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tedious_with_its_default_settings_connects_sends_parameters_and_cancels() {
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let port = crate::common::tds::port(&conn).to_string();
    let tedious = || {
        let mut client = tokio::process::Command::new("node");
        client
            .env("NODE_PATH", crate::common::npm_package("tedious", "tedious", "tedious@19.2.2"))
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/tedious_defaults.js"))
            .args([port.as_str(), "sbworker", "p;w\"d"]);
        client
    };
    let v = client_json("tedious", tedious()).await;
    assert_eq!(v["connect"], "ok", "{v}");
    assert_eq!(v["types"], serde_json::json!([1, 0]), "integers as numbers, not text: {v}");
    assert_eq!(v["params"], serde_json::json!([42, "tekst"]), "{v}");
    assert_eq!(
        v["received"],
        serde_json::json!([
            "<Hallo xmlns=\"urn:test\">wereld</Hallo>",
            "\u{feff}<Hallo>binair</Hallo>",
            "the big body, whole"
        ]),
        "{v}"
    );
    assert_eq!(v["rollback"], "rolled back", "{v}");
    assert_eq!(v["queued_after_rollback"], 0, "{v}");
    assert!(v["cancelled"].as_str().unwrap_or_default().contains("Timeout"), "{v}");
    assert_eq!(v["after_cancel"], serde_json::json!([2]), "the connection goes on after the cancel: {v}");
    assert_eq!(v["refused"], 50100, "{v}");
    assert_eq!(v["after_refusal"], serde_json::json!([3]), "{v}");
    // A Vraag sent by tedious, answered by a worker on the emulator.
    answered_by_a_worker(&conn, "tedious", tedious()).await;
}

/// The `mssql` package (npm, on tedious) with its default settings and the certificate
/// trusted: its pool takes the connections (it checks each with a query), a query with a
/// parameter, a transaction rolled back leaving nothing queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mssql_package_with_its_default_pool_queries_and_rolls_back() {
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let port = crate::common::tds::port(&conn).to_string();
    let mut client = tokio::process::Command::new("node");
    client
        .env("NODE_PATH", crate::common::npm_package("mssql-npm", "mssql", "mssql@12.7.16"))
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/mssql_npm_defaults.js"))
        .args([port.as_str(), "sbworker", "p;w\"d"]);
    let v = client_json("the mssql package", client).await;
    assert_eq!(v["connect"], "ok", "{v}");
    assert_eq!(v["query"], serde_json::json!([{"a": 5, "one": 1}]), "{v}");
    assert_eq!(v["in_transaction"], serde_json::json!([{"n": 1}]), "{v}");
    assert_eq!(v["after_rollback"], serde_json::json!([{"n": 0}]), "{v}");
}

/// Errors inside a transaction as SQL Server has them: with XACT_ABORT OFF (its default)
/// the failing statement is undone alone and the transaction stays open, so a later
/// ROLLBACK undoes what came before and after it; with XACT_ABORT ON the error rolls the
/// whole transaction back; a batch that does not parse changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statements_error_undoes_the_statement_or_the_transaction_as_xact_abort_says() {
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let mut c = crate::common::tds::client(&conn).await;
    let send = "DECLARE @h uniqueidentifier;
        BEGIN DIALOG CONVERSATION @h FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
            TO SERVICE '/Rekenserver/LoonfactorBerekening/RekenService'
            ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract] WITH ENCRYPTION = OFF;
        SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (N'<a/>')";
    async fn fails(c: &mut sbworker::broker::mssql::Tds, sql: &str) -> u32 {
        let r = match c.simple_query(sql).await {
            Ok(s) => s.into_results().await.map(|_| ()),
            Err(e) => Err(e),
        };
        match r {
            Err(tiberius::error::Error::Server(e)) => e.code(),
            other => panic!("{sql}: {other:?}"),
        }
    }
    async fn one(c: &mut sbworker::broker::mssql::Tds, sql: &str) -> i32 {
        c.simple_query(sql).await.unwrap().into_row().await.unwrap().unwrap().get::<i32, _>(0).unwrap()
    }
    let queued = "SELECT COUNT(*) FROM dbo.loonfactorberekening_reken";
    // XACT_ABORT OFF: the error ends its batch, the transaction goes on.
    c.simple_query("SET XACT_ABORT OFF; BEGIN TRANSACTION").await.unwrap().into_results().await.unwrap();
    c.simple_query(send).await.unwrap().into_results().await.unwrap();
    assert_eq!(fails(&mut c, "SELECT @nowhere").await, 137);
    assert_eq!(one(&mut c, "SELECT @@TRANCOUNT").await, 1, "the transaction is still open");
    c.simple_query(send).await.unwrap().into_results().await.unwrap();
    // A statement that fails in the broker (an unknown conversation) is undone alone.
    assert_eq!(fails(&mut c, "END CONVERSATION '00000000-0000-0000-0000-000000000001'").await, 8426);
    assert_eq!(one(&mut c, "SELECT @@TRANCOUNT").await, 1);
    c.simple_query("ROLLBACK").await.unwrap().into_results().await.unwrap();
    assert_eq!(one(&mut c, queued).await, 0, "the ROLLBACK undid both sends");
    // And a COMMIT after a failed statement keeps what came before and after it: the
    // failing statement alone was undone (a transaction left aborted could not commit).
    c.simple_query("BEGIN TRANSACTION").await.unwrap().into_results().await.unwrap();
    c.simple_query(send).await.unwrap().into_results().await.unwrap();
    assert_eq!(fails(&mut c, "END CONVERSATION '00000000-0000-0000-0000-000000000001'").await, 8426);
    c.simple_query(send).await.unwrap().into_results().await.unwrap();
    c.simple_query("COMMIT").await.unwrap().into_results().await.unwrap();
    assert_eq!(one(&mut c, queued).await, 2, "both sends committed");
    // A batch refused as a whole before it runs changes nothing, even with XACT_ABORT
    // ON (SQL Server's compile errors).
    c.simple_query("SET XACT_ABORT ON; BEGIN TRANSACTION").await.unwrap().into_results().await.unwrap();
    assert_eq!(fails(&mut c, "SELECT 1; SEND ON CONVERSATION").await, 102);
    assert_eq!(one(&mut c, "SELECT @@TRANCOUNT").await, 1);
    // An undeclared variable is a compile error in SQL Server: the transaction stays.
    assert_eq!(fails(&mut c, "SELECT @nowhere").await, 137);
    assert_eq!(one(&mut c, "SELECT @@TRANCOUNT").await, 1);
    // XACT_ABORT ON: a statement's error rolls the transaction back.
    c.simple_query(send).await.unwrap().into_results().await.unwrap();
    assert_eq!(fails(&mut c, "END CONVERSATION '00000000-0000-0000-0000-000000000001'").await, 8426);
    assert_eq!(one(&mut c, "SELECT @@TRANCOUNT").await, 0);
    assert_eq!(one(&mut c, queued).await, 2, "only the two committed before");
    // @@TRANCOUNT as of the statement an IF is part of.
    let r = c
        .simple_query("BEGIN TRAN; IF @@TRANCOUNT <> 0 COMMIT; SELECT @@TRANCOUNT")
        .await
        .unwrap()
        .into_row()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.get::<i32, _>(0), Some(0), "the IF saw the open transaction and committed it");
    // With XACT_ABORT OFF a Service Broker error ends its statement only: the batch goes
    // on, and the SEND after it runs and commits on its own (autocommit).
    c.simple_query("SET XACT_ABORT OFF").await.unwrap().into_results().await.unwrap();
    let before = one(&mut c, queued).await;
    assert_eq!(fails(&mut c, &format!("END CONVERSATION '00000000-0000-0000-0000-000000000001'; {send}")).await, 8426);
    assert_eq!(one(&mut c, queued).await, before + 1, "the statement after the error ran");
    // An error that ends the batch (a conversion) does not let the next statement run.
    assert_eq!(fails(&mut c, &format!("END CONVERSATION 'not a handle'; {send}")).await, 8169);
    assert_eq!(one(&mut c, queued).await, before + 1, "the batch ended at the conversion error");
    // A '…' literal is varchar, kept as single bytes; an N'…' literal as UTF-16LE.
    for (literal, kept) in [("'<a/>'", b"<a/>".to_vec()), ("N'<a/>'", utf16("<a/>"))] {
        // The queue emptied first (a RECEIVE takes one conversation group at a time).
        while one(&mut c, queued).await > 0 {
            c.simple_query("RECEIVE message_body FROM dbo.loonfactorberekening_reken")
                .await
                .unwrap()
                .into_results()
                .await
                .unwrap();
        }
        c.simple_query(send.replace("(N'<a/>')", &format!("({literal})"))).await.unwrap().into_results().await.unwrap();
        let row = c
            .simple_query("RECEIVE TOP (1) message_body FROM dbo.loonfactorberekening_reken")
            .await
            .unwrap()
            .into_row()
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.get::<&[u8], _>(0), Some(&kept[..]), "{literal}");
    }
}

/// varchar as SQL Server keeps it: single bytes of code page 1252 (the collation's), a
/// character it lacks as `?`; a varchar variable's SEND puts those bytes in the queue;
/// `CAST(message_body AS VARCHAR(MAX))` in a RECEIVE reads them back, an EndDialog's
/// NULL body included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn varchar_values_are_single_bytes_of_code_page_1252() {
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let mut c = crate::common::tds::client(&conn).await;
    let row = c
        .simple_query(
            "SELECT CAST(CAST(N'€ é' AS VARCHAR(10)) AS VARBINARY(10)), CAST(N'Ω' AS VARCHAR(10)), CAST(0x80 AS VARCHAR(5))",
        )
        .await
        .unwrap()
        .into_row()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.get::<&[u8], _>(0), Some(&[0x80, b' ', 0xE9][..]), "code page 1252");
    assert_eq!(row.get::<&str, _>(1), Some("?"), "a character code page 1252 lacks");
    assert_eq!(row.get::<&str, _>(2), Some("€"), "byte 0x80 read as code page 1252");
    // A varchar variable's SEND, then the initiator ends the dialog: the target reads
    // the message and the EndDialog with CAST(message_body AS VARCHAR(MAX)).
    c.simple_query(
        "DECLARE @h uniqueidentifier, @b varchar(max) = '<a>tekst</a>';
         BEGIN DIALOG CONVERSATION @h FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
             TO SERVICE '/Rekenserver/LoonfactorBerekening/RekenService'
             ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract] WITH ENCRYPTION = OFF;
         SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (@b);
         END CONVERSATION @h;",
    )
    .await
    .unwrap()
    .into_results()
    .await
    .unwrap();
    let rows = c
        .simple_query(
            "RECEIVE message_type_name, message_body, CAST(message_body AS VARCHAR(MAX)) AS tekst
             FROM dbo.loonfactorberekening_reken",
        )
        .await
        .unwrap()
        .into_first_result()
        .await
        .unwrap();
    assert_eq!(rows.len(), 2, "the message and the EndDialog");
    assert_eq!(rows[0].get::<&[u8], _>(1), Some(&b"<a>tekst</a>"[..]), "single bytes in the queue");
    assert_eq!(rows[0].get::<&str, _>(2), Some("<a>tekst</a>"));
    assert_eq!(rows[1].get::<&str, _>(0), Some(sbworker::broker::system::END_DIALOG));
    assert_eq!(rows[1].get::<&str, _>(2), None, "an EndDialog has no body");
}

/// A client program (`client`, given a Vraag file as its last argument) sends that Vraag
/// through the emulator to a worker running on it as its own process (`sbworker run`,
/// configured for the emulator as a user would), reads the answer on the initiator's
/// queue and prints it as JSON: the Antwoord and the EndDialog of its own dialog. The
/// worker then drains on SIGTERM and exits 0.
async fn answered_by_a_worker(conn: &str, what: &str, mut client: tokio::process::Command) {
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
async fn client_json(what: &str, mut client: tokio::process::Command) -> serde_json::Value {
    let out = crate::common::within(180, "the client ends", client.output()).await.unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what}: {stdout}{stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{what}: {e}: {stdout}{stderr}"))
}

/// Conversation reuse's two procedures from a client we did not write: pymssql (FreeTDS),
/// its parameters written into the batch as literals (the handle and the text as N'…',
/// the bits, passed as Python bools, as 1), in its own transaction. `Rekenserver.noteer_fout @eerste = 1` answers the
/// oldest request open on a reused dialog with the Fout and records the later ones as lost
/// (the environment's, to be sent again); `Rekenserver.dialoog_stil` keeps a dialog while
/// a request is open on it and lets it go once none is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pymssql_calls_the_reuse_procedures_with_literal_parameters() {
    // A burst of edits with reuse on and no worker: every request open on its key's dialog.
    let (url, c) = crate::common::pg::reused_and_unanswered().await;
    let (conn, _stop) = emulator(&url).await;
    let port = crate::common::tds::port(&conn).to_string();
    let pymssql = crate::common::python_package("pymssql", "pymssql", "pymssql==2.4.6");
    let call = |step: &'static str, handle: Uuid| {
        let mut client = tokio::process::Command::new("python3");
        client
            .env("PYTHONPATH", &pymssql)
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/pymssql_reuse.py"))
            .args([port.as_str(), "sbworker", "p;w\"d", step, &handle.to_string()]);
        client_json("pymssql", client)
    };
    let log = "SELECT uitkomst, herstelbaar, foutmelding FROM rekenserver.berekening_log WHERE dialog_handle = $1
                ORDER BY versie";

    // The Fout: the dialog carrying the most requests, ended with its error by the
    // calculation's side (as the calculation does with a Fout).
    let (h, n) = crate::common::pg::busiest_dialog(&c).await;
    assert!(n >= 3, "a key's versions share its dialog: {n}");
    c.execute("SELECT sb.end_conversation(far_handle, 50012, 'ongeldig') FROM sb.endpoint WHERE handle = $1", &[&h])
        .await
        .unwrap();
    call("fout", h).await;
    let got: Vec<(Option<String>, Option<bool>, Option<String>)> =
        c.query(log, &[&h]).await.unwrap().iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
    assert_eq!(
        got[0],
        (Some("fout".into()), Some(true), Some("tijdblok (50012): ongeldig".into())),
        "the oldest request gets the Fout, repairable as the caller said (the text alone says not)"
    );
    for later in &got[1..] {
        assert_eq!((later.0.as_deref(), later.1), (Some("fout"), Some(true)), "{later:?}");
        assert!(
            later
                .2
                .as_deref()
                .is_some_and(|m| m.starts_with("lost: the dialog ended with the Fout of an earlier request")),
            "{later:?}"
        );
    }

    // The key's current version went again at once, on a new dialog.
    let (to, sent, current) = crate::common::pg::open_request_of_the_key_of(&c, h).await;
    assert_ne!(to, h, "sent again on a new dialog");
    assert_eq!(sent, current, "the key's current version");

    // The idle timer: another key's dialog, open while a request is open on it.
    let k: Uuid = c
        .query_one(
            "SELECT dialog_handle FROM rekenserver.sleutel WHERE dialog_handle IS NOT NULL AND dialog_handle <> $1
              LIMIT 1",
            &[&h],
        )
        .await
        .unwrap()
        .get(0);
    let keeps = "SELECT count(*) FROM rekenserver.sleutel WHERE dialog_handle = $1";
    assert_eq!(call("stil", k).await["stil"], false, "a request is open on it");
    assert_eq!(c.query_one(keeps, &[&k]).await.unwrap().get::<_, i64>(0), 1, "still the key's dialog");
    c.execute(
        "UPDATE rekenserver.berekening_log SET uitkomst = 'opgeslagen', beantwoord_op = now() WHERE dialog_handle = $1",
        &[&k],
    )
    .await
    .unwrap();
    assert_eq!(call("stil", k).await["stil"], true, "every request on it answered");
    assert_eq!(c.query_one(keeps, &[&k]).await.unwrap().get::<_, i64>(0), 0, "no longer the key's dialog");
}

/// `RECEIVE TOP (n) … WHERE conversation_handle = h` takes at most n of the dialog's
/// messages and leaves the rest queued (before, the emulator took them all and returned
/// n: the others were lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_of_one_conversation_takes_at_most_its_top_and_leaves_the_rest() {
    let (url, s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let mut c = crate::common::tds::client(&conn).await;
    let send = "DECLARE @h uniqueidentifier;
         BEGIN DIALOG CONVERSATION @h FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
             TO SERVICE '/Rekenserver/LoonfactorBerekening/RekenService'
             ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract] WITH ENCRYPTION = OFF;
         SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (N'<v1/>');
         SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (N'<v2/>');
         SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (N'<v3/>');";
    c.simple_query(send).await.unwrap().into_results().await.unwrap();
    let target: uuid::Uuid =
        s.client().query_one("SELECT handle FROM sb.endpoint WHERE NOT is_initiator", &[]).await.unwrap().get(0);
    let mut seqs = Vec::new();
    for _ in 0..3 {
        let rows = c
            .query(
                "RECEIVE TOP (1) message_sequence_number FROM dbo.loonfactorberekening_reken
                  WHERE conversation_handle = @P1",
                &[&target],
            )
            .await
            .unwrap()
            .into_first_result()
            .await
            .unwrap();
        assert_eq!(rows.len(), 1, "one message a RECEIVE TOP (1)");
        seqs.push(rows[0].get::<i64, _>(0).unwrap());
    }
    assert_eq!(seqs, [1, 2, 3], "each message once, in order");
}
