//! The dead letters on the web page: `/letters` lists them newest first, filtered (queue,
//! a text in the reason, replayed or not) and paged on the server by id; `/letters/{id}`
//! shows one with its body decoded and the request it stands for; a signed-in person
//! replays one, or replays or purges every letter a filter picks after a confirmation
//! that says how many (`/letters/confirm`). A bulk action takes exactly the confirmed
//! set: the letters the filter picked at or below the highest id shown, and a purge is
//! refused whole when they are no longer the confirmed count. `/actions` is the action
//! log: every action, with the database login that did it.

use std::fmt::Write;
use std::sync::Arc;

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::signin::{TokenForm, acting, reader};
use super::{ASK_LIMIT, Site, escape, frame, html, problem};
use crate::ops::dead_letter::{key_text, pretty, request_key};
use crate::ops::{Action, Backend, Letter, LetterFilter, Tally};

/// Letters per page.
pub const PAGE: i32 = 50;
/// Letters fetched per call while replaying by filter.
const REPLAY_BATCH: i32 = 100;
/// The most failures a bulk replay lists (the rest are counted).
const FAILURES_SHOWN: usize = 20;

/// The filter as the page's forms and links carry it (an empty field: any).
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct Filter {
    #[serde(default)]
    queue: String,
    #[serde(default)]
    reason: String,
    /// `yes`, `no` or empty.
    #[serde(default)]
    replayed: String,
    /// The page's cursor: no id above it.
    #[serde(default)]
    upto: Option<i64>,
    /// What a confirmation is for: `purge` or `replay`.
    #[serde(default)]
    action: String,
    /// One letter (a confirmation for it alone).
    #[serde(default)]
    id: Option<i64>,
}

impl Filter {
    fn letters(&self) -> LetterFilter {
        let given = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
        LetterFilter {
            queue: given(&self.queue),
            reason: given(&self.reason),
            replayed: match self.replayed.as_str() {
                "yes" => Some(true),
                "no" => Some(false),
                _ => None,
            },
            id: self.id,
        }
    }

    /// The filter as a query string (without the cursor).
    fn query(&self) -> String {
        let f = self.letters();
        let mut q = Vec::new();
        if let Some(v) = &f.queue {
            q.push(format!("queue={}", url_text(v)));
        }
        if let Some(v) = &f.reason {
            q.push(format!("reason={}", url_text(v)));
        }
        match f.replayed {
            Some(true) => q.push("replayed=yes".into()),
            Some(false) => q.push("replayed=no".into()),
            None => {}
        }
        if let Some(id) = f.id {
            q.push(format!("id={id}"));
        }
        q.join("&")
    }

    /// The filter as hidden fields of a form.
    fn hidden(&self) -> String {
        format!(
            "<input type=\"hidden\" name=\"queue\" value=\"{}\"><input type=\"hidden\" name=\"reason\" value=\"{}\">\
             <input type=\"hidden\" name=\"replayed\" value=\"{}\">{}",
            escape(self.queue.trim()),
            escape(self.reason.trim()),
            escape(&self.replayed),
            self.id.map_or(String::new(), |id| format!("<input type=\"hidden\" name=\"id\" value=\"{id}\">")),
        )
    }
}

