//! Connection strings, read for what they mean. sbworker is given three forms: libpq
//! key=value (`host=db user=pay password='…'`, pairs apart by any white space, newlines
//! included), the libpq URL (`postgresql://user:secret@host/db?…`) and ADO.NET
//! (`Server=…;User Id=…;Password=…`). [`parse`] reads each into keys and values that
//! remember where they stand in the text, and [`mask`] prints a string with its secrets
//! replaced by `***` from that parse, never from patterns in the text; a string it
//! cannot parse is not shown at all. [`ado_pairs`] is the ADO.NET reader of the SQL
//! Server transport; [`postgres_config`] hands a string to tokio-postgres.
//!
//! No error of this module quotes its input: an error gives a position and, at most, a
//! key name taken from the lists of keys the forms know.

use std::fmt;
use std::iter::Peekable;
use std::ops::Range;
use std::str::CharIndices;

/// What stands for a secret in printed text.
pub const MASK: &str = "***";

/// The URL prefixes of libpq (compared as libpq does: case matters).
const URL_PREFIXES: &[&str] = &["postgresql://", "postgres://"];

/// The keys of libpq (PostgreSQL 18) and tokio-postgres' `keepalives_retries`; a
/// key=value string or URL query with any other key is not read.
const LIBPQ_KEYS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "require_auth",
    "channel_binding",
    "connect_timeout",
    "client_encoding",
    "options",
    "application_name",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "keepalives_retries",
    "tcp_user_timeout",
    "replication",
    "gssencmode",
    "sslmode",
    "sslnegotiation",
    "requiressl",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslkeylogfile",
    "sslpassword",
    "sslcertmode",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "min_protocol_version",
    "max_protocol_version",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "service",
    "target_session_attrs",
    "load_balance_hosts",
    "oauth_issuer",
    "oauth_client_id",
    "oauth_client_secret",
    "oauth_scope",
    "scram_client_key",
    "scram_server_key",
];

/// The keys tokio-postgres (sbworker's PostgreSQL driver) reads.
const TOKIO_POSTGRES_KEYS: &[&str] = &[
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "sslnegotiation",
    "host",
    "hostaddr",
    "port",
    "connect_timeout",
    "tcp_user_timeout",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "target_session_attrs",
    "channel_binding",
    "load_balance_hosts",
];

/// The keys that name the server in ADO.NET: a string with one of them is read as
/// ADO.NET.
const ADO_SERVER_KEYS: &[&str] = &["server", "data source", "address", "addr", "network address"];

/// The keys of ADO.NET (SqlClient and its ODBC/OLE DB cousins), lower case.
const ADO_KEYS: &[&str] = &[
    "server",
    "data source",
    "address",
    "addr",
    "network address",
    "database",
    "initial catalog",
    "user id",
    "uid",
    "user",
    "password",
    "pwd",
    "encrypt",
    "trustservercertificate",
    "trust server certificate",
    "application name",
    "app",
    "command timeout",
    "connect timeout",
    "connection timeout",
    "timeout",
    "integrated security",
    "trusted_connection",
    "multipleactiveresultsets",
    "multiple active result sets",
    "pooling",
    "max pool size",
    "min pool size",
    "persist security info",
    "persistsecurityinfo",
    "workstation id",
    "wsid",
    "language",
    "current language",
    "failover partner",
    "multisubnetfailover",
    "multi subnet failover",
    "applicationintent",
    "application intent",
    "packet size",
    "authentication",
    "column encryption setting",
    "hostnameincertificate",
    "host name in certificate",
    "servercertificate",
    "server certificate",
    "serverspn",
    "server spn",
    "failoverpartnerspn",
    "failover partner spn",
    "attestation protocol",
    "enclave attestation url",
    "connectretrycount",
    "connect retry count",
    "connectretryinterval",
    "connect retry interval",
    "load balance timeout",
    "connection lifetime",
    "enlist",
    "replication",
    "transaction binding",
    "type system version",
    "user instance",
    "attachdbfilename",
    "extended properties",
    "initial file name",
    "asynchronous processing",
    "async",
    "context connection",
    "network library",
    "network",
    "net",
    "poolblockingperiod",
    "pool blocking period",
    "ipaddresspreference",
    "ip address preference",
    "transparentnetworkipresolution",
    "transparent network ip resolution",
    "driver",
    "provider",
];

