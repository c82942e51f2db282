//! The bench's output: `report.md` (a table per workload: value, unit, ratio to the
//! limit, ratio to the other contender; medians with min and max over repetitions),
//! `results.json` (every run), and two SVG plots (headline throughput per contender;
//! pipeline throughput against readers).

use std::fmt::Write as _;
use std::path::Path;

use super::runs::Measured;
use super::{Contender, Results, Workload};

/// Median, min and max.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

pub fn spread(values: &[f64]) -> Option<Spread> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let median = if v.len() % 2 == 1 { v[v.len() / 2] } else { (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0 };
    Some(Spread { median, min: v[0], max: v[v.len() - 1] })
}

fn show(s: Option<Spread>, digits: usize) -> String {
    match s {
        None => "–".into(),
        Some(s) if s.min == s.max => format!("{:.*}", digits, s.median),
        Some(s) => format!("{:.*} ({:.*}–{:.*})", digits, s.median, digits, s.min, digits, s.max),
    }
}

fn runs_of(r: &Results, w: Workload, c: Contender, sync: bool) -> Vec<&Measured> {
    r.runs.iter().filter(|m| m.workload == w && m.contender == c && m.synchronous_commit == sync).collect()
}

/// Per repetition, `a`'s throughput over `b`'s (ratios within one repetition).
fn ratios(r: &Results, w: Workload, a: Contender, b: Contender, sync: bool) -> Option<Spread> {
    let bs = runs_of(r, w, b, sync);
    let v: Vec<f64> = runs_of(r, w, a, sync)
        .iter()
        .filter_map(|x| bs.iter().find(|y| y.repetition == x.repetition).map(|y| x.per_second / y.per_second))
        .collect();
    spread(&v)
}

fn field(runs: &[&Measured], f: impl Fn(&Measured) -> Option<f64>) -> Option<Spread> {
    spread(&runs.iter().filter_map(|m| f(m)).collect::<Vec<_>>())
}

/// The headline's median throughput of a contender (synchronous commit on).
pub fn headline(r: &Results, c: Contender) -> Option<Spread> {
    field(&runs_of(r, Workload::Headline, c, true), |m| Some(m.per_second))
}

fn queue_table(out: &mut String, r: &Results, w: Workload, sync: bool, contenders: &[Contender]) {
    let _ = writeln!(
        out,
        "| contender | messages/s | ratio to limit | ratio to sbworker (the other transport for sbworker) | commits/msg | WAL bytes/msg | worker CPU s/1k | emulator CPU s/1k | PostgreSQL CPU s/1k | worker peak RSS MiB | order | exactly once |"
    );
    let _ = writeln!(out, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for &c in contenders {
        let runs = runs_of(r, w, c, sync);
        if runs.is_empty() {
            continue;
        }
        let other = match c {
            Contender::SbworkerPostgres => Some(Contender::SbworkerTds),
            Contender::SbworkerTds => Some(Contender::SbworkerPostgres),
            c if c.is_peer() => Some(Contender::SbworkerPostgres),
            _ => None,
        };
        let order = match runs.iter().filter_map(|m| m.out_of_order).max() {
            None => "–".to_owned(),
            Some(0) => "kept".to_owned(),
            Some(n) => format!("**broken ({n} out of order): not ranked**"),
        };
        let once = match runs.iter().filter_map(|m| m.exactly_once).reduce(|a, b| a && b) {
            None => "–",
            Some(true) => "yes",
            Some(false) => "**no**",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {order} | {once} |",
            c.label(),
            show(field(&runs, |m| Some(m.per_second)), 0),
            if c == Contender::Limit { "1".into() } else { show(ratios(r, w, c, Contender::Limit, sync), 2) },
            other.map_or("–".into(), |o| show(ratios(r, w, c, o, sync), 2)),
            show(field(&runs, |m| Some(m.commits_per_message)), 2),
            show(field(&runs, |m| Some(m.wal_bytes_per_message)), 0),
            show(field(&runs, |m| m.worker_cpu_per_1000), 3),
            show(field(&runs, |m| m.emulator_cpu_per_1000), 3),
            show(field(&runs, |m| Some(m.postgres_cpu_per_1000)), 3),
            show(field(&runs, |m| m.worker_peak_rss_mib), 1),
        );
    }
}

/// `report.md`, `results.json`, `headline.svg`, `pipeline.svg` into `dir`.
pub fn write(dir: &Path, r: &Results) -> anyhow::Result<()> {
    std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(r)?)?;
    std::fs::write(dir.join("headline.svg"), headline_svg(r))?;
    std::fs::write(dir.join("pipeline.svg"), pipeline_svg(r))?;
    std::fs::write(dir.join("report.md"), markdown(r))?;
    Ok(())
}

pub fn markdown(r: &Results) -> String {
    let s = &r.sizes;
    let mut out = String::new();
    let _ = writeln!(out, "# sbworker bench\n");
    let _ = writeln!(out, "`{}`, {}, on {}.\n", r.command, r.started, r.machine);
    let _ = writeln!(
        out,
        "One throwaway cluster, one database per contender, the same settings for all; {} repetition(s), \
         interleaved (every contender once per repetition, in turn), each after a {} s pgbench commit \
         calibration. Figures are medians (min–max); ratios are taken within a repetition. Every contender \
         has {} connections: sbworker on the PostgreSQL broker {} readers and one side connection they share \
         (LISTEN, attempt counts); through the emulator {} readers of two connections each (the transaction's \
         and the one that counts attempts); graphile-worker {} jobs at once (pool {}, one connection LISTENs); \
         River pool {}; pgbench {} clients. Nothing compiles while it measures.\n",
        s.reps,
        s.calibration_seconds,
        s.connections,
        s.readers,
        super::runs::readers_of(s.readers, Contender::SbworkerTds).0,
        s.readers,
        s.connections,
        s.connections,
        s.connections
    );
    let _ = writeln!(out, "## Settings\n\n| setting | value |\n| --- | --- |");
    for (k, v) in &r.settings {
        let _ = writeln!(out, "| {k} | {v} |");
    }
    let _ = writeln!(out, "| synchronous_commit (per run) | on for the headline, off for the variant |");
    let _ = writeln!(
        out,
        "\nCommit calibration (one-row commits, 8 connections): {} commits/s.\n",
        show(spread(&r.calibrations), 0)
    );
    let all = Contender::ALL;
    let has = |w: Workload| r.runs.iter().any(|m| m.workload == w);
    if has(Workload::Headline) {
        headline_section(&mut out, r, &all);
        statements_section(&mut out, r);
    }
    if has(Workload::BurnDown) {
        let _ = writeln!(
            out,
            "\n## Burn-down\n\n{} messages preloaded ({} groups × {}), a handler that does nothing, RECEIVE \
             TOP (100): time to drain.\n",
            s.groups as i64 * s.per_group as i64,
            s.groups,
            s.per_group
        );
        queue_table(&mut out, r, Workload::BurnDown, true, &[Contender::SbworkerPostgres, Contender::SbworkerTds]);
    }
    if !r.open_loop.is_empty() {
        open_loop_section(&mut out, r);
    }
    if !r.poison.is_empty() {
        poison_section(&mut out, r);
    }
    if !r.bloat.is_empty() {
        bloat_section(&mut out, r);
    }
    if !r.pipeline.is_empty() {
        pipeline_section(&mut out, r);
    }
    if !r.split.is_empty() {
        split_section(&mut out, r);
    }
    if !r.web.is_empty() {
        web_section(&mut out, r);
    }
    if !r.engine_per_second.is_empty() {
        let _ = writeln!(
            out,
            "\nThe engine alone (decode the Vraag, calculate, encode the Antwoord; one thread): {} Vraags/s per \
             core.",
            show(spread(&r.engine_per_second), 0)
        );
    }
    let _ = writeln!(out, "\n## Targets\n\n| target | measured | verdict |\n| --- | --- | --- |");
    for (target, measured, met) in targets(r) {
        let _ = writeln!(out, "| {target} | {measured} | {met} |");
    }
    let _ = writeln!(
        out,
        "\n## Not measured by this version of the bench\n\nThe open loop, poison and bloat for the peers that \
         break order (River's one queue, graphile-worker's local queue), and the pipeline's own commits and WAL \
         per request. graphile-worker completes a job in a transaction of its own after the task's (it cannot \
         complete it inside the business transaction), and its task here opens one for the effect; River \
         completes its job inside the business transaction (`job_complete_tx`). Plots: `headline.svg`, \
         `pipeline.svg`; every run: `results.json`."
    );
    for note in &r.notes {
        let _ = writeln!(out, "\nLeft out: {note}.");
    }
    out
}

