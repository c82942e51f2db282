//! The worker's configuration: a TOML file, every key overridable from the environment
//! (`SBWORKER__SECTION__KEY=value`, `__` between levels) and the common ones by flags;
//! checked at start-up so that a mistake stops the worker with the key that is wrong.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

mod check;
mod load;

pub use load::{Overrides, env_overrides, from_str, is_secret_key, load};

/// Prefix of environment overrides.
pub const ENV_PREFIX: &str = "SBWORKER__";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub broker: BrokerConfig,
    #[serde(default)]
    pub worker: WorkerSettings,
    #[serde(default)]
    pub http: HttpConfig,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default)]
    pub engine: EngineConfig,
    /// The queues to serve, by queue name.
    #[serde(default)]
    pub queues: BTreeMap<String, QueueConfig>,
    #[serde(default)]
    pub sweep: SweepConfig,
    #[serde(default)]
    pub hooks: Hooks,
}

/// `sbworker sweep` run by the worker on an interval (PostgreSQL, with the roster
/// schema installed); off unless `interval_ms` is set.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SweepConfig {
    /// How often; 0 turns it off (run `sbworker sweep` from a scheduler instead).
    pub interval_ms: u64,
    /// Most keys sent per run.
    pub fuse: i64,
    /// Keys per committed transaction.
    pub batch: u32,
    /// Run-log rows, dead letters and the log rows of requests answered longer ago than
    /// this are deleted (each key's current Fouts stay: the sweep reads them).
    pub retention_days: i32,
    /// The evidence of stored results (each version's Vraag and factors) older than this
    /// is deleted, the latest version of each key excepted (both back ends; at most 1200). 84 months: the
    /// seven years Dutch tax law has payroll records kept (AWR art. 52 lid 4).
    pub evidence_retention_months: i32,
    /// Rows deleted per statement.
    pub delete_batch: i64,
}

