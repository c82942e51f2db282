//! The payroll recalculation engine: a pure function from a decoded Vraag to the wage
//! factors (Antwoord rows), warnings and, on request, an explanation per minute range.
//!
//! No I/O and no async: the rules of `docs/payroll-rules.md` with the rate tables of
//! [`tables`]. Layout: [`tables`] (rates as data), [`holidays`] (Easter-based days),
//! [`codes`] (every wage factor code), [`clock`] (Europe/Amsterdam as integer minutes), `timeline` (blocks to real time,
//! overlaps), `ort` (minutes to rates), `vacation` (ORT over statutory vacation, from
//! the Vraag's history), `factors` (totals to rows), [`explain`].

pub mod clock;
pub mod codes;
pub mod explain;
mod factors;
pub mod holidays;
mod ort;
pub mod tables;
mod timeline;
mod vacation;

use rust_decimal::Decimal;
use uuid::Uuid;

use crate::contract::{Antwoord, Reden, RekenserverFout, Vraag, fout_for};
pub use explain::{Explanation, Line};
pub use tables::{TableError, Tables};

/// Why a Vraag cannot be answered with wage factors.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{message}", if path.is_empty() { String::new() } else { format!("{path}: ") })]
pub struct EngineError {
    pub reden: Reden,
    /// Path of the offending element in the Vraag, where one is to blame.
    pub path: String,
    pub message: String,
}

impl EngineError {
    fn new(reden: Reden, path: impl Into<String>, message: impl Into<String>) -> Self {
        Self { reden, path: path.into(), message: message.into() }
    }

    /// The Fout that answers the Vraag.
    pub fn to_fout(&self, vraag_id: Option<Uuid>) -> RekenserverFout {
        fout_for(self.reden, self.to_string(), None, vraag_id)
    }
}

/// Totals in whole minutes before rounding, for checks and explanations.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Totals {
    pub worked_minutes: i64,
    pub sick_minutes: i64,
    /// Leave minutes: statutory vacation, the rest of the vacation, other leave.
    pub leave_minutes: [i64; 3],
    /// Statutory vacation minutes that carry ORT (art. 12.1.2 lid 2: up to the year's
    /// maximum).
    pub vacation_ort_minutes: i64,
    /// Minutes of blocks whose duty type does not count as worked time.
    pub other_minutes: i64,
    pub days_worked: u32,
    /// Worked minutes per ORT rate, in the order of the CAO's rates.
    pub ort_minutes: Vec<i64>,
    /// Worked minutes in no ORT window.
    pub no_ort_minutes: i64,
    /// Worked minutes after the ORT limit of the period was reached (art. 9.1 lid 1-2):
    /// no ORT, whatever window they fall in.
    pub over_limit_minutes: i64,
    /// The ORT limit of the period in minutes (`None`: the CAO sets none).
    pub ort_limit_minutes: Option<i64>,
    /// The roster's hours of the period in minutes, max(contract, full time) x weeks:
    /// the worked minutes after the room it leaves past the sick and leave minutes are
    /// overtime (art. 8.1).
    pub roster_limit_minutes: i64,
    /// Worked minutes above the roster's hours (the overtime, placed in time).
    pub overtime_minutes: i64,
    /// Overtime minutes per overtime rate of the CAO (`Overtime::rates`).
    pub overtime_rate_minutes: Vec<i64>,
    /// Overtime minutes in no overtime window of the table (no percentage for them).
    pub overtime_unpaid_minutes: i64,
    /// Σ overtime minutes x percentage, for the overtime allowance.
    pub overtime_pct_minutes: i64,
    /// Overtime rates (indices) of capped windows that paid minutes in a stretch of
    /// weekdays reaching back before the period.
    pub overtime_cap_at_start: Vec<usize>,
    /// Whether the employee is entitled to ORT (job group at most the CAO's limit).
    pub ort_entitled: bool,
}

/// The outcome of one calculation.
#[derive(Debug, Clone, PartialEq)]
pub struct Calculation {
    pub antwoord: Antwoord,
    pub totals: Totals,
    /// Present when asked for.
    pub explanation: Option<Explanation>,
}

