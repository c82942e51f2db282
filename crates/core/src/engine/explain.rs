//! `calc --explain`: for every Dienst and block, which minutes fell into which rate
//! and why (weekday, holiday, calendar day, clock change), then the wage and the
//! factors, so a payroll clerk can check each figure by hand.

use std::fmt::{self, Write};

use chrono::{Datelike, NaiveDate};
use rust_decimal::Decimal;

use super::Totals;
use super::clock::{LocalClock, Minute, split_local};
use super::tables::{Cao, DayInfo, Window};
use super::timeline::{Kind, Piece};
use crate::contract::{Antwoord, Vraag};

const WEEKDAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

/// One explained stretch of a block.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub date: NaiveDate,
    /// Local minutes of the day, `from < to <= 1440`.
    pub from: u16,
    pub to: u16,
    pub kind_text: &'static str,
    /// Rate percentage, or `None` for no ORT.
    pub pct: Option<u32>,
    pub why: String,
}

#[derive(Debug, Clone, PartialEq, Default)]
struct Block {
    header: String,
    lines: Vec<Line>,
}

#[derive(Debug, Clone, PartialEq, Default)]
struct DutyExplained {
    header: String,
    dropped: Option<String>,
    blocks: Vec<Block>,
}

/// The explanation of one calculation, rendered with `Display`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Explanation {
    head: String,
    diensten: Vec<DutyExplained>,
    wage: String,
    overtime: Vec<String>,
    tail: String,
}

fn hm(m: u16) -> String {
    format!("{:02}:{:02}", m / 60, m % 60)
}

fn dur(m: i64) -> String {
    format!("{}:{:02}", m / 60, m % 60)
}

impl Explanation {
    pub(crate) fn new(v: &Vraag, cao: &Cao) -> Self {
        let dv = &v.dienstverband;
        let p = &v.periode;
        let head = format!(
            "Dienstverband {} (job group {}, {} of {} hours a week), period {} from {} to {} ({}), CAO {} ({}), roster version {}",
            dv.id,
            dv.functiegroep,
            dv.parttime_uren,
            dv.cao.werkweek_uren,
            p.id,
            p.begin,
            p.einde,
            if dv.cao.is_vier_weken { "4 weeks" } else { "month" },
            cao.code,
            cao.name,
            v.versie
        );
        let diensten = v
            .diensten
            .dienst
            .iter()
            .map(|d| DutyExplained {
                header: format!("Dienst {} ({})", d.datum, WEEKDAYS[d.datum.weekday().num_days_from_monday() as usize]),
                dropped: None,
                blocks: d
                    .tijdblokken
                    .iter()
                    .map(|b| Block {
                        header: format!(
                            "block {}-{} {} ({})",
                            b.begin,
                            b.einde,
                            b.dienst_type.code,
                            if b.is_ziek {
                                "sick"
                            } else if let Some(l) = b.verlof {
                                match l {
                                    crate::contract::Verlof::Wettelijk => "statutory vacation",
                                    crate::contract::Verlof::Bovenwettelijk => "vacation above the statutory hours",
                                    crate::contract::Verlof::Overig => "other leave",
                                }
                            } else if b.dienst_type.telt_mee_in_gewerkte_uren {
                                "worked"
                            } else {
                                "does not count as worked"
                            }
                        ),
                        lines: Vec::new(),
                    })
                    .collect(),
            })
            .collect();
        Self { head, diensten, ..Self::default() }
    }

    pub(crate) fn dropped(&mut self, dienst: usize, why: &str) {
        self.diensten[dienst].dropped = Some(why.to_owned());
    }

    pub(crate) fn block(&mut self, dienst: usize, block: usize, start: Minute, end: Minute, clock: &LocalClock) {
        let b = &mut self.diensten[dienst].blocks[block];
        let (sd, _) = split_local(clock.to_local(start));
        let _ = write!(b.header, ": {} of real time from {sd}", dur(end - start));
        for (t, off) in clock.changes_within(start, end) {
            let before = clock.offset(t - 1);
            let (_, at) = split_local(t + before);
            let shift = off - before;
            let _ = write!(
                b.header,
                "; clock change at {} local ({}): the block is {} minutes {}",
                hm(at),
                if shift > 0 { "summer time begins" } else { "summer time ends" },
                shift.abs(),
                if shift > 0 { "shorter" } else { "longer" }
            );
        }
    }