/// Workload 2 (sections for the parts that ran; the others are named under "Left out").
fn headline_section(out: &mut String, r: &Results, all: &[Contender]) {
    let s = &r.sizes;
    let _ = writeln!(
        out,
        "## Headline: Service Broker semantics\n\n{} groups × {} in-order messages; each message in one \
         transaction (RECEIVE TOP (1) of its group, the group's business row updated, a reply inserted, \
         commit); afterwards every group checked for order and every message for exactly one effect and one \
         reply. The limit is pgbench running the same commits and row writes per message on plain tables \
         (`crates/tools/sql/postgres/bench_limit.pgbench`); it keeps no order, it is a bound.\n\n### synchronous_commit = on\n",
        s.groups, s.per_group
    );
    queue_table(out, r, Workload::Headline, true, all);
    let _ = writeln!(out, "\n### synchronous_commit = off (CPU cost without the flush)\n");
    queue_table(out, r, Workload::Headline, false, all);
}

/// The server's time per statement of each contender's first headline run with durable
/// commits (`pg_stat_statements`, the statements the client sent).
fn statements_section(out: &mut String, r: &Results) {
    let firsts: Vec<&Measured> = r
        .runs
        .iter()
        .filter(|m| m.workload == Workload::Headline && m.synchronous_commit && m.repetition == 0)
        .filter(|m| !m.statements.is_empty())
        .collect();
    if firsts.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n### Server time per statement (headline, synchronous_commit = on, repetition 1)\n\n\
         From `pg_stat_statements` over each contender's run: the statements by total time, per message. \
         Since 2026-12-04f only the statements the client sent are tracked here: tracking every nested \
         statement costs each one time, which weighs on a contender made of PL/pgSQL and not on one of \
         plain statements (the pipeline's table below has the nested ones).\n"
    );
    for m in firsts {
        let _ = writeln!(
            out,
            "**{}** ({:.0} messages/s)\n\n| statement | top level | calls/msg | mean ms | ms/msg |\n| --- | --- | --- | --- | --- |",
            m.contender.label(),
            m.per_second
        );
        for st in m.statements.iter().take(8) {
            let _ = writeln!(
                out,
                "| `{}` | {} | {:.2} | {:.3} | {:.3} |",
                st.statement.replace('|', "\\|").replace('`', "'"),
                if st.top_level { "yes" } else { "" },
                st.calls_per_request,
                st.mean_ms,
                st.ms_per_request
            );
        }
        let _ = writeln!(out);
    }
}

/// Workload 3: latency by plan, per rate and contender.
fn open_loop_section(out: &mut String, r: &Results) {
    let s = &r.sizes;
    let _ = writeln!(
        out,
        "\n## Open loop\n\nMessages sent at a fixed rate by plan (message i at start + i / rate, over 200 \
         groups, two sender connections) to each contender ({} readers or jobs at once, one message per \
         transaction, `synchronous_commit` on; sbworker's sends are the broker's `sb.send`, graphile-worker's \
         its `add_job`, River's its client's insert, pgmq's `pgmq.send` with the group's header); latency from each message's planned send time to its \
         reply (one machine, one clock), for the messages planned after a {} s warm-up, over {} s. A sender \
         that falls behind its plan does not hide it: the lateness counts.\n\n\
         | contender | rate/s | sent/s | measured | p50 ms | p95 ms | p99 ms | max ms |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |",
        s.readers, s.open_loop_warmup_seconds, s.open_loop_seconds
    );
    for &rate in &s.open_loop_rates {
        for c in Contender::ALL {
            let runs: Vec<_> = r.open_loop.iter().filter(|o| o.rate == rate && o.contender == c).collect();
            if runs.is_empty() {
                continue;
            }
            let f = |g: fn(&super::runs::OpenLoop) -> f64| spread(&runs.iter().map(|o| g(o)).collect::<Vec<_>>());
            let _ = writeln!(
                out,
                "| {} | {rate} | {} | {} | {} | {} | {} | {} |",
                c.label(),
                show(f(|o| o.sent_per_second), 0),
                show(f(|o| o.measured as f64), 0),
                show(f(|o| o.p50_ms), 1),
                show(f(|o| o.p95_ms), 1),
                show(f(|o| o.p99_ms), 1),
                show(f(|o| o.max_ms), 1),
            );
        }
    }
}

/// sbworker's pipeline runs with `readers` readers (a peer's runs are apart).
fn sbworker_pipeline(r: &Results, readers: u32) -> impl Iterator<Item = &super::pipeline::PipelineRun> {
    r.pipeline.iter().filter(move |p| p.peer.is_none() && p.paced.is_none() && p.readers == readers)
}

/// sbworker's open-loop pipeline runs (edits paced at half the capacity).
fn open_loop_pipeline(r: &Results) -> impl Iterator<Item = &super::pipeline::PipelineRun> {
    r.pipeline.iter().filter(|p| p.peer.is_none() && p.paced.is_some())
}

/// A peer's pipeline runs.
fn peer_pipeline<'a>(r: &'a Results, peer: &'a str) -> impl Iterator<Item = &'a super::pipeline::PipelineRun> {
    r.pipeline.iter().filter(move |p| p.peer.as_deref() == Some(peer))
}

/// Per repetition, the pipeline's edits/s with `readers` over the pipeline limit's.
fn pipeline_ratios(r: &Results, readers: u32) -> Vec<f64> {
    limit_ratios(r, sbworker_pipeline(r, readers))
}

/// Per repetition, `runs`' edits/s over the pipeline limit's.
fn limit_ratios<'a>(r: &Results, runs: impl Iterator<Item = &'a super::pipeline::PipelineRun>) -> Vec<f64> {
    ratios_to(runs, |rep| r.pipeline_limit.iter().find(|l| l.repetition == rep).map(|l| l.per_second))
}

/// Per repetition, `runs`' edits/s over the business limit's requests/s.
fn business_ratios<'a>(r: &Results, runs: impl Iterator<Item = &'a super::pipeline::PipelineRun>) -> Vec<f64> {
    ratios_to(runs, |rep| r.business_limit.iter().find(|l| l.repetition == rep).map(|l| l.per_second))
}

/// Per repetition, `runs`' edits/s over `limit` of that repetition (where it ran).
fn ratios_to<'a>(
    runs: impl Iterator<Item = &'a super::pipeline::PipelineRun>,
    limit: impl Fn(usize) -> Option<f64>,
) -> Vec<f64> {
    runs.filter_map(|p| Some(p.edits_per_second / limit(p.repetition)?)).collect()
}

/// Per repetition in which both ran: the pipeline limit's edits/s and the business
/// limit's requests/s.
fn both_limits(r: &Results) -> Vec<(f64, f64)> {
    r.pipeline_limit
        .iter()
        .filter_map(|l| {
            let b = r.business_limit.iter().find(|b| b.repetition == l.repetition)?;
            Some((l.per_second, b.per_second))
        })
        .collect()
}

