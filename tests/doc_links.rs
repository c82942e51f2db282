//! Every relative link and every cited repository path in the docs (README, CHANGELOG,
//! docs/, the benchmark diary) and in the code's doc comments points at something that
//! exists.

use std::path::{Path, PathBuf};

const ROOTS: &[&str] = &[
    "src/",
    "crates/",
    "broker/",
    "docs/",
    "tests/",
    "schemas/",
    "examples/",
    "data/",
    "bench/",
    "benches/",
    "fuzz/",
    ".ci/",
];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, ext, out);
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
}

/// The repository paths cited in backticks in `text` (`src/…`, `docs/…`, …), without
/// wildcards, placeholders or ellipses.
fn cited_paths(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| ROOTS.iter().any(|r| t.starts_with(r)))
        .filter(|t| !t.contains(|c: char| c.is_whitespace() || "*<>{}…$|".contains(c)))
        .map(|t| t.split([':', '#']).next().unwrap().to_owned())
        .collect()
}

/// The relative targets of markdown links in `text`.
fn links(text: &str) -> Vec<String> {
    text.match_indices("](")
        .filter_map(|(i, _)| text[i + 2..].split(')').next())
        .filter(|t| !t.contains("://") && !t.starts_with('#') && !t.starts_with("mailto:"))
        .map(|t| t.split('#').next().unwrap().to_owned())
        .filter(|t| !t.is_empty())
        .collect()
}

fn missing(base: &Path, targets: impl IntoIterator<Item = String>) -> Vec<String> {
    targets.into_iter().filter(|t| !base.join(t).exists()).collect()
}

#[test]
fn every_link_and_cited_path_in_the_docs_exists() {
    let root = repo();
    let mut docs = vec![root.join("README.md"), root.join("CHANGELOG.md"), root.join("bench/results/diary.md")];
    files(&root.join("docs"), "md", &mut docs);
    assert!(docs.len() >= 12, "{docs:?}");
    let mut problems = Vec::new();
    let mut checked = 0;
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap();
        let dir = doc.parent().unwrap();
        let l = links(&text);
        let c = cited_paths(&text);
        checked += l.len() + c.len();
        for m in missing(dir, l) {
            problems.push(format!("{}: link {m}", doc.strip_prefix(root).unwrap().display()));
        }
        for m in missing(root, c) {
            problems.push(format!("{}: path {m}", doc.strip_prefix(root).unwrap().display()));
        }
    }
    assert!(checked > 100, "{checked}");
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn every_path_a_doc_comment_cites_exists() {
    let root = repo();
    let mut code = Vec::new();
    for dir in ["src", "crates", "tests", "benches"] {
        files(&root.join(dir), "rs", &mut code);
    }
    let mut problems = Vec::new();
    let mut checked = 0;
    for f in &code {
        let text = std::fs::read_to_string(f).unwrap();
        let doc: String = text
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("//!").or_else(|| l.trim_start().strip_prefix("///")))
            .collect::<Vec<_>>()
            .join("\n");
        let cited = cited_paths(&doc);
        checked += cited.len();
        for m in missing(root, cited) {
            problems.push(format!("{}: {m}", f.strip_prefix(root).unwrap().display()));
        }
    }
    assert!(checked > 20, "{checked}");
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_checks_find_a_missing_target() {
    assert_eq!(links("see [x](docs/nothing.md#a) and [y](https://example.org)"), ["docs/nothing.md"]);
    assert_eq!(cited_paths("in `src/nothing.rs:12` and `src/*.rs` and `not/a/root.rs`"), ["src/nothing.rs"]);
    assert_eq!(missing(repo(), ["src/nothing.rs".to_owned(), "src/lib.rs".to_owned()]), ["src/nothing.rs"]);
}

