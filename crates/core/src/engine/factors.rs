//! Totals to wage factor rows (VariabeleMutatie): the code table, rounding, the ORT
//! amount and the extra-hours/overtime rule for monthly and 4-week periods.

use rust_decimal::{Decimal, RoundingStrategy};

use super::explain::Explanation;
use super::ort::Sums;
use super::tables::{Cao, Tables};
use super::{EngineError, Reden, Totals, hours_from_minutes};
use crate::contract::{Antwoord, VariabeleMutatie, Vraag, Waarschuwing};

/// The wage factor codes (ours: no public standard exists).
pub mod codes {
    pub const WORKED_HOURS: &str = "100";
    pub const DAYS_WORKED: &str = "101";
    pub const TRAVEL_DAYS: &str = "110";
    pub const SICK_HOURS: &str = "120";
    /// Statutory vacation hours taken (`Verlof="Wettelijk"`).
    pub const VACATION_HOURS: &str = "130";
    /// Vacation hours above the statutory ones (`Verlof="Bovenwettelijk"`).
    pub const EXTRA_VACATION_HOURS: &str = "131";
    /// Other paid leave hours (`Verlof="Overig"`).
    pub const LEAVE_HOURS: &str = "132";
    /// Statutory vacation hours that carry ORT (within the year's maximum).
    pub const VACATION_ORT_HOURS: &str = "133";
    pub const ORT_AMOUNT: &str = "230";
    /// ORT over statutory vacation (euro).
    pub const VACATION_ORT_AMOUNT: &str = "240";
    pub const EXTRA_HOURS: &str = "300";
    pub const OVERTIME_HOURS: &str = "310";
}

fn money(d: Decimal) -> Decimal {
    let mut r = d.round_dp_with_strategy(2, RoundingStrategy::MidpointAwayFromZero);
    r.rescale(2);
    r
}