/// The counting runs' sbworker pipeline and River's (none in results from before them).
fn counted<'a>(r: &'a Results, peer: Option<&'a str>) -> Option<&'a super::pipeline::PipelineRun> {
    r.counting.as_ref()?.pipeline.iter().find(|p| p.peer.as_deref() == peer)
}

/// Workload 5: the real pipeline by readers, with the server's statements per request.
fn pipeline_section(out: &mut String, r: &Results) {
    let s = &r.sizes;
    // The business limit's column, when it ran (results from before it have none).
    let business = !r.business_limit.is_empty();
    let to_business =
        |ratios: Vec<f64>| if business { format!(" {} |", show(spread(&ratios), 2)) } else { String::new() };
    let _ = writeln!(
        out,
        "\n## The real pipeline\n\nRoster commits to stored results with the payroll engine ({} employees \
         imported in one transaction, then 3 edits per employee from 4 planners at once; `synchronous_commit` \
         on), by readers of the calculation queue. Edits/s counts the requests answered and stored (an edit \
         that changes no roster row sends none). Latency: from the roster commit to the stored result. The \
         limit: pgbench doing each edit's minimal durable work with {} clients (`bench_pipeline_limit.pgbench`: \
         the roster row and a request row; the worker's attempt row, the request taken and an answer written; \
         the answer taken and the result stored, latest wins; each client takes the rows it wrote), the ratio \
         taken within each repetition.{}{}\n\n\
         | readers | import requests/s | edits/s | ratio to the limit |{} p50 ms | p99 ms | verified |\n\
         | --- | --- | --- | --- |{} --- | --- | --- |",
        s.pipeline_employees,
        r.pipeline_limit.first().map_or(s.connections, |l| l.clients),
        business_text(r),
        [
            match s.pipeline_groups_per_transaction {
                1 => String::new(),
                n => format!(
                    " sbworker's calculation readers took up to {n} conversation groups per transaction (`--groups-per-transaction`)."
                ),
            },
            match s.pipeline_collector_groups_per_transaction {
                1 => String::new(),
                n => format!(" sbworker's collector readers took up to {n} conversation groups per transaction."),
            },
            match s.pipeline_dialog_reuse_idle_seconds {
                None => String::new(),
                Some(n) => format!(
                    " Conversations were reused per key, ended after {n} s idle (`--dialog-reuse-idle-seconds`); edits/s \
                     is timed to the last answer stored, before the dialogs close."
                ),
            },
        ]
        .concat(),
        if business { " ratio to the business limit |" } else { "" },
        if business { " --- |" } else { "" },
    );
    for &readers in &s.pipeline_readers {
        let runs: Vec<_> = sbworker_pipeline(r, readers).collect();
        if runs.is_empty() {
            continue;
        }
        let f = |g: fn(&super::pipeline::PipelineRun) -> f64| spread(&runs.iter().map(|p| g(p)).collect::<Vec<_>>());
        let _ = writeln!(
            out,
            "| {readers} | {} | {} | {} |{} {} | {} | {} |",
            show(f(|p| p.import_per_second), 0),
            show(f(|p| p.edits_per_second), 0),
            show(spread(&pipeline_ratios(r, readers)), 2),
            to_business(business_ratios(r, sbworker_pipeline(r, readers))),
            show(f(|p| p.p50_ms), 0),
            show(f(|p| p.p99_ms), 0),
            if runs.iter().all(|p| p.verified) { "yes" } else { "**no**" }
        );
    }
    let open: Vec<_> = open_loop_pipeline(r).collect();
    if !open.is_empty() {
        let f = |g: fn(&super::pipeline::PipelineRun) -> f64| spread(&open.iter().map(|p| g(p)).collect::<Vec<_>>());
        let _ = writeln!(
            out,
            "| {}, open loop: edits paced at {}/s (half the closed run's edit rate) | {} | {} | {} |{} {} | {} | {} |",
            open[0].readers,
            show(f(|p| p.paced.unwrap_or(0.0)), 0),
            show(f(|p| p.import_per_second), 0),
            show(f(|p| p.edits_per_second), 0),
            show(spread(&limit_ratios(r, open.iter().copied())), 2),
            to_business(business_ratios(r, open.iter().copied())),
            show(f(|p| p.p50_ms), 0),
            show(f(|p| p.p99_ms), 0),
            if open.iter().all(|p| p.verified) { "yes" } else { "**no**" }
        );
    }
    let river: Vec<_> = peer_pipeline(r, super::pipeline::RIVER).collect();
    if !river.is_empty() {
        let f = |g: fn(&super::pipeline::PipelineRun) -> f64| spread(&river.iter().map(|p| g(p)).collect::<Vec<_>>());
        let _ = writeln!(
            out,
            "| {}: {} workers, pool {} | {} | {} | {} |{} {} | {} | {} |",
            super::pipeline::RIVER,
            river[0].readers,
            super::peers::POOL,
            show(f(|p| p.import_per_second), 0),
            show(f(|p| p.edits_per_second), 0),
            show(spread(&limit_ratios(r, river.iter().copied())), 2),
            to_business(business_ratios(r, river.iter().copied())),
            show(f(|p| p.p50_ms), 0),
            show(f(|p| p.p99_ms), 0),
            if river.iter().all(|p| p.verified) { "yes" } else { "**no**" }
        );
    }
    if !r.pipeline_limit.is_empty() {
        let f =
            |g: fn(&super::pipeline::PipelineLimit) -> f64| spread(&r.pipeline_limit.iter().map(g).collect::<Vec<_>>());
        // The limit against the business limit, within each repetition.
        let ratio: Vec<f64> = both_limits(r).iter().map(|(l, b)| l / b).collect();
        let _ = writeln!(
            out,
            "| limit: pgbench | – | {} | 1 |{} – | – | yes |",
            show(f(|l| l.per_second), 0),
            to_business(ratio),
        );
    }
    if business {
        let f =
            |g: fn(&super::pipeline::BusinessLimit) -> f64| spread(&r.business_limit.iter().map(g).collect::<Vec<_>>());
        let ratio: Vec<f64> = both_limits(r).iter().map(|(l, b)| b / l).collect();
        let _ = writeln!(
            out,
            "| business limit: pgbench, no queue | – | {} | {} | 1 | – | – | yes |",
            show(f(|b| b.per_second), 0),
            show(spread(&ratio), 2),
        );
    }
    if !r.pipeline_limit.is_empty() {
        let f =
            |g: fn(&super::pipeline::PipelineLimit) -> f64| spread(&r.pipeline_limit.iter().map(g).collect::<Vec<_>>());
        let _ = writeln!(
            out,
            "\nThe limit per edit: {} commits, {} WAL bytes.",
            show(f(|l| l.commits_per_edit), 2),
            show(f(|l| l.wal_bytes_per_edit), 0),
        );
    }
    if business {
        let f =
            |g: fn(&super::pipeline::BusinessLimit) -> f64| spread(&r.business_limit.iter().map(g).collect::<Vec<_>>());
        let _ = writeln!(
            out,
            "\nThe business limit per request: {} commits, {} WAL bytes ({} requests from {} edits).",
            show(f(|b| b.commits_per_request), 2),
            show(f(|b| b.wal_bytes_per_request), 0),
            show(f(|b| b.requests as f64), 0),
            show(f(|b| b.edits as f64), 0),
        );
    }
    work_table(out, r, &open, &river);
    // Where the time goes: the server's statements per request, from the counting run
    // (nested statements tracked); in results from before it, the timed run with the
    // most readers.
    let timed = || r.pipeline.iter().filter(|p| p.peer.is_none() && !p.statements.is_empty()).max_by_key(|p| p.readers);
    let (which, p) = match counted(r, None) {
        Some(p) if !p.statements.is_empty() => ("the counting run", Some(p)),
        _ => ("", timed()),
    };
    if let Some(p) = p {
        let which = if which.is_empty() { format!("repetition {}", p.repetition + 1) } else { which.to_owned() };
        let _ = writeln!(
            out,
            "\nWhere the server's time goes ({} readers, {which}; pg_stat_statements, nested statements \
             included, so the times overlap, and each tracked nested statement costs time of its own; rows per \
             call tells an empty RECEIVE from one that took messages):\n\n\
             | statement | calls/request | rows/call | mean ms | ms/request | sent by |\n\
             | --- | --- | --- | --- | --- | --- |",
            p.readers,
        );
        for st in &p.statements {
            let _ = writeln!(
                out,
                "| `{}` | {:.2} | {} | {:.3} | {:.3} | {} |",
                st.statement.replace('|', "\\|").replace('`', "'"),
                st.calls_per_request,
                st.rows_per_call.map_or("–".to_owned(), |r| format!("{r:.2}")),
                st.mean_ms,
                st.ms_per_request,
                if st.top_level { "a client" } else { "a function or trigger" }
            );
        }
    }
}

