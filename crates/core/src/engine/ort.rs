//! Worked minutes to ORT rates: each worked stretch is cut at clock changes, local
//! midnights and window edges; each cut is paid at the highest rate whose window holds
//! it on that local day (weekday, holiday or calendar day), under the table in force
//! on that day. Where the CAO limits ORT to the hours up to full time (art. 9.1 lid 1-2),
//! the worked, sick and leave minutes of the period are counted in time order and the
//! worked minutes after the limit is reached carry no ORT.

use chrono::Datelike;

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

pub fn split(
    line: &Line,
    cao: &Cao,
    totals: &mut Totals,
    mut ex: Option<&mut Explanation>,
) -> Result<Sums, EngineError> {
    let mut sums = Sums::default();
    let (first, last) = match (line.pieces.first(), line.pieces.last()) {
        (Some(f), Some(l)) => (split_local(line.clock.to_local(f.start)).0, split_local(line.clock.to_local(l.end)).0),
        _ => return Ok(sums),
    };
    let holidays = cao.holidays_in(first.year(), last.year());
    // The instant the ORT limit is reached: worked, sick and leave minutes (rostered
    // hours) count towards it, in time order (the hours above the limit are the last
    // ones of the period).
    let cutoff = totals.ort_limit_minutes.and_then(|limit| {
        let mut left = limit;
        line.pieces.iter().filter(|p| p.kind != Kind::Other).find_map(|p| {
            let len = p.end - p.start;
            if len > left {
                Some(p.start + left)
            } else {
                left -= len;
                None
            }
        })
    });
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
                        if above && piece.kind == Kind::LeaveStatutory {
                            totals.vacation_over_limit_minutes += i64::from(m1 - m0);
                        }
                        if let Some(e) = ex.as_deref_mut() {
                            e.line(piece, date, m0, m1, None, None);
                        }
                        t = day_start + i64::from(m1);
                        continue;
                    }
                    if above {
                        totals.over_limit_minutes += i64::from(m1 - m0);
                        if let Some(e) = ex.as_deref_mut() {
                            e.above_limit(piece, date, m0, m1, totals.ort_limit_minutes.unwrap_or_default());
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
