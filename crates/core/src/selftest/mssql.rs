//! `sbworker selftest --mssql CONN`: the checks of [`super`] on SQL Server, run as the
//! worker's login (the connection string the worker uses). Statements in
//! `broker/mssql/statements/selftest.sql`; the round trip's roster work is done by
//! `Rekenserver.selftest` (05_handoff.sql), which runs as the owner, so the worker's
//! login needs no right on the roster.
//!
//! A split deployment (`--side roster|calc`, docs/sqlserver.md "Two databases, two
//! servers") is checked one database at a time: what that side must have, its route to
//! the far service (`sys.routes`), this instance's Service Broker endpoint and the
//! transmission queue. The roster side's round trip goes over the route: its Vraag is
//! answered by a worker serving the calculation side (`AnsweredBy::RunningWorker`); the
//! calculation side begins no dialogs and skips it, saying so.

use tiberius::{EncryptionLevel, ToSql};
use uuid::Uuid;

use super::{AnsweredBy, Failure, Report};
use crate::broker::mssql::{self, Connection, MssqlTransport, Side, Tds};
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
    run_with(conn, None, Side::Both).await
}

/// Runs the checks against the database of `conn`, installed as `side`.
pub async fn run_side(conn: &str, side: Side) -> Report {
    run_with(conn, None, side).await
}

/// Runs the checks, then (when they passed) the deep steps of [`super::deep`], with
/// `admin` (the housekeeping and payroll rights) for recompute, export, evidence and the
/// sweep.
pub async fn run_deep(conn: &str, admin: &str) -> Report {
    run_with(conn, Some(admin), Side::Both).await
}

/// What `SELECT @@VERSION` says on sbworker's emulator.
const EMULATOR: &str = "sbworker emulator";

/// The service at the other end of a side's dialogs, which its route must reach.
fn far_service(side: Side) -> Option<&'static str> {
    match side {
        Side::Both => None,
        Side::Roster => Some("/Rekenserver/LoonfactorBerekening/RekenService"),
        Side::Calc => Some("/Rekenserver/LoonfactorBerekening/DataService"),
    }
}

/// How long (seconds) a message may wait in the transmission queue before the selftest
/// calls it stuck: Service Broker retries a failed delivery about once a minute (the
/// same bound as `sbworker status`).
const TRANSMISSION_STUCK: f64 = 120.0;

