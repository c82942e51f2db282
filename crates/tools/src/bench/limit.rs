//! The machine's limits and its calibration: pgbench doing the same commits and row
//! writes per message as sbworker (the headline's limit and the pipeline's), and the
//! pipeline's business limit, pgbench doing the business work of each edit with no queue.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use tokio::process::Command;

use super::pipeline::{BusinessLimit, PipelineLimit, Track};
use super::runs::{Measured, READING, Shape, fresh, reading, set_sync, settle};
use super::world::{self, World};
use super::{Contender, Workload, stmt};

/// The business limit's send, replacing the roster's (`bench_business_limit.sql`).
const BUSINESS_LIMIT_SQL: &str = include_str!("../../sql/postgres/bench_business_limit.sql");

/// pgbench's figure for a script: transactions per second (without connection time).
async fn pgbench(url: &str, script: &Path, clients: u32, how_long: &[&str]) -> anyhow::Result<f64> {
    let program = crate::pg_cluster::Cluster::program("pgbench")?;
    let out = Command::new(&program)
        .args(["-n", "-c", &clients.to_string(), "-j", "2"])
        .args(how_long)
        .arg("-f")
        .arg(script)
        .arg(url)
        .output()
        .await
        .with_context(|| format!("running {}", program.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("pgbench failed: {}\n{}", text, String::from_utf8_lossy(&out.stderr));
    }
    parse_tps(&text).with_context(|| format!("no tps in pgbench's output:\n{text}"))
}

fn parse_tps(text: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix("tps = ")?.split_whitespace().next()?.parse().ok())
}

/// Commits per second the machine manages with `clients` connections, each commit one
/// row (pgbench, `seconds` long).
pub async fn calibrate(
    world: &World,
    db: &str,
    url: &str,
    clients: u32,
    seconds: u32,
    dir: &Path,
) -> anyhow::Result<f64> {
    set_sync(world, db, true).await?;
    let script = write(dir, "calibration.pgbench", include_str!("../../sql/postgres/bench_calibration.pgbench"))?;
    let c = world::connect(url).await?;
    c.batch_execute(stmt::LIMIT_RESET.sql).await?;
    let tps = pgbench(url, &script, clients, &["-T", &seconds.to_string()]).await?;
    super::progress(&format!("calibration: {tps:.0} commits/s"));
    Ok(tps)
}

/// The limit for the headline's commit pattern: pgbench drains the same number of
/// messages with the same connections.
#[allow(clippy::too_many_arguments)]
pub async fn limit(
    world: &World,
    db: &str,
    url: &str,
    shape: Shape,
    clients: u32,
    sync: bool,
    repetition: usize,
    dir: &Path,
) -> anyhow::Result<Measured> {
    {
        let c = fresh(world, db, url, stmt::LIMIT_RESET.sql, sync).await?;
        c.execute(stmt::LIMIT_PRELOAD.sql, &[&shape.groups, &shape.per_group]).await?;
        c.execute(stmt::LIMIT_ACCOUNTS.sql, &[&shape.groups]).await?;
    }
    let script = write(dir, "limit.pgbench", include_str!("../../sql/postgres/bench_limit.pgbench"))?;
    let total = shape.messages();
    if total % clients as u64 != 0 {
        bail!("{total} messages do not divide over {clients} pgbench clients");
    }
    let pgss = super::runs::statements_reset(url).await?;
    settle().await;
    let (commits0, wal0) = reading(url).await?;
    let server0 = world.server_cpu();
    let tps = pgbench(url, &script, clients, &["-t", &(total / clients as u64).to_string()]).await?;
    let server1 = world.server_cpu();
    settle().await;
    let (commits1, wal1) = reading(url).await?;
    let c = world::connect(url).await?;
    let v = c.query_one(stmt::LIMIT_VERIFY.sql, &[]).await?;
    let (left, replies): (i64, i64) = (v.get(0), v.get(1));
    if left != 0 || replies != total as i64 {
        bail!("pgbench left {left} messages and wrote {replies} replies of {total}");
    }
    let n = total as f64;
    let statements = super::runs::statements_top(url, pgss, n).await?;
    super::progress(&format!("limit: {total} messages at {tps:.0}/s"));
    Ok(Measured {
        workload: Workload::Headline,
        contender: Contender::Limit,
        synchronous_commit: sync,
        repetition,
        messages: total,
        seconds: n / tps,
        per_second: tps,
        commits_per_message: (commits1 - commits0 - READING) as f64 / n,
        wal_bytes_per_message: (wal1 - wal0) as f64 / n,
        worker_cpu_per_1000: None,
        emulator_cpu_per_1000: None,
        postgres_cpu_per_1000: world::server_cpu_seconds(&server0, &server1) * 1000.0 / n,
        worker_peak_rss_mib: None,
        readers: clients,
        connections: clients,
        out_of_order: None,
        exactly_once: Some(true),
        statements,
    })
}

