//! The peers, installed before anything is measured: graphile-worker with npm, River's
//! harness built with cargo, and their migrations.

use std::path::{Path, PathBuf};
use std::time::Instant;

use tokio::process::Command;

use super::Workload;
use super::peers::Peer;
use super::runs::*;
use super::world::{self, World};

/// graphile-worker, installed with npm into `dir/graphile` (once, before anything is
/// measured); `None` with the reason when it cannot be.
pub async fn install_graphile(dir: &Path) -> Result<PathBuf, String> {
    let home = dir.join("graphile");
    std::fs::create_dir_all(&home).map_err(|e| e.to_string())?;
    std::fs::write(home.join("package.json"), include_str!("../../../../bench/graphile/package.json"))
        .map_err(|e| e.to_string())?;
    std::fs::write(home.join("headline.js"), include_str!("../../../../bench/graphile/headline.js"))
        .map_err(|e| e.to_string())?;
    if home.join("node_modules/graphile-worker").exists() {
        return Ok(home);
    }
    super::progress("installing graphile-worker 0.17.3 with npm ...");
    let out = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&home)
        .output()
        .await
        .map_err(|e| format!("npm: {e}"))?;
    if !out.status.success() {
        return Err(format!("npm install failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(home)
}

/// A node-postgres URL for the cluster's database `db`.
pub(super) fn node_url(world: &World, db: &str) -> String {
    format!("postgres://postgres@127.0.0.1:{}/{db}", world.cluster.port())
}

/// graphile-worker's schema in `db` (its own migration).
pub async fn migrate_graphile(world: &World, db: &str, home: &Path) -> anyhow::Result<()> {
    run_to_end(
        Command::new("node").arg(home.join("headline.js")).args(["migrate", &node_url(world, db)]),
        "graphile-worker's migration",
    )
    .await
}

/// River's harness (`bench/river`, its own Cargo project), built with cargo into
/// `dir/river` once, before anything is measured (a no-op when it is current); the
/// binary, or the reason it cannot be had.
pub async fn install_river(dir: &Path) -> Result<PathBuf, String> {
    let files = [
        ("Cargo.toml", include_str!("../../../../bench/river/Cargo.toml")),
        ("Cargo.lock", include_str!("../../../../bench/river/Cargo.lock")),
        ("src/main.rs", include_str!("../../../../bench/river/src/main.rs")),
    ];
    build_harness(dir, "river", &files, "river-bench", "River's harness (riverqueue 0.5)").await
}

/// pgmq's harness (`bench/pgmq`, its own Cargo project), built as River's is.
pub async fn install_pgmq(dir: &Path) -> Result<PathBuf, String> {
    let files = [
        ("Cargo.toml", include_str!("../../../../bench/pgmq/Cargo.toml")),
        ("Cargo.lock", include_str!("../../../../bench/pgmq/Cargo.lock")),
        ("src/main.rs", include_str!("../../../../bench/pgmq/src/main.rs")),
    ];
    build_harness(dir, "pgmq", &files, "pgmq-bench", "pgmq's harness (pgmq 0.33.7, its SQL 1.11)").await
}

/// A peer's harness (a Cargo project of its own, `files` by path) written into
/// `dir/name` and built there with cargo (a no-op when it is current); the binary `bin`,
/// or the reason it cannot be had.
async fn build_harness(
    dir: &Path,
    name: &str,
    files: &[(&str, &str)],
    bin: &str,
    what: &str,
) -> Result<PathBuf, String> {
    let home = dir.join(name);
    std::fs::create_dir_all(home.join("src")).map_err(|e| e.to_string())?;
    for (file, text) in files {
        // Rewritten only when changed, so that cargo sees an unchanged project as built.
        if std::fs::read_to_string(home.join(file)).ok().as_deref() != Some(*text) {
            std::fs::write(home.join(file), text).map_err(|e| e.to_string())?;
        }
    }
    super::progress(&format!("building {what} with cargo; the first build takes minutes ..."));
    let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["build", "--release", "--locked", "--quiet"])
        .current_dir(&home)
        .env("CARGO_TARGET_DIR", home.join("target"))
        .output()
        .await
        .map_err(|e| format!("cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!("cargo build failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(home.join("target/release").join(bin))
}

/// pgmq's SQL and the queue in `db` (installed by the pgmq crate, no extension).
pub async fn migrate_pgmq(world: &World, db: &str, bin: &Path) -> anyhow::Result<()> {
    run_to_end(Command::new(bin).args(["migrate", &node_url(world, db)]), "pgmq's install").await
}

/// River's schema in `db` (its own migrations).
pub async fn migrate_river(world: &World, db: &str, bin: &Path) -> anyhow::Result<()> {
    run_to_end(Command::new(bin).args(["migrate", &node_url(world, db)]), "River's migration").await
}

/// One headline run of a peer: its jobs preloaded, its worker started (working until
/// SIGTERM), the drain timed by replies, order and exactly once verified.
pub async fn peer(
    world: &World,
    peer: &Peer,
    shape: Shape,
    sync: bool,
    repetition: usize,
    dir: &Path,
) -> anyhow::Result<Measured> {
    let (contender, url) = (peer.contender, peer.url.as_str());
    let (concurrency, pool) = peer.concurrency(shape);
    peer.load(world, shape, sync).await?;
    let tag = format!("headline-{}-{}-{repetition}", contender.key(), if sync { "sync" } else { "async" });
    let pgss = super::runs::statements_reset(url).await?;
    settle().await;
    let (commits0, wal0) = reading(url).await?;
    let server0 = world.server_cpu();
    let started = Instant::now();
    let worker = peer.start(shape, &dir.join(format!("{tag}.log")))?;
    let total = shape.messages() as i64;
    let c = world::connect(url).await?;
    let polls = drained(&c, &tag, total, started, Progress::Replies).await?;
    let seconds = started.elapsed().as_secs_f64();
    let worker_cpu = world::cpu_seconds(worker.pid());
    let rss = world::peak_rss_mib(worker.pid());
    let server1 = world.server_cpu();
    worker.terminate().await?;
    drop(c);
    settle().await;
    let (commits1, wal1) = reading(url).await?;
    let n = total as f64;
    let statements = super::runs::statements_top(url, pgss, n).await?;
    let c = world::connect(url).await?;
    let (ooo, once) = verify_headline(&c, shape).await?;
    super::progress(&format!("{tag}: {total} messages in {seconds:.2} s"));
    Ok(Measured {
        workload: Workload::Headline,
        contender,
        synchronous_commit: sync,
        repetition,
        messages: total as u64,
        seconds,
        per_second: n / seconds,
        commits_per_message: (commits1 - commits0 - READING - polls) as f64 / n,
        wal_bytes_per_message: (wal1 - wal0) as f64 / n,
        worker_cpu_per_1000: worker_cpu.map(|s| s * 1000.0 / n),
        emulator_cpu_per_1000: None,
        postgres_cpu_per_1000: world::server_cpu_seconds(&server0, &server1) * 1000.0 / n,
        worker_peak_rss_mib: rss,
        readers: concurrency,
        connections: pool,
        out_of_order: Some(ooo),
        exactly_once: Some(once),
        statements,
    })
}
