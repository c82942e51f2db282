//! The operator's web page (`sbworker web`), its first part: the overview, rendered on
//! the server from the status document ([`super::status`], either back end), with no
//! script and no asset from outside the binary. Read-only: it runs no action. Every
//! text from the database is escaped; the document holds no connection string. A
//! request whose `Host` is not the page's own address is refused (a site the operator
//! visits cannot read the page by rebinding its name to 127.0.0.1), and every response
//! forbids scripts and outside content (`Content-Security-Policy`).

use std::fmt::Write;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::Mutex;

use super::Backend;
use super::status::{self, Status, Thresholds, alive, seconds};
use crate::broker::Database;
use crate::config::BrokerConfig;
use crate::transport::ErrorKind;

/// How long one question to the broker may take before the page says it could not ask.
const ASK_LIMIT: Duration = Duration::from_secs(10);

/// What the page's routes share: one connection (a page asks one question at a time;
/// opened again after it breaks), the thresholds of `sbworker status`, how often the
/// overview reloads itself, and the `Host` values the page answers to.
pub struct Site {
    pub broker: BrokerConfig,
    pub db: Mutex<Option<Database>>,
    pub thresholds: Thresholds,
    pub recent_minutes: i32,
    pub refresh_seconds: u32,
    pub hosts: Vec<String>,
}

impl Site {
    /// The `Host` values a page on `addr` answers to: the address itself, and
    /// `localhost` with its port on a loopback address.
    pub fn hosts_for(addr: std::net::SocketAddr) -> Vec<String> {
        let mut hosts = vec![addr.to_string()];
        if addr.ip().is_loopback() {
            hosts.push(format!("localhost:{}", addr.port()));
        }
        hosts
    }

    /// The status document, on the open connection or a new one; a connection that
    /// broke, or a question that took longer than `ASK_LIMIT` (10 s), is dropped.
    pub async fn document(&self) -> Result<String, String> {
        let mut held = self.db.lock().await;
        let asked = tokio::time::timeout(ASK_LIMIT, async {
            if held.is_none() {
                *held = Some(Database::connect(&self.broker, None).await?);
            }
            let db = held.as_mut().expect("connected above");
            db.status_json(self.recent_minutes, self.thresholds.stale_minutes).await
        })
        .await;
        match asked {
            Ok(Ok(text)) => Ok(text),
            Ok(Err(e)) => {
                if e.kind == ErrorKind::Connection {
                    *held = None;
                }
                Err(e.message)
            }
            Err(_) => {
                *held = None;
                Err(format!("no answer within {} s", ASK_LIMIT.as_secs()))
            }
        }
    }
}

/// The page's routes: `/` the overview, `/status.json` its document.
pub fn router(site: Arc<Site>) -> Router {
    Router::new()
        .route("/", get(overview_page))
        .route("/status.json", get(status_json))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found\n") })
        .layer(middleware::from_fn_with_state(site.clone(), guard))
        .with_state(site)
}

/// Refuses a request for another host (421); marks every response: no script, no
/// outside content, no framing.
async fn guard(State(site): State<Arc<Site>>, request: Request, next: Next) -> Response {
    let host = request.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    if !site.hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
        return (StatusCode::MISDIRECTED_REQUEST, "this page answers to its own address only\n").into_response();
    }
    let mut response = next.run(request).await;
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"),
    );
    response
}

async fn document(site: &Site) -> Result<String, Response> {
    site.document().await.map_err(|why| {
        let page = format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"{}\">\
             <title>sbworker: overzicht</title></head><body><p>The broker could not be asked: {}</p></body></html>\n",
            site.refresh_seconds,
            escape(&why)
        );
        (StatusCode::SERVICE_UNAVAILABLE, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], page).into_response()
    })
}

async fn status_json(State(site): State<Arc<Site>>) -> Response {
    match document(&site).await {
        Ok(text) => ([(header::CONTENT_TYPE, "application/json")], text).into_response(),
        Err(r) => r,
    }
}

