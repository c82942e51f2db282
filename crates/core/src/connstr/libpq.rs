//! libpq's two forms: key=value (`host=db user=pay password='…'`) and the URL
//! (`postgresql://user:secret@host/db?…`), with libpq's keys; and the hand-over of a
//! string to tokio-postgres, its TLS keys kept apart for `crate::pg_tls`.

use std::ops::Range;

use super::{Entry, Form, ParseError, error_at, here, named, parse, skip_while};

/// The URL prefixes of libpq (compared as libpq does: case matters).
pub(super) const URL_PREFIXES: &[&str] = &["postgresql://", "postgres://"];

/// The keys of libpq (PostgreSQL 18) and tokio-postgres' `keepalives_retries`; a
/// key=value string or URL query with any other key is not read.
pub(super) const LIBPQ_KEYS: &[&str] = &[
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
pub(super) const TOKIO_POSTGRES_KEYS: &[&str] = &[
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
pub(super) fn postgres_config_error(s: &str, rebuilt: &str) -> ParseError {
    match rebuilt.parse::<tokio_postgres::Config>() {
        Ok(_) => ParseError { problem: "tokio-postgres cannot read it".into(), at: None },
        Err(e) => tokio_postgres_error(s, e),
    }
}

pub(super) fn tokio_postgres_error(s: &str, e: tokio_postgres::Error) -> ParseError {
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

/// libpq key=value, as libpq and tokio-postgres read it: white space (any, newlines
/// too) between pairs and around `=`; a value bare (up to white space, `\` escaping
/// the next character) or in single quotes (`\'` and `\\` inside). Stricter than
/// libpq in two ways that keep a mistyped password from being shown as something else:
/// every key must be one of libpq's, and a bare value must not hold `;`.
pub(super) fn key_value(s: &str) -> Result<Vec<Entry>, ParseError> {
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
pub(super) fn decode(s: &str, r: Range<usize>) -> Result<String, ParseError> {
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
pub(super) fn url(s: &str, start: usize) -> Result<Vec<Entry>, ParseError> {
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
