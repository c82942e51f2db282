//! Europe/Amsterdam wall-clock time over one period, as integer minutes.
//!
//! Instants are minutes since 1970-01-01 00:00 UTC; local times are minutes since
//! 1970-01-01 00:00 on the local wall clock. For the span of one Vraag the UTC offset
//! changes at most a few times: those changes are found once (chrono-tz, bisection),
//! after which every conversion is integer arithmetic.

use chrono::{Datelike, NaiveDate, Offset, TimeZone};
use chrono_tz::Europe::Amsterdam;

/// Minutes since the Unix epoch (UTC, or local wall clock: see the type's use).
pub type Minute = i64;

const DAY: Minute = 1440;

/// A stretch of UTC time with one offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Segment {
    /// First UTC minute of the stretch.
    start: Minute,
    /// Offset in minutes (local = UTC + offset).
    offset: Minute,
}

/// How a local time was placed on the UTC time line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    Exact,
    /// The local time does not exist (clock moved forward): the first valid instant after.
    Gap,
    /// The local time exists twice (clock moved back): the first occurrence.
    Ambiguous,
}

/// Offsets of Europe/Amsterdam between two local dates.
#[derive(Debug, Clone)]
pub struct LocalClock {
    segments: Vec<Segment>,
}

fn offset_at(utc: Minute) -> Minute {
    let secs = utc * 60;
    match Amsterdam.timestamp_opt(secs, 0) {
        chrono::LocalResult::Single(t) => Minute::from(t.offset().fix().local_minus_utc() / 60),
        _ => 60,
    }
}

/// Days from 0001-01-01 (day 1) to 1970-01-01.
const EPOCH_DAYS_FROM_CE: i64 = 719_163;

/// Minutes since the epoch of a local date's midnight.
pub fn local_midnight(date: NaiveDate) -> Minute {
    (i64::from(date.num_days_from_ce()) - EPOCH_DAYS_FROM_CE) * DAY
}

/// The local date and minute of the day of a local minute.
pub fn split_local(local: Minute) -> (NaiveDate, u16) {
    let days = local.div_euclid(DAY) + EPOCH_DAYS_FROM_CE;
    let date = i32::try_from(days).ok().and_then(NaiveDate::from_num_days_from_ce_opt).unwrap_or(NaiveDate::MAX);
    (date, local.rem_euclid(DAY) as u16)
}

impl LocalClock {
    /// The clock for local dates `first..=last` (plus a day either side).
    pub fn new(first: NaiveDate, last: NaiveDate) -> Self {
        let from = local_midnight(first) - 2 * DAY;
        let to = local_midnight(last) + 3 * DAY;
        let mut segments = vec![Segment { start: Minute::MIN, offset: offset_at(from) }];
        find_changes(from, to, offset_at(from), offset_at(to), &mut segments);
        Self { segments }
    }

    fn segment_of(&self, utc: Minute) -> &Segment {
        let i = self.segments.partition_point(|s| s.start <= utc);
        &self.segments[i.saturating_sub(1)]
    }

    /// Local wall-clock minute of a UTC minute.
    pub fn to_local(&self, utc: Minute) -> Minute {
        utc + self.segment_of(utc).offset
    }

    /// The UTC minute of a local wall-clock minute.
    pub fn to_utc(&self, local: Minute) -> (Minute, Placement) {
        let mut found: Option<Minute> = None;
        let mut count = 0;
        for (i, s) in self.segments.iter().enumerate() {
            let end = self.segments.get(i + 1).map_or(Minute::MAX, |n| n.start);
            let utc = local - s.offset;
            if utc >= s.start && utc < end {
                count += 1;
                found = Some(found.map_or(utc, |f: Minute| f.min(utc)));
            }
        }
        match (found, count) {
            (Some(u), 1) => (u, Placement::Exact),
            (Some(u), _) => (u, Placement::Ambiguous),
            (None, _) => {
                // In a gap: the first segment whose local start lies after `local`.
                let next = self
                    .segments
                    .iter()
                    .skip(1)
                    .find(|s| s.start + s.offset > local)
                    .map_or(local - self.segments[0].offset, |s| s.start);
                (next, Placement::Gap)
            }
        }
    }