async fn overview_page(State(site): State<Arc<Site>>) -> Response {
    let text = match document(&site).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    match serde_json::from_str::<Status>(&text) {
        Ok(s) => {
            ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], overview(&s, site.thresholds, site.refresh_seconds))
                .into_response()
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
table{border-collapse:collapse;margin:.5rem 0 1.5rem}th,td{padding:.25rem .6rem;border-bottom:1px solid #ddd;text-align:left}\
td.n{text-align:right}.bad{color:#b00020;font-weight:600}.ok{color:#1b5e20}h1{font-size:1.3rem}h2{font-size:1.05rem;margin-top:1.5rem}\
ul.attention{background:#fff4f4;border-left:4px solid #b00020;padding:.5rem 1.5rem}";

/// The overview: what needs attention, the queues, the workers, the conversations, the
/// stale keys, the sweeps and the last export; it reloads itself every
/// `refresh_seconds`.
pub fn overview(s: &Status, t: Thresholds, refresh_seconds: u32) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{refresh_seconds}\">\
         <title>sbworker: overzicht</title><style>{STYLE}</style></head><body>\
         <h1>sbworker: overzicht</h1><p>{} · {}</p>",
        escape(&s.backend),
        escape(&s.at)
    );
    let attention = status::attention(s, t);
    if attention.is_empty() {
        o.push_str("<p class=\"ok\" id=\"attention\">Nothing needs attention.</p>");
    } else {
        o.push_str("<ul class=\"attention\" id=\"attention\">");
        for a in &attention {
            let _ = write!(o, "<li>{}</li>", escape(a));
        }
        o.push_str("</ul>");
    }
    o.push_str(
        "<h2>Queues</h2><table id=\"queues\"><tr><th>queue</th><th>state</th><th>messages</th><th>groups waiting</th>\
         <th>oldest</th><th>readers busy</th><th>reader cap</th><th>retried recently</th><th>dead letters (not replayed)</th></tr>",
    );
    for q in &s.queues {
        let busy = status::busy(s, &q.queue, t);
        let state = if q.enabled { "<span class=\"ok\">enabled</span>" } else { "<span class=\"bad\">DISABLED</span>" };
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{state}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{busy}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{} ({})</td></tr>",
            escape(&q.queue),
            q.messages,
            q.groups_waiting.map_or("-".into(), |g| g.to_string()),
            escape(&seconds(q.oldest_message_seconds)),
            q.max_readers.filter(|m| *m > 0).map_or("none".into(), |m| m.to_string()),
            q.retried_recently,
            q.dead_letters,
            q.dead_letters_not_replayed,
        );
    }
    o.push_str("</table>");
    o.push_str(
        "<h2>Workers</h2><table id=\"workers\"><tr><th>host</th><th>pid</th><th>version</th><th>started</th>\
         <th>last beat</th><th>alive</th></tr>",
    );
    for w in &s.workers {
        let alive = if alive(w, t) { "<span class=\"ok\">yes</span>" } else { "<span class=\"bad\">no</span>" };
        let _ = write!(
            o,
            "<tr><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td class=\"n\">{} ago</td><td>{alive}</td></tr>",
            escape(&w.host),
            w.pid,
            escape(&w.version),
            escape(&w.started_at),
            escape(&seconds(Some(w.beat_seconds_ago))),
        );
    }
    o.push_str("</table><h2>Conversations</h2><table id=\"conversations\"><tr><th>state</th><th>endpoints</th></tr>");
    for (state, n) in &s.conversations.by_state {
        let _ = write!(o, "<tr><td>{}</td><td class=\"n\">{n}</td></tr>", escape(state));
    }
    o.push_str("</table>");
    if let Some(t) = &s.transmission {
        o.push_str("<h2>Transmission queue</h2><table id=\"transmission\"><tr><th>far service</th><th>messages</th><th>oldest</th><th>status</th></tr>");
        for m in t {
            let _ = write!(
                o,
                "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
                escape(m.far_service.as_deref().unwrap_or("-")),
                m.messages,
                escape(&seconds(m.oldest_seconds)),
                escape(m.status.as_deref().unwrap_or("")),
            );
        }
        o.push_str("</table>");
    }
    if let Some(k) = &s.stale_keys {
        let _ = write!(
            o,
            "<h2>Stale keys</h2><p id=\"stale\">{} (oldest {})</p>",
            k.count,
            escape(&seconds(k.oldest_seconds))
        );
    }
    if let Some(runs) = &s.sweeps {
        o.push_str("<h2>Sweeps</h2><table id=\"sweeps\"><tr><th>started</th><th>ms</th><th>candidates</th><th>sent</th><th>deleted</th><th>error</th></tr>");
        for r in runs {
            let _ = write!(
                o,
                "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
                escape(&r.started_at),
                r.ms.map_or("-".into(), |v| v.to_string()),
                r.candidates.map_or("-".into(), |v| v.to_string()),
                r.sent.map_or("-".into(), |v| v.to_string()),
                r.deleted.map_or("-".into(), |v| v.to_string()),
                escape(r.error.as_deref().unwrap_or("")),
            );
        }
        o.push_str("</table>");
    }
    if let Some(e) = &s.last_export {
        let _ = write!(
            o,
            "<h2>Last export</h2><p id=\"export\">batch {} claimed {}: {} results, {} confirmed</p>",
            escape(&e.batch),
            escape(e.claimed_at.as_deref().unwrap_or("-")),
            e.results,
            e.confirmed
        );
    }
    o.push_str("</body></html>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_from_the_database_is_escaped() {
        assert_eq!(escape("<script>a&b\"'</script>"), "&lt;script&gt;a&amp;b&quot;&#39;&lt;/script&gt;");
    }
}