/// The pipeline's limit: pgbench makes `edits` roster edits over `employees` (half on a
/// hot tenth, as the pipeline's planners do), each with the minimal durable work of the
/// pipeline's three transactions (`bench_pipeline_limit.pgbench`), with durable commits,
/// then checks that every request was answered and every key holds its latest version.
#[allow(clippy::too_many_arguments)]
pub async fn pipeline_limit(
    world: &World,
    db: &str,
    url: &str,
    employees: usize,
    edits: u64,
    clients: u32,
    repetition: usize,
    dir: &Path,
) -> anyhow::Result<PipelineLimit> {
    {
        let c = fresh(world, db, url, stmt::PLIMIT_RESET.sql, true).await?;
        let vraag = include_str!("../../../../schemas/examples/valid/vraag-maand.xml");
        let antwoord = include_str!("../../../../schemas/examples/valid/antwoord-voorbeeld1.xml");
        c.execute(stmt::PLIMIT_SETUP.sql, &[&(employees as i32), &vraag, &antwoord]).await?;
        c.batch_execute("ANALYZE").await?;
    }
    let script = write(dir, "pipeline-limit.pgbench", include_str!("../../sql/postgres/bench_pipeline_limit.pgbench"))?;
    let per_client = edits.div_ceil(clients as u64);
    let total = per_client * clients as u64;
    let employees_var = format!("employees={employees}");
    let hot_var = format!("hot={}", (employees / 10).max(1));
    settle().await;
    let (commits0, wal0) = reading(url).await?;
    let per_client = per_client.to_string();
    let tps = pgbench(url, &script, clients, &["-t", &per_client, "-D", &employees_var, "-D", &hot_var]).await?;
    settle().await;
    let (commits1, wal1) = reading(url).await?;
    let c = world::connect(url).await?;
    let v = c.query_one(stmt::PLIMIT_VERIFY.sql, &[]).await?;
    let (requests, answers, stale, made): (i64, i64, i64, i64) = (v.get(0), v.get(1), v.get(2), v.get(3));
    if requests != 0 || answers != 0 || stale != 0 || made != total as i64 {
        bail!(
            "the pipeline limit made {made} edits of {total} and left {requests} requests, {answers} answers and \
             {stale} keys without their latest result"
        );
    }
    let n = total as f64;
    super::progress(&format!("pipeline limit: {total} edits at {tps:.0}/s"));
    Ok(PipelineLimit {
        repetition,
        edits: total,
        clients,
        per_second: tps,
        commits_per_edit: (commits1 - commits0 - READING) as f64 / n,
        wal_bytes_per_edit: (wal1 - wal0) as f64 / n,
    })
}

/// The business limit: pgbench makes `edits` roster edits over the demo's roster of
/// `employees` (the pipeline's edits in their mix, half on a hot tenth) with `clients`
/// connections and durable commits, each edit what every queue must do
/// (`bench_business_limit.pgbench`): the edit, its Vraag built and logged by the roster's
/// own SQL, the engine's answer stored by the collector's own function. On a database of
/// its own with the broker and the roster installed, the demo's roster of this
/// repetition imported (its Vraags computed by the engine, one answer per key, and
/// stored, as the pipeline's import leaves its keys), then checks that every request was
/// answered and every key holds its latest version. With `Track::All`, a counting run:
/// the work per request of the edits is recorded.
#[allow(clippy::too_many_arguments)]
pub async fn business_limit(
    world: &World,
    employees: usize,
    edits: u64,
    clients: u32,
    repetition: usize,
    track: Track,
    dir: &Path,
) -> anyhow::Result<BusinessLimit> {
    let name = match track {
        Track::Top => format!("bench_business_limit_{repetition}"),
        Track::All => "bench_business_limit_count".to_owned(),
    };
    let url = world.cluster.create_database(&name).await?;
    crate::broker::postgres::install_with(&url, true).await.context("installing the broker and the roster schema")?;
    let imported = {
        let mut c = world::connect(&url).await?;
        c.batch_execute(BUSINESS_LIMIT_SQL).await.context("installing the business limit's send")?;
        crate::demo::roster::Roster::generate(employees, 2026 + repetition as u64, true)
            .load(&mut c)
            .await
            .context("importing the roster")?;
        answers(&c).await?;
        let stored: i64 = c.query_one(stmt::BLIMIT_STORE_IMPORT.sql, &[]).await?.get(0);
        c.batch_execute("VACUUM ANALYZE").await?;
        stored
    };
    let script = write(dir, "business-limit.pgbench", include_str!("../../sql/postgres/bench_business_limit.pgbench"))?;
    let per_client = edits.div_ceil(clients as u64);
    let total = per_client * clients as u64;
    let employees_var = format!("employees={employees}");
    let hot_var = format!("hot={}", (employees / 10).max(1));
    let counted = track == Track::All && super::runs::statements_track_all(&url).await?;
    let pgss = super::runs::statements_reset(&url).await?;
    settle().await;
    let (commits0, wal0) = reading(&url).await?;
    let per_client = per_client.to_string();
    let tps = pgbench(&url, &script, clients, &["-t", &per_client, "-D", &employees_var, "-D", &hot_var]).await?;
    settle().await;
    let (commits1, wal1) = reading(&url).await?;
    let c = world::connect(&url).await?;
    let v = c.query_one(stmt::BLIMIT_VERIFY.sql, &[]).await?;
    let (open, stale, logged): (i64, i64, i64) = (v.get(0), v.get(1), v.get(2));
    let requests = logged - imported;
    if open != 0 || stale != 0 || requests <= 0 {
        bail!(
            "the business limit sent {requests} requests in {total} edits and left {open} requests without an \
             answer and {stale} keys without their latest result"
        );
    }
    let n = requests as f64;
    let work = super::runs::statements_work(&url, pgss && counted, n).await?;
    // pgbench's rate is of the script's runs, edits that sent nothing included: the
    // requests over the same time.
    let per_second = n * tps / total as f64;
    let how = if counted { ", counting the work" } else { "" };
    super::progress(&format!("business limit: {requests} requests in {total} edits at {per_second:.0}/s{how}"));
    Ok(BusinessLimit {
        repetition,
        edits: total,
        requests: requests as u64,
        clients,
        per_second,
        commits_per_request: (commits1 - commits0 - READING) as f64 / n,
        wal_bytes_per_request: (wal1 - wal0) as f64 / n,
        work,
    })
}

