//! A throwaway PostgreSQL cluster: initdb in a temp directory, a server on a free
//! loopback port, gone when dropped. Used by the tests, the benchmarks, and the demo
//! (its `--split` servers too) and `sbworker emulator` when no database is given.
//!
//! As root the server runs as the `postgres` user (initdb refuses root). The server is
//! the child of a thread that lives as long as the process and is started with a
//! parent-death signal, so it cannot outlive the process even if nothing drops it.
//! Readiness is read from the server's own log line.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Why the cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "PostgreSQL server binaries not found ({0}); install them (apt-get install postgresql) or set SBWORKER_PG_BIN"
    )]
    NoBinaries(String),
    #[error("running as root but there is no postgres user to run the server as (apt-get install postgresql)")]
    NoPostgresUser,
    #[error("initdb failed: {0}")]
    Initdb(String),
    #[error("the server did not start: {0}")]
    Start(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A running throwaway cluster. Dropping it stops the server and removes its files.
pub struct Cluster {
    port: u16,
    dir: PathBuf,
    server: Server,
    running: std::sync::Mutex<Running>,
}

/// What starts the server again: its binaries, data directory and options.
struct Server {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    dir: PathBuf,
    args: Vec<String>,
    user: Option<(u32, u32)>,
}

/// The server process now running.
struct Running {
    pid: u32,
    /// Signalled by the keeper thread when the server has exited.
    exited: mpsc::Receiver<()>,
}

impl Server {
    /// Starts the server in a keeper thread and waits until it accepts connections.
    fn launch(&self) -> Result<(u32, mpsc::Receiver<()>), ClusterError> {
        let mut cmd = Command::new(self.bin.join("postgres"));
        cmd.arg("-D").arg(&self.data).arg("-p").arg(self.port.to_string()).arg("-k").arg(&self.dir);
        cmd.args(&self.args);
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        if let Some((uid, gid)) = self.user {
            cmd.uid(uid).gid(gid);
        }
        // SAFETY: in the child before exec, prctl only sets its parent-death signal.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT);
                Ok(())
            });
        }
        let (tx, rx) = mpsc::channel::<Result<u32, String>>();
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        let (exit_tx, exited) = mpsc::channel::<()>();
        // The keeper thread owns the server: the death signal follows this thread, which
        // stays alive (parked) until the process ends.
        std::thread::Builder::new().name("pg-cluster".into()).spawn(move || {
            let mut child = match cmd.spawn() {
                Ok(c) => c,
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                    return;
                }
            };
            let _ = tx.send(Ok(child.id()));
            if let Some(stderr) = child.stderr.take() {
                let mut told = false;
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if !told && line.contains("database system is ready to accept connections") {
                        told = true;
                        let _ = ready_tx.send(());
                    }
                }
            }
            let _ = child.wait();
            let _ = exit_tx.send(());
            loop {
                std::thread::park();
            }
        })?;
        let pid = rx.recv().map_err(|e| ClusterError::Start(e.to_string()))?.map_err(ClusterError::Start)?;
        if ready_rx.recv_timeout(Duration::from_secs(120)).is_err() {
            // SAFETY: signalling the server just started, which never became ready.
            unsafe { libc::kill(pid as i32, libc::SIGQUIT) };
            return Err(ClusterError::Start("no 'ready to accept connections' within 120 s".into()));
        }
        Ok((pid, exited))
    }
}

/// The directory holding the server binaries: $SBWORKER_PG_BIN, else the newest
/// /usr/lib/postgresql/N/bin, else `pg_config --bindir`.
fn bin_dir() -> Result<PathBuf, ClusterError> {
    if let Ok(p) = std::env::var("SBWORKER_PG_BIN") {
        return Ok(PathBuf::from(p));
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
        return Ok(p);
    }
    let out =
        Command::new("pg_config").arg("--bindir").output().map_err(|e| ClusterError::NoBinaries(e.to_string()))?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if p.join("postgres").exists() { Ok(p) } else { Err(ClusterError::NoBinaries(p.display().to_string())) }
}

/// uid and gid of `postgres` when running as root.
fn run_as() -> Result<Option<(u32, u32)>, ClusterError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    let line = passwd.lines().find(|l| l.starts_with("postgres:")).ok_or(ClusterError::NoPostgresUser)?;
    let f: Vec<&str> = line.split(':').collect();
    match (f.get(2).and_then(|s| s.parse().ok()), f.get(3).and_then(|s| s.parse().ok())) {
        (Some(u), Some(g)) => Ok(Some((u, g))),
        _ => Err(ClusterError::NoPostgresUser),
    }
}

