//! The worker's configuration: a TOML file, every key overridable from the environment
//! (`SBWORKER__SECTION__KEY=value`, `__` between levels) and the common ones by flags;
//! checked at start-up so that a mistake stops the worker with the key that is wrong.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

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
    /// Run-log rows and dead letters older than this are deleted.
    pub retention_days: i32,
    /// Rows deleted per statement.
    pub delete_batch: i64,
}

impl Default for SweepConfig {
    fn default() -> Self {
        Self { interval_ms: 0, fuse: 500, batch: 2000, retention_days: 60, delete_batch: 5000 }
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
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self { tables: None, max_body_bytes: crate::contract::Limits::default().max_body_bytes }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    /// What to do with the messages: `loonfactor-berekening`, …
    pub handler: String,
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

/// Overrides from flags and the environment, as (dotted key, raw value).
pub type Overrides = Vec<(String, String)>;

/// The `SBWORKER__…` variables of `vars`, as dotted keys (lower case).
pub fn env_overrides(vars: impl IntoIterator<Item = (String, String)>) -> Overrides {
    vars.into_iter()
        .filter_map(|(k, v)| {
            let rest = k.strip_prefix(ENV_PREFIX)?;
            Some((rest.split("__").map(str::to_lowercase).collect::<Vec<_>>().join("."), v))
        })
        .collect()
}

/// A raw override value as TOML: a number, boolean, array or quoted string if it reads
/// as one, otherwise the text itself.
fn override_value(raw: &str) -> toml::Value {
    match format!("v = {raw}").parse::<toml::Table>() {
        Ok(mut t) => t.remove("v").unwrap_or_else(|| toml::Value::String(raw.to_owned())),
        Err(_) => toml::Value::String(raw.to_owned()),
    }
}

fn apply(table: &mut toml::Table, key: &str, raw: &str) -> Result<(), ConfigError> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(key_error(key, "is not a key (empty part)"));
    }
    let mut t = table;
    for (i, part) in parts[..parts.len() - 1].iter().enumerate() {
        let entry = t.entry(part.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        t = match entry {
            toml::Value::Table(inner) => inner,
            _ => return Err(key_error(parts[..=i].join("."), "is a value, not a section")),
        };
    }
    // A queue's name may hold characters an environment variable cannot; the key
    // itself is what the user typed.
    t.insert(parts[parts.len() - 1].to_owned(), override_value(raw));
    Ok(())
}

/// Reads the configuration: the file (if any), then `overrides` in order (environment
/// first, flags last, so flags win), then checks it.
pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
    let table = match file {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
            text.parse::<toml::Table>().map_err(|e| syntax_error(path, &text, &e))?
        }
        None => toml::Table::new(),
    };
    from_table(table, overrides)
}

/// The configuration in `text` (TOML) with `overrides`, checked.
pub fn from_str(text: &str, overrides: &Overrides) -> Result<Config, ConfigError> {
    let table = text.parse::<toml::Table>().map_err(|e| syntax_error(Path::new("(text)"), text, &e))?;
    from_table(table, overrides)
}

/// Whether the value of the dotted `key` is a secret, never to be printed.
pub fn is_secret_key(key: &str) -> bool {
    let leaf = key.rsplit('.').next().unwrap_or(key).to_ascii_lowercase();
    leaf == "connection" || leaf.contains("password") || leaf.contains("secret")
}

/// A TOML syntax error without toml's quote of the offending line (it may hold a
/// password): the line and column, the key when the text up to there shows it, and
/// toml's words for the problem.
fn syntax_error(path: &Path, text: &str, e: &toml::de::Error) -> ConfigError {
    let message = match e.span() {
        Some(span) => {
            let (line, column) = line_column(text, span.start);
            let key = key_path_at(text, span.start).map(|k| format!(", in {k}")).unwrap_or_default();
            format!("line {line}, column {column}{key}: {}", e.message())
        }
        None => e.message().to_owned(),
    };
    ConfigError::Syntax { path: path.to_owned(), message }
}

