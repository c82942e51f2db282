//! `sbworker status` and `sbworker dead-letter`: connect as the configuration says, ask
//! the broker ([`crate::ops`]), print.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

use crate::broker::Database as Db;
use crate::cli::args::{DeadLetterAction, ThresholdFlags};
use crate::config::Config;
use crate::ops::status::{self, Status, Thresholds};
use crate::ops::{Backend as _, dead_letter};

/// Exit status when the broker could not be asked (sysexits' EX_UNAVAILABLE; 2 is clap's
/// for bad arguments).
pub const EXIT_UNREACHABLE: u8 = 69;

pub struct StatusOptions {
    pub json: bool,
    pub watch: Option<u64>,
    pub thresholds: ThresholdFlags,
}

fn fail(e: anyhow::Error) -> ExitCode {
    eprintln!("sbworker: {e:#}");
    ExitCode::from(EXIT_UNREACHABLE)
}

/// One status; its text (or JSON) and whether it needs attention.
async fn one_status(db: &mut Db, o: &StatusOptions, t: Thresholds, colour: bool) -> anyhow::Result<(String, bool)> {
    let text = db
        .status_json(o.thresholds.recent_minutes, o.thresholds.stale_minutes)
        .await
        .context("asking the broker for its status (the login needs the housekeeping role)")?;
    let s: Status = serde_json::from_str(&text).context("the broker's status document")?;
    let attention = status::attention(&s, t);
    let needs = !attention.is_empty();
    let out = if o.json {
        // The broker's document as it came (a field it adds is kept), with what needs
        // attention.
        let mut doc: serde_json::Value = serde_json::from_str(&text)?;
        doc["attention"] = serde_json::json!(attention);
        serde_json::to_string_pretty(&doc)? + "\n"
    } else {
        status::render(&s, t, colour)
    };
    Ok((out, needs))
}

pub fn status(config: &Config, o: StatusOptions) -> ExitCode {
    // (The configuration gives the broker; each worker's own heartbeat interval, in its
    // heartbeat, says when it counts as silent.)
    let t = o.thresholds.thresholds();
    let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    on_database(config, async |db| {
        loop {
            let (out, needs) = match one_status(db, &o, t, colour).await {
                Ok(x) => x,
                Err(e) => return fail(e),
            };
            let mut stdout = std::io::stdout().lock();
            if o.watch.is_some() && colour {
                // Clear the screen and go home, as watch(1) does.
                let _ = write!(stdout, "\x1b[2J\x1b[H");
            }
            let _ = stdout.write_all(out.as_bytes());
            let _ = stdout.flush();
            drop(stdout);
            match o.watch {
                None => return if needs { ExitCode::FAILURE } else { ExitCode::SUCCESS },
                Some(secs) => {
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(secs.max(1))) => {}
                        _ = tokio::signal::ctrl_c() => return if needs { ExitCode::FAILURE } else { ExitCode::SUCCESS },
                    }
                }
            }
        }
    })
}

/// Who replays: the login of the operating system user, as the entry records it.
fn operator() -> String {
    let user = std::env::var("SUDO_USER").or_else(|_| std::env::var("USER")).unwrap_or_else(|_| "unknown".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_owned()).unwrap_or_default();
    if host.is_empty() { user } else { format!("{user}@{host}") }
}

/// A time as the broker takes it: a date is its midnight UTC.
fn time_arg(s: &str) -> anyhow::Result<String> {
    if let Ok(d) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(format!("{d}T00:00:00.000Z"));
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&chrono::Utc).to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .map_err(|_| anyhow::anyhow!("'{s}' is not a date (2026-12-01) or a time (2026-12-01T08:00:00Z)"))
}

pub fn dead_letters(config: &Config, action: DeadLetterAction) -> ExitCode {
    on_database(config, async |db| match run_action(db, action).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => fail(e),
    })
}

/// Runs `job` against the configuration's broker on a runtime of its own; exit status
/// 69 when the broker cannot be reached.
fn on_database(config: &Config, job: impl AsyncFnOnce(&mut Db) -> ExitCode) -> ExitCode {
    let rt = match super::runtime::runtime(false) {
        Ok(rt) => rt,
        Err(e) => return fail(e),
    };
    rt.block_on(async {
        match Db::connect(&config.broker, None).await {
            Ok(mut db) => job(&mut db).await,
            Err(e) => fail(e.into()),
        }
    })
}