/// Computes the wage factors of one Vraag.
pub fn calculate(vraag: &Vraag, tables: &Tables, explain: bool) -> Result<Calculation, EngineError> {
    let p = &vraag.periode;
    if p.einde < p.begin {
        return Err(EngineError::new(
            Reden::PeriodInverted,
            "Periode",
            format!("the period ends ({}) before it begins ({})", p.einde, p.begin),
        ));
    }
    if (p.einde - p.begin).num_days() > 61 {
        return Err(EngineError::new(
            Reden::InvalidValue,
            "Periode",
            format!("a salary period of {} days is longer than 62 days", (p.einde - p.begin).num_days() + 1),
        ));
    }
    let code = vraag.dienstverband.cao.code.as_str();
    let cao = tables.cao(code).ok_or_else(|| {
        let known: Vec<&str> = tables.caos.iter().map(|c| c.code.as_str()).collect();
        EngineError::new(
            Reden::UnknownCao,
            "Dienstverband/Cao/Code",
            format!("no rate table for CAO code '{code}' (known: {})", known.join(", ")),
        )
    })?;
    let mut ex = explain.then(|| Explanation::new(vraag, cao));
    let line = timeline::build(vraag, ex.as_mut())?;
    let mut totals = Totals {
        ort_minutes: vec![0; cao.rates.len()],
        overtime_rate_minutes: vec![0; cao.overtime.as_ref().map_or(0, |o| o.rates.len())],
        days_worked: line.days_worked,
        roster_limit_minutes: ort_limit_minutes(vraag),
        ..Totals::default()
    };
    totals.ort_limit_minutes = cao.ort_tot_voltijd.then_some(totals.roster_limit_minutes);
    let sums = ort::split(
        &line,
        cao,
        vraag.periode.begin,
        factors::entitlement(vraag, cao) == factors::Entitlement::Paid,
        &mut totals,
        ex.as_mut(),
    )?;
    let antwoord = factors::answer(vraag, tables, cao, &mut totals, &sums, line.warnings, ex.as_mut())?;
    if let Some(e) = ex.as_mut() {
        e.finish(&antwoord, &totals, cao);
    }
    Ok(Calculation { antwoord, totals, explanation: ex })
}

/// What computes with these tables: the engine's version and the tables' fingerprint
/// (the Antwoord's `Rekenversie`).
pub fn rekenversie(tables: &Tables) -> String {
    format!("sbworker {} tabellen {}", env!("CARGO_PKG_VERSION"), tables.fingerprint)
}

/// Weeks in the period for the norms: 4 (5 when it holds ISO week 53) for a 4-week
/// period, 52/12 for a month. Returned as (numerator, denominator).
pub(crate) fn period_weeks(v: &Vraag) -> (i64, i64) {
    use chrono::{Datelike, Days};
    let p = &v.periode;
    if v.dienstverband.cao.is_vier_weken {
        let mut d = p.begin;
        while d <= p.einde {
            if d.iso_week().week() == 53 {
                return (5, 1);
            }
            d = d + Days::new(1);
        }
        (4, 1)
    } else {
        (52, 12)
    }
}

/// The ORT limit of the period, in minutes: CAO Ziekenhuizen art. 9.1 lid 1 pays ORT on
/// hours "voor zover zij de 36 uur niet te boven gaan", lid 2 puts the contract hours in
/// place of 36 for other contracts, and art. 8.5 lid 2 adds ORT on a part-timer's extra
/// hours up to full time. So: max(contract hours, full-time hours) a week, times the
/// period's weeks (measured over the period, as the roster pattern is, rather than per
/// calendar week: docs/payroll-rules.md), to the nearest minute.
pub(crate) fn ort_limit_minutes(v: &Vraag) -> i64 {
    let dv = &v.dienstverband;
    let (wn, wd) = period_weeks(v);
    let hours = dv.parttime_uren.max(dv.cao.werkweek_uren).max(Decimal::ZERO);
    let minutes = hours * Decimal::from(60 * wn) / Decimal::from(wd);
    use rust_decimal::prelude::ToPrimitive;
    minutes.round_dp_with_strategy(0, rust_decimal::RoundingStrategy::MidpointAwayFromZero).to_i64().unwrap_or(i64::MAX)
}

/// Money and hours helpers shared by the engine's parts.
pub(crate) fn hours_from_minutes(minutes: i64) -> Decimal {
    // Hundredths of an hour, half away from zero (minutes are never negative).
    Decimal::new((minutes * 100 + 30).div_euclid(60), 2)
}
