//! Keys on the web page, for the payroll office, in its words. `/sleutels` searches them
//! (by dienstverband, periode, CAO, state, a text in the Fout), paged on the server by
//! key. `/sleutel` shows one: every Vraag sent for it with its outcome (the calculation
//! log), its stored versions (when each was stored and exported, what computed it), and
//! one version explained as `sbworker explain`
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
use crate::handoff::keys::{KeyRow, KeySearch, Sent, Staat};

/// Keys per page.
pub const PAGE: i32 = 50;

/// The search form's fields (an empty one: any), and the page's cursor (the last key
/// shown).
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct Search {
    #[serde(default)]
    dienstverband: String,
    #[serde(default)]
    periode: String,
    #[serde(default)]
    cao: String,
    #[serde(default)]
    staat: String,
    #[serde(default)]
    reden: String,
    #[serde(default)]
    na_dv: Option<i32>,
    #[serde(default)]
    na_periode: Option<i32>,
}

impl Search {
    /// The search, or what is wrong with a field.
    fn read(&self) -> Result<KeySearch, String> {
        let number = |v: &str, name: &str| -> Result<Option<i32>, String> {
            let v = v.trim();
            if v.is_empty() {
                return Ok(None);
            }
            v.parse().map(Some).map_err(|_| format!("{name} is a number: not {v:?}"))
        };
        let text = |v: &str| Some(v.trim().to_owned()).filter(|v| !v.is_empty());
        let staat = match self.staat.trim() {
            "" => None,
            w => Some(Staat::from_word(w).ok_or_else(|| format!("no state {w:?}"))?),
        };
        Ok(KeySearch {
            dienstverband: number(&self.dienstverband, "dienstverband")?,
            periode: number(&self.periode, "periode")?,
            cao: text(&self.cao),
            staat,
            reden: text(&self.reden),
        })
    }

    /// The search as a query string (without the cursor), HTML-escaped.
    fn query(&self) -> String {
        let pairs = [
            ("dienstverband", &self.dienstverband),
            ("periode", &self.periode),
            ("cao", &self.cao),
            ("staat", &self.staat),
            ("reden", &self.reden),
        ];
        let q: Vec<String> = pairs
            .iter()
            .filter(|(_, v)| !v.trim().is_empty())
            .map(|(k, v)| format!("{k}={}", super::letters::url_text(v.trim())))
            .collect();
        escape(&q.join("&"))
    }
}

fn export_word(status: Option<i32>) -> &'static str {
    match status {
        Some(0) => "wacht op export",
        Some(1) => "geclaimd",
        Some(2) => "geëxporteerd",
        _ => "-",
    }
}