/// Ok(false): done, but something asked for could not be (said on stderr).
async fn run_action(db: &mut Db, action: DeadLetterAction) -> anyhow::Result<bool> {
    let mut out = std::io::stdout().lock();
    match action {
        DeadLetterAction::List { since, limit, json } => {
            let since = since.as_deref().map(time_arg).transpose()?;
            let letters = db.dead_letters(since.as_deref(), limit).await.context("listing the dead letters")?;
            if json {
                for l in &letters {
                    let mut v = serde_json::to_value(l)?;
                    v["key"] = serde_json::Value::String(dead_letter::key_text(l));
                    writeln!(out, "{v}")?;
                }
            } else {
                writeln!(
                    out,
                    "{:>6}  {:<28}  {:<16}  {:>8}  {:<24}  REASON",
                    "ID", "QUEUE", "KEY", "ATTEMPTS", "WHEN"
                )?;
                for l in &letters {
                    let replayed = if l.replays > 0 { format!(" [replayed {}×]", l.replays) } else { String::new() };
                    writeln!(
                        out,
                        "{:>6}  {:<28}  {:<16}  {:>8}  {:<24}  {}{replayed}",
                        l.id,
                        l.queue,
                        dead_letter::key_text(l),
                        l.attempts,
                        l.dead_lettered_at,
                        l.reason.lines().next().unwrap_or("")
                    )?;
                }
                writeln!(out, "{} dead letters", letters.len())?;
            }
            Ok(true)
        }
        DeadLetterAction::Show { id } => {
            let Some(l) = db.dead_letter(id).await.context("reading the dead letter")? else {
                eprintln!("sbworker: dead letter {id} does not exist");
                return Ok(false);
            };
            writeln!(out, "id:            {}", l.id)?;
            writeln!(out, "queue:         {}", l.queue)?;
            writeln!(out, "service:       {} (sent by {})", l.service, l.far_service.as_deref().unwrap_or("unknown"))?;
            writeln!(out, "message type:  {}", l.message_type)?;
            writeln!(out, "key:           {}", dead_letter::key_text(&l))?;
            writeln!(out, "attempts:      {}", l.attempts)?;
            writeln!(out, "diverted at:   {}", l.dead_lettered_at)?;
            if l.replays > 0 {
                writeln!(
                    out,
                    "replayed:      {}× , last at {} by {} on dialog {}",
                    l.replays,
                    l.replayed_at.as_deref().unwrap_or("-"),
                    l.replayed_by.as_deref().unwrap_or("-"),
                    l.replay_handle.map_or("-".into(), |h| h.to_string())
                )?;
            }
            writeln!(out, "reason:\n  {}", l.reason.replace('\n', "\n  "))?;
            match &l.body {
                Some(b) => writeln!(out, "body ({} bytes):\n{}", b.len(), dead_letter::pretty(b))?,
                None => writeln!(out, "body: none")?,
            }
            Ok(true)
        }
        DeadLetterAction::Replay { ids, all, since, roster } => {
            let roster = match roster {
                Some(url) => {
                    let masked = crate::config::mask_secrets(&url);
                    let (client, conn) = crate::pg_tls::connect(&url)
                        .await
                        .with_context(|| format!("cannot connect to the roster side at {masked}"))?;
                    tokio::spawn(conn);
                    Some(client)
                }
                None => None,
            };
            let ids: Vec<i64> = if all {
                let since = since.as_deref().map(time_arg).transpose()?;
                let mut all = db.dead_letters(since.as_deref(), i32::MAX).await.context("listing the dead letters")?;
                all.retain(|l| l.replays == 0);
                all.sort_by_key(|l| l.id);
                all.into_iter().map(|l| l.id).collect()
            } else {
                ids
            };
            let by = operator();
            let (mut ok, mut sent, mut skipped) = (true, 0, 0);
            for id in ids {
                let letter = match db.dead_letter(id).await.context("reading the dead letter")? {
                    Some(l) => l,
                    None => {
                        eprintln!("sbworker: dead letter {id} does not exist");
                        ok = false;
                        continue;
                    }
                };
                // With --all, an entry another run replayed meanwhile is left alone, and so
                // is one that is not a request (an answer set aside on the data side: a
                // stale key is sent again by the sweep).
                let replayed = match &roster {
                    Some(r) => crate::ops::replay_via_roster(db, r, id, &by, all).await,
                    None => db.replay(id, &by, all).await,
                };
                match replayed {
                    Ok(Some(handle)) => {
                        sent += 1;
                        writeln!(
                            out,
                            "dead letter {id} ({}) sent again on dialog {handle}",
                            dead_letter::key_text(&letter)
                        )?
                    }
                    Ok(None) => {
                        skipped += 1;
                        writeln!(out, "dead letter {id}: replayed meanwhile by another run; left alone")?
                    }
                    Err(e) if all && e.message.contains("only requests can be sent again") => {
                        skipped += 1;
                        writeln!(out, "dead letter {id}: not a request; left alone ({})", e.message)?
                    }
                    Err(e) => {
                        eprintln!("sbworker: dead letter {id} was not sent again: {e}");
                        ok = false;
                    }
                }
            }
            if all {
                writeln!(out, "replayed {sent} dead letters, left {skipped} alone")?;
            }
            Ok(ok)
        }
        DeadLetterAction::Purge { before, batch } => {
            let before = time_arg(&before)?;
            anyhow::ensure!(batch > 0, "--batch must be at least 1");
            let mut total = 0i64;
            loop {
                let n = db.purge_batch(&before, batch).await.context("purging dead letters")?;
                if n == 0 {
                    break;
                }
                total += n;
                tracing::info!(deleted = n, total, before = %before, "dead letters purged");
                writeln!(out, "deleted {n} dead letters diverted before {before} ({total} so far)")?;
            }
            writeln!(out, "purged {total} dead letters diverted before {before}")?;
            Ok(true)
        }
    }
}

