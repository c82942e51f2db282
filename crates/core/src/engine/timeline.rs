//! From Diensten to a time line: each block placed in real (UTC) time, blocks outside
//! the period or the employment dropped, overlaps resolved so that a minute counts once.

use chrono::NaiveDate;

use super::clock::{LocalClock, Minute, Placement, local_midnight};
use super::explain::Explanation;
use super::{EngineError, Reden};
use crate::contract::{Verlof, Vraag, Waarschuwing};

/// What a minute of a block is; where blocks overlap the highest kind owns the minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Duty that does not count as worked time (e.g. on call).
    Other = 0,
    /// Leave taken on rostered hours (`Verlof`): other leave, the rest of the vacation
    /// hours, statutory vacation.
    LeaveOther = 1,
    LeaveExtra = 2,
    LeaveStatutory = 3,
    Sick = 4,
    Worked = 5,
}

/// A stretch of real time owned by one block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// UTC minutes, `start < end`.
    pub start: Minute,
    pub end: Minute,
    pub kind: Kind,
    /// Indices of the Dienst and of the block in it (as in the Vraag).
    pub dienst: usize,
    pub block: usize,
}

/// The resolved time line of one Vraag.
pub struct Line {
    pub clock: LocalClock,
    /// Disjoint, sorted by start.
    pub pieces: Vec<Piece>,
    /// Distinct Dienst dates with a worked block.
    pub days_worked: u32,
    pub warnings: Vec<Waarschuwing>,
}

fn warn(code: &str, datum: NaiveDate, tekst: String) -> Waarschuwing {
    Waarschuwing { code: code.into(), datum: Some(datum), tekst }
}

pub fn build(v: &Vraag, mut ex: Option<&mut Explanation>) -> Result<Line, EngineError> {
    let p = &v.periode;
    let dv = &v.dienstverband;
    let clock = LocalClock::new(p.begin, p.einde + chrono::Days::new(1));
    let mut warnings = Vec::new();
    let mut pieces = Vec::with_capacity(v.diensten.dienst.len() * 2);
    let mut worked_dates: Vec<NaiveDate> = Vec::with_capacity(v.diensten.dienst.len());
    for (di, d) in v.diensten.dienst.iter().enumerate() {
        if d.datum < p.begin || d.datum > p.einde {
            warnings.push(warn(
                "dienst-buiten-periode",
                d.datum,
                format!("Dienst of {} lies outside period {} ({} to {}): not counted", d.datum, p.id, p.begin, p.einde),
            ));
            if let Some(e) = ex.as_deref_mut() {
                e.dropped(di, "outside the period: not counted");
            }
            continue;
        }
        let before = d.datum < dv.datum_in_dienst;
        let after = dv.datum_uit_dienst.is_some_and(|u| d.datum > u);
        if before || after {
            let why = if before {
                format!("before the start of employment ({})", dv.datum_in_dienst)
            } else {
                format!("after the end of employment ({})", dv.datum_uit_dienst.unwrap_or_default())
            };
            warnings.push(warn(
                "blok-buiten-dienstverband",
                d.datum,
                format!("{} block(s) of the Dienst of {} lie {why}: not counted", d.tijdblokken.len(), d.datum),
            ));
            if let Some(e) = ex.as_deref_mut() {
                e.dropped(di, &format!("{why}: not counted"));
            }
            continue;
        }
        // A block that begins before the Dienst's first block begins on the next day
        // (a night with a break after midnight).
        let anchor = d.tijdblokken[0].begin;
        let mut worked = false;
        for (bi, b) in d.tijdblokken.iter().enumerate() {
            let day = if b.begin < anchor { d.datum + chrono::Days::new(1) } else { d.datum };
            let start_local = local_midnight(day) + Minute::from(b.begin.minutes());
            let mut end_local = local_midnight(day) + Minute::from(b.einde.minutes());
            if b.einde <= b.begin {
                end_local += 1440;
            }
            let (start, ps) = clock.to_utc(start_local);
            let (end, pe) = clock.to_utc(end_local);
            for (placement, what, t) in [(ps, "begin", b.begin), (pe, "end", b.einde)] {
                let (code, text) = match placement {
                    Placement::Exact => continue,
                    Placement::Gap => (
                        "tijd-bestaat-niet",
                        format!(
                            "the {what} {t} does not exist on this day (clock moved forward): taken as the first valid time after it"
                        ),
                    ),
                    Placement::Ambiguous => (
                        "tijd-dubbelzinnig",
                        format!(
                            "the {what} {t} occurs twice on this day (clock moved back): taken as the first occurrence"
                        ),
                    ),
                };
                warnings.push(warn(code, day, format!("Dienst of {}, block {}: {text}", d.datum, bi + 1)));
            }
            let minutes = end - start;
            if minutes > 1440 {
                return Err(EngineError::new(
                    Reden::BlockTooLong,
                    format!("Diensten/Dienst[{}]/Tijdblok[{}]", di + 1, bi + 1),
                    format!(
                        "the block {}-{} lasts {}:{:02} hours of real time, more than 24 hours",
                        b.begin,
                        b.einde,
                        minutes / 60,
                        minutes % 60
                    ),
                ));
            }
            if let Some(e) = ex.as_deref_mut() {
                e.block(di, bi, start, end, &clock);
            }
            if minutes <= 0 {
                continue;
            }
            let kind = if b.is_ziek {
                Kind::Sick
            } else if let Some(l) = b.verlof {
                match l {
                    Verlof::Wettelijk => Kind::LeaveStatutory,
                    Verlof::Bovenwettelijk => Kind::LeaveExtra,
                    Verlof::Overig => Kind::LeaveOther,
                }
            } else if b.dienst_type.telt_mee_in_gewerkte_uren {
                Kind::Worked
            } else {
                Kind::Other
            };
            worked |= kind == Kind::Worked;
            pieces.push(Piece { start, end, kind, dienst: di, block: bi });
        }
        if worked && !worked_dates.contains(&d.datum) {
            worked_dates.push(d.datum);
        }
    }
    pieces.sort_unstable_by_key(|p| (p.start, p.end, p.dienst, p.block));
    let mut max_end = Minute::MIN;
    let overlapping = pieces.iter().any(|p| {
        let o = p.start < max_end;
        max_end = max_end.max(p.end);
        o
    });
    if overlapping {
        pieces = resolve_overlaps(v, pieces, &mut warnings);
    }
    Ok(Line { clock, pieces, days_worked: worked_dates.len() as u32, warnings })
}

