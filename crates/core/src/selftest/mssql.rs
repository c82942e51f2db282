//! `sbworker selftest --mssql CONN`: the checks of [`super`] on SQL Server, run as the
//! worker's login (the connection string the worker uses). Statements in
//! `broker/mssql/statements/selftest.sql`; the round trip's roster work is done by
//! `Rekenserver.selftest` (05_handoff.sql), which runs as the owner, so the worker's
//! login needs no right on the roster.

use tiberius::{EncryptionLevel, ToSql};
use uuid::Uuid;

use super::{AnsweredBy, Failure, Report};
use crate::broker::mssql::{self, Connection, MssqlTransport, Tds};
use crate::transport::BrokerError;

/// The selftest's statements (`broker/mssql/statements/selftest.sql`).
use crate::handlers::{DATA_QUEUE, REKEN_QUEUE};
use crate::sql::statements::mssql_selftest as stmt;

/// Every statement of `broker/mssql/statements/selftest.sql` (for the emulator's
/// recogniser test), as (name, statement).
pub fn statements() -> Vec<(&'static str, &'static str)> {
    stmt::ALL.iter().map(|s| (s.name, s.sql)).collect()
}

/// The two queues as the SQL Server scripts create them: the handlers' names in `dbo`.
pub(super) fn queues() -> [String; 2] {
    [format!("dbo.{REKEN_QUEUE}"), format!("dbo.{DATA_QUEUE}")]
}

pub(super) fn failure(detail: impl Into<String>, e: &BrokerError) -> Failure {
    Failure::broker(detail, e)
}

pub(super) async fn rows(
    client: &mut Tds,
    statement: crate::sql::Named,
    params: &[&dyn ToSql],
) -> Result<Vec<tiberius::Row>, BrokerError> {
    client
        .query(statement.sql, params)
        .await
        .map_err(mssql::error_of)?
        .into_first_result()
        .await
        .map_err(mssql::error_of)
}

/// Runs the checks against the database of `conn`.
pub async fn run(conn: &str) -> Report {
    run_with(conn, None).await
}

/// Runs the checks, then (when they passed) the deep steps of [`super::deep`], with
/// `admin` (the housekeeping and payroll rights) for recompute, export, evidence and the
/// sweep.
pub async fn run_deep(conn: &str, admin: &str) -> Report {
    run_with(conn, Some(admin)).await
}

/// What `SELECT @@VERSION` says on sbworker's emulator.
const EMULATOR: &str = "sbworker emulator";

async fn run_with(conn: &str, deep: Option<&str>) -> Report {
    let mut report = Report::new("mssql");
    let c = match Connection::parse(conn) {
        Ok(c) => c,
        Err(e) => {
            report.fail(
                "connection",
                Failure::new(format!("the connection string: {e}"))
                    .fix("give the ADO.NET string the worker uses (Server=tcp:host,port;Database=...;User Id=...;Password=...)"),
            );
            return report;
        }
    };
    let Some(database) = c.database.clone() else {
        report.fail(
            "connection",
            Failure::new("the connection string names no database")
                .fix("add Database=... (the one the scripts were installed in)"),
        );
        return report;
    };
    let mut client = match mssql::connect(&c).await {
        Ok(client) => client,
        Err(e) => {
            report.fail(
                "connection",
                failure(format!("cannot log in to {}:{} as {}", c.host, c.port, c.user), &e)
                    .fix("check the server, port, login and password, and that TLS is set as the server expects (Encrypt, TrustServerCertificate)"),
            );
            return report;
        }
    };
    let tls = match (c.encrypt, c.trust_server_certificate) {
        (EncryptionLevel::NotSupported | EncryptionLevel::Off, _) => "without TLS for the data (Encrypt=false)",
        (_, true) => "TLS on, any server certificate trusted (TrustServerCertificate=true)",
        (_, false) => "TLS on, the server certificate verified",
    };
    report.pass("connection", format!("logged in to {}:{} database {database} as {}; {tls}", c.host, c.port, c.user));
    let emulator = match rows(&mut client, stmt::VERSION_TEXT, &[]).await {
        Ok(r) => r.first().and_then(|r| r.get::<&str, _>(0)).is_some_and(|v| v.starts_with(EMULATOR)),
        Err(e) => {
            report.fail("connection", failure("SELECT @@VERSION", &e));
            return report;
        }
    };
    if emulator {
        // The emulator runs the worker's statements, not SQL Server's catalog: what only
        // the catalog can say is skipped, saying so; everything else runs.
        for name in ["permissions", "broker", "module options", "schema collection", "version"] {
            report.skip(name, "the server is sbworker's emulator, not SQL Server: it has no catalog to check this in");
        }
    } else if !catalog(&mut client, &mut report).await {
        return report;
    }
    match round_trip(&mut client, conn).await {
        Ok(detail) => report.pass("round trip", detail),
        Err(f) => {
            report.fail("round trip", f);
            return report;
        }
    }
    if let Some(admin) = deep {
        drop(client);
        super::deep::run(&mut report, conn, admin, emulator).await;
    }
    report
}