/// The web page's pages at size: median and 95th percentile per page, against the limit.
fn web_section(out: &mut String, r: &Results) {
    let (keys, letters) = r.web.first().map_or((0, 0), |p| (p.keys, p.letters));
    let _ = writeln!(
        out,
        "\n## The web page at size\n\n{keys} keys (with their results and two requests each in the calculation log) \
         and {letters} dead letters; each page asked over TCP one at a time, after a warm-up. Limit: {} ms \
         (median).\n\n| page | path | median | p95 | of the limit |\n| --- | --- | --- | --- | --- |",
        super::web::LIMIT_MS
    );
    for p in &r.web {
        let _ = writeln!(
            out,
            "| {} | `{}` | {:.1} ms | {:.1} ms | {:.2} |",
            p.page,
            p.path,
            p.median_ms,
            p.p95_ms,
            p.median_ms / super::web::LIMIT_MS
        );
    }
}

/// The cost of the route: the pipeline in one database, and split over two servers.
fn split_section(out: &mut String, r: &Results) {
    let pairs = &r.split;
    let readers = pairs[0].single.readers;
    let _ = writeln!(
        out,
        "\n## The split topology: the cost of the route\n\nThe same pipeline ({} employees, {readers} calculation \
         readers), once with both services in one database, once split as the seed deploys it: the roster on \
         one server, the calculation on another, joined by a route each way (`demo --split 1`; logical \
         replication carries the messages). Both servers are throwaway clusters on this machine with the bench's \
         settings and `wal_level = logical`; the one-database arm runs on the roster's server, so the arms differ \
         by the route alone. Ratios are taken within each repetition. The work is counted on both servers; \
         pg_stat_statements records the statements of the delivery trigger the route's apply process fires as \
         top-level ones, so they count among those sent (the apply's own row inserts are not counted).\n\n\
         | deployment | edits/s | p50 ms | p99 ms | statements sent | nested statements | buffers touched | verified |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |",
        r.sizes.pipeline_employees
    );
    type Get = fn(&super::pipeline::SplitPair) -> &super::pipeline::PipelineRun;
    let arms: [(&str, Get); 2] = [("one database", |p| &p.single), ("split over two servers", |p| &p.split)];
    for (name, arm) in arms {
        let runs: Vec<_> = pairs.iter().map(arm).collect();
        let f = |g: fn(&super::pipeline::PipelineRun) -> f64| spread(&runs.iter().map(|p| g(p)).collect::<Vec<_>>());
        let w = |g: fn(&super::pipeline::WorkPerRequest) -> f64| {
            spread(&runs.iter().filter_map(|p| p.work.as_ref().map(g)).collect::<Vec<_>>())
        };
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} | {} | {} | {} | {} |",
            show(f(|p| p.edits_per_second), 0),
            show(f(|p| p.p50_ms), 0),
            show(f(|p| p.p99_ms), 0),
            show(w(|w| w.sent), 1),
            show(w(|w| w.nested), 1),
            show(w(|w| w.buffers), 0),
            if runs.iter().all(|p| p.verified) { "yes" } else { "**no**" }
        );
    }
    let ratio = |g: fn(&super::pipeline::PipelineRun) -> f64| {
        spread(&pairs.iter().filter(|p| g(&p.single) > 0.0).map(|p| g(&p.split) / g(&p.single)).collect::<Vec<_>>())
    };
    let _ = writeln!(
        out,
        "\nSplit against one database: edits/s {}×, p50 {}×, p99 {}×.",
        show(ratio(|p| p.edits_per_second), 2),
        show(ratio(|p| p.p50_ms), 2),
        show(ratio(|p| p.p99_ms), 2)
    );
}

/// The business limit, and which run each figure comes from, said under the pipeline's
/// heading (nothing for results from before them).
fn business_text(r: &Results) -> String {
    let mut t = String::new();
    if let Some(b) = r.business_limit.first() {
        let _ = write!(
            t,
            " The business limit: pgbench doing per edit what every queue must do, with no queue, with {} clients \
             (`bench_business_limit.pgbench`, on the same roster): the planners' edits in their mix, whose commit \
             builds and logs the Vraag by the roster's own triggers and `rekenserver.vraag`; then the engine's \
             answer for the key (computed once per key from its imported Vraag) stored by the collector's own \
             `rekenserver.sla_antwoord_op`, latest wins; two transactions, durable commits. Its rate counts the \
             requests stored, as edits/s does; it leaves out the engine itself (25–50 µs of one core a request) \
             and a client's decoding. What a queue adds is the rest.",
            b.clients
        );
    }
    if r.counting.is_some() {
        t.push_str(
            " Rates and latencies come from the timed runs, which track top-level statements only \
             (`pg_stat_statements.track = top`); the work per request and where the server's time goes come from \
             a counting run per contender (`track = all`), made once per bench with repetition 1's roster and \
             edits.",
        );
    }
    t
}

/// The pipeline's work per request, counted: what each run made the server do, beside the
/// rates that the machine's spread moves. From the counting runs; in results from before
/// them, from the timed runs.
fn work_table(
    out: &mut String,
    r: &Results,
    open: &[&super::pipeline::PipelineRun],
    river: &[&super::pipeline::PipelineRun],
) {
    let mut rows: Vec<(String, Vec<super::pipeline::WorkPerRequest>)> = Vec::new();
    let works = |runs: &[&super::pipeline::PipelineRun]| runs.iter().filter_map(|p| p.work).collect::<Vec<_>>();
    let wrong = |p: &super::pipeline::PipelineRun| if p.verified { "" } else { " (**its end state was wrong**)" };
    if let Some(c) = &r.counting {
        for p in &c.pipeline {
            let name = match &p.peer {
                None => format!("sbworker, {} readers{}", p.readers, wrong(p)),
                Some(peer) => format!("{peer}: {} workers{}", p.readers, wrong(p)),
            };
            rows.push((name, p.work.into_iter().collect()));
        }
        if let Some(b) = &c.business_limit {
            rows.push(("business limit: pgbench, no queue (its edits alone)".to_owned(), b.work.into_iter().collect()));
        }
    } else {
        for &readers in &r.sizes.pipeline_readers {
            let runs: Vec<_> = sbworker_pipeline(r, readers).collect();
            rows.push((format!("sbworker, {readers} readers"), works(&runs)));
        }
        if let Some(first) = open.first() {
            rows.push((format!("sbworker, {} readers, open loop", first.readers), works(open)));
        }
        if let Some(first) = river.first() {
            rows.push((format!("{}: {} workers", super::pipeline::RIVER, first.readers), works(river)));
        }
    }
    rows.retain(|(_, w)| !w.is_empty());
    if rows.is_empty() {
        return;
    }
    let which = if r.counting.is_some() {
        "a counting run per contender, once per bench, with nested statements tracked; pg_stat_statements over \
         the whole run: the import, the edits and the check of the end state (the business limit: its pgbench \
         run, the edits alone)"
    } else {
        "pg_stat_statements over the whole run: the import, the edits and the check of the end state"
    };
    let _ = writeln!(
        out,
        "\nThe work per request, counted ({which}; counts do not move with the machine's speed): the statements \
         the clients sent (each a round trip, BEGIN and COMMIT included), the statements run inside them by \
         functions and triggers, and the shared buffers the sent statements touched.\n\n\
         | run | statements sent | nested statements | buffers touched |\n| --- | --- | --- | --- |"
    );
    for (name, w) in rows {
        let f = |g: fn(&super::pipeline::WorkPerRequest) -> f64| spread(&w.iter().map(g).collect::<Vec<_>>());
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} |",
            show(f(|w| w.sent), 1),
            show(f(|w| w.nested), 1),
            show(f(|w| w.buffers), 0)
        );
    }
}