    pub(crate) fn line(
        &mut self,
        p: &Piece,
        date: NaiveDate,
        from: u16,
        to: u16,
        w: Option<&Window>,
        info: Option<&DayInfo<'_>>,
    ) {
        let kind_text = match p.kind {
            Kind::Worked => "worked",
            Kind::Sick => "sick",
            Kind::Other => "not counted",
            Kind::LeaveStatutory => "vacation",
            Kind::LeaveExtra => "vacation+",
            Kind::LeaveOther => "leave",
        };
        let why = match (p.kind, w, info) {
            (Kind::Sick, ..) => "sick hours carry no ORT".to_owned(),
            (Kind::Other, ..) => "duty type does not count as worked".to_owned(),
            (Kind::LeaveStatutory, ..) => "statutory vacation: no ORT of its own (see ORT over vacation)".to_owned(),
            (Kind::LeaveExtra, ..) => "vacation above the statutory hours: no ORT".to_owned(),
            (Kind::LeaveOther, ..) => "other leave: no ORT".to_owned(),
            (_, Some(w), Some(i)) => {
                let mut s = format!("window {} {}-{} at {}%", w.days_text, hm(w.from), hm(w.to), w.pct);
                if let Some(h) = i.holiday {
                    let _ = write!(s, "; {date} is a public holiday: {h}");
                }
                s
            }
            (_, None, Some(i)) => match i.holiday {
                Some(h) => format!("no ORT window at this time ({h})"),
                None => "no ORT window at this time".to_owned(),
            },
            _ => String::new(),
        };
        let lines = &mut self.diensten[p.dienst].blocks[p.block].lines;
        let pct = w.map(|w| w.pct);
        match lines.last_mut() {
            // Same rate for the same reason right after: one line.
            Some(l) if l.date == date && l.to == from && l.pct == pct && l.why == why && l.kind_text == kind_text => {
                l.to = to
            }
            _ => lines.push(Line { date, from, to, kind_text, pct, why }),
        }
    }

    /// Worked minutes after the period's ORT limit was reached.
    pub(crate) fn above_limit(&mut self, p: &Piece, date: NaiveDate, from: u16, to: u16, limit: i64, off: i64) {
        let why = if off > 0 {
            format!(
                "above the ORT limit of {} h in the period less {} h of sick and leave hours, {} h of work \
                 (art. 9.1 lid 1-2): no ORT",
                dur(limit),
                dur(off),
                dur((limit - off).max(0))
            )
        } else {
            format!("above the ORT limit of {} h in the period (art. 9.1 lid 1-2): no ORT", dur(limit))
        };
        let lines = &mut self.diensten[p.dienst].blocks[p.block].lines;
        match lines.last_mut() {
            Some(l) if l.date == date && l.to == from && l.pct.is_none() && l.why == why => l.to = to,
            _ => lines.push(Line { date, from, to, kind_text: "worked", pct: None, why }),
        }
    }

