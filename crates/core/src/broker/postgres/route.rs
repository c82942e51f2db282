//! Joining the two sides of a split install (`sbworker link`): a route each way between
//! the roster database and a calculation database, carried by logical replication
//! (`broker/postgres/008_routes.sql` says how). Several calculation databases linked to
//! one roster database share its new dialogs in turn.

use super::{BrokerError, connect, error_of};
use crate::sql::statements::postgres_route as S;
use crate::transport::ErrorKind;

/// The calculation service, which the roster side's routes lead to.
pub const CALCULATION_SERVICE: &str = "/Rekenserver/LoonfactorBerekening/RekenService";
/// The roster side's service, which the calculation side's route leads back to.
pub const DATA_SERVICE: &str = "/Rekenserver/LoonfactorBerekening/DataService";

/// The two routes a link made (or found made): the roster side's to the calculation
/// database, and the calculation side's back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub to_calculation: String,
    pub back: String,
}

fn refused(message: String) -> BrokerError {
    BrokerError { kind: ErrorKind::Other, number: 0, message }
}

/// A database's broker id, side, and where it is (host, port and database, for people:
/// no password).
async fn identity(client: &tokio_postgres::Client, url: &str) -> Result<(uuid::Uuid, String, String), BrokerError> {
    let row = client.query_one(S::BROKER_INSTANCE.sql, &[]).await.map_err(error_of)?;
    let config: tokio_postgres::Config = url.parse().map_err(|e| refused(format!("{e}")))?;
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let address = format!("{host}:{port}/{}", config.get_dbname().unwrap_or(""));
    Ok((row.get(0), row.get(1), address))
}

/// What logical replication needs of a server, checked before anything is made: a
/// clear refusal instead of a subscription that never starts. `slot`: the slot this
/// server is to publish (a link made before has it already, and needs no free one).
async fn replication_ready(client: &tokio_postgres::Client, address: &str, slot: &str) -> Result<(), BrokerError> {
    let has_slot: bool = client.query_one(S::SLOT_EXISTS.sql, &[&slot]).await.map_err(error_of)?.get(0);
    let row = client.query_one(S::REPLICATION_SETTINGS.sql, &[]).await.map_err(error_of)?;
    let (wal_level, slots, used, senders): (String, i32, i32, i32) = (row.get(0), row.get(1), row.get(2), row.get(3));
    if wal_level != "logical" {
        return Err(refused(format!(
            "{address}: wal_level is {wal_level}; a route needs wal_level = logical (set it and restart the server)"
        )));
    }
    if (used >= slots && !has_slot) || senders == 0 {
        return Err(refused(format!(
            "{address}: {used} of {slots} replication slots are in use and max_wal_senders is {senders}; \
             a route needs a free slot and a WAL sender"
        )));
    }
    Ok(())
}

/// Links the roster database at `roster` with the calculation database at `calc`: a
/// route from the roster side to the calculation service there, one back to the roster
/// side's service, each published where it starts and subscribed where it ends, each
/// subscription connecting with the other's connection string as given (so each
/// server must be able to reach the other with it). Idempotent. Needs, on both: the
/// broker installed as its side, wal_level = logical, a free replication slot, and a
/// login that may create publications and subscriptions (PostgreSQL 15: a superuser).
pub async fn link(roster: &str, calc: &str) -> Result<Link, BrokerError> {
    let r = connect(&super::endpoint(roster)?, None).await?;
    let c = connect(&super::endpoint(calc)?, None).await?;
    let (r_id, r_side, r_address) = identity(&r, roster).await?;
    let (c_id, c_side, c_address) = identity(&c, calc).await?;
    if r_side != "roster" {
        return Err(refused(format!(
            "{r_address} holds the {r_side} side: the roster database is installed with --side roster"
        )));
    }
    if c_side != "calc" {
        return Err(refused(format!(
            "{c_address} holds the {c_side} side: a calculation database is installed with --side calc"
        )));
    }
    let short = |id: uuid::Uuid| id.simple().to_string()[..8].to_owned();
    // Names unique where each is published and subscribed: the route out of the roster
    // side by the calculation database it leads to; the one back by both.
    let link = Link {
        to_calculation: format!("reken_{}", short(c_id)),
        back: format!("data_{}_{}", short(r_id), short(c_id)),
    };
    let slot = |route: &str| format!("sb_route_{route}");
    replication_ready(&r, &r_address, &slot(&link.to_calculation)).await?;
    replication_ready(&c, &c_address, &slot(&link.back)).await?;
    // Each route's publication, then its slot (a slot carries only what is written after
    // it is made, and a slot made before the publication would not see it), then the
    // subscription at the far end, and last the route itself: a dialog given a route
    // before its slot existed would be lost.
    r.execute(S::PUBLISH_ROUTE.sql, &[&link.to_calculation]).await.map_err(error_of)?;
    c.execute(S::PUBLISH_ROUTE.sql, &[&link.back]).await.map_err(error_of)?;
    r.execute(S::CREATE_SLOT.sql, &[&slot(&link.to_calculation)]).await.map_err(error_of)?;
    c.execute(S::CREATE_SLOT.sql, &[&slot(&link.back)]).await.map_err(error_of)?;
    c.execute(S::SUBSCRIBE.sql, &[&link.to_calculation, &roster]).await.map_err(error_of)?;
    r.execute(S::SUBSCRIBE.sql, &[&link.back, &calc]).await.map_err(error_of)?;
    c.execute(S::CREATE_ROUTE.sql, &[&link.back, &DATA_SERVICE, &r_id, &r_address]).await.map_err(error_of)?;
    r.execute(S::CREATE_ROUTE.sql, &[&link.to_calculation, &CALCULATION_SERVICE, &c_id, &c_address])
        .await
        .map_err(error_of)?;
    Ok(link)
}
