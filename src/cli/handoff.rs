//! `sbworker export` and `sbworker sweep`: connect, call the library, print.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use uuid::Uuid;

use crate::broker::Database;
use crate::config::BrokerConfig;
use crate::handoff::export::{self, Mode};
use crate::handoff::{Backend, sweep};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Csv,
    Json,
}

/// Connects to the hand-off's database, refusing the calculation side of a split
/// install: it keeps no results, no roster and no keys.
async fn connect(target: &BrokerConfig) -> anyhow::Result<Database> {
    let (db, side) = connect_any_side(target).await?;
    if side == crate::transport::Side::Calc {
        anyhow::bail!(
            "{} is the calculation side of a split install: export, sweep, recompute and explain run against the \
             roster side's database",
            crate::connstr::mask(&target.connection)
        );
    }
    Ok(db)
}

/// Connects, and reads the side of sbworker the database holds (both for an install
/// before sides). A statement may take an hour unless the string says otherwise:
/// `Rekenserver.sweep` and a large claim answer only when done (the worker's default is
/// 30 s).
async fn connect_any_side(target: &BrokerConfig) -> anyhow::Result<(Database, crate::transport::Side)> {
    let mut db = Database::connect(target, Some(std::time::Duration::from_secs(3600))).await?;
    let side = db.side().await.context("reading which side the database holds")?;
    Ok((db, side))
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    super::runtime::runtime(false)
}

/// Writes `batch` to `out` (or standard output), then runs `commit`. With a file, the
/// output is written to `FILE.partial-BATCH` and synced before the claim commits, then
/// renamed: a failure before the commit marks nothing; a crash between commit and rename
/// leaves the data in the partial file.
async fn deliver(
    batch: &export::Batch,
    format: Format,
    out: Option<&Path>,
    commit: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    let write = |w: &mut dyn Write| match format {
        Format::Csv => batch.write_csv(w),
        Format::Json => batch.write_json(w),
    };
    match out {
        Some(path) => {
            let partial = PathBuf::from(format!("{}.partial-{}", path.display(), batch.id));
            let written = (|| -> std::io::Result<()> {
                let mut f = std::io::BufWriter::new(std::fs::File::create(&partial)?);
                write(&mut f)?;
                f.into_inner().map_err(|e| e.into_error())?.sync_all()
            })();
            if let Err(e) = written {
                let _ = std::fs::remove_file(&partial);
                return Err(
                    anyhow::Error::new(e).context(format!("cannot write {}; nothing was marked", partial.display()))
                );
            }
            if let Err(e) = commit.await {
                let _ = std::fs::remove_file(&partial);
                return Err(e.context("the claim did not commit; nothing was marked"));
            }
            std::fs::rename(&partial, path).with_context(|| {
                format!("claimed and written to {}, but cannot rename it to {}", partial.display(), path.display())
            })?;
        }
        None => {
            let mut stdout = std::io::stdout().lock();
            write(&mut stdout).context("cannot write to standard output; nothing was marked")?;
            stdout.flush()?;
            commit.await.context("the claim did not commit; nothing was marked")?;
        }
    }
    Ok(())
}

/// Claims the period's results and writes them to `out` (or standard output), committing
/// the claim only once they are written (see `deliver`); returns the summary line.
pub fn export(
    target: &BrokerConfig,
    periode: i32,
    format: Format,
    mode: Mode,
    out: Option<&Path>,
) -> anyhow::Result<String> {
    runtime()?.block_on(async {
        let mut db = connect(target).await?;
        let batch = db.claim(periode, mode).await.context("claiming the results")?;
        let delivered =
            deliver(&batch, format, out, async { db.commit_claim().await.map_err(anyhow::Error::new) }).await;
        if delivered.is_err() {
            let _ = db.rollback_claim().await;
        }
        delivered?;
        // The warnings first: the confirmation command stays the message's end.
        Ok(format!(
            "{}exported {} results ({} factor rows) of period {periode}, batch {}, mode {}{}",
            batch.warning_summary().map_or(String::new(), |s| format!("{s}\n")),
            batch.results(),
            batch.rows.len(),
            batch.id,
            mode.name(),
            if matches!(mode, Mode::Lease { .. }) && !batch.rows.is_empty() {
                format!("; confirm with: sbworker export --ack {}", batch.id)
            } else {
                String::new()
            }
        ))
    })
}

/// Confirms a leased batch.
pub fn ack(target: &BrokerConfig, batch: Uuid) -> anyhow::Result<String> {
    runtime()?.block_on(async {
        let n = connect(target).await?.ack(batch).await?;
        anyhow::ensure!(
            n > 0,
            "batch {batch}: nothing to confirm (unknown, already confirmed, or claimed again after its lease passed)"
        );
        Ok(format!("batch {batch}: {n} results confirmed as exported"))
    })
}