#[test]
fn no_issue_numbers_in_code_or_docs() {
    // An issue number means nothing to a reader of the repository.
    let root = repo();
    let mut all = vec![root.join("README.md"), root.join("CHANGELOG.md")];
    for (dir, ext) in [
        ("docs", "md"),
        ("src", "rs"),
        ("crates", "rs"),
        ("tests", "rs"),
        ("benches", "rs"),
        ("broker", "sql"),
        ("crates", "sql"),
    ] {
        files(&root.join(dir), ext, &mut all);
    }
    let mut found = Vec::new();
    for f in &all {
        let text = std::fs::read_to_string(f).unwrap().to_lowercase();
        for (i, _) in text.match_indices("issue") {
            let after = text[i + 5..].trim_start_matches('s').trim_start();
            if after.starts_with(|c: char| c.is_ascii_digit()) {
                found.push(format!(
                    "{}: …{}…",
                    f.strip_prefix(root).unwrap().display(),
                    &text[i..(i + 12).min(text.len())]
                ));
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// The key paths of a TOML document (`worker.max_attempts`), each queue's name as `*`.
fn key_paths(v: &toml::Value, prefix: &str, out: &mut std::collections::BTreeSet<String>) {
    if let toml::Value::Table(t) = v {
        for (k, v) in t {
            let k = if prefix == "queues" { "*" } else { k.as_str() };
            let path = if prefix.is_empty() { k.to_owned() } else { format!("{prefix}.{k}") };
            if matches!(v, toml::Value::Table(_)) {
                key_paths(v, &path, out);
            } else {
                out.insert(path);
            }
        }
    }
}

/// `examples/sbworker.toml` says it lists every key with its default: every key the
/// configuration has at its defaults (a broker and one queue given, every section else
/// left out) is in it, and it names no key the configuration does not know (it loads).
#[test]
fn the_example_configuration_lists_every_key() {
    let minimal =
        "[broker]\nkind = \"postgres\"\nconnection = \"host=localhost\"\n\n[queues.q]\nhandler = \"calculation\"\n";
    let config = sbworker::config::from_str(minimal, &Vec::new()).unwrap();
    let defaults: toml::Value = toml::from_str(&toml::to_string(&config).unwrap()).unwrap();
    let text = std::fs::read_to_string(repo().join("examples/sbworker.toml")).unwrap();
    sbworker::config::from_str(&text, &Vec::new()).expect("the example loads");
    let (mut want, mut have) = (Default::default(), Default::default());
    key_paths(&defaults, "", &mut want);
    key_paths(&toml::from_str(&text).unwrap(), "", &mut have);
    // (The test hooks are not for production: the example leaves them out, saying so.)
    let missing: Vec<_> = want.difference(&have).filter(|k| !k.starts_with("hooks.")).collect();
    assert!(
        missing.is_empty(),
        "examples/sbworker.toml lacks these keys (defaults shown by the configuration): {missing:?}"
    );
}

/// A module header's `Layout:` list names every module the file declares (three reviews
/// in a row found one stale).
#[test]
fn every_layout_list_names_its_modules() {
    let mut rs = Vec::new();
    for dir in ["src", "crates"] {
        files(&repo().join(dir), "rs", &mut rs);
    }
    let mut stale = Vec::new();
    for f in rs {
        let text = std::fs::read_to_string(&f).unwrap();
        let header: String = text
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .map(|l| l.trim_start_matches("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        let Some(at) = header.find("Layout") else { continue };
        // The Layout paragraph: to the next blank line of the header.
        let layout = header[at..].split("\n\n").next().unwrap_or_default();
        for line in text.lines() {
            let l = line.trim();
            let name = l
                .strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("mod "))
                .or_else(|| l.strip_prefix("pub(crate) mod "));
            // (A file's unit tests are no part of its layout.)
            let Some(name) = name.and_then(|n| n.strip_suffix(';')).filter(|n| *n != "tests") else { continue };
            if !layout.contains(&format!("`{name}`")) {
                stale.push(format!("{}: {name}", f.strip_prefix(repo()).unwrap().display()));
            }
        }
    }
    assert!(stale.is_empty(), "modules missing from their file's Layout list: {stale:?}");
}
