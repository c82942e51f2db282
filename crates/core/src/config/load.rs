//! Reading the configuration: the TOML file, the `SBWORKER__…` environment and the
//! flags' overrides, and errors that give the line, column and key of a mistake but
//! never the text there (it may be a password).

use std::path::Path;

use super::{Config, ConfigError, ENV_PREFIX, key_error};

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
pub(super) fn override_value(raw: &str) -> toml::Value {
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
