//! A realistic roster for the demo and the tests: employees of two CAOs, full- and
//! part-timers, day, late and night shifts on every day of the week, split shifts,
//! training and on-call duty, sick days, over April 2026 (Easter Monday and King's Day
//! fall in it); generated from a seed, loaded in one transaction.

use chrono::{Datelike, NaiveDate};
use tokio_postgres::Client;

use super::rng::Rng;
use super::stmt;

/// The period of the demo: April 2026, monthly.
pub const PERIODE_ID: i32 = 202604;
pub const PERIODE_BEGIN: &str = "2026-04-01";
pub const PERIODE_EINDE: &str = "2026-04-30";

#[derive(Debug, Clone)]
pub struct Employee {
    pub id: i32,
    pub cao_id: i32,
    pub dagen_per_week: String,
    pub parttime_uren: String,
    /// None: no salary on file (an ORT-entitled employee then gets a Fout).
    pub salaris: Option<String>,
    pub soort: &'static str,
    pub functiegroep: i32,
}

#[derive(Debug, Clone)]
pub struct Block {
    pub begin: &'static str,
    pub einde: &'static str,
    pub dienst_type: &'static str,
    pub ziek: bool,
    /// Leave taken on the block (`Wettelijk`, …), the Vraag's `Verlof`.
    pub verlof: Option<&'static str>,
}

#[derive(Debug, Clone)]
pub struct Shift {
    pub dienstverband_id: i32,
    pub datum: NaiveDate,
    pub blocks: Vec<Block>,
}

#[derive(Debug, Clone)]
pub struct Roster {
    pub employees: Vec<Employee>,
    pub shifts: Vec<Shift>,
}

/// The first employee id (ids are consecutive).
pub const FIRST_ID: i32 = 1001;

impl Roster {
    /// `n` employees; with `with_fault`, one ORT-entitled employee has no salary on
    /// file and late shifts, so the calculation answers their key with a Fout.
    pub fn generate(n: usize, seed: u64, with_fault: bool) -> Self {
        let mut rng = Rng::new(seed);
        let begin = NaiveDate::from_ymd_opt(2026, 4, 1).expect("a date");
        let mut employees = Vec::with_capacity(n);
        let mut shifts = Vec::new();
        for i in 0..n {
            let id = FIRST_ID + i as i32;
            let full_time = rng.chance(0.4);
            let hours = if full_time { 36 } else { [16, 20, 24, 28, 32][rng.below(5)] };
            let days = (f64::from(hours) / 7.2 * 2.0).round() / 2.0;
            let faulty = with_fault && i == n / 2;
            let salary = 2600 + 10 * rng.below(320) as i32;
            employees.push(Employee {
                id,
                cao_id: if rng.chance(0.8) { 100 } else { 200 },
                dagen_per_week: format!("{days:.2}"),
                parttime_uren: format!("{hours}.00"),
                salaris: (!faulty).then(|| format!("{salary}.00")),
                soort: if full_time { "FT" } else { "PT" },
                functiegroep: if faulty { 45 } else { 35 + rng.below(41) as i32 },
            });
            let p_work = f64::from(hours) / 36.0 * 5.0 / 7.0;
            for day in 0..30 {
                let datum = begin + chrono::Days::new(day);
                if !faulty && !rng.chance(p_work) {
                    continue;
                }
                if faulty && datum.weekday().num_days_from_monday() > 3 {
                    continue;
                }
                let ziek = rng.chance(0.04);
                let blocks = match (faulty, rng.below(100)) {
                    (true, _) => vec![block("15:00", "23:30", "L", false)],
                    (_, 0..=44) => vec![block("07:00", "15:30", "D", ziek)],
                    (_, 45..=54) => vec![block("07:00", "11:00", "D", ziek), block("11:30", "15:30", "D", ziek)],
                    (_, 55..=77) => vec![block("15:00", "23:30", "L", ziek)],
                    (_, 78..=93) => vec![block("23:00", "07:30", "N", ziek)],
                    (_, 94..=95) => vec![block("09:00", "17:00", "OPL", false)],
                    // A day of statutory vacation on rostered hours.
                    (_, 96) => vec![Block { verlof: Some("Wettelijk"), ..block("07:00", "15:30", "VAK", false) }],
                    _ => vec![block("07:00", "15:30", "D", false), block("17:00", "23:00", "BER", false)],
                };
                shifts.push(Shift { dienstverband_id: id, datum, blocks });
            }
        }
        Self { employees, shifts }
    }

    /// Loads the roster in one transaction (a bulk import: one Vraag per employee).
    pub async fn load(&self, client: &mut Client) -> Result<(), tokio_postgres::Error> {
        let tx = client.transaction().await?;
        tx.execute(stmt::CAO.sql, &[]).await?;
        tx.execute(stmt::PERIODE.sql, &[&PERIODE_ID, &PERIODE_BEGIN, &PERIODE_EINDE]).await?;
        tx.execute(stmt::DIENST_TYPES.sql, &[]).await?;
        let e = &self.employees;
        let ids: Vec<i32> = e.iter().map(|e| e.id).collect();
        let caos: Vec<i32> = e.iter().map(|e| e.cao_id).collect();
        let days: Vec<&str> = e.iter().map(|e| e.dagen_per_week.as_str()).collect();
        let in_dienst: Vec<&str> = e.iter().map(|_| "2015-01-01").collect();
        let hours: Vec<&str> = e.iter().map(|e| e.parttime_uren.as_str()).collect();
        let salaris: Vec<Option<&str>> = e.iter().map(|e| e.salaris.as_deref()).collect();
        let zero: Vec<&str> = e.iter().map(|_| "0.00").collect();
        let soort: Vec<&str> = e.iter().map(|e| e.soort).collect();
        let groep: Vec<i32> = e.iter().map(|e| e.functiegroep).collect();
        tx.execute(
            stmt::DIENSTVERBANDEN.sql,
            &[&ids, &caos, &days, &in_dienst, &hours, &salaris, &zero, &zero, &soort, &groep],
        )
        .await?;
        let dvs: Vec<i32> = self.shifts.iter().map(|s| s.dienstverband_id).collect();
        let dates: Vec<String> = self.shifts.iter().map(|s| s.datum.to_string()).collect();
        tx.execute(stmt::DIENSTEN.sql, &[&dvs, &dates]).await?;
        let blocks: Vec<(&Shift, &Block)> =
            self.shifts.iter().flat_map(|s| s.blocks.iter().map(move |b| (s, b))).collect();
        let dvs: Vec<i32> = blocks.iter().map(|(s, _)| s.dienstverband_id).collect();
        let dates: Vec<String> = blocks.iter().map(|(s, _)| s.datum.to_string()).collect();
        let begins: Vec<&str> = blocks.iter().map(|(_, b)| b.begin).collect();
        let ends: Vec<&str> = blocks.iter().map(|(_, b)| b.einde).collect();
        let types: Vec<&str> = blocks.iter().map(|(_, b)| b.dienst_type).collect();
        let sick: Vec<bool> = blocks.iter().map(|(_, b)| b.ziek).collect();
        let leave: Vec<Option<&str>> = blocks.iter().map(|(_, b)| b.verlof).collect();
        tx.execute(stmt::TIJDBLOKKEN.sql, &[&dvs, &dates, &begins, &ends, &types, &sick, &leave]).await?;
        tx.batch_execute(stmt::ANALYZE_ROSTER.sql).await?;
        tx.commit().await
    }
}

fn block(begin: &'static str, einde: &'static str, dienst_type: &'static str, ziek: bool) -> Block {
    Block { begin, einde, dienst_type, ziek, verlof: None }
}
