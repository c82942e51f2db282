//! Public holidays: fixed days, days relative to Easter (computed, never listed per
//! year) and King's Day, as rules named in the rate tables.

use chrono::{Datelike, NaiveDate, Weekday};

/// When a holiday falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// A fixed calendar day (month, day).
    Fixed(u32, u32),
    /// Easter Sunday plus this many days.
    Easter(i64),
    /// 27 April, or 26 April when the 27th is a Sunday.
    KingsDay,
}

/// A named holiday rule; `every` years (counted from year 0, so 5 means 2025, 2030…).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolidayRule {
    pub name: String,
    pub when: When,
    pub every: u32,
}

impl HolidayRule {
    /// Parses `MM-DD`, `pasen`, `pasen+N`, `pasen-N` or `koningsdag`.
    pub fn parse(name: &str, rule: &str, every: Option<u32>) -> Result<Self, String> {
        let when = if rule == "koningsdag" {
            When::KingsDay
        } else if let Some(rest) = rule.strip_prefix("pasen") {
            let offset = match rest {
                "" => 0,
                r => r
                    .strip_prefix('+')
                    .map(str::parse::<i64>)
                    .or_else(|| r.strip_prefix('-').map(|n| n.parse::<i64>().map(|n| -n)))
                    .and_then(Result::ok)
                    .filter(|n| n.abs() <= 100)
                    .ok_or_else(|| format!("'{rule}' is not pasen, pasen+N or pasen-N"))?,
            };
            When::Easter(offset)
        } else {
            let (m, d) = rule
                .split_once('-')
                .and_then(|(m, d)| Some((m.parse::<u32>().ok()?, d.parse::<u32>().ok()?)))
                .filter(|&(m, d)| NaiveDate::from_ymd_opt(2024, m, d).is_some())
                .ok_or_else(|| format!("regel '{rule}' is not MM-DD, pasen[+N|-N] or koningsdag"))?;
            When::Fixed(m, d)
        };
        let every = every.unwrap_or(1);
        if every == 0 {
            return Err("elke must be 1 or more".into());
        }
        Ok(Self { name: name.to_owned(), when, every })
    }

    /// The date of this holiday in `year` (ignoring `every`).
    pub fn date_in(&self, year: i32) -> Option<NaiveDate> {
        match self.when {
            When::Fixed(m, d) => NaiveDate::from_ymd_opt(year, m, d),
            When::Easter(n) => easter(year).map(|e| e + chrono::Duration::days(n)),
            When::KingsDay => {
                let d = NaiveDate::from_ymd_opt(year, 4, 27)?;
                Some(if d.weekday() == Weekday::Sun { d.pred_opt()? } else { d })
            }
        }
    }

    /// Whether `date` is this holiday.
    pub fn applies(&self, date: NaiveDate) -> bool {
        if self.every > 1 && date.year().rem_euclid(self.every as i32) != 0 {
            return false;
        }
        // A rule's date may fall in the neighbouring year only for large Easter offsets.
        self.date_in(date.year()) == Some(date)
    }
}

/// Easter Sunday (Gregorian calendar), by the anonymous Gregorian algorithm.
pub fn easter(year: i32) -> Option<NaiveDate> {
    let a = year.rem_euclid(19);
    let b = year.div_euclid(100);
    let c = year.rem_euclid(100);
    let d = b / 4;
    let e = b % 4;
    let f = (b + 8) / 25;
    let g = (b - f + 1) / 3;
    let h = (19 * a + b - d - g + 15).rem_euclid(30);
    let i = c / 4;
    let k = c % 4;
    let l = (32 + 2 * e + 2 * i - h - k).rem_euclid(7);
    let m = (a + 11 * h + 22 * l) / 451;
    let month = (h + l - 7 * m + 114) / 31;
    let day = (h + l - 7 * m + 114) % 31 + 1;
    NaiveDate::from_ymd_opt(year, month as u32, day as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(y: i32, m: u32, day: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, day).unwrap()
    }

    #[test]
    fn easter_dates() {
        // Known Easter Sundays, including the extremes of its range.
        for (y, m, day) in [
            (2008, 3, 23),
            (2011, 4, 24),
            (2019, 4, 21),
            (2024, 3, 31),
            (2025, 4, 20),
            (2026, 4, 5),
            (2027, 3, 28),
            (2038, 4, 25),
            (2285, 3, 22),
        ] {
            assert_eq!(easter(y), Some(d(y, m, day)), "{y}");
        }
    }

    #[test]
    fn kings_day_moves_off_sunday() {
        let k = HolidayRule::parse("Koningsdag", "koningsdag", None).unwrap();
        assert_eq!(k.date_in(2025), Some(d(2025, 4, 26))); // 27 April 2025 is a Sunday
        assert_eq!(k.date_in(2026), Some(d(2026, 4, 27)));
    }

    #[test]
    fn every_fifth_year() {
        let b = HolidayRule::parse("Bevrijdingsdag", "05-05", Some(5)).unwrap();
        assert!(b.applies(d(2025, 5, 5)));
        assert!(!b.applies(d(2026, 5, 5)));
        let ascension = HolidayRule::parse("Hemelvaartsdag", "pasen+39", None).unwrap();
        assert!(ascension.applies(d(2026, 5, 14)));
        assert!(HolidayRule::parse("x", "pasen+x", None).is_err());
        assert!(HolidayRule::parse("x", "02-30", None).is_err());
    }
}
