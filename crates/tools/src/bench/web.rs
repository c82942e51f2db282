//! The web page at size (`--parts web`): a database of 100,000 keys (10,000 with
//! `--quick`) with their results and two requests each in the calculation log, and
//! 10,000 dead letters (1,000), written directly (`web_world`); the page served
//! in-process on a loopback port, as `sbworker web` serves it; every page asked over
//! real TCP, a few times to warm up and then `ROUNDS` times, one at a time; the median
//! and the 95th percentile per page, set against `LIMIT_MS` in the report.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::stmt;
use super::world::{World, connect};
use crate::config::{BrokerConfig, BrokerKind};
use crate::ops::page::{Site, router, signin::Sessions};
use crate::ops::status::Thresholds;

/// What a page may take at this size (the median), in ms.
pub const LIMIT_MS: f64 = 250.0;
/// Requests per page after the warm-up.
const ROUNDS: usize = 20;
const WARM_UP: usize = 3;

/// One page's times.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PageTimes {
    pub page: String,
    pub path: String,
    pub keys: usize,
    pub letters: usize,
    pub median_ms: f64,
    pub p95_ms: f64,
}

/// One GET over a fresh connection (`Connection: close`): its status and time.
async fn get(port: u16, path: &str) -> anyhow::Result<(u16, Duration)> {
    let start = Instant::now();
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await?;
    let took = start.elapsed();
    let status = std::str::from_utf8(answer.get(9..12).unwrap_or_default())
        .ok()
        .and_then(|t| t.parse().ok())
        .with_context(|| format!("{path}: no HTTP status"))?;
    Ok((status, took))
}

/// Builds the world, serves the page, times every page; one row per page.
pub async fn measure(w: &World, keys: usize, letters: usize) -> anyhow::Result<Vec<PageTimes>> {
    let url = w.cluster.create_database("bench_web").await.context("creating the web page's database")?;
    crate::broker::postgres::install_with(&url, true).await.context("installing the broker and the roster")?;
    let c = connect(&url).await?;
    let (k, l) = (keys as i32, letters as i32);
    c.execute(stmt::WEB_WORLD.sql, &[&k, &l]).await.context("writing the keys and the dead letters")?;
    c.batch_execute(stmt::WEB_ANALYZE.sql).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let at = listener.local_addr()?;
    let site = Arc::new(Site {
        broker: BrokerConfig { kind: BrokerKind::Postgres, connection: url.clone() },
        db: tokio::sync::Mutex::new(None),
        thresholds: Thresholds { worker_silent_seconds: None, stale_minutes: 60 },
        recent_minutes: 10,
        refresh_seconds: 3600,
        hosts: Site::hosts_for(at),
        loopback: true,
        actions: false,
        sessions: Sessions::default(),
        tables: crate::engine::Tables::built_in()?,
    });
    let port = at.port();
    let (stop_tx, stop) = crate::shutdown::Stop::new();
    let served = tokio::spawn(crate::worker::http::serve_router(
        listener,
        router(site),
        crate::ops::page::CONNECTION_LIMIT,
        stop,
    ));
    let last_letter: i64 = c.query_one("SELECT max(id) FROM sbworker.dead_letter", &[]).await?.get(0);
    let middle = keys / 2 + 1;
    let pages = [
        ("overview (with the plots)", "/".to_owned()),
        ("dead letters, first page", "/letters".to_owned()),
        ("dead letters, a page deep in the list", format!("/letters?upto={}", last_letter / 2)),
        ("dead letters, a filter on the reason", "/letters?reason=deadlock&replayed=no".to_owned()),
        ("one dead letter", format!("/letters/{}", last_letter / 2)),
        ("keys, first page", "/sleutels".to_owned()),
        ("keys, one dienstverband", format!("/sleutels?dienstverband={middle}")),
        ("keys, in Fout", "/sleutels?staat=fout".to_owned()),
        ("keys, waiting, a page deep", format!("/sleutels?staat=wacht&na_dv={middle}&na_periode=0")),
        ("one key (its log read whole)", format!("/sleutel?dienstverband={middle}&periode=202601")),
        ("runs and exports", "/runs".to_owned()),
        ("the action log", "/actions".to_owned()),
    ];
    let mut out = Vec::new();
    for (page, path) in pages {
        let mut times = Vec::with_capacity(ROUNDS);
        for round in 0..WARM_UP + ROUNDS {
            let (status, took) = get(port, &path).await?;
            // A key with no stored version answers 404, with its log.
            anyhow::ensure!(status == 200 || (status == 404 && path.starts_with("/sleutel?")), "{path}: HTTP {status}");
            if round >= WARM_UP {
                times.push(took.as_secs_f64() * 1000.0);
            }
        }
        times.sort_by(f64::total_cmp);
        let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
        out.push(PageTimes { page: page.to_owned(), path, keys, letters, median_ms: at(0.5), p95_ms: at(0.95) });
    }
    let _ = stop_tx.send(true);
    let _ = served.await;
    Ok(out)
}
