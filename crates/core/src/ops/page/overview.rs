//! The overview (`/`): what needs attention, the queues, the workers, the conversations,
//! the transmission queue, the stale keys, the sweeps and the last export, from the
//! status document.

use std::fmt::Write;

use super::{escape, plot};
use crate::ops::Rate;
use crate::ops::status::{self, Status, Thresholds, alive, seconds};

/// The overview's body: what needs attention, the last hour's plots (or why there are
/// none), the queues, the workers, the conversations, the stale keys, the sweeps and
/// the last export.
pub fn overview(s: &Status, t: Thresholds, rates: Result<&[Rate], &str>) -> String {
    let mut o = String::new();
    let _ = write!(o, "<p>{} · {}</p>", escape(&s.backend), escape(&s.at));
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
    o.push_str("<h2>The last hour</h2>");
    match rates {
        Ok(r) => {
            let _ = write!(o, "<div class=\"plots\">{}{}</div>", plot::throughput(r), plot::latency(r));
        }
        Err(why) => {
            let _ = write!(o, "<p id=\"plots-missing\">No plots: {}</p>", escape(why));
        }
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
    o
}
