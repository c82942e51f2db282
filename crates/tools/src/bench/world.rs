//! The benchmark's world: one throwaway cluster with the same settings for every
//! contender (recorded in the report), a database per contender, and what the runs
//! measure besides time: commits and WAL per message (from the server's statistics)
//! and CPU and memory of processes (from `/proc`).

use std::collections::HashMap;

use anyhow::Context;
use tokio_postgres::Client;

use crate::pg_cluster::Cluster;

/// Server settings for every contender. Durable commits (fsync on) unlike the tests'
/// clusters; `synchronous_commit` is set per database and run.
pub const SETTINGS: [&str; 7] = [
    "fsync=on",
    "full_page_writes=on",
    "shared_buffers=256MB",
    "max_wal_size=4GB",
    "checkpoint_timeout=30min",
    "max_connections=200",
    "autovacuum=on",
];

/// Where the time goes: statement times (when the installation has pg_stat_statements;
/// the report says so when it has not). Top-level statements only for the contenders
/// compared side by side: tracking every nested statement costs each one time, which
/// would weigh on a contender made of PL/pgSQL (sbworker's broker) and not on one that
/// sends plain statements. The pipeline's database tracks nested statements too.
const STATEMENT_STATS: [&str; 2] = ["shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=top"];

pub struct World {
    pub cluster: Cluster,
}

impl World {
    pub fn start() -> anyhow::Result<World> {
        Self::start_with(&[])
    }

    /// A cluster with the bench's settings and `extra` (the split topology's servers:
    /// logical replication).
    pub fn start_with(extra: &[&str]) -> anyhow::Result<World> {
        let mut settings = SETTINGS.to_vec();
        settings.extend(extra);
        let lib = Cluster::program("postgres")?
            .parent()
            .and_then(|bin| bin.parent())
            .map(|root| root.join("lib/pg_stat_statements.so"));
        if lib.is_some_and(|l| l.exists()) {
            settings.extend(STATEMENT_STATS);
        }
        Ok(World { cluster: Cluster::start(&settings).context("starting the bench's PostgreSQL cluster")? })
    }

    /// A new database with `script` (and the broker, with `broker`) installed.
    pub async fn database(&self, name: &str, broker: bool, script: &str) -> anyhow::Result<String> {
        let url = self.cluster.create_database(name).await.with_context(|| format!("creating database {name}"))?;
        if broker {
            crate::broker::postgres::install_with(&url, false).await.context("installing the broker")?;
        }
        let c = connect(&url).await?;
        c.batch_execute(script).await.with_context(|| format!("installing the bench schema into {name}"))?;
        Ok(url)
    }

    /// The settings every contender runs with, as the server reports them.
    pub async fn settings(&self) -> anyhow::Result<Vec<(String, String)>> {
        let c = connect(&self.cluster.url("postgres")).await?;
        let rows = c
            .query(
                super::stmt::SETTINGS.sql,
                &[&vec![
                    "server_version",
                    "fsync",
                    "full_page_writes",
                    "synchronous_commit",
                    "wal_level",
                    "shared_buffers",
                    "max_wal_size",
                    "checkpoint_timeout",
                    "max_connections",
                    "autovacuum",
                    "wal_sync_method",
                ]],
            )
            .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// CPU ticks of each of the server's processes now.
    pub fn server_cpu(&self) -> HashMap<u32, u64> {
        let (postmaster, _) = self.cluster.pid_and_dir();
        let mut out = HashMap::new();
        let Ok(dir) = std::fs::read_dir("/proc") else { return out };
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            if let Some((ppid, ticks)) = stat(pid)
                && (ppid == postmaster || pid == postmaster)
            {
                out.insert(pid, ticks);
            }
        }
        out
    }
}

pub async fn connect(url: &str) -> anyhow::Result<Client> {
    let (c, conn) = crate::pg_tls::connect(url).await.with_context(|| format!("connecting to {url}"))?;
    tokio::spawn(conn);
    Ok(c)
}

/// Seconds of CPU the server spent between two [`World::server_cpu`] readings (processes
/// that ended in between are missed; the runs keep theirs until the end).
pub fn server_cpu_seconds(before: &HashMap<u32, u64>, after: &HashMap<u32, u64>) -> f64 {
    let ticks: u64 = after.iter().map(|(pid, t)| t.saturating_sub(*before.get(pid).unwrap_or(&0))).sum();
    ticks as f64 / ticks_per_second()
}

/// A process's parent and its CPU ticks (user + system) from `/proc/PID/stat`.
pub fn stat(pid: u32) -> Option<(u32, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields count from its end.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ppid = f.get(1)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((ppid, utime + stime))
}

/// A process's CPU seconds so far.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    stat(pid).map(|(_, t)| t as f64 / ticks_per_second())
}

/// A process's peak resident memory in MiB (VmHWM).
pub fn peak_rss_mib(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 =
        s.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb / 1024.0)
}

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// Commits and WAL bytes of a database so far.
pub async fn commits_and_wal(c: &Client) -> anyhow::Result<(i64, i64)> {
    // The statistics of other backends reach the shared counters within a second.
    let r = c.query_one(super::stmt::STATS.sql, &[]).await?;
    Ok((r.get(0), r.get(1)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let me = std::process::id();
        assert!(super::stat(me).is_some_and(|(ppid, _)| ppid > 0));
        assert!(super::peak_rss_mib(me).is_some_and(|m| m > 1.0));
    }
}