/// Removes clusters left in `base` by processes that no longer run.
fn sweep_stale(base: &Path) {
    for e in std::fs::read_dir(base).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid =
            name.strip_prefix("sbworker-pg-").and_then(|p| p.split('-').next()).and_then(|p| p.parse::<i32>().ok());
        // SAFETY: kill with signal 0 only checks that the process exists.
        if let Some(pid) = pid
            && unsafe { libc::kill(pid, 0) } != 0
        {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl Cluster {
    /// Starts a cluster with settings for throwaway use (no fsync: a crash loses it,
    /// which is fine for what it is). `settings` are extra `-c name=value` options.
    pub fn start(settings: &[&str]) -> Result<Self, ClusterError> {
        Self::start_with_files(settings, &[])
    }

    /// [`Cluster::start`], with `files` (name, contents, mode) written into the data
    /// directory before the server starts, owned by the server's user: certificates
    /// and keys for `ssl=on`, a `pg_hba.conf` of one's own.
    pub fn start_with_files(settings: &[&str], files: &[(&str, &[u8], u32)]) -> Result<Self, ClusterError> {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let base = std::env::temp_dir();
        sweep_stale(&base);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = base.join(format!("sbworker-pg-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let user = run_as()?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
        }
        let bin = bin_dir()?;
        let data = dir.join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb.args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale", "-N", "-D"]).arg(&data);
        if let Some((uid, gid)) = user {
            initdb.uid(uid).gid(gid);
        }
        let out = initdb.output()?;
        if !out.status.success() {
            return Err(ClusterError::Initdb(String::from_utf8_lossy(&out.stderr).into_owned()));
        }
        for (name, contents, mode) in files {
            use std::os::unix::fs::PermissionsExt;
            let path = data.join(name);
            std::fs::write(&path, contents)?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode))?;
            if let Some((uid, gid)) = user {
                std::os::unix::fs::chown(&path, Some(uid), Some(gid))?;
            }
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut args: Vec<String> = Vec::new();
        let defaults = [
            "listen_addresses=127.0.0.1",
            "fsync=off",
            "full_page_writes=off",
            "max_connections=200",
            "log_min_messages=warning",
        ];
        for s in defaults.iter().chain(settings) {
            args.push("-c".into());
            args.push((*s).to_string());
        }
        let server = Server { bin, data, port, dir: dir.clone(), args, user };
        let (pid, exited) = server.launch()?;
        Ok(Self { port, dir, server, running: std::sync::Mutex::new(Running { pid, exited }) })
    }

    /// Stops the server as `pg_ctl restart -m immediate` does (SIGQUIT: every session
    /// ends at once, nothing is checkpointed) and starts it again on the same port and
    /// data directory, where it recovers from its WAL as after a crash. Returns once the
    /// server accepts connections again.
    pub fn restart_immediate(&self) -> Result<(), ClusterError> {
        let mut running = self.running.lock().map_err(|_| ClusterError::Start("cluster state poisoned".into()))?;
        // SAFETY: signalling our own server; SIGQUIT is its immediate shutdown.
        unsafe { libc::kill(running.pid as i32, libc::SIGQUIT) };
        running
            .exited
            .recv_timeout(Duration::from_secs(60))
            .map_err(|_| ClusterError::Start("the server did not stop within 60 s of SIGQUIT".into()))?;
        let (pid, exited) = self.server.launch()?;
        *running = Running { pid, exited };
        Ok(())
    }

    /// Stops the server as [`Cluster::restart_immediate`] does, and leaves it stopped
    /// until [`Cluster::start_again`]: a server that is down, for as long as a test needs.
    pub fn stop_immediate(&self) -> Result<(), ClusterError> {
        let running = self.running.lock().map_err(|_| ClusterError::Start("cluster state poisoned".into()))?;
        // SAFETY: signalling our own server; SIGQUIT is its immediate shutdown.
        unsafe { libc::kill(running.pid as i32, libc::SIGQUIT) };
        running
            .exited
            .recv_timeout(Duration::from_secs(60))
            .map_err(|_| ClusterError::Start("the server did not stop within 60 s of SIGQUIT".into()))
    }

    /// Starts a server stopped by [`Cluster::stop_immediate`] again, on the same port and
    /// data directory; returns once it accepts connections.
    pub fn start_again(&self) -> Result<(), ClusterError> {
        let mut running = self.running.lock().map_err(|_| ClusterError::Start("cluster state poisoned".into()))?;
        let (pid, exited) = self.server.launch()?;
        *running = Running { pid, exited };
        Ok(())
    }

    /// A libpq key=value connection string for database `db` as user postgres.
    pub fn url(&self, db: &str) -> String {
        format!("host=127.0.0.1 port={} user=postgres dbname={db}", self.port)
    }

    /// A program of the PostgreSQL installation the cluster runs on (`pgbench`, say).
    pub fn program(name: &str) -> Result<PathBuf, ClusterError> {
        Ok(bin_dir()?.join(name))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id and the cluster's directory (for an exit hook).
    pub fn pid_and_dir(&self) -> (u32, &Path) {
        (self.running.lock().map(|r| r.pid).unwrap_or(0), &self.dir)
    }

    /// Creates a database.
    pub async fn create_database(&self, name: &str) -> Result<String, tokio_postgres::Error> {
        let (client, conn) = tokio_postgres::connect(&self.url("postgres"), tokio_postgres::NoTls).await?;
        let task = tokio::spawn(conn);
        let quoted = format!("\"{}\"", name.replace('"', "\"\""));
        client
            .batch_execute(&crate::statements::postgres_cluster::CREATE_DATABASE.sql.replace("{name}", &quoted))
            .await?;
        drop(client);
        let _ = task.await;
        Ok(self.url(name))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Ok(running) = self.running.lock() {
            // SAFETY: signalling our own server; SIGQUIT is its immediate shutdown.
            unsafe { libc::kill(running.pid as i32, libc::SIGQUIT) };
            let _ = running.exited.recv_timeout(Duration::from_secs(30));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
