//! Worked minutes to ORT rates: each worked stretch is cut at clock changes, local
//! midnights and window edges; each cut is paid at the highest rate whose window holds
//! it on that local day (weekday, holiday or calendar day), under the table in force
//! on that day. Where the CAO limits ORT to the hours up to full time (art. 9.1 lid 1-2),
//! the period's sick and leave minutes fill the limit first, whenever they fall, and the
//! worked minutes are counted in time order into the room left: the worked minutes after
//! it carry no ORT (docs/payroll-rules.md, "Which hours are above the limit").

use chrono::Datelike;
use rust_decimal::Decimal;

use super::clock::split_local;
use super::explain::Explanation;
use super::tables::{Cao, Window};
use super::timeline::{Kind, Line};
use super::{EngineError, Reden, Totals};

/// Σ minutes × rate percentage, per ORT wage cap in force (index into `Cao::caps`,
/// `None` where no cap was configured on the day).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sums {
    pub per_cap: Vec<(Option<usize>, i64)>,
}

impl Sums {
    fn add(&mut self, cap: Option<usize>, minute_pct: i64) {
        match self.per_cap.iter_mut().find(|(c, _)| *c == cap) {
            Some((_, s)) => *s += minute_pct,
            None => self.per_cap.push((cap, minute_pct)),
        }
    }

    pub fn total(&self) -> i64 {
        self.per_cap.iter().map(|(_, s)| s).sum()
    }
}

/// `overtime_paid`: the employee gets the CAO's overtime pay (its job group, and the
/// contract the overtime rules were read for); the overtime minutes are placed in its
/// windows only then.
pub fn split(
    line: &Line,
    cao: &Cao,
    period_begin: chrono::NaiveDate,
    overtime_paid: bool,
    totals: &mut Totals,
    mut ex: Option<&mut Explanation>,
) -> Result<Sums, EngineError> {
    let mut sums = Sums::default();
    let (first, last) = match (line.pieces.first(), line.pieces.last()) {
        (Some(f), Some(l)) => (split_local(line.clock.to_local(f.start)).0, split_local(line.clock.to_local(l.end)).0),
        _ => return Ok(sums),
    };
    let holidays = cao.holidays_in(first.year(), last.year());
    // The instant the ORT limit is reached. Sick and leave minutes are rostered hours that
    // are not work: they count towards the limit wherever they fall in the period, and
    // never are the hours above it (those are work by definition, art. 8.1). So the room
    // for work is the limit less them, and worked minutes fill it in time order.
    // The same instant begins the overtime (work above the roster's hours, art. 8.1), which
    // the CAO's overtime windows may pay a percentage over.
    let cutoff = work_cutoff(line, totals.roster_limit_minutes);
    let rostered_off = rostered_off(line);
    // The number of the period's first weekday (a period that begins on a Saturday or
    // Sunday: the Monday after; the Friday before is the previous period's).
    let first_weekday = (0..3u64)
        .map(|n| period_begin + chrono::Days::new(n))
        .find(|d| d.weekday().num_days_from_monday() < 5)
        .unwrap_or(period_begin);
    let mut overtime = Overtime { first_day: weekday_number(first_weekday), ..Overtime::default() };
    for piece in &line.pieces {
        let len = piece.end - piece.start;
        match piece.kind {
            Kind::Sick => totals.sick_minutes += len,
            Kind::Other => totals.other_minutes += len,
            Kind::Worked => totals.worked_minutes += len,
            Kind::LeaveStatutory => totals.leave_minutes[0] += len,
            Kind::LeaveExtra => totals.leave_minutes[1] += len,
            Kind::LeaveOther => totals.leave_minutes[2] += len,
        }
        // Cut at the ORT limit, then at clock changes: within each cut the offset is
        // constant and the minutes are either within the limit or above it.
        let limit_cut = cutoff.filter(|&c| piece.start < c && c < piece.end).unwrap_or(piece.end);
        for (start, end) in [(piece.start, limit_cut), (limit_cut, piece.end)] {
            if start >= end {
                continue;
            }
            let mut a = start;
            let changes = line.clock.changes_within(start, end).map(|(t, _)| t).chain(std::iter::once(end));
            for b in changes {
                let above = cutoff.is_some_and(|c| a >= c);
                let off = line.clock.offset(a);
                let (mut t, lb) = (a + off, b + off);
                while t < lb {
                    let (date, m0) = split_local(t);
                    let day_start = t - i64::from(m0);
                    let m1 = (lb - day_start).min(1440) as u16;
                    if piece.kind != Kind::Worked {
                        if let Some(e) = ex.as_deref_mut() {
                            e.line(piece, date, m0, m1, None, None);
                        }
                        t = day_start + i64::from(m1);
                        continue;
                    }
                    if above {
                        totals.overtime_minutes += i64::from(m1 - m0);
                        if overtime_paid {
                            overtime.classify(cao, date, m0, m1, &holidays, totals, ex.as_deref_mut());
                        }
                    }
                    if above && totals.ort_limit_minutes.is_some() {
                        totals.over_limit_minutes += i64::from(m1 - m0);
                        if let Some(e) = ex.as_deref_mut() {
                            e.above_limit(
                                piece,
                                date,
                                m0,
                                m1,
                                totals.ort_limit_minutes.unwrap_or_default(),
                                rostered_off,
                            );
                        }
                        t = day_start + i64::from(m1);
                        continue;
                    }
                    let version = cao.version_on(date).ok_or_else(|| {
                        EngineError::new(
                            Reden::UnknownCao,
                            format!("Diensten/Dienst[{}]/Tijdblok[{}]", piece.dienst + 1, piece.block + 1),
                            format!("CAO '{}' has no ORT table in force on {date}", cao.code),
                        )
                    })?;
                    let cap = cao.cap_on(date).map(|(i, _)| i);
                    let info = cao.day_info(date, &holidays);
                    let mut m = m0;
                    for &edge in version.edges.iter().filter(|&&e| e > m0) {
                        let end = edge.min(m1);
                        let best: Option<&Window> = version
                            .windows
                            .iter()
                            .filter(|w| w.from <= m && w.to >= end && w.days.matches(&info))
                            .max_by_key(|w| w.pct);
                        let minutes = i64::from(end - m);
                        match best {
                            Some(w) => {
                                totals.ort_minutes[w.rate] += minutes;
                                sums.add(cap, minutes * i64::from(w.pct));
                            }
                            None => totals.no_ort_minutes += minutes,
                        }
                        if let Some(e) = ex.as_deref_mut() {
                            e.line(piece, date, m, end, best, Some(&info));
                        }
                        m = end;
                        if m >= m1 {
                            break;
                        }
                    }
                    t = day_start + i64::from(m1);
                }
                a = b;
            }
        }
    }
    Ok(sums)
}