/// The keys whose values are secrets, in every form (ADO.NET keys in lower case).
const SECRET_KEYS: &[&str] =
    &["password", "pwd", "sslpassword", "oauth_client_secret", "scram_client_key", "scram_server_key"];

/// Which of the three forms a string is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// libpq `key=value` pairs apart by white space.
    KeyValue,
    /// `postgresql://` or `postgres://`.
    Url,
    /// `Key=Value;` pairs.
    AdoNet,
}

/// One key and its value, with where the value is written in the string.
#[derive(Clone, PartialEq, Eq)]
pub struct Entry {
    /// libpq keys as written (they are case-sensitive); URL parts by their libpq name
    /// (`user`, `password`, `host`, `port`, `dbname`) and query keys percent-decoded;
    /// ADO.NET keys trimmed and in lower case.
    pub key: String,
    /// The value as meant: unquoted, unescaped, percent-decoded.
    pub value: String,
    /// Where the value is written (quotes included), in bytes of the string.
    pub span: Range<usize>,
    /// Where the key starts, in bytes of the string.
    pub key_at: usize,
}

impl Entry {
    /// Whether the value is a secret (a password or the like).
    pub fn is_secret(&self) -> bool {
        SECRET_KEYS.contains(&self.key.as_str())
    }
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = if self.is_secret() { MASK } else { self.value.as_str() };
        f.debug_struct("Entry").field("key", &self.key).field("value", &value).field("span", &self.span).finish()
    }
}

/// A connection string, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnStr {
    pub form: Form,
    pub entries: Vec<Entry>,
}

impl ConnStr {
    /// The value of `key` (the last one given, as the drivers take it).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.iter().rev().find(|e| e.key == key).map(|e| e.value.as_str())
    }
}

/// Why a string cannot be read. Its text never quotes the string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}{}", .at.map(|c| format!(" (at character {c})")).unwrap_or_default())]
pub struct ParseError {
    /// What is wrong, naming at most a known key.
    pub problem: String,
    /// Where, in characters from 1.
    pub at: Option<usize>,
}

fn error_at(s: &str, byte: usize, problem: impl Into<String>) -> ParseError {
    let mut b = byte.min(s.len());
    while !s.is_char_boundary(b) {
        b -= 1;
    }
    ParseError { problem: problem.into(), at: Some(s[..b].chars().count() + 1) }
}

/// `'key'` when `key` is one of `known`, otherwise words that quote nothing.
fn named(key: &str, known: &[&str]) -> String {
    if known.contains(&key) { format!("'{key}'") } else { "a key".into() }
}

/// The string read in its form: a URL by its prefix; otherwise libpq key=value if it
/// reads as such with libpq's keys, else ADO.NET when it names a server the ADO.NET
/// way (`Server`, `Data Source`, …); else the libpq complaint.
pub fn parse(s: &str) -> Result<ConnStr, ParseError> {
    let lead = s.len() - s.trim_start().len();
    if let Some(prefix) = URL_PREFIXES.iter().find(|p| s[lead..].starts_with(**p)) {
        return Ok(ConnStr { form: Form::Url, entries: url(s, lead + prefix.len())? });
    }
    let key_value = key_value(s);
    if let Ok(entries) = key_value {
        return Ok(ConnStr { form: Form::KeyValue, entries });
    }
    if looks_ado(s) {
        let entries = ado_entries(s)?;
        if let Some(e) = entries.iter().find(|e| !ADO_KEYS.contains(&e.key.as_str())) {
            return Err(error_at(
                s,
                e.key_at,
                "a key ADO.NET does not know (a value holding ';' must be quoted: \"…\", '…' or {…})",
            ));
        }
        return Ok(ConnStr { form: Form::AdoNet, entries });
    }
    key_value.map(|entries| ConnStr { form: Form::KeyValue, entries })
}

