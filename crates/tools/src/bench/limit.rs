//! The machine's limit and its calibration: pgbench doing the same commits and row
//! writes per message as sbworker.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use tokio::process::Command;

use super::pipeline::PipelineLimit;
use super::runs::{Measured, READING, Shape, fresh, reading, set_sync, settle};
use super::world::{self, World};
use super::{Contender, Workload, stmt};

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