/// Line and column (characters) of byte `offset` in `text`, both from 1.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut at = offset.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = &text[..at];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (before.matches('\n').count() + 1, before[line_start..].chars().count() + 1)
}

/// The sections a configuration has.
const SECTIONS: &[&str] = &["broker", "worker", "http", "log", "engine", "queues", "sweep", "hooks"];

/// A dotted key or table header part as TOML writes it: bare, or in double quotes.
fn key_part(p: &str) -> Option<String> {
    let p = p.trim();
    let inner = match p.strip_prefix('"').and_then(|q| q.strip_suffix('"')) {
        Some(q) if !q.contains(['"', '\\']) => q,
        Some(_) => return None,
        None if !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') => p,
        None => return None,
    };
    (inner.len() <= 128 && !inner.chars().any(char::is_control)).then(|| inner.to_owned())
}

/// The dotted key whose line (or multi-line string) holds byte `offset` of `text`,
/// found by reading the lines before it: `[section]` headers, `key =` lines and
/// multi-line strings. None when the text does not read plainly that far.
fn key_path_at(text: &str, offset: usize) -> Option<String> {
    let mut table: Vec<String> = Vec::new();
    // An open multi-line string: its delimiter and its key.
    let mut open: Option<(&str, String)> = None;
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        let end = start + line.len();
        let key = match open.take() {
            Some((delim, key)) => {
                if !line.contains(delim) {
                    open = Some((delim, key.clone()));
                }
                Some(key)
            }
            None => {
                let t = line.trim();
                if let Some(header) = t.strip_prefix('[') {
                    let inner = header.trim_start_matches('[').split(']').next().unwrap_or("");
                    table = inner.split('.').map(key_part).collect::<Option<Vec<_>>>().unwrap_or_default();
                    if !table.first().is_some_and(|s| SECTIONS.contains(&s.as_str())) {
                        table.clear();
                    }
                    None
                } else {
                    let eq = t.find('=');
                    let leaf = eq.and_then(|i| key_part(&t[..i]));
                    match (eq, leaf) {
                        (Some(i), Some(leaf)) if !table.is_empty() => {
                            let path = format!("{}.{leaf}", table.join("."));
                            let value = t[i + 1..].trim_start();
                            for delim in ["\"\"\"", "'''"] {
                                if value.strip_prefix(delim).is_some_and(|rest| !rest.contains(delim)) {
                                    open = Some((delim, path.clone()));
                                }
                            }
                            Some(path)
                        }
                        _ => None,
                    }
                }
            }
        };
        if offset < end || end == text.len() {
            return key;
        }
        start = end;
    }
    None
}

fn from_table(mut table: toml::Table, overrides: &Overrides) -> Result<Config, ConfigError> {
    for (key, raw) in overrides {
        apply(&mut table, key, raw)?;
    }
    let config: Config = serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
        let key = e.path().to_string();
        // The message can quote the value ("invalid type: integer `…`"): not a secret's.
        let problem = if is_secret_key(&key) {
            "must be a string (the value given is not shown: it is secret)".to_owned()
        } else {
            e.into_inner().to_string()
        };
        key_error(if key == "." { "config".into() } else { key }, problem)
    })?;
    config.check()?;
    Ok(config)
}

