//! The operator's web page (`sbworker web`): server-rendered HTML with no script and no
//! asset from outside the binary, on either back end ([`crate::ops::Backend`]).
//!
//! - [`mod@overview`]: `/`, the status document as tables, and [`plot`]: the last hour's
//!   throughput and latency drawn as inline SVG;
//! - [`letters`]: `/letters`, the dead letters paged and filtered, one shown decoded,
//!   replayed or purged one by one or by filter after a confirmation that says how many;
//!   `/actions`, the action log;
//! - [`sleutel`]: `/sleutel`, a key's stored versions, one explained as `sbworker
//!   explain` explains it (its diff against the version before, the drift warning), in
//!   the payroll office's words;
//! - [`runs`]: `/runs`, the sweeps and recomputes (a running one with its progress) and
//!   the export batches;
//! - [`signin`]: who may act. Read-only unless the page was started with `--actions`;
//!   then a person signs in with a database login of their own, and every question and
//!   action of theirs runs on that login's connection, so the page has exactly the
//!   rights of its role. Forms carry a per-session token (CSRF).
//!
//! Every text from the database is escaped; no page holds a connection string or a
//! password. A request whose `Host` is not the page's own address is refused (a site
//! the operator visits cannot read the page by rebinding its name to 127.0.0.1), and
//! every response forbids scripts, outside content and forms to elsewhere
//! (`Content-Security-Policy`).

pub mod letters;
pub mod overview;
pub mod plot;
pub mod runs;
pub mod signin;
pub mod sleutel;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::future::BoxFuture;
use tokio::sync::Mutex;

use super::Backend;
use super::status::{Status, Thresholds};
use crate::broker::Database;
use crate::config::BrokerConfig;
use crate::transport::{BrokerError, ErrorKind};

pub use overview::overview;
use signin::{Sessions, Signed};

/// How long one question to the broker may take before the page says it could not ask.
const ASK_LIMIT: Duration = Duration::from_secs(10);

/// How long an action (a replay or purge by filter: one call per letter) may take.
const ACT_LIMIT: Duration = Duration::from_secs(600);

/// How long one HTTP connection of the page may last: an action's page is answered when
/// the action is done. (Its head still has 5 s, and one connection serves one request.)
pub const CONNECTION_LIMIT: Duration = Duration::from_secs(ACT_LIMIT.as_secs() + 15);

/// What the page's routes share: the page's own connection (a page asks one question at
/// a time; opened again after it breaks), the thresholds of `sbworker status`, how often
/// the overview reloads itself, the `Host` values the page answers to, whether actions
/// are on, and the signed-in sessions.
pub struct Site {
    pub broker: BrokerConfig,
    pub db: Mutex<Option<Database>>,
    pub thresholds: Thresholds,
    pub recent_minutes: i32,
    pub refresh_seconds: u32,
    pub hosts: Vec<String>,
    /// Whether the page listens on a loopback address. On another, the payroll pages and
    /// the dead letters are not served read-only (to whoever reaches the page).
    pub loopback: bool,
    /// Whether a signed-in person may act (`--actions`); read-only otherwise.
    pub actions: bool,
    pub sessions: Sessions,
    /// The rate tables a key's stored Vraag is explained with (as `sbworker explain`).
    pub tables: crate::engine::Tables,
}