/// The checks only SQL Server's catalog answers, in order; false (the failure
/// recorded) stops the run.
async fn catalog(client: &mut Tds, report: &mut Report) -> bool {
    let checked = async {
        report.pass("permissions", permissions(client).await.map_err(|f| ("permissions", f))?);
        report.pass("broker", broker(client).await.map_err(|f| ("broker", f))?);
        let (detail, collection) = module_options(client).await.map_err(|f| ("module options", f))?;
        report.pass("module options", detail);
        report.pass("schema collection", schema_collection(collection).map_err(|f| ("schema collection", f))?);
        report.pass("version", version(client).await.map_err(|f| ("version", f))?);
        Ok::<(), (&'static str, Failure)>(())
    }
    .await;
    match checked {
        Ok(()) => true,
        Err((name, f)) => {
            report.fail(name, f);
            false
        }
    }
}

async fn permissions(client: &mut Tds) -> Result<String, Failure> {
    let rows = rows(client, stmt::PERMISSIONS, &[]).await.map_err(|e| failure("HAS_PERMS_BY_NAME", &e))?;
    let mut missing = Vec::new();
    for r in &rows {
        let securable: &str = r.get(0).unwrap_or("?");
        let class: &str = r.get(1).unwrap_or("?");
        let permission: &str = r.get(2).unwrap_or("?");
        match r.get::<i32, _>(3) {
            Some(1) => {}
            Some(_) => missing.push(format!("{permission} on {class}::{securable}")),
            None => missing.push(format!("{class} {securable} does not exist")),
        }
    }
    if missing.is_empty() {
        Ok(format!("{} permissions the worker needs, each granted (HAS_PERMS_BY_NAME)", rows.len()))
    } else {
        Err(Failure::new(format!("missing: {}", missing.join("; "))).fix(
            "run broker/mssql/07_security.sql (it grants sbworker_role exactly these), make the worker's user a member \
             of sbworker_role (00_database.sql), and run the selftest as the worker's login",
        ))
    }
}

async fn broker(client: &mut Tds) -> Result<String, Failure> {
    let server = rows(client, stmt::SERVER, &[]).await.map_err(|e| failure("reading the server's version", &e))?;
    let version = server.first().and_then(|r| r.get::<&str, _>(0)).unwrap_or("?").to_owned();
    let db = rows(client, stmt::DATABASE, &[]).await.map_err(|e| failure("reading sys.databases", &e))?;
    let Some(d) = db.first() else {
        return Err(Failure::new("sys.databases shows no row for this database"));
    };
    let enabled: bool = d.get(0).unwrap_or(false);
    let level: u8 = d.get(1).unwrap_or(0);
    if !enabled {
        return Err(Failure::new("Service Broker is not enabled in this database")
            .fix("run broker/mssql/00_database.sql (it enables the broker, or says why it cannot)"));
    }
    if level < 130 {
        return Err(Failure::new(format!("compatibility level {level}; OPENJSON needs 130 or higher")).fix(
            "ALTER DATABASE ... SET COMPATIBILITY_LEVEL = 130 (or higher), after checking the application with it",
        ));
    }
    let mut problems = Vec::new();
    let mut fixes = Vec::new();
    let mut limits = Vec::new();
    let [reken, data] = queues();
    for q in [reken.as_str(), data.as_str()] {
        let r = rows(client, stmt::QUEUE, &[&q]).await.map_err(|e| failure(format!("sbworker.queue_state {q}"), &e))?;
        let Some(r) = r.first() else {
            problems.push(format!("queue {q} does not exist"));
            fixes.push("run broker/mssql/01_service_broker.sql".to_owned());
            continue;
        };
        if !r.get::<bool, _>(0).unwrap_or(false) {
            problems.push(format!("queue {q} is disabled"));
            fixes.push(format!("ALTER QUEUE {q} WITH STATUS = ON (once the cause is known: see the error log)"));
        }
        if r.try_get::<bool, _>(2).ok().flatten().unwrap_or(false) {
            problems.push(format!("queue {q} has poison-message handling on"));
            fixes.push(format!("ALTER QUEUE {q} WITH POISON_MESSAGE_HANDLING (STATUS = OFF)"));
        }
        if r.try_get::<bool, _>(3).ok().flatten().unwrap_or(false) {
            problems.push(format!("queue {q} has activation on (a procedure would compete with the worker)"));
            fixes.push(format!("ALTER QUEUE {q} WITH ACTIVATION (STATUS = OFF)"));
        }
        // A MAX_QUEUE_READERS left from an activation configured once limits the workers.
        if let Some(n) = r.try_get::<i16, _>(4).ok().flatten().filter(|n| *n > 0) {
            limits.push(format!("{q} at most {n}"));
        }
    }
    if problems.is_empty() {
        let limits = if limits.is_empty() {
            "; no MAX_QUEUE_READERS limit".to_owned()
        } else {
            format!(
                "; MAX_QUEUE_READERS limits the readers of all workers together: {} (0 for none: ALTER QUEUE … \
                 WITH ACTIVATION (MAX_QUEUE_READERS = 0))",
                limits.join(", ")
            )
        };
        Ok(format!(
            "SQL Server {version}; broker enabled, compatibility level {level}; queues {reken} and {data} \
             enabled, activation and poison-message handling off{limits}"
        ))
    } else {
        Err(Failure::new(problems.join("; ")).fix(fixes.join("; ")))
    }
}

/// The modules' SET options (the line's detail), and the schema collection bound to
/// the Vraag (the procedure's second result set).
async fn module_options(client: &mut Tds) -> Result<(String, Option<(String, String)>), Failure> {
    let sets = client
        .query(stmt::MODULE_OPTIONS.sql, &[])
        .await
        .map_err(mssql::error_of)
        .map_err(|e| failure("sbworker.module_options", &e))?
        .into_results()
        .await
        .map_err(|e| failure("sbworker.module_options", &mssql::error_of(e)))?;
    let mut sets = sets.into_iter();
    let rows = sets.next().unwrap_or_default();
    // (schema, name): the collection bound, if any.
    let collection = sets
        .next()
        .and_then(|rs| rs.into_iter().next())
        .and_then(|r| Some((r.get::<&str, _>(0).unwrap_or("?").to_owned(), r.get::<&str, _>(1)?.to_owned())));
    let found: Vec<String> = rows.iter().map(|r| r.get::<&str, _>(0).unwrap_or("?").to_lowercase()).collect();
    let expected = mssql::modules();
    let missing: Vec<&String> = expected.iter().filter(|m| !found.contains(m)).collect();
    if !missing.is_empty() {
        return Err(Failure::new(format!(
            "not installed: {}",
            missing.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", ")
        ))
        .fix("run broker/mssql/[0-9][0-9]_*.sql again (idempotent), or sbworker install --mssql"));
    }
    let bad: Vec<String> = rows
        .iter()
        .filter(|r| !(r.get::<bool, _>(1).unwrap_or(false) && r.get::<bool, _>(2).unwrap_or(false)))
        .map(|r| r.get::<&str, _>(0).unwrap_or("?").to_owned())
        .collect();
    if bad.is_empty() {
        Ok((
            format!(
                "all {} sbworker modules installed, each created with QUOTED_IDENTIFIER and ANSI_NULLS ON",
                expected.len()
            ),
            collection,
        ))
    } else {
        Err(Failure::new(format!(
            "created with QUOTED_IDENTIFIER or ANSI_NULLS OFF (their xml methods fail, Msg 1934): {}",
            bad.join(", ")
        ))
        .fix("run the scripts again (each sets its options first), with sqlcmd -I or sbworker install --mssql"))
    }
}

