//! The peers, graphile-worker, River and pgmq, in every workload they take part in: how each
//! gets its jobs (preloaded, or sent at planned times for the open loop), how it is
//! started, how poison is marked in its jobs and where its dead letters are read. The
//! runs themselves ([`super::runs`], [`super::poison`]) are the same for every contender.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use anyhow::Context;
use tokio::process::Command;

use super::runs::{self, Process, Shape};
use super::world::{self, World};
use super::{Contender, stmt};

/// A peer ready to run: installed, its database made and migrated.
#[derive(Debug, Clone)]
pub struct Peer {
    pub contender: Contender,
    pub db: &'static str,
    /// The bench's own connection string for the peer's database.
    pub url: String,
    /// The peer's connection string (node-postgres and sqlx both read it).
    pub peer_url: String,
    /// graphile-worker's folder, or River's harness binary.
    pub home: PathBuf,
}

/// The connection pool every peer runs on: the bench's budget of 8.
pub(super) const POOL: u32 = 8;
/// graphile-worker's local queue, in jobs, for the contender that has one.
const LOCAL_QUEUE: u32 = 50;

impl Peer {
    /// `contender`'s peer, from the installed peers (`None` when it was left out).
    pub fn of(
        w: &World,
        contender: Contender,
        graphile: &Result<(PathBuf, String), String>,
        river: &Result<(PathBuf, String), String>,
        pgmq: &Result<(PathBuf, String), String>,
    ) -> Option<Peer> {
        let (db, (home, url)) = match contender {
            Contender::Graphile | Contender::GraphileLocalQueue => ("bench_graphile", graphile.as_ref().ok()?),
            Contender::River | Contender::RiverPerGroup => ("bench_river", river.as_ref().ok()?),
            Contender::Pgmq => ("bench_pgmq", pgmq.as_ref().ok()?),
            _ => return None,
        };
        Some(Peer { contender, db, url: url.clone(), peer_url: runs::node_url(w, db), home: home.clone() })
    }

    fn is_graphile(&self) -> bool {
        matches!(self.contender, Contender::Graphile | Contender::GraphileLocalQueue)
    }

    /// River's mode: a queue per group, or one queue.
    fn river_mode(&self) -> &'static str {
        if self.contender == Contender::RiverPerGroup { "per-group" } else { "one" }
    }

    fn is_pgmq(&self) -> bool {
        self.contender == Contender::Pgmq
    }

    /// One of the peer's own statements: the graphile-worker one, the River one or the
    /// pgmq one.
    pub fn pick(&self, graphile: crate::sql::Named, river: crate::sql::Named, pgmq: crate::sql::Named) -> &'static str {
        if self.is_graphile() {
            graphile.sql
        } else if self.is_pgmq() {
            pgmq.sql
        } else {
            river.sql
        }
    }

    /// The harness's arguments after the counts: River's mode (pgmq has none).
    fn mode_args(&self) -> Vec<String> {
        if self.is_pgmq() { Vec::new() } else { vec![self.river_mode().to_owned()] }
    }

    /// The peer's tables emptied and vacuumed, `synchronous_commit` set; a connection.
    pub(super) async fn fresh(&self, w: &World, sync: bool) -> anyhow::Result<tokio_postgres::Client> {
        let reset = self.pick(stmt::GRAPHILE_RESET, stmt::RIVER_RESET, stmt::PGMQ_RESET);
        runs::fresh(w, self.db, &self.url, reset, sync).await
    }

    /// A fresh world with `shape`'s jobs preloaded, in order, and the groups' rows.
    pub(super) async fn load(&self, w: &World, shape: Shape, sync: bool) -> anyhow::Result<tokio_postgres::Client> {
        let c = self.fresh(w, sync).await?;
        if self.is_graphile() {
            c.execute(stmt::GRAPHILE_PRELOAD.sql, &[&shape.groups, &shape.per_group]).await.context("adding jobs")?;
        } else {
            runs::run_to_end(
                Command::new(&self.home)
                    .args(["preload", &self.peer_url, &shape.groups.to_string(), &shape.per_group.to_string()])
                    .args(self.mode_args()),
                "the peer's preload",
            )
            .await?;
        }
        Ok(c)
    }

    /// Jobs that can run at once and connections: graphile-worker's concurrency (the
    /// readers sbworker runs), River's queue's workers, or one per group's queue.
    pub fn concurrency(&self, shape: Shape) -> (u32, u32) {
        match self.contender {
            Contender::RiverPerGroup => (shape.groups as u32, POOL),
            _ => (shape.readers, POOL),
        }
    }

    /// The peer's worker, working until SIGTERM, its log to `log`.
    pub(super) fn start(&self, shape: Shape, log: &Path) -> anyhow::Result<Process> {
        let mut command = if self.is_graphile() {
            let local = if self.contender == Contender::GraphileLocalQueue { LOCAL_QUEUE } else { 0 };
            let mut c = Command::new("node");
            c.arg(self.home.join("headline.js")).args([
                self.peer_url.clone(),
                shape.readers.to_string(),
                POOL.to_string(),
                local.to_string(),
            ]);
            c
        } else if self.is_pgmq() {
            let mut c = Command::new(&self.home);
            c.args(["work", &self.peer_url, &shape.readers.to_string(), &POOL.to_string()]);
            c
        } else {
            let mut c = Command::new(&self.home);
            c.args([
                "work",
                &self.peer_url,
                &shape.readers.to_string(),
                &POOL.to_string(),
                self.river_mode(),
                &shape.groups.to_string(),
            ]);
            c
        };
        let child = command
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log)?)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.contender.label()))?;
        Ok(Process::new(child))
    }

    /// The open loop's sends to the peer: `total` jobs at `rate` per second by plan,
    /// over `groups` groups, from `start_unix` on.
    pub(super) async fn send_by_plan(&self, rate: u32, total: u64, start_unix: f64, groups: i32) -> anyhow::Result<()> {
        if !self.is_graphile() {
            // River's own client inserts (and notifies its workers), pgmq's harness sends
            // with pgmq.send: the harness sends.
            return runs::run_to_end(
                Command::new(&self.home)
                    .args([
                        "send",
                        &self.peer_url,
                        &rate.to_string(),
                        &total.to_string(),
                        &format!("{start_unix:.6}"),
                        &groups.to_string(),
                    ])
                    .args(self.mode_args()),
                "the peer's open-loop sender",
            )
            .await;
        }
        let c = world::connect(&self.url).await?;
        let conversations: Vec<uuid::Uuid> =
            c.query(stmt::GROUP_CONVERSATIONS.sql, &[&groups]).await?.iter().map(|r| r.get(0)).collect();
        runs::send_by_plan(&self.url, runs::Sends::Graphile(Arc::new(conversations)), rate, total, start_unix).await
    }
}
