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