/// `s` with the values of its secret keys replaced by `***` and everything else as
/// written, except that line breaks between pairs become one space (so that a log line
/// stays one line); a string that cannot be parsed is replaced whole, by a note saying
/// why.
pub fn mask(s: &str) -> String {
    let c = match parse(s) {
        Ok(c) => c,
        Err(e) => return format!("<connection string not shown: cannot be parsed: {e}>"),
    };
    let mut values: Vec<&Entry> = c.entries.iter().collect();
    values.sort_by_key(|e| e.span.start);
    let mut out = String::with_capacity(s.len());
    let mut at = 0;
    for e in values {
        let from = e.span.start.max(at);
        out.push_str(&one_line(&s[at..from], at == 0, false));
        out.push_str(if e.is_secret() { MASK } else { &s[from..e.span.end.max(from)] });
        at = e.span.end.max(from);
    }
    out.push_str(&one_line(&s[at..], at == 0, true));
    out
}

/// `t` (text between values) with each run of white space that holds a line break
/// made one space, or nothing at the start or the end of the string.
fn one_line(t: &str, first: bool, last: bool) -> String {
    if !t.contains(['\n', '\r']) {
        return t.to_owned();
    }
    let mut out = String::with_capacity(t.len());
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String, edge: bool| {
        if !run.contains(['\n', '\r']) {
            out.push_str(run);
        } else if !edge {
            out.push(' ');
        }
        run.clear();
    };
    for c in t.chars() {
        if c.is_whitespace() {
            run.push(c);
        } else {
            let edge = first && out.is_empty();
            flush(&mut run, &mut out, edge);
            out.push(c);
        }
    }
    let edge = last || (first && out.is_empty());
    flush(&mut run, &mut out, edge);
    out
}

/// The TLS keys sbworker reads itself (`crate::pg_tls`): tokio-postgres knows
/// `sslmode` only as disable, prefer or require, and no certificate keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsKeys {
    pub sslmode: Option<String>,
    pub sslrootcert: Option<String>,
    pub sslcert: Option<String>,
    pub sslkey: Option<String>,
}

/// `s` for tokio-postgres, and its TLS keys apart: the configuration has `sslmode`
/// as tokio-postgres knows it (disable; prefer; require for require, verify-ca and
/// verify-full), the checks are `crate::pg_tls`'s.
pub fn postgres_parts(s: &str) -> Result<(tokio_postgres::Config, TlsKeys), ParseError> {
    let read = match parse(s) {
        Ok(c) if c.form != Form::AdoNet => c,
        Ok(_) => {
            return Err(ParseError {
                problem: "an ADO.NET connection string, not a PostgreSQL one (libpq key=value or URL)".into(),
                at: None,
            });
        }
        Err(e) => return Err(e),
    };
    let mut keys = TlsKeys::default();
    let mut rest = String::new();
    for e in &read.entries {
        let v = Some(e.value.clone());
        match e.key.as_str() {
            "sslmode" => keys.sslmode = v,
            "sslrootcert" => keys.sslrootcert = v,
            "sslcert" => keys.sslcert = v,
            "sslkey" => keys.sslkey = v,
            k => {
                rest.push_str(&format!("{k}='{}' ", e.value.replace('\\', "\\\\").replace('\'', "\\'")));
            }
        }
    }
    let mut config = rest.parse::<tokio_postgres::Config>().map_err(|_| postgres_config_error(s, &rest))?;
    config.ssl_mode(match keys.sslmode.as_deref() {
        Some("disable") => tokio_postgres::config::SslMode::Disable,
        Some("require" | "verify-ca" | "verify-full") => tokio_postgres::config::SslMode::Require,
        _ => tokio_postgres::config::SslMode::Prefer,
    });
    Ok((config, keys))
}

/// `s` read by tokio-postgres (its TLS keys apart: [`postgres_parts`]).
pub fn postgres_config(s: &str) -> Result<tokio_postgres::Config, ParseError> {
    postgres_parts(s).map(|(c, _)| c)
}

