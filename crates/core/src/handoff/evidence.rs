//! `sbworker explain`: a stored result with its evidence. Every stored
//! version keeps the Vraag as it was sent and the factors it got
//! (`rekenserver.resultaat_historie`); this reads them back, compares a version with the
//! one stored before it, factor by factor, and explains the stored Vraag with the engine
//! as it is now, saying where the engine or the rate tables of today compute something
//! else than what was stored.

use std::collections::BTreeMap;

use rust_decimal::Decimal;
use tokio_postgres::Client;

use super::stmt;
use crate::contract::{Limits, decode_vraag};
use crate::engine::{self, Tables};

/// One stored version of a key.
#[derive(Debug, Clone, PartialEq)]
pub struct Version {
    pub versie: i64,
    pub opgeslagen_op: String,
    /// The Vraag as sent (absent for a version stored before evidence was kept).
    pub vraag: Option<String>,
    pub factoren: BTreeMap<String, Decimal>,
    /// What computed it (the engine's version and its tables'), when it was recorded.
    pub rekenversie: Option<String>,
    /// When it went out to payroll (the first time), if it did.
    pub geexporteerd_op: Option<String>,
}

/// A key's stored versions, oldest first.
pub async fn versions(client: &Client, dv: i32, periode: i32) -> Result<Vec<Version>, tokio_postgres::Error> {
    let rows = client.query(stmt::EVIDENCE.sql, &[&dv, &periode]).await?;
    Ok(rows
        .iter()
        .map(|r| {
            let (codes, values): (Vec<String>, Vec<String>) = (r.get(3), r.get(4));
            let factoren = codes.into_iter().zip(values).filter_map(|(c, v)| v.parse().ok().map(|d| (c, d))).collect();
            Version {
                versie: r.get(0),
                opgeslagen_op: r.get(1),
                vraag: r.get(2),
                factoren,
                rekenversie: r.get(5),
                geexporteerd_op: r.get(6),
            }
        })
        .collect())
}

/// One factor that differs: (code, before, after); `None` where a side has no such
/// factor.
pub type Difference = (String, Option<Decimal>, Option<Decimal>);

/// The factors that differ between two sets.
pub fn differences(before: &BTreeMap<String, Decimal>, after: &BTreeMap<String, Decimal>) -> Vec<Difference> {
    let codes: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    codes
        .into_iter()
        .filter_map(|c| {
            let (b, a) = (before.get(c).copied(), after.get(c).copied());
            (b != a).then(|| (c.clone(), b, a))
        })
        .collect()
}

/// A stored version explained.
#[derive(Debug, Clone, PartialEq)]
pub struct Explained {
    pub version: Version,
    /// The version stored before it, and what changed since.
    pub previous: Option<(i64, Vec<Difference>)>,
    /// The engine's explanation of the stored Vraag, with today's engine and tables.
    pub explanation: Option<String>,
    /// Where today's engine and tables compute something else: (code, stored, now).
    pub drift: Vec<Difference>,
    /// What computes today (to set beside the version's `rekenversie`).
    pub rekenversie_now: String,
    /// Why the Vraag could not be explained (absent, or no longer decodable or computable).
    pub unexplained: Option<String>,
}

/// Explains version `versie` (the latest when `None`) of a key.
pub fn explain(versions: &[Version], versie: Option<i64>, tables: &Tables) -> Result<Explained, String> {
    let at = match versie {
        Some(v) => versions.iter().rposition(|x| x.versie == v).ok_or_else(|| format!("no stored version {v}"))?,
        None => versions.len().checked_sub(1).ok_or_else(|| "no stored version".to_owned())?,
    };
    let version = versions[at].clone();
    let previous = at.checked_sub(1).map(|p| {
        let before = &versions[p];
        (before.versie, differences(&before.factoren, &version.factoren))
    });
    let (mut explanation, mut drift, mut unexplained) = (None, Vec::new(), None);
    match &version.vraag {
        None => unexplained = Some("the Vraag of this version was not kept".to_owned()),
        Some(xml) => match decode_vraag(xml.as_bytes(), &Limits::default()) {
            Err(e) => unexplained = Some(format!("the kept Vraag does not decode now: {e}")),
            Ok(v) => match engine::calculate(&v, tables, true) {
                Err(e) => unexplained = Some(format!("the engine cannot compute the kept Vraag now: {e}")),
                Ok(c) => {
                    let now: BTreeMap<String, Decimal> =
                        c.antwoord.mutaties.iter().map(|m| (m.loonfactor_code.clone(), m.waarde)).collect();
                    drift = differences(&version.factoren, &now);
                    explanation = c.explanation.map(|e| e.to_string());
                }
            },
        },
    }
    Ok(Explained { version, previous, explanation, drift, unexplained, rekenversie_now: engine::rekenversie(tables) })
}