impl Default for SweepConfig {
    fn default() -> Self {
        Self {
            interval_ms: 0,
            fuse: 500,
            batch: 100,
            retention_days: 60,
            evidence_retention_months: 84,
            delete_batch: 5000,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BrokerKind {
    Postgres,
    Mssql,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrokerConfig {
    pub kind: BrokerKind,
    /// PostgreSQL: a libpq URL or key=value string. SQL Server: an ADO.NET string.
    pub connection: String,
}

impl BrokerConfig {
    /// The same database, signed in as another login (`user`, `password`): the web
    /// page's sign-in, see [`crate::connstr::with_login`].
    pub fn signed_in_as(&self, user: &str, password: &str) -> Result<BrokerConfig, crate::connstr::ParseError> {
        Ok(BrokerConfig { kind: self.kind, connection: crate::connstr::with_login(&self.connection, user, password)? })
    }
}

/// Debug output shows the connection string masked, like every other output.
impl std::fmt::Debug for BrokerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerConfig")
            .field("kind", &self.kind)
            .field("connection", &mask_secrets(&self.connection))
            .finish()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerSettings {
    /// Failed attempts of a message before it is diverted, counting only failures that
    /// were the message's fault or that the worker did not survive (docs/retries.md);
    /// 1 to 3: where the broker's poison detection is on, it disables a queue at 5
    /// rolled-back receives, and diverting may need two tries.
    pub max_attempts: u32,
    /// First retry delay; doubles per attempt, with jitter, up to the maximum.
    pub retry_min_delay_ms: u64,
    pub retry_max_delay_ms: u64,
    /// Longest wait between attempts to reconnect.
    pub reconnect_max_delay_ms: u64,
    /// After a stop signal, how long groups in flight may take to finish.
    pub shutdown_grace_ms: u64,
    /// How often a disabled queue is checked again.
    pub disabled_recheck_ms: u64,
    /// At most one reader is added per this interval.
    pub scale_interval_ms: u64,
    /// A reader that received nothing for this long exits (down to the minimum).
    pub idle_exit_ms: u64,
    /// A group waiting this long on transient failures (deadlocks, lock timeouts, a lost
    /// database) makes `/readyz` answer 503; it goes on being retried.
    pub transient_alert_ms: u64,
    /// Serve queues whose broker poison-message detection is on. Off by default: that
    /// rule disables a queue after five rolled-back receives, which transient faults
    /// alone can reach, so the worker refuses to start on such a queue.
    pub allow_broker_poison_detection: bool,
    /// How often the worker records that it is alive, with its readers per queue, for
    /// `sbworker status` (0: never).
    pub heartbeat_ms: u64,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            retry_min_delay_ms: 100,
            retry_max_delay_ms: 10_000,
            reconnect_max_delay_ms: 30_000,
            shutdown_grace_ms: 30_000,
            disabled_recheck_ms: 30_000,
            scale_interval_ms: 1_000,
            idle_exit_ms: 60_000,
            transient_alert_ms: 60_000,
            allow_broker_poison_detection: false,
            heartbeat_ms: 10_000,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Where `/metrics`, `/healthz` and `/readyz` are served; off when absent.
    pub listen: Option<SocketAddr>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub format: LogFormat,
    /// A tracing filter: `info`, `sbworker=debug`, …
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self { format: LogFormat::Text, level: "info".into() }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// Rate tables (TOML) instead of the built-in ones.
    pub tables: Option<PathBuf>,
    /// Largest Vraag accepted, in bytes.
    pub max_body_bytes: usize,
    /// Answers carry `Rekenversie` (what computed them, kept with the stored result).
    /// A collector of a release before 0.1 rejects the attribute: during a rolling
    /// upgrade from one, set `false` until every worker runs this release.
    pub rekenversie: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self { tables: None, max_body_bytes: crate::contract::Limits::default().max_body_bytes, rekenversie: true }
    }
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    /// What to do with the messages: `loonfactor-berekening`, …
    pub handler: String,
    /// The database this queue is in, when not `[broker]`'s (the same kind): one process
    /// serves the queues of several databases, such as the answers' queue on the roster
    /// side and the calculation queue on a calculation server of a split install.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<String>,
    #[serde(default = "one")]
    pub min_readers: u32,
    #[serde(default = "four")]
    pub max_readers: u32,
    /// Most messages taken by one RECEIVE.
    #[serde(default = "hundred")]
    pub batch: u32,
    /// How long one WAITFOR (RECEIVE) waits.
    #[serde(default = "five_seconds")]
    pub wait_ms: u64,
    /// Most conversation groups one transaction takes (Service Broker's batched
    /// commits): after a group is handled, the reader receives the next waiting group
    /// in the same transaction, up to this many, and commits them together. 1: a
    /// transaction per group.
    #[serde(default = "one")]
    pub groups_per_transaction: u32,
    /// How long a transaction goes on taking groups after its first was received.
    #[serde(default = "twenty_ms")]
    pub transaction_window_ms: u64,
}

/// Debug output shows a queue's own connection string masked, like every other output.
impl std::fmt::Debug for QueueConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueConfig")
            .field("handler", &self.handler)
            .field("connection", &self.connection.as_deref().map(mask_secrets))
            .field("min_readers", &self.min_readers)
            .field("max_readers", &self.max_readers)
            .field("batch", &self.batch)
            .field("wait_ms", &self.wait_ms)
            .field("groups_per_transaction", &self.groups_per_transaction)
            .field("transaction_window_ms", &self.transaction_window_ms)
            .finish()
    }
}

impl Config {
    /// The database each queue is in: its own `connection`, else `[broker]`'s; the
    /// queues grouped by it, in the order of their first queue.
    pub fn queues_by_connection(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for (name, q) in &self.queues {
            let conn = q.connection.clone().unwrap_or_else(|| self.broker.connection.clone());
            match out.iter_mut().find(|(c, _)| *c == conn) {
                Some((_, names)) => names.push(name.clone()),
                None => out.push((conn, vec![name.clone()])),
            }
        }
        out
    }
}

fn one() -> u32 {
    1
}
fn four() -> u32 {
    4
}
fn hundred() -> u32 {
    100
}
fn five_seconds() -> u64 {
    5_000
}
fn twenty_ms() -> u64 {
    20
}

/// Test hooks: they do nothing unless set, and exist so that tests can wait for a
/// state instead of sleeping. Never set them in production.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Hooks {
    /// The first N groups pause after their sends, before COMMIT, until shutdown is
    /// requested (logging "test hook: paused before commit").
    pub pause_before_commit: u32,
}

/// A configuration that cannot be used: the key, and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    /// `message` gives the line, column and key, never the text there (it may be a
    /// password).
    #[error("{path} is not valid TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("{key}: {problem}")]
    Key { key: String, problem: String },
}

fn key_error(key: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError::Key { key: key.into(), problem: problem.into() }
}

/// A connection string with its secrets replaced by `***`, from its parse
/// ([`crate::connstr::mask`]): libpq key=value (`password`, `sslpassword`, …), URL
/// (user info and query) and ADO.NET (`Password`, `PWD`). A string that cannot be
/// parsed is not shown at all.
pub fn mask_secrets(conn: &str) -> String {
    crate::connstr::mask(conn)
}

