//! The SQL Server scripts cannot run here (no SQL Server), so they are checked as a
//! reader would check them, with a check for each defect a review found: every batch
//! idempotent (each guarded statement's own IF names what it creates), each object
//! created in exactly one place, the names the same as the worker, its configuration
//! and the PostgreSQL broker use; no `:setvar` (it would override `-v`); every script
//! sets its SET options first; no FOR XML or FOR JSON over a set operator in a
//! subquery (Msg 1086); loop bounds validated; every CATCH raises again or says why not.

use std::collections::{BTreeMap, BTreeSet};

use sbworker::broker::mssql::{SCRIPTS, Side, SqlcmdVars, for_side, region_end, region_sides, sqlcmd_batches, stmt};
use sbworker::contract::message_types;
use sbworker::demo::{DATA_QUEUE, REKEN_QUEUE};

fn all_scripts() -> impl Iterator<Item = &'static (&'static str, &'static str)> {
    SCRIPTS.iter().chain(sbworker::broker::mssql::OPTIONAL_SCRIPTS)
}

fn vars() -> Vec<(String, String)> {
    [
        ("Database", "Payroll"),
        ("WorkerLogin", "sbworker_login"),
        ("WorkerUser", "sbworker"),
        ("Side", "both"),
        // optional/endpoint.sql and optional/routes.sql (a split deployment)
        ("Instance", "rooster"),
        ("Port", "4022"),
        ("MasterKeyPassword", "Sample-Password-1"),
        ("CertificateExpiry", "20301231"),
        ("CertificateFile", "/certs/sbworker_broker_rooster.cer"),
        ("FarInstance", "reken1"),
        ("FarCertificateFile", "/certs/sbworker_broker_reken1.cer"),
        ("CalcAddresses", "TCP://reken1:4022,TCP://reken2:4022"),
        ("RosterAddress", "TCP://rooster:4022"),
        ("RosterBrokerInstance", "5F1C8E2A-0000-4000-8000-000000000001"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect()
}

/// The batches of a script, variables filled in.
fn split(script: &str) -> Vec<String> {
    sqlcmd_batches(script, &SqlcmdVars::only(&vars())).unwrap()
}

/// Every batch of every script, with its file, comments removed, upper-cased copy (the
/// batches of every side's regions: all the text there is).
fn batches() -> Vec<(&'static str, String, String)> {
    batches_of(all_scripts().map(|(f, s)| (*f, s.to_string())).collect())
}

/// The batches that run on `side` (the regions of the other sides left out).
fn batches_on(side: Side) -> Vec<(&'static str, String, String)> {
    batches_of(all_scripts().map(|(f, s)| (*f, for_side(s, side))).collect())
}

fn batches_of(scripts: Vec<(&'static str, String)>) -> Vec<(&'static str, String, String)> {
    let mut out = Vec::new();
    for (file, script) in scripts {
        for b in split(&script) {
            let code: String = b.lines().map(|l| l.split("--").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
            let code = mask_literals(&code);
            let upper = code.to_uppercase();
            out.push((file, code, upper));
        }
    }
    out
}

/// `code` with the text of its prose string literals blanked (messages that name
/// statements: "run ALTER DATABASE … SET NEW_BROKER"); kept: a literal without white
/// space (a name in a guard) and one that is run (`EXEC (N'CREATE SCHEMA …')`).
/// Positions stay the same.
fn mask_literals(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(i) = rest.find('\'') {
        out.push_str(&rest[..=i]);
        let after = &rest[i + 1..];
        // '' inside a literal is a quote: the literal ends at a ' not followed by '.
        let mut end = 0;
        let bytes = after.as_bytes();
        while end < bytes.len() {
            if bytes[end] == b'\'' {
                if bytes.get(end + 1) == Some(&b'\'') {
                    end += 2;
                    continue;
                }
                break;
            }
            end += 1;
        }
        let text = &after[..end];
        let before = out[..out.len() - 1].trim_end_matches('N').trim_end().to_uppercase();
        let run = before.ends_with("EXEC (") || before.ends_with("EXEC(");
        if run || !text.contains(char::is_whitespace) {
            out.push_str(text);
        } else {
            out.extend(text.chars().map(|c| if c.is_whitespace() { c } else { '.' }));
        }
        out.push_str(&after[end..(end + 1).min(after.len())]);
        rest = &after[(end + 1).min(after.len())..];
    }
    out.push_str(rest);
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

/// (kind, name) of everything each batch creates on a one-database install (Side=both).
fn created() -> Vec<(&'static str, String, String)> {
    created_on(Side::Both)
}

/// (kind, name) of everything each batch that runs on `side` creates.
fn created_on(side: Side) -> Vec<(&'static str, String, String)> {
    let mut out = Vec::new();
    for (file, code, _) in batches_on(side) {
        let w = words(&code);
        for i in 0..w.len() {
            if !w[i].eq_ignore_ascii_case("CREATE") {
                continue;
            }
            let rest: Vec<String> = w[i + 1..].iter().take(4).map(|x| x.to_uppercase()).collect();
            let (kind, at) = match rest.as_slice() {
                [a, b, k, ..] if a == "OR" && b == "ALTER" => (k.clone(), i + 4),
                [m, t, ..] if m == "MESSAGE" && t == "TYPE" => ("MESSAGE TYPE".to_owned(), i + 3),
                [b, p, ..] if b == "BROKER" && p == "PRIORITY" => ("BROKER PRIORITY".to_owned(), i + 3),
                [e, n, ..] if e == "EVENT" && n == "NOTIFICATION" => ("EVENT NOTIFICATION".to_owned(), i + 3),
                [k, ..] => (k.clone(), i + 2),
                [] => continue,
            };
            // An index rebuilt in place (WITH (DROP_EXISTING = ON)) is not created again.
            let rebuilt = kind == "INDEX"
                && w[i..]
                    .iter()
                    .take(40)
                    .take_while(|x| !x.eq_ignore_ascii_case("GO"))
                    .any(|x| x.to_uppercase().contains("DROP_EXISTING"));
            if let Some(name) = w.get(at)
                && !rebuilt
            {
                let name = name.trim_end_matches(['\'', ')']);
                out.push((file, kind, unquote(name)));
            }
        }
    }
    out
}

/// The condition of the IF whose statement starts at `at` (the text between the
/// nearest `IF` before it and `at`), when the statement is an IF's statement: nothing
/// but the condition (and BEGIN, or a TRY) stands between them.
fn guard_of(upper: &str, at: usize) -> Option<String> {
    let before = &upper[..at];
    let i = before.rfind("IF ")?;
    let cond = &before[i + 2..];
    let cond_trim = cond.trim_end();
    let cond_trim = cond_trim.strip_suffix("EXEC (N'").map(str::trim_end).unwrap_or(cond_trim);
    let cond_trim = cond_trim.strip_suffix("BEGIN TRY").map(str::trim_end).unwrap_or(cond_trim);
    let cond_trim = cond_trim.strip_suffix("BEGIN").map(str::trim_end).unwrap_or(cond_trim);
    // Balanced parentheses and no statement end: the IF governs this statement.
    let depth = cond_trim.chars().fold(0i32, |d, c| d + i32::from(c == '(') - i32::from(c == ')'));
    (depth == 0 && !cond_trim.contains(';')).then(|| cond_trim.to_owned())
}

/// Whether `text` holds `name` as a whole name (not inside a longer identifier).
fn names(text: &str, name: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(name).any(|(i, _)| {
        !text[..i].chars().next_back().is_some_and(ident) && !text[i + name.len()..].chars().next().is_some_and(ident)
    })
}

/// The last part of the name that starts `rest` ("[dbo].[x]" → "X"), for a guard check.
fn object_name(rest: &str) -> String {
    let name = rest.split_whitespace().next().unwrap_or("");
    let name = name.split(['(', ';']).next().unwrap_or("");
    name.rsplit('.').next().unwrap_or("").trim_matches(['[', ']', '\'']).to_owned()
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
            "CREATE BROKER PRIORITY",
            "CREATE ROLE",
            "CREATE USER",
            "CREATE SCHEMA",
            "CREATE INDEX",
            "CREATE XML SCHEMA COLLECTION",
            "CREATE MASTER KEY",
            "CREATE CERTIFICATE",
            "CREATE ENDPOINT",
            "ALTER ENDPOINT",
            "CREATE ROUTE",
            "ALTER ROUTE",
            "CREATE REMOTE SERVICE BINDING",
            "CREATE EVENT NOTIFICATION",
            "ALTER DATABASE",
            "ADD MEMBER",
        ] {
            for (at, _) in upper.match_indices(kind) {
                let guard = guard_of(&upper, at)
                    .unwrap_or_else(|| panic!("{file}: {kind} at {at} is not the statement of an IF:\n{code}"));
                let subject = match kind {
                    "ALTER DATABASE"
                        if upper[at..].starts_with("ALTER DATABASE") && upper[at..].contains("ENABLE_BROKER") =>
                    {
                        "IS_BROKER_ENABLED".to_owned()
                    }
                    "ADD MEMBER" => "DATABASE_ROLE_MEMBERS".to_owned(),
                    "CREATE MASTER KEY" => "##MS_DATABASEMASTERKEY##".to_owned(),
                    _ => object_name(&upper[at + kind.len()..]),
                };
                assert!(
                    names(&guard, &subject),
                    "{file}: the IF before {kind} does not check {subject}: IF{guard}\n{code}"
                );
            }
        }
        // Outside procedures, nothing but guarded DDL, grants and USE: no data is
        // changed by running a script twice. (An index that nothing reads any more is
        // dropped under an IF EXISTS naming it.)
        for line in upper.lines().map(str::trim) {
            for dml in ["INSERT ", "UPDATE ", "DELETE ", "MERGE ", "DROP "] {
                if dml == "DROP " && line.starts_with("DROP INDEX ") {
                    continue;
                }
                assert!(!line.starts_with(dml), "{file}: {dml}outside a procedure:\n{code}");
            }
        }
        for (at, _) in upper.match_indices("DROP INDEX ") {
            let guard = guard_of(&upper, at).unwrap_or_else(|| panic!("{file}: DROP INDEX is not an IF's statement"));
            let index = object_name(&upper[at + "DROP INDEX".len()..]);
            assert!(
                guard.trim_start().starts_with("EXISTS") && names(&guard, &index),
                "{file}: the IF before DROP INDEX does not check {index} exists: IF{guard}"
            );
        }
    }
}

#[test]
fn each_object_is_created_in_exactly_one_place() {
    // On each side: a module may have a version per side (sbworker.replay_dead_letter),
    // in regions no side runs both of.
    for side in Side::ALL {
        let mut seen: BTreeMap<(String, String), &str> = BTreeMap::new();
        let all = created_on(side);
        assert!(all.len() > 20, "{side}: {all:?}");
        for (file, kind, name) in all {
            let kind = if ["PROCEDURE", "FUNCTION", "TRIGGER", "TABLE", "QUEUE"].contains(&kind.as_str()) {
                "OBJECT".to_owned()
            } else {
                kind
            };
            if let Some(other) = seen.insert((kind.clone(), name.clone()), file) {
                panic!("{side}: {kind} {name} is created in {other} and in {file}");
            }
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
    let security = include_str!("../broker/mssql/07_security.sql").to_lowercase();
    let procs = created_names("PROCEDURE");
    // Every EXEC the transport sends (broker/mssql/statements/session.sql).
    let execs: Vec<_> = stmt::ALL.iter().filter(|s| s.sql.starts_with("EXEC ")).collect();
    assert!(execs.len() >= 8, "{execs:?}");
    for s in execs {
        let (name, sql) = (s.name, s.sql);
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
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/broker/mssql/optional/schema_collection.sql");
    if std::env::var("SBWORKER_WRITE_GENERATED").is_ok() {
        std::fs::write(path, &expected).unwrap();
    }
    let actual = std::fs::read_to_string(path).unwrap();
    assert!(
        actual == expected,
        "broker/mssql/optional/schema_collection.sql is not current: run SBWORKER_WRITE_GENERATED=1 cargo test mssql_scripts"
    );
    let (_, script) = sbworker::broker::mssql::OPTIONAL_SCRIPTS[0];
    let batches = split(script);
    assert_eq!(batches.len(), 4, "SET options, USE, the collection, the message types moved to it");
    assert!(batches[2].contains("IF NOT EXISTS") && batches[2].matches("<xs:schema").count() == 3);
    // C7 of the third review: a collection's components cannot be replaced, so its name
    // carries the hash of its XSDs (a changed XSD is a new collection), the Vraag's type
    // moves to it in one transaction, and older ones are dropped.
    let xsd_start = batches[2].find("AS N'").unwrap() + 5;
    let xsd_end = batches[2].rfind("';").unwrap();
    let xsd = batches[2][xsd_start..xsd_end].to_owned();
    let name = format!("LoonfactorBerekening_{:016x}", sbworker::sql::fnv1a(xsd.as_bytes()));
    assert!(batches[2].contains(&format!("N'{name}'")) && batches[2].contains(&format!("Rekenserver.{name} AS")));
    let switch = &batches[3];
    assert!(switch.contains("BEGIN TRANSACTION") && switch.trim_end().ends_with("COMMIT TRANSACTION;"), "{switch}");
    assert!(switch.contains(&format!(
        "[/Rekenserver/LoonfactorBerekening/Vraag] VALIDATION = VALID_XML WITH SCHEMA COLLECTION Rekenserver.{name};"
    )));
    // S3: the answers stay WELL_FORMED_XML (a VALID_XML failure there would be lost).
    for t in ["/Rekenserver/LoonfactorBerekening/Antwoord", "/Rekenserver/Fout"] {
        assert!(switch.contains(&format!("[{t}] VALIDATION = WELL_FORMED_XML;")), "{t}");
    }
    assert!(switch.contains(&format!("c.name <> N'{name}'")) && switch.contains("DROP XML SCHEMA COLLECTION"));
    assert!(!script.contains("<?xml"), "an nvarchar literal cannot carry an encoding declaration");
    for constraint in ["<xs:unique", "<xs:key", "<xs:keyref"] {
        assert!(!script.contains(constraint), "SQL Server cannot register a schema holding {constraint}");
    }
}

#[test]
fn the_installed_scripts_are_ascii() {
    // ODBC sqlcmd reads a file without a byte-order mark in the console's code page
    // (the transport scripts too: a DBA runs them with sqlcmd; the schema collection is
    // generated from schemas/, whose XSDs are UTF-8, and is sent as an N'' literal).
    for (file, script) in all_scripts().filter(|(f, _)| *f != "optional/schema_collection.sql") {
        let bad: Vec<(usize, &str)> =
            script.lines().enumerate().filter(|(_, l)| !l.is_ascii()).map(|(i, l)| (i + 1, l)).collect();
        assert!(bad.is_empty(), "{file}: {bad:?}");
    }
}

#[test]
fn no_script_sets_a_variable_and_every_variable_must_be_given() {
    for (file, script) in all_scripts() {
        for line in script.lines() {
            assert!(!line.trim_start().to_lowercase().starts_with(":setvar"), "{file}: {line} (it would override -v)");
        }
        let e = sqlcmd_batches(script, &SqlcmdVars::only(&[])).unwrap_err();
        // (optional/endpoint.sql runs in master: no Database.)
        let first = if *file == "optional/endpoint.sql" { "Instance" } else { "Database" };
        assert!(e.contains(&format!("'{first}' is not defined")), "{file}: {e}");
    }
}

#[test]
fn every_script_sets_its_options_in_its_first_batch() {
    let wanted: Vec<&str> = sbworker::broker::mssql::SET_OPTIONS.lines().collect();
    assert_eq!(wanted.len(), 7);
    for (file, script) in all_scripts() {
        let first = &split(script)[0];
        let code: Vec<&str> =
            first.lines().map(|l| l.split("--").next().unwrap_or("").trim()).filter(|l| !l.is_empty()).collect();
        assert_eq!(code, wanted, "{file}: the first batch must be the SET options alone");
    }
    for (file, _, upper) in batches() {
        for off in
            ["QUOTED_IDENTIFIER OFF", "ANSI_NULLS OFF", "ANSI_PADDING OFF", "ANSI_WARNINGS OFF", "ARITHABORT OFF"]
        {
            assert!(!upper.contains(off), "{file} sets {off}");
        }
    }
}

/// FOR XML or FOR JSON applied to a set operator inside a subquery (Msg 1086): for each
/// FOR XML/JSON in parentheses, the text of those parentheses at their own level.
fn for_over_set_operator(upper: &str) -> Vec<String> {
    let mut found = Vec::new();
    for kind in ["FOR XML", "FOR JSON"] {
        for (at, _) in upper.match_indices(kind) {
            // The unmatched '(' before `at` opens the subquery.
            let mut depth = 0i32;
            let mut open = None;
            for (i, c) in upper[..at].char_indices().rev() {
                match c {
                    ')' => depth += 1,
                    '(' if depth == 0 => {
                        open = Some(i);
                        break;
                    }
                    '(' => depth -= 1,
                    _ => {}
                }
            }
            let Some(open) = open else { continue };
            // The subquery's own level: nested parentheses removed.
            let mut level = String::new();
            let mut d = 0;
            for c in upper[open + 1..at].chars() {
                match c {
                    '(' => d += 1,
                    ')' => d -= 1,
                    _ if d == 0 => level.push(c),
                    _ => {}
                }
            }
            if words(&level).iter().any(|w| ["UNION", "EXCEPT", "INTERSECT"].contains(&w.as_str())) {
                found.push(upper[open..at + kind.len()].to_owned());
            }
        }
    }
    found
}

#[test]
fn no_for_xml_or_json_over_a_set_operator_in_a_subquery() {
    for (file, code, upper) in batches() {
        let found = for_over_set_operator(&upper);
        assert!(found.is_empty(), "{file}: Msg 1086: {found:?}\n{code}");
    }
    // The check finds the defect it is for (the trigger as it was) and lets the fix pass.
    let bad = "DECLARE @D NVARCHAR(MAX) = (SELECT A AS DV, DATUM FROM INSERTED\n UNION SELECT A, DATUM FROM DELETED FOR JSON PATH);";
    assert_eq!(for_over_set_operator(bad).len(), 1);
    let good = "DECLARE @D NVARCHAR(MAX) = (SELECT U.DV FROM (SELECT A AS DV FROM INSERTED UNION SELECT A FROM DELETED) U FOR JSON PATH);";
    assert!(for_over_set_operator(good).is_empty());
}

/// Parameters of a procedure batch that bound a loop (`TOP (@p)` or `+= @p` in a batch
/// with a WHILE) without an `IF @p IS NULL OR @p < 1` check before the first WHILE.
fn unchecked_loop_bounds(upper: &str) -> Vec<String> {
    let Some(proc_at) = upper.find("CREATE OR ALTER PROCEDURE") else { return Vec::new() };
    let Some(first_while) = upper.find("WHILE ") else { return Vec::new() };
    let header_end = upper[proc_at..].find("\nAS").map_or(upper.len(), |i| proc_at + i);
    let params: BTreeSet<String> = upper[proc_at..header_end]
        .split(|c: char| !(c.is_alphanumeric() || c == '@' || c == '_'))
        .filter(|w| w.starts_with('@'))
        .map(str::to_owned)
        .collect();
    params
        .into_iter()
        .filter(|p| upper.contains(&format!("TOP ({p})")) || upper.contains(&format!("+= {p}")))
        .filter(|p| !upper[..first_while].contains(&format!("IF {p} IS NULL OR {p} < 1")))
        .collect()
}

#[test]
fn loop_bounds_are_validated() {
    let mut checked = 0;
    for (file, code, upper) in batches() {
        let bad = unchecked_loop_bounds(&upper);
        assert!(
            bad.is_empty(),
            "{file}: {bad:?} bound a loop and are not checked first (0 would loop for ever)\n{code}"
        );
        checked += usize::from(upper.contains("WHILE ") && upper.contains("CREATE OR ALTER PROCEDURE"));
    }
    assert!(checked >= 3, "the procedures with loops were found ({checked})");
    let bad =
        "CREATE OR ALTER PROCEDURE X @BATCH INT = 1\nAS\nBEGIN\nWHILE 1 = 1 BEGIN DELETE TOP (@BATCH) FROM T; END\nEND";
    assert_eq!(unchecked_loop_bounds(bad), ["@BATCH"]);
}

/// Each CATCH block of `script` (comments kept) that neither raises again (THROW,
/// RAISERROR) nor says why not in a comment ("raised again …", "not raised again: …").
fn silent_catches(script: &str) -> Vec<String> {
    let upper = script.to_uppercase();
    let mut found = Vec::new();
    for (at, _) in upper.match_indices("BEGIN CATCH") {
        let end = upper[at..].find("END CATCH").map_or(upper.len(), |i| at + i);
        let block = &upper[at..end];
        let raises = block.contains("THROW") || block.contains("RAISERROR");
        let says = block.lines().any(|l| l.split_once("--").is_some_and(|(_, c)| c.contains("RAISED AGAIN")));
        if !raises && !says {
            found.push(script[at..end].to_owned());
        }
    }
    found
}

#[test]
fn every_catch_raises_again_or_says_why_not() {
    let mut catches = 0;
    for (file, script) in all_scripts() {
        catches += script.to_uppercase().matches("BEGIN CATCH").count();
        let silent = silent_catches(script);
        assert!(silent.is_empty(), "{file}: a CATCH that swallows the error: {silent:?}");
    }
    assert!(catches >= 3, "{catches}");
    assert_eq!(
        silent_catches("BEGIN TRY SELECT 1/0; END TRY\nBEGIN CATCH\n  SET @fout = ERROR_MESSAGE();\nEND CATCH").len(),
        1
    );
}

#[test]
fn the_version_stamp_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/broker/mssql/07_security.sql");
    let text = std::fs::read_to_string(path).unwrap();
    let stamp = sbworker::broker::mssql::scripts_stamp();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("@name = N'sbworker_version'")).collect();
    assert_eq!(lines.len(), 2, "add and update");
    let current = lines.iter().all(|l| l.contains(&format!("@value = N'{stamp}'")));
    if !current && std::env::var("SBWORKER_WRITE_GENERATED").is_ok() {
        let mut out = String::new();
        for l in text.lines() {
            if l.contains("@name = N'sbworker_version'") {
                let head = &l[..l.find("@value = N'").unwrap()];
                out.push_str(&format!("{head}@value = N'{stamp}';"));
            } else {
                out.push_str(l);
            }
            out.push('\n');
        }
        std::fs::write(path, out).unwrap();
        return;
    }
    assert!(current, "07_security.sql's stamp is not {stamp}: run SBWORKER_WRITE_GENERATED=1 cargo test mssql_scripts");
}

/// sqlfluff (PyPI), installed into the build directory on first use.
fn sqlfluff() -> std::path::PathBuf {
    crate::common::python_package("sqlfluff", "sqlfluff", "sqlfluff==4.5.0")
}

fn tsql_parse(files: &[std::path::PathBuf]) -> std::process::Output {
    std::process::Command::new("python3")
        .env("PYTHONPATH", sqlfluff())
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/tsql_parse.py"))
        .args(files)
        .output()
        .unwrap()
}

#[test]
fn slow_every_batch_parses_with_an_independent_tsql_parser() {
    let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/broker/mssql"));
    let mut files: Vec<_> = all_scripts().map(|(f, _)| dir.join(f)).collect();
    files.sort();
    let out = tsql_parse(&files);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains(&format!("{} file(s)", files.len())), "{text}");
    // And it fails where it should: the trigger as it was (Msg 1086), a missing END.
    let tmp = std::env::temp_dir().join(format!("sbworker-tsql-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let bad = tmp.join("bad.sql");
    std::fs::write(
        &bad,
        "CREATE OR ALTER PROCEDURE dbo.p AS\nBEGIN\n    SELECT 1;\n    IF 1 = 1\n    BEGIN\n        SELECT 2;\nEND;\nGO\n",
    )
    .unwrap();
    let out = tsql_parse(std::slice::from_ref(&bad));
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn the_guard_check_finds_an_unguarded_or_wrongly_guarded_statement() {
    // Guarded by its own IF, naming what it creates: found.
    let ok = "IF OBJECT_ID(N'SBWORKER.T', N'U') IS NULL\n    CREATE TABLE SBWORKER.T (A INT);";
    let at = ok.find("CREATE TABLE").unwrap();
    assert!(names(&guard_of(ok, at).unwrap(), &object_name(&ok[at + "CREATE TABLE".len()..])));
    // An IF that ended before it (a statement between) governs nothing.
    let unguarded = "IF @X = 0 SELECT 1;\nCREATE TABLE SBWORKER.T (A INT);";
    assert!(guard_of(unguarded, unguarded.find("CREATE TABLE").unwrap()).is_none());
    // An IF about another object: the guard does not name it.
    let wrong = "IF OBJECT_ID(N'SBWORKER.OTHER', N'U') IS NULL CREATE TABLE SBWORKER.T (A INT);";
    let at = wrong.find("CREATE TABLE").unwrap();
    assert!(!names(&guard_of(wrong, at).unwrap(), &object_name(&wrong[at + "CREATE TABLE".len()..])));
    // The second CREATE of a batch is checked as well as the first.
    let second =
        "IF OBJECT_ID(N'SBWORKER.T', N'U') IS NULL CREATE TABLE SBWORKER.T (A INT);\nCREATE TABLE SBWORKER.U (A INT);";
    let at = second.rfind("CREATE TABLE").unwrap();
    assert!(guard_of(second, at).is_none());
}

#[test]
fn the_selftest_knows_every_module_the_scripts_create() {
    for side in Side::ALL {
        let modules: BTreeSet<String> = sbworker::broker::mssql::modules(side).into_iter().collect();
        let created: BTreeSet<String> = created_on(side)
            .into_iter()
            .filter(|(file, k, _)| {
                !file.starts_with("optional/") && ["PROCEDURE", "FUNCTION", "TRIGGER"].contains(&k.as_str())
            })
            .map(|(_, _, n)| n)
            .collect();
        assert_eq!(modules, created, "{side}");
    }
    let modules: BTreeSet<String> = sbworker::broker::mssql::modules(Side::Both).into_iter().collect();
    for m in ["rekenserver.sla_antwoord_op", "rooster.dienst_gewijzigd", "rekenserver.vraag", "sbworker.module_options"]
    {
        assert!(modules.contains(m), "{m} in {modules:?}");
    }
}

/// The loops the docs give for sqlcmd: the glob of each `for f in broker/mssql/…; do`.
fn documented_loops() -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    for (doc, text) in [
        ("docs/deployment.md", include_str!("../docs/deployment.md")),
        ("docs/sqlserver.md", include_str!("../docs/sqlserver.md")),
    ] {
        for line in text.lines() {
            if let Some(rest) = line.trim().strip_prefix("for f in broker/mssql/") {
                out.push((doc, rest.split(';').next().unwrap_or("").trim().to_owned()));
            }
        }
    }
    out
}

/// Matches a file name against the shell's glob forms the docs use (`[0-9]`, `*`, text).
fn glob_matches(glob: &str, name: &str) -> bool {
    fn go(g: &[u8], n: &[u8]) -> bool {
        match g.first() {
            None => n.is_empty(),
            Some(b'*') => (0..=n.len()).any(|i| go(&g[1..], &n[i..])),
            Some(b'[') => {
                let close = g.iter().position(|&c| c == b']').expect("a closed bracket");
                let (lo, hi) = (g[1], g[3]);
                !n.is_empty() && n[0] >= lo && n[0] <= hi && go(&g[close + 1..], &n[1..])
            }
            Some(&c) => n.first() == Some(&c) && go(&g[1..], &n[1..]),
        }
    }
    go(glob.as_bytes(), name.as_bytes())
}

/// C1 of the third SQL Server review: the documented sqlcmd loop skipped a script that
/// the security script grants on. The installer's list, the folder's numbered files in
/// the shell's order, and every loop in the docs are one list.
#[test]
fn the_documented_sqlcmd_loop_runs_the_installers_scripts_in_its_order() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/broker/mssql");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sql"))
        .collect();
    files.sort(); // the shell sorts a glob's matches (in the C locale: byte order)
    let installer: Vec<&str> = SCRIPTS.iter().map(|(n, _)| *n).collect();
    let numbered: Vec<&str> =
        files.iter().map(String::as_str).filter(|n| n.as_bytes()[..2].iter().all(u8::is_ascii_digit)).collect();
    assert_eq!(numbered, installer, "broker/mssql's numbered scripts are not the installer's list, in its order");
    assert!(files.len() == numbered.len(), "a script in broker/mssql/ without a number: {files:?}");
    let loops = documented_loops();
    assert!(loops.len() >= 2, "the sqlcmd loops of docs/deployment.md and docs/sqlserver.md: {loops:?}");
    for (doc, glob) in loops {
        let run: Vec<&str> = files.iter().map(String::as_str).filter(|n| glob_matches(&glob, n)).collect();
        assert_eq!(run, installer, "{doc}: the loop over broker/mssql/{glob} runs other scripts than the installer");
    }
    // The check itself: the loop of the review's finding misses the operations script.
    let old: Vec<&str> = files.iter().map(String::as_str).filter(|n| glob_matches("0[0-6]_*.sql", n)).collect();
    assert_ne!(old, installer);
    // The security script grants what the others create, so it runs last.
    assert!(installer.last().unwrap().ends_with("_security.sql"), "{installer:?}");
}

/// Every SQL Server script and statement file, comments removed, with its name.
fn all_sql_code() -> Vec<(String, String)> {
    let strip = |text: &str| -> String {
        text.lines().map(|l| l.split("--").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
    };
    let mut out: Vec<(String, String)> = Vec::new();
    for (file, script) in all_scripts() {
        out.push(((*file).to_owned(), split(script).iter().map(|b| strip(b)).collect::<Vec<_>>().join("\nGO\n")));
    }
    // The worker's statements and the tools' (the bench's T-SQL).
    for dir in ["broker/mssql/statements", "crates/tools/sql/mssql/statements"] {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            out.push((path.file_name().unwrap().to_string_lossy().into_owned(), strip(&text)));
        }
    }
    assert!(out.iter().any(|(f, _)| f == "bench.sql"), "the tools' statements are read too");
    out
}

/// C2 of the third review: a dialog without LIFETIME lives 68 years when it is lost.
/// Every BEGIN DIALOG, in the scripts and in dynamic SQL they build, has one.
#[test]
fn every_begin_dialog_has_a_lifetime() {
    let mut seen = 0;
    for (file, code) in all_sql_code() {
        let upper = code.to_uppercase();
        for (at, _) in upper.match_indices("BEGIN DIALOG") {
            seen += 1;
            let rest = &upper[at..];
            let statement = &rest[..rest.find(';').unwrap_or(rest.len())];
            assert!(statement.contains("LIFETIME = @"), "{file}: BEGIN DIALOG without a LIFETIME: {statement}");
        }
    }
    assert!(seen >= 2, "the roster's and the replay's BEGIN DIALOG: {seen}");
}

/// C5 of the third review: END CONVERSATION's page says not to use WITH CLEANUP in an
/// application's code. None of ours does (the PostgreSQL broker's cleanup function is
/// the repair path the docs name), except `Rekenserver.selftest` on the scratch key's own
/// dialogs: 'verlies' plays the DBA on purpose (the deep selftest's lost dialog), and
/// 'einde' cleans up an initiator whose target is gone (a conversation that cannot
/// complete, as the page reserves it).
#[test]
fn no_script_or_statement_ends_a_conversation_with_cleanup() {
    let mut selftest = 0;
    for (file, code) in all_sql_code() {
        let upper = mask_literals(&code).to_uppercase();
        for (at, _) in upper.match_indices("WITH CLEANUP") {
            let procedure = upper[..at].rfind("CREATE OR ALTER PROCEDURE ").map(|p| &upper[p + 26..]);
            let in_selftest = procedure.is_some_and(|p| p.starts_with("REKENSERVER.SELFTEST "));
            assert!(in_selftest, "{file}: END CONVERSATION ... WITH CLEANUP outside Rekenserver.selftest");
            selftest += 1;
        }
    }
    // 'verlies' (the DBA it plays), and 'einde' for an initiator whose target is gone.
    assert_eq!(selftest, 2, "the selftest's WITH CLEANUPs");
}

/// C10 of the third review: `%` is reserved in THROW's message. A message from a
/// variable is doubled where the variable is last set before the THROW; a literal one
/// holds no sqlcmd variable (its value could hold a `%`) and no bare `%`.
#[test]
fn every_throw_message_doubles_its_percent_signs() {
    let mut from_variables = 0;
    for (file, code) in all_sql_code() {
        for (at, _) in code.match_indices("THROW ") {
            let rest = &code[at + 6..];
            let statement = &rest[..rest.find(';').unwrap_or(rest.len())];
            let parts: Vec<&str> = statement.splitn(3, ',').map(str::trim).collect();
            if parts.len() < 3 {
                continue; // THROW; re-raises what was caught, as it was
            }
            let message = parts[1];
            if let Some(var) = message.strip_prefix('@') {
                from_variables += 1;
                let before = &code[..at];
                // The last `@var [type] =` before the THROW (DECLARE … = or SET … =).
                let name = format!("@{var}");
                let set = before
                    .rmatch_indices(name.as_str())
                    .map(|(i, _)| i)
                    .find(|&i| {
                        let after = &before[i + name.len()..];
                        let line = &after[..after.find('\n').unwrap_or(after.len())];
                        line.find('=').is_some_and(|e| !line[..e].contains(['@', ',', ';']))
                    })
                    .unwrap_or_else(|| panic!("{file}: THROW of @{var}, which is never set before it"));
                let assignment = &before[set..];
                assert!(
                    assignment.contains("N'%', N'%%'"),
                    "{file}: THROW {statement}: @{var} is not doubled where it is last set"
                );
            } else {
                assert!(!message.contains("$("), "{file}: THROW {statement}: a sqlcmd variable in a literal message");
                assert!(!message.contains('%'), "{file}: THROW {statement}: a bare % in the message");
            }
        }
    }
    assert!(from_variables >= 10, "{from_variables}");
}

/// C3 of the third review: the sweep read the failure's class from the log's text in
/// formats one collector wrote and the other did not. The class is a column now: every
/// caller of noteer_fout says it, and the sweep reads the column, never the text.
#[test]
fn every_failure_is_recorded_with_its_class_and_the_sweep_reads_the_class() {
    let mut calls = 0;
    for (file, code) in all_sql_code() {
        for (at, _) in code.match_indices("EXEC Rekenserver.noteer_fout") {
            calls += 1;
            let rest = &code[at..];
            let statement = &rest[..rest.find(['\n', ';']).unwrap_or(rest.len())];
            assert!(statement.contains("@herstelbaar = "), "{file}: {statement}");
        }
    }
    assert!(calls >= 5, "{calls}");
    let handoff = SCRIPTS.iter().find(|(n, _)| *n == "05_handoff.sql").unwrap().1;
    let sweep = &handoff[handoff.find("CREATE OR ALTER PROCEDURE Rekenserver.sweep").unwrap()..];
    let sweep = &sweep[..sweep.find("\nGO").unwrap()];
    assert!(!sweep.contains("foutmelding"), "the sweep reads the failure's text");
    assert!(sweep.contains("l.herstelbaar") && sweep.contains("EXEC Rekenserver.markeer_verloren"));
}

/// The same four roles (and the monitor) on both back ends. Every role flag of
/// `sbworker install` has a SQL Server role that script 00 creates, the grant statement
/// accepts and script 07 grants something to; export and sweep are no longer the worker's.
#[test]
fn each_install_role_flag_has_its_sql_server_role() {
    let roles = sbworker::cli::args::InstallRoles {
        worker: vec!["w".into()],
        sender: vec!["s".into()],
        payroll: vec!["p".into()],
        housekeeping: vec!["h".into()],
        monitor: vec!["m".into()],
    };
    let database = SCRIPTS[0].1;
    let security = SCRIPTS.iter().find(|(n, _)| n.ends_with("_security.sql")).unwrap().1;
    let grant = include_str!("../broker/mssql/statements/install.sql");
    for (pg, _) in roles.grants() {
        let role = sbworker::broker::mssql::role_for(pg).unwrap_or_else(|| panic!("{pg} has no SQL Server role"));
        assert!(database.contains(&format!("CREATE ROLE {role} AUTHORIZATION dbo")), "{role} not created by 00");
        assert!(grant.contains(&format!("N''{role}''")), "{role} refused by the grant statement");
        assert!(security.contains(&format!(" TO {role};")), "{role} is granted nothing");
    }
    for job in ["export_claim", "export_ack", "sweep"] {
        assert!(!security.contains(&format!("Rekenserver.{job} TO sbworker_role;")), "{job} granted to the worker");
        assert!(security.contains(&format!("Rekenserver.{job} FROM sbworker_role;")), "{job} not revoked");
    }
}

/// A procedure, function or trigger naming a column its table lacks is refused at CREATE
/// (deferred name resolution covers missing tables only). A column added by `ALTER TABLE
/// … ADD` is one an older install's table lacks, so a module naming the table and the
/// column must come after an ADD of it in the installer's order: an upgrade runs the
/// scripts over the old table. (By the names in the text: a module naming both.)
#[test]
fn a_module_comes_after_the_columns_it_names_are_added() {
    let installed: Vec<(usize, &str, String)> = batches()
        .into_iter()
        .filter(|(file, _, _)| SCRIPTS.iter().any(|(f, _)| f == file))
        .enumerate()
        .map(|(i, (file, _, upper))| (i, file, upper))
        .collect();
    // (batch, table as schema.name, column) of every column an ALTER TABLE … ADD adds
    // (one or several, separated by commas outside parentheses, to the statement's end).
    let mut added: Vec<(usize, String, String)> = Vec::new();
    for (i, _, upper) in &installed {
        for (at, _) in upper.match_indices("ALTER TABLE ") {
            let rest = &upper[at + "ALTER TABLE ".len()..];
            let mut parts = rest.splitn(2, char::is_whitespace);
            let (table, after) = (parts.next().unwrap_or(""), parts.next().unwrap_or("").trim_start());
            let Some(list) = after.strip_prefix("ADD").filter(|l| l.starts_with(char::is_whitespace)) else { continue };
            let list = &list[..list.find(';').unwrap_or(list.len())];
            let (mut depth, mut start) = (0i32, 0);
            let mut columns = Vec::new();
            for (k, ch) in list.char_indices() {
                match ch {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    ',' if depth == 0 => {
                        columns.push(&list[start..k]);
                        start = k + 1;
                    }
                    _ => {}
                }
            }
            columns.push(&list[start..]);
            for c in columns {
                let name = c.split_whitespace().next().unwrap_or("").trim_matches(['[', ']']);
                if !name.is_empty() && name != "CONSTRAINT" {
                    added.push((*i, unquote(table).to_uppercase(), name.to_owned()));
                }
            }
        }
    }
    assert!(added.iter().any(|(_, t, c)| t == "REKENSERVER.SLEUTEL" && c == "DIALOG_HANDLE"), "{added:?}");
    // Several columns in one ADD are each seen (02_worker.sql adds some that way).
    assert!(added.iter().filter(|(_, t, _)| t == "SBWORKER.MESSAGE_ATTEMPT").count() >= 2, "{added:?}");
    let mut late = Vec::new();
    for (i, file, upper) in &installed {
        if !["PROCEDURE", "FUNCTION", "TRIGGER"].iter().any(|k| upper.contains(&format!("CREATE OR ALTER {k}"))) {
            continue;
        }
        for (_, table, column) in &added {
            let first = added.iter().filter(|(_, t, c)| t == table && c == column).map(|(a, _, _)| *a).min().unwrap();
            if first > *i && names(upper, table) && names(upper, column) {
                late.push(format!("{file}: a module names {table}.{column}, added only in a later batch"));
            }
        }
    }
    assert!(late.is_empty(), "{late:#?}");
}

/// N2 of the fourth review: `sbworker install --mssql` puts this release's schema
/// collection in before script 04 where the Vraag validates against another; the name it
/// compares with is the one the optional script creates.
#[test]
fn the_installer_knows_the_current_schema_collection_by_name() {
    let name = sbworker::broker::mssql::schema_collection_name();
    assert!(name.starts_with("LoonfactorBerekening_") && name.len() == "LoonfactorBerekening_".len() + 16, "{name}");
    let script =
        std::fs::read_to_string(crate::common::root().join("broker/mssql/optional/schema_collection.sql")).unwrap();
    assert!(script.contains(&format!("CREATE XML SCHEMA COLLECTION Rekenserver.{name} AS N'")), "{name}");
    assert!(script.contains(&format!("WITH SCHEMA COLLECTION Rekenserver.{name};")), "{name}");
}

/// The sides of a split deployment (docs/sqlserver.md, "Two databases, two servers"): each
/// of scripts 01..07 refuses a Side it does not know before it changes anything, and its
/// regions are well formed: a switch line naming known sides opens one, `SET NOEXEC OFF;`
/// closes it, each a batch of its own, none nested, none left open at the script's end
/// (the installer runs every script on one connection), no USE inside one.
#[test]
fn every_script_checks_its_side_and_closes_its_regions() {
    // The optional script of event-based activation has regions of its own (a queue per side).
    let activation = sbworker::broker::mssql::OPTIONAL_SCRIPTS.iter().filter(|(f, _)| *f == "optional/activation.sql");
    for (file, script) in SCRIPTS.iter().chain(activation) {
        let lines: Vec<&str> = script.lines().collect();
        let check = lines.iter().position(|l| l.starts_with("IF '$(Side)' NOT IN ('both', 'roster', 'calc')"));
        if *file == "00_database.sql" {
            assert!(!script.contains("$(Side)"), "00 is the same on every side");
            continue;
        }
        let use_at = lines.iter().position(|l| l.starts_with("USE [$(Database)];")).unwrap();
        assert_eq!(check, Some(use_at + 2), "{file}: the Side check must follow USE");
        assert!(lines[use_at + 3].contains("THROW 50032"), "{file}");
        let mut open: Option<usize> = None;
        let mut regions = 0;
        for (i, line) in lines.iter().enumerate() {
            let code = line.split("--").next().unwrap_or("").to_uppercase();
            if let Some(sides) = region_sides(line) {
                assert!(open.is_none(), "{file}:{}: a region inside a region", i + 1);
                assert!(!sides.is_empty() && sides.len() < 3, "{file}:{}: {line}", i + 1);
                assert!(
                    lines[i + 1].trim() == "GO" && lines[i - 1].trim() == "GO" || lines[i - 1].starts_with("--"),
                    "{file}:{}: a switch is a batch of its own",
                    i + 1
                );
                open = Some(i);
                regions += 1;
            } else if region_end(line) {
                assert!(open.take().is_some(), "{file}:{}: SET NOEXEC OFF without a region", i + 1);
                assert_eq!(lines[i + 1].trim(), "GO", "{file}:{}", i + 1);
            } else {
                assert!(!code.contains("NOEXEC"), "{file}:{}: NOEXEC outside the two forms: {line}", i + 1);
                assert!(
                    !(open.is_some() && code.trim_start().starts_with("USE ")),
                    "{file}:{}: USE in a region",
                    i + 1
                );
            }
        }
        assert!(open.is_none(), "{file}: a region left open at the end");
        assert!(regions >= 1, "{file}: no region");
    }
}

/// What each side gets, object by object (the decision is written down in
/// docs/sqlserver.md, "Two databases, two servers").
#[test]
fn each_side_gets_its_own_objects_and_the_shared_ones() {
    let names = |side: Side| -> BTreeSet<String> { created_on(side).into_iter().map(|(_, _, n)| n).collect() };
    let (both, roster, calc) = (names(Side::Both), names(Side::Roster), names(Side::Calc));
    let shared = [
        "/rekenserver/loonfactorberekening/vraag",
        "/rekenserver/loonfactorberekening/antwoord",
        "/rekenserver/fout",
        "/rekenserver/loonfactorberekening/datacontract",
        "/rekenserver/loonfactorberekening/herberekencontract",
        "/rekenserver/loonfactorberekening/sleutelcontract",
        "herberekening",
        "sbworker.message_attempt",
        "sbworker.dead_letter",
        "sbworker.worker_instance",
        "sbworker.count_attempts",
        "sbworker.set_aside",
        "sbworker.reader_slot",
        "sbworker.queue_state",
        "sbworker.heartbeat",
        "sbworker.status_report",
        "sbworker.transport_state",
        "sbworker.dead_letters",
        "sbworker.replay_dead_letter",
        "sbworker.purge_dead_letters",
        "sbworker_role",
    ];
    for n in shared {
        assert!(roster.contains(n) && calc.contains(n), "{n} on both sides");
    }
    let calc_only = [
        "dbo.loonfactorberekening_reken",
        "/rekenserver/loonfactorberekening/rekenservice",
        "sbworker.answered_version",
        "sbworker.claim_version",
    ];
    let roster_only = [
        "dbo.loonfactorberekening_data",
        "/rekenserver/loonfactorberekening/dataservice",
        "rooster.dienst",
        "rooster.dienst_gewijzigd",
        "rekenserver.sleutel",
        "rekenserver.resultaat",
        "rekenserver.berekening_log",
        "rekenserver.run_log",
        "rekenserver.stuur_vraag",
        "rekenserver.sla_antwoord_op",
        "rekenserver.sweep",
        "rekenserver.export_claim",
        "rekenserver.selftest",
        "rekenserver.instelling",
    ];
    for n in calc_only {
        assert!(calc.contains(n) && !roster.contains(n), "{n} on the calculation side only");
    }
    for n in roster_only {
        assert!(roster.contains(n) && !calc.contains(n), "{n} on the roster side only");
    }
    // A one-database install is what it was: both sides together.
    let union: BTreeSet<String> = roster.union(&calc).cloned().collect();
    assert_eq!(both, union);
}

/// A batch that runs on one side names no table, procedure or function that only the
/// other side has, unless it first checks that it exists (`OBJECT_ID(N'name' ...) IS NOT
/// NULL`): a statement naming a missing table fails when it runs, and a module naming a
/// missing function or procedure may not even be created (deferred name resolution covers
/// tables only).
#[test]
fn no_batch_names_an_object_its_side_lacks_unchecked() {
    let objects = |side: Side| -> BTreeSet<String> {
        created_on(side)
            .into_iter()
            .filter(|(_, k, _)| ["TABLE", "PROCEDURE", "FUNCTION", "TRIGGER", "QUEUE"].contains(&k.as_str()))
            .map(|(_, _, n)| n)
            .collect()
    };
    let all = objects(Side::Both);
    let mut found = Vec::new();
    for side in [Side::Roster, Side::Calc] {
        let here = objects(side);
        let missing: Vec<&String> = all.iter().filter(|n| !here.contains(*n)).collect();
        assert!(!missing.is_empty());
        for (file, code, _) in batches_on(side) {
            let lower = code.to_lowercase();
            for name in &missing {
                if !names(&lower, name) {
                    continue;
                }
                let checked = lower.contains(&format!("object_id(n'{name}', n'u') is not null"))
                    || lower.contains(&format!("object_id(n'{name}', n'p') is not null"));
                if !checked {
                    found.push(format!("{side}: {file} names {name}, which only the other side has"));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    assert!(found.is_empty(), "{found:#?}");
}

/// The optional scripts of a split deployment (docs/sqlserver.md, "Two databases, two
/// servers"): endpoint.sql runs in master and makes what an instance needs, checked by
/// name first; routes.sql runs in the side's database, refuses a one-database install,
/// makes the roster's routes without BROKER_INSTANCE (load-balanced) and the calculation's
/// with the roster database's, and grants public SEND on the side's service (the dialogs
/// have no dialog security); no DROP anywhere; the endpoint's transport is certificate
/// authenticated and encrypted.
#[test]
fn the_transport_scripts_make_the_endpoint_and_the_routes_by_microsofts_forms() {
    let script = |name: &str| sbworker::broker::mssql::OPTIONAL_SCRIPTS.iter().find(|(f, _)| *f == name).unwrap().1;
    let endpoint = split(script("optional/endpoint.sql")).join("GO\n");
    assert!(endpoint.contains("USE master;") && !endpoint.contains("USE [Payroll]"));
    for needed in [
        "CREATE MASTER KEY ENCRYPTION BY PASSWORD = 'Sample-Password-1';",
        "WITH SUBJECT = N'sbworker Service Broker transport, instance rooster',",
        "EXPIRY_DATE = '20301231';",
        "CREATE ENDPOINT [sbworker_broker]\n        STATE = STARTED\n        AS TCP (LISTENER_PORT = 4022, LISTENER_IP = ALL)",
        "FOR SERVICE_BROKER (AUTHENTICATION = CERTIFICATE [sbworker_broker_rooster],",
        "ENCRYPTION = REQUIRED ALGORITHM AES);",
        "BACKUP CERTIFICATE [sbworker_broker_rooster] TO FILE = N'/certs/sbworker_broker_rooster.cer';",
        "CREATE CERTIFICATE [sbworker_broker_reken1] AUTHORIZATION [sbworker_broker_reken1]\n        FROM FILE = N'/certs/sbworker_broker_reken1.cer';",
        "GRANT CONNECT ON ENDPOINT::[sbworker_broker] TO [sbworker_broker_reken1];",
        "GRANT VIEW DEFINITION ON ENDPOINT::[sbworker_broker] TO [sbworker_login];",
    ] {
        assert!(endpoint.contains(needed), "endpoint.sql lacks {needed}");
    }
    // Only the public key leaves the instance.
    assert!(!endpoint.to_uppercase().contains("WITH PRIVATE KEY"));
    let routes = split(script("optional/routes.sql")).join("GO\n");
    assert!(routes.contains("USE [Payroll];") && routes.contains("IF 'both' NOT IN ('roster', 'calc')"));
    assert!(routes.contains("STRING_SPLIT(N'TCP://reken1:4022,TCP://reken2:4022', N',')"));
    let roster_route = &routes[routes.find("N'CREATE ROUTE '").unwrap()..];
    let roster_route = &roster_route[..roster_route.find("EXEC").unwrap()];
    assert!(roster_route.contains("SERVICE_NAME = N''/Rekenserver/LoonfactorBerekening/RekenService''"));
    assert!(!roster_route.contains("BROKER_INSTANCE"), "the roster's routes name no broker instance: load-balanced");
    for needed in [
        "CREATE ROUTE [sbworker_data]\n        WITH SERVICE_NAME = N'/Rekenserver/LoonfactorBerekening/DataService',\n             BROKER_INSTANCE = N'5F1C8E2A-0000-4000-8000-000000000001',\n             ADDRESS = N'TCP://rooster:4022';",
        "ALTER ROUTE [sbworker_data]",
        "GRANT SEND ON SERVICE::[/Rekenserver/LoonfactorBerekening/RekenService] TO public;",
        "GRANT SEND ON SERVICE::[/Rekenserver/LoonfactorBerekening/DataService] TO public;",
    ] {
        assert!(routes.contains(needed), "routes.sql lacks {needed}");
    }
    // The dialogs really are begun without dialog security (what the grant to public rests on).
    let roster = SCRIPTS.iter().find(|(f, _)| *f == "04_roster.sql").unwrap().1;
    assert!(roster.matches("ENCRYPTION = OFF").count() >= 2);
    for text in [&endpoint, &routes] {
        for line in text.lines() {
            assert!(!line.trim_start().to_uppercase().starts_with("DROP "), "{line}");
        }
    }
}

/// Event-based activation (`optional/activation.sql`, docs/sqlserver.md): on every side the
/// notification queue and a service on it for the event notifications' contract, named
/// `http://…` as SQL Server names it (Microsoft's pages print `https://` since their links
/// were rewritten; the same pages in other languages keep `http://`), and RECEIVE on it for
/// the worker's role; one QUEUE_ACTIVATION event notification on each of the side's queues,
/// to that service in the current database, left out where the queue has an activation
/// procedure (Msg 9718); no DROP. The worker waits on the queue the script makes.
#[test]
fn the_activation_script_watches_each_queue_of_its_side() {
    let script = sbworker::broker::mssql::OPTIONAL_SCRIPTS
        .iter()
        .find(|(f, _)| *f == "optional/activation.sql")
        .expect("the script is listed")
        .1;
    let reken = ("sbworker_activation_reken", REKEN_QUEUE);
    let data = ("sbworker_activation_data", DATA_QUEUE);
    for (side, watched) in [(Side::Both, vec![reken, data]), (Side::Roster, vec![data]), (Side::Calc, vec![reken])] {
        let text = split(&for_side(script, side)).join("GO\n");
        for needed in [
            "CREATE QUEUE sbworker.activation\n        WITH STATUS = ON, RETENTION = OFF, POISON_MESSAGE_HANDLING (STATUS = OFF);",
            "CREATE SERVICE [/sbworker/Activation] AUTHORIZATION [sbworker]\n        ON QUEUE sbworker.activation ([http://schemas.microsoft.com/SQL/Notifications/PostEventNotification]);",
            "GRANT RECEIVE ON OBJECT::sbworker.activation TO sbworker_role;",
        ] {
            assert!(text.contains(needed), "{side}: activation.sql lacks {needed}");
        }
        let creates = text.lines().filter(|l| l.trim_start().starts_with("CREATE EVENT NOTIFICATION")).count();
        assert_eq!(creates, watched.len(), "{side}");
        for (name, queue) in watched {
            let create = format!(
                "CREATE EVENT NOTIFICATION {name}\n        ON QUEUE dbo.{queue}\n        FOR QUEUE_ACTIVATION\n        \
                 TO SERVICE '/sbworker/Activation', 'current database';"
            );
            assert!(text.contains(&create), "{side}: activation.sql lacks {create}");
            let guard = &text[..text.find(&create).unwrap()];
            let guard = &guard[guard.rfind("GO\n").unwrap()..];
            assert!(
                guard.contains(&format!("name = N'{name}' AND parent_class = 1"))
                    && guard.contains(&format!("OBJECT_ID(N'dbo.{queue}') AND activation_procedure IS NOT NULL")),
                "{side}: the guard of {name}: {guard}"
            );
        }
    }
    for line in script.lines() {
        assert!(!line.trim_start().to_uppercase().starts_with("DROP "), "{line}");
    }
    assert!(stmt::WAIT_FOR_ACTIVATION.sql.contains("FROM sbworker.activation"), "the worker waits on that queue");
}
