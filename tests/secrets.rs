//! No secret is ever printed: the masking of connection strings as a
//! property over passwords holding every quoting hazard, written into every form; and
//! the real binary's output — `check-config`, a TOML syntax error on the connection
//! line, `run` against an unreachable broker and against running ones (logs at trace
//! level in text and JSON, and `/metrics`), `install`, `export` and `sweep` — never
//! holding a password. Every password here contains "s3cret", so one check covers all.

use std::process::Stdio;

use proptest::prelude::*;
use sbworker::config::mask_secrets;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::common::calc::{DATA_QUEUE, REKEN_QUEUE, TempDir};
use crate::common::pg::fresh_db;

const BIN: &str = env!("CARGO_BIN_EXE_sbworker");
const SECRET: &str = "s3cret";

// ---- The property: masking by parse, over every form and quoting style ----

/// libpq single quotes: `\` and `'` escaped.
fn libpq_quoted(p: &str) -> String {
    format!("'{}'", p.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A bare libpq value: white space, `\`, `'` and `;` escaped with `\`.
fn libpq_bare(p: &str) -> String {
    p.chars()
        .flat_map(|c| {
            let escape = c.is_whitespace() || matches!(c, '\\' | '\'' | ';');
            escape.then_some('\\').into_iter().chain(std::iter::once(c))
        })
        .collect()
}

/// Percent-encoded: every byte but the URL's unreserved characters.
fn percent(p: &str) -> String {
    p.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An ADO.NET value quoted with `"` or `'` (doubled inside) or wrapped in `{…}` (`}}`
/// inside).
fn ado_quoted(p: &str, open: char) -> String {
    match open {
        '{' => format!("{{{}}}", p.replace('}', "}}")),
        q => format!("{q}{}{q}", p.replace(q, &format!("{q}{q}"))),
    }
}

/// Each form with the password written in it, and what masking must give.
fn forms(p: &str) -> Vec<(String, String)> {
    let kv = |v: &str| format!("host=db.example user=pay password={v} dbname=roster");
    let kv_lines = |v: &str| format!("host=db.example\nuser=pay\npassword={v}\ndbname=roster\n");
    let userinfo = |v: &str| format!("postgresql://pay:{v}@db.example:5432/roster?sslmode=disable");
    let query = |v: &str| format!("postgres://pay@db.example/roster?password={v}&application_name=sbworker");
    let ado = |v: &str| format!("Server=tcp:db.example,1433;User Id=pay;Password={v};Encrypt=false");
    let ado_lines = |v: &str| format!("Server=db.example;\n  UID=pay;\n  PWD = {v} ;\n");
    // Line breaks between pairs are shown as one space.
    let kv_shown = "host=db.example user=pay password=*** dbname=roster";
    vec![
        (kv(&libpq_quoted(p)), kv("***")),
        (kv(&libpq_bare(p)), kv("***")),
        (kv_lines(&libpq_quoted(p)), kv_shown.into()),
        (kv_lines(&libpq_bare(p)), kv_shown.into()),
        (userinfo(&percent(p)), userinfo("***")),
        (query(&percent(p)), query("***")),
        (ado(&ado_quoted(p, '"')), ado("***")),
        (ado(&ado_quoted(p, '\'')), ado("***")),
        (ado(&ado_quoted(p, '{')), ado("***")),
        (ado_lines(&ado_quoted(p, '{')), "Server=db.example; UID=pay; PWD = *** ;".into()),
    ]
}

fn password() -> impl Strategy<Value = String> {
    let hazards: Vec<char> = "'\" ;\n\t\\&={}@:/?%#+,é€日\u{a0}".chars().collect();
    proptest::collection::vec(
        prop_oneof![
            proptest::sample::select(hazards),
            proptest::char::range('a', 'z'),
            proptest::char::range('0', '9')
        ],
        4..24,
    )
    .prop_map(|v| v.into_iter().collect())
}

proptest! {
    #[test]
    fn a_password_never_survives_masking_in_any_form(p in password()) {
        for (conn, expected) in forms(&p) {
            let shown = mask_secrets(&conn);
            prop_assert_eq!(&shown, &expected, "{:?}", conn);
            // (A password that happens to be a part of the rest, "host" say, is not a leak.)
            prop_assert!(expected.contains(&p) || !shown.contains(&p), "{:?} shows the password: {:?}", conn, shown);
            prop_assert!(shown.contains("db.example") && shown.contains("pay"), "{:?}", shown);
        }
    }
}

#[test]
fn the_forms_of_the_property_read_back_to_the_password() {
    // The writers above are right: each form parses back to the password itself.
    let p = "a'b\"c;d e\nf\\g&h=i{j}k@l:m/n?o%p\u{a0}é";
    for (conn, _) in forms(p) {
        let c = sbworker::connstr::parse(&conn).unwrap_or_else(|e| panic!("{conn:?}: {e}"));
        let got = c.get("password").or(c.get("pwd"));
        assert_eq!(got, Some(p), "{conn:?}");
    }
}

// ---- The binary ----

/// Runs `sbworker args` with `env`; its exit code and stdout and stderr together.
async fn sbworker(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out =
        crate::common::within(600, "the command ends", Command::new(BIN).args(args).envs(env.iter().copied()).output())
            .await
            .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

/// A port on this machine nothing listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn config(kind: &str, connection_line: &str, extra: &str) -> String {
    format!(
        "[broker]\nkind = \"{kind}\"\n{connection_line}\n\n{extra}\n\n[queues.{REKEN_QUEUE}]\nhandler = \"loonfactor-berekening\"\nwait_ms = 2000\n"
    )
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

fn write(dir: &TempDir, text: &str) -> String {
    let path = dir.0.join(format!("{}.toml", Uuid::new_v4()));
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

#[tokio::test]
async fn check_config_shows_every_form_masked() {
    let dir = TempDir::new("secrets-check");
    for (kind, line, shown) in [
        // The operator's cases: one key per line, and a quoted password with an escape.
        (
            "postgres",
            "connection = \"\"\"\nhost=db.example\nuser=pay\npassword=s3cret-lines\ndbname=roster\n\"\"\"",
            "password=***",
        ),
        ("postgres", r"connection = '''host=db.example password='a\'b-s3cret-quoted' dbname=roster'''", "password=***"),
        ("postgres", "connection = \"host=db.example\\tpassword=s3cret-tab\"", "password=***"),
        (
            "postgres",
            "connection = \"postgresql://pay:s3cret%40url@db.example/r?sslpassword=s3cret-q\"",
            "pay:***@db.example",
        ),
        (
            "mssql",
            "connection = \"\"\"Server=tcp:db.example,1433;\nUser Id=pay;\nPassword={s3cret;ado}}};\n\"\"\"",
            "Password=***",
        ),
        // Cannot be parsed (an ADO.NET-style ';' in libpq): not shown at all.
        ("postgres", "connection = \"host=db.example user=pay;password=s3cret\"", "not shown"),
    ] {
        let path = write(&dir, &config(kind, line, ""));
        let (code, out) = sbworker(&["check-config", "--config", &path], &[]).await;
        assert!(!out.contains(SECRET), "{line}: {out}");
        if line.contains("sslpassword") || shown == "not shown" {
            // A string the worker cannot use stops check-config (EX_CONFIG), naming the
            // key and never quoting the string.
            assert_eq!(code, Some(78), "{line}: {out}");
            assert!(out.contains("broker.connection: the connection string cannot be used"), "{line}: {out}");
        } else {
            assert_eq!(code, Some(0), "{line}: {out}");
            assert!(out.contains(shown), "{line}: {out}");
        }
    }
    // SQL Server refuses it (78), naming the key but not the text.
    let ado = "connection = \"Server=db.example;User Id=pay;Password=ab;s3cret;Encrypt=false\"";
    let (code, out) = sbworker(&["check-config", "--config", &write(&dir, &config("mssql", ado, ""))], &[]).await;
    assert!(code == Some(78) && out.contains("broker.connection") && !out.contains(SECRET), "{out}");
    // From the environment and from the flag, multi-line too.
    let path = write(&dir, &config("postgres", "connection = \"host=db.example\"", ""));
    let multi = "host=db.example\nuser=pay\npassword=s3cret-env\n";
    let (code, out) = sbworker(&["check-config", "--config", &path], &[("SBWORKER__BROKER__CONNECTION", multi)]).await;
    assert!(code == Some(0) && out.contains("password=***") && !out.contains(SECRET), "{out}");
    let (code, out) =
        sbworker(&["check-config", "--config", &path, "--connection", "host=x\npassword='s3 cret'"], &[]).await;
    assert!(code == Some(0) && out.contains("password=***") && !out.contains("s3 cret"), "{out}");
    // A queue's own database (a split install): masked as [broker]'s, and named by its
    // key when it cannot be used.
    let queue = format!(
        "[broker]\nkind = \"postgres\"\nconnection = \"host=db.example\"\n\n\
         [queues.{DATA_QUEUE}]\nhandler = \"resultaat-opslag\"\n\n\
         [queues.{REKEN_QUEUE}]\nhandler = \"loonfactor-berekening\"\nconnection = {}\n",
        toml_string("host=calc.example user=pay password=s3cret-queue dbname=reken")
    );
    let (code, out) = sbworker(&["check-config", "--config", &write(&dir, &queue)], &[]).await;
    assert!(code == Some(0) && out.contains("password=***") && !out.contains(SECRET), "{out}");
    assert!(out.contains(&format!("PostgreSQL TLS (queues.{REKEN_QUEUE}.connection)")), "{out}");
    let bad = queue.replace("user=pay password", "user=pay;password");
    let (code, out) = sbworker(&["check-config", "--config", &write(&dir, &bad)], &[]).await;
    assert_eq!(code, Some(78), "{out}");
    assert!(out.contains(&format!("queues.{REKEN_QUEUE}.connection")) && !out.contains(SECRET), "{out}");
}

#[tokio::test]
async fn a_toml_syntax_error_on_the_connection_line_names_it_without_its_text() {
    let dir = TempDir::new("secrets-syntax");
    for line in [
        // Not closed; libpq's \' inside a TOML basic string (not a TOML escape), on one
        // line and in a multi-line string; not quoted at all; a secret of the wrong type.
        "connection = \"host=db.example password=s3cret-unclosed",
        r#"connection = "host=db.example password='a\'b-s3cret-one-line'""#,
        "connection = \"\"\"\nhost=db.example\npassword='a\\'b-s3cret-escaped'\n\"\"\"",
        "connection = host=db.example password=s3cret-bare",
    ] {
        let path = write(&dir, &config("postgres", line, ""));
        for cmd in ["check-config", "run"] {
            let (code, out) = sbworker(&[cmd, "--config", &path], &[]).await;
            assert_eq!(code, Some(78), "{cmd} {line}: {out}");
            assert!(out.contains("line ") && out.contains("column ") && out.contains("broker.connection"), "{out}");
            assert!(!out.contains(SECRET) && !out.contains("db.example"), "{cmd} {line}: {out}");
        }
    }
    let path = write(&dir, &config("postgres", "connection = 735_533", ""));
    let (code, out) = sbworker(&["check-config", "--config", &path], &[]).await;
    assert!(code == Some(78) && out.contains("broker.connection") && !out.contains("735"), "{out}");
}

#[tokio::test]
async fn run_against_an_unreachable_broker_logs_no_password() {
    let dir = TempDir::new("secrets-unreachable");
    let port = closed_port();
    for (kind, conn) in [
        ("postgres", format!("host=127.0.0.1\nport={port}\nuser=pay\npassword='a\\'b-s3cret'\ndbname=roster\n")),
        ("postgres", format!("postgresql://pay:s3cret%2Fx@127.0.0.1:{port}/roster?password=s3cret-too")),
        // Unquoted: tokio-postgres would name "s3cret-b" an unknown option.
        ("postgres", format!("host=127.0.0.1 port={port} password=s3cret-a s3cret-b=x")),
        ("mssql", format!("Server=tcp:127.0.0.1,{port};User Id=pay;Password='s3cret;x';Encrypt=false")),
    ] {
        for format in ["text", "json"] {
            let extra = format!("[log]\nlevel = \"trace\"\nformat = \"{format}\"");
            let path = write(&dir, &config(kind, &format!("connection = {}", toml_string(&conn)), &extra));
            let (code, out) = sbworker(&["run", "--config", &path], &[]).await;
            assert!(!out.contains(SECRET), "{conn} ({format}): {out}");
            if conn.contains("s3cret-b=x") {
                // Not a string the worker can use: stopped before connecting (EX_CONFIG).
                assert_eq!(code, Some(78), "{conn}: {out}");
                assert!(out.contains("broker.connection"), "{conn}: {out}");
            } else {
                assert_eq!(code, Some(1), "{conn}: {out}");
                assert!(out.contains("cannot reach the broker"), "{conn} ({format}): {out}");
            }
        }
    }
}

/// A running `sbworker run`, its output line by line.
struct Worker {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
}

impl Worker {
    fn start(config_path: &str) -> Self {
        let mut child = Command::new(BIN)
            .args(["run", "--config", config_path])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("sbworker starts");
        let (tx, lines) = mpsc::unbounded_channel();
        forward(child.stdout.take().unwrap(), tx.clone());
        forward(child.stderr.take().unwrap(), tx);
        Self { child, lines, seen: Vec::new() }
    }

    /// The first line containing `text` (waiting for it).
    async fn wait_for(&mut self, text: &str) -> String {
        loop {
            let Some(line) = crate::common::within(60, "a log line", self.lines.recv()).await else {
                panic!("the worker ended before printing {text:?}:\n{}", self.seen.join("\n"))
            };
            self.seen.push(line.clone());
            if line.contains(text) {
                return line;
            }
        }
    }

    /// SIGTERM, then everything it printed.
    async fn stop(mut self) -> String {
        let pid = self.child.id().expect("running") as i32;
        // SAFETY: sending a signal to our own child process.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let status = crate::common::within(60, "the process exits", self.child.wait()).await.unwrap();
        while let Some(line) = self.lines.recv().await {
            self.seen.push(line);
        }
        let log = self.seen.join("\n");
        assert_eq!(status.code(), Some(0), "{log}");
        log
    }
}

/// Sends each line of `from` to `to`.
fn forward(from: impl tokio::io::AsyncRead + Unpin + Send + 'static, to: mpsc::UnboundedSender<String>) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(from).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if to.send(line).is_err() {
                break;
            }
        }
    });
}

/// `GET /metrics` from the address in a "serving /metrics" log line.
async fn metrics_from(line: &str) -> String {
    let from = line.find("127.0.0.1:").expect("the log line names the address");
    let addr: String = line[from..].chars().take_while(|c| c.is_ascii_digit() || matches!(c, '.' | ':')).collect();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: sbworker\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut body = String::new();
    stream.read_to_string(&mut body).await.unwrap();
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    body
}

/// Runs a worker on `connection` at trace level in both log formats, with /metrics;
/// returns everything it printed and served.
async fn run_and_stop(dir: &TempDir, kind: &str, connection: &str) -> String {
    let mut all = String::new();
    for format in ["text", "json"] {
        let extra = format!("[http]\nlisten = \"127.0.0.1:0\"\n\n[log]\nlevel = \"trace\"\nformat = \"{format}\"");
        let path = write(dir, &config(kind, &format!("connection = {}", toml_string(connection)), &extra));
        let mut w = Worker::start(&path);
        let serving = w.wait_for("serving /metrics").await;
        let started = w.wait_for("worker started").await;
        assert!(started.contains("***"), "the broker is named, masked: {started}");
        all.push_str(&metrics_from(&serving).await);
        all.push_str(&w.stop().await);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_worker_prints_no_password_at_any_level() {
    let dir = TempDir::new("secrets-running");
    // PostgreSQL (the test cluster trusts local users: the password is sent and unused),
    // one key per line.
    let url = fresh_db().await;
    let lines = format!("{}\npassword='a\\'b-s3cret'\n", url.replacen(' ', "\n", 3));
    let out = run_and_stop(&dir, "postgres", &lines).await;
    assert!(!out.contains(SECRET), "{out}");
    // SQL Server through the emulator, whose login needs the password.
    let (stop_tx, stop) = sbworker::worker::Stop::new();
    let password = "s3cret;{pw}";
    let creds = sbworker::emulator::server::Credentials { user: "sbworker".into(), password: password.into() };
    let (addr, _) = sbworker::emulator::server::start("127.0.0.1:0".parse().unwrap(), url, creds, stop).await.unwrap();
    let conn = format!(
        "Server=tcp:127.0.0.1,{};User Id=sbworker;Password={};Encrypt=false",
        addr.port(),
        ado_quoted(password, '{')
    );
    assert_eq!(sbworker::connstr::parse(&conn).unwrap().get("password"), Some(password));
    let out = run_and_stop(&dir, "mssql", &conn).await;
    assert!(!out.contains(SECRET), "{out}");
    drop(stop_tx);
}

#[tokio::test]
async fn install_export_and_sweep_print_no_password() {
    let port = closed_port();
    let pg = format!("host=127.0.0.1\nport={port}\npassword='s3cret x'\n");
    let unquoted = format!("host=127.0.0.1 port={port} password=s3cret-a s3cret-b=1");
    let url = format!("postgresql://pay:s3cret@127.0.0.1:{port}/r");
    let ado = format!("Server=tcp:127.0.0.1,{port};User Id=pay;Password={{s3cret}};Encrypt=false");
    let none: &[(&str, &str)] = &[];
    let from_env: &[(&str, &str)] = &[("SBWORKER__BROKER__CONNECTION", &url)];
    let runs: [(&[&str], _); 10] = [
        (&["install", "--postgres", &pg], none),
        (&["install", "--postgres", &unquoted], none),
        (&["install", "--postgres", &url, "--roster"], none),
        (&["install", "--mssql", &ado], none),
        (&["install", "--mssql", "Server=db;Password=\"s3cret"], none),
        (&["export", "--postgres", &pg, "--periode", "202604"], none),
        (&["export", "--postgres", &unquoted, "--periode", "202604"], none),
        (&["export", "--periode", "202604"], from_env),
        (&["sweep", "--postgres", &pg], none),
        (&["sweep", "--postgres", &unquoted], none),
    ];
    for (args, env) in runs {
        let (code, out) = sbworker(args, env).await;
        assert_eq!(code, Some(1), "{args:?}: {out}");
        assert!(!out.contains(SECRET), "{args:?}: {out}");
    }
}