/// Workload 4, first half: the poison run, per contender.
fn poison_section(out: &mut String, r: &Results) {
    let s = &r.sizes;
    let _ = writeln!(
        out,
        "\n## Poison\n\nThe headline's {} × {} messages with 1% of them (chosen by hash) \
         failing every time in the handler, 3 attempts each. sbworker retries in place (the group waits; \
         backoff 20 ms to 1 s), then diverts the conversation: the poison message and the rest of its \
         conversation go to the dead-letter table (a conversation is one ordered stream) and the conversation \
         is ended with an error. The peers fail a poison job for good after its 3 attempts and go on with the \
         rest of its group: River with the same backoff as sbworker (a retry policy of the harness's), \
         pgmq archives it after its third read (the harness makes it visible again after the same backoff), \
         graphile-worker with its own, exp(attempts) seconds, which it does not let a user change. Checked: \
         every group without poison complete, in order, each message once; each poisoned group as the \
         contender's semantics say (sbworker: applied up to its first poison message; a peer: every other \
         message applied once, in order); sbworker's queue still enabled. Time to dead-letter: from a poison \
         message reaching the head of its group (its predecessor's reply, or the start) to its diversion or \
         its last failed attempt.\n\n\
         | contender | messages/s (with poison) | ratio to its clean headline | poison | groups poisoned | \
         dead letters | ms to dead-letter p50 | max | others unaffected | queue enabled |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        s.groups, s.per_group
    );
    for c in Contender::ALL {
        let runs: Vec<&super::poison::PoisonRun> = r.poison.iter().filter(|p| p.contender == c).collect();
        if runs.is_empty() {
            continue;
        }
        let f = |g: fn(&super::poison::PoisonRun) -> f64| spread(&runs.iter().map(|p| g(p)).collect::<Vec<_>>());
        let clean: Vec<f64> = runs
            .iter()
            .filter_map(|p| {
                runs_of(r, Workload::Headline, c, true)
                    .iter()
                    .find(|m| m.repetition == p.repetition)
                    .map(|m| p.per_second / m.per_second)
            })
            .collect();
        let enabled = match runs.iter().filter_map(|p| p.queue_enabled).collect::<Vec<_>>() {
            v if v.is_empty() => "–",
            v if v.iter().all(|&e| e) => "yes",
            _ => "**no: disabled**",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {enabled} |",
            c.label(),
            show(f(|p| p.per_second), 0),
            show(spread(&clean), 2),
            show(f(|p| p.poisoned as f64), 0),
            show(f(|p| p.groups_diverted as f64), 0),
            show(f(|p| p.dead_letters as f64), 0),
            show(f(|p| p.p50_ms_to_dead_letter), 0),
            show(f(|p| p.max_ms_to_dead_letter), 0),
            if runs.iter().all(|p| p.others_unaffected) { "yes" } else { "**no**" },
        );
    }
}

/// Workload 4, second half: the bloat run with xmin pinned, per contender and repetition.
fn bloat_section(out: &mut String, r: &Results) {
    let s = &r.sizes;
    let _ = writeln!(
        out,
        "\n## Bloat\n\nA backlog of {} × {} messages worked as in the headline for {} s while another transaction \
         holds a snapshot open (xmin pinned: no dead tuple can be vacuumed). Throughput over the first and the \
         last tenth of the run (the first second, the worker's start, left out), and the dead tuples of the \
         contender's and the bench's tables at the end (`pg_stat_user_tables`).\n\n\
         | contender | repetition | start msgs/s | end msgs/s | end / start | messages | dead tuples at the end | \
         largest | xmin pinned |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        s.bloat_groups, s.bloat_per_group, s.bloat_seconds
    );
    for c in Contender::ALL {
        for b in r.bloat.iter().filter(|b| b.contender == c) {
            let top: Vec<String> = b.top_dead.iter().take(3).map(|(t, d, _)| format!("{t} {d}")).collect();
            let _ = writeln!(
                out,
                "| {} | {} | {:.0} | {:.0} | {:.2} | {}{} | {} | {} | {} |",
                c.label(),
                b.repetition + 1,
                b.start_per_second,
                b.end_per_second,
                b.ratio,
                b.messages_handled,
                if b.drained_early { " (the backlog ran out early)" } else { "" },
                b.dead_tuples,
                top.join(", "),
                if b.xmin_pinned { "yes" } else { "**no**" },
            );
        }
    }
}