/// Why tokio-postgres cannot read `s` (`rebuilt`: its pairs without the TLS keys, as
/// handed to tokio-postgres). Its complaints can quote a part of the string
/// (an unknown key that is really the rest of an unquoted password), so they are put
/// in words of this module instead.
fn postgres_config_error(s: &str, rebuilt: &str) -> ParseError {
    match rebuilt.parse::<tokio_postgres::Config>() {
        Ok(_) => ParseError { problem: "tokio-postgres cannot read it".into(), at: None },
        Err(e) => tokio_postgres_error(s, e),
    }
}

fn tokio_postgres_error(s: &str, e: tokio_postgres::Error) -> ParseError {
    {
        // The cause (an unknown key, say) is the error's source, not in its text.
        let said = std::error::Error::source(&e).map(|c| c.to_string()).unwrap_or_default();
        let invalid =
            said.split('`').nth(1).filter(|k| said.contains("invalid value for option") && LIBPQ_KEYS.contains(k));
        if let Some(key) = invalid {
            return ParseError { problem: format!("the value of '{key}' is not valid"), at: None };
        }
        match parse(s) {
            Err(mine) => mine,
            Ok(c) if c.form == Form::AdoNet => ParseError {
                problem: "an ADO.NET connection string, not a PostgreSQL one (libpq key=value or URL)".into(),
                at: None,
            },
            Ok(c) => match c.entries.iter().find(|e| !TOKIO_POSTGRES_KEYS.contains(&e.key.as_str())) {
                Some(e) => error_at(
                    s,
                    e.key_at,
                    format!(
                        "{} is not supported by sbworker's PostgreSQL driver (tokio-postgres)",
                        named(&e.key, LIBPQ_KEYS)
                    ),
                ),
                None => ParseError {
                    problem:
                        "tokio-postgres cannot read it (its words are not shown: they can quote a part of a password)"
                            .into(),
                    at: None,
                },
            },
        }
    }
}

fn here(it: &mut Peekable<CharIndices<'_>>, end: usize) -> usize {
    it.peek().map_or(end, |&(i, _)| i)
}

fn skip_while(it: &mut Peekable<CharIndices<'_>>, f: impl Fn(char) -> bool) {
    while it.peek().is_some_and(|&(_, c)| f(c)) {
        it.next();
    }
}

/// libpq key=value, as libpq and tokio-postgres read it: white space (any, newlines
/// too) between pairs and around `=`; a value bare (up to white space, `\` escaping
/// the next character) or in single quotes (`\'` and `\\` inside). Stricter than
/// libpq in two ways that keep a mistyped password from being shown as something else:
/// every key must be one of libpq's, and a bare value must not hold `;`.
fn key_value(s: &str) -> Result<Vec<Entry>, ParseError> {
    let end = s.len();
    let mut it = s.char_indices().peekable();
    let mut out = Vec::new();
    loop {
        skip_while(&mut it, char::is_whitespace);
        let key_at = here(&mut it, end);
        if key_at == end {
            return Ok(out);
        }
        skip_while(&mut it, |c| !c.is_whitespace() && c != '=');
        let key = &s[key_at..here(&mut it, end)];
        if key.is_empty() {
            return Err(error_at(s, key_at, "a key is missing before '='"));
        }
        if !LIBPQ_KEYS.contains(&key) {
            return Err(error_at(
                s,
                key_at,
                "a key libpq does not know (a value holding white space must be quoted: password='…')",
            ));
        }
        skip_while(&mut it, char::is_whitespace);
        if !matches!(it.next(), Some((_, '='))) {
            return Err(error_at(s, key_at, format!("'=' is missing after '{key}'")));
        }
        skip_while(&mut it, char::is_whitespace);
        let value_at = here(&mut it, end);
        let mut value = String::new();
        if it.next_if(|&(_, c)| c == '\'').is_some() {
            let open =
                || error_at(s, value_at, format!("the value of '{key}' is not closed (a quote inside is written \\')"));
            loop {
                match it.next() {
                    Some((_, '\'')) => break,
                    Some((_, '\\')) => value.push(it.next().ok_or_else(open)?.1),
                    Some((_, c)) => value.push(c),
                    None => return Err(open()),
                }
            }
        } else {
            while let Some(&(i, c)) = it.peek() {
                if c.is_whitespace() {
                    break;
                }
                it.next();
                match c {
                    '\\' => {
                        if let Some((_, c)) = it.next() {
                            value.push(c);
                        }
                    }
                    ';' => {
                        return Err(error_at(
                            s,
                            i,
                            format!(
                                "a ';' in the unquoted value of '{key}' (libpq pairs are apart by spaces; quote a value holding ';')"
                            ),
                        ));
                    }
                    c => value.push(c),
                }
            }
        }
        out.push(Entry { key: key.to_owned(), value, span: value_at..here(&mut it, end), key_at });
    }
}

