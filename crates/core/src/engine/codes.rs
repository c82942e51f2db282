//! Every wage factor code the engine writes, in one place: the codes it writes itself
//! whatever the rate table ([`FIXED`]), and the rule for the codes a table assigns (its
//! ORT rates and overtime percentages). The table validator checks against this list, and
//! a test fails when an Antwoord carries a code that is neither fixed nor the table's.
//! The codes are ours: no public standard exists.

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
/// Overtime hours compensated in time off, where the CAO gives time off for them.
pub const OVERTIME_TIME_OFF_HOURS: &str = "315";
/// The overtime allowance (euro): overtime hours per percentage x hourly wage x percentage.
pub const OVERTIME_AMOUNT: &str = "330";

/// The codes the engine writes for every CAO, with what each holds. A rate table may not
/// give any of them to an ORT rate or an overtime percentage.
pub const FIXED: &[(&str, &str)] = &[
    (WORKED_HOURS, "worked hours"),
    (DAYS_WORKED, "days worked"),
    (TRAVEL_DAYS, "travel days"),
    (SICK_HOURS, "sick hours"),
    (VACATION_HOURS, "statutory vacation hours taken"),
    (EXTRA_VACATION_HOURS, "vacation hours above the statutory ones"),
    (LEAVE_HOURS, "other paid leave hours"),
    (VACATION_ORT_HOURS, "statutory vacation hours that carry ORT"),
    (ORT_AMOUNT, "ORT amount (euro)"),
    (VACATION_ORT_AMOUNT, "ORT over statutory vacation (euro)"),
    (EXTRA_HOURS, "extra hours (part-timer, up to full time)"),
    (OVERTIME_HOURS, "overtime hours (above the roster's hours)"),
    (OVERTIME_TIME_OFF_HOURS, "overtime hours compensated in time off"),
    (OVERTIME_AMOUNT, "overtime allowance (euro)"),
];

/// Whether `code` is one the engine writes for every CAO.
pub fn is_fixed(code: &str) -> bool {
    FIXED.iter().any(|(c, _)| *c == code)
}

/// Whether `code` has the shape of a wage factor code a table may assign: three digits.
/// (That it is not [fixed](is_fixed) and not used twice in a CAO is checked apart.)
pub fn is_code_shaped(code: &str) -> bool {
    code.len() == 3 && code.bytes().all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_codes_are_distinct_and_code_shaped() {
        for (i, (c, _)) in FIXED.iter().enumerate() {
            assert!(is_code_shaped(c), "{c}");
            assert!(FIXED[..i].iter().all(|(o, _)| o != c), "{c} twice");
        }
    }
}