/// A value for a query string: every byte but the unreserved ones as `%XX`.
pub(super) fn url_text(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `GET /letters`: the filter form, how many the filter picks, one page of them.
pub(super) async fn list(State(site): State<Arc<Site>>, headers: HeaderMap, Query(f): Query<Filter>) -> Response {
    let who = match reader(&site, &headers, "dead letters") {
        Ok(w) => w,
        Err(r) => return r,
    };
    let filter = f.letters();
    let (lf, upto) = (filter.clone(), f.upto);
    let asked = site
        .ask(
            who.as_ref(),
            ASK_LIMIT,
            Box::new(move |db| {
                Box::pin(async move {
                    let count = db.letter_count(&lf, None).await?;
                    let page = db.letter_page(&lf, upto, PAGE + 1).await?;
                    Ok((count, page))
                })
            }),
        )
        .await;
    let (Tally { letters: count, .. }, mut page) = match asked {
        Ok(a) => a,
        Err(why) => return problem(&site, who.as_deref(), StatusCode::FORBIDDEN, "dead letters", &why),
    };
    let more = page.len() > PAGE as usize;
    page.truncate(PAGE as usize);
    let mut o = String::new();
    let selected = |v: &str| if f.replayed == v { " selected" } else { "" };
    let _ = write!(
        o,
        "<form method=\"get\" action=\"/letters\" id=\"filter\">\
         <label>queue <input name=\"queue\" value=\"{}\"></label> \
         <label>reason holds <input name=\"reason\" value=\"{}\"></label> \
         <label>replayed <select name=\"replayed\"><option value=\"\">any</option>\
         <option value=\"no\"{}>no</option><option value=\"yes\"{}>yes</option></select></label> \
         <button id=\"filter-button\">filter</button></form>",
        escape(f.queue.trim()),
        escape(f.reason.trim()),
        selected("no"),
        selected("yes"),
    );
    let _ = write!(o, "<p id=\"count\">{count} dead letters: {}.</p>", escape(&filter.describe()));
    let acts = site.actions && who.is_some();
    if acts && count > 0 {
        let q = f.query();
        let amp = if q.is_empty() { "" } else { "&" };
        let _ = write!(
            o,
            "<p><a href=\"/letters/confirm?action=replay{amp}{q}\" id=\"replay-all\">replay these {count}…</a> · \
             <a href=\"/letters/confirm?action=purge{amp}{q}\" id=\"purge-all\">purge these {count}…</a></p>",
            q = escape(&q)
        );
    }
    o.push_str(
        "<table id=\"letters\"><tr><th>id</th><th>diverted</th><th>queue</th><th>message type</th>\
         <th>request (dienstverband/periode v versie)</th><th>attempts</th><th>reason</th><th>replayed</th></tr>",
    );
    for l in &page {
        let _ = write!(
            o,
            "<tr><td class=\"n\"><a href=\"/letters/{id}\">{id}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td class=\"n\">{}</td><td>{}</td><td>{}</td></tr>",
            escape(&l.dead_lettered_at),
            escape(&l.queue),
            escape(&l.message_type),
            escape(&key_text(l)),
            l.attempts,
            escape(&shortened(&l.reason, 200)),
            replayed_text(l),
            id = l.id,
        );
    }
    o.push_str("</table>");
    if more && let Some(last) = page.last() {
        let q = f.query();
        let amp = if q.is_empty() { "" } else { "&" };
        let _ =
            write!(o, "<p><a href=\"/letters?upto={}{amp}{}\" id=\"older\">older →</a></p>", last.id - 1, escape(&q));
    }
    html(StatusCode::OK, frame(&site, who.as_deref(), "dead letters", None, &o))
}

fn replayed_text(l: &Letter) -> String {
    if l.replays == 0 {
        return "no".into();
    }
    format!(
        "{}× ({}, {})",
        l.replays,
        escape(l.replayed_at.as_deref().unwrap_or("-")),
        escape(l.replayed_by.as_deref().unwrap_or("-"))
    )
}

fn shortened(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// `GET /letters/{id}`: one letter, its request, its body decoded.
pub(super) async fn show(State(site): State<Arc<Site>>, headers: HeaderMap, Path(id): Path<i64>) -> Response {
    let who = match reader(&site, &headers, "dead letter") {
        Ok(w) => w,
        Err(r) => return r,
    };
    let letter = match site.ask(who.as_ref(), ASK_LIMIT, Box::new(move |db| Box::pin(db.dead_letter(id)))).await {
        Ok(Some(l)) => l,
        Ok(None) => {
            return problem(
                &site,
                who.as_deref(),
                StatusCode::NOT_FOUND,
                "dead letter",
                &format!("No dead letter {id}."),
            );
        }
        Err(why) => return problem(&site, who.as_deref(), StatusCode::FORBIDDEN, "dead letter", &why),
    };
    let mut o = String::new();
    let _ = write!(
        o,
        "<table id=\"letter\"><tr><th>id</th><td>{}</td></tr><tr><th>diverted</th><td>{}</td></tr>\
         <tr><th>queue</th><td>{}</td></tr><tr><th>received at</th><td>{}</td></tr><tr><th>sent by</th><td>{}</td></tr>\
         <tr><th>message type</th><td>{}</td></tr><tr><th>request</th><td id=\"key\">{}</td></tr>\
         <tr><th>attempts</th><td>{}</td></tr><tr><th>reason</th><td id=\"reason\">{}</td></tr>\
         <tr><th>replayed</th><td id=\"replayed\">{}</td></tr></table>",
        letter.id,
        escape(&letter.dead_lettered_at),
        escape(&letter.queue),
        escape(&letter.service),
        escape(letter.far_service.as_deref().unwrap_or("-")),
        escape(&letter.message_type),
        match request_key(&letter) {
            Some(k) => format!(
                "<a href=\"/sleutel?dienstverband={}&amp;periode={}\">{}</a>",
                k.dienstverband_id,
                k.periode_id,
                escape(&key_text(&letter))
            ),
            None => escape(&key_text(&letter)),
        },
        letter.attempts,
        escape(&letter.reason),
        replayed_text(&letter),
    );
    if let (true, Some(s)) = (site.actions, who.as_deref()) {
        let _ = write!(
            o,
            "<form method=\"post\" action=\"/letters/{}/replay\" id=\"replay-one\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\"><button id=\"replay-button\">replay this letter</button> \
             (sent again on a new dialog; a letter replayed already is left alone) · \
             <a href=\"/letters/confirm?action=purge&amp;id={}\" id=\"purge-one\">purge this letter…</a></form>",
            letter.id,
            escape(&s.csrf),
            letter.id
        );
    }
    let body = letter.body.as_deref().map_or_else(|| "(no body)".into(), pretty);
    let _ = write!(o, "<h2>Body</h2><pre id=\"body\">{}</pre>", escape(&body));
    html(StatusCode::OK, frame(&site, who.as_deref(), &format!("dead letter {}", letter.id), None, &o))
}

/// `GET /letters/confirm?action=purge|replay&…`: how many letters the action takes, and
/// the form that does it (the count and the highest id go with it).
pub(super) async fn confirm(State(site): State<Arc<Site>>, headers: HeaderMap, Query(f): Query<Filter>) -> Response {
    let who = site.sessions.find(&headers);
    let Some(s) = who.as_ref().filter(|_| site.actions) else {
        return problem(
            &site,
            who.as_deref(),
            StatusCode::UNAUTHORIZED,
            "confirm",
            "Sign in first (and the page must be started with --actions).",
        );
    };
    let (verb, path) = match f.action.as_str() {
        "purge" => ("purge", "/letters/purge"),
        "replay" => ("replay", "/letters/replay"),
        _ => return problem(&site, who.as_deref(), StatusCode::BAD_REQUEST, "confirm", "No such action."),
    };
    let lf = f.letters();
    let counted =
        site.ask(Some(s), ASK_LIMIT, Box::new(move |db| Box::pin(async move { db.letter_count(&lf, None).await })));
    let Tally { letters: count, last_id: last, id_sum } = match counted.await {
        Ok(c) => c,
        Err(why) => return problem(&site, who.as_deref(), StatusCode::FORBIDDEN, "confirm", &why),
    };
    let mut o = String::new();
    let describe = escape(&f.letters().describe());
    match last {
        None => {
            let _ = write!(
                o,
                "<p id=\"confirm-count\">The filter ({describe}) picks no dead letter: nothing to {verb}.</p>"
            );
        }
        Some(last) => {
            let what = if verb == "purge" {
                "deletes them for good"
            } else {
                "sends each again on a new dialog (a letter replayed already is left alone)"
            };
            let _ = write!(
                o,
                "<div class=\"confirm\"><p id=\"confirm-count\">This will {verb} <b>{count}</b> dead letters: {describe}, \
                 ids up to {last}. It {what}. Letters diverted after this page was made are not taken.</p>\
                 <form method=\"post\" action=\"{path}\" id=\"confirm-form\">{}\
                 <input type=\"hidden\" name=\"upto\" value=\"{last}\"><input type=\"hidden\" name=\"expected\" value=\"{count}\">\
                 <input type=\"hidden\" name=\"sum\" value=\"{id_sum}\">\
                 <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
                 <button id=\"confirm-button\">{verb} {count} dead letters</button></form></div>",
                f.hidden(),
                escape(&s.csrf),
            );
        }
    }
    let q = f.query();
    let _ = write!(o, "<p><a href=\"/letters?{}\">back to the list</a></p>", escape(&q));
    html(StatusCode::OK, frame(&site, who.as_deref(), &format!("{verb} dead letters"), None, &o))
}

/// A bulk action's form: the filter, the confirmed highest id and count, the token.
/// (Its fields written out: `serde(flatten)` reads numbers in a form as text.)
#[derive(Debug, serde::Deserialize)]
pub(super) struct Bulk {
    #[serde(default)]
    queue: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    replayed: String,
    #[serde(default)]
    upto: Option<i64>,
    #[serde(default)]
    id: Option<i64>,
    #[serde(default)]
    expected: Option<i64>,
    /// The sum of the confirmed letters' ids.
    #[serde(default)]
    sum: Option<i64>,
    #[serde(default)]
    csrf: String,
}

impl Bulk {
    fn filter(&self) -> Filter {
        Filter {
            queue: self.queue.clone(),
            reason: self.reason.clone(),
            replayed: self.replayed.clone(),
            upto: self.upto,
            action: String::new(),
            id: self.id,
        }
    }
}

/// `POST /letters/purge`: deletes exactly the confirmed set, or nothing.
pub(super) async fn purge(State(site): State<Arc<Site>>, headers: HeaderMap, Form(b): Form<Bulk>) -> Response {
    let who = match acting(&site, &headers, &b.csrf) {
        Ok(w) => w,
        Err(r) => return r,
    };
    let (Some(upto), Some(letters), Some(id_sum)) = (b.upto, b.expected, b.sum) else {
        return problem(&site, Some(&who), StatusCode::BAD_REQUEST, "purge", "The form lacks the confirmed count.");
    };
    let expected = Tally { letters, last_id: Some(upto), id_sum };
    let lf = b.filter().letters();
    let detail = format!("{}, ids up to {upto}", lf.describe());
    let d = detail.clone();
    let asked = site
        .act(&who, Box::new(move |db| Box::pin(async move { db.purge_matching(&lf, upto, expected, &d).await })))
        .await;
    match asked {
        Ok(n) => {
            tracing::info!(login = ?who.login, letters = n, filter = ?detail, "web: dead letters purged");
            let body = format!(
                "<p class=\"ok\" id=\"done\">Purged {n} dead letters ({}).</p><p><a href=\"/letters\">the dead letters</a></p>",
                escape(&detail)
            );
            html(StatusCode::OK, frame(&site, Some(&who), "purged", None, &body))
        }
        Err(why) => problem(&site, Some(&who), StatusCode::CONFLICT, "purge refused", &why),
    }
}

/// `POST /letters/replay`: replays each letter of the confirmed set not replayed yet.
pub(super) async fn replay_many(State(site): State<Arc<Site>>, headers: HeaderMap, Form(b): Form<Bulk>) -> Response {
    let who = match acting(&site, &headers, &b.csrf) {
        Ok(w) => w,
        Err(r) => return r,
    };
    let (Some(upto), Some(expected), Some(expected_sum)) = (b.upto, b.expected, b.sum) else {
        return problem(&site, Some(&who), StatusCode::BAD_REQUEST, "replay", "The form lacks the confirmed count.");
    };
    let lf = b.filter().letters();
    let detail = format!("{}, ids up to {upto}", lf.describe());
    let (login, d) = (who.login.clone(), detail.clone());
    let asked = site
        .act(
            &who,
            Box::new(move |db| {
                Box::pin(async move {
                    let now = db.letter_count(&lf, Some(upto)).await?;
                    if (now.letters, now.id_sum) != (expected, expected_sum) {
                        return Ok(Err(format!(
                            "The filter picks {} dead letters now, not the {expected} confirmed (or not the same ones): \
                             nothing was replayed; look again and confirm anew.",
                            now.letters
                        )));
                    }
                    let mut done = Replayed::default();
                    let mut cursor = upto;
                    loop {
                        let batch = db.letter_page(&lf, Some(cursor), REPLAY_BATCH).await?;
                        let Some(last) = batch.last() else { break };
                        cursor = last.id - 1;
                        for l in &batch {
                            match db.replay(l.id, &login, true).await {
                                Ok(Some(_)) => done.sent += 1,
                                Ok(None) => done.skipped += 1,
                                Err(e) if e.kind == crate::transport::ErrorKind::Connection => {
                                    // The log row cannot be written on a lost connection:
                                    // what was done is said here.
                                    tracing::warn!(login = ?login, sent = done.sent, skipped = done.skipped,
                                                   filter = ?d, "web: a replay by filter lost its connection");
                                    return Err(e);
                                }
                                Err(e) => done.failed.push((l.id, e.message)),
                            }
                        }
                    }
                    db.note_action("replay", &d, done.sent).await?;
                    Ok(Ok(done))
                })
            }),
        )
        .await;
    let done = match asked {
        Ok(Ok(d)) => d,
        Ok(Err(why)) => return problem(&site, Some(&who), StatusCode::CONFLICT, "replay refused", &why),
        Err(why) => return problem(&site, Some(&who), StatusCode::FORBIDDEN, "replay", &why),
    };
    tracing::info!(login = ?who.login, sent = done.sent, skipped = done.skipped, failed = done.failed.len(),
                   filter = ?detail, "web: dead letters replayed");
    let mut o = format!(
        "<p class=\"ok\" id=\"done\">Replayed {} dead letters ({}); {} were replayed already and left alone; {} could not be \
         sent.</p>",
        done.sent,
        escape(&detail),
        done.skipped,
        done.failed.len()
    );
    if !done.failed.is_empty() {
        o.push_str("<table id=\"failed\"><tr><th>id</th><th>why</th></tr>");
        for (id, why) in done.failed.iter().take(FAILURES_SHOWN) {
            let _ = write!(o, "<tr><td><a href=\"/letters/{id}\">{id}</a></td><td>{}</td></tr>", escape(why));
        }
        o.push_str("</table>");
    }
    o.push_str("<p><a href=\"/letters\">the dead letters</a></p>");
    html(StatusCode::OK, frame(&site, Some(&who), "replayed", None, &o))
}

#[derive(Default)]
struct Replayed {
    sent: i64,
    skipped: i64,
    failed: Vec<(i64, String)>,
}

/// `POST /letters/{id}/replay`.
pub(super) async fn replay_one(
    State(site): State<Arc<Site>>,
    headers: HeaderMap,
    Path(id): Path<i64>,
    Form(t): Form<TokenForm>,
) -> Response {
    let who = match acting(&site, &headers, &t.csrf) {
        Ok(w) => w,
        Err(r) => return r,
    };
    let login = who.login.clone();
    let asked = site
        .act(
            &who,
            Box::new(move |db| {
                Box::pin(async move {
                    let handle = db.replay(id, &login, true).await?;
                    // The replay is done (committed): a log row that cannot be written
                    // is said beside it, not as a refused replay.
                    let logged = match handle {
                        Some(_) => db.note_action("replay", &format!("dead letter {id}"), 1).await.err(),
                        None => None,
                    };
                    Ok((handle, logged))
                })
            }),
        )
        .await;
    let body = match asked {
        Ok((Some(h), logged)) => {
            tracing::info!(login = ?who.login, id, "web: a dead letter replayed");
            let note = logged.map_or(String::new(), |e| {
                format!(" <span class=\"bad\">It could not be written to the action log: {}</span>", escape(&e.message))
            });
            format!("<p class=\"ok\" id=\"done\">Dead letter {id} was sent again, on dialog {h}.{note}</p>")
        }
        Ok((None, _)) => format!("<p id=\"done\">Dead letter {id} was replayed already: left alone.</p>"),
        Err(why) => return problem(&site, Some(&who), StatusCode::CONFLICT, "replay refused", &why),
    };
    let body = format!(
        "{body}<p><a href=\"/letters/{id}\">dead letter {id}</a> · <a href=\"/letters\">the dead letters</a></p>"
    );
    html(StatusCode::OK, frame(&site, Some(&who), "replayed", None, &body))
}

/// `GET /actions`: the action log, newest first.
pub(super) async fn actions(State(site): State<Arc<Site>>, headers: HeaderMap) -> Response {
    let who = match reader(&site, &headers, "acties") {
        Ok(w) => w,
        Err(r) => return r,
    };
    let rows: Vec<Action> = match site.ask(who.as_ref(), ASK_LIMIT, Box::new(|db| Box::pin(db.actions(100)))).await {
        Ok(r) => r,
        Err(why) => return problem(&site, who.as_deref(), StatusCode::FORBIDDEN, "acties", &why),
    };
    let mut o = String::from(
        "<p>What people did from this page, with the database login that did it (newest 100).</p>\
         <table id=\"actions\"><tr><th>at</th><th>who</th><th>action</th><th>on</th><th>letters</th></tr>",
    );
    for a in &rows {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td></tr>",
            escape(&a.at),
            escape(&a.who),
            escape(&a.action),
            escape(&a.detail),
            a.letters
        );
    }
    o.push_str("</table>");
    html(StatusCode::OK, frame(&site, who.as_deref(), "acties", None, &o))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_travels_as_query_and_hidden_fields_escaped() {
        let f = Filter { queue: " q1 ".into(), reason: "a&b <x>".into(), replayed: "no".into(), ..Filter::default() };
        let one = Filter { id: Some(7), ..Filter::default() };
        assert_eq!(one.query(), "id=7");
        assert!(one.hidden().contains("name=\"id\" value=\"7\""));
        assert_eq!(one.letters().describe(), "dead letter 7");
        assert_eq!(f.query(), "queue=q1&reason=a%26b%20%3Cx%3E&replayed=no");
        assert!(f.hidden().contains("value=\"a&amp;b &lt;x&gt;\""));
        assert_eq!(f.letters().describe(), "queue q1, reason holds \"a&b <x>\", not replayed");
        assert_eq!(Filter::default().letters().describe(), "every dead letter");
    }

    #[test]
    fn long_reasons_are_shortened_on_a_character_boundary() {
        assert_eq!(shortened("ééé", 2), "éé…");
        assert_eq!(shortened("ab", 5), "ab");
    }
}
