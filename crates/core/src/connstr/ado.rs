//! ADO.NET (`Server=…;User Id=…;Password=…`), as SqlClient reads it: the SQL Server
//! transport's form.

use super::{Entry, LIBPQ_KEYS, ParseError, error_at, here, named, skip_while};

/// The keys that name the server in ADO.NET: a string with one of them is read as
/// ADO.NET.
pub(super) const ADO_SERVER_KEYS: &[&str] = &["server", "data source", "address", "addr", "network address"];

/// The keys of ADO.NET (SqlClient and its ODBC/OLE DB cousins), lower case.
pub(super) const ADO_KEYS: &[&str] = &[
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

/// Whether `s` is meant as ADO.NET: it reads as `key=value;` pairs naming a server
/// the ADO.NET way, or (when it does not read) it starts with a key only ADO.NET has.
pub(super) fn looks_ado(s: &str) -> bool {
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
