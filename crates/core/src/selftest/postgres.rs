//! `sbworker selftest --postgres URL`: the checks of [`super`] on the PostgreSQL
//! broker. Statements in `broker/postgres/statements/selftest.sql`. PostgreSQL has no activation
//! and no SET options per module, so those checks say so; the round trip needs the
//! roster schema (`sbworker install --roster`) and is skipped, saying why, without it.

use tokio_postgres::Client;
use uuid::Uuid;

use super::{AnsweredBy, Failure, Report, SCRATCH_DV};
use crate::broker::postgres::{PostgresTransport, SCRIPTS, stamp};
use crate::handlers::{DATA_QUEUE, REKEN_QUEUE};
use crate::transport::Side;

/// The selftest's statements (`broker/postgres/statements/selftest.sql`).
use crate::sql::statements::postgres_selftest as stmt;

/// The functions the worker and its collector call, and the tables they touch with the
/// privilege each needs (broker/postgres/statements/session.sql).
const FUNCTIONS: &[&str] = &[
    "sb.channel",
    "sb.receive",
    "sb.get_conversation_group",
    "sb.begin_wait",
    "sb.end_wait",
    "sb.send",
    "sb.end_conversation",
    "sb.move_conversation",
    "sb.note_rollback",
    "sb.queue_state",
    "sb.queue_max_readers",
    "sb.may",
    "rekenserver.sla_antwoord_op",
    "rekenserver.noteer_fout",
];
const TABLES: &[(&str, &str)] = &[
    ("sbworker.message_attempt", "SELECT"),
    ("sbworker.message_attempt", "INSERT"),
    ("sbworker.message_attempt", "UPDATE"),
    ("sbworker.message_attempt", "DELETE"),
    ("sbworker.dead_letter", "INSERT"),
    ("sbworker.answered_version", "SELECT"),
    ("sbworker.answered_version", "INSERT"),
    ("sbworker.answered_version", "UPDATE"),
];
/// The Service Broker rights the worker needs (`sb.grant_receive`, `sb.grant_send`):
/// RECEIVE on the calculation's queues, SEND on its services.
const BROKER_RIGHTS: &[(&str, &str)] = &[
    ("RECEIVE", crate::handlers::REKEN_QUEUE),
    ("RECEIVE", crate::handlers::DATA_QUEUE),
    ("SEND", "/Rekenserver/LoonfactorBerekening/RekenService"),
    ("SEND", "/Rekenserver/LoonfactorBerekening/DataService"),
];
const SCHEMAS: &[&str] = &["rekenserver", "sb", "sbworker"];

fn db_failure(detail: impl Into<String>, e: &tokio_postgres::Error) -> Failure {
    let b = crate::broker::postgres::error_of_ref(e);
    let code = e.as_db_error().map(|d| d.code().code().to_owned());
    Failure::new(detail).error(
        i64::from(b.number),
        match code {
            Some(c) => format!("{} (SQLSTATE {c})", b.message),
            None => b.message,
        },
    )
}

/// Runs the checks against the database at `url`.
pub async fn run(url: &str) -> Report {
    let mut report = Report::new("postgres");
    let client = match connect(url).await {
        Ok(c) => c,
        Err(f) => {
            report.fail("connection", f);
            return report;
        }
    };
    match client.query_one(stmt::CONNECTION.sql, &[]).await {
        Ok(row) => {
            let (version, user, db, ssl, tls): (String, String, String, bool, String) =
                (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
            let mode = crate::pg_tls::config(url).map(|(_, t)| t.describe()).unwrap_or_default();
            let tls = if ssl { format!("TLS {tls} ({mode})") } else { format!("not encrypted ({mode})") };
            report.pass("connection", format!("PostgreSQL {version}, database {db} as {user}; {tls}"));
        }
        Err(e) => {
            report.fail("connection", db_failure("the connection check failed", &e));
            return report;
        }
    }
    // The side of a split install checks its own queue and its routes; the roster side
    // (or both) the round trip, over the route to the calculation side's workers.
    let side = match crate::broker::postgres::side_of(&client).await {
        Ok(side) => side,
        // A login without its grants: the next check says what it lacks.
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) => Side::Both,
        Err(e) => {
            report.fail("connection", db_failure("which side the database holds cannot be read", &e));
            return report;
        }
    };
    if let Err(f) = permissions(&client, side).await {
        report.fail("permissions", f);
        return report;
    }
    report.pass(
        "permissions",
        format!(
            "USAGE on {} schemas, EXECUTE on {} functions, {} table privileges the worker needs",
            SCHEMAS.len(),
            FUNCTIONS.len(),
            TABLES.len()
        ),
    );
    match queues(&client, side).await {
        Ok(detail) => report.pass("broker", detail),
        Err(f) => {
            report.fail("broker", f);
            return report;
        }
    }
    report.skip("module options", "not applicable: PostgreSQL functions keep no SET options of their own");
    let has_roster = match installed(&client).await {
        Ok((detail, has_roster)) => {
            report.pass("version", detail);
            has_roster
        }
        Err(f) => {
            report.fail("version", f);
            return report;
        }
    };
    if side != Side::Both {
        match routes(&client, side).await {
            Ok(detail) => report.pass("routes", detail),
            Err(f) => {
                report.fail("routes", f);
                return report;
            }
        }
        if side == Side::Calc {
            report.skip(
                "round trip",
                "the calculation side of a split install begins no dialogs: run the selftest on the roster side, \
                 whose round trip goes over the route to a calculation worker and back",
            );
            return report;
        }
    }
    if !has_roster {
        report.skip(
            "round trip",
            "no roster schema here (rooster.dienst): the round trip edits a scratch roster and needs the \
             roster triggers (sbworker install --postgres URL --roster)",
        );
        return report;
    }
    match round_trip(&client, url).await {
        Ok(detail) => report.pass("round trip", detail),
        Err(f) => {
            report.fail("round trip", f);
        }
    }
    report
}