/// A question for the broker, on whichever connection it is asked.
type Question<'q, T> = Box<dyn for<'a> FnOnce(&'a mut Database) -> BoxFuture<'a, Result<T, BrokerError>> + Send + 'q>;

impl Site {
    /// The `Host` values a page on `addr` answers to: the address itself, and
    /// `localhost` with its port on a loopback address (on port 80 also without the
    /// port, as a browser writes it there).
    pub fn hosts_for(addr: std::net::SocketAddr) -> Vec<String> {
        let mut hosts = vec![addr.to_string()];
        if addr.ip().is_loopback() {
            hosts.push(format!("localhost:{}", addr.port()));
        }
        if addr.port() == 80 {
            let bare: Vec<String> =
                hosts.iter().filter_map(|h| h.rsplit_once(':').map(|(n, _)| n.to_owned())).collect();
            hosts.extend(bare);
        }
        hosts
    }

    /// The status document, on the page's own connection.
    pub async fn document(self: &Arc<Self>) -> Result<String, String> {
        let (recent, stale) = (self.recent_minutes, self.thresholds.stale_minutes);
        self.ask(None, ASK_LIMIT, Box::new(move |db| Box::pin(db.status_json(recent, stale)))).await
    }

    /// Asks `q` on the signed-in person's connection, or the page's own, on a task of
    /// its own: a request cut off (a person who clicks on, a connection the server
    /// closes) never cuts a question off halfway, so a connection is never left in the
    /// middle of an answer, and an action always runs to its end.
    async fn ask<T: Send + 'static>(
        self: &Arc<Self>,
        who: Option<&Arc<Signed>>,
        limit: Duration,
        q: Question<'static, T>,
    ) -> Result<T, String> {
        let (site, who) = (self.clone(), who.cloned());
        tokio::spawn(async move { site.ask_here(who.as_deref(), limit, q).await })
            .await
            .unwrap_or_else(|e| Err(format!("the question stopped: {e}")))
    }

    /// [`Site::ask`] for an action: its time limit is `ACT_LIMIT`.
    async fn act<T: Send + 'static>(self: &Arc<Self>, who: &Arc<Signed>, q: Question<'static, T>) -> Result<T, String> {
        self.ask(Some(who), ACT_LIMIT, q).await
    }

    /// Asks `q` here, on the person's connection or the page's own (opened again when
    /// it broke). The connection is taken out while the question runs and put back only
    /// when it was answered. A connection busy with another question (an action of the
    /// same person) is waited for up to `limit`, and then the question is not asked: the
    /// session stays. A question that takes longer than `limit` drops its connection (it
    /// may have been in the middle of an answer); a person's connection is not opened
    /// again (the page keeps no password), so that session ends: they sign in again.
    async fn ask_here<T>(&self, who: Option<&Signed>, limit: Duration, q: Question<'_, T>) -> Result<T, String> {
        let lock = async {
            match who {
                Some(s) => s.db.lock().await,
                None => self.db.lock().await,
            }
        };
        let Ok(mut held) = tokio::time::timeout(limit, lock).await else {
            return Err(format!(
                "the connection is busy with another question (an action?) for more than {} s: try again when it is \
                 done",
                limit.as_secs()
            ));
        };
        let mut db = match held.take() {
            Some(db) => db,
            None if who.is_some() => {
                if let Some(s) = who {
                    self.sessions.end(s);
                }
                return Err("your connection was lost: sign in again".into());
            }
            None => match tokio::time::timeout(limit, Database::connect(&self.broker, None)).await {
                Ok(Ok(db)) => db,
                Ok(Err(e)) => return Err(e.message),
                Err(_) => return Err(format!("no connection within {} s", limit.as_secs())),
            },
        };
        match tokio::time::timeout(limit, q(&mut db)).await {
            Ok(Ok(v)) => {
                *held = Some(db);
                Ok(v)
            }
            Ok(Err(e)) => {
                if e.kind != ErrorKind::Connection {
                    *held = Some(db);
                } else if let Some(s) = who {
                    self.sessions.end(s);
                }
                Err(e.message)
            }
            Err(_) => {
                if let Some(s) = who {
                    self.sessions.end(s);
                }
                Err(format!("no answer within {} s", limit.as_secs()))
            }
        }
    }
}

/// The page's routes.
pub fn router(site: Arc<Site>) -> Router {
    Router::new()
        .route("/", get(overview_page))
        .route("/status.json", get(status_json))
        .route("/letters", get(letters::list))
        .route("/letters/confirm", get(letters::confirm))
        .route("/letters/purge", post(letters::purge))
        .route("/letters/replay", post(letters::replay_many))
        .route("/letters/{id}", get(letters::show))
        .route("/letters/{id}/replay", post(letters::replay_one))
        .route("/actions", get(letters::actions))
        .route("/sleutels", get(sleutel::search))
        .route("/sleutel", get(sleutel::page))
        .route("/runs", get(runs::page))
        .route("/signin", get(signin::form).post(signin::sign_in))
        .route("/signout", post(signin::sign_out))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found\n") })
        .layer(middleware::from_fn_with_state(site.clone(), guard))
        .with_state(site)
}

/// Refuses a request for another host (421); marks every response: no script, no
/// outside content, no framing, forms only to the page itself, not cached.
async fn guard(State(site): State<Arc<Site>>, request: Request, next: Next) -> Response {
    let host = request.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    if !site.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
        return (StatusCode::MISDIRECTED_REQUEST, "this page answers to its own address only\n").into_response();
    }
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

/// A page in the common frame: the navigation, who is signed in (with the sign-out
/// form) or how to sign in, and `body`; `refresh` reloads it every so many seconds.
fn frame(site: &Site, who: Option<&Signed>, title: &str, refresh: Option<u32>, body: &str) -> String {
    let refresh = refresh.map_or(String::new(), |s| format!("<meta http-equiv=\"refresh\" content=\"{s}\">"));
    let person = match (who, site.actions) {
        (Some(s), _) => format!(
            "signed in as <b id=\"who\">{}</b> <form method=\"post\" action=\"/signout\" class=\"inline\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\"><button>sign out</button></form>",
            escape(&s.login),
            escape(&s.csrf)
        ),
        (None, true) => "<a href=\"/signin\" id=\"signin\">sign in to act</a>".into(),
        (None, false) => "<span id=\"readonly\">read-only</span>".into(),
    };
    format!(
        "<!doctype html><html lang=\"nl\"><head><meta charset=\"utf-8\">{refresh}<title>sbworker: {}</title>\
         <style>{STYLE}</style></head><body><nav><a href=\"/\">Overzicht</a> <a href=\"/letters\">Dead letters</a> \
         <a href=\"/sleutels\">Sleutels</a> <a href=\"/runs\">Runs</a> <a href=\"/actions\">Acties</a><span class=\"who\">{person}</span></nav><h1>{}</h1>{body}</body></html>\n",
        escape(title),
        escape(title)
    )
}

