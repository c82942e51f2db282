//! The payroll hand-off on SQL Server: `sbworker sweep`, `export`, `recompute` and
//! `explain` with `--mssql` (the real binary, over TDS against the emulator, which runs
//! the PostgreSQL hand-off behind the T-SQL procedures), and a lost dialog answered
//! again on the SQL Server transport.

use uuid::Uuid;

use crate::common::calc::{TempDir, spawn_worker, stop_worker, wait_until};
use crate::common::tds::emulator;

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