/// The business limit's engine answers, one per key: each key's imported Vraag answered
/// by the calculation's own code (the engine the worker runs), the Antwoord decoded as
/// the collector decodes it into its store's arguments, a Fout into the reason the
/// collector records.
async fn answers(c: &tokio_postgres::Client) -> anyhow::Result<()> {
    let limits = crate::contract::Limits::default();
    let calculation =
        crate::handlers::calculation::Calculation::new(std::sync::Arc::new(crate::engine::Tables::built_in()?), limits);
    for row in c.query(stmt::BLIMIT_VRAGEN.sql, &[]).await? {
        let (dv, periode, vraag): (i32, i32, String) = (row.get(0), row.get(1), row.get(2));
        let a = Answer::of(&calculation, vraag.as_bytes(), &limits)?;
        c.execute(
            stmt::BLIMIT_ANTWOORD.sql,
            &[&dv, &periode, &a.kaart, &a.codes, &a.waarden, &a.rekenversie, &a.warnings, &a.fout, &a.repairable],
        )
        .await?;
    }
    Ok(())
}

/// One key's answer as the collector stores it: the store's arguments, or the Fout's
/// reason and whether it is the environment's.
#[derive(Default)]
struct Answer {
    kaart: Option<Vec<i32>>,
    codes: Option<Vec<String>>,
    waarden: Option<Vec<String>>,
    rekenversie: Option<String>,
    warnings: Option<String>,
    fout: Option<String>,
    repairable: Option<bool>,
}

impl Answer {
    fn of(
        calculation: &crate::handlers::calculation::Calculation,
        vraag: &[u8],
        limits: &crate::contract::Limits,
    ) -> anyhow::Result<Answer> {
        use crate::contract::{self, Reden, VERVANGEN};
        Ok(match calculation.answer(vraag) {
            Ok(xml) => {
                let a = contract::decode_antwoord(xml.as_bytes(), limits)?;
                // As the PostgreSQL collector passes them (crates/core/src/broker/postgres/mod.rs).
                let warnings: Vec<serde_json::Value> = a
                    .waarschuwingen
                    .iter()
                    .filter(|w| w.code != VERVANGEN)
                    .map(|w| serde_json::json!({"code": w.code.as_str(), "tekst": w.tekst.as_str()}))
                    .collect();
                Answer {
                    kaart: Some(a.mutaties.iter().map(|m| m.kaart_soort).collect()),
                    codes: Some(a.mutaties.iter().map(|m| m.loonfactor_code.clone()).collect()),
                    waarden: Some(a.mutaties.iter().map(|m| m.waarde.to_string()).collect()),
                    rekenversie: a.rekenversie,
                    warnings: (!warnings.is_empty()).then(|| serde_json::Value::Array(warnings).to_string()),
                    ..Answer::default()
                }
            }
            Err((fout, _)) => {
                // As the collector reads a Fout (crates/core/src/handlers/collector.rs).
                let f = contract::decode_fout(contract::encode_fout(&fout).as_bytes(), limits)?;
                Answer {
                    fout: Some(format!("{} ({}): {}", f.reden, f.error_number, f.error_message)),
                    repairable: Some(matches!(f.reden, Reden::Internal | Reden::NewerContract)),
                    ..Answer::default()
                }
            }
        })
    }
}

fn write(dir: &Path, name: &str, text: &str) -> anyhow::Result<PathBuf> {
    let p = dir.join(name);
    std::fs::write(&p, text)?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    #[test]
    fn pgbench_tps_is_read_from_its_report() {
        let out = "latency average = 1.2 ms\ninitial connection time = 3.1 ms\ntps = 6543.210987 (without initial connection time)\n";
        assert_eq!(super::parse_tps(out), Some(6543.210987));
        assert_eq!(super::parse_tps("no figures"), None);
    }
}