/// `GET /sleutels`: the search form and one page of the keys it picks.
pub(super) async fn search(State(site): State<Arc<Site>>, headers: HeaderMap, Query(q): Query<Search>) -> Response {
    let who = match super::signin::reader(&site, &headers, "sleutels") {
        Ok(w) => w,
        Err(r) => return r,
    };
    let selected = |w: &str| if q.staat.trim() == w { " selected" } else { "" };
    let mut o = format!(
        "<form method=\"get\" action=\"/sleutels\" id=\"zoek\">\
         <label>dienstverband <input name=\"dienstverband\" inputmode=\"numeric\" value=\"{}\"></label> \
         <label>periode <input name=\"periode\" inputmode=\"numeric\" value=\"{}\"></label> \
         <label>CAO <input name=\"cao\" value=\"{}\"></label> \
         <label>staat <select name=\"staat\"><option value=\"\">alle</option>\
         <option value=\"opgeslagen\"{}>opgeslagen</option><option value=\"wacht\"{}>wacht</option>\
         <option value=\"fout\"{}>fout</option></select></label> \
         <label>Fout bevat <input name=\"reden\" value=\"{}\"></label> \
         <button id=\"zoek-knop\">zoek</button></form>",
        escape(q.dienstverband.trim()),
        escape(q.periode.trim()),
        escape(q.cao.trim()),
        selected("opgeslagen"),
        selected("wacht"),
        selected("fout"),
        escape(q.reden.trim()),
    );
    let k = match q.read() {
        Ok(k) => k,
        Err(why) => return problem(&site, who.as_deref(), StatusCode::BAD_REQUEST, "sleutels", &why),
    };
    let after = q.na_dv.zip(q.na_periode);
    let asked = site.ask(
        who.as_ref(),
        ASK_LIMIT,
        Box::new(move |db| Box::pin(async move { db.search_keys(&k, after, PAGE + 1).await })),
    );
    let mut rows: Vec<KeyRow> = match asked.await {
        Ok(r) => r,
        Err(why) => return problem(&site, who.as_deref(), StatusCode::FORBIDDEN, "sleutels", &why),
    };
    let more = rows.len() > PAGE as usize;
    rows.truncate(PAGE as usize);
    o.push_str(
        "<table id=\"sleutels\"><tr><th>dienstverband/periode</th><th>CAO</th><th>roosterversie</th><th>gewijzigd op</th>\
         <th>opgeslagen versie</th><th>opgeslagen op</th><th>export</th><th>Fout</th></tr>",
    );
    for r in &rows {
        let _ = write!(
            o,
            "<tr><td><a href=\"/sleutel?dienstverband={dv}&amp;periode={p}\">{dv}/{p}</a></td><td>{}</td>\
             <td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td class=\"bad\">{}</td></tr>",
            escape(r.cao.as_deref().unwrap_or("-")),
            r.versie,
            escape(&r.gewijzigd_op),
            r.opgeslagen_versie.map_or("-".into(), |v| v.to_string()),
            escape(r.opgeslagen_op.as_deref().unwrap_or("-")),
            export_word(r.export_status),
            escape(r.fout.as_deref().unwrap_or("")),
            dv = r.dienstverband,
            p = r.periode,
        );
    }
    o.push_str("</table>");
    if rows.is_empty() {
        o.push_str("<p id=\"geen\">No key found.</p>");
    }
    if more && let Some(last) = rows.last() {
        let q = q.query();
        let amp = if q.is_empty() { "" } else { "&amp;" };
        let _ = write!(
            o,
            "<p><a id=\"volgende\" href=\"/sleutels?na_dv={}&amp;na_periode={}{amp}{q}\">volgende →</a></p>",
            last.dienstverband, last.periode
        );
    }
    html(StatusCode::OK, frame(&site, who.as_deref(), "sleutels", None, &o))
}

fn timeline(o: &mut String, sent: &[Sent]) {
    o.push_str(
        "<h3>Tijdlijn: elke Vraag verstuurd</h3><table id=\"tijdlijn\"><tr><th>versie</th><th>verstuurd op</th>\
         <th>beantwoord op</th><th>uitkomst</th><th>Fout</th></tr>",
    );
    for v in sent {
        let _ = write!(
            o,
            "<tr><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            v.versie,
            escape(&v.verzonden_op),
            escape(v.beantwoord_op.as_deref().unwrap_or("-")),
            escape(v.uitkomst.as_deref().unwrap_or("onderweg")),
            escape(v.foutmelding.as_deref().unwrap_or("")),
        );
    }
    o.push_str("</table>");
}

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
    let who = match super::signin::reader(&site, &headers, "sleutel") {
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
    let asked = site
        .ask(
            who.as_ref(),
            ASK_LIMIT,
            Box::new(move |db| {
                Box::pin(async move {
                    let versions = db.versions(dv, periode).await?;
                    let sent = db.timeline(dv, periode).await?;
                    Ok((versions, sent))
                })
            }),
        )
        .await;
    let (versions, sent): (Vec<Version>, Vec<Sent>) = match asked {
        Ok(v) => v,
        Err(why) => return problem(&site, who.as_deref(), StatusCode::FORBIDDEN, "sleutel", &why),
    };
    if versions.is_empty() {
        let _ = write!(
            o,
            "<p id=\"geen\">No stored version of dienstverband {dv}, periode {periode} (no such key, or no result \
             stored yet).</p>"
        );
        if !sent.is_empty() {
            timeline(&mut o, &sent);
        }
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
    timeline(&mut o, &sent);
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