/// (target, measured, verdict) for the targets this bench measures.
fn targets(r: &Results) -> Vec<(String, String, String)> {
    let mut t = Vec::new();
    let verdict = |ok: bool, by: String| if ok { "met".to_owned() } else { format!("missed: {by}") };
    if let Some(ratio) = ratios(r, Workload::Headline, Contender::SbworkerPostgres, Contender::Limit, true) {
        t.push((
            "headline: at least 95% of the pgbench limit in every repetition".into(),
            format!(
                "{:.0}% (PostgreSQL broker; {:.0}–{:.0}%)",
                ratio.median * 100.0,
                ratio.min * 100.0,
                ratio.max * 100.0
            ),
            verdict(ratio.min >= 0.95, format!("the lowest repetition {:.0} points short", (0.95 - ratio.min) * 100.0)),
        ));
    }
    if let Some(ratio) = ratios(r, Workload::Headline, Contender::SbworkerPostgres, Contender::RiverPerGroup, true) {
        t.push((
            "headline: at least 1.15× River with a queue per group in every repetition".into(),
            format!("{:.2}× (lowest {:.2}×)", ratio.median, ratio.min),
            verdict(ratio.min >= 1.15, format!("the lowest repetition at {:.2}×", ratio.min)),
        ));
    }
    for peer in Contender::ALL.into_iter().filter(|c| c.is_peer()) {
        let runs = runs_of(r, Workload::Headline, peer, true);
        if runs.is_empty() {
            continue;
        }
        let broken = runs.iter().any(|m| m.out_of_order.unwrap_or(0) > 0 || m.exactly_once == Some(false));
        if let Some(ratio) = ratios(r, Workload::Headline, Contender::SbworkerPostgres, peer, true) {
            t.push((
                format!("headline: ahead of {}", peer.label()),
                format!("{:.2}× its throughput", ratio.median),
                if broken {
                    "not ranked: the peer broke order or exactly-once".to_owned()
                } else {
                    verdict(ratio.median > 1.0, format!("at {:.0}% of it", ratio.median * 100.0))
                },
            ));
        }
    }
    let ours = |c: Contender| c == Contender::SbworkerPostgres;
    if let Some(b) = spread(&r.bloat.iter().filter(|b| ours(b.contender)).map(|b| b.ratio).collect::<Vec<_>>()) {
        t.push((
            format!(
                "bloat: throughput after {:.0} s with xmin pinned at least 70% of the start (PostgreSQL broker)",
                r.sizes.bloat_seconds
            ),
            format!("{:.0}%", b.median * 100.0),
            verdict(b.median >= 0.7, format!("{:.0} points short", (0.7 - b.median) * 100.0)),
        ));
    }
    let p99: Vec<f64> = r.open_loop.iter().filter(|o| o.rate == 1000 && ours(o.contender)).map(|o| o.p99_ms).collect();
    if let Some(s) = spread(&p99) {
        t.push((
            "open loop at 1,000/s: p99 under 25 ms (PostgreSQL broker)".into(),
            format!("{:.1} ms", s.median),
            verdict(s.median < 25.0, format!("{:.1}× over", s.median / 25.0)),
        ));
    }
    // A pipeline whose end state was wrong meets no target.
    fn unverified<'a>(mut runs: impl Iterator<Item = &'a super::pipeline::PipelineRun>) -> bool {
        runs.any(|p| !p.verified)
    }
    let pipeline_verdict = |ok: bool, by: String, wrong: bool| {
        if wrong { "missed: a run's end state was wrong".to_owned() } else { verdict(ok, by) }
    };
    if let Some(s) = spread(&pipeline_ratios(r, 4)) {
        t.push((
            "pipeline: at least 0.5× its pgbench limit with 4 readers, in every repetition".into(),
            format!("{:.2}× ({:.2}–{:.2}×)", s.median, s.min, s.max),
            pipeline_verdict(
                s.min >= 0.5,
                format!("the lowest repetition at {:.2}×", s.min),
                unverified(sbworker_pipeline(r, 4)),
            ),
        ));
    }
    // Against the business limit, within each repetition: the floor a queue adds to (no
    // target is set for it; the ratio says how close each comes).
    let against_business = [
        ("sbworker with 4 readers".to_owned(), business_ratios(r, sbworker_pipeline(r, 4))),
        (
            format!("the {} pipeline", super::pipeline::RIVER),
            business_ratios(r, peer_pipeline(r, super::pipeline::RIVER)),
        ),
    ];
    for (who, ratios) in against_business {
        if let Some(s) = spread(&ratios) {
            t.push((
                format!("pipeline against its business limit (the business work with no queue): {who}"),
                format!("{:.2}× ({:.2}–{:.2}×)", s.median, s.min, s.max),
                "reported: no target set".to_owned(),
            ));
        }
    }
    if let Some(s) = spread(&open_loop_pipeline(r).map(|p| p.p99_ms).collect::<Vec<_>>()) {
        t.push((
            "pipeline, open loop at half its capacity (4 readers): commit-to-stored p99 under 50 ms, in every \
             repetition"
                .into(),
            format!("{:.0} ms ({:.0}–{:.0} ms)", s.median, s.min, s.max),
            pipeline_verdict(
                s.max < 50.0,
                format!("the highest repetition at {:.0} ms", s.max),
                unverified(open_loop_pipeline(r)),
            ),
        ));
    }
    // Against the River pipeline, within each repetition.
    let ahead: Vec<f64> = sbworker_pipeline(r, 4)
        .filter_map(|p| {
            let river = peer_pipeline(r, super::pipeline::RIVER).find(|q| q.repetition == p.repetition)?;
            Some(p.edits_per_second / river.edits_per_second)
        })
        .collect();
    if let Some(s) = spread(&ahead) {
        t.push((
            format!("pipeline: ahead of the {} pipeline with 4 readers, in every repetition", super::pipeline::RIVER),
            format!("{:.2}× its edits/s ({:.2}–{:.2}×)", s.median, s.min, s.max),
            pipeline_verdict(
                s.min > 1.0,
                format!("the lowest repetition at {:.2}×", s.min),
                unverified(sbworker_pipeline(r, 4)),
            ),
        ));
    }
    // Server time per call in the real pipeline with 4 readers (its top-level statements).
    for (name, prefix, limit) in [
        ("`sb.send`", "SELECT sb.send($1", 0.3),
        ("receiving one group", "SELECT message_id", 0.3),
        ("`END CONVERSATION`", "SELECT sb.end_conversation(", 0.2),
    ] {
        let means: Vec<f64> = r
            .pipeline
            .iter()
            .filter(|p| p.peer.is_none() && p.paced.is_none() && p.readers == 4)
            .flat_map(|p| p.statements.iter())
            .filter(|st| st.top_level && st.statement.starts_with(prefix))
            .map(|st| st.mean_ms)
            .collect();
        if let Some(s) = spread(&means) {
            t.push((
                format!("server time per call: {name} at most {limit} ms (pipeline, 4 readers)"),
                format!("{:.2} ms", s.median),
                verdict(s.median <= limit, format!("{:.1}× over", s.median / limit)),
            ));
        }
    }
    if let Some(worst) = r.web.iter().max_by(|a, b| a.median_ms.total_cmp(&b.median_ms)) {
        t.push((
            format!(
                "web page: every page within {} ms (median) at {} keys and {} dead letters",
                super::web::LIMIT_MS,
                worst.keys,
                worst.letters
            ),
            format!("slowest: {} at {:.1} ms", worst.page, worst.median_ms),
            verdict(
                worst.median_ms <= super::web::LIMIT_MS,
                format!("{:.1}× over", worst.median_ms / super::web::LIMIT_MS),
            ),
        ));
    }
    if let Some(s) = spread(&r.engine_per_second) {
        t.push((
            "engine: 40,000 Vraags/s per core".into(),
            format!("{:.0}/s", s.median),
            verdict(s.median >= 40_000.0, format!("{:.1}× too slow", 40_000.0 / s.median.max(1e-9))),
        ));
    }
    let rss: Vec<f64> = r
        .runs
        .iter()
        .filter(|m| matches!(m.contender, Contender::SbworkerPostgres | Contender::SbworkerTds))
        .filter_map(|m| m.worker_peak_rss_mib)
        .collect();
    if let Some(s) = spread(&rss) {
        t.push((
            format!(
                "worker RSS under 50 MiB ({} readers here: the {}-connection budget)",
                r.sizes.readers, r.sizes.connections
            ),
            format!("{:.1} MiB at most", s.max),
            verdict(s.max < 50.0, format!("{:.1} MiB over", s.max - 50.0)),
        ));
    }
    t
}

/// Bars: headline messages/s per contender, synchronous commit on and off.
fn headline_svg(r: &Results) -> String {
    let mut bars = Vec::new();
    for c in Contender::ALL {
        for sync in [true, false] {
            // Only what ran: a bar at 0 for a contender that did not run would read as a
            // measurement.
            if let Some(v) = field(&runs_of(r, Workload::Headline, c, sync), |m| Some(m.per_second)) {
                bars.push((format!("{} ({})", c.key(), if sync { "sync" } else { "async" }), v.median));
            }
        }
    }
    bar_chart("Headline: messages per second (median)", &bars)
}

/// Lines: pipeline edits/s against readers.
fn pipeline_svg(r: &Results) -> String {
    let points: Vec<(f64, f64)> = r
        .sizes
        .pipeline_readers
        .iter()
        .filter_map(|&n| {
            let v: Vec<f64> = sbworker_pipeline(r, n).map(|p| p.edits_per_second).collect();
            spread(&v).map(|s| (f64::from(n), s.median))
        })
        .collect();
    line_chart("Pipeline: recalculations per second by readers (sbworker, PostgreSQL broker)", &points)
}

fn bar_chart(title: &str, bars: &[(String, f64)]) -> String {
    let (w, h, left, bottom) = (760.0, 60.0 + 36.0 * bars.len() as f64, 260.0, 30.0);
    let max = bars.iter().map(|b| b.1).fold(1.0, f64::max);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"13\">\n\
         <text x=\"10\" y=\"22\" font-size=\"15\">{}</text>\n",
        escape(title)
    );
    for (i, (label, v)) in bars.iter().enumerate() {
        let y = 40.0 + 36.0 * i as f64;
        let len = (w - left - 90.0) * v / max;
        let _ = writeln!(
            s,
            "<text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"end\">{}</text>\
             <rect x=\"{left}\" y=\"{:.0}\" width=\"{len:.1}\" height=\"24\" fill=\"#4a7ab5\"/>\
             <text x=\"{:.1}\" y=\"{:.0}\">{v:.0}</text>",
            left - 8.0,
            y + 17.0,
            escape(label),
            y,
            left + len + 6.0,
            y + 17.0
        );
    }
    let _ = writeln!(s, "<text x=\"{left}\" y=\"{:.0}\">0</text></svg>", h - bottom + 20.0);
    s
}