async fn run_with(conn: &str, deep: Option<&str>, side: Side) -> Report {
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
        let routed: &[&'static str] = if side == Side::Both { &[] } else { &["route", "endpoint", "transmission"] };
        for name in ["permissions", "broker", "module options", "schema collection", "version"].iter().chain(routed) {
            report.skip(name, "the server is sbworker's emulator, not SQL Server: it has no catalog to check this in");
        }
    } else if !catalog(&mut client, &mut report, side).await {
        return report;
    }
    if side == Side::Calc {
        report.skip(
            "round trip",
            "the calculation side of a split deployment begins no dialogs: run `sbworker selftest --side roster` on \
             the roster's database, whose round trip goes over the route to a calculation worker and back",
        );
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
async fn catalog(client: &mut Tds, report: &mut Report, side: Side) -> bool {
    let checked = async {
        report.pass("permissions", permissions(client, side).await.map_err(|f| ("permissions", f))?);
        report.pass("broker", broker(client, side).await.map_err(|f| ("broker", f))?);
        let (detail, collection) = module_options(client, side).await.map_err(|f| ("module options", f))?;
        report.pass("module options", detail);
        report.pass("schema collection", schema_collection(collection).map_err(|f| ("schema collection", f))?);
        report.pass("version", version(client).await.map_err(|f| ("version", f))?);
        if let Some(far) = far_service(side) {
            let (routes, waiting) = transport_state(client).await.map_err(|f| ("route", f))?;
            report.pass("route", route(side, far, &routes).map_err(|f| ("route", f))?);
            report.pass("endpoint", endpoint(client).await.map_err(|f| ("endpoint", f))?);
            report.pass("transmission", transmission(&waiting).map_err(|f| ("transmission", f))?);
        }
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

async fn permissions(client: &mut Tds, side: Side) -> Result<String, Failure> {
    let rows = rows(client, stmt::PERMISSIONS, &[&side.name()]).await.map_err(|e| failure("HAS_PERMS_BY_NAME", &e))?;
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

async fn broker(client: &mut Tds, side: Side) -> Result<String, Failure> {
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
    let mine: Vec<&str> = [(side.has_calc(), reken.as_str()), (side.has_roster(), data.as_str())]
        .into_iter()
        .filter_map(|(here, q)| here.then_some(q))
        .collect();
    for &q in &mine {
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
        let queues = match mine.as_slice() {
            [one] => format!("queue {one}"),
            all => format!("queues {}", all.join(" and ")),
        };
        Ok(format!(
            "SQL Server {version}; broker enabled, compatibility level {level}; {queues} enabled, activation and \
             poison-message handling off{limits}"
        ))
    } else {
        Err(Failure::new(problems.join("; ")).fix(fixes.join("; ")))
    }
}

/// The modules' SET options (the line's detail), and the schema collection bound to
/// the Vraag (the procedure's second result set).
async fn module_options(client: &mut Tds, side: Side) -> Result<(String, Option<(String, String)>), Failure> {
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
    let expected = mssql::modules(side);
    let missing: Vec<&String> = expected.iter().filter(|m| !found.contains(m)).collect();
    if !missing.is_empty() {
        return Err(Failure::new(format!(
            "not installed: {}",
            missing.iter().map(|m| m.as_str()).collect::<Vec<_>>().join(", ")
        ))
        .fix(format!(
            "run broker/mssql/[0-9][0-9]_*.sql again with -v Side={side} (idempotent), or sbworker install --mssql \
             --side {side}"
        )));
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

/// A route as `sbworker.transport_state` reads it from sys.routes.
struct Route {
    name: String,
    service: Option<String>,
    broker_instance: Option<String>,
    address: String,
    mirror_address: Option<String>,
}

/// Messages waiting in sys.transmission_queue for one far service.
struct Waiting {
    far_service: Option<String>,
    messages: i64,
    oldest_seconds: f64,
    status: Option<String>,
}

/// The routes and the transmission queue (`sbworker.transport_state`, as the owner).
async fn transport_state(client: &mut Tds) -> Result<(Vec<Route>, Vec<Waiting>), Failure> {
    let what = "sbworker.transport_state (sys.routes, sys.transmission_queue)";
    let sets = client
        .query(stmt::TRANSPORT_STATE.sql, &[])
        .await
        .map_err(|e| failure(what, &mssql::error_of(e)))?
        .into_results()
        .await
        .map_err(|e| failure(what, &mssql::error_of(e)))?;
    let mut sets = sets.into_iter();
    let text = |r: &tiberius::Row, i: usize| r.get::<&str, _>(i).map(str::to_owned);
    let routes = sets
        .next()
        .unwrap_or_default()
        .iter()
        .map(|r| Route {
            name: text(r, 0).unwrap_or_default(),
            service: text(r, 1),
            broker_instance: text(r, 2),
            address: text(r, 3).unwrap_or_default(),
            mirror_address: text(r, 4),
        })
        .collect();
    let waiting = sets
        .next()
        .unwrap_or_default()
        .iter()
        .map(|r| Waiting {
            far_service: text(r, 0),
            messages: r.get::<i64, _>(1).unwrap_or(0),
            oldest_seconds: r.get::<f64, _>(2).unwrap_or(0.0),
            status: text(r, 3),
        })
        .collect();
    Ok((routes, waiting))
}

/// The routes to `far`: at least one, to another instance. Several (no BROKER_INSTANCE
/// on the roster's side) are load-balanced: the seed's round-robin.
fn route(side: Side, far: &str, routes: &[Route]) -> Result<String, Failure> {
    let to: Vec<&Route> = routes.iter().filter(|r| r.service.as_deref() == Some(far)).collect();
    let script = "broker/mssql/optional/routes.sql (docs/sqlserver.md, \"Two databases, two servers\")";
    if to.is_empty() {
        let others: Vec<String> = routes.iter().map(|r| format!("{} ({})", r.name, r.address)).collect();
        return Err(Failure::new(format!(
            "no route to {far} in sys.routes{}: its messages would wait in sys.transmission_queue",
            if others.is_empty() { String::new() } else { format!(" (routes here: {})", others.join(", ")) }
        ))
        .fix(format!("create it with {script}, run with -v Side={side} in this database")));
    }
    if let Some(r) = to.iter().find(|r| r.address.eq_ignore_ascii_case("LOCAL")) {
        return Err(Failure::new(format!(
            "route {} sends {far} to ADDRESS = 'LOCAL', this instance, which has no such service on the {side} side",
            r.name
        ))
        .fix(format!("ALTER ROUTE {} WITH ADDRESS = 'TCP://far-host:4022' ({script})", r.name)));
    }
    let each: Vec<String> = to
        .iter()
        .map(|r| {
            let mut d = format!("{} to {}", r.name, r.address);
            if let Some(m) = &r.mirror_address {
                d.push_str(&format!(" (mirror {m})"));
            }
            if let Some(b) = &r.broker_instance {
                d.push_str(&format!(", broker instance {b}"));
            }
            d
        })
        .collect();
    let spread = if to.len() > 1 {
        if to.iter().all(|r| r.broker_instance.is_none()) {
            "; the broker spreads new dialogs over them (several routes without BROKER_INSTANCE: round-robin)"
        } else {
            "; routes naming a BROKER_INSTANCE take only dialogs begun for that instance"
        }
    } else {
        ""
    };
    Ok(format!("{} route(s) to {far}: {}{spread}", to.len(), each.join("; ")))
}

/// This instance's Service Broker endpoint, as the worker's login sees it.
async fn endpoint(client: &mut Tds) -> Result<String, Failure> {
    let rows =
        rows(client, stmt::ENDPOINT, &[]).await.map_err(|e| failure("reading sys.service_broker_endpoints", &e))?;
    let Some(r) = rows.first() else {
        return Err(Failure::new(
            "no Service Broker endpoint visible to this login: messages cannot leave or arrive without one (a \
             login sees an endpoint only with a permission on it)",
        )
        .fix(
            "run broker/mssql/optional/endpoint.sql in master on this instance (it creates the endpoint and grants \
             the worker's login VIEW DEFINITION on it), or GRANT VIEW DEFINITION ON ENDPOINT::name TO the login",
        ));
    };
    let name = r.get::<&str, _>(0).unwrap_or("?");
    let state = r.get::<&str, _>(1).unwrap_or("?");
    let port = r.get::<i32, _>(2).map_or("?".to_owned(), |p| p.to_string());
    let auth = r.get::<&str, _>(3).unwrap_or("?");
    let encryption = r.get::<&str, _>(4).unwrap_or("?");
    if state != "STARTED" {
        return Err(Failure::new(format!("the Service Broker endpoint {name} (port {port}) is {state}, not STARTED"))
            .fix(format!("ALTER ENDPOINT {name} STATE = STARTED (a DBA, in master)")));
    }
    Ok(format!("endpoint {name} STARTED on TCP port {port}; authentication {auth}, encryption {encryption}"))
}

/// The transmission queue: empty, or nothing waiting longer than a retry or two.
fn transmission(waiting: &[Waiting]) -> Result<String, Failure> {
    let stuck: Vec<String> = waiting
        .iter()
        .filter(|w| w.oldest_seconds > TRANSMISSION_STUCK)
        .map(|w| {
            format!(
                "{} messages for {} wait, the oldest {:.0} s: {}",
                w.messages,
                w.far_service.as_deref().unwrap_or("(no service)"),
                w.oldest_seconds,
                match w.status.as_deref().map(str::trim) {
                    None | Some("") => "not tried yet",
                    Some(s) => s,
                }
            )
        })
        .collect();
    if !stuck.is_empty() {
        return Err(Failure::new(format!("sys.transmission_queue: {}", stuck.join("; "))).fix(
            "read the status: a route to the wrong address, the far endpoint stopped or unreachable (its port, a \
             firewall), a refused connection (the far instance's login for this certificate and its CONNECT on the \
             endpoint), or SEND on the far service not granted (docs/sqlserver.md, \"Two databases, two servers\")",
        ));
    }
    let n: i64 = waiting.iter().map(|w| w.messages).sum();
    Ok(if n == 0 {
        "sys.transmission_queue is empty: nothing waits to leave".to_owned()
    } else {
        format!("{n} messages on their way in sys.transmission_queue, none older than {TRANSMISSION_STUCK:.0} s")
    })
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
