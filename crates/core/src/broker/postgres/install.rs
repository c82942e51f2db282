//! Installing the PostgreSQL broker: the scripts of `broker/postgres/`, in order, and
//! the version stamp written after them.

use super::{BrokerError, connect, error_of};
use crate::sql::statements::postgres_install;
use crate::transport::{ErrorKind, Side};

/// The install scripts, in order: (version, SQL).
pub const SCRIPTS: &[(i32, &str)] = &[
    (1, include_str!("../../../../../broker/postgres/001_broker.sql")),
    (2, include_str!("../../../../../broker/postgres/002_worker.sql")),
    (3, include_str!("../../../../../broker/postgres/003_calculation.sql")),
    (7, include_str!("../../../../../broker/postgres/007_operations.sql")),
    (8, include_str!("../../../../../broker/postgres/008_routes.sql")),
];

/// The roster schema and its triggers (the sending side of the pipeline) and the
/// housekeeping that goes with it: installed on request, for databases that hold the
/// roster itself (the demo, the tests).
pub const ROSTER_SCRIPTS: &[(i32, &str)] = &[
    (4, include_str!("../../../../../broker/postgres/004_roster.sql")),
    (5, include_str!("../../../../../broker/postgres/005_housekeeping.sql")),
];

/// Roles and rights (`006_security.sql`): run after the other scripts on every install,
/// so that it covers the roster's objects where they are installed.
pub const SECURITY: (i32, &str) = (6, include_str!("../../../../../broker/postgres/006_security.sql"));

/// The stamp an install writes for the broker's scripts (`part` "broker") or the
/// roster's ("roster"): this version and a hash of the scripts.
pub fn stamp(part: &str) -> String {
    let mut texts: Vec<&str> =
        if part == "roster" { ROSTER_SCRIPTS } else { SCRIPTS }.iter().map(|(_, s)| *s).collect();
    if part != "roster" {
        texts.push(SECURITY.1);
    }
    crate::sql::stamp(&texts)
}

/// Installs (or brings up to date) the broker in the database at `url`. Each script is
/// idempotent; all run in one transaction.
pub async fn install(url: &str) -> Result<Vec<i32>, BrokerError> {
    install_with(url, false).await
}

/// Tries of one install: a deadlock with running workers and planners (an install that
/// adds a column or an index, or replaces a trigger, locks that table while they hold
/// some of the same locks in another order; over a current install it takes no such
/// lock), or a lock not had within the install's lock timeout, rolls the whole install
/// back, and it is run again; eight tries in all.
const TRIES: u32 = 8;

/// [`install`], plus the roster schema when `roster` is set. The install is one
/// transaction, idempotent: one that loses a deadlock (1205: 40P01, 40001) or waits too
/// long for a lock (1222: 55P03) is rolled back and run again, after a growing pause.
/// Anything else (a cancel, a full disk) stops it at once.
pub async fn install_with(url: &str, roster: bool) -> Result<Vec<i32>, BrokerError> {
    install_side(url, roster, None).await
}

/// [`install_with`] of one side (`side`; `None`: the side the database was first
/// installed as, both services for a new one). A database stays the side it was first
/// installed as: another is refused (22023), as is the roster on the calculation side.
pub async fn install_side(url: &str, roster: bool, side: Option<Side>) -> Result<Vec<i32>, BrokerError> {
    if roster && side == Some(Side::Calc) {
        return Err(BrokerError {
            kind: ErrorKind::Other,
            number: 0,
            message: "the roster is installed on the roster side, not the calculation side".into(),
        });
    }
    let mut tries = 0;
    loop {
        tries += 1;
        match install_once(url, roster, side).await {
            Err(e) if matches!(e.number, 1205 | 1222) && tries < TRIES => {
                tokio::time::sleep(std::time::Duration::from_millis(100 << tries.min(5))).await;
            }
            done => return done,
        }
    }
}

async fn install_once(url: &str, roster: bool, side: Option<Side>) -> Result<Vec<i32>, BrokerError> {
    let client = connect(&super::endpoint(url)?, None).await?;
    let mut applied = Vec::new();
    let extra = if roster { ROSTER_SCRIPTS } else { &[] };
    // One transaction for all: replacing a function resets its rights (SECURITY DEFINER,
    // the pinned search_path) until 006_security.sql sets them again, and running
    // workers must never see it in between.
    client.batch_execute("BEGIN").await.map_err(error_of)?;
    let run = async {
        client.batch_execute(postgres_install::QUIET_NOTICES.sql).await?;
        if let Some(side) = side {
            client.execute(postgres_install::SET_SIDE.sql, &[&side.name()]).await?;
        }
        for (version, sql) in SCRIPTS.iter().chain(extra).chain(std::iter::once(&SECURITY)) {
            client.batch_execute(sql).await?;
            applied.push(*version);
        }
        client.batch_execute("COMMIT").await
    };
    if let Err(e) = run.await {
        let _ = client.batch_execute("ROLLBACK").await;
        return Err(error_of(e));
    }
    for part in ["broker"].into_iter().chain(roster.then_some("roster")) {
        client.execute(postgres_install::RECORD_STAMP.sql, &[&part, &stamp(part)]).await.map_err(error_of)?;
    }
    Ok(applied)
}

/// The side of sbworker the database at `client` holds: both for an install before
/// sides. Other errors as the server gave them (a login without its grants: 42501).
pub async fn side_of(client: &tokio_postgres::Client) -> Result<Side, tokio_postgres::Error> {
    match client.query_one(postgres_install::INSTALL_SIDE.sql, &[]).await {
        Ok(row) => Ok(row.get::<_, String>(0).parse().unwrap_or_default()),
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_FUNCTION) => Ok(Side::Both),
        Err(e) => Err(e),
    }
}

/// The live calculation workers (a beat within three of their intervals) that read an
/// older Vraag contract than this release's senders write, or record none: each as
/// `host pid N (sbworker V, contract C)`. Empty when there are none (or no heartbeat
/// table yet). `sbworker install --roster` refuses while there are any.
pub async fn older_workers(url: &str) -> Result<Vec<String>, BrokerError> {
    let client = connect(&super::endpoint(url)?, None).await?;
    let exists: bool =
        client.query_one(postgres_install::HEARTBEAT_TABLE_EXISTS.sql, &[]).await.map_err(error_of)?.get(0);
    if !exists {
        return Ok(Vec::new());
    }
    let version = crate::contract::CONTRACT_VERSIE as i32;
    let rows = client.query(postgres_install::OLDER_WORKERS.sql, &[&version]).await.map_err(error_of)?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Grants sbworker's group roles to existing logins: (role, login) pairs.
pub async fn grant_roles(url: &str, grants: &[(&str, String)]) -> Result<(), BrokerError> {
    if grants.is_empty() {
        return Ok(());
    }
    let client = connect(&super::endpoint(url)?, None).await?;
    for (role, login) in grants {
        client.execute(postgres_install::GRANT_ROLE.sql, &[role, login]).await.map_err(error_of)?;
    }
    Ok(())
}