/// Splits overlapping pieces at every edge and gives each stretch to the covering
/// block of the highest kind (worked, then sick, then leave, then other; ties: first in
/// the Vraag).
fn resolve_overlaps(v: &Vraag, pieces: Vec<Piece>, warnings: &mut Vec<Waarschuwing>) -> Vec<Piece> {
    // One warning per pair of Diensten (or per Dienst) with overlapping blocks.
    let mut pairs: Vec<(usize, usize, usize, usize)> = Vec::new();
    for (i, a) in pieces.iter().enumerate() {
        for b in pieces[i + 1..].iter().take_while(|b| b.start < a.end) {
            let (first, second) = if (a.dienst, a.block) <= (b.dienst, b.block) { (a, b) } else { (b, a) };
            if !pairs.iter().any(|p| (p.0, p.2) == (first.dienst, second.dienst)) {
                pairs.push((first.dienst, first.block, second.dienst, second.block));
            }
        }
    }
    for (d1, b1, d2, b2) in pairs {
        let (x, y) = (&v.diensten.dienst[d1], &v.diensten.dienst[d2]);
        let tekst = if d1 == d2 {
            format!(
                "blocks {} and {} of the Dienst of {} overlap: the overlap is counted once",
                b1 + 1,
                b2 + 1,
                x.datum
            )
        } else {
            let (early, late) = if (x.datum, b1) <= (y.datum, b2) { ((x, b1), (y, b2)) } else { ((y, b2), (x, b1)) };
            format!(
                "block {} of the Dienst of {} overlaps block {} of the Dienst of {}: the overlap is counted once",
                late.1 + 1,
                late.0.datum,
                early.1 + 1,
                early.0.datum
            )
        };
        warnings.push(Waarschuwing { code: "blokken-overlappen".into(), datum: Some(x.datum.max(y.datum)), tekst });
    }
    let mut edges: Vec<Minute> = pieces.iter().flat_map(|p| [p.start, p.end]).collect();
    edges.sort_unstable();
    edges.dedup();
    let mut out: Vec<Piece> = Vec::new();
    for w in edges.windows(2) {
        let (a, b) = (w[0], w[1]);
        let covering = pieces.iter().filter(|p| p.start <= a && p.end >= b);
        let mut owner: Option<&Piece> = None;
        for p in covering {
            owner = match owner {
                Some(o)
                    if (o.kind, std::cmp::Reverse((o.dienst, o.block)))
                        >= (p.kind, std::cmp::Reverse((p.dienst, p.block))) =>
                {
                    Some(o)
                }
                _ => Some(p),
            };
        }
        let Some(o) = owner else { continue };
        match out.last_mut() {
            Some(l) if l.end == a && (l.dienst, l.block, l.kind) == (o.dienst, o.block, o.kind) => l.end = b,
            _ => out.push(Piece { start: a, end: b, ..*o }),
        }
    }
    out
}
