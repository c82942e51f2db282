//! `sbworker bench --quick` as a process: every part of the bench at a tiny size, so the
//! bench keeps working. Its figures are not measurements (too small); what is checked is
//! that every part ran and that the headline's verification held for every contender.

use tokio::process::Command;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_the_quick_bench_runs_every_part_and_writes_its_report() {
    let dir = crate::common::calc::TempDir::new("bench-quick");
    let out = crate::common::within(
        600,
        "the command ends",
        Command::new(env!("CARGO_BIN_EXE_sbworker"))
            .args(["bench", "--quick", "--skip-peers", "--out"])
            .arg(&dir.0)
            .output(),
    )
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report = std::fs::read_to_string(dir.0.join("report.md")).unwrap();
    for section in [
        "## Settings",
        "## Headline",
        "synchronous_commit = off",
        "## Burn-down",
        "## Open loop",
        "## Poison",
        "## Bloat",
        "## The real pipeline",
        "## The split topology: the cost of the route",
        "## Targets",
    ] {
        assert!(report.contains(section), "{section} missing:\n{report}");
    }
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.0.join("results.json")).unwrap()).unwrap();
    let runs = results["runs"].as_array().unwrap();
    // Headline: 3 contenders × synchronous commit on and off; burn-down: 2 contenders.
    assert_eq!(runs.len(), 8, "{results}");
    for r in runs {
        assert!(r["per_second"].as_f64().unwrap() > 0.0, "{r}");
        if r["workload"] == "headline" {
            assert_eq!(r["exactly_once"], true, "{r}");
            if r["contender"] != "limit" {
                assert_eq!(r["out_of_order"], 0, "{r}");
            }
        }
    }
    // Workloads 3 and 4 (the peers left out): sbworker on both transports.
    let contenders = |part: &str| -> Vec<String> {
        results[part].as_array().unwrap().iter().map(|r| r["contender"].as_str().unwrap().to_owned()).collect()
    };
    for part in ["open_loop", "poison", "bloat"] {
        assert_eq!(contenders(part), ["sbworker-postgres", "sbworker-tds"], "{part}: {results}");
    }
    for o in results["open_loop"].as_array().unwrap() {
        assert!(o["measured"].as_i64().unwrap() > 0 && o["p99_ms"].as_f64().unwrap() > 0.0, "{o}");
    }
    // Poison: 1% of the messages (here one) diverted, nothing else touched, the queue on.
    for poison in results["poison"].as_array().unwrap() {
        assert_eq!(poison["poisoned"], 1, "{poison}");
        assert_eq!(poison["groups_diverted"], 1, "{poison}");
        assert!(poison["dead_letters"].as_i64().unwrap() >= 1, "{poison}");
        assert_eq!(poison["others_unaffected"], true, "{poison}");
        assert_eq!(poison["queue_enabled"], true, "{poison}");
    }
    // Bloat: it ran with xmin pinned and counted what it handled and left dead.
    for bloat in results["bloat"].as_array().unwrap() {
        assert_eq!(bloat["xmin_pinned"], true, "{bloat}");
        assert!(bloat["messages_handled"].as_i64().unwrap() > 0, "{bloat}");
        assert!(bloat["start_per_second"].as_f64().unwrap() > 0.0, "{bloat}");
        assert!(bloat["dead_tuples"].as_i64().unwrap() > 0, "{bloat}");
    }
    // The pipeline: closed with 1 and 4 readers, then the open loop with 4 readers at
    // half the rate the planners made their edits in the closed run.
    let pipeline = results["pipeline"].as_array().unwrap();
    assert_eq!(pipeline.len(), 3, "{results}");
    let paced = pipeline[2]["paced"].as_f64().expect("the third run is the open loop");
    assert!((paced - pipeline[1]["edit_rate"].as_f64().unwrap() / 2.0).abs() < 1e-6, "{results}");
    assert!(pipeline.iter().all(|p| p["verified"] == true), "{results}");
    // The pipeline's limit: once per repetition, every edit made (3 per employee, rounded
    // up to whole rounds of its 8 clients), at a rate.
    let limit = results["pipeline_limit"].as_array().unwrap();
    assert_eq!(limit.len(), 1, "{results}");
    assert_eq!(limit[0]["edits"], 40, "{results}");
    assert!(limit[0]["per_second"].as_f64().unwrap() > 0.0, "{results}");
    // The business limit: once per repetition, 3 edits per employee over its 12 clients,
    // each request answered and stored (its run checks that), at a rate; timed, so no
    // counts of its own.
    let business = results["business_limit"].as_array().unwrap();
    assert_eq!(business.len(), 1, "{results}");
    assert_eq!(business[0]["edits"], 36, "{results}");
    let requests = business[0]["requests"].as_i64().unwrap();
    assert!(requests > 0 && requests <= 40, "{results}");
    assert!(business[0]["per_second"].as_f64().unwrap() > 0.0, "{results}");
    assert!(business[0]["work"].is_null(), "{results}");
    // Fair timing: the timed runs track top-level statements only and count no work; a
    // counting run per contender (here sbworker with 4 readers, and the business limit)
    // counts it, nested statements included.
    assert!(pipeline.iter().all(|p| p["work"].is_null()), "{results}");
    let counting = &results["counting"];
    let counted = counting["pipeline"].as_array().unwrap();
    assert_eq!(counted.len(), 1, "{results}");
    assert_eq!(counted[0]["readers"], 4, "{results}");
    assert_eq!(counted[0]["verified"], true, "{results}");
    for work in [&counted[0]["work"], &counting["business_limit"]["work"]] {
        assert!(work["sent"].as_f64().unwrap() > 0.0, "{results}");
        assert!(work["nested"].as_f64().unwrap() > 0.0, "{results}");
        assert!(work["buffers"].as_f64().unwrap() > 0.0, "{results}");
    }
    for line in [
        "| readers | import requests/s | edits/s | ratio to the limit | ratio to the business limit |",
        "| business limit: pgbench, no queue |",
        "| pipeline against its business limit (the business work with no queue): sbworker with 4 readers |",
        "| business limit: pgbench, no queue (its edits alone) |",
    ] {
        assert!(report.contains(line), "{line} missing:\n{report}");
    }
    // The split topology: the same pipeline in one database and over two servers joined
    // by a route, both verified, the work counted on both servers.
    let split = results["split"].as_array().unwrap();
    assert_eq!(split.len(), 1, "{results}");
    for arm in ["single", "split"] {
        let p = &split[0][arm];
        assert_eq!(p["verified"], true, "{arm}: {results}");
        assert!(p["edits_per_second"].as_f64().unwrap() > 0.0, "{arm}: {results}");
    }
    assert!(results["engine_per_second"][0].as_f64().unwrap() > 0.0);
    for plot in ["headline.svg", "pipeline.svg"] {
        assert!(std::fs::read_to_string(dir.0.join(plot)).unwrap().starts_with("<svg"), "{plot}");
    }
}

/// The pipeline with several groups per transaction (`--groups-per-transaction`): every
/// run's end state verified (latest wins, nothing left), and the report says how it ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_the_quick_pipeline_with_several_groups_per_transaction_verifies() {
    let dir = crate::common::calc::TempDir::new("bench-quick-groups");
    let out = crate::common::within(
        600,
        "the command ends",
        Command::new(env!("CARGO_BIN_EXE_sbworker"))
            .args(["bench", "--quick", "--skip-peers", "--parts", "pipeline", "--groups-per-transaction", "4", "--out"])
            .arg(&dir.0)
            .output(),
    )
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.0.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["sizes"]["pipeline_groups_per_transaction"], 4, "{results}");
    let runs = results["pipeline"].as_array().unwrap();
    assert!(runs.len() >= 3, "{results}");
    for r in runs {
        assert_eq!(r["verified"], true, "{r}");
        assert!(r["edits_per_second"].as_f64().unwrap() > 0.0, "{r}");
    }
    let report = std::fs::read_to_string(dir.0.join("report.md")).unwrap();
    assert!(report.contains("took up to 4 conversation groups per transaction"), "{report}");
}