/// One sweep run; the summary line.
pub fn sweep(target: &BrokerConfig, opts: sweep::Options) -> anyhow::Result<String> {
    runtime()?.block_on(async {
        let (mut db, side) = connect_any_side(target).await?;
        if side == crate::transport::Side::Calc && db.kind() == crate::config::BrokerKind::Mssql {
            return Ok("the calculation side of a split install: nothing to sweep here (SQL Server ends dialogs past \
                       their LIFETIME itself; the sweep runs on the roster side)"
                .to_owned());
        }
        if side == crate::transport::Side::Calc {
            // The calculation side keeps no keys or results: its sweep only ends the
            // dialogs past their LIFETIME (those whose roster side is gone).
            let expired = db.expire_only().await.context("ending the dialogs past their LIFETIME")?;
            return Ok(format!(
                "the calculation side of a split install: {expired} dialogs past their LIFETIME ended (the rest of \
                 the sweep runs on the roster side)"
            ));
        }
        let outcome = Backend::sweep(&mut db, opts).await?;
        Ok(describe(&outcome, opts))
    })
}

/// `sbworker explain`: a stored version with its evidence, as text or JSON.
pub fn explain(
    target: &BrokerConfig,
    dv: i32,
    periode: i32,
    versie: Option<i64>,
    tables: Option<&Path>,
    json: bool,
) -> anyhow::Result<String> {
    use crate::handoff::evidence::{self, Difference};
    let tables = match tables {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("--tables {}", p.display()))?;
            crate::engine::Tables::from_toml(&text).with_context(|| format!("--tables {}", p.display()))?
        }
        None => crate::engine::Tables::built_in()?,
    };
    runtime()?.block_on(async {
        let versions = connect(target).await?.versions(dv, periode).await?;
        let e = evidence::explain(&versions, versie, &tables)
            .map_err(|why| anyhow::anyhow!("key ({dv}, {periode}): {why}"))?;
        fn show<T: std::fmt::Display>(d: Option<T>) -> String {
            d.map_or_else(|| "-".to_owned(), |d| d.to_string())
        }
        if json {
            let diff = |ds: &[Difference], a: &str, b: &str| {
                ds.iter()
                    .map(|(c, x, y)| (c.clone(), serde_json::json!({ a: x.map(|d| d.to_string()), b: y.map(|d| d.to_string()) })))
                    .collect::<serde_json::Map<String, serde_json::Value>>()
            };
            let out = serde_json::json!({
                "dienstverband": dv,
                "periode": periode,
                "versie": e.version.versie,
                "opgeslagen_op": e.version.opgeslagen_op,
                "geexporteerd_op": e.version.geexporteerd_op,
                "factoren": e.version.factoren.iter().map(|(c, v)| (c.clone(), serde_json::Value::String(v.to_string()))).collect::<serde_json::Map<_, _>>(),
                "vorige": e.previous.as_ref().map(|(v, ds)| serde_json::json!({ "versie": v, "verschillen": diff(ds, "was", "is") })),
                "afwijkingen_nu": diff(&e.drift, "opgeslagen", "nu"),
                "rekenversie": e.version.rekenversie,
                "rekenversie_nu": e.rekenversie_now,
                "uitleg": e.explanation,
                "niet_uitgelegd": e.unexplained,
            });
            return Ok(out.to_string());
        }
        let mut s = format!(
            "Dienstverband {dv}, periode {periode}: version {} stored at {}, {}\n",
            e.version.versie,
            e.version.opgeslagen_op,
            e.version.geexporteerd_op.as_ref().map_or("not exported".to_owned(), |t| format!("exported at {t}"))
        );
        match &e.version.rekenversie {
            Some(r) if *r == e.rekenversie_now => s.push_str(&format!("Computed by {r}, as today.\n")),
            Some(r) => s.push_str(&format!("Computed by {r}; today: {}.\n", e.rekenversie_now)),
            None => s.push_str(&format!("What computed it was not recorded; today: {}.\n", e.rekenversie_now)),
        }
        s.push_str("Factors:\n");
        for (c, v) in &e.version.factoren {
            s.push_str(&format!("  {c} = {v}\n"));
        }
        match &e.previous {
            None => s.push_str("No earlier version is stored.\n"),
            Some((v, ds)) if ds.is_empty() => s.push_str(&format!("Since version {v}: no factor changed.\n")),
            Some((v, ds)) => {
                s.push_str(&format!("Since version {v}:\n"));
                for (c, x, y) in ds {
                    s.push_str(&format!("  {c}: {} -> {}\n", show(*x), show(*y)));
                }
            }
        }
        if let Some(why) = &e.unexplained {
            s.push_str(&format!("Not explained: {why}.\n"));
        }
        if !e.drift.is_empty() {
            s.push_str("Warning: today's engine and rate tables compute something else for this Vraag:\n");
            for (c, x, y) in &e.drift {
                s.push_str(&format!("  {c}: stored {}, now {}\n", show(*x), show(*y)));
            }
        }
        if let Some(text) = &e.explanation {
            s.push_str("\nThe Vraag as sent, explained:\n");
            s.push_str(text);
        }
        Ok(s.trim_end().to_owned())
    })
}