pub fn answer(
    v: &Vraag,
    tables: &Tables,
    cao: &Cao,
    totals: &mut Totals,
    sums: &Sums,
    mut warnings: Vec<Waarschuwing>,
    ex: Option<&mut Explanation>,
) -> Result<Antwoord, EngineError> {
    let dv = &v.dienstverband;
    let werkweek = dv.cao.werkweek_uren;
    if werkweek <= Decimal::ZERO {
        return Err(EngineError::new(
            Reden::InvalidValue,
            "Dienstverband/Cao/WerkweekUren",
            "must be more than 0 hours",
        ));
    }
    totals.ort_entitled = dv.functiegroep <= cao.ort_max_functiegroep;
    let vacation = super::vacation::compute(v, cao, totals);
    if let Some(o) = &vacation {
        totals.vacation_ort_minutes = o.minutes;
        warnings.extend(o.warnings.iter().cloned());
    }
    let vacation_due = vacation.as_ref().is_some_and(|o| o.minutes > 0 && o.avg_pct > Decimal::ZERO);
    let ort_due = totals.ort_entitled && (sums.total() > 0 || vacation_due);
    // ORT amount: Σ over caps of (Σ minutes × pct) × min(hourly wage, cap) / 6000, where
    // hourly wage = salary × 12 / (werkweek × 52); rounded to cents once, at the end.
    let mut amount = Decimal::ZERO;
    let mut wage_note = None;
    if ort_due {
        let salary = dv.salaris.as_ref().map(|s| s.nominaal_salaris).ok_or_else(|| {
            EngineError::new(Reden::SalaryMissing, "Dienstverband/Salaris", "ORT is due but the Vraag holds no salary")
        })?;
        let annual_hours = werkweek * Decimal::from(52);
        let annual_salary = salary * Decimal::from(12);
        for (cap, s) in &sums.per_cap {
            let s = Decimal::from(*s);
            let capped = cap.map(|i| cao.caps[i].1).filter(|c| annual_salary > *c * annual_hours);
            amount += match capped {
                Some(c) => s * c / Decimal::from(6000),
                None => s * annual_salary / (Decimal::from(6000) * annual_hours),
            };
            wage_note = Some((annual_salary / annual_hours, capped));
        }
    }
    let amount = money(amount);
    // ORT over statutory vacation: hours x hourly wage (under the ORT cap in force on the
    // period's first day) x the average percentage.
    let mut vacation_amount = Decimal::ZERO;
    if let (true, Some(o)) = (vacation_due, &vacation)
        && let Some(salary) = dv.salaris.as_ref().map(|s| s.nominaal_salaris)
    {
        let wage = salary * Decimal::from(12) / (werkweek * Decimal::from(52));
        let wage = match cao.cap_on(v.periode.begin) {
            Some((_, cap)) if wage > cap => cap,
            _ => wage,
        };
        vacation_amount = Decimal::from(o.minutes) * wage * o.avg_pct / Decimal::from(6000);
    }
    let vacation_amount = money(vacation_amount);
    // Extra hours and overtime, in 1/720 hour units to stay exact (720 = 60 × 12).
    let (wn, wd) = super::period_weeks(v);
    if dv.cao.is_vier_weken {
        let days = (v.periode.einde - v.periode.begin).num_days() + 1;
        if days != wn * 7 {
            warnings.push(Waarschuwing {
                code: "periode-lengte".into(),
                datum: Some(v.periode.begin),
                tekst: format!("a 4-week period of {days} days (expected {}): the norm uses {wn} weeks", wn * 7),
            });
        }
    }
    let unit = |hours: Decimal| hours * Decimal::from(720 * wn) / Decimal::from(wd);
    // Worked, sick and leave hours: leave is taken on rostered hours.
    let total =
        Decimal::from((totals.worked_minutes + totals.sick_minutes + totals.leave_minutes.iter().sum::<i64>()) * 12);
    let norm = unit(dv.parttime_uren);
    // Overtime is work above the roster's hours (art. 8.1): above full time, or above a
    // contract of more than full time (art. 6.1 lid 2 allows up to 40 hours a week).
    let full = unit(werkweek.max(dv.parttime_uren));
    let extra = (total - norm).min(full - norm).max(Decimal::ZERO);
    let over = (total - full).max(Decimal::ZERO);
    let to_hours = |u: Decimal| money(u / Decimal::from(720));

    let ort_hours: Vec<Decimal> = totals
        .ort_minutes
        .iter()
        .map(|m| if totals.ort_entitled { hours_from_minutes(*m) } else { Decimal::new(0, 2) })
        .collect();
    let mut rows: Vec<(&str, Decimal)> = vec![
        (codes::WORKED_HOURS, hours_from_minutes(totals.worked_minutes)),
        (codes::DAYS_WORKED, Decimal::from(totals.days_worked)),
        (codes::TRAVEL_DAYS, Decimal::from(totals.days_worked)),
        (codes::SICK_HOURS, hours_from_minutes(totals.sick_minutes)),
        (codes::VACATION_HOURS, hours_from_minutes(totals.leave_minutes[0])),
        (codes::EXTRA_VACATION_HOURS, hours_from_minutes(totals.leave_minutes[1])),
        (codes::LEAVE_HOURS, hours_from_minutes(totals.leave_minutes[2])),
        (codes::VACATION_ORT_HOURS, hours_from_minutes(totals.vacation_ort_minutes)),
    ];
    rows.extend(cao.rates.iter().zip(&ort_hours).map(|(r, h)| (r.code.as_str(), *h)));
    rows.push((codes::ORT_AMOUNT, amount));
    rows.push((codes::VACATION_ORT_AMOUNT, vacation_amount));
    rows.push((codes::EXTRA_HOURS, to_hours(extra)));
    rows.push((codes::OVERTIME_HOURS, to_hours(over)));
    rows.sort_by(|a, b| a.0.cmp(b.0));
    if let Some(e) = ex {
        e.wage(wage_note, totals.ort_entitled, cao, (wn, wd), dv.parttime_uren, werkweek);
        if let Some(o) = &vacation {
            e.note(&o.note);
        }
    }
    Ok(Antwoord {
        id: v.id,
        timestamp: v.timestamp.clone(),
        versie: v.versie,
        dienstverband_id: dv.id,
        periode_id: v.periode.id,
        mutaties: rows
            .into_iter()
            .map(|(code, waarde)| VariabeleMutatie {
                dienstverband_id: dv.id,
                kaart_soort: tables.kaart_soort,
                loonfactor_code: code.to_owned(),
                periode_id: v.periode.id,
                waarde,
                kosten_plaats_id: None,
                kosten_soort_id: None,
            })
            .collect(),
        waarschuwingen: warnings,
        rekenversie: Some(super::rekenversie(tables)),
    })
}
