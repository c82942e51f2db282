//! Client compatibility: SQL Server drivers we did not write, with their default
//! settings, against the Service Broker emulator: python-tds, pymssql (FreeTDS),
//! Microsoft's ODBC Driver 18 (mssql-python, and pyodbc on it), tedious and the `mssql`
//! npm package, each installed into the build folder when missing and run as a program
//! (`tests/clients/`); their encryption as seen on the wire; and what drivers send first
//! and read back. Where one sends a Vraag, a worker answers it
//! (`common::tds::answered_by_a_worker`).

use std::sync::Arc;

use sbworker::emulator::server::Faults;
use sbworker::worker::Stop;
use uuid::Uuid;

use crate::common::calc::{calc_world, count};
use crate::common::tds::{answered_by_a_worker, client_json, contains, emulator, recording_proxy, utf16};

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

/// python-tds, a client we did not write, finds a named instance through the emulator's
/// SQL Server Browser with its default settings (`host\INSTANCE`, no port: it asks UDP
/// 1434 with CLNT_UCAST_EX and reads the answer). The browser's port is fixed, so this
/// needs 127.0.0.1:1434 free; when another process has it, the test says so and stops
/// (our own client's lookup is tested on a free port in `emulator_protocol`).
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

/// Conversation reuse's two procedures from a client we did not write: pymssql (FreeTDS),
/// its parameters written into the batch as literals (the handle and the text as N'…',
/// the bits, passed as Python bools, as 1), in its own transaction. `Rekenserver.noteer_fout @eerste = 1` answers the
/// oldest request open on a reused dialog with the Fout and records the later ones as lost
/// (the environment's, to be sent again); `Rekenserver.dialoog_stil` keeps a dialog while
/// a request is open on it or its last answer is more recent than the idle time, and
/// lets it go once neither is.
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
    // Every request on it answered, the last one just now: kept for the idle time after
    // it (the timer set again); answered longer ago than that: let go.
    let answered = "UPDATE rekenserver.berekening_log SET uitkomst = 'opgeslagen', beantwoord_op = $2
                     WHERE dialog_handle = $1";
    let now = std::time::SystemTime::now();
    c.execute(answered, &[&k, &now]).await.unwrap();
    assert_eq!(call("stil", k).await["stil"], false, "answered within the idle time");
    assert_eq!(c.query_one(keeps, &[&k]).await.unwrap().get::<_, i64>(0), 1, "still the key's dialog");
    let long_ago = now - std::time::Duration::from_secs(86_400);
    c.execute(answered, &[&k, &long_ago]).await.unwrap();
    assert_eq!(call("stil", k).await["stil"], true, "every request on it answered, longer ago than the idle time");
    assert_eq!(c.query_one(keeps, &[&k]).await.unwrap().get::<_, i64>(0), 0, "no longer the key's dialog");
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
