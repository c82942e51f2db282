//! ORT during statutory vacation (CAO Ziekenhuizen art. 9.1 lid 4, art. 12.1.2 lid 2):
//! over the statutory vacation hours taken, the hourly wage is raised by the average ORT
//! percentage of the past months the CAO names, on at most its yearly number of hours
//! (for a full-timer; pro rata otherwise). The average comes from the stored results of
//! earlier periods the Vraag carries (`Historie`), never from a guess.

use chrono::{Datelike, Months};
use rust_decimal::Decimal;

use super::Totals;
use super::codes;
use super::tables::{AverageOver, Cao, MaximumCounts, PartialPeriod};
use crate::contract::{Vraag, Waarschuwing};

/// What the rule gives for one period.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Outcome {
    /// Statutory vacation minutes that carry ORT.
    pub minutes: i64,
    /// The average ORT percentage of the past months (e.g. 12.5 for 12.5%).
    pub avg_pct: Decimal,
    pub warnings: Vec<Waarschuwing>,
    /// For `calc --explain`.
    pub note: String,
}

/// The value of a stored factor in a history period (0 when absent).
fn factor(f: &[(compact_str::CompactString, Decimal)], code: &str) -> Decimal {
    f.iter().filter(|(c, _)| c == code).map(|(_, v)| *v).sum()
}

/// The rule for this Vraag, when the CAO has it and statutory vacation was taken.
pub fn compute(v: &Vraag, cao: &Cao, totals: &Totals) -> Option<Outcome> {
    let rule = cao.vacation_ort.as_ref()?;
    if totals.leave_minutes[0] == 0 {
        return None;
    }
    // Every statutory vacation hour taken may carry it, up to the year's maximum: vacation
    // is taken on rostered hours and is never "above the ORT limit" (art. 12.1.2 lid 2
    // ties the raise to no limit but the maximum).
    let statutory = totals.leave_minutes[0];
    let p = &v.periode;
    let mut out = Outcome::default();
    if !totals.ort_entitled {
        out.note = format!("No ORT over vacation: job group above {} (art. 12.1.2 lid 1).", cao.ort_max_functiegroep);
        return Some(out);
    }
    // The past months: the stored periods that end before this one, each weighted by the
    // share of its days in the window [window_start, period begin) as the table says.
    let window_start = p.begin.checked_sub_months(Months::new(rule.months)).unwrap_or(p.begin);
    let past: Vec<_> = v
        .historie
        .iter()
        .filter(|h| h.einde < p.begin && h.einde >= window_start && h.einde >= h.begin)
        .filter_map(|h| {
            let days = (h.einde - h.begin).num_days() + 1;
            let inside = (h.einde - h.begin.max(window_start)).num_days() + 1;
            let weight = match rule.partial_period {
                _ if inside == days => Decimal::ONE,
                PartialPeriod::ProRata => Decimal::from(inside) / Decimal::from(days),
                PartialPeriod::Whole => Decimal::ONE,
                PartialPeriod::Excluded => return None,
            };
            Some((h, weight, inside))
        })
        .collect();
    let denominator_codes: &[&str] = match rule.denominator {
        AverageOver::Worked => &[codes::WORKED_HOURS],
        AverageOver::Paid => &[
            codes::WORKED_HOURS,
            codes::SICK_HOURS,
            codes::VACATION_HOURS,
            codes::EXTRA_VACATION_HOURS,
            codes::LEAVE_HOURS,
        ],
    };
    let worked: Decimal = past
        .iter()
        .map(|(h, w, _)| denominator_codes.iter().map(|c| factor(&h.factoren, c)).sum::<Decimal>() * w)
        .sum();
    let weighted: Decimal = past
        .iter()
        .map(|(h, w, _)| {
            cao.rates.iter().map(|r| factor(&h.factoren, &r.code) * Decimal::from(r.pct)).sum::<Decimal>() * w
        })
        .sum();
    out.avg_pct = if worked > Decimal::ZERO { weighted / worked } else { Decimal::ZERO };
    let covered: i64 = past.iter().map(|(_, w, inside)| if w.is_zero() { 0 } else { *inside }).sum();
    let window_days = (p.begin - window_start).num_days();
    let warn = |code: &str, tekst: String| Waarschuwing { code: code.into(), datum: Some(p.begin), tekst };
    if past.is_empty() {
        out.warnings.push(warn(
            "ort-vakantie-geen-historie",
            format!(
                "no stored result of the past {} months: the average ORT percentage over vacation is 0",
                rule.months
            ),
        ));
    } else if covered * 10 < window_days * 9 {
        out.warnings.push(warn(
            "ort-vakantie-korte-historie",
            format!(
                "stored results cover {covered} of the past {window_days} days: the average ORT percentage is taken over them"
            ),
        ));
    }
    // The year's maximum, pro rata the contract (art. 12.1.2 lid 2: "met een maximum van
    // 144 uur op basis van een voltijd dienstverband"), less what earlier periods of the
    // calendar year used of it: every statutory hour they took, or only those that
    // carried ORT, as the table says.
    let dv = &v.dienstverband;
    let max_hours = rule.max_hours_full_time * dv.parttime_uren / dv.cao.werkweek_uren.max(Decimal::ONE);
    // The year of a period: a 4-week period's is the ISO year of its first week (period
    // 1 of 2026 begins on 29 December 2025), a month's its calendar year.
    let year = |d: chrono::NaiveDate| if dv.cao.is_vier_weken { d.iso_week().year() } else { d.year() };
    let already: Decimal = v
        .historie
        .iter()
        .filter(|h| year(h.begin) == year(p.begin) && h.begin < p.begin)
        .map(|h| match rule.maximum_counts {
            MaximumCounts::Taken => factor(&h.factoren, codes::VACATION_HOURS),
            MaximumCounts::WithOrt => factor(&h.factoren, codes::VACATION_ORT_HOURS),
        })
        .sum();
    let left_minutes = ((max_hours - already) * Decimal::from(60)).max(Decimal::ZERO).floor();
    let left_minutes: i64 = left_minutes.try_into().unwrap_or(i64::MAX);
    // At an average of 0% no raise is given (133 = 0); whether those hours used the
    // maximum up is the table's `maximum_telt`, read from the history above.
    out.minutes = if out.avg_pct > Decimal::ZERO { statutory.min(left_minutes) } else { 0 };
    out.note = format!(
        "ORT over statutory vacation (art. 9.1 lid 4, art. 12.1.2 lid 2): average ORT {}% over {} stored \
         period(s) of the past {} months ({} ORT-weighted hours / {} {} hours); {} of {} vacation \
         minutes within the year's maximum of {} h ({} h {} before this period).",
        out.avg_pct.round_dp(4),
        past.len(),
        rule.months,
        (weighted / Decimal::from(100)).round_dp(2),
        worked.round_dp(2),
        match rule.denominator {
            AverageOver::Worked => "worked",
            AverageOver::Paid => "paid",
        },
        out.minutes,
        totals.leave_minutes[0],
        max_hours.round_dp(2),
        already.round_dp(2),
        match rule.maximum_counts {
            MaximumCounts::Taken => "taken",
            MaximumCounts::WithOrt => "with ORT",
        }
    );
    Some(out)
}