fn line_chart(title: &str, points: &[(f64, f64)]) -> String {
    let (w, h, left, top, bottom) = (640.0, 360.0, 70.0, 40.0, 50.0);
    let xmax = points.iter().map(|p| p.0).fold(1.0, f64::max);
    let ymax = points.iter().map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let x = |v: f64| left + (w - left - 30.0) * v / xmax;
    let y = |v: f64| h - bottom - (h - top - bottom) * v / ymax;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"13\">\n\
         <text x=\"10\" y=\"22\" font-size=\"15\">{}</text>\n\
         <line x1=\"{left}\" y1=\"{:.0}\" x2=\"{:.0}\" y2=\"{:.0}\" stroke=\"black\"/>\n\
         <line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{:.0}\" stroke=\"black\"/>\n\
         <text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"middle\">readers</text>\n\
         <text x=\"{:.0}\" y=\"{top}\" text-anchor=\"end\">{ymax:.0}/s</text>\n",
        escape(title),
        h - bottom,
        w - 20.0,
        h - bottom,
        h - bottom,
        (w + left) / 2.0,
        h - 12.0,
        left - 6.0,
    );
    let path: Vec<String> = points.iter().map(|&(a, b)| format!("{:.1},{:.1}", x(a), y(b))).collect();
    let _ =
        writeln!(s, "<polyline fill=\"none\" stroke=\"#4a7ab5\" stroke-width=\"2\" points=\"{}\"/>", path.join(" "));
    for &(a, b) in points {
        let _ = writeln!(
            s,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"#4a7ab5\"/><text x=\"{:.1}\" y=\"{:.1}\">{b:.0}</text>\
             <text x=\"{:.1}\" y=\"{:.0}\" text-anchor=\"middle\">{a:.0}</text>",
            x(a),
            y(b),
            x(a) + 6.0,
            y(b) - 6.0,
            x(a),
            h - bottom + 18.0
        );
    }
    s.push_str("</svg>\n");
    s
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_spreads() {
        assert_eq!(spread(&[3.0, 1.0, 2.0]), Some(Spread { median: 2.0, min: 1.0, max: 3.0 }));
        assert_eq!(spread(&[4.0, 1.0]).unwrap().median, 2.5);
        assert_eq!(spread(&[]), None);
        assert_eq!(show(spread(&[5.0]), 1), "5.0");
        assert_eq!(show(spread(&[1.0, 3.0, 2.0]), 0), "2 (1–3)");
    }

    /// A recorded run of the headline alone (the full size, three repetitions): its report
    /// has the headline's tables and the targets it measured, and no empty section for the
    /// parts it left out.
    #[test]
    fn a_report_shows_only_the_parts_that_ran() {
        let r: Results =
            serde_json::from_str(include_str!("../../../../bench/results/2026-12-03e-full-headline-results.json"))
                .unwrap();
        let md = markdown(&r);
        for present in ["## Headline", "### synchronous_commit = off", "## Targets", "Left out: the parts burn-down"] {
            assert!(md.contains(present), "{present} missing:\n{md}");
        }
        for absent in ["## Burn-down", "## Open loop", "## Poison", "## Bloat", "## The real pipeline", "engine alone"]
        {
            assert!(!md.contains(absent), "{absent} shown although it did not run:\n{md}");
        }
        assert!(md.contains("| sbworker, PostgreSQL broker | 740 (678–867) | 0.66 (0.57–0.67) |"), "{md}");
        assert!(
            md.contains(
                "| headline: at least 95% of the pgbench limit in every repetition | 66% (PostgreSQL broker; 57–67%) \
                 | missed: the lowest repetition 38 points short |"
            ),
            "{md}"
        );
        assert!(md.contains("| headline: at least 1.15× River with a queue per group in every repetition | "), "{md}");
    }

    /// The pipeline's ratio to its limit is taken within each repetition, and the target
    /// is judged by the lowest repetition.
    #[test]
    fn the_pipeline_is_set_against_its_limit_per_repetition() {
        use super::super::pipeline::{PipelineLimit, PipelineRun};
        let mut r: Results =
            serde_json::from_str(include_str!("../../../../bench/results/2026-12-03e-full-headline-results.json"))
                .unwrap();
        assert!(r.pipeline_limit.is_empty(), "results from before the pipeline limit read as having none");
        let run = |repetition, edits_per_second| PipelineRun {
            peer: None,
            readers: 4,
            paced: None,
            employees: 400,
            repetition,
            import_per_second: 500.0,
            edits: 1200,
            edits_per_second,
            edit_rate: edits_per_second,
            p50_ms: 10.0,
            p99_ms: 20.0,
            verified: true,
            statements: Vec::new(),
            work: None,
        };
        let limit = |repetition, per_second| PipelineLimit {
            repetition,
            edits: 1200,
            clients: 8,
            per_second,
            commits_per_edit: 4.0,
            wal_bytes_per_edit: 3000.0,
        };
        // 300/1,000 in the first repetition, 480/600 in the second: 0.30× and 0.80×.
        r.pipeline = vec![run(0, 300.0), run(1, 480.0)];
        r.pipeline_limit = vec![limit(0, 1000.0), limit(1, 600.0)];
        assert_eq!(pipeline_ratios(&r, 4), vec![0.3, 0.8]);
        assert!(pipeline_ratios(&r, 8).is_empty());
        let md = markdown(&r);
        assert!(md.contains("| 4 | 500 | 390 (300–480) | 0.55 (0.30–0.80) |"), "{md}");
        assert!(md.contains("| limit: pgbench | – | 800 (600–1000) | 1 |"), "{md}");
        assert!(
            md.contains(
                "| pipeline: at least 0.5× its pgbench limit with 4 readers, in every repetition | 0.55× \
                 (0.30–0.80×) | missed: the lowest repetition at 0.30× |"
            ),
            "{md}"
        );
        assert!(!md.contains("River 0.5 pipeline"), "no River row or target when River did not run:\n{md}");
        // A run whose end state was wrong: the target is missed whatever the ratio.
        r.pipeline[1].verified = false;
        assert!(markdown(&r).contains("0.55× (0.30–0.80×) | missed: a run's end state was wrong |"));
        r.pipeline[1].verified = true;
        // River's pipeline: 200/s and 480/s, so sbworker is 1.50× and 1.00× of it; its own
        // runs are not counted as sbworker's readers.
        let river = |repetition, edits_per_second| PipelineRun {
            peer: Some(super::super::pipeline::RIVER.to_owned()),
            readers: 7,
            ..run(repetition, edits_per_second)
        };
        r.pipeline.extend([river(0, 200.0), river(1, 480.0)]);
        assert_eq!(pipeline_ratios(&r, 4), vec![0.3, 0.8]);
        let md = markdown(&r);
        assert!(md.contains("| River 0.5: 7 workers, pool 8 | 500 | 340 (200–480) | 0.50 (0.20–0.80) |"), "{md}");
        assert!(
            md.contains(
                "| pipeline: ahead of the River 0.5 pipeline with 4 readers, in every repetition | 1.25× its \
                 edits/s (1.00–1.50×) | missed: the lowest repetition at 1.00× |"
            ),
            "{md}"
        );
        // The open loop at half capacity: its p99 judged by the worst repetition, and not
        // counted among the closed runs.
        let open =
            |repetition, paced: f64, p99_ms| PipelineRun { paced: Some(paced), p99_ms, ..run(repetition, paced) };
        r.pipeline.extend([open(0, 150.0, 40.0), open(1, 240.0, 60.0)]);
        assert_eq!(pipeline_ratios(&r, 4), vec![0.3, 0.8]);
        let md = markdown(&r);
        assert!(
            md.contains("| 4, open loop: edits paced at 195 (150–240)/s (half the closed run's edit rate) |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| pipeline, open loop at half its capacity (4 readers): commit-to-stored p99 under 50 ms, in every \
                 repetition | 50 ms (40–60 ms) | missed: the highest repetition at 60 ms |"
            ),
            "{md}"
        );
        // The work per request: no table without counts; with them, a row per run kind,
        // each with its spread over the repetitions.
        assert!(!md.contains("The work per request, counted"), "{md}");
        use super::super::pipeline::WorkPerRequest;
        for (p, n) in r.pipeline.iter_mut().zip([20.0, 30.0, 8.0, 9.0, 40.0, 50.0]) {
            p.work = Some(WorkPerRequest { sent: n, nested: n * 10.0, buffers: n * 100.0 });
        }
        let md = markdown(&r);
        assert!(
            md.contains("| sbworker, 4 readers | 25.0 (20.0–30.0) | 250.0 (200.0–300.0) | 2500 (2000–3000) |"),
            "{md}"
        );
        assert!(md.contains("| sbworker, 4 readers, open loop | 45.0 (40.0–50.0) |"), "{md}");
        assert!(md.contains("| River 0.5: 7 workers | 8.5 (8.0–9.0) | 85.0 (80.0–90.0) | 850 (800–900) |"), "{md}");
    }

    /// The business limit sets the pipeline and River's pipeline against the business work
    /// with no queue, within each repetition; the work per request comes from the
    /// counting runs, not from the timed ones; results from before both render as they did.
    #[test]
    fn the_pipeline_is_set_against_its_business_limit_and_counted_apart() {
        use super::super::pipeline::{BusinessLimit, Counting, PipelineLimit, PipelineRun, WorkPerRequest};
        let old: Results =
            serde_json::from_str(include_str!("../../../../bench/results/2026-12-06-targets-results.json")).unwrap();
        assert!(old.business_limit.is_empty() && old.counting.is_none(), "older results read as having neither");
        let md = markdown(&old);
        assert!(md.contains("| readers | import requests/s | edits/s | ratio to the limit | p50 ms |"), "{md}");
        assert!(!md.contains("business limit"), "{md}");
        assert!(md.contains("| sbworker, 4 readers | 25."), "the timed runs' counts still shown:\n{md}");
        let run = |repetition, peer: Option<&str>, edits_per_second| PipelineRun {
            peer: peer.map(str::to_owned),
            readers: if peer.is_some() { 7 } else { 4 },
            paced: None,
            employees: 400,
            repetition,
            import_per_second: 500.0,
            edits: 1200,
            edits_per_second,
            edit_rate: edits_per_second,
            p50_ms: 10.0,
            p99_ms: 20.0,
            verified: true,
            statements: Vec::new(),
            work: None,
        };
        let river = Some(super::super::pipeline::RIVER);
        let business = |repetition, per_second| BusinessLimit {
            repetition,
            edits: 1200,
            requests: 1100,
            clients: 8,
            per_second,
            commits_per_request: 2.2,
            wal_bytes_per_request: 9000.0,
            work: None,
        };
        let limit = |repetition, per_second| PipelineLimit {
            repetition,
            edits: 1200,
            clients: 8,
            per_second,
            commits_per_edit: 4.0,
            wal_bytes_per_edit: 3000.0,
        };
        let mut r = old.clone();
        r.sizes.pipeline_readers = vec![4];
        // sbworker 300 and 480/s, River 200 and 480/s, against 600 and 960/s: sbworker at
        // 0.50× in both repetitions, River at 0.33× and 0.50×.
        r.pipeline = vec![run(0, None, 300.0), run(1, None, 480.0), run(0, river, 200.0), run(1, river, 480.0)];
        r.pipeline_limit = vec![limit(0, 1200.0), limit(1, 1920.0)];
        r.business_limit = vec![business(0, 600.0), business(1, 960.0)];
        assert_eq!(business_ratios(&r, sbworker_pipeline(&r, 4)), vec![0.5, 0.5]);
        let md = markdown(&r);
        assert!(md.contains("| 4 | 500 | 390 (300–480) | 0.25 | 0.50 | 10 | 20 | yes |"), "{md}");
        assert!(
            md.contains("| River 0.5: 7 workers, pool 8 | 500 | 340 (200–480) | 0.21 (0.17–0.25) | 0.42 (0.33–0.50) |"),
            "{md}"
        );
        assert!(md.contains("| limit: pgbench | – | 1560 (1200–1920) | 1 | 2.00 | – | – | yes |"), "{md}");
        assert!(
            md.contains("| business limit: pgbench, no queue | – | 780 (600–960) | 0.50 | 1 | – | – | yes |"),
            "{md}"
        );
        assert!(md.contains("The business limit per request: 2.20 commits, 9000 WAL bytes"), "{md}");
        assert!(
            md.contains(
                "| pipeline against its business limit (the business work with no queue): sbworker with 4 readers | \
                 0.50× (0.50–0.50×) | reported: no target set |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| pipeline against its business limit (the business work with no queue): the River 0.5 pipeline | \
                 0.42× (0.33–0.50×) | reported: no target set |"
            ),
            "{md}"
        );
        // The work per request from the counting runs alone (a timed run's counts, which
        // a timed run no longer makes, are not shown beside them).
        assert!(!md.contains("The work per request, counted"), "{md}");
        r.pipeline[0].work = Some(WorkPerRequest { sent: 99.0, nested: 999.0, buffers: 9999.0 });
        let work = |n: f64| Some(WorkPerRequest { sent: n, nested: n * 10.0, buffers: n * 100.0 });
        r.counting = Some(Counting {
            pipeline: vec![
                PipelineRun { work: work(20.0), ..run(0, None, 250.0) },
                PipelineRun { work: work(8.0), ..run(0, river, 190.0) },
            ],
            business_limit: Some(BusinessLimit { work: work(4.0), ..business(0, 500.0) }),
        });
        let md = markdown(&r);
        assert!(md.contains("a counting run per contender, once per bench"), "{md}");
        assert!(md.contains("| sbworker, 4 readers | 20.0 | 200.0 | 2000 |"), "{md}");
        assert!(md.contains("| River 0.5: 7 workers | 8.0 | 80.0 | 800 |"), "{md}");
        assert!(md.contains("| business limit: pgbench, no queue (its edits alone) | 4.0 | 40.0 | 400 |"), "{md}");
        assert!(!md.contains("| 99.0 |"), "{md}");
        // The counting runs' rates are not the timed runs': the rows above are unchanged.
        assert!(md.contains("| 4 | 500 | 390 (300–480) | 0.25 | 0.50 | 10 | 20 | yes |"), "{md}");
        assert!(md.contains("Rates and latencies come from the timed runs"), "{md}");
    }

    /// The headline plot has a bar for each contender and mode that ran, none for the rest.
    #[test]
    fn the_headline_plot_shows_only_what_ran() {
        let mut r: Results =
            serde_json::from_str(include_str!("../../../../bench/results/2026-12-03e-full-headline-results.json"))
                .unwrap();
        let svg = headline_svg(&r);
        assert!(svg.contains("sbworker-pg (sync)"), "{svg}");
        r.runs.retain(|run| run.contender == Contender::SbworkerPostgres);
        let svg = headline_svg(&r);
        assert!(svg.contains("sbworker-pg (sync)"), "{svg}");
        for c in Contender::ALL.into_iter().filter(|c| *c != Contender::SbworkerPostgres) {
            assert!(!svg.contains(&format!(">{} (", c.key())), "{} drawn though it did not run:\n{svg}", c.key());
        }
    }
}