#[cfg(test)]
mod tests {
    use super::load::override_value;
    use super::*;

    #[test]
    fn masks_passwords_in_every_form() {
        assert_eq!(mask_secrets("postgresql://pay:s3cret@db/roster"), "postgresql://pay:***@db/roster");
        assert_eq!(mask_secrets("host=db user=pay password=s3cret dbname=x"), "host=db user=pay password=*** dbname=x");
        assert_eq!(mask_secrets("host=db password = 'a b' dbname=x"), "host=db password = *** dbname=x");
        assert_eq!(mask_secrets("host=db\nuser=pay\npassword=s3cret\n"), "host=db user=pay password=***");
        assert_eq!(mask_secrets(r"host=db password='a\'b-secret' dbname=x"), "host=db password=*** dbname=x");
        assert_eq!(mask_secrets("Server=db;PWD=x"), "Server=db;PWD=***");
        assert_eq!(mask_secrets("postgresql://db/x?user=a&password=b"), "postgresql://db/x?user=a&password=***");
        assert_eq!(mask_secrets("host=db user=pay"), "host=db user=pay");
        // An unquoted ';' leaves "cret" where a key goes: the whole string is held back.
        let held = mask_secrets("Server=tcp:db,1433;User Id=pay;Password=s3;cret;Encrypt=true");
        assert!(held.starts_with("<connection string not shown") && !held.contains("cret"), "{held}");
    }

    #[test]
    fn a_syntax_error_gives_line_column_and_key_but_never_the_text() {
        let head = "[broker]\nkind = \"postgres\"\n";
        let tail = "\n[queues.q]\nhandler = \"h\"\n";
        for (body, line, key) in [
            // Not closed; a TOML escape that is not one (libpq's \' in a basic string);
            // not quoted at all; inside a multi-line string; a later key.
            ("connection = \"host=db password=s3cret", 3, "broker.connection"),
            ("connection = \"host=db password='a\\'b-s3cret'\"", 3, "broker.connection"),
            ("connection = host=db password=s3cret", 3, "broker.connection"),
            ("connection = \"\"\"\nhost=db\npassword='a\\'b-s3cret'\n\"\"\"", 5, "broker.connection"),
            ("connection = '''\nhost=db\npassword=s3cret\n'''\n[worker]\nmax_attempts = = 3", 8, "worker.max_attempts"),
        ] {
            let text = format!("{head}{body}{tail}");
            let e = from_str(&text, &Vec::new()).unwrap_err().to_string();
            assert!(
                e.contains(&format!("line {line}, column ")) && e.contains(&format!(", in {key}: ")),
                "{text}\n{e}"
            );
            assert!(!e.contains("s3cret") && !e.contains("host=db"), "{e}");
        }
        // A line or header inside a multi-line string is not taken for a key.
        let text = format!("{head}connection = '''\n[queues.x]\npassword = s3cret\n'''\nkind = = 1\n");
        let e = from_str(&text, &Vec::new()).unwrap_err().to_string();
        assert!(e.contains("line 7,") && e.contains("in broker.kind"), "{e}");
    }

    #[test]
    fn a_secret_of_the_wrong_type_is_named_but_not_shown() {
        let e = from_str("[broker]\nkind = \"postgres\"\nconnection = 987654321\n", &Vec::new()).unwrap_err();
        let e = e.to_string();
        assert!(e.starts_with("broker.connection: must be a string") && !e.contains("987654321"), "{e}");
        let e = from_str("[broker]\nkind = \"postgres\"\nconnection = \"x\"\n[log]\nlevel = 987654321\n", &Vec::new())
            .unwrap_err();
        assert!(e.to_string().contains("987654321"), "other keys say what they were given: {e}");
        assert!(is_secret_key("broker.connection") && is_secret_key("x.sslpassword") && !is_secret_key("broker.kind"));
    }

    #[test]
    fn debug_output_masks_the_connection() {
        let c = from_str(
            "[broker]\nkind = \"postgres\"\nconnection = \"host=db password=s3cret\"\n[queues.q]\nhandler = \"h\"\n",
            &Vec::new(),
        )
        .unwrap();
        let printed = format!("{c:?}");
        assert!(printed.contains("host=db password=***") && !printed.contains("s3cret"), "{printed}");
    }