impl Config {
    /// The rules serde cannot express.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.broker.connection.trim().is_empty() {
            return Err(key_error("broker.connection", "is empty: give the database to connect to"));
        }
        if self.broker.kind == BrokerKind::Mssql && self.sweep.interval_ms > 0 {
            return Err(key_error(
                "sweep.interval_ms",
                "the worker sweeps PostgreSQL only; on SQL Server schedule EXEC Rekenserver.sweep (SQL Agent)",
            ));
        }
        let w = &self.worker;
        if !(1..=3).contains(&w.max_attempts) {
            return Err(key_error(
                "worker.max_attempts",
                format!(
                    "is {}, must be 1 to 3 (the broker disables a queue after 5 rolled-back receives; \
                     diverting needs up to two more)",
                    w.max_attempts
                ),
            ));
        }
        if w.retry_min_delay_ms == 0 || w.retry_min_delay_ms > w.retry_max_delay_ms {
            return Err(key_error(
                "worker.retry_min_delay_ms",
                format!("is {}, must be at least 1 and at most worker.retry_max_delay_ms", w.retry_min_delay_ms),
            ));
        }
        for (key, v) in [
            ("worker.reconnect_max_delay_ms", w.reconnect_max_delay_ms),
            ("worker.disabled_recheck_ms", w.disabled_recheck_ms),
            ("worker.scale_interval_ms", w.scale_interval_ms),
            ("worker.idle_exit_ms", w.idle_exit_ms),
            ("worker.transient_alert_ms", w.transient_alert_ms),
        ] {
            if v == 0 {
                return Err(key_error(key, "must be above 0"));
            }
        }
        if self.queues.is_empty() {
            return Err(key_error("queues", "no queue is configured: add a [queues.NAME] section with a handler"));
        }
        for (name, q) in &self.queues {
            let key = |k: &str| format!("queues.{name}.{k}");
            if q.max_readers == 0 || q.max_readers > 256 {
                return Err(key_error(key("max_readers"), format!("is {}, must be 1 to 256", q.max_readers)));
            }
            if q.min_readers > q.max_readers {
                return Err(key_error(
                    key("min_readers"),
                    format!("is {}, above max_readers ({})", q.min_readers, q.max_readers),
                ));
            }
            if q.batch == 0 || q.batch > 10_000 {
                return Err(key_error(key("batch"), format!("is {}, must be 1 to 10000", q.batch)));
            }
            if q.wait_ms == 0 || q.wait_ms > 20_000 {
                return Err(key_error(
                    key("wait_ms"),
                    format!("is {}, must be 1 to 20000 (keep waits below command timeouts)", q.wait_ms),
                ));
            }
        }
        let sw = &self.sweep;
        for (key, v) in [
            ("sweep.fuse", sw.fuse),
            ("sweep.batch", i64::from(sw.batch)),
            ("sweep.retention_days", i64::from(sw.retention_days)),
            ("sweep.delete_batch", sw.delete_batch),
        ] {
            if v < 1 {
                return Err(key_error(key, format!("is {v}, must be at least 1")));
            }
        }
        if self.engine.max_body_bytes == 0 {
            return Err(key_error("engine.max_body_bytes", "must be above 0"));
        }
        Ok(())
    }

    /// Every queue names one of `known` handlers.
    pub fn check_handlers(&self, known: &[&str]) -> Result<(), ConfigError> {
        for (name, q) in &self.queues {
            if !known.contains(&q.handler.as_str()) {
                return Err(key_error(
                    format!("queues.{name}.handler"),
                    format!("\"{}\" is not a handler; known: {}", q.handler, known.join(", ")),
                ));
            }
        }
        Ok(())
    }

    /// The effective configuration as TOML, with secrets masked.
    pub fn to_masked_toml(&self) -> String {
        let mut shown = self.clone();
        shown.broker.connection = mask_secrets(&shown.broker.connection);
        toml::to_string(&shown).unwrap_or_else(|e| format!("# cannot print the configuration: {e}\n"))
    }
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
    fn the_example_configuration_is_valid_and_complete() {
        let text = include_str!("../examples/sbworker.toml");
        let c = from_str(text, &Vec::new()).expect("examples/sbworker.toml is valid");
        c.check_handlers(&["loonfactor-berekening", "resultaat-opslag"]).unwrap();
        // It shows every default: reading it gives what an empty section gives.
        let d = WorkerSettings::default();
        assert_eq!((c.worker.max_attempts, c.worker.shutdown_grace_ms), (d.max_attempts, d.shutdown_grace_ms));
        assert_eq!(c.engine.max_body_bytes, EngineConfig::default().max_body_bytes);
    }

    #[test]
    fn the_pipeline_example_is_valid() {
        let c = from_str(include_str!("../examples/pipeline.toml"), &Vec::new()).expect("examples/pipeline.toml");
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
