//! The work budget: what a fixed pipeline load and a fixed headline load make
//! PostgreSQL do per request, counted by `pg_stat_statements` on a cluster of the
//! test's own, may not exceed the budget in `tests/work_budget.toml`. Statements and
//! buffers are counts, which the machine's speed hardly moves (unlike rates), so a
//! change that makes the broker's hot paths do more work fails here, where the bench's
//! rates would hide it in their spread. The figures are printed on success too:
//! `cargo test --features tools --test tests -- work_budget --nocapture`, and
//! `docs/benchmarks.md` says how to set the budget again.

use std::path::Path;

use sbworker::bench::budget::{self, HeadlineWork};
use sbworker::bench::runs::Shape;

/// The pipeline load: employees imported, then three edits each by four planners,
/// worked by this many calculation readers with conversation reuse (as the bench's
/// targets run it: `--dialog-reuse-idle-seconds 10`).
const EMPLOYEES: usize = 200;
const READERS: u32 = 4;
const REUSE_IDLE_SECONDS: u32 = 10;

/// The headline load: groups of in-order messages, with the bench's readers for
/// sbworker on the PostgreSQL broker; run this many times, each figure the lowest of
/// the runs. Its 50 business rows and their queue rows are updated 20 times each by
/// 7 readers at once: how long their dead versions wait for pruning depends on how
/// the readers are scheduled, and on a busy machine one run in several touched up to a
/// quarter more buffers. What a change adds to the work it adds to every run, so the
/// lowest of three still shows it.
const HEADLINE: Shape = Shape { groups: 50, per_group: 20, readers: 7 };
const HEADLINE_RUNS: usize = 3;

/// One measured figure and its budget.
struct Figure {
    key: &'static str,
    what: &'static str,
    /// Each run's measurement (the pipeline's one, the headline's three).
    runs: Vec<f64>,
    budget: f64,
}

impl Figure {
    /// What is held against the budget: the lowest of the runs.
    fn measured(&self) -> f64 {
        self.runs.iter().copied().fold(f64::INFINITY, f64::min)
    }

    fn over(&self) -> bool {
        self.measured() > self.budget
    }
}

/// The budget of `key` (`pipeline.sent`) in the budget file: its `budget`, checked to
/// be no lower than the measurements it records and to say when and where they were made.
fn budget_of(file: &toml::Value, key: &str) -> f64 {
    let (load, figure) = key.split_once('.').expect("load.figure");
    let entry = file.get(load).and_then(|l| l.get(figure)).unwrap_or_else(|| panic!("{key} is not in the budget"));
    let number = |v: &toml::Value| v.as_float().or_else(|| v.as_integer().map(|i| i as f64));
    let budget = entry.get("budget").and_then(number).unwrap_or_else(|| panic!("{key}.budget is not a number"));
    let measured: Vec<f64> = entry
        .get("measured")
        .and_then(|m| m.as_array())
        .map(|a| a.iter().filter_map(number).collect())
        .unwrap_or_default();
    assert!(!measured.is_empty(), "{key}: the budget records no measurements");
    for field in ["date", "commit"] {
        assert!(entry.get(field).and_then(|v| v.as_str()).is_some(), "{key}: the budget records no {field}");
    }
    let max = measured.iter().copied().fold(f64::MIN, f64::max);
    assert!(budget >= max, "{key}: the budget {budget} is below its own measurement {max}");
    budget
}

fn table(figures: &[Figure]) -> String {
    let mut out = format!("{:<20} {:>10} {:>10} {:>7}  {:<41} runs\n", "figure", "measured", "budget", "used", "what");
    for f in figures {
        let runs: Vec<String> = f.runs.iter().map(|r| format!("{r:.2}")).collect();
        out.push_str(&format!(
            "{:<20} {:>10.2} {:>10.2} {:>6.1}%  {:<41} {}{}\n",
            f.key,
            f.measured(),
            f.budget,
            100.0 * f.measured() / f.budget,
            f.what,
            runs.join(" "),
            if f.over() { "  OVER THE BUDGET" } else { "" }
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_the_work_per_request_stays_within_its_budget() {
    let text = std::fs::read_to_string(crate::common::root().join("tests/work_budget.toml")).unwrap();
    let file: toml::Value = toml::from_str(&text).expect("tests/work_budget.toml is TOML");
    let world = budget::world().expect("the work budget's cluster starts");
    let dir = crate::common::calc::TempDir::new("work-budget");

    let started = std::time::Instant::now();
    let pipeline = budget::pipeline(&world, EMPLOYEES, READERS, REUSE_IDLE_SECONDS).await.unwrap();
    let pipeline_seconds = started.elapsed().as_secs_f64();
    let started = std::time::Instant::now();
    let mut headline: Vec<HeadlineWork> = Vec::new();
    for run in 0..HEADLINE_RUNS {
        let bin = Path::new(env!("CARGO_BIN_EXE_sbworker"));
        headline.push(budget::headline(&world, bin, HEADLINE, run, &dir.0).await.unwrap());
    }
    let headline_seconds = started.elapsed().as_secs_f64();

    let each = |f: fn(&HeadlineWork) -> f64| headline.iter().map(f).collect::<Vec<f64>>();
    let figures: Vec<Figure> = [
        ("pipeline.sent", "statements the clients sent, per edit", vec![pipeline.work.sent]),
        ("pipeline.nested", "statements run inside them, per edit", vec![pipeline.work.nested]),
        ("pipeline.buffers", "shared buffers touched, per edit", vec![pipeline.work.buffers]),
        ("headline.sent", "statements the clients sent, per message", each(|h| h.work.sent)),
        ("headline.nested", "statements run inside them, per message", each(|h| h.work.nested)),
        ("headline.buffers", "shared buffers touched, per message", each(|h| h.work.buffers)),
        ("headline.wal_bytes", "WAL bytes written, per message", each(|h| h.wal_bytes)),
    ]
    .into_iter()
    .map(|(key, what, runs)| Figure { key, what, runs, budget: budget_of(&file, key) })
    .collect();
    let report = format!(
        "the work budget (tests/work_budget.toml; setting it again: docs/benchmarks.md)\n\
         pipeline: {EMPLOYEES} employees, {} requests, {READERS} readers, reuse after {REUSE_IDLE_SECONDS} s idle, \
         {pipeline_seconds:.1} s; headline: {} groups × {} messages, {} readers, {HEADLINE_RUNS} runs (the lowest \
         counts), {headline_seconds:.1} s\n{}",
        pipeline.requests,
        HEADLINE.groups,
        HEADLINE.per_group,
        HEADLINE.readers,
        table(&figures)
    );
    println!("{report}");
    let over: Vec<&str> = figures.iter().filter(|f| f.over()).map(|f| f.key).collect();
    assert!(over.is_empty(), "over the work budget: {}\n{report}", over.join(", "));
}
