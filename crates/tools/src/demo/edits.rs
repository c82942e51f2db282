//! A planner's burst of edits: shift ends moved, blocks turned sick and back, shifts
//! added and removed; a tenth of the employees are edited far more often than the rest
//! (hot keys, whose versions race each other through the pipeline).

use chrono::NaiveDate;
use tokio_postgres::Client;

use super::rng::Rng;
use super::roster::{FIRST_ID, Roster};
use super::stmt;

#[derive(Debug, Clone)]
pub enum Edit {
    ShiftEnd { dienstverband_id: i32, pick: i32, minutes: i32 },
    ToggleSick { dienstverband_id: i32, pick: i32 },
    AddShift { dienstverband_id: i32, datum: NaiveDate },
    RemoveShift { dienstverband_id: i32, pick: i32 },
}

impl Edit {
    pub fn dienstverband_id(&self) -> i32 {
        match self {
            Edit::ShiftEnd { dienstverband_id, .. }
            | Edit::ToggleSick { dienstverband_id, .. }
            | Edit::AddShift { dienstverband_id, .. }
            | Edit::RemoveShift { dienstverband_id, .. } => *dienstverband_id,
        }
    }

    /// Applies the edit in a transaction of its own, retrying a deadlock or
    /// serialization failure (as a planner's application would).
    pub async fn apply(&self, client: &Client) -> Result<(), tokio_postgres::Error> {
        let mut tries = 0;
        loop {
            let r = match self {
                Edit::ShiftEnd { dienstverband_id, pick, minutes } => {
                    client.execute(stmt::EDIT_SHIFT_END.sql, &[dienstverband_id, pick, minutes]).await
                }
                Edit::ToggleSick { dienstverband_id, pick } => {
                    client.execute(stmt::TOGGLE_SICK.sql, &[dienstverband_id, pick]).await
                }
                Edit::AddShift { dienstverband_id, datum } => {
                    let d = datum.to_string();
                    client.execute(stmt::ADD_SHIFT.sql, &[dienstverband_id, &d, &"07:00", &"15:30", &"D"]).await
                }
                Edit::RemoveShift { dienstverband_id, pick } => {
                    client.execute(stmt::REMOVE_SHIFT.sql, &[dienstverband_id, pick]).await
                }
            };
            match r {
                Ok(_) => return Ok(()),
                Err(e) if tries < 5 && e.code().is_some_and(|c| c.code() == "40P01" || c.code() == "40001") => {
                    tries += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// `count` edits over the roster's employees: half of them on a hot tenth.
pub fn burst(roster: &Roster, count: usize, seed: u64) -> Vec<Edit> {
    let mut rng = Rng::new(seed ^ 0xED17);
    let n = roster.employees.len().max(1);
    let hot = (n / 10).max(1);
    (0..count)
        .map(|i| {
            let dienstverband_id = FIRST_ID + if i % 2 == 0 { rng.below(hot) } else { rng.below(n) } as i32;
            let pick = rng.below(1000) as i32;
            match rng.below(10) {
                0..=4 => Edit::ShiftEnd { dienstverband_id, pick, minutes: if rng.chance(0.5) { 15 } else { -15 } },
                5..=6 => Edit::ToggleSick { dienstverband_id, pick },
                7..=8 => Edit::AddShift {
                    dienstverband_id,
                    datum: NaiveDate::from_ymd_opt(2026, 4, 1 + rng.below(30) as u32).expect("an April date"),
                },
                _ => Edit::RemoveShift { dienstverband_id, pick },
            }
        })
        .collect()
}
