//! Who may act on the web page. Decided: the database's own login. A person signs in with
//! a login and password of their own; the page opens a connection with them (the host,
//! database and TLS of the page's own connection string) and keeps that connection, not
//! the password, for the session. Every question and action of theirs then runs on it,
//! so the page has exactly the rights of that login's role (a payroll login is refused
//! the dead letters by the database itself), and the action log names the login the
//! database saw. No separate list of users or tokens to keep.
//!
//! A session is a random id (244 random bits, from two version-4 UUIDs) in a cookie that
//! scripts cannot read (`HttpOnly`) and other sites' requests do not carry
//! (`SameSite=Strict`); each session has its own form token (CSRF), checked on every
//! POST. The sign-in form has a token of its own, in a cookie of its own. A session ends
//! after `IDLE` without a request, `MAX_AGE` after it began, at sign-out, at a new
//! sign-in from the same browser, or when its connection breaks; at most `MAX_SESSIONS`
//! are kept (the least recently used goes). Sign-ins are tried one at a time, and a
//! refused one holds the next back for `REFUSED_PAUSE`, so the page is no faster a way
//! to guess passwords than the database itself. An empty password is refused. The page
//! serves plain HTTP, so with actions on it listens on a loopback address only (the
//! command refuses another).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Form;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::sync::Mutex;

use super::{Site, frame, problem};
use crate::broker::Database;

/// How long a session lasts without a request.
pub const IDLE: Duration = Duration::from_secs(30 * 60);
/// How long a session lasts at most (the overview reloads itself, which keeps one busy).
pub const MAX_AGE: Duration = Duration::from_secs(8 * 60 * 60);
/// The most sessions kept at once (each holds a database connection).
pub const MAX_SESSIONS: usize = 32;
/// How long a refused sign-in holds the next one back.
pub const REFUSED_PAUSE: Duration = Duration::from_secs(1);

const SESSION_COOKIE: &str = "sbworker_session";
const SIGNIN_COOKIE: &str = "sbworker_signin";

/// A signed-in person: the login, the session's form token and its connection.
pub struct Signed {
    pub login: String,
    pub csrf: String,
    pub db: Mutex<Option<Database>>,
    id: String,
    started: Instant,
    last: std::sync::Mutex<Instant>,
}

/// The sessions of the page.
#[derive(Default)]
pub struct Sessions {
    map: std::sync::Mutex<HashMap<String, Arc<Signed>>>,
    /// Held while a sign-in is tried (and for `REFUSED_PAUSE` after a refused one).
    signing: Mutex<()>,
}

impl Sessions {
    /// The session the request's cookie names, if it is still alive (and kept alive).
    /// Every request ends the sessions that are over (and so closes their connections).
    pub fn find(&self, headers: &HeaderMap) -> Option<Arc<Signed>> {
        let mut map = self.map.lock().expect("sessions");
        let now = Instant::now();
        map.retain(|_, s| {
            now.duration_since(*s.last.lock().expect("session")) < IDLE && now.duration_since(s.started) < MAX_AGE
        });
        let id = cookie(headers, SESSION_COOKIE)?;
        let s = map.get(id)?.clone();
        *s.last.lock().expect("session") = now;
        Some(s)
    }

    fn add(&self, login: String, db: Database) -> Arc<Signed> {
        let s = Arc::new(Signed {
            login,
            csrf: token(),
            db: Mutex::new(Some(db)),
            id: token(),
            started: Instant::now(),
            last: std::sync::Mutex::new(Instant::now()),
        });
        let mut map = self.map.lock().expect("sessions");
        while map.len() >= MAX_SESSIONS {
            let oldest = map.iter().min_by_key(|(_, s)| *s.last.lock().expect("session")).map(|(k, _)| k.clone());
            match oldest {
                Some(k) => map.remove(&k),
                None => break,
            };
        }
        map.insert(s.id.clone(), s.clone());
        s
    }