    /// UTC minutes in `[from, to)` where the offset changes, with the new offset.
    pub fn changes_within(&self, from: Minute, to: Minute) -> impl Iterator<Item = (Minute, Minute)> + '_ {
        self.segments.iter().skip(1).filter(move |s| s.start > from && s.start < to).map(|s| (s.start, s.offset))
    }

    /// The offset in force at a UTC minute.
    pub fn offset(&self, utc: Minute) -> Minute {
        self.segment_of(utc).offset
    }
}

/// Appends the offset changes in `(a, b]` to `out`, in order. Offsets change at most
/// twice a year, so a span of under 90 days with equal ends holds none.
fn find_changes(a: Minute, b: Minute, off_a: Minute, off_b: Minute, out: &mut Vec<Segment>) {
    if b - a > 90 * DAY {
        let mid = a + (b - a) / 2;
        let off_mid = offset_at(mid);
        find_changes(a, mid, off_a, off_mid, out);
        find_changes(mid, b, off_mid, off_b, out);
        return;
    }
    if off_a == off_b {
        return;
    }
    // One change in (a, b]: bisect to the minute it takes effect.
    let (mut lo, mut hi) = (a, b);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if offset_at(mid) == off_a { lo = mid } else { hi = mid }
    }
    out.push(Segment { start: hi, offset: off_b });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(y: i32, m: u32, day: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, day).unwrap()
    }

    fn local(date: NaiveDate, h: i64, m: i64) -> Minute {
        local_midnight(date) + h * 60 + m
    }

    #[test]
    fn day_numbers_match_chrono() {
        for date in [d(1970, 1, 1), d(1969, 12, 31), d(2026, 3, 29), d(2100, 2, 28), d(1, 1, 1)] {
            let m = local_midnight(date);
            assert_eq!(m, (date - d(1970, 1, 1)).num_days() * DAY);
            assert_eq!(split_local(m + 61), (date, 61));
        }
    }

    #[test]
    fn spring_forward_2026() {
        let c = LocalClock::new(d(2026, 3, 1), d(2026, 3, 31));
        let day = d(2026, 3, 29);
        let (t1, p1) = c.to_utc(local(day, 1, 59));
        let (t3, p3) = c.to_utc(local(day, 3, 0));
        assert_eq!((p1, p3), (Placement::Exact, Placement::Exact));
        assert_eq!(t3 - t1, 1, "01:59 CET to 03:00 CEST is one real minute");
        let (gap, p) = c.to_utc(local(day, 2, 30));
        assert_eq!((gap, p), (t3, Placement::Gap));
        assert_eq!(c.to_local(t3), local(day, 3, 0));
    }

    #[test]
    fn fall_back_2026() {
        let c = LocalClock::new(d(2026, 10, 1), d(2026, 10, 31));
        let day = d(2026, 10, 25);
        let (first, p) = c.to_utc(local(day, 2, 30));
        assert_eq!(p, Placement::Ambiguous);
        let (t3, _) = c.to_utc(local(day, 3, 0));
        assert_eq!(t3 - first, 90, "the first 02:30 (CEST) is 90 minutes before 03:00 CET");
        assert_eq!(c.changes_within(first, t3).count(), 1);
    }

    #[test]
    fn long_spans_find_every_change() {
        let c = LocalClock::new(d(2025, 1, 1), d(2026, 12, 31));
        assert_eq!(c.segments.len(), 5);
        let winter = c.to_utc(local(d(2026, 1, 15), 12, 0)).0;
        let summer = c.to_utc(local(d(2026, 7, 15), 12, 0)).0;
        assert_eq!(c.offset(winter), 60);
        assert_eq!(c.offset(summer), 120);
    }
}