/// The XML schema collection the Vraag's message type validates against: none, or this
/// release's (named with a hash of its XSDs, so the same name is the same schemas); an
/// earlier release's would discard this release's Vraag.
fn schema_collection(bound: Option<(String, String)>) -> Result<String, Failure> {
    let mine = mssql::schema_collection_name();
    match bound {
        None => Ok("the Vraag's message type checks well-formed XML (no schema collection bound)".into()),
        Some((schema, b)) if schema == "Rekenserver" && b == mine => {
            Ok(format!("the Vraag validates against {schema}.{b}: this release's schemas, which accept its Vraag"))
        }
        Some((schema, b)) => Err(Failure::new(format!(
            "the Vraag validates against {schema}.{b}, not this release's Rekenserver.{mine}: SQL Server discards \
             every Vraag the older schemas do not describe (with an Error to the sender)"
        ))
        .fix(
            "run sbworker install --mssql (it puts this release's collection in first), or \
              broker/mssql/optional/schema_collection.sql",
        )),
    }
}

async fn version(client: &mut Tds) -> Result<String, Failure> {
    let rows = rows(client, stmt::STAMP, &[]).await.map_err(|e| failure("reading the version stamp", &e))?;
    let installed = rows.first().and_then(|r| r.get::<&str, _>(0)).map(str::to_owned);
    let mine = mssql::scripts_stamp();
    match installed {
        Some(s) if s == mine => Ok(format!("installed by this sbworker ({mine})")),
        other => Err(Failure::new(format!(
            "the scripts were installed by another sbworker (stamp {}; this one is {mine})",
            other.as_deref().unwrap_or("none")
        ))
        .fix("run this sbworker's broker/mssql/[0-9][0-9]_*.sql again (idempotent), or sbworker install --mssql")),
    }
}