async fn connect(url: &str) -> Result<Client, Failure> {
    let (config, tls) = crate::pg_tls::config(url)
        .map_err(|e| Failure::new(format!("the connection string: {e}")).fix("give a libpq URL or key=value string"))?;
    let connector =
        tls.connector().map_err(|e| Failure::new(e.to_string()).fix("check sslrootcert, sslcert and sslkey"))?;
    let (client, conn) = config.connect(connector).await.map_err(|e| {
        db_failure("cannot connect", &e).fix("check the host, port, database, user and password, and pg_hba.conf")
    })?;
    tokio::spawn(conn);
    Ok(client)
}

async fn permissions(client: &Client, side: Side) -> Result<(), Failure> {
    let names: Vec<String> = SCHEMAS.iter().map(|s| s.to_string()).collect();
    let rows = client.query(stmt::SCHEMA_PRIVILEGES.sql, &[&names]).await.map_err(|e| db_failure("schemas", &e))?;
    let mut problems = Vec::new();
    let mut missing_objects = false;
    for r in rows {
        let (name, exists, usage): (String, bool, bool) = (r.get(0), r.get(1), r.get(2));
        if !exists {
            missing_objects = true;
            problems.push(format!("schema {name} does not exist"));
        } else if !usage {
            problems.push(format!("no USAGE on schema {name}"));
        }
    }
    if problems.is_empty() {
        let names: Vec<String> = FUNCTIONS.iter().map(|s| s.to_string()).collect();
        let rows =
            client.query(stmt::FUNCTION_PRIVILEGES.sql, &[&names]).await.map_err(|e| db_failure("functions", &e))?;
        for r in rows {
            let (name, exists, execute): (String, bool, bool) = (r.get(0), r.get(1), r.get(2));
            if !exists {
                missing_objects = true;
                problems.push(format!("function {name} does not exist"));
            } else if !execute {
                problems.push(format!("no EXECUTE on {name}"));
            }
        }
        let (tables, privileges): (Vec<String>, Vec<String>) =
            TABLES.iter().map(|(t, p)| (t.to_string(), p.to_string())).unzip();
        let rows = client
            .query(stmt::TABLE_PRIVILEGES.sql, &[&tables, &privileges])
            .await
            .map_err(|e| db_failure("tables", &e))?;
        for r in rows {
            let (name, privilege, exists, granted): (String, String, bool, bool) =
                (r.get(0), r.get(1), r.get(2), r.get(3));
            if !exists {
                missing_objects = true;
                problems.push(format!("table {name} does not exist"));
            } else if !granted {
                problems.push(format!("no {privilege} on {name}"));
            }
        }
    }
    if problems.is_empty() {
        // (A side receives from its own queue only.)
        let (rights, objects): (Vec<String>, Vec<String>) = BROKER_RIGHTS
            .iter()
            .filter(|(r, o)| *r != "RECEIVE" || side_queues(side).contains(o))
            .map(|(r, o)| (r.to_string(), o.to_string()))
            .unzip();
        let rows = client
            .query(stmt::BROKER_RIGHTS.sql, &[&rights, &objects])
            .await
            .map_err(|e| db_failure("Service Broker rights", &e))?;
        for r in rows {
            let (right, object, granted): (String, String, bool) = (r.get(0), r.get(1), r.get(2));
            if !granted {
                problems.push(format!("no {right} on {object} (sb.grant_{})", right.to_lowercase()));
            }
        }
    }
    problems.dedup();
    if problems.is_empty() {
        return Ok(());
    }
    let fix = if missing_objects {
        "install the broker: sbworker install --postgres URL (add --roster where the roster lives)".to_owned()
    } else {
        "grant the worker's login the role sbworker_worker (sbworker install --postgres URL --worker-role LOGIN, or \
         GRANT sbworker_worker TO LOGIN), or run the selftest as the login the worker uses"
            .to_owned()
    };
    Err(Failure::new(problems.join("; ")).fix(fix))
}

