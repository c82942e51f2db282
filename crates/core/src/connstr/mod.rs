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
//!
//! Layout, by grammar: what the forms share (entries, masking, errors, the dispatch by
//! form) here; `libpq` (key=value, the URL, and the hand-over to tokio-postgres) and
//! `ado` (ADO.NET).

mod ado;
mod libpq;

use ado::{ADO_KEYS, looks_ado};
pub use ado::{ado_entries, ado_pairs, is_ado_key};
use libpq::{LIBPQ_KEYS, URL_PREFIXES, key_value, url};
pub use libpq::{TlsKeys, postgres_config, postgres_parts};

use std::fmt;
use std::iter::Peekable;
use std::ops::Range;
use std::str::CharIndices;

/// What stands for a secret in printed text.
pub const MASK: &str = "***";

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

fn here(it: &mut Peekable<CharIndices<'_>>, end: usize) -> usize {
    it.peek().map_or(end, |&(i, _)| i)
}

fn skip_while(it: &mut Peekable<CharIndices<'_>>, f: impl Fn(char) -> bool) {
    while it.peek().is_some_and(|&(_, c)| f(c)) {
        it.next();
    }
}

/// `s` signed in as another login: `user` and `password` written after everything
/// else in `s`'s own form, so they are the ones the drivers take (the last of a key
/// wins); the rest (host, database, TLS) as it was. The web page's sign-in: a person's
/// own login on the page's database.
pub fn with_login(s: &str, user: &str, password: &str) -> Result<String, ParseError> {
    let c = parse(s)?;
    let out = match c.form {
        Form::KeyValue => format!("{} user={} password={}", s.trim_end(), libpq_quoted(user), libpq_quoted(password)),
        Form::Url => {
            let s = s.trim_end();
            let join = if s.contains('?') { '&' } else { '?' };
            format!("{s}{join}user={}&password={}", percent_encoded(user), percent_encoded(password))
        }
        Form::AdoNet => {
            let s = s.trim_end();
            let join = if s.is_empty() || s.ends_with(';') { "" } else { ";" };
            format!("{s}{join}User ID={};Password={}", ado_quoted(user), ado_quoted(password))
        }
    };
    // Read back as the drivers take it: the last of the keys each reads for the login
    // and the password (ADO.NET has three names for the one, two for the other).
    let again = parse(&out)?;
    let (users, passwords): (&[&str], &[&str]) = match c.form {
        Form::AdoNet => (&["user id", "uid", "user"], &["password", "pwd"]),
        Form::KeyValue | Form::Url => (&["user"], &["password"]),
    };
    let last =
        |keys: &[&str]| again.entries.iter().rev().find(|e| keys.contains(&e.key.as_str())).map(|e| e.value.as_str());
    if last(users) != Some(user) || last(passwords) != Some(password) {
        return Err(ParseError {
            problem: "the login could not be written into the connection string".into(),
            at: None,
        });
    }
    Ok(out)
}

/// A libpq key=value value: in single quotes, `\` and `'` escaped with a backslash.
fn libpq_quoted(v: &str) -> String {
    let mut out = String::with_capacity(v.len() + 2);
    out.push('\'');
    for ch in v.chars() {
        if ch == '\\' || ch == '\'' {
            out.push('\\');
        }
        out.push(ch);
    }
    out.push('\'');
    out
}

/// An ADO.NET value: in double quotes, a `"` doubled.
fn ado_quoted(v: &str) -> String {
    format!("\"{}\"", v.replace('"', "\"\""))
}

/// Every byte but the URL's unreserved ones written as `%XX`.
fn percent_encoded(v: &str) -> String {
    let mut out = String::with_capacity(v.len() * 3);
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
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

    #[test]
    fn a_login_is_written_into_each_form_and_read_back_as_the_drivers_take_it() {
        let (user, password) = ("klerk o'brien", "p w'd\\;\"@?&%");
        let kv = with_login("host=db user=pay password=old dbname=x", user, password).unwrap();
        let config = postgres_config(&kv).unwrap();
        assert_eq!(config.get_user(), Some(user));
        assert_eq!(config.get_password(), Some(password.as_bytes()));
        assert_eq!(config.get_dbname(), Some("x"));
        let url = with_login("postgresql://pay:old@db/x?sslmode=disable", user, password).unwrap();
        let config = postgres_config(&url).unwrap();
        assert_eq!(config.get_user(), Some(user));
        assert_eq!(config.get_password(), Some(password.as_bytes()));
        let ado = with_login("Server=tcp:db,1433;Database=x;User=pay;Pwd=old", user, password).unwrap();
        let pairs = ado_pairs(&ado).unwrap();
        let last = |k: &str| pairs.iter().rev().find(|(key, _)| key == k).map(|(_, v)| v.clone());
        assert_eq!(last("user id").as_deref(), Some(user));
        assert_eq!(last("password").as_deref(), Some(password));
        assert!(!mask(&ado).contains("p w"), "the new password is masked too: {}", mask(&ado));
    }
}