    #[test]
    fn a_queue_in_another_database_has_its_own_connection_masked_and_is_grouped_by_it() {
        let c = from_str(
            "[broker]\nkind = \"postgres\"\nconnection = \"host=a\"\n\
             [queues.q1]\nhandler = \"h\"\n\
             [queues.q2]\nhandler = \"h\"\nconnection = \"host=b password=s3cret\"\n\
             [queues.q3]\nhandler = \"h\"\nconnection = \"host=a\"\n",
            &Vec::new(),
        )
        .unwrap();
        c.check().unwrap();
        assert_eq!(
            c.queues_by_connection(),
            [
                ("host=a".to_owned(), vec!["q1".to_owned(), "q3".to_owned()]),
                ("host=b password=s3cret".to_owned(), vec!["q2".to_owned()])
            ]
        );
        let printed = format!("{c:?}");
        assert!(printed.contains("host=b password=***") && !printed.contains("s3cret"), "{printed}");
        let toml = c.to_masked_toml();
        assert!(!toml.contains("s3cret") && toml.contains("connection"), "{toml}");
        let mut empty = c.clone();
        empty.queues.get_mut("q2").unwrap().connection = Some(" ".into());
        assert!(empty.check().unwrap_err().to_string().starts_with("queues.q2.connection: is empty"));
    }

    #[test]
    fn the_example_configuration_is_valid_and_complete() {
        let text = include_str!("../../../../examples/sbworker.toml");
        let c = from_str(text, &Vec::new()).expect("examples/sbworker.toml is valid");
        c.check_handlers(&["loonfactor-berekening", "resultaat-opslag"]).unwrap();
        // It shows every default: reading it gives what an empty section gives.
        let d = WorkerSettings::default();
        assert_eq!((c.worker.max_attempts, c.worker.shutdown_grace_ms), (d.max_attempts, d.shutdown_grace_ms));
        assert_eq!(c.engine.max_body_bytes, EngineConfig::default().max_body_bytes);
    }

    #[test]
    fn groups_per_transaction_is_bounded_and_needs_a_second_attempt() {
        let with = |worker: &str, queue: &str| {
            from_str(
                &format!(
                    "[broker]\nkind = \"postgres\"\nconnection = \"host=db\"\n[worker]\n{worker}\n\
                     [queues.q]\nhandler = \"h\"\n{queue}\n"
                ),
                &Vec::new(),
            )
            .and_then(|c| c.check().map(|()| c))
            .map_err(|e| e.to_string())
        };
        let e = with("", "groups_per_transaction = 0").unwrap_err();
        assert!(e.starts_with("queues.q.groups_per_transaction: is 0, must be 1 to 1000"), "{e}");
        let e = with("max_attempts = 1", "groups_per_transaction = 4").unwrap_err();
        assert!(e.contains("needs worker.max_attempts of 2 or more"), "{e}");
        let e = with("allow_broker_poison_detection = true", "groups_per_transaction = 4").unwrap_err();
        assert!(e.contains("cannot go with worker.allow_broker_poison_detection"), "{e}");
        let e = with("", "groups_per_transaction = 4\ntransaction_window_ms = 10001").unwrap_err();
        assert!(e.starts_with("queues.q.transaction_window_ms: is 10001"), "{e}");
        let c = with("max_attempts = 2", "groups_per_transaction = 4").unwrap();
        assert_eq!(c.queues["q"].groups_per_transaction, 4);
        let c = with("", "").unwrap();
        assert_eq!(
            (c.queues["q"].groups_per_transaction, c.queues["q"].transaction_window_ms),
            (1, 20),
            "the defaults"
        );
    }

    #[test]
    fn the_pipeline_example_is_valid() {
        let c =
            from_str(include_str!("../../../../examples/pipeline.toml"), &Vec::new()).expect("examples/pipeline.toml");
        c.check_handlers(&["loonfactor-berekening", "resultaat-opslag"]).unwrap();
        assert_eq!(c.queues.len(), 2);
    }

    #[test]
    fn env_keys_become_dotted_paths() {
        let o = env_overrides([
            ("SBWORKER__QUEUES__BEREKENING__MAX_READERS".to_owned(), "8".to_owned()),
            ("PATH".to_owned(), "/bin".to_owned()),
        ]);
        assert_eq!(o, vec![("queues.berekening.max_readers".to_owned(), "8".to_owned())]);
        assert_eq!(override_value("8"), toml::Value::Integer(8));
        assert_eq!(override_value("host=db user=x"), toml::Value::String("host=db user=x".into()));
        assert_eq!(override_value("true"), toml::Value::Boolean(true));
    }
}
