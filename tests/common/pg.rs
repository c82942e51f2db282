//! An ephemeral PostgreSQL cluster for the tests: one per test process, in a temp
//! directory, on a free port, run as the `postgres` user when the tests run as root.
//! Each test gets a fresh database with the broker installed.
//!
//! The server is a child of a thread that lives as long as the process and is started
//! with a parent-death signal, so it cannot outlive the tests; an exit hook stops it
//! and removes its directory when the test binary ends normally. Readiness is read from
//! the server's own log line, not guessed with sleeps.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::Duration;

pub struct Cluster {
    pub port: u16,
}

static CLUSTER: OnceLock<Cluster> = OnceLock::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(0);
static CLEANUP: Mutex<Option<(u32, PathBuf)>> = Mutex::new(None);

/// The directory holding the server binaries: $SBWORKER_PG_BIN, else the newest
/// /usr/lib/postgresql/N/bin, else `pg_config --bindir`.
fn bin_dir() -> PathBuf {
    if let Ok(p) = std::env::var("SBWORKER_PG_BIN") {
        return PathBuf::from(p);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, p)| p.join("postgres").exists())
        .collect();
    found.sort();
    if let Some((_, p)) = found.pop() {
        return p;
    }
    let out = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .expect("PostgreSQL server binaries (apt-get install postgresql)");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// uid and gid of `postgres` when running as root (initdb refuses root).
fn run_as() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").expect("/etc/passwd");
    let line =
        passwd.lines().find(|l| l.starts_with("postgres:")).expect("a postgres user (apt-get install postgresql)");
    let f: Vec<&str> = line.split(':').collect();
    Some((f[2].parse().unwrap(), f[3].parse().unwrap()))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Removes clusters left by test processes that no longer run.
fn sweep_stale(base: &Path) {
    for e in std::fs::read_dir(base).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(pid) = name.strip_prefix("sbworker-pg-").and_then(|p| p.parse::<i32>().ok()) {
            // SAFETY: kill with signal 0 only checks that the process exists.
            if unsafe { libc::kill(pid, 0) } != 0 {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

extern "C" fn stop_at_exit() {
    if let Ok(mut g) = CLEANUP.lock()
        && let Some((pid, dir)) = g.take()
    {
        // SAFETY: signalling our own child; SIGQUIT is the server's immediate shutdown.
        unsafe { libc::kill(pid as i32, libc::SIGQUIT) };
        let mut status = 0;
        // SAFETY: reaping the child we signalled.
        unsafe { libc::waitpid(pid as i32, &mut status, 0) };
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn start() -> Cluster {
    let base = std::env::temp_dir();
    sweep_stale(&base);
    let dir = base.join(format!("sbworker-pg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let user = run_as();
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).unwrap();
    }
    let bin = bin_dir();
    let data = dir.join("data");
    let mut initdb = Command::new(bin.join("initdb"));
    initdb.args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale", "-N", "-D"]).arg(&data);
    if let Some((uid, gid)) = user {
        initdb.uid(uid).gid(gid);
    }
    let out = initdb.output().expect("initdb runs");
    assert!(out.status.success(), "initdb failed: {}", String::from_utf8_lossy(&out.stderr));
    let port = free_port();
    let (tx, rx) = mpsc::channel();
    let (bin2, data2, dir2) = (bin.clone(), data.clone(), dir.clone());
    // The keeper thread owns the server process for the life of the test binary.
    std::thread::spawn(move || {
        let mut cmd = Command::new(bin2.join("postgres"));
        cmd.arg("-D").arg(&data2).arg("-p").arg(port.to_string()).arg("-k").arg(&dir2);
        for setting in [
            "listen_addresses=127.0.0.1",
            "fsync=off",
            "synchronous_commit=off",
            "full_page_writes=off",
            "max_connections=200",
            "shared_buffers=64MB",
            "log_min_messages=warning",
        ] {
            cmd.arg("-c").arg(setting);
        }
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        if let Some((uid, gid)) = user {
            cmd.uid(uid).gid(gid);
        }
        // SAFETY: prctl in the child before exec only sets its parent-death signal.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT);
                Ok(())
            });
        }
        let mut child = cmd.spawn().expect("postgres starts");
        tx.send(Ok(child.id())).unwrap();
        let stderr = child.stderr.take().unwrap();
        let mut told = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !told && line.contains("database system is ready to accept connections") {
                told = true;
                tx.send(Err(())).unwrap();
            }
        }
        // The server ended (or closed its log): keep the thread, and so the death
        // signal's parent, alive until the process ends.
        let _ = child.wait();
        loop {
            std::thread::park();
        }
    });
    let pid = rx.recv().unwrap().expect("the pid first");
    // Wait for the server's own "ready" line (startup takes well under a minute).
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Err(())) => {}
        other => panic!("postgres did not become ready: {other:?}"),
    }
    *CLEANUP.lock().unwrap() = Some((pid, dir.clone()));
    // SAFETY: registering a plain extern "C" function to run at exit.
    unsafe { libc::atexit(stop_at_exit) };
    Cluster { port }
}

pub fn cluster() -> &'static Cluster {
    CLUSTER.get_or_init(start)
}

impl Cluster {
    pub fn url(&self, db: &str) -> String {
        format!("host=127.0.0.1 port={} user=postgres dbname={db}", self.port)
    }
}

async fn admin(db: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&cluster().url(db), tokio_postgres::NoTls).await.expect("connects");
    tokio::spawn(conn);
    client
}

/// A fresh database with the broker installed; returns its connection string.
pub async fn fresh_db() -> String {
    let name = format!("t{}", NEXT_DB.fetch_add(1, Ordering::SeqCst));
    admin("postgres").await.batch_execute(&format!("CREATE DATABASE {name}")).await.expect("create database");
    let url = cluster().url(&name);
    sbworker::broker::postgres::install(&url).await.expect("broker installs");
    url
}
