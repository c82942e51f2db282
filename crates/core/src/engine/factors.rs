//! Totals to wage factor rows (VariabeleMutatie): the code table, rounding, the ORT
//! amount and the extra-hours/overtime rule for monthly and 4-week periods.

use rust_decimal::{Decimal, RoundingStrategy};

use super::codes;
use super::explain::Explanation;
use super::ort::Sums;
use super::tables::{Cao, Tables};
use super::{EngineError, Reden, Totals, hours_from_minutes};
use crate::contract::{Antwoord, VariabeleMutatie, Vraag, Waarschuwing};

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
    // Overtime is work (art. 8.1 "arbeid ... boven"): sick and leave hours fill the roster's
    // hours first and are never above them, so it is at most the worked hours. It is the
    // worked minutes placed above the roster's hours (ort::work_cutoff, the limit to the
    // minute): one count for 310 and for what overtime pay places in its windows.
    let to_hours = |u: Decimal| money(u / Decimal::from(720));
    let overtime = overtime_pay(v, cao, totals, &mut warnings)?;
    if let Some(max) = cao.max_hours_week
        && dv.parttime_uren > max
    {
        warnings.push(Waarschuwing {
            code: "contract-boven-maximum".into(),
            datum: Some(v.periode.begin),
            tekst: format!(
                "the contract holds {} hours a week, more than the {max} CAO {} allows: the norms use the contract as given",
                dv.parttime_uren, cao.code
            ),
        });
    }

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
    rows.push((codes::OVERTIME_HOURS, hours_from_minutes(totals.overtime_minutes)));
    if let Some(ot) = &cao.overtime {
        rows.extend(ot.rates.iter().zip(&overtime.rate_hours).map(|(r, h)| (r.code.as_str(), *h)));
    }
    rows.push((codes::OVERTIME_TIME_OFF_HOURS, overtime.time_off_hours));
    rows.push((codes::OVERTIME_AMOUNT, overtime.amount));
    rows.sort_by(|a, b| a.0.cmp(b.0));
    if let Some(e) = ex {
        e.wage(wage_note, totals.ort_entitled, cao, (wn, wd), dv.parttime_uren, werkweek);
        if let Some(o) = &vacation {
            e.note(&o.note);
        }
        e.note(&overtime.note);
        if let Some(why) = &cao.unverified {
            e.note(&format!("The rate table of CAO {} is not checked against its text: {why}.", cao.code));
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

/// Whether the employee gets the CAO's overtime pay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Entitlement {
    /// The overtime minutes are placed in the table's windows (a CAO without overtime
    /// rules too: every minute then has no percentage, and a warning says so).
    Paid,
    /// Above the table's job group: no overtime pay (FNV on CAO Ziekenhuizen: FWG 60).
    JobGroupAbove(i32),
    /// The rules were read for full-timers only (`alleen_voltijd`): a part-timer's
    /// overtime gets no percentage, and a warning.
    PartTimer,
}

pub(crate) fn entitlement(v: &Vraag, cao: &Cao) -> Entitlement {
    let dv = &v.dienstverband;
    match &cao.overtime {
        Some(o) if o.max_functiegroep.is_some_and(|g| dv.functiegroep > g) => {
            Entitlement::JobGroupAbove(o.max_functiegroep.unwrap_or_default())
        }
        Some(o) if o.full_time_only && dv.parttime_uren < dv.cao.werkweek_uren => Entitlement::PartTimer,
        _ => Entitlement::Paid,
    }
}

/// What overtime pay gives for one period.
struct OvertimePay {
    /// Hours per overtime rate of the CAO (in the order of `Overtime::rates`).
    rate_hours: Vec<Decimal>,
    time_off_hours: Decimal,
    amount: Decimal,
    note: String,
}

/// Overtime pay from the overtime minutes placed in the table's windows: hours per
/// percentage, the time-off part and the allowance (hours x hourly wage x percentage,
/// rounded to cents once). Overtime minutes no percentage is paid for give a warning.
fn overtime_pay(
    v: &Vraag,
    cao: &Cao,
    totals: &Totals,
    warnings: &mut Vec<Waarschuwing>,
) -> Result<OvertimePay, EngineError> {
    let dv = &v.dienstverband;
    let zero = Decimal::new(0, 2);
    let ot = cao.overtime.as_ref();
    let mut out = OvertimePay {
        rate_hours: vec![zero; ot.map_or(0, |o| o.rates.len())],
        time_off_hours: zero,
        amount: zero,
        note: String::new(),
    };
    if totals.overtime_minutes == 0 {
        return Ok(out);
    }
    let hours = hours_from_minutes(totals.overtime_minutes);
    let ent = entitlement(v, cao);
    // The overtime minutes no percentage is paid for, and why.
    let (unpaid, why) = match ent {
        Entitlement::JobGroupAbove(g) => {
            out.note = format!(
                "Overtime: {hours} h above the roster's hours; job group {} is above {g}: no overtime pay under CAO {}.",
                dv.functiegroep, cao.code
            );
            return Ok(out);
        }
        Entitlement::PartTimer => (
            totals.overtime_minutes,
            format!(
                "the overtime rules of the rate table were read for full-timers, and this contract is {} of {} hours",
                dv.parttime_uren, dv.cao.werkweek_uren
            ),
        ),
        Entitlement::Paid => (
            totals.overtime_unpaid_minutes,
            match ot {
                Some(o) if o.windows.is_empty() => "the rate table holds no overtime percentages for this CAO",
                Some(_) => "they fall in no overtime window of the rate table",
                None => "the rate table holds no overtime rules for this CAO",
            }
            .to_owned(),
        ),
    };
    if unpaid > 0 {
        out.note = format!(
            "Overtime: {hours} h above the roster's hours; {} h of them carry no percentage: {why}.",
            hours_from_minutes(unpaid)
        );
        warnings.push(Waarschuwing {
            code: "overwerk-zonder-percentage".into(),
            datum: Some(v.periode.begin),
            tekst: format!(
                "{} overtime hours carry no overtime percentage ({why}): payroll must compensate them under CAO {}",
                hours_from_minutes(unpaid),
                cao.code
            ),
        });
    }
    let Some(ot) = ot.filter(|o| ent == Entitlement::Paid && !o.windows.is_empty()) else { return Ok(out) };
    // A capped window's stretch of weekdays that reaches back into the previous period:
    // the Vraag does not carry that period's overtime day by day, so when its stored
    // result has hours at the capped percentage, the cap may have been reached already.
    let day_before = v.periode.begin.pred_opt();
    for &rate in &totals.overtime_cap_at_start {
        let code = ot.rates[rate].code.as_str();
        let before: Decimal = v
            .historie
            .iter()
            .filter(|h| Some(h.einde) == day_before)
            .flat_map(|h| h.factoren.iter().filter(|(c, _)| c == code).map(|(_, v)| *v))
            .sum();
        if before > Decimal::ZERO {
            warnings.push(Waarschuwing {
                code: "overwerk-maximum-vorige-periode".into(),
                datum: Some(v.periode.begin),
                tekst: format!(
                    "overtime at {}% (factor {code}) early in the period: the previous period has {before} such hours, \
                     which may have used the most of that percentage for the same stretch of weekdays",
                    ot.rates[rate].pct
                ),
            });
        }
    }
    out.rate_hours = totals.overtime_rate_minutes.iter().map(|m| hours_from_minutes(*m)).collect();
    if ot.time_off {
        out.time_off_hours = hours_from_minutes(totals.overtime_minutes);
    }
    if totals.overtime_pct_minutes > 0 {
        let salary = dv.salaris.as_ref().map(|s| s.nominaal_salaris).ok_or_else(|| {
            EngineError::new(
                Reden::SalaryMissing,
                "Dienstverband/Salaris",
                "an overtime allowance is due but the Vraag holds no salary",
            )
        })?;
        // Σ minutes x pct x salary x 12 / (6000 x werkweek x 52): exact, then cents.
        let annual_hours = dv.cao.werkweek_uren * Decimal::from(52);
        out.amount = money(
            Decimal::from(totals.overtime_pct_minutes) * salary * Decimal::from(12)
                / (Decimal::from(6000) * annual_hours),
        );
    }
    out.note = format!(
        "Overtime: {} h above the roster's hours, {} h of them in an overtime window; allowance = Σ hours x \
         percentage x hourly wage (no cap) = {}{}.",
        hours_from_minutes(totals.overtime_minutes),
        hours_from_minutes(totals.overtime_minutes - totals.overtime_unpaid_minutes),
        out.amount,
        if ot.time_off { "; the overtime hours themselves are compensated in time off (315)" } else { "" }
    );
    Ok(out)
}