    /// Ends a session (its connection closes when its last question is done).
    pub fn end(&self, s: &Signed) {
        self.map.lock().expect("sessions").remove(&s.id);
    }
}

/// 64 hex digits, 244 of their bits random (the operating system's generator, through
/// `uuid`'s version 4).
fn token() -> String {
    format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

/// The value of cookie `name` in the request.
fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Whether two tokens are equal, compared in time that does not depend on where they
/// differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && !a.is_empty() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// The person a POST may act for: refused (and nothing done) when the page is
/// read-only (403), when no one is signed in (401), or when the form's token is missing
/// or not the session's (403).
#[allow(clippy::result_large_err)]
pub(super) fn acting(site: &Site, headers: &HeaderMap, csrf: &str) -> Result<Arc<Signed>, Response> {
    if !site.actions {
        return Err(problem(
            site,
            None,
            StatusCode::FORBIDDEN,
            "refused",
            "This page is read-only: it was started without --actions, so nothing was done.",
        ));
    }
    let Some(who) = site.sessions.find(headers) else {
        return Err(problem(
            site,
            None,
            StatusCode::UNAUTHORIZED,
            "refused",
            "Sign in first: an action needs a person signed in with a database login. Nothing was done.",
        ));
    };
    if !same(csrf, &who.csrf) {
        return Err(problem(
            site,
            Some(&who),
            StatusCode::FORBIDDEN,
            "refused",
            "The form's token is missing or is not this session's (a form from another page or an old session?). \
             Nothing was done.",
        ));
    }
    Ok(who)
}

/// The dead letters, the keys, the runs and the action log: with actions on, shown to a
/// signed-in person only (on their login, with its rights), never on the page's own
/// login to whoever opens the page; read-only, shown on the page's own login (which the
/// operator who started it chose) on a loopback address only: on another, whoever
/// reaches the page would read payroll data.
#[allow(clippy::result_large_err)]
pub(super) fn reader(site: &Site, headers: &HeaderMap, title: &str) -> Result<Option<Arc<Signed>>, Response> {
    let who = site.sessions.find(headers);
    if !site.actions && !site.loopback {
        return Err(problem(
            site,
            None,
            StatusCode::FORBIDDEN,
            title,
            "Not served on this address: the page listens beyond this machine and is read-only, so it shows the \
             overview only. The dead letters, the keys and the runs are served on a loopback address (reach it \
             through an SSH tunnel).",
        ));
    }
    if site.actions && who.is_none() {
        return Err(problem(
            site,
            None,
            StatusCode::UNAUTHORIZED,
            title,
            "Sign in to see this: with actions on, the page shows it only to a person signed in with a login of \
             their own, with that login's rights.",
        ));
    }
    Ok(who)
}

/// `GET /signin`: the form, with a token of its own in a cookie of its own.
pub(super) async fn form(State(site): State<Arc<Site>>, headers: HeaderMap) -> Response {
    if !site.actions {
        return problem(
            &site,
            None,
            StatusCode::NOT_FOUND,
            "sign in",
            "This page is read-only: there is nothing to sign in for.",
        );
    }
    let who = site.sessions.find(&headers);
    let t = token();
    let body = format!(
        "<p>Sign in with your own database login: the page then acts with exactly its rights, and the action log \
         names it.</p><form method=\"post\" action=\"/signin\" id=\"signin-form\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{t}\">\
         <p><label>login <input name=\"login\" autocomplete=\"username\" required></label></p>\
         <p><label>password <input name=\"password\" type=\"password\" autocomplete=\"current-password\"></label></p>\
         <p><button id=\"signin-button\">sign in</button></p></form>"
    );
    let mut r = super::html(StatusCode::OK, frame(&site, who.as_deref(), "sign in", None, &body));
    set_cookie(&mut r, &format!("{SIGNIN_COOKIE}={t}; HttpOnly; SameSite=Strict; Path=/signin"));
    r
}

/// The sign-in form's fields (each may be missing: the handler says what is wrong).
#[derive(serde::Deserialize)]
pub(super) struct SignIn {
    #[serde(default)]
    login: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    csrf: String,
}

/// `POST /signin`: connects as the login; a session on success.
pub(super) async fn sign_in(State(site): State<Arc<Site>>, headers: HeaderMap, Form(f): Form<SignIn>) -> Response {
    if !site.actions {
        return problem(
            &site,
            None,
            StatusCode::FORBIDDEN,
            "refused",
            "This page is read-only: nothing to sign in for.",
        );
    }
    let expected = cookie(&headers, SIGNIN_COOKIE).unwrap_or("");
    if !same(&f.csrf, expected) {
        return problem(
            &site,
            None,
            StatusCode::FORBIDDEN,
            "refused",
            "The sign-in form's token is missing or stale: open the sign-in page again.",
        );
    }
    if f.login.trim().is_empty() || f.password.is_empty() {
        return problem(&site, None, StatusCode::BAD_REQUEST, "sign in", "Give a login and its password.");
    }
    let broker = match site.broker.signed_in_as(&f.login, &f.password) {
        Ok(b) => b,
        Err(e) => {
            let why = format!("That login cannot be used: {e}");
            return problem(&site, None, StatusCode::BAD_REQUEST, "sign in", &why);
        }
    };
    // A new sign-in from this browser ends the session it had.
    if let Some(old) = site.sessions.find(&headers) {
        site.sessions.end(&old);
    }
    let turn = site.sessions.signing.lock().await;
    // (On SQL Server a statement may take as long as an action may: a purge by filter.)
    let db = match tokio::time::timeout(super::ASK_LIMIT, Database::connect(&broker, Some(super::ACT_LIMIT))).await {
        Ok(Ok(db)) => db,
        refused => {
            // The reason goes to the log only (it can name the host and the database);
            // not the login typed, which may be a password typed in the wrong field.
            let why = match refused {
                Ok(Err(e)) => e.message,
                _ => "no answer in time".into(),
            };
            tracing::info!(error = %why, "web: a sign-in was refused");
            tokio::time::sleep(REFUSED_PAUSE).await;
            drop(turn);
            return problem(
                &site,
                None,
                StatusCode::UNAUTHORIZED,
                "sign in",
                "The database refused this login and password (or could not be reached).",
            );
        }
    };
    drop(turn);
    let s = site.sessions.add(f.login.clone(), db);
    tracing::info!(login = ?s.login, "web: signed in");
    let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
    set_cookie(&mut r, &format!("{SESSION_COOKIE}={}; HttpOnly; SameSite=Strict; Path=/", s.id));
    set_cookie(&mut r, &format!("{SIGNIN_COOKIE}=; HttpOnly; SameSite=Strict; Path=/signin; Max-Age=0"));
    r
}

/// A form that carries only its token.
#[derive(serde::Deserialize)]
pub(super) struct TokenForm {
    #[serde(default)]
    pub(super) csrf: String,
}

/// `POST /signout`.
pub(super) async fn sign_out(State(site): State<Arc<Site>>, headers: HeaderMap, Form(f): Form<TokenForm>) -> Response {
    let who = match acting(&site, &headers, &f.csrf) {
        Ok(w) => w,
        Err(r) => return r,
    };
    site.sessions.end(&who);
    let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
    set_cookie(&mut r, &format!("{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"));
    r
}

fn set_cookie(r: &mut Response, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cookie_is_found_by_its_name_only() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_static("a=1; sbworker_session=abc; sbworker_sessionx=zzz"));
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie(&h, "b"), None);
    }

    #[test]
    fn tokens_are_compared_whole_and_an_empty_one_never_matches() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("abc", "ab"));
        assert!(!same("", ""));
        let (a, b) = (token(), token());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }
}
