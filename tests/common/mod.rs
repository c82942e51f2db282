//! Helpers shared by the test modules: paths, the xmllint validator, the PostgreSQL
//! cluster (`pg`) and Vraag builders (`build`).

pub mod broker;
pub mod calc;
pub mod faults;
pub mod letters;
pub mod mssql_real;
pub mod pg;
pub mod process;
pub mod tds;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The crate's root folder.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A Python package from PyPI (`spec`, e.g. `python-tds==1.17.1`), installed with pip into
/// one shared folder of the build directory (`target/tmp/{dir_name}`) when `module` does
/// not import there: once per build directory, not per test or per run. Installs are
/// one at a time (two tests asking at once would run pip into the same folder); the
/// directory to put on PYTHONPATH.
pub fn python_package(dir_name: &str, module: &str, spec: &str) -> PathBuf {
    static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = INSTALLING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(dir_name);
    let importable = || {
        Command::new("python3")
            .env("PYTHONPATH", &dir)
            .args(["-c", &format!("import {module}")])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !importable() {
        let status = Command::new("python3")
            .env("PIP_BREAK_SYSTEM_PACKAGES", "1")
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-warn-script-location"])
            .arg("--target")
            .arg(&dir)
            .arg(spec)
            .status();
        assert!(
            status.is_ok_and(|s| s.success()) && importable(),
            "this test needs python3 with pip and {spec} from PyPI (.ci/run installs pip)"
        );
    }
    dir
}

/// An npm package (`spec`, e.g. `tedious@19.2.2`), installed with npm into one shared
/// folder of the build directory (`target/tmp/{dir_name}`) when `module` is not there yet:
/// once per build folder, one install at a time. The `node_modules` folder to put on
/// NODE_PATH.
pub fn npm_package(dir_name: &str, module: &str, spec: &str) -> PathBuf {
    static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = INSTALLING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(dir_name);
    let modules = dir.join("node_modules");
    if !modules.join(module).join("package.json").exists() {
        std::fs::create_dir_all(&dir).unwrap();
        let status = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
            .arg(&dir)
            .arg(spec)
            .status();
        assert!(
            status.is_ok_and(|s| s.success()) && modules.join(module).join("package.json").exists(),
            "this test needs node and npm, and {spec} from the npm registry (.ci/run installs npm)"
        );
    }
    modules
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
    if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
}

/// Builds Vraag values for engine tests without going through XML.
pub mod build {
    use chrono::NaiveDate;
    use rust_decimal::Decimal;
    use sbworker::contract::values::{ClockTime, Timestamp};
    use sbworker::contract::*;

    pub fn d(s: &str) -> NaiveDate {
        sbworker::contract::values::parse_date(s).unwrap()
    }

    pub fn t(s: &str) -> ClockTime {
        sbworker::contract::values::parse_clock(s).unwrap()
    }

    /// A worked block.
    pub fn w(b: &str, e: &str) -> Tijdblok {
        blok(b, e, false, true)
    }

    /// A sick block.
    pub fn z(b: &str, e: &str) -> Tijdblok {
        blok(b, e, true, true)
    }

    pub fn blok(b: &str, e: &str, ziek: bool, telt: bool) -> Tijdblok {
        Tijdblok {
            begin: t(b),
            einde: t(e),
            is_ziek: ziek,
            dienst_type: DienstType { code: if ziek { "Z" } else { "D" }.into(), telt_mee_in_gewerkte_uren: telt },
            verlof: None,
        }
    }

    /// A leave block (statutory vacation, other vacation or other leave) on rostered
    /// hours, of a duty type that does not count as worked.
    pub fn verlof(b: &str, e: &str, kind: Verlof) -> Tijdblok {
        Tijdblok { verlof: Some(kind), ..blok(b, e, false, false) }
    }

    pub fn dienst(date: &str, blocks: Vec<Tijdblok>) -> Dienst {
        Dienst { datum: d(date), tijdblokken: blocks }
    }

    /// A full-timer (36 of 36 hours, salary 3900: €25.00 an hour) in a period.
    pub fn vraag(begin: &str, einde: &str, vier_weken: bool, diensten: Vec<Dienst>) -> Vraag {
        Vraag {
            id: uuid::Uuid::from_u128(0x1234),
            timestamp: "2026-03-12T09:15:02".parse::<Timestamp>().unwrap(),
            versie: 1,
            dienstverband: Dienstverband {
                id: 1,
                cao: Cao {
                    id: 100,
                    code: "ZKH".into(),
                    is_vier_weken: vier_weken,
                    naam: "CAO Ziekenhuizen".into(),
                    werkweek_uren: Decimal::from(36),
                },
                dagen_per_week: Decimal::from(5),
                datum_in_dienst: d("2015-01-01"),
                datum_uit_dienst: None,
                parttime_uren: Decimal::from(36),
                salaris: Some(Salaris {
                    garantie_toeslag: None,
                    garantie_trede_bedrag: None,
                    loon_toeslag: None,
                    nominaal_salaris: Decimal::from(3900),
                }),
                soort: "FT".into(),
                functiegroep: 45,
            },
            periode: Periode { id: 7, begin: d(begin), einde: d(einde) },
            diensten: Diensten { dienst: diensten },
            historie: Vec::new(),
            contract_versie: Some(sbworker::contract::CONTRACT_VERSIE),
        }
    }

    /// A March 2026 monthly Vraag.
    /// `n` Diensten of one worked block `from`-`to`, on the weekdays (Monday to Friday)
    /// from `first` on.
    pub fn weekday_shifts(first: &str, n: usize, from: &str, to: &str) -> Vec<Dienst> {
        let mut out = Vec::new();
        let mut day = d(first);
        while out.len() < n {
            if chrono::Datelike::weekday(&day).number_from_monday() <= 5 {
                out.push(Dienst { datum: day, tijdblokken: vec![w(from, to)] });
            }
            day = day.succ_opt().unwrap();
        }
        out
    }

    pub fn maart(diensten: Vec<Dienst>) -> Vraag {
        vraag("2026-03-01", "2026-03-31", false, diensten)
    }
}

/// Awaits `f` for at most `secs` seconds, and panics naming `what` after that: no wait in
/// a test is without a deadline.
pub async fn within<F: std::future::Future>(secs: u64, what: &str, f: F) -> F::Output {
    tokio::time::timeout(std::time::Duration::from_secs(secs), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within {secs} s"))
}

/// Checks many documents with one xmllint process: well-formedness only, or validity
/// against `schema`. Returns xmllint's complaint (naming the document) on failure.
pub fn xmllint_all(schema: Option<&std::path::Path>, docs: &[&[u8]]) -> Result<(), String> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("sbworker-xmllint-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files: Vec<std::path::PathBuf> = docs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let f = dir.join(format!("doc{i}.xml"));
            std::fs::write(&f, d).unwrap();
            f
        })
        .collect();
    let mut cmd = std::process::Command::new("xmllint");
    cmd.args(["--noout", "--nonet"]);
    if let Some(x) = schema {
        cmd.arg("--schema").arg(x);
    }
    let out = cmd.args(&files).output().expect("xmllint must be installed (Debian package libxml2-utils)");
    std::fs::remove_dir_all(&dir).unwrap();
    if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
}

/// The characters XML 1.0 does not allow that a Rust string can hold: the C0 controls
/// but tab, LF and CR, and U+FFFE, U+FFFF.
pub fn forbidden_chars() -> Vec<char> {
    (0u32..0x20).filter(|c| !matches!(c, 0x9 | 0xA | 0xD)).chain([0xFFFE, 0xFFFF]).filter_map(char::from_u32).collect()
}

/// One test per back end for each scenario `f(kind)` of the calling module (which
/// defines `Kind` with `Postgres` and `Tds`): `mod postgres { … }` and `mod tds { … }`,
/// each scenario a multi-threaded tokio test. The conformance suites' runner.
macro_rules! on_every_back_end {
    ($($scenario:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(super::Kind::Postgres).await
                }
            )*
        }
        mod tds {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(super::Kind::Tds).await
                }
            )*
        }
    };
}
pub(crate) use on_every_back_end;