/// One step of `Rekenserver.selftest`, its result sets read to the end.
pub(super) async fn step(client: &mut Tds, name: &str) -> Result<Vec<Vec<tiberius::Row>>, BrokerError> {
    client.query(stmt::STEP.sql, &[&name]).await.map_err(mssql::error_of)?.into_results().await.map_err(mssql::error_of)
}

async fn round_trip(client: &mut Tds, conn: &str) -> Result<String, Failure> {
    step(client, "begin").await.map_err(|e| failure("Rekenserver.selftest 'begin' (the scratch roster edit)", &e))?;
    let result = round_trip_inner(client, conn).await;
    let cleaned = step(client, "einde").await;
    let detail = result?;
    cleaned.map_err(|e| failure("Rekenserver.selftest 'einde' (cleaning up)", &e))?;
    Ok(detail)
}

async fn round_trip_inner(client: &mut Tds, conn: &str) -> Result<String, Failure> {
    let started = std::time::Instant::now();
    let dialogs = step(client, "dialogen").await.map_err(|e| failure("Rekenserver.selftest 'dialogen'", &e))?;
    let dialogs = dialogs.into_iter().next().unwrap_or_default();
    let Some(latest) = dialogs.first() else {
        return Err(Failure::new("the scratch roster edit sent no Vraag (no dialog in Rekenserver.berekening_log)")
            .fix("check the roster triggers (broker/mssql/04_roster.sql)"));
    };
    let initiator: Uuid = latest.get(0).ok_or_else(|| Failure::new("a dialog without a handle"))?;
    let target: Option<Uuid> = latest.get(1);
    let versie: i64 = latest.get(2).unwrap_or(0);
    let transport = MssqlTransport::new(conn).map_err(|e| Failure::new(format!("the connection string: {e}")))?;
    let by = match target {
        Some(t) => {
            let [reken, data] = queues();
            super::answer_scratch(&transport, (&reken, &data), t, initiator).await?
        }
        None => AnsweredBy::RunningWorker,
    };
    let wait = super::Wait::new(versie);
    let factors = loop {
        let r = step(client, "resultaat").await.map_err(|e| failure("Rekenserver.selftest 'resultaat'", &e))?;
        let row = r.first().and_then(|rs| rs.first());
        let factors = row.and_then(|r| r.get::<i32, _>(1)).unwrap_or(0);
        if wait.done(row.and_then(|r| r.get::<i64, _>(0))).await? {
            break factors;
        }
    };
    // What the export would claim, read as the owner (the worker's login may not claim).
    let export = step(client, "export").await.map_err(|e| failure("Rekenserver.selftest 'export'", &e))?;
    let exportable = export.first().and_then(|rs| rs.first()).and_then(|r| r.get::<i32, _>(0)).unwrap_or(0);
    if exportable == 0 {
        return Err(Failure::new("export would claim nothing for the scratch period, though a result is stored"));
    }
    Ok(super::round_trip_detail(by, versie, i64::from(factors), started))
}
