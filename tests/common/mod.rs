//! Helpers shared by the test modules: paths and the xmllint validator.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The crate's root folder.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The XSD for a root element name.
pub fn xsd(root_element: &str) -> PathBuf {
    root().join("schemas").join(format!("{root_element}.xsd"))
}

/// The root element an example file is for, from its name's first word.
pub fn root_of(file: &Path) -> &'static str {
    let name = file.file_name().unwrap().to_string_lossy();
    match name.split('-').next().unwrap() {
        "vraag" => "LoonfactorBerekeningVraag",
        "antwoord" => "LoonfactorBerekeningAntwoord",
        "fout" => "RekenserverFout",
        other => panic!("example {name}: unknown kind '{other}'"),
    }
}

/// The XML files in a folder, sorted.
pub fn xml_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "xml"))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no examples in {}", dir.display());
    v
}

/// Validates `xml` against `xsd` with `xmllint --schema` (libxml2-utils; `.ci/run`
/// installs it). Returns xmllint's complaint on failure.
pub fn xmllint(xsd: &Path, xml: &[u8]) -> Result<(), String> {
    let mut child = Command::new("xmllint")
        .args(["--noout", "--nonet", "--schema"])
        .arg(xsd)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("xmllint must be installed (Debian package libxml2-utils)");
    child.stdin.take().unwrap().write_all(xml).unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}