/// Percent-decoded `s[r]`: `%` must start two hex digits, and the result be UTF-8.
fn decode(s: &str, r: Range<usize>) -> Result<String, ParseError> {
    let b = &s.as_bytes()[r.clone()];
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |k: usize| b.get(k).and_then(|c| (*c as char).to_digit(16));
            let (Some(hi), Some(lo)) = (hex(i + 1), hex(i + 2)) else {
                return Err(error_at(s, r.start + i, "a '%' that does not start two hex digits (write '%' as %25)"));
            };
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| error_at(s, r.start, "percent-encoding that is not UTF-8"))
}

/// A libpq URL from `start` (just past the prefix): `user:password@host:port,…/dbname?
/// key=value&…`, as libpq reads it, with every `@`, `/` and `?` of a user name or
/// password percent-encoded. An `@` anywhere else, a port that is not a number or a
/// query key libpq does not know is refused (each is a password typed unencoded).
fn url(s: &str, start: usize) -> Result<Vec<Entry>, ParseError> {
    let mut out = Vec::new();
    let entry = |key: &str, value: String, span: Range<usize>, key_at: usize| Entry {
        key: key.to_owned(),
        value,
        span,
        key_at,
    };
    let auth_end = s[start..].find(['/', '?']).map_or(s.len(), |i| start + i);
    if let Some(i) = s[auth_end..].find('@') {
        return Err(error_at(
            s,
            auth_end + i,
            "an '@' after the host (in a user name or password write '@' as %40, '/' as %2F, '?' as %3F)",
        ));
    }
    let mut hosts_at = start;
    if let Some(at) = s[start..auth_end].find('@').map(|i| start + i) {
        if let Some(i) = s[at + 1..auth_end].find('@') {
            return Err(error_at(s, at + 1 + i, "a second '@' (in a password write '@' as %40)"));
        }
        let (user, password) = match s[start..at].find(':') {
            Some(c) => (start..start + c, Some(start + c + 1..at)),
            None => (start..at, None),
        };
        out.push(entry("user", decode(s, user.clone())?, user, start));
        if let Some(p) = password {
            out.push(entry("password", decode(s, p.clone())?, p.clone(), p.start));
        }
        hosts_at = at + 1;
    }
    if hosts_at < auth_end {
        let mut at = hosts_at;
        for chunk in s[hosts_at..auth_end].split(',') {
            let (host, port) = if let Some(inner) = chunk.strip_prefix('[') {
                let Some(close) = inner.find(']') else {
                    return Err(error_at(s, at, "an IPv6 host without its ']'"));
                };
                let after = &inner[close + 1..];
                if !after.is_empty() && !after.starts_with(':') {
                    return Err(error_at(s, at + close + 2, "text after an IPv6 host's ']'"));
                }
                (at + 1..at + 1 + close, (!after.is_empty()).then(|| at + close + 3..at + chunk.len()))
            } else {
                match chunk.find(':') {
                    Some(c) => (at..at + c, Some(at + c + 1..at + chunk.len())),
                    None => (at..at + chunk.len(), None),
                }
            };
            out.push(entry("host", decode(s, host.clone())?, host, at));
            if let Some(p) = port {
                if !s[p.clone()].bytes().all(|b| b.is_ascii_digit()) {
                    return Err(error_at(s, p.start, "a port that is not a number"));
                }
                out.push(entry("port", s[p.clone()].to_owned(), p.clone(), p.start));
            }
            at += chunk.len() + 1;
        }
    }
    let mut i = auth_end;
    if s[i..].starts_with('/') {
        let path_end = s[i..].find('?').map_or(s.len(), |j| i + j);
        if path_end > i + 1 {
            out.push(entry("dbname", decode(s, i + 1..path_end)?, i + 1..path_end, i + 1));
        }
        i = path_end;
    }
    if s[i..].starts_with('?') {
        let mut p = i + 1;
        while p < s.len() {
            let end = s[p..].find('&').map_or(s.len(), |j| p + j);
            let Some(eq) = s[p..end].find('=').map(|j| p + j) else {
                return Err(error_at(s, p, "a query parameter without '=' (in a value write '&' as %26)"));
            };
            let key = decode(s, p..eq)?;
            if !LIBPQ_KEYS.contains(&key.as_str()) {
                return Err(error_at(
                    s,
                    p,
                    "a query parameter libpq does not know (in a value write '&' as %26, '=' as %3D)",
                ));
            }
            out.push(Entry { value: decode(s, eq + 1..end)?, key, span: eq + 1..end, key_at: p });
            p = end + 1;
        }
    }
    Ok(out)
}

