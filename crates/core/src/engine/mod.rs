//! The payroll recalculation engine: a pure function from a decoded Vraag to the wage
//! factors (Antwoord rows), warnings and, on request, an explanation per minute range.
//!
//! No I/O and no async: the rules of `docs/payroll-rules.md` with the rate tables of
//! [`tables`]. Layout: [`tables`] (rates as data), [`holidays`] (Easter-based days),
//! [`clock`] (Europe/Amsterdam as integer minutes), `timeline` (blocks to real time,
//! overlaps), `ort` (minutes to rates), `factors` (totals to rows), [`explain`].

pub mod clock;
pub mod explain;
mod factors;
pub mod holidays;
mod ort;
pub mod tables;
mod timeline;

use rust_decimal::Decimal;
use uuid::Uuid;

use crate::contract::{Antwoord, Reden, RekenserverFout, Vraag, fout_for};
pub use explain::{Explanation, Line};
pub use factors::codes;
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
    /// Minutes of blocks whose duty type does not count as worked time.
    pub other_minutes: i64,
    pub days_worked: u32,
    /// Worked minutes per ORT rate, in the order of the CAO's rates.
    pub ort_minutes: Vec<i64>,
    /// Worked minutes in no ORT window.
    pub no_ort_minutes: i64,
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
    let mut totals =
        Totals { ort_minutes: vec![0; cao.rates.len()], days_worked: line.days_worked, ..Totals::default() };
    let sums = ort::split(&line, cao, &mut totals, ex.as_mut())?;
    let antwoord = factors::answer(vraag, tables, cao, &mut totals, &sums, line.warnings, ex.as_mut())?;
    if let Some(e) = ex.as_mut() {
        e.finish(&antwoord, &totals, cao);
    }
    Ok(Calculation { antwoord, totals, explanation: ex })
}

/// Money and hours helpers shared by the engine's parts.
pub(crate) fn hours_from_minutes(minutes: i64) -> Decimal {
    // Hundredths of an hour, half away from zero (minutes are never negative).
    Decimal::new((minutes * 100 + 30).div_euclid(60), 2)
}
