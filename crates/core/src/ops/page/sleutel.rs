//! A key on the web page, for the payroll office, in its words (`/sleutel`): a
//! dienstverband and periode looked up, its stored versions (when each was stored and
//! exported, what computed it), and one version explained as `sbworker explain`
//! explains it: its factors, what changed against the version stored before it, the
//! drift warning when today's engine or rate tables compute something else for the kept
//! Vraag, and the engine's explanation of that Vraag. Read from the roster side's
//! evidence ([`crate::handoff::evidence`]), on either back end.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::{ASK_LIMIT, Site, escape, frame, html, problem};
use crate::handoff::Backend as _;
use crate::handoff::evidence::{self, Difference, Version};

/// The form's fields: the key, and the version to explain (the latest when absent).
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct Key {
    #[serde(default)]
    dienstverband: Option<i32>,
    #[serde(default)]
    periode: Option<i32>,
    #[serde(default)]
    versie: Option<i64>,
}

fn value(d: Option<rust_decimal::Decimal>) -> String {
    d.map_or_else(|| "–".to_owned(), |d| d.to_string())
}

fn differences(o: &mut String, id: &str, ds: &[Difference], before: &str, after: &str) {
    let _ = write!(o, "<table id=\"{id}\"><tr><th>loonfactor</th><th>{before}</th><th>{after}</th></tr>");
    for (code, b, a) in ds {
        let _ = write!(
            o,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            escape(code),
            value(*b),
            value(*a)
        );
    }
    o.push_str("</table>");
}

/// `GET /sleutel?dienstverband=…&periode=…[&versie=…]`.
pub(super) async fn page(State(site): State<Arc<Site>>, headers: HeaderMap, Query(k): Query<Key>) -> Response {
    let who = match super::letters::reader(&site, &headers, "sleutel") {
        Ok(w) => w,
        Err(r) => return r,
    };
    let mut o = format!(
        "<form method=\"get\" action=\"/sleutel\" id=\"zoek\"><label>dienstverband \
         <input name=\"dienstverband\" inputmode=\"numeric\" value=\"{}\" required></label> \
         <label>periode <input name=\"periode\" inputmode=\"numeric\" value=\"{}\" required></label> \
         <button id=\"zoek-knop\">zoek</button></form>",
        k.dienstverband.map_or(String::new(), |v| v.to_string()),
        k.periode.map_or(String::new(), |v| v.to_string()),
    );
    let (Some(dv), Some(periode)) = (k.dienstverband, k.periode) else {
        o.push_str("<p>Give a dienstverband and a periode to see the key's stored versions, explained.</p>");
        return html(StatusCode::OK, frame(&site, who.as_deref(), "sleutel", None, &o));
    };
    let asked = site.ask(who.as_deref(), ASK_LIMIT, Box::new(move |db| Box::pin(db.versions(dv, periode)))).await;
    let versions: Vec<Version> = match asked {
        Ok(v) => v,
        Err(why) => return problem(&site, who.as_deref(), StatusCode::FORBIDDEN, "sleutel", &why),
    };
    if versions.is_empty() {
        let _ = write!(
            o,
            "<p id=\"geen\">No stored version of dienstverband {dv}, periode {periode} (no such key, or no result \
             stored yet).</p>"
        );
        return html(StatusCode::NOT_FOUND, frame(&site, who.as_deref(), "sleutel", None, &o));
    }
    let e = match evidence::explain(&versions, k.versie, &site.tables) {
        Ok(e) => e,
        Err(why) => return problem(&site, who.as_deref(), StatusCode::NOT_FOUND, "sleutel", &why),
    };
    let _ = write!(
        o,
        "<h2>Dienstverband {dv}, periode {periode}</h2><table id=\"versies\"><tr><th>versie</th><th>opgeslagen op</th>\
         <th>geëxporteerd op</th><th>berekend door</th></tr>"
    );
    for v in versions.iter().rev() {
        let shown = if v.versie == e.version.versie { " class=\"ok\"" } else { "" };
        let _ = write!(
            o,
            "<tr{shown}><td><a href=\"/sleutel?dienstverband={dv}&amp;periode={periode}&amp;versie={n}\">{n}</a></td>\
             <td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&v.opgeslagen_op),
            escape(v.geexporteerd_op.as_deref().unwrap_or("niet geëxporteerd")),
            escape(v.rekenversie.as_deref().unwrap_or("-")),
            n = v.versie,
        );
    }
    o.push_str("</table>");
    let _ = write!(o, "<h2 id=\"versie\">Versie {}</h2>", e.version.versie);
    match &e.version.rekenversie {
        Some(r) if *r == e.rekenversie_now => {
            let _ = write!(o, "<p>Computed by {}, as today.</p>", escape(r));
        }
        Some(r) => {
            let _ = write!(o, "<p>Computed by {}; today: {}.</p>", escape(r), escape(&e.rekenversie_now));
        }
        None => {
            let _ = write!(o, "<p>What computed it was not recorded; today: {}.</p>", escape(&e.rekenversie_now));
        }
    }
    if !e.drift.is_empty() {
        o.push_str(
            "<p class=\"bad\" id=\"afwijking\">Let op: today's engine and rate tables compute something else for this \
             Vraag (drift). The stored factors are what payroll got.</p>",
        );
        differences(&mut o, "afwijkingen", &e.drift, "opgeslagen", "nu");
    }
    o.push_str("<h3>Loonfactoren</h3><table id=\"factoren\"><tr><th>loonfactor</th><th>waarde</th></tr>");
    for (code, v) in &e.version.factoren {
        let _ = write!(o, "<tr><td>{}</td><td class=\"n\">{v}</td></tr>", escape(code));
    }
    o.push_str("</table>");
    match &e.previous {
        None => o.push_str("<p id=\"verschillen\">No earlier version is stored.</p>"),
        Some((v, ds)) if ds.is_empty() => {
            let _ = write!(o, "<p id=\"verschillen\">Since versie {v}: no loonfactor changed.</p>");
        }
        Some((v, ds)) => {
            let _ = write!(o, "<h3>Since versie {v}</h3>");
            differences(&mut o, "verschillen", ds, &format!("versie {v}"), &format!("versie {}", e.version.versie));
        }
    }
    if let Some(why) = &e.unexplained {
        let _ = write!(o, "<p class=\"bad\">Not explained: {}.</p>", escape(why));
    }
    if let Some(text) = &e.explanation {
        let _ = write!(o, "<h3>De Vraag zoals verstuurd, uitgelegd</h3><pre id=\"uitleg\">{}</pre>", escape(text));
    }
    html(StatusCode::OK, frame(&site, who.as_deref(), &format!("sleutel {dv}/{periode}"), None, &o))
}