/// `sbworker recompute` on either back end.
pub fn recompute(
    target: &BrokerConfig,
    selection: &crate::handoff::recompute::Selection,
    opts: crate::handoff::recompute::Options,
) -> anyhow::Result<String> {
    use crate::handoff::recompute::{self, Outcome};
    runtime()?.block_on(async {
        let progress = |keys, sent| eprintln!("recompute: {keys} keys recomputed, {sent} Vraags sent");
        let outcome = recompute::run(&mut connect(target).await?, selection, opts, progress).await?;
        Ok(match outcome {
            Outcome::Skipped => "skipped: another recompute holds the lock".to_owned(),
            Outcome::Counted { keys, fuse_reached } => format!(
                "dry run: {keys} keys would be recomputed{}",
                if fuse_reached {
                    format!(" (the fuse of {} stops the run there; more match)", opts.fuse)
                } else {
                    String::new()
                }
            ),
            Outcome::Ran { keys, sent, batches, fuse_reached, last } => format!(
                "{keys} keys recomputed in {batches} transactions, {sent} Vraags sent{}",
                match (fuse_reached, last) {
                    (true, Some((d, p))) => format!("; fuse of {} reached: go on with --after {d}:{p}", opts.fuse),
                    _ => String::new(),
                }
            ),
        })
    })
}

pub fn describe(o: &sweep::Outcome, opts: sweep::Options) -> String {
    match o {
        sweep::Outcome::Skipped => "skipped: a previous sweep still holds the lock (logged)".into(),
        sweep::Outcome::Ran {
            expired,
            lost,
            candidates,
            sent,
            repaired,
            fuse_reached,
            deleted_log_rows,
            deleted_dead_letters,
            deleted_evidence,
            deleted_requests,
        } => {
            // (SQL Server ends dialogs past their lifetime itself: its runs say 0 here.)
            let expiry =
                if *expired > 0 { format!("{expired} dialogs ended by their lifetime, ") } else { String::new() };
            format!(
                "{expiry}{lost} requests without their dialog marked lost; {candidates} stale keys ({repaired} of \
                 them repairs of a diverted, failed or lost request), {sent} Vraags sent{}; retention deleted \
                 {deleted_log_rows} run-log rows, {deleted_dead_letters} dead letters, {deleted_evidence} evidence rows \
                 and {deleted_requests} answered requests' log rows",
                if *fuse_reached {
                    format!(" (fuse of {} reached: more wait for the next run)", opts.fuse)
                } else {
                    String::new()
                }
            )
        }
    }
}

/// `sbworker export`: a claim written out, or a leased batch confirmed.
pub fn main_export(a: crate::cli::args::ExportArgs) -> super::Outcome {
    let target = a.database.target().map_err(|e| super::Failure::usage(anyhow::anyhow!(e)))?;
    let line = match (a.ack, a.periode) {
        (Some(batch), _) => ack(&target, batch)?,
        (None, Some(periode)) => {
            export(&target, periode, a.format.into(), a.mode.with(a.lease_minutes), a.out.as_deref())?
        }
        (None, None) => return Err(anyhow::anyhow!("give --periode ID or --ack BATCH_ID").into()),
    };
    eprintln!("{line}");
    Ok(std::process::ExitCode::SUCCESS)
}

/// `sbworker sweep`.
pub fn main_sweep(a: crate::cli::args::SweepArgs) -> super::Outcome {
    let opts = sweep::Options {
        fuse: a.fuse,
        batch: a.batch,
        retention_days: a.retention_days,
        evidence_retention_months: a.evidence_retention_months,
        delete_batch: a.delete_batch,
    };
    let target = a.database.target().map_err(|e| super::Failure::usage(anyhow::anyhow!(e)))?;
    println!("{}", sweep(&target, opts)?);
    Ok(std::process::ExitCode::SUCCESS)
}

/// `sbworker explain`.
pub fn main_explain(a: crate::cli::args::ExplainArgs) -> super::Outcome {
    let target = a.database.target().map_err(|e| super::Failure::usage(anyhow::anyhow!(e)))?;
    println!("{}", explain(&target, a.dienstverband, a.periode, a.versie, a.tables.as_deref(), a.json)?);
    Ok(std::process::ExitCode::SUCCESS)
}

/// `sbworker recompute`.
pub fn main_recompute(a: crate::cli::args::RecomputeArgs) -> super::Outcome {
    let selection = crate::handoff::recompute::Selection {
        periodes: a.periodes,
        cao: a.cao,
        dienstverband_from: a.dienstverband_van,
        dienstverband_to: a.dienstverband_tot,
        keys: a.sleutels,
        after: a.after,
    };
    if selection.is_everything() && !a.all {
        return Err(super::Failure::usage(anyhow::anyhow!(
            "choose the keys (--periode, --cao, --dienstverband-van/-tot, --sleutel), or --all for every key"
        )));
    }
    let target = a.database.target().map_err(|e| super::Failure::usage(anyhow::anyhow!(e)))?;
    let opts = crate::handoff::recompute::Options { batch: a.batch, fuse: a.fuse, dry_run: a.dry_run };
    println!("{}", recompute(&target, &selection, opts)?);
    Ok(std::process::ExitCode::SUCCESS)
}