/// The overtime minutes of one calculation, placed in the CAO's overtime windows in time
/// order. A window with a [cap](super::tables::Cap) pays its own percentage on a minute
/// only while the minutes it paid in the window's last consecutive weekdays (this day
/// and those before it) are under the cap: taken in time order this keeps every such
/// stretch of weekdays within the cap, and pays the rest at the higher percentage.
#[derive(Default)]
struct Overtime {
    /// (window index, weekday number, minutes paid at the window's own percentage).
    paid: Vec<(usize, i64, i64)>,
    /// The weekday number of the period's first day.
    first_day: i64,
}

/// The number of Monday-to-Friday days from 1970-01-05 (a Monday) to `date`; a Saturday
/// and Sunday share the Friday's number.
fn weekday_number(date: chrono::NaiveDate) -> i64 {
    let days = (date - chrono::NaiveDate::from_ymd_opt(1970, 1, 5).expect("a date")).num_days();
    days.div_euclid(7) * 5 + days.rem_euclid(7).min(4)
}

impl Overtime {
    /// Places the overtime minutes `m0..m1` of local `date`.
    #[allow(clippy::too_many_arguments)]
    fn classify(
        &mut self,
        cao: &Cao,
        date: chrono::NaiveDate,
        m0: u16,
        m1: u16,
        holidays: &[(chrono::NaiveDate, &str)],
        totals: &mut Totals,
        mut ex: Option<&mut Explanation>,
    ) {
        let Some(ot) = &cao.overtime else {
            totals.overtime_unpaid_minutes += i64::from(m1 - m0);
            return;
        };
        let info = cao.day_info(date, holidays);
        let day = weekday_number(date);
        let mut m = m0;
        for &edge in ot.edges.iter().filter(|&&e| e > m0) {
            let end = edge.min(m1);
            let best = ot
                .windows
                .iter()
                .enumerate()
                // A public holiday is not a weekday for overtime: a window holds it only
                // when it names `feestdag` (CAO GGZ's Monday-to-Friday percentages were
                // read for working days; its holiday rule was not).
                .filter(|(_, w)| {
                    w.window.from <= m
                        && w.window.to >= end
                        && w.window.days.matches(&info)
                        && (info.holiday.is_none() || w.window.days.holiday)
                })
                .max_by_key(|(_, w)| w.window.pct);
            let minutes = i64::from(end - m);
            match best {
                None => {
                    totals.overtime_unpaid_minutes += minutes;
                    if let Some(e) = ex.as_deref_mut() {
                        e.overtime(date, m, end, None, "in no overtime window of the table: no percentage");
                    }
                }
                Some((wi, w)) => {
                    let (own, rest) = match w.cap {
                        None => (minutes, 0),
                        Some(cap) => {
                            let first = day - i64::from(cap.weekdays) + 1;
                            let used: i64 = self
                                .paid
                                .iter()
                                .filter(|(i, d, _)| *i == wi && (first..=day).contains(d))
                                .map(|(_, _, n)| n)
                                .sum();
                            let own = minutes.min((cap.minutes - used).max(0));
                            if own > 0 {
                                self.paid.push((wi, day, own));
                                // The stretch reaches into the previous period, whose
                                // overtime this Vraag does not carry day by day.
                                if first < self.first_day && !totals.overtime_cap_at_start.contains(&w.window.rate) {
                                    totals.overtime_cap_at_start.push(w.window.rate);
                                }
                            }
                            (own, minutes - own)
                        }
                    };
                    let pct = |rate: usize| ot.rates[rate].pct;
                    totals.overtime_rate_minutes[w.window.rate] += own;
                    totals.overtime_pct_minutes += own * i64::from(pct(w.window.rate));
                    if let Some(cap) = w.cap {
                        totals.overtime_rate_minutes[cap.rate] += rest;
                        totals.overtime_pct_minutes += rest * i64::from(pct(cap.rate));
                    }
                    if let Some(e) = ex.as_deref_mut() {
                        let at = m + own as u16;
                        if own > 0 {
                            e.overtime(date, m, at, Some(w.window.pct), &window_text(&w.window, w.cap));
                        }
                        if let (Some(cap), true) = (w.cap, rest > 0) {
                            let why = format!(
                                "{}: its {} h in {} weekdays are used",
                                window_text(&w.window, None),
                                Decimal::from(cap.minutes) / Decimal::from(60),
                                cap.weekdays
                            );
                            e.overtime(date, at, end, Some(pct(cap.rate)), &why);
                        }
                    }
                }
            }
            m = end;
            if m >= m1 {
                break;
            }
        }
    }
}