/// An HTML response.
fn html(status: StatusCode, page: String) -> Response {
    (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], page).into_response()
}

/// A page that says what went wrong, in the frame.
fn problem(site: &Site, who: Option<&Signed>, status: StatusCode, title: &str, why: &str) -> Response {
    html(status, frame(site, who, title, None, &format!("<p class=\"bad\" id=\"problem\">{}</p>", escape(why))))
}

async fn document(site: &Arc<Site>) -> Result<String, Response> {
    site.document().await.map_err(|why| {
        let body = format!("<p class=\"bad\">The broker could not be asked: {}</p>", escape(&why));
        html(StatusCode::SERVICE_UNAVAILABLE, frame(site, None, "overzicht", Some(site.refresh_seconds), &body))
    })
}

async fn status_json(State(site): State<Arc<Site>>) -> Response {
    match document(&site).await {
        Ok(text) => ([(header::CONTENT_TYPE, "application/json")], text).into_response(),
        Err(r) => r,
    }
}

/// The overview: asked on the signed-in person's connection, the page's own otherwise;
/// a login that may not read the status (payroll) is told so and sees the page's own
/// overview. The plots' numbers are asked on the same connection after the document
/// (an install or a login without them gets the overview without plots).
async fn overview_page(State(site): State<Arc<Site>>, headers: HeaderMap) -> Response {
    let who = site.sessions.find(&headers);
    let (recent, stale) = (site.recent_minutes, site.thresholds.stale_minutes);
    let mut asker = who.clone();
    let mut note = String::new();
    let text = match who.as_ref() {
        None => None,
        Some(s) => {
            match site.ask(Some(s), ASK_LIMIT, Box::new(move |db| Box::pin(db.status_json(recent, stale)))).await {
                Ok(t) => Some(t),
                Err(why) => {
                    note = format!(
                        "<p class=\"bad\" id=\"not-yours\">Your login may not read the status ({}): this is the page's own \
                     overview.</p>",
                        escape(&why)
                    );
                    asker = None;
                    None
                }
            }
        }
    };
    let text = match text {
        Some(t) => t,
        None => match document(&site).await {
            Ok(t) => t,
            Err(r) => return r,
        },
    };
    let rates = site.ask(asker.as_ref(), ASK_LIMIT, Box::new(|db| Box::pin(db.rates(plot::MINUTES)))).await;
    let rates = rates.as_deref().map_err(String::as_str);
    match serde_json::from_str::<Status>(&text) {
        Ok(s) => {
            let body = format!("{note}{}", overview(&s, site.thresholds, rates));
            html(StatusCode::OK, frame(&site, who.as_deref(), "overzicht", Some(site.refresh_seconds), &body))
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("the broker's status document: {e}\n")).into_response(),
    }
}

/// Text for HTML: `&`, `<`, `>`, `"` and `'` escaped.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}\
nav{border-bottom:1px solid #ccc;padding-bottom:.5rem}nav a{margin-right:1rem}nav .who{float:right}\
form.inline{display:inline}table{border-collapse:collapse;margin:.5rem 0 1.5rem}\
th,td{padding:.25rem .6rem;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}\
td.n{text-align:right}.bad{color:#b00020;font-weight:600}.ok{color:#1b5e20}h1{font-size:1.3rem}\
h2{font-size:1.05rem;margin-top:1.5rem}pre{background:#f6f6f6;padding:.75rem;overflow-x:auto}\
ul.attention{background:#fff4f4;border-left:4px solid #b00020;padding:.5rem 1.5rem}\
.confirm{background:#fffbe6;border-left:4px solid #b26a00;padding:.5rem 1rem}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_answers_to_its_own_address_as_browsers_write_it() {
        let at = |a: &str| Site::hosts_for(a.parse().unwrap());
        assert_eq!(at("127.0.0.1:8080"), ["127.0.0.1:8080", "localhost:8080"]);
        assert_eq!(at("[::1]:8080"), ["[::1]:8080", "localhost:8080"]);
        assert_eq!(at("127.0.0.1:80"), ["127.0.0.1:80", "localhost:80", "127.0.0.1", "localhost"]);
        assert_eq!(at("10.1.2.3:8080"), ["10.1.2.3:8080"]);
    }

    #[test]
    fn text_from_the_database_is_escaped() {
        assert_eq!(escape("<script>a&b\"'</script>"), "&lt;script&gt;a&amp;b&quot;&#39;&lt;/script&gt;");
    }
}
