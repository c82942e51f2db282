//! The runs on the web page (`/runs`): the sweeps and recomputes of the run log, newest
//! first (a recompute still running with its progress, and the page then reloads
//! itself), and the export batches claimed for payroll with how many of their results
//! were confirmed. Read on the roster side, on either back end.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::{ASK_LIMIT, Site, escape, frame, html, problem};
use crate::handoff::Backend as _;

/// Runs and batches shown.
const SHOWN: i32 = 30;

fn number(v: Option<i32>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

fn kind(stap: &str) -> &str {
    match stap {
        "run" => "sweep",
        "herberekening" => "herberekening (recompute)",
        other => other,
    }
}

/// `GET /runs`.
pub(super) async fn page(State(site): State<Arc<Site>>, headers: HeaderMap) -> Response {
    let who = match super::signin::reader(&site, &headers, "runs") {
        Ok(w) => w,
        Err(r) => return r,
    };
    // Asked apart: a payroll login may read the exports and not the runs.
    let runs = site.ask(who.as_ref(), ASK_LIMIT, Box::new(|db| Box::pin(db.runs(SHOWN)))).await;
    let batches = site.ask(who.as_ref(), ASK_LIMIT, Box::new(|db| Box::pin(db.export_batches(SHOWN)))).await;
    if let (Err(why), Err(_)) = (&runs, &batches) {
        return problem(&site, who.as_deref(), StatusCode::FORBIDDEN, "runs", why);
    }
    let mut o = String::new();
    let running = runs.as_ref().map_or(0, |r| r.iter().filter(|r| r.eind.is_none()).count());
    if running > 0 {
        let _ = write!(o, "<p class=\"bad\" id=\"running\">{running} running now (this page reloads itself).</p>");
    }
    o.push_str(
        "<h2>Sweeps and recomputes</h2><table id=\"runs\"><tr><th>soort</th><th>start</th><th>eind</th><th>ms</th>\
         <th>kandidaten</th><th>verzonden</th><th>verwijderd</th><th>fout of waarschuwing</th></tr>",
    );
    for r in runs.iter().flatten() {
        let end = match &r.eind {
            Some(e) => escape(e),
            None => format!("<b>loopt</b>: {} keys, {} Vraags so far", number(r.kandidaten), number(r.verzonden)),
        };
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{end}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td>{}</td></tr>",
            escape(kind(&r.stap)),
            escape(&r.start),
            number(r.ms),
            number(r.kandidaten),
            number(r.verzonden),
            number(r.verwijderd),
            escape(r.fout.as_deref().unwrap_or("")),
        );
    }
    o.push_str("</table>");
    match &runs {
        Ok(r) if r.is_empty() => o.push_str("<p>No run logged yet.</p>"),
        Ok(_) => {}
        Err(why) => {
            let _ = write!(o, "<p class=\"bad\">The runs could not be read: {}</p>", escape(why));
        }
    }
    o.push_str(
        "<h2>Exports</h2><table id=\"exports\"><tr><th>batch</th><th>periode</th><th>geclaimd op</th>\
         <th>resultaten</th><th>bevestigd</th></tr>",
    );
    for b in batches.iter().flatten() {
        let _ = write!(
            o,
            "<tr><td>{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            escape(&b.batch),
            b.periode,
            escape(b.claimed_at.as_deref().unwrap_or("-")),
            b.results,
            b.confirmed
        );
    }
    o.push_str("</table>");
    match &batches {
        Ok(b) if b.is_empty() => o.push_str("<p>No export claimed yet.</p>"),
        Ok(_) => {}
        Err(why) => {
            let _ = write!(o, "<p class=\"bad\">The exports could not be read: {}</p>", escape(why));
        }
    }
    let refresh = (running > 0).then_some(site.refresh_seconds);
    html(StatusCode::OK, frame(&site, who.as_deref(), "runs", refresh, &o))
}