fn window_text(w: &Window, cap: Option<super::tables::Cap>) -> String {
    let hm = |m: u16| format!("{:02}:{:02}", m / 60, m % 60);
    let mut s = format!("overtime window {} {}-{} at {}%", w.days_text, hm(w.from), hm(w.to), w.pct);
    if let Some(c) = cap {
        s.push_str(&format!(
            " (at most {} h in {} weekdays)",
            Decimal::from(c.minutes) / Decimal::from(60),
            c.weekdays
        ));
    }
    s
}

/// The period's sick and leave minutes: rostered hours that are not work.
fn rostered_off(line: &Line) -> i64 {
    line.pieces.iter().filter(|p| !matches!(p.kind, Kind::Worked | Kind::Other)).map(|p| p.end - p.start).sum()
}

/// The instant the worked minutes of the period fill the room the limit leaves after
/// its sick and leave minutes (`None`: they never do, no worked minute is above it).
pub(crate) fn work_cutoff(line: &Line, limit: i64) -> Option<super::clock::Minute> {
    let mut left = (limit - rostered_off(line)).max(0);
    line.pieces.iter().filter(|p| p.kind == Kind::Worked).find_map(|p| {
        let len = p.end - p.start;
        if len > left {
            Some(p.start + left)
        } else {
            left -= len;
            None
        }
    })
}
