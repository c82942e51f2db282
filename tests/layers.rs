//! The layers hold. Between crates Cargo enforces them (and a test here checks that each
//! crate's manifest depends on what the crate table of `src/lib.rs` says); inside
//! `sbworker-core` and `sbworker-tools` the table of the crate's `lib.rs` holds: every
//! `crate::` edge outside tests is one the table allows, the table has no cycle, and the
//! broker's two back ends never use each other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The library crates whose modules have a layer table in their `lib.rs`.
const CRATES: [&str; 2] = ["crates/core", "crates/tools"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The rows of the table in `{krate}/src/lib.rs`, in order: each module and the modules
/// it may use.
fn rows(krate: &str) -> Vec<(String, BTreeSet<String>)> {
    let lib = std::fs::read_to_string(root().join(krate).join("src/lib.rs")).unwrap();
    let mut out: Vec<(String, BTreeSet<String>)> = Vec::new();
    for line in lib.lines().filter_map(|l| l.strip_prefix("//! | `")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let module = cells[0].trim_end_matches('`').to_owned();
        let uses = cells.last().unwrap().trim_end_matches('|').trim();
        let allowed: BTreeSet<String> = if uses == "every module above" {
            out.iter().map(|(m, _)| m.clone()).collect()
        } else {
            uses.split(',').map(|u| u.trim().trim_matches('`').to_owned()).filter(|u| !u.is_empty()).collect()
        };
        out.push((module, allowed));
    }
    out
}

/// module → the modules it may use.
fn table(krate: &str) -> BTreeMap<String, BTreeSet<String>> {
    rows(krate).into_iter().collect()
}

/// The modules a `crate::` path of `krate` can name: its own rows and, for the tools,
/// the core's modules it re-exports under their own names.
fn known_modules(krate: &str) -> BTreeSet<String> {
    let mut m: BTreeSet<String> = table(krate).into_keys().collect();
    if krate != "crates/core" {
        m.extend(table("crates/core").into_keys());
    }
    m
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a file under src/ (`crates/core/src/broker/postgres/` → [broker, postgres]).
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" {
        parts.push(stem.to_owned());
    }
    parts
}

/// The top-level modules `code` (of the file at module path `path`) reaches, by
/// `crate::x` or by `super::` chains that climb to the crate root. Code from the first
/// `#[cfg(test)]` on, and comments, are left out.
fn edges(path: &[String], code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let code = code.split("#[cfg(test)]").next().unwrap_or("");
    // Comments (doc links included) are not uses.
    let code: String = code.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
    let code = code.as_str();
    let mut out = BTreeSet::new();
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    for (i, _) in code.match_indices("crate::") {
        if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue; // `sbworker_crate::` or similar
        }
        out.insert(ident(&code[i + "crate::".len()..]));
    }
    // The tools may also name the core's modules through the core crate itself.
    for (i, _) in code.match_indices("sbworker_core::") {
        out.insert(ident(&code[i + "sbworker_core::".len()..]));
    }
    for (i, _) in code.match_indices("super::") {
        if code[..i].ends_with("super::") || code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue; // counted from the first `super::` of a chain
        }
        let mut rest = &code[i..];
        let mut up = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            up += 1;
            rest = r;
        }
        if up >= path.len() {
            out.insert(ident(rest));
        }
    }
    out.retain(|m| modules.contains(m) && *m != path[0]);
    out
}

fn check(
    files: &[(Vec<String>, String)],
    table: &BTreeMap<String, BTreeSet<String>>,
    modules: &BTreeSet<String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (path, code) in files {
        let Some(allowed) = table.get(&path[0]) else {
            problems.push(format!("{}: module {} is not in the table of its lib.rs", path.join("::"), path[0]));
            continue;
        };
        for used in edges(path, code, modules) {
            if !allowed.contains(&used) {
                problems.push(format!("{} uses {used}, which its layer may not", path.join("::")));
            }
        }
    }
    problems
}

fn sources(krate: &str) -> Vec<(Vec<String>, String)> {
    let src = root().join(krate).join("src");
    let src = src.as_path();
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files
        .into_iter()
        .filter(|p| !p.ends_with("main.rs") && !p.ends_with("lib.rs"))
        .map(|p| (module_path(p.strip_prefix(src).unwrap()), std::fs::read_to_string(&p).unwrap()))
        .collect()
}

#[test]
fn every_crate_edge_is_one_the_layer_table_allows() {
    for krate in CRATES {
        let table = table(krate);
        assert!(table.len() >= 4, "the table of {krate} was read: {table:?}");
        let files = sources(krate);
        assert!(files.len() > 20, "{krate}: {}", files.len());
        let problems = check(&files, &table, &known_modules(krate));
        assert!(problems.is_empty(), "{krate}: {problems:#?}");
    }
    let (core, tools) = (table("crates/core"), table("crates/tools"));
    assert!(core.len() >= 14 && tools.len() == 4, "{core:?} {tools:?}");
    // The check finds a forbidden edge, through `crate::` or a `super::` chain.
    let bad = vec![
        (vec!["transport".to_owned()], "use crate::broker::postgres::Session;".to_owned()),
        (vec!["worker".to_owned(), "reader".to_owned()], "use super::super::handlers::calculation;".to_owned()),
        (vec!["emulator".to_owned(), "server".to_owned()], "fn f() { crate::worker::run(); }".to_owned()),
        (vec!["pg_cluster".to_owned()], "use sbworker_core::handlers::calculation;".to_owned()),
    ];
    let mut both = core.clone();
    both.extend(tools.clone());
    let modules = known_modules("crates/tools");
    assert_eq!(check(&bad, &both, &modules).len(), 4, "{:?}", check(&bad, &both, &modules));
}