/// Whether `s` is meant as ADO.NET: it reads as `key=value;` pairs naming a server
/// the ADO.NET way, or (when it does not read) it starts with a key only ADO.NET has.
fn looks_ado(s: &str) -> bool {
    match ado_entries(s) {
        Ok(entries) => entries.iter().any(|e| ADO_SERVER_KEYS.contains(&e.key.as_str())),
        Err(_) => {
            let first = s.split(['=', ';']).next().unwrap_or("").trim().to_ascii_lowercase();
            ADO_KEYS.contains(&first.as_str()) && !LIBPQ_KEYS.contains(&first.as_str())
        }
    }
}

/// Splits `key=value;…` as ADO.NET does, with where each value is: keys are
/// case-insensitive and trimmed; a value may be quoted with `"` or `'` (the quote
/// doubled inside) or wrapped in `{…}` (`}}` inside), which is how a password holding
/// `;` is written. A part without `=` is refused (it is the rest of an unquoted value).
pub fn ado_entries(s: &str) -> Result<Vec<Entry>, ParseError> {
    let end = s.len();
    let mut it = s.char_indices().peekable();
    let mut out = Vec::new();
    loop {
        skip_while(&mut it, |c| c.is_whitespace() || c == ';');
        let key_at = here(&mut it, end);
        if key_at == end {
            return Ok(out);
        }
        let key_end = loop {
            match it.next() {
                Some((i, '=')) => break i,
                Some((_, ';')) | None => {
                    return Err(error_at(s, key_at, "a part without '=' (a value holding ';' must be quoted)"));
                }
                Some(_) => {}
            }
        };
        let key = s[key_at..key_end].trim().to_ascii_lowercase();
        if key.is_empty() {
            return Err(error_at(s, key_at, "a key is missing before '='"));
        }
        skip_while(&mut it, |c| c == ' ');
        let value_at = here(&mut it, end);
        let (value, span) = match it.next_if(|&(_, c)| matches!(c, '"' | '\'' | '{')) {
            Some((_, q)) => {
                let close = if q == '{' { '}' } else { q };
                let mut value = String::new();
                loop {
                    match it.next() {
                        Some((_, c)) if c == close => {
                            if it.next_if(|&(_, c)| c == close).is_some() {
                                value.push(close);
                            } else {
                                break;
                            }
                        }
                        Some((_, c)) => value.push(c),
                        None => {
                            return Err(error_at(
                                s,
                                value_at,
                                format!("the value of {} is not closed", named(&key, ADO_KEYS)),
                            ));
                        }
                    }
                }
                let span = value_at..here(&mut it, end);
                while let Some((i, c)) = it.next_if(|&(_, c)| c != ';') {
                    if !c.is_whitespace() {
                        return Err(error_at(
                            s,
                            i,
                            format!("text after the quoted value of {}", named(&key, ADO_KEYS)),
                        ));
                    }
                }
                (value, span)
            }
            None => {
                skip_while(&mut it, |c| c != ';');
                let raw = &s[value_at..here(&mut it, end)];
                let from = value_at + (raw.len() - raw.trim_start().len());
                let value = raw.trim();
                (value.to_owned(), from..from + value.len())
            }
        };
        out.push(Entry { key, value, span, key_at });
    }
}