/// The queues a database of `side` holds.
fn side_queues(side: Side) -> &'static [&'static str] {
    match side {
        Side::Both => &[REKEN_QUEUE, DATA_QUEUE],
        Side::Roster => &[DATA_QUEUE],
        Side::Calc => &[REKEN_QUEUE],
    }
}

/// A side's routes: at least one out, each subscribed by its far database and read now,
/// and as many subscriptions in applying now.
async fn routes(client: &Client, side: Side) -> Result<String, Failure> {
    let row = client.query_one(stmt::ROUTES.sql, &[]).await.map_err(|e| db_failure("routes", &e))?;
    let (named, healthy, all, applying): (Vec<String>, i32, i32, i32) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    let fix = "join the sides: sbworker link --roster ROSTER_URL --calc CALC_URL (docs/deployment.md); a route \
               not read: is the far server up, and its subscription applying (`sbworker status` there)?";
    if all == 0 {
        return Err(Failure::new(format!("the {side} side of a split install has no route to the other side")).fix(fix));
    }
    if healthy < all || applying < all {
        return Err(Failure::new(format!(
            "routes out: {}; {applying} subscription(s) in applying of {all} expected",
            named.join(", ")
        ))
        .fix(fix));
    }
    Ok(format!("{all} route(s) out, each read by its far database ({}); {applying} in, applying", named.join(", ")))
}

async fn queues(client: &Client, side: Side) -> Result<String, Failure> {
    let names: Vec<String> = side_queues(side).iter().map(|q| q.to_string()).collect();
    let rows = client.query(stmt::QUEUES.sql, &[&names]).await.map_err(|e| db_failure("queues", &e))?;
    let mut problems = Vec::new();
    let mut fixes = Vec::new();
    for r in rows {
        let (name, exists, enabled, poison): (String, bool, bool, bool) = (r.get(0), r.get(1), r.get(2), r.get(3));
        if !exists {
            problems.push(format!("queue {name} does not exist"));
            fixes.push("sbworker install --postgres URL".to_owned());
        } else {
            if !enabled {
                problems.push(format!("queue {name} is disabled"));
                fixes.push(format!("SELECT sb.alter_queue('{name}', p_enabled => true) once the cause is fixed"));
            }
            if poison {
                problems.push(format!("queue {name} has the broker's poison-message detection on"));
                fixes.push(format!("SELECT sb.alter_queue('{name}', p_poison_handling => false)"));
            }
        }
    }
    if problems.is_empty() {
        Ok(format!(
            "queue(s) {} enabled, poison-message detection off (the PostgreSQL broker has no activation){}",
            names.join(" and "),
            if side == Side::Both { String::new() } else { format!("; the {side} side of a split install") }
        ))
    } else {
        Err(Failure::new(problems.join("; ")).fix(fixes.join("; ")))
    }
}

async fn installed(client: &Client) -> Result<(String, bool), Failure> {
    let row = client.query_one(stmt::INSTALLED.sql, &[]).await.map_err(|e| {
        db_failure("the install's version stamp cannot be read", &e)
            .fix("install with this sbworker: sbworker install --postgres URL")
    })?;
    let (versions, broker, roster, has_roster): (Vec<i32>, Option<String>, Option<String>, bool) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    let want: Vec<i32> = SCRIPTS.iter().map(|(v, _)| *v).collect();
    if !want.iter().all(|v| versions.contains(v)) {
        return Err(Failure::new(format!("broker scripts applied: {versions:?}, this sbworker has {want:?}"))
            .fix("sbworker install --postgres URL"));
    }
    let mine = stamp("broker");
    if broker.as_deref() != Some(mine.as_str()) {
        return Err(Failure::new(format!(
            "the broker was installed by another sbworker (stamp {}; this one is {mine})",
            broker.as_deref().unwrap_or("none")
        ))
        .fix("install again with this binary: sbworker install --postgres URL (idempotent)"));
    }
    if has_roster {
        let mine_roster = stamp("roster");
        if roster.as_deref() != Some(mine_roster.as_str()) {
            return Err(Failure::new(format!(
                "the roster schema was installed by another sbworker (stamp {}; this one is {mine_roster})",
                roster.as_deref().unwrap_or("none")
            ))
            .fix("install again with this binary: sbworker install --postgres URL --roster (idempotent)"));
        }
    }
    Ok((
        format!("installed by this sbworker ({mine}{})", if has_roster { ", with the roster" } else { "" }),
        has_roster,
    ))
}

