//! `sbworker run` as a real process for the tests: started with a configuration, its
//! stderr read line by line, signalled, waited for.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use uuid::Uuid;

use super::calc::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_sbworker");

/// A running `sbworker run` and its stderr, line by line.
pub struct Worker {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
}

impl Worker {
    pub fn start(dir: &TempDir, config: &str) -> Self {
        let path = dir.0.join(format!("sbworker-{}.toml", Uuid::new_v4()));
        std::fs::write(&path, config).unwrap();
        let mut child = Command::new(BIN)
            .args(["run", "--config"])
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("sbworker starts");
        let (tx, lines) = mpsc::unbounded_channel();
        let mut err = BufReader::new(child.stderr.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = err.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines, seen: Vec::new() }
    }

    /// Waits for a log line containing `text` (the process announces the states tests
    /// wait for).
    /// Panics after 60 s without it.
    pub async fn wait_for(&mut self, text: &str) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let Ok(line) = tokio::time::timeout_at(deadline, self.lines.recv()).await else {
                panic!("no log line {text:?} within 60 s:\n{}", self.seen.join("\n"));
            };
            match line {
                Some(line) => {
                    let hit = line.contains(text);
                    self.seen.push(line);
                    if hit {
                        return;
                    }
                }
                None => panic!("the worker ended before logging {text:?}:\n{}", self.seen.join("\n")),
            }
        }
    }

    pub fn signal(&self, sig: i32) {
        let pid = self.child.id().expect("running") as i32;
        // SAFETY: sending a signal to our own child process.
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
    }

    /// Waits for the exit; its code (None when killed by a signal).
    /// Panics when the process has not ended within 60 s.
    pub async fn exit(mut self) -> (Option<i32>, String) {
        let status = tokio::time::timeout(std::time::Duration::from_secs(60), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the worker did not exit within 60 s:\n{}", self.seen.join("\n")))
            .unwrap();
        while let Some(line) = self.lines.recv().await {
            self.seen.push(line);
        }
        (status.code(), self.seen.join("\n"))
    }
}