/// [`ado_entries`] as (key, value) pairs.
/// Whether `key` (lower case) is a key of ADO.NET: only such a key may be named in a
/// message (anything else may be a piece of a password holding `;`).
pub fn is_ado_key(key: &str) -> bool {
    ADO_KEYS.contains(&key)
}

pub fn ado_pairs(s: &str) -> Result<Vec<(String, String)>, ParseError> {
    Ok(ado_entries(s)?.into_iter().map(|e| (e.key, e.value)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn not_shown(s: &str) -> bool {
        mask(s).starts_with("<connection string not shown")
    }

    #[test]
    fn key_value_strings_are_masked_by_their_parse() {
        for (given, shown) in [
            ("host=db user=pay password=s3cret dbname=x", "host=db user=pay password=*** dbname=x"),
            ("host=db\nuser=pay\npassword=s3cret\n", "host=db user=pay password=***"),
            ("\nhost=db\r\n\tpassword=s3cret\r\n", "host=db password=***"),
            ("host=db\tpassword=s3cret options='-c\na=1'", "host=db\tpassword=*** options='-c\na=1'"),
            ("host=db password = 'a b' dbname=x", "host=db password = *** dbname=x"),
            (r"password='a\'b-secret' host=db", "password=*** host=db"),
            (r"password='a\\' host=db", "password=*** host=db"),
            (r"password=a\ b\'c host=db", "password=*** host=db"),
            ("password='x'host=db", "password=***host=db"),
            ("sslpassword=k3y sslkey=/etc/key host=db", "sslpassword=*** sslkey=/etc/key host=db"),
            ("host=db user=pay", "host=db user=pay"),
            ("host=db password=", "host=db password=***"),
            ("", ""),
        ] {
            assert_eq!(mask(given), shown, "{given:?}");
        }
    }

    #[test]
    fn key_value_values_are_unquoted_and_unescaped() {
        let c = parse("host=db\npassword='a\\'b \\\\ c'\noptions='-c x=1'").unwrap();
        assert_eq!(c.form, Form::KeyValue);
        assert_eq!(c.get("password"), Some("a'b \\ c"));
        assert_eq!(c.get("options"), Some("-c x=1"));
        assert_eq!(parse(r"password=a\ b host=h").unwrap().get("password"), Some("a b"));
        // As libpq: white space after '=' is skipped, so this password is "host=db".
        assert_eq!(parse("password= host=db").unwrap().get("password"), Some("host=db"));
    }

    #[test]
    fn url_strings_are_masked_by_their_parse() {
        for (given, shown) in [
            ("postgresql://pay:s3cret@db/roster", "postgresql://pay:***@db/roster"),
            ("postgres://pay:s%40c%3Aret@db:5432/roster", "postgres://pay:***@db:5432/roster"),
            (
                "postgresql://db/x?user=a&password=b%26c&sslmode=disable",
                "postgresql://db/x?user=a&password=***&sslmode=disable",
            ),
            ("postgresql://db/x?pass%77ord=s3cret", "postgresql://db/x?pass%77ord=***"),
            ("postgresql://pay@h1:5432,[::1]:5433/x", "postgresql://pay@h1:5432,[::1]:5433/x"),
            ("postgresql://pay:@db", "postgresql://pay:***@db"),
            ("  postgresql://:pw@db", "  postgresql://:***@db"),
        ] {
            assert_eq!(mask(given), shown, "{given:?}");
        }
        let c = parse("postgresql://p%C3%A9:s%40c@[::1]:6/r%2Fx?password=z%20y").unwrap();
        assert_eq!(c.form, Form::Url);
        assert_eq!(
            (c.get("user"), c.get("host"), c.get("port"), c.get("dbname")),
            (Some("pé"), Some("::1"), Some("6"), Some("r/x"))
        );
        assert_eq!(c.get("password"), Some("z y"));
    }

    #[test]
    fn ado_strings_are_masked_by_their_parse() {
        for (given, shown) in [
            (
                "Server=tcp:db,1433;User Id=pay;Password=s3cret;Encrypt=true",
                "Server=tcp:db,1433;User Id=pay;Password=***;Encrypt=true",
            ),
            ("Server=db;PWD=x", "Server=db;PWD=***"),
            ("Server=db;Password=\"a;\"\"b\";Database=r", "Server=db;Password=***;Database=r"),
            ("Server=db;Password='a;''b'", "Server=db;Password=***"),
            ("Server=db;pwd={a;}}b} ;Encrypt=false", "Server=db;pwd=*** ;Encrypt=false"),
            (
                "Data Source=db;\n  User Id=pay;\n  Password = s3 cret ;\n",
                "Data Source=db; User Id=pay; Password = *** ;",
            ),
        ] {
            assert_eq!(mask(given), shown, "{given:?}");
        }
        let c = parse("Server=db;Password={a;}}b}").unwrap();
        assert_eq!((c.form, c.get("password")), (Form::AdoNet, Some("a;}b")));
        assert_eq!(
            ado_pairs(" Server = db ; User Id=pay;").unwrap(),
            vec![("server".to_owned(), "db".to_owned()), ("user id".to_owned(), "pay".to_owned())]
        );
    }

    #[test]
    fn what_cannot_be_parsed_is_not_shown_and_no_error_quotes_it() {
        for s in [
            // libpq: an unquoted password with a space, a ';', an open quote, an ADO.NET
            // string without a server.
            "host=db password=ab s3cretpart=x",
            "host=db password=ab s3cretpart",
            "host=db user=pay;password=s3cretpart",
            "host=db password='s3cretpart",
            r"host=db password='s3cretpart\'",
            // URL: '@', '/' or '?' unencoded in a password, a password where the host goes.
            "postgresql://pay:s3c@retpart@db/x",
            "postgresql://pay:s3c/retpart@db/x",
            "postgresql://pay:s3c?retpart@db/x",
            "postgresql://pay:s3cretpart/x",
            "postgresql://db/x?password=ab&s3cretpart",
            "postgresql://db/x?password=ab&s3cretpart=1",
            "postgresql://db/x?password=s3cretpart%",
            // ADO.NET: a ';' or a quote in an unquoted password, an open quote.
            "Server=db;Password=ab;s3cretpart;Encrypt=true",
            "Server=db;Password=ab;s3cretpart=1",
            "Server=db;Password=\"s3cretpart",
            "Server=db;Password=\"ab\"s3cretpart",
            "Server=db;Password={s3cretpart",
        ] {
            assert!(not_shown(s), "{s:?} gave {:?}", mask(s));
            assert!(!mask(s).contains("s3c"), "{}", mask(s));
            let e = parse(s).unwrap_err().to_string();
            assert!(!e.contains("s3c") && !e.contains("retpart"), "{s:?}: {e}");
        }
        assert_eq!(
            parse("Server=db;Password=\"open").unwrap_err().to_string(),
            "the value of 'password' is not closed (at character 20)"
        );
        assert_eq!(parse("host=db\npassword='é").unwrap_err().at, Some(18));
    }

    #[test]
    fn the_driver_gets_the_string_and_its_complaints_quote_nothing() {
        assert_eq!(postgres_config("host=db port=5 password='x y'").unwrap().get_password(), Some(&b"x y"[..]));
        for (s, says) in [
            ("host=db password=ab s3cretpart=x", "libpq does not know"),
            ("host=db port=s3cretpart", "'port' is not valid"),
            ("host=db sslpassword=s3cretpart", "'sslpassword' is not supported"),
            ("Server=db;Password=s3cretpart", "ADO.NET"),
            ("postgresql://db/x?password=ab&s3cretpart=1", "query parameter"),
        ] {
            let e = postgres_config(s).unwrap_err().to_string();
            assert!(e.contains(says) && !e.contains("s3cret"), "{s:?}: {e}");
        }
    }

    #[test]
    fn an_entry_prints_no_secret() {
        let c = parse("host=db password=s3cret").unwrap();
        let printed = format!("{c:?}");
        assert!(printed.contains("db") && !printed.contains("s3cret"), "{printed}");
    }
}