/// The round trip, cleaned up afterwards whatever happened.
async fn round_trip(client: &Client, url: &str) -> Result<String, Failure> {
    // Left over by a selftest that was killed: removed first.
    cleanup(client).await?;
    let result = round_trip_inner(client, url).await;
    let cleaned = cleanup(client).await;
    let detail = result?;
    cleaned?;
    Ok(detail)
}

async fn round_trip_inner(client: &Client, url: &str) -> Result<String, Failure> {
    let started = std::time::Instant::now();
    client.batch_execute("BEGIN").await.map_err(|e| db_failure("BEGIN", &e))?;
    let scratch = async {
        client.execute(stmt::SCRATCH.sql, &[]).await?;
        // The commit trigger sends the Vraag.
        client.batch_execute("COMMIT").await
    }
    .await;
    if let Err(e) = scratch {
        let _ = client.batch_execute("ROLLBACK").await;
        return Err(db_failure("the scratch roster edit failed", &e));
    }
    let rows = client
        .query(stmt::SCRATCH_DIALOGS.sql, &[])
        .await
        .map_err(|e| db_failure("reading the calculation log", &e))?;
    let Some(latest) = rows.first() else {
        return Err(Failure::new("the roster edit sent no Vraag (no dialog in rekenserver.berekening_log)")
            .fix("check the roster triggers: sbworker install --postgres URL --roster"));
    };
    let (initiator, target, versie): (Uuid, Option<Uuid>, i64) = (latest.get(0), latest.get(1), latest.get(2));
    let transport = PostgresTransport::new(url);
    let by = match target {
        Some(target) => super::answer_scratch(&transport, (REKEN_QUEUE, DATA_QUEUE), target, initiator).await?,
        // Both endpoints gone already: a running worker answered and ended it.
        None => AnsweredBy::RunningWorker,
    };
    let wait = super::Wait::new(versie);
    loop {
        let rows = client
            .query(stmt::SCRATCH_RESULT.sql, &[])
            .await
            .map_err(|e| db_failure("reading the stored result", &e))?;
        if wait.done(rows.first().map(|r| r.get::<_, i64>(0))).await? {
            break;
        }
    }
    let row = client
        .query_one(stmt::SCRATCH_RESULT.sql, &[])
        .await
        .map_err(|e| db_failure("reading the stored result", &e))?;
    let (factors, exportable): (i64, i64) = (row.get(1), row.get(2));
    // Payroll's export would claim it (and only it, in the scratch period).
    if exportable != 1 {
        return Err(Failure::new(format!(
            "export would claim {exportable} results for the scratch period, not the one stored"
        )));
    }
    Ok(super::round_trip_detail(by, versie, factors, started))
}

/// Removes everything the round trip wrote (sending switched off meanwhile).
async fn cleanup(client: &Client) -> Result<(), Failure> {
    let run = async {
        client.batch_execute("BEGIN").await?;
        client.query(stmt::CLEANUP_ROSTER.sql, &[]).await?;
        // The roster's commit trigger raises the key's version at COMMIT (sending is
        // off): the bookkeeping goes in a transaction after it.
        client.batch_execute("COMMIT").await?;
        client.batch_execute("BEGIN").await?;
        client.query(stmt::CLEANUP_BOOKS.sql, &[]).await?;
        client.batch_execute("COMMIT").await
    }
    .await;
    if let Err(e) = run {
        let _ = client.batch_execute("ROLLBACK").await;
        return Err(db_failure("cleaning up the scratch key failed", &e)
            .fix(format!("remove the rows of dienstverband {SCRATCH_DV} by hand")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_round_trips_functions_use_the_scratch_key_of_the_selftest() {
        // They take no ids (so the worker's login cannot aim them at another key): the
        // fixed key in their SQL must be the selftest's.
        let sql = crate::broker::postgres::ROSTER_SCRIPTS[1].1;
        assert_eq!(super::super::SCRATCH_DV, super::super::SCRATCH_PERIODE);
        assert!(sql.contains(&format!("WHERE l.dienstverband_id = {}", super::SCRATCH_DV)), "005_housekeeping.sql");
        assert!(!sql.contains("selftest_cleanup_books(p_dv"), "no parameters");
    }
}
