//! Waiting for the pipeline to drain, and checking its end state: every key holds the
//! result of its latest roster version (equal to computing that version's Vraag anew),
//! no stored version ever went back, and no conversation is left open.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rust_decimal::Decimal;
use tokio_postgres::Client;

use super::{oracle, stmt};
use crate::contract::{self, Limits};
use crate::engine::{self, Tables};

/// Where the pipeline stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    pub sent: i64,
    pub answered: i64,
    pub faults: i64,
    pub messages: i64,
    pub endpoints: i64,
}

impl Progress {
    /// Every request answered and no message waiting: the work is done. (Reused dialogs
    /// stay open until their keys have been idle a while.)
    pub fn worked_off(&self) -> bool {
        self.answered == self.sent && self.messages == 0
    }

    /// Every request answered, no message waiting, every conversation ended.
    pub fn drained(&self) -> bool {
        self.worked_off() && self.endpoints == 0
    }
}

pub async fn progress(client: &Client) -> Result<Progress, tokio_postgres::Error> {
    let r = client.query_one(stmt::PROGRESS.sql, &[]).await?;
    Ok(Progress { sent: r.get(0), answered: r.get(1), faults: r.get(2), messages: r.get(3), endpoints: r.get(4) })
}

/// Checks progress every 100 ms (calling `report` with it) until drained; an error
/// after `limit`.
pub async fn wait_drained(client: &Client, limit: Duration, report: impl FnMut(&Progress)) -> anyhow::Result<Progress> {
    wait_until(client, limit, Progress::drained, report).await
}

/// Until `done` holds of the progress, within `limit`, reporting as it goes.
pub async fn wait_until(
    client: &Client,
    limit: Duration,
    done: fn(&Progress) -> bool,
    mut report: impl FnMut(&Progress),
) -> anyhow::Result<Progress> {
    let start = Instant::now();
    loop {
        let p = progress(client).await?;
        report(&p);
        if done(&p) {
            return Ok(p);
        }
        if start.elapsed() > limit {
            anyhow::bail!(
                "the pipeline did not drain within {} s: {} of {} requests answered, {} messages waiting, {} endpoints open",
                limit.as_secs(),
                p.answered,
                p.sent,
                p.messages,
                p.endpoints
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The end state, key by key.
#[derive(Debug, Default)]
pub struct Verdict {
    pub keys: usize,
    /// Keys holding their latest version's result, equal to a fresh calculation.
    pub latest: usize,
    /// Keys whose latest request was answered with a Fout: (dienstverband, reason).
    pub faulted: Vec<(i32, String)>,
    /// What is wrong (empty: all is well).
    pub problems: Vec<String>,
}

/// Checks every key: its stored result is that of its latest roster version and
/// equals computing the Vraag of the roster as it stands (built from the roster rows
/// by the second builder, `oracle`, which the SQL builder must agree with); versions
/// never went back.
pub async fn verify(client: &Client, tables: &Tables) -> anyhow::Result<Verdict> {
    let mut v = Verdict::default();
    let backwards: i64 = client.query_one(stmt::BACKWARDS.sql, &[]).await?.get(0);
    if backwards > 0 {
        v.problems.push(format!("{backwards} stored versions came after a newer one"));
    }
    for row in client.query(stmt::KEYS.sql, &[]).await? {
        v.keys += 1;
        let (dv, periode, versie): (i32, i32, i64) = (row.get(0), row.get(1), row.get(2));
        let stored: Option<i64> = row.get(3);
        let outcome: Option<String> = row.get(4);
        if outcome.as_deref() == Some("fout") {
            v.faulted.push((dv, row.get::<_, Option<String>>(5).unwrap_or_default()));
            continue;
        }
        if stored != Some(versie) {
            v.problems.push(format!("key ({dv}, {periode}): roster version {versie}, stored {stored:?}"));
            continue;
        }
        let xml: Option<String> = client.query_one(stmt::VRAAG_NOW.sql, &[&dv, &periode, &versie]).await?.get(0);
        let xml = xml.ok_or_else(|| anyhow::anyhow!("key ({dv}, {periode}) has no Vraag"))?;
        let sent = contract::decode_vraag(xml.as_bytes(), &Limits::default())
            .map_err(|e| anyhow::anyhow!("the Vraag of ({dv}, {periode}) does not decode: {e}"))?;
        // The expected result comes from the second builder's Vraag, read from the roster
        // rows; the SQL builder (what the trigger sends) must agree with it.
        let Some(vraag) = oracle::vraag(client, dv, periode, versie, sent.id, sent.timestamp.clone()).await? else {
            v.problems.push(format!("key ({dv}, {periode}) has no roster rows"));
            continue;
        };
        if vraag != sent {
            v.problems.push(format!(
                "key ({dv}, {periode}): the SQL builder's Vraag differs from the roster rows: {sent:?} against {vraag:?}"
            ));
            continue;
        }
        let expected: BTreeMap<String, Decimal> = match engine::calculate(&vraag, tables, false) {
            Ok(c) => c.antwoord.mutaties.iter().map(|m| (m.loonfactor_code.clone(), m.waarde)).collect(),
            Err(e) => {
                v.problems.push(format!("key ({dv}, {periode}) stored a result, but computing it now fails: {e}"));
                continue;
            }
        };
        let got: BTreeMap<String, Decimal> = client
            .query(stmt::FACTORS.sql, &[&dv, &periode])
            .await?
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1).parse().unwrap_or(Decimal::MIN)))
            .collect();
        if got == expected {
            v.latest += 1;
        } else {
            v.problems.push(format!("key ({dv}, {periode}) stored {got:?}, computing gives {expected:?}"));
        }
    }
    Ok(v)
}