/// `sbworker status`.
pub fn main_status(a: crate::cli::args::StatusArgs) -> super::Outcome {
    let config = match a.flags.load(super::run::HANDLERS) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    let o = StatusOptions { json: a.json, watch: a.watch, thresholds: a.thresholds };
    Ok(status(&config, o))
}

/// `sbworker dead-letter`.
pub fn main_dead_letter(a: crate::cli::args::DeadLetterArgs) -> super::Outcome {
    let config = match a.flags.load(super::run::HANDLERS) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    Ok(dead_letters(&config, a.action))
}

/// `sbworker web`: the page, until SIGINT or SIGTERM.
pub fn main_web(a: crate::cli::args::WebArgs) -> super::Outcome {
    // The page serves plain HTTP: with actions on, passwords and session cookies must
    // not cross a network.
    if a.actions && !a.listen.ip().is_loopback() {
        return Err(super::Failure::usage(anyhow::anyhow!(
            "--actions needs a loopback --listen address (127.0.0.1 or [::1]): the page serves plain HTTP, and with \
             actions on it carries passwords and session cookies; reach it from elsewhere through an SSH tunnel"
        )));
    }
    if let Some(h) =
        a.hosts.iter().find(|h| h.rsplit_once(':').is_none_or(|(n, p)| n.is_empty() || p.parse::<u16>().is_err()))
    {
        return Err(super::Failure::usage(anyhow::anyhow!(
            "--host {h}: give NAME:PORT as the browser writes it in the address (payroll-box:8080)"
        )));
    }
    if a.listen.ip().is_unspecified() && a.hosts.is_empty() {
        return Err(super::Failure::usage(anyhow::anyhow!(
            "--listen {} answers on every address: name the Host values the page is reached by with --host \
             NAME:PORT (every other Host is refused, against DNS rebinding)",
            a.listen
        )));
    }
    let config = match a.flags.load(super::run::HANDLERS) {
        Ok(c) => c,
        Err(code) => return Ok(code),
    };
    // The page's log (sign-ins, actions, refusals) as the worker's: `[log]`, to stderr.
    super::runtime::logging(
        super::runtime::Filter { filter: &config.log.level, origin: "log.level" },
        config.log.format,
    )?;
    let t = a.thresholds.thresholds();
    let tables = match &a.tables {
        Some(p) => std::fs::read_to_string(p)
            .map_err(anyhow::Error::from)
            .and_then(|text| Ok(crate::engine::Tables::from_toml(&text)?))
            .map_err(|e| super::Failure { code: 78, error: e.context(format!("--tables {}", p.display())) })?,
        None => crate::engine::Tables::built_in()?,
    };
    let rt = match super::runtime::runtime(false) {
        Ok(rt) => rt,
        Err(e) => return Ok(fail(e)),
    };
    Ok(rt.block_on(async {
        // The signals first: one that comes while it connects stops it as well.
        let (stop_tx, stop) = crate::shutdown::Stop::new();
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(t) => t,
            Err(e) => return fail(anyhow::anyhow!("cannot listen for SIGTERM: {e}")),
        };
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            let _ = stop_tx.send(true);
        });
        let listener = match tokio::net::TcpListener::bind(a.listen).await {
            Ok(l) => l,
            Err(e) => return fail(anyhow::anyhow!("cannot listen on {}: {e}", a.listen)),
        };
        let at = listener.local_addr().unwrap_or(a.listen);
        let site = std::sync::Arc::new(crate::ops::page::Site {
            broker: config.broker.clone(),
            db: tokio::sync::Mutex::new(None),
            thresholds: t,
            recent_minutes: a.thresholds.recent_minutes,
            refresh_seconds: a.refresh_seconds,
            hosts: crate::ops::page::Site::hosts_for(at).into_iter().chain(a.hosts.iter().cloned()).collect(),
            loopback: at.ip().is_loopback(),
            actions: a.actions,
            sessions: crate::ops::page::signin::Sessions::default(),
            tables,
        });
        // Asked once before it serves: a login that may not read the status is said now.
        if let Err(why) = site.document().await {
            return fail(anyhow::anyhow!(
                "asking the broker for its status: {why} (the login needs a role that may read it, as for `sbworker status`)"
            ));
        }
        let mode = if a.actions {
            "actions on: a person signs in with a database login of their own"
        } else {
            "read-only"
        };
        println!("sbworker web: the page on http://{at}/ ({mode}; Ctrl-C stops)");
        let limit = crate::ops::page::CONNECTION_LIMIT;
        crate::worker::http::serve_router(listener, crate::ops::page::router(site), limit, stop).await;
        ExitCode::SUCCESS
    }))
}