#[test]
fn the_layer_tables_have_no_cycle() {
    let core: BTreeSet<String> = table("crates/core").into_keys().collect();
    for krate in CRATES {
        // Each module may use only modules listed above it (or, in the tools, the core's).
        let rows = rows(krate);
        let names: Vec<&String> = rows.iter().map(|(m, _)| m).collect();
        for (i, (m, uses)) in rows.iter().enumerate() {
            for used in uses {
                match names.iter().position(|r| *r == used) {
                    Some(at) => assert!(at < i, "{krate}: {m} may use {used}, which is listed below it"),
                    None => assert!(
                        krate != "crates/core" && core.contains(used),
                        "{krate}: {m} may use {used}: not a module"
                    ),
                }
            }
        }
        let lib = std::fs::read_to_string(root().join(krate).join("src/lib.rs")).unwrap();
        // Every top-level module file of lib.rs is in the table.
        for line in lib.lines().filter_map(|l| l.strip_prefix("pub mod ")).filter(|l| l.ends_with(';')) {
            let m = line.trim_end_matches(';');
            assert!(names.iter().any(|r| *r == m), "{krate}: module {m} is not in the layer table");
        }
    }
}

/// The `sbworker-*` crates a manifest depends on (its `[dependencies]` only).
fn crate_deps(manifest: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join(manifest)).unwrap();
    let deps = text.split("[dependencies]").nth(1).unwrap_or("");
    let deps = deps.split("\n[").next().unwrap_or("");
    deps.lines()
        .filter_map(|l| l.split_once(" = "))
        .map(|(n, _)| n.trim().to_owned())
        .filter(|n| n.starts_with("sbworker-"))
        .collect()
}

/// The crate table of src/lib.rs is what the manifests say: Cargo then enforces it.
#[test]
fn the_crate_table_is_what_the_manifests_say() {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let mut rows = BTreeMap::new();
    for line in lib.lines().filter_map(|l| l.strip_prefix("//! | `")) {
        let name = line.split('`').next().unwrap().to_owned();
        let uses = line.trim_end_matches('|').rsplit(" | ").next().unwrap();
        let uses: BTreeSet<String> =
            uses.split('`').skip(1).step_by(2).map(str::to_owned).filter(|u| u.starts_with("sbworker-")).collect();
        rows.insert(name, uses);
    }
    let manifests = [
        ("sbworker-core", "crates/core/Cargo.toml"),
        ("sbworker-tools", "crates/tools/Cargo.toml"),
        ("sbworker", "Cargo.toml"),
    ];
    assert_eq!(rows.len(), manifests.len(), "{rows:?}");
    for (name, manifest) in manifests {
        assert_eq!(rows.get(name), Some(&crate_deps(manifest)), "{name}: the table of src/lib.rs and {manifest}");
    }
    // The worker's library never has the tools, not even as an optional dependency.
    assert!(!std::fs::read_to_string(root().join("crates/core/Cargo.toml")).unwrap().contains("sbworker-tools"));
}

#[test]
fn the_two_back_ends_never_use_each_other() {
    for (path, code) in sources("crates/core") {
        let code = code.split("#[cfg(test)]").next().unwrap_or("").to_owned();
        match path.as_slice() {
            [b, p, ..] if b == "broker" && p == "postgres" => {
                assert!(!code.contains("mssql::"), "{}", path.join("::"));
            }
            [b, m, ..] if b == "broker" && m == "mssql" => {
                assert!(!code.contains("postgres::"), "{}", path.join("::"));
            }
            _ => {}
        }
    }
}

/// The test modules that `crate::X::` names in `text` (`common` left out).
fn topics_named(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if !name.is_empty() && name != "common" && rest[name.len()..].starts_with("::") {
            out.insert(name);
        }
    }
    out
}

/// Test topic files share helpers through `tests/common/` only: no topic file uses
/// another (two once imported each other, a cycle).
#[test]
fn test_topics_never_use_each_other() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut found = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".rs") || name == "tests.rs" || name == "layers.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for topic in topics_named(&text) {
            found.push(format!("{name} uses crate::{topic}"));
        }
    }
    assert!(found.is_empty(), "{found:#?}");
    // The check itself: an import of another topic is found, common's is not.
    assert_eq!(
        topics_named("use crate::emulator_clients::python_tds; use crate::common::tds::x;"),
        BTreeSet::from(["emulator_clients".to_owned()])
    );
}
