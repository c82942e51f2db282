//! The peers, installed before anything is measured: graphile-worker with npm, River's
//! harness built with cargo, and their migrations.

use std::path::{Path, PathBuf};
use std::time::Instant;

use tokio::process::Command;

use super::Workload;
use super::peers::Peer;
use super::runs::{Measured, Progress, READING, Shape, drained, reading, run_to_end, settle, verify_headline};
use super::world::{self, World};

/// graphile-worker, installed with `npm ci` from its lock file into the harness cache
/// (once per lock file; see [`cache_dir`]); the folder, or the reason it cannot be had.
pub async fn install_graphile(out: &Path) -> Result<PathBuf, String> {
    let lock = include_str!("../../../../bench/graphile/package-lock.json");
    let files = [
        ("package.json", include_str!("../../../../bench/graphile/package.json")),
        ("package-lock.json", lock),
        ("headline.js", include_str!("../../../../bench/graphile/headline.js")),
    ];
    let home = cache_dir(out).join(cache_key("graphile", lock));
    write_changed(&home, &files)?;
    if home.join("node_modules/graphile-worker/package.json").exists() {
        super::progress(&format!("graphile-worker 0.17.3: cached in {}", home.display()));
        return Ok(home);
    }
    super::progress(&format!("installing graphile-worker 0.17.3 with npm into {} ...", home.display()));
    // Installed beside the cache entry and moved in whole, so that an interrupted install
    // is never taken for a finished one.
    let partial = home.with_extension(format!("partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    write_changed(&partial, &files)?;
    let out = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&partial)
        .output()
        .await
        .map_err(|e| format!("npm: {e}"))?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&partial);
        return Err(format!("npm ci failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let moved = std::fs::rename(partial.join("node_modules"), home.join("node_modules"));
    let _ = std::fs::remove_dir_all(&partial);
    match moved {
        // Another run may have finished the same install first: its copy is as good.
        Err(e) if !home.join("node_modules/graphile-worker/package.json").exists() => {
            Err(format!("moving graphile-worker into {} failed: {e}", home.display()))
        }
        _ => Ok(home),
    }
}

/// Where the peers' harnesses are built and kept between runs: `SBWORKER_BENCH_CACHE`,
/// else `$XDG_CACHE_HOME/sbworker/bench`, else `~/.cache/sbworker/bench`; the output
/// folder's `work/` when none of them is set.
pub fn cache_dir(out: &Path) -> PathBuf {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("SBWORKER_BENCH_CACHE")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("sbworker/bench")))
        .or_else(|| var("HOME").map(|d| d.join(".cache/sbworker/bench")))
        .unwrap_or_else(|| out.to_path_buf())
}

/// A cache entry's name: the harness and the first 16 hex digits of the SHA-256 of its
/// lock file (for cargo's harnesses, with the manifest), so that a changed lock file
/// builds anew beside the old entry.
fn cache_key(name: &str, lock: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(lock.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("{name}-{hex}")
}

/// Writes `files` (path, text) under `home`, each only when its text changed, so that
/// cargo and npm see an unchanged project as built.
fn write_changed(home: &Path, files: &[(&str, &str)]) -> Result<(), String> {
    for (file, text) in files {
        let path = home.join(file);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(*text) {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
            }
            std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
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

/// River's harness (`bench/river`, its own Cargo project, with this repository's
/// `sbworker-core` for the pipeline's engine), built with cargo in the harness cache
/// before anything is measured (a no-op when it is current: cargo rebuilds the core
/// crate there when it changed); the binary, or the reason it cannot be had.
pub async fn install_river(out: &Path) -> Result<PathBuf, String> {
    // The pipeline's workers run sbworker's engine: the harness depends on this
    // repository's core crate, by its absolute path once the harness is copied away.
    let manifest = include_str!("../../../../bench/river/Cargo.toml").replace(
        "path = \"../../crates/core\"",
        &format!("path = {:?}", concat!(env!("CARGO_MANIFEST_DIR"), "/../core")),
    );
    let files = [
        ("Cargo.toml", manifest.as_str()),
        ("Cargo.lock", include_str!("../../../../bench/river/Cargo.lock")),
        ("src/main.rs", include_str!("../../../../bench/river/src/main.rs")),
    ];
    build_harness(out, "river", &files, "river-bench", "River's harness (riverqueue 0.5)").await
}

/// pgmq's harness (`bench/pgmq`, its own Cargo project), built as River's is.
pub async fn install_pgmq(out: &Path) -> Result<PathBuf, String> {
    let files = [
        ("Cargo.toml", include_str!("../../../../bench/pgmq/Cargo.toml")),
        ("Cargo.lock", include_str!("../../../../bench/pgmq/Cargo.lock")),
        ("src/main.rs", include_str!("../../../../bench/pgmq/src/main.rs")),
    ];
    build_harness(out, "pgmq", &files, "pgmq-bench", "pgmq's harness (pgmq 0.33.7, its SQL 1.11)").await
}

/// A peer's harness (a Cargo project of its own, `files` by path, `Cargo.toml` and
/// `Cargo.lock` among them) written into its cache entry (named for both) and built
/// there with cargo (a no-op when it is current: cargo's own lock keeps two runs from
/// building it at once); the binary `bin`, or the reason it cannot be had.
async fn build_harness(
    out: &Path,
    name: &str,
    files: &[(&str, &str)],
    bin: &str,
    what: &str,
) -> Result<PathBuf, String> {
    // Keyed by the manifest too: River's names the core crate by its absolute path, so
    // two checkouts never share (and rebuild under each other) one entry.
    let file = |name: &str| files.iter().find(|(f, _)| *f == name).map_or("", |(_, t)| *t);
    let home = cache_dir(out).join(cache_key(name, &format!("{}\n{}", file("Cargo.lock"), file("Cargo.toml"))));
    write_changed(&home, files)?;
    let binary = home.join("target/release").join(bin);
    super::progress(&if binary.exists() {
        format!("{what}: cached in {}, checking it is current ...", home.display())
    } else {
        format!("building {what} with cargo in {}; the first build takes minutes ...", home.display())
    });
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
    Ok(binary)
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

#[cfg(test)]
mod tests {
    /// A cache entry is named for its harness and its lock file: another lock file is
    /// another entry, the same one the same.
    #[test]
    fn cache_entries_are_keyed_by_their_lock_files() {
        let a = super::cache_key("river", "lock a");
        assert_eq!(a, super::cache_key("river", "lock a"));
        assert_ne!(a, super::cache_key("river", "lock b"));
        assert_ne!(a, super::cache_key("pgmq", "lock a"));
        let hex = a.strip_prefix("river-").expect("the harness's name first");
        assert_eq!(hex.len(), 16);
        assert!(hex.chars().all(|c| c.is_ascii_hexdigit()), "{a}");
    }
}
