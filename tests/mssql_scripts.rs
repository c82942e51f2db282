//! The SQL Server scripts cannot run here (no SQL Server), so they are checked as a
//! reader would check them: every batch idempotent, each object created in exactly one
//! place, and the names the same as the worker, its configuration and the PostgreSQL
//! broker use.

use std::collections::{BTreeMap, BTreeSet};

use sbworker::broker::mssql::{SCRIPTS, sqlcmd_batches, stmt};
use sbworker::contract::message_types;
use sbworker::demo::{DATA_QUEUE, REKEN_QUEUE};

/// Every batch of every script, with its file, comments removed, upper-cased copy.
fn batches() -> Vec<(&'static str, String, String)> {
    let mut out = Vec::new();
    for (file, script) in SCRIPTS.iter().chain(sbworker::broker::mssql::OPTIONAL_SCRIPTS) {
        for b in sqlcmd_batches(script, &[]).unwrap() {
            let code: String = b.lines().map(|l| l.split("--").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
            let upper = code.to_uppercase();
            out.push((*file, code, upper));
        }
    }
    out
}

fn words(s: &str) -> Vec<String> {
    s.split(|c: char| c.is_whitespace() || c == '(' || c == ',' || c == ';')
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

fn unquote(name: &str) -> String {
    name.trim_matches(['[', ']', '\'']).replace("].[", ".").to_lowercase()
}

/// (kind, name) of everything each batch creates.
fn created() -> Vec<(&'static str, String, String)> {
    let mut out = Vec::new();
    for (file, code, _) in batches() {
        let w = words(&code);
        for i in 0..w.len() {
            if !w[i].eq_ignore_ascii_case("CREATE") {
                continue;
            }
            let rest: Vec<String> = w[i + 1..].iter().take(4).map(|x| x.to_uppercase()).collect();
            let (kind, at) = match rest.as_slice() {
                [a, b, k, ..] if a == "OR" && b == "ALTER" => (k.clone(), i + 4),
                [m, t, ..] if m == "MESSAGE" && t == "TYPE" => ("MESSAGE TYPE".to_owned(), i + 3),
                [k, ..] => (k.clone(), i + 2),
                [] => continue,
            };
            if let Some(name) = w.get(at) {
                let name = name.trim_end_matches(['\'', ')']);
                out.push((file, kind, unquote(name)));
            }
        }
    }
    out
}

#[test]
fn every_batch_is_idempotent() {
    for (file, code, upper) in batches() {
        let first = upper.trim_start();
        if first.starts_with("CREATE OR ALTER") {
            // CREATE PROCEDURE/FUNCTION/TRIGGER must open its batch.
            continue;
        }
        assert!(!upper.contains("CREATE OR ALTER"), "{file}: CREATE OR ALTER must open its batch:\n{code}");
        for kind in [
            "CREATE TABLE",
            "CREATE QUEUE",
            "CREATE SERVICE",
            "CREATE CONTRACT",
            "CREATE MESSAGE TYPE",
            "CREATE ROLE",
            "CREATE USER",
            "CREATE SCHEMA",
            "ALTER DATABASE",
            "ADD MEMBER",
            "CREATE INDEX",
        ] {
            if let Some(at) = upper.find(kind) {
                let before = &upper[..at];
                assert!(
                    before.contains("IF NOT EXISTS") || before.contains("IS NULL") || before.contains("= 0"),
                    "{file}: {kind} without a guard before it:\n{code}"
                );
            }
        }
        // Outside procedures, nothing but guarded DDL, grants and USE: no data is
        // changed by running a script twice.
        for line in upper.lines().map(str::trim) {
            for dml in ["INSERT ", "UPDATE ", "DELETE ", "MERGE ", "DROP "] {
                assert!(!line.starts_with(dml), "{file}: {dml}outside a procedure:\n{code}");
            }
        }
    }
}

#[test]
fn each_object_is_created_in_exactly_one_place() {
    let mut seen: BTreeMap<(String, String), &str> = BTreeMap::new();
    let all = created();
    assert!(all.len() > 40, "{all:?}");
    for (file, kind, name) in all {
        let kind = if ["PROCEDURE", "FUNCTION", "TRIGGER", "TABLE", "QUEUE"].contains(&kind.as_str()) {
            "OBJECT".to_owned()
        } else {
            kind
        };
        if let Some(other) = seen.insert((kind.clone(), name.clone()), file) {
            panic!("{kind} {name} is created in {other} and in {file}");
        }
    }
}

fn created_names(kind: &str) -> BTreeSet<String> {
    created().into_iter().filter(|(_, k, _)| k == kind).map(|(_, _, n)| n).collect()
}

#[test]
fn names_match_the_worker_its_configuration_and_the_postgresql_broker() {
    // Queues: the names the worker's configuration uses, on both back ends.
    let queues = created_names("QUEUE");
    for q in [REKEN_QUEUE, DATA_QUEUE] {
        assert!(queues.contains(&format!("dbo.{q}")), "queue {q} in {queues:?}");
    }
    // Message types, contract and services: as the contract module and 003_calculation.sql name them.
    let pg = include_str!("../broker/postgres/003_calculation.sql");
    let types = created_names("MESSAGE TYPE");
    for t in [message_types::VRAAG, message_types::ANTWOORD, message_types::FOUT] {
        assert!(types.contains(&t.to_lowercase()), "message type {t}");
        assert!(pg.contains(&format!("'{t}'")), "PostgreSQL: {t}");
    }
    for s in ["/Rekenserver/LoonfactorBerekening/RekenService", "/Rekenserver/LoonfactorBerekening/DataService"] {
        assert!(created_names("SERVICE").contains(&s.to_lowercase()), "service {s}");
        assert!(pg.contains(&format!("'{s}'")), "PostgreSQL: {s}");
    }
    let contract = "/Rekenserver/LoonfactorBerekening/DataContract";
    assert!(created_names("CONTRACT").contains(&contract.to_lowercase()));
    assert!(pg.contains(&format!("'{contract}'")));
    // Every procedure the worker EXECs exists and its role may execute it; the role
    // may RECEIVE from both queues and SEND on both services.
    let security = include_str!("../broker/mssql/06_security.sql").to_lowercase();
    let procs = created_names("PROCEDURE");
    for name in [
        "count_attempts",
        "note_failure",
        "forget_attempts",
        "dead_letter",
        "claim_version",
        "queue_state",
        "store_antwoord",
        "record_fout",
    ] {
        let sql = stmt(name);
        let called = sql.split_whitespace().nth(1).unwrap().to_lowercase();
        assert!(procs.contains(&called), "{name} calls {called}, which no script creates");
        assert!(
            security.contains(&format!("grant execute on object::{called} to sbworker_role")),
            "{called} not granted"
        );
    }
    for q in [REKEN_QUEUE, DATA_QUEUE] {
        assert!(security.contains(&format!("grant receive on object::dbo.{q} to sbworker_role")), "RECEIVE on {q}");
    }
    for s in ["rekenservice", "dataservice"] {
        assert!(
            security
                .contains(&format!("grant send on service::[/rekenserver/loonfactorberekening/{s}] to sbworker_role"))
        );
    }
    // Nothing grants more than that.
    for forbidden in ["db_owner", "trustworthy", "create assembly", "clr enabled", "grant control", "impersonate"] {
        for (file, code, _) in batches() {
            assert!(!code.to_lowercase().contains(forbidden), "{file} uses {forbidden}");
        }
    }
}

#[test]
fn the_schema_collection_script_is_generated_from_the_xsds_and_current() {
    let expected = sbworker::broker::mssql::schema_collection_script();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/broker/mssql/07_schema_collection.sql");
    if std::env::var("SBWORKER_WRITE_GENERATED").is_ok() {
        std::fs::write(path, &expected).unwrap();
    }
    let actual = std::fs::read_to_string(path).unwrap();
    assert!(
        actual == expected,
        "broker/mssql/07_schema_collection.sql is not current: run SBWORKER_WRITE_GENERATED=1 cargo test mssql_scripts"
    );
    let (_, script) = sbworker::broker::mssql::OPTIONAL_SCRIPTS[0];
    let batches = sqlcmd_batches(script, &[]).unwrap();
    assert_eq!(batches.len(), 5, "USE, the collection, three message types");
    assert!(batches[1].contains("IF NOT EXISTS") && batches[1].matches("<xs:schema").count() == 3);
    assert!(!script.contains("<?xml"), "an nvarchar literal cannot carry an encoding declaration");
}