    pub(crate) fn wage(
        &mut self,
        note: Option<(Decimal, Option<Decimal>)>,
        entitled: bool,
        cao: &Cao,
        weeks: (i64, i64),
        pt: Decimal,
        ww: Decimal,
    ) {
        let mut s = String::new();
        if !entitled {
            let _ = writeln!(s, "No ORT: job group above {} (CAO {}).", cao.ort_max_functiegroep, cao.code);
        }
        if let Some((wage, cap)) = note {
            let _ = write!(s, "Hourly wage: salary x 12 / ({ww} x 52) = {}", wage.round_dp(4));
            match cap {
                Some(c) => {
                    let _ = writeln!(s, "; above the ORT cap, ORT is paid over {c}.");
                }
                None => {
                    let _ = writeln!(s, "; ORT is paid over it (below the cap).");
                }
            }
        }
        let w = if weeks.1 == 1 { format!("{}", weeks.0) } else { format!("{}/{}", weeks.0, weeks.1) };
        let _ = writeln!(s, "Norm: {pt} h x {w} weeks; full-time norm: {ww} h x {w} weeks.");
        if cao.ort_tot_voltijd {
            let _ = writeln!(
                s,
                "ORT limit: max({pt}, {ww}) h x {w} weeks (art. 9.1 lid 1-2; a part-timer's extra hours up to full time \
                 carry ORT, art. 8.5 lid 2): the period's sick and leave hours fill it first, wherever they fall, and \
                 worked hours fill the room left in time order; the worked hours after it carry none (vacation \
                 hours are never above it)."
            );
        }
        self.wage = s;
    }

    /// Overtime minutes `from..to` of local `date` at `pct` (`None`: no percentage), and why.
    pub(crate) fn overtime(&mut self, date: NaiveDate, from: u16, to: u16, pct: Option<u32>, why: &str) {
        let rate = pct.map_or("  - ".to_owned(), |p| format!("{p:>3}%"));
        let wd = WEEKDAYS[date.weekday().num_days_from_monday() as usize];
        self.overtime.push(format!(
            "    {date} {wd} {}-{} {:>6} overtime    {rate}  {why}",
            hm(from),
            hm(to),
            dur(i64::from(to - from))
        ));
    }

    /// A line of its own after the wage (a rule's computation).
    pub(crate) fn note(&mut self, text: &str) {
        self.wage.push_str(text);
        self.wage.push('\n');
    }

    pub(crate) fn finish(&mut self, a: &Antwoord, t: &Totals, cao: &Cao) {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Minutes: worked {} (in ORT windows {}, outside {}, above the ORT limit {}), sick {}, leave {} (statutory vacation {}, other vacation {}, other leave {}), not counted {}; days worked {}.",
            t.worked_minutes,
            t.ort_minutes.iter().sum::<i64>(),
            t.no_ort_minutes,
            t.over_limit_minutes,
            t.sick_minutes,
            t.leave_minutes.iter().sum::<i64>(),
            t.leave_minutes[0],
            t.leave_minutes[1],
            t.leave_minutes[2],
            t.other_minutes,
            t.days_worked
        );
        for (r, m) in cao.rates.iter().zip(&t.ort_minutes) {
            let _ = writeln!(s, "  ORT {}% (factor {}): {} minutes", r.pct, r.code, m);
        }
        let _ = writeln!(s, "Factors:");
        for m in &a.mutaties {
            let _ = writeln!(s, "  {} = {}", m.loonfactor_code, m.waarde);
        }
        for w in &a.waarschuwingen {
            let _ = writeln!(s, "Warning {}: {}", w.code, w.tekst);
        }
        self.tail = s;
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.head)?;
        for d in &self.diensten {
            writeln!(f, "{}", d.header)?;
            if let Some(why) = &d.dropped {
                writeln!(f, "  dropped: {why}")?;
                continue;
            }
            for b in &d.blocks {
                writeln!(f, "  {}", b.header)?;
                for l in &b.lines {
                    let rate = l.pct.map_or("  - ".to_owned(), |p| format!("{p:>3}%"));
                    writeln!(
                        f,
                        "    {} {} {}-{} {:>6} {:<11} {rate}  {}",
                        l.date,
                        WEEKDAYS[l.date.weekday().num_days_from_monday() as usize],
                        hm(l.from),
                        hm(l.to),
                        dur(i64::from(l.to - l.from)),
                        l.kind_text,
                        l.why
                    )?;
                }
            }
        }
        write!(f, "{}", self.wage)?;
        if !self.overtime.is_empty() {
            writeln!(f, "Overtime (worked hours above the roster's hours, in time order):")?;
            for l in &self.overtime {
                writeln!(f, "{l}")?;
            }
        }
        write!(f, "{}", self.tail)
    }
}
