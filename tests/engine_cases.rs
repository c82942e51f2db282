//! The engine against the worked examples and each edge case of
//! `docs/payroll-rules.md`, with figures worked out by hand.

use std::collections::BTreeMap;

use sbworker::contract::{self, Limits, Reden};
use sbworker::engine::{self, Calculation, Tables};

use crate::common::build::*;
use crate::common::root;

fn tables() -> Tables {
    Tables::built_in().unwrap()
}

fn calc(v: &sbworker::contract::Vraag) -> Calculation {
    engine::calculate(v, &tables(), true).unwrap_or_else(|e| panic!("{e}"))
}

/// The answer's factors as code → text, e.g. "212" → "6.00".
fn rows(c: &Calculation) -> BTreeMap<String, String> {
    c.antwoord.mutaties.iter().map(|m| (m.loonfactor_code.clone(), m.waarde.to_string())).collect()
}

/// Checks the named factors; every other hours factor must be zero.
fn expect(c: &Calculation, want: &[(&str, &str)]) {
    let got = rows(c);
    for (code, value) in want {
        assert_eq!(
            got.get(*code).map(String::as_str),
            Some(*value),
            "factor {code}\n{}",
            c.explanation.as_ref().unwrap()
        );
    }
    for (code, value) in &got {
        if !want.iter().any(|(c, _)| c == code) && !["101", "110"].contains(&code.as_str()) {
            assert!(value == "0.00", "factor {code} = {value}, expected 0.00\n{}", c.explanation.as_ref().unwrap());
        }
    }
}

fn warnings(c: &Calculation) -> Vec<&str> {
    c.antwoord.waarschuwingen.iter().map(|w| w.code.as_str()).collect()
}

fn example(name: &str) -> sbworker::contract::Vraag {
    let bytes = std::fs::read(root().join("schemas/examples/valid").join(name)).unwrap();
    contract::decode_vraag(&bytes, &Limits::default()).unwrap()
}

#[test]
fn worked_example_1_late_shift_on_a_wednesday() {
    let c = calc(&example("vraag-voorbeeld1.xml"));
    expect(&c, &[("100", "8.50"), ("210", "2.00"), ("212", "1.50"), ("230", "28.63")]);
    assert_eq!(rows(&c)["101"], "1");
}

#[test]
fn worked_example_2_part_timer_in_a_four_week_period() {
    let c = calc(&example("vraag-voorbeeld2.xml"));
    expect(
        &c,
        &[
            ("100", "112.50"),
            ("120", "8.00"),
            ("210", "1.00"),
            ("212", "6.00"),
            ("214", "1.25"),
            ("230", "94.75"),
            ("300", "24.50"),
        ],
    );
    assert_eq!((rows(&c)["101"].as_str(), rows(&c)["110"].as_str()), ("14", "14"));
    assert_eq!(c.totals.no_ort_minutes, 104 * 60 + 15, "13 day shifts and the last quarter hour of the night");
    assert!(c.antwoord.waarschuwingen.is_empty());
}

#[test]
fn the_answer_echoes_the_vraag_and_validates() {
    let v = example("vraag-voorbeeld2.xml");
    let c = calc(&v);
    assert_eq!((c.antwoord.id, &c.antwoord.timestamp, c.antwoord.versie), (v.id, &v.timestamp, v.versie));
    let xml = contract::encode_antwoord(&c.antwoord);
    crate::common::xmllint(&crate::common::xsd("LoonfactorBerekeningAntwoord"), xml.as_bytes()).unwrap();
}

#[test]
fn across_midnight() {
    let c = calc(&maart(vec![dienst("2026-03-10", vec![w("22:00", "02:00")])]));
    expect(&c, &[("100", "4.00"), ("212", "4.00"), ("230", "47.00")]);
    assert_eq!(rows(&c)["101"], "1");
}

#[test]
fn into_a_holiday() {
    // Wednesday night into Ascension Day (Thursday 14 May 2026).
    let v = vraag("2026-05-01", "2026-05-31", false, vec![dienst("2026-05-13", vec![w("22:00", "07:00")])]);
    let c = calc(&v);
    expect(&c, &[("100", "9.00"), ("212", "2.00"), ("214", "7.00"), ("230", "128.50")]);
    assert!(c.explanation.unwrap().to_string().contains("public holiday: Hemelvaartsdag"));
}

#[test]
fn kings_day_2025_is_a_saturday_holiday() {
    // 27 April 2025 is a Sunday, so King's Day is Saturday the 26th: 60%, not 38%.
    let v = vraag("2025-04-01", "2025-04-30", false, vec![dienst("2025-04-26", vec![w("08:00", "12:00")])]);
    expect(&calc(&v), &[("100", "4.00"), ("214", "4.00"), ("230", "60.00")]);
}

#[test]
fn across_the_period_end_the_dienst_stays_in_its_period() {
    let v =
        maart(vec![dienst("2026-03-31", vec![w("22:00", "06:00")]), dienst("2026-04-01", vec![w("07:00", "15:00")])]);
    let c = calc(&v);
    expect(&c, &[("100", "8.00"), ("212", "8.00"), ("230", "94.00")]);
    assert_eq!(warnings(&c), ["dienst-buiten-periode"]);
    assert_eq!(c.antwoord.waarschuwingen[0].datum, Some(d("2026-04-01")));
}

#[test]
fn a_block_partly_over_two_windows() {
    let c = calc(&maart(vec![dienst("2026-03-09", vec![w("05:00", "08:00")])]));
    expect(&c, &[("100", "3.00"), ("210", "1.00"), ("212", "1.00"), ("230", "17.25")]);
    assert_eq!(c.totals.no_ort_minutes, 60);
}

#[test]
fn spring_forward_night_is_an_hour_shorter() {
    // Saturday 28 March 2026 22:00 to Sunday 07:00: 9 hours on the clock, 8 real.
    let c = calc(&maart(vec![dienst("2026-03-28", vec![w("22:00", "07:00")])]));
    expect(&c, &[("100", "8.00"), ("213", "2.00"), ("214", "6.00"), ("230", "116.00")]);
    assert!(c.explanation.unwrap().to_string().contains("summer time begins"));
}

#[test]
fn fall_back_night_is_an_hour_longer() {
    // Saturday 24 October 2026 22:00 to Sunday 07:00: 9 hours on the clock, 10 real.
    let v = vraag("2026-10-01", "2026-10-31", false, vec![dienst("2026-10-24", vec![w("22:00", "07:00")])]);
    let c = calc(&v);
    expect(&c, &[("100", "10.00"), ("213", "2.00"), ("214", "8.00"), ("230", "146.00")]);
    assert!(c.explanation.unwrap().to_string().contains("summer time ends"));
}

#[test]
fn local_times_in_the_clock_gap_or_overlap_are_placed_and_reported() {
    // 02:30 does not exist on 29 March 2026: the block starts at 03:00.
    let c = calc(&maart(vec![dienst("2026-03-29", vec![w("02:30", "06:00")])]));
    expect(&c, &[("100", "3.00"), ("214", "3.00"), ("230", "45.00")]);
    assert_eq!(warnings(&c), ["tijd-bestaat-niet"]);
    // 02:30 occurs twice on 25 October 2026: the first occurrence, so 02:30-03:00 is 90 minutes.
    let v = vraag("2026-10-01", "2026-10-31", false, vec![dienst("2026-10-25", vec![w("02:30", "03:00")])]);
    let c = calc(&v);
    expect(&c, &[("100", "1.50"), ("214", "1.50"), ("230", "22.50")]);
    assert_eq!(warnings(&c), ["tijd-dubbelzinnig"]);
}

#[test]
fn overlapping_blocks_count_once_and_are_reported() {
    let c = calc(&maart(vec![dienst("2026-03-11", vec![w("08:00", "12:00"), w("11:00", "13:00")])]));
    expect(&c, &[("100", "5.00")]);
    assert_eq!(warnings(&c), ["blokken-overlappen"]);
    // Worked time wins over sick time where they overlap.
    let c = calc(&maart(vec![dienst("2026-03-11", vec![w("08:00", "12:00"), z("10:00", "14:00")])]));
    expect(&c, &[("100", "4.00"), ("120", "2.00")]);
    // Across Diensten too: a night running into the next morning's shift.
    let c = calc(&maart(vec![
        dienst("2026-03-11", vec![w("23:00", "08:00")]),
        dienst("2026-03-12", vec![w("07:00", "15:00")]),
    ]));
    expect(&c, &[("100", "16.00"), ("210", "1.00"), ("212", "7.00"), ("230", "87.75")]);
    assert_eq!(warnings(&c), ["blokken-overlappen"]);
}

#[test]
fn a_night_with_a_break_after_midnight() {
    // The second block begins before the first: it is the next day's 02:30.
    let c = calc(&maart(vec![dienst("2026-03-10", vec![w("22:00", "02:00"), w("02:30", "07:00")])]));
    expect(&c, &[("100", "8.50"), ("210", "1.00"), ("212", "7.50"), ("230", "93.63")]);
    assert_eq!(rows(&c)["101"], "1");
}

#[test]
fn blocks_outside_the_employment_are_dropped_with_a_warning() {
    let mut v = maart(vec![
        dienst("2026-03-09", vec![w("07:00", "15:00")]),
        dienst("2026-03-10", vec![w("07:00", "15:00")]),
        dienst("2026-03-20", vec![w("07:00", "15:00")]),
        dienst("2026-03-21", vec![w("07:00", "15:00")]),
    ]);
    v.dienstverband.datum_in_dienst = d("2026-03-10");
    v.dienstverband.datum_uit_dienst = Some(d("2026-03-20"));
    let c = calc(&v);
    expect(&c, &[("100", "16.00"), ("211", "0.00")]);
    assert_eq!(warnings(&c), ["blok-buiten-dienstverband", "blok-buiten-dienstverband"]);
    assert_eq!(rows(&c)["101"], "2");
}

#[test]
fn christmas_eve_and_new_years_eve_evenings() {
    let v = vraag(
        "2026-12-01",
        "2026-12-31",
        false,
        vec![
            dienst("2026-12-24", vec![w("15:00", "23:00")]),
            dienst("2026-12-31", vec![w("15:00", "23:00")]),
            dienst("2026-12-23", vec![w("15:00", "23:00")]),
        ],
    );
    let c = calc(&v);
    // 24th and 31st: 18:00-23:00 at 60% (over 22% and 47%); the 23rd: 20-22 at 22%, 22-23 at 47%.
    expect(&c, &[("100", "24.00"), ("210", "2.00"), ("212", "1.00"), ("214", "10.00"), ("230", "172.75")]);
}

#[test]
fn saturday_morning_before_and_after_2025_05_01() {
    let before = vraag("2025-04-01", "2025-04-30", false, vec![dienst("2025-04-19", vec![w("06:00", "14:00")])]);
    // 06-08 and 12-14 at 38%, 08-12 without ORT.
    expect(&calc(&before), &[("100", "8.00"), ("211", "4.00"), ("230", "38.00")]);
    let after = vraag("2025-05-01", "2025-05-31", false, vec![dienst("2025-05-03", vec![w("06:00", "14:00")])]);
    expect(&calc(&after), &[("100", "8.00"), ("211", "8.00"), ("230", "76.00")]);
}

#[test]
fn four_week_period_with_iso_week_53_has_a_five_week_norm() {
    // Period 13 of 2026: 2026-11-30 to 2027-01-03 holds ISO week 53 of 2026.
    let mut days = Vec::new();
    let mut date = d("2026-11-30");
    while date <= d("2027-01-03") {
        let wd = chrono::Datelike::weekday(&date).num_days_from_monday();
        if wd < 5 && date != d("2026-12-25") && date != d("2027-01-01") {
            days.push(sbworker::contract::Dienst { datum: date, tijdblokken: vec![w("07:00", "15:00")] });
        }
        date = date.succ_opt().unwrap();
    }
    assert_eq!(days.len(), 23);
    let mut v = vraag("2026-11-30", "2027-01-03", true, days);
    v.dienstverband.parttime_uren = 24.into();
    let c = calc(&v);
    // 184 h against a norm of 24 x 5 = 120 and a full-time norm of 36 x 5 = 180.
    expect(&c, &[("100", "184.00"), ("300", "60.00"), ("310", "4.00")]);
    // The 4 overtime hours: CAO Ziekenhuizen's table holds no art. 8.4 percentage.
    assert_eq!(warnings(&c), ["overwerk-zonder-percentage"]);
    // The same hours in a plain 4-week period: norm 96, full time 144.
    let mut v4 = v.clone();
    v4.periode.einde = d("2026-12-27");
    v4.diensten.dienst.retain(|x| x.datum <= d("2026-12-27"));
    let hours: i64 = v4.diensten.dienst.len() as i64 * 8;
    let c4 = calc(&v4);
    assert_eq!(rows(&c4)["300"], "48.00");
    assert_eq!(rows(&c4)["310"], format!("{}.00", hours - 144));
}

#[test]
fn monthly_norm_uses_52_over_12_weeks() {
    // 20 day shifts of 8 h = 160 h; a 32-hour part-timer: norm 138.67, full time 156.
    let days: Vec<_> = (2..=27)
        .map(|n| d(&format!("2026-03-{n:02}")))
        .filter(|x| chrono::Datelike::weekday(x).num_days_from_monday() < 5)
        .take(20)
        .map(|datum| sbworker::contract::Dienst { datum, tijdblokken: vec![w("07:00", "15:00")] })
        .collect();
    let mut v = maart(days);
    v.dienstverband.parttime_uren = 32.into();
    let c = calc(&v);
    expect(&c, &[("100", "160.00"), ("300", "17.33"), ("310", "4.00")]);
}

#[test]
fn no_ort_above_job_group_70_and_sick_hours_carry_none() {
    let mut v =
        maart(vec![dienst("2026-03-10", vec![w("22:00", "02:00")]), dienst("2026-03-12", vec![z("22:00", "02:00")])]);
    v.dienstverband.functiegroep = 75;
    v.dienstverband.salaris = None;
    let c = calc(&v);
    expect(&c, &[("100", "4.00"), ("120", "4.00")]);
    assert!(!c.totals.ort_entitled);
}

#[test]
fn the_ort_cap_limits_the_hourly_wage() {
    // Salary 6240: 40.00 an hour; the cap from 2026-01-01 is 31.00 (data/cao.toml).
    let mut v = maart(vec![dienst("2026-03-10", vec![w("22:00", "02:00")])]);
    v.dienstverband.salaris.as_mut().unwrap().nominaal_salaris = 6240.into();
    // 4 h x 47% x 31.00 = 58.28
    expect(&calc(&v), &[("100", "4.00"), ("212", "4.00"), ("230", "58.28")]);
}

#[test]
fn a_second_cao_is_only_data() {
    let mut v =
        maart(vec![dienst("2026-03-10", vec![w("22:00", "02:00")]), dienst("2026-03-14", vec![w("22:00", "23:00")])]);
    v.dienstverband.cao.code = "GGZ".into();
    // Weekday night at 44% (factor 212), Saturday night at 49% (factor 213).
    expect(&calc(&v), &[("100", "5.00"), ("212", "4.00"), ("213", "1.00"), ("230", "56.25")]);
}

fn fout(v: &sbworker::contract::Vraag) -> engine::EngineError {
    engine::calculate(v, &tables(), false).expect_err("a Fout")
}

#[test]
fn inputs_the_engine_cannot_honour_yield_a_fout() {
    // A 24-hour clock span across the autumn change is 25 real hours.
    let v = vraag("2026-10-01", "2026-10-31", false, vec![dienst("2026-10-24", vec![w("07:00", "07:00")])]);
    let e = fout(&v);
    assert_eq!((e.reden, e.path.as_str()), (Reden::BlockTooLong, "Diensten/Dienst[1]/Tijdblok[1]"));
    // The same span on an ordinary day is exactly 24 hours: allowed.
    assert_eq!(rows(&calc(&maart(vec![dienst("2026-03-10", vec![w("07:00", "07:00")])])))["100"], "24.00");

    let mut v = maart(vec![dienst("2026-03-10", vec![w("22:00", "02:00")])]);
    v.dienstverband.salaris = None;
    assert_eq!(fout(&v).reden, Reden::SalaryMissing);
    // Without ORT due, no salary is needed.
    let mut v = maart(vec![dienst("2026-03-10", vec![w("08:00", "16:00")])]);
    v.dienstverband.salaris = None;
    assert_eq!(rows(&calc(&v))["100"], "8.00");

    let mut v = maart(vec![]);
    v.periode.einde = d("2026-02-27");
    let e = fout(&v);
    assert_eq!(e.reden, Reden::PeriodInverted);
    let f = e.to_fout(Some(v.id));
    assert!(f.error_message.starts_with("Periode: "), "{}", f.error_message);
    let xml = contract::encode_fout(&f);
    crate::common::xmllint(&crate::common::xsd("RekenserverFout"), xml.as_bytes()).unwrap();

    let mut v = maart(vec![]);
    v.dienstverband.cao.code = "HORECA".into();
    assert_eq!(fout(&v).reden, Reden::UnknownCao);
    let v = vraag("2024-03-01", "2024-03-31", false, vec![dienst("2024-03-11", vec![w("22:00", "23:00")])]);
    assert_eq!(fout(&v).reden, Reden::UnknownCao, "no ZKH table before 2025-02-01");
    let mut v = maart(vec![]);
    v.dienstverband.cao.werkweek_uren = 0.into();
    assert_eq!(fout(&v).reden, Reden::InvalidValue);
}

#[test]
fn an_empty_roster_still_answers_every_factor() {
    let c = calc(&example("vraag-geen-diensten.xml"));
    // The 14 fixed factors and CAO Ziekenhuizen's five ORT rates.
    assert_eq!(c.antwoord.mutaties.len(), 19);
    assert!(c.antwoord.mutaties.iter().all(|m| m.waarde.is_zero()));
}

// ORT only up to full time: CAO Ziekenhuizen art. 9.1 lid 1 ("voor zover zij de 36 uur
// niet te boven gaan"), lid 2 (the contract hours for another contract) and art. 8.5
// lid 2 (a part-timer's extra hours up to full time carry ORT). The limit of a period is
// max(contract, full time) h a week x the period's weeks; the sick and leave hours fill
// it first, wherever they fall, the worked hours the room left in time order, and the
// worked hours after it carry no ORT. In the 4-week
// period 23 February - 22 March 2026 (ISO weeks 9-12, no holiday, no clock change) a
// full-timer's limit is 36 x 4 = 144 h. Hourly wage: 3,900 x 12 / (36 x 52) = 25.00,
// below the 2026 cap of 31.00.

/// Weekday day shifts 08:00-16:00 (8 h, in no ORT window) from Monday 23 February 2026,
/// `n` of them.
fn day_shifts(n: usize) -> Vec<sbworker::contract::Dienst> {
    weekday_shifts("2026-02-23", n, "08:00", "16:00")
}

#[test]
fn a_full_timers_night_after_the_limit_carries_no_ort_and_is_overtime() {
    // 17 day shifts (136 h, through Tuesday 17 March), then Thursday 19 March 21:00 to
    // Friday 07:00 (10 h): 146 h in all, 2 h above the limit of 144 h. In time order the
    // night's first 8 h (21:00-05:00) are within the limit: 21-22 at 22% (weekday
    // 20-22), 22-24 and 00-05 at 47% (weekday nights): 210 = 1.00, 212 = 7.00. Its last
    // 2 h (05:00-07:00, which would be 47% and 22%) are above it: no ORT, and they are
    // the overtime (310 = 146 - 144 = 2.00). ORT amount: 25.00 x (1 x 0.22 + 7 x 0.47) =
    // 25.00 x 3.51 = 87.75.
    let mut ds = day_shifts(17);
    ds.push(dienst("2026-03-19", vec![w("21:00", "07:00")]));
    let c = calc(&vraag("2026-02-23", "2026-03-22", true, ds));
    expect(&c, &[("100", "146.00"), ("210", "1.00"), ("212", "7.00"), ("230", "87.75"), ("310", "2.00")]);
    assert_eq!(c.totals.over_limit_minutes, 120);
    let text = c.explanation.unwrap().to_string();
    assert!(text.contains("05:00-07:00") && text.contains("above the ORT limit of 144:00 h"), "{text}");
}

#[test]
fn a_part_timers_extra_hours_at_the_weekend_carry_ort() {
    // 24 h a week: contract 96 h, limit max(24, 36) x 4 = 144 h. 12 day shifts (96 h),
    // then Saturday 21 March 08:00-16:00 (8 h): extra hours up to full time (art. 8.5
    // lid 1: 104 - 96 = 8.00), with ORT (lid 2): Saturday 06-22 at 38% from 1 May 2025,
    // 211 = 8.00; amount 25.00 x 8 x 0.38 = 76.00.
    let mut ds = day_shifts(12);
    ds.push(dienst("2026-03-21", vec![w("08:00", "16:00")]));
    let mut v = vraag("2026-02-23", "2026-03-22", true, ds);
    v.dienstverband.parttime_uren = rust_decimal::Decimal::from(24);
    let c = calc(&v);
    expect(&c, &[("100", "104.00"), ("211", "8.00"), ("230", "76.00"), ("300", "8.00")]);
}

#[test]
fn a_part_timer_above_full_time_gets_no_ort_above_it() {
    // 24 h a week, 18 day shifts (144 h) then the same Saturday 08:00-16:00: 152 h.
    // Extra hours up to full time: 144 - 96 = 48.00 (art. 8.5 lid 1); overtime above
    // it: 152 - 144 = 8.00 (art. 8.5 lid 3, 8.4). The Saturday comes after the limit of
    // 144 h: no ORT (211 = 0, amount 0).
    let mut ds = day_shifts(18);
    ds.push(dienst("2026-03-21", vec![w("08:00", "16:00")]));
    let mut v = vraag("2026-02-23", "2026-03-22", true, ds);
    v.dienstverband.parttime_uren = rust_decimal::Decimal::from(24);
    let c = calc(&v);
    expect(&c, &[("100", "152.00"), ("300", "48.00"), ("310", "8.00")]);
    assert_eq!(c.totals.over_limit_minutes, 8 * 60);
}

#[test]
fn the_limit_is_the_periods_even_for_a_week_across_its_end() {
    // March 2026, a month: limit 36 x 52/12 = 156 h. 19 weekday day shifts (2 to 26
    // March, 152 h), then Tuesday 31 March 22:00 to Wednesday 1 April 06:00 (8 h; the
    // Dienst is dated in March, so all of it is March's, though its week runs into
    // April). 160 h: the night's first 4 h (22:00-02:00, 47%) are within the limit,
    // its last 4 h (02:00-06:00) above it. 212 = 4.00, amount 25.00 x 4 x 0.47 = 47.00,
    // overtime 160 - 156 = 4.00. (The clock change of Sunday 29 March is before it.)
    let mut ds: Vec<_> = (2..=26)
        .map(|n| d(&format!("2026-03-{n:02}")))
        .filter(|day| chrono::Datelike::weekday(day).number_from_monday() <= 5)
        .map(|day| dienst(&day.to_string(), vec![w("08:00", "16:00")]))
        .collect();
    assert_eq!(ds.len(), 19);
    ds.push(dienst("2026-03-31", vec![w("22:00", "06:00")]));
    let c = calc(&maart(ds));
    expect(&c, &[("100", "160.00"), ("212", "4.00"), ("230", "47.00"), ("310", "4.00")]);
}

#[test]
fn sick_hours_count_towards_the_limit() {
    // 17 day shifts of which the first is sick (8 h sick, 128 h worked), then the
    // night of 19 March 21:00-07:00: 146 h counted, so as in the full-timer's example the
    // night's last 2 h are above the limit (sick hours are roster hours too: they fill
    // the limit first, 144 - 8 = 136 h of room for work, though they carry no ORT
    // themselves).
    let mut ds = day_shifts(17);
    ds[0] = dienst("2026-02-23", vec![z("08:00", "16:00")]);
    ds.push(dienst("2026-03-19", vec![w("21:00", "07:00")]));
    let c = calc(&vraag("2026-02-23", "2026-03-22", true, ds));
    expect(
        &c,
        &[("100", "138.00"), ("120", "8.00"), ("210", "1.00"), ("212", "7.00"), ("230", "87.75"), ("310", "2.00")],
    );
}

#[test]
fn above_job_group_70_there_is_still_no_ort() {
    // Art. 9.2 lid 1: ORT for job group 70 or lower. The full-timer's night with job
    // group 75: no ORT at all, the overtime as before.
    let mut ds = day_shifts(17);
    ds.push(dienst("2026-03-19", vec![w("21:00", "07:00")]));
    let mut v = vraag("2026-02-23", "2026-03-22", true, ds);
    v.dienstverband.functiegroep = 75;
    expect(&calc(&v), &[("100", "146.00"), ("310", "2.00")]);
}

#[test]
fn a_contract_above_full_time_has_its_own_limit_and_overtime() {
    // 40 h a week (art. 6.1 lid 2 allows it): the roster's hours are 40 x 4 = 160 h, so
    // the ORT limit (art. 9.1 lid 2: the contract hours in place of 36) and the start of
    // overtime (art. 8.1: work above the roster's hours) are both 160 h. 20 day shifts
    // (160 h), then Saturday 21 March 08:00-16:00: 168 h; the Saturday is above the
    // limit (no ORT) and is the overtime, 168 - 160 = 8.00; no extra hours.
    let mut ds = day_shifts(20);
    ds.push(dienst("2026-03-21", vec![w("08:00", "16:00")]));
    let mut v = vraag("2026-02-23", "2026-03-22", true, ds);
    v.dienstverband.parttime_uren = rust_decimal::Decimal::from(40);
    expect(&calc(&v), &[("100", "168.00"), ("310", "8.00")]);
}

// ORT during statutory vacation: art. 9.1 lid 4 ("De werknemer ontvangt eveneens een
// vergoeding onregelmatige dienst tijdens het opnemen van wettelijk vakantieverlof") and
// art. 12.1.2 lid 2 (the hourly wage raised by the average ORT percentage of the past six
// months, over statutory vacation hours taken, at most 144 hours on a full-time basis).
// The average is Σ(ORT hours x percentage) / Σ worked hours of the stored periods of the
// six months before the period (the Vraag's Historie; a period that straddles the
// window's start pro rata by days).

/// The six 4-week periods before 23 February 2026 that begin after 23 August 2025, each
/// with 144 worked hours and ORT hours 10 at 22%, 20 at 47% and 8 at 60%, and `used`
/// statutory vacation hours with ORT in the last one.
fn six_months(used: &str) -> Vec<sbworker::contract::HistoriePeriode> {
    let begins = ["2025-09-08", "2025-10-06", "2025-11-03", "2025-12-01", "2025-12-29", "2026-01-26"];
    begins
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let begin = d(b);
            let mut f = vec![("100", "144.00"), ("210", "10.00"), ("212", "20.00"), ("214", "8.00")];
            if i == begins.len() - 1 {
                // Statutory hours taken then, all of which carried ORT.
                f.extend([("130", used), ("133", used)]);
            }
            sbworker::contract::HistoriePeriode {
                id: 100 + i as i32,
                begin,
                einde: begin + chrono::Days::new(27),
                factoren: f.into_iter().map(|(c, v)| (c.into(), v.parse().unwrap())).collect(),
            }
        })
        .collect()
}

/// 16 day shifts (128 h) and statutory vacation on Thursday 19 and Friday 20 March
/// 08:00-16:00 (16 h): 144 rostered hours, no extra hours.
fn with_vacation() -> sbworker::contract::Vraag {
    use sbworker::contract::Verlof;
    let mut ds = day_shifts(16);
    ds.push(dienst("2026-03-19", vec![verlof("08:00", "16:00", Verlof::Wettelijk)]));
    ds.push(dienst("2026-03-20", vec![verlof("08:00", "16:00", Verlof::Wettelijk)]));
    vraag("2026-02-23", "2026-03-22", true, ds)
}

#[test]
fn statutory_vacation_carries_the_average_ort_of_the_past_six_months() {
    // Six periods of 144 h with 10 x 22 + 20 x 47 + 8 x 60 = 1,640 ORT-weighted hours:
    // average 6 x 1,640 / (6 x 144) = 9,840 / 864 = 11.3888...%. 16 vacation hours, none
    // used earlier this year: 240 = 16 x 25.00 x 11.3888...% = 45.5555... = 45.56.
    let mut v = with_vacation();
    v.historie = six_months("0");
    let c = calc(&v);
    expect(&c, &[("100", "128.00"), ("130", "16.00"), ("133", "16.00"), ("240", "45.56")]);
    assert!(c.antwoord.waarschuwingen.is_empty(), "{:?}", c.antwoord.waarschuwingen);
    assert!(c.explanation.unwrap().to_string().contains("average ORT 11.3889%"));
}

#[test]
fn the_years_maximum_of_vacation_hours_with_ort_holds() {
    // 140 of the 144 hours were used in the period that began on 26 January 2026: 4
    // hours left. 133 = 4.00, 240 = 4 x 25.00 x 9,840 / 864 % = 11.3888... = 11.39. The
    // vacation hours stay 16.
    let mut v = with_vacation();
    v.historie = six_months("140");
    expect(&calc(&v), &[("100", "128.00"), ("130", "16.00"), ("133", "4.00"), ("240", "11.39")]);
}

#[test]
fn a_new_employee_has_the_average_of_the_months_there_are() {
    // In service since 26 January 2026: one stored period, 144 h with 36 h at 47%:
    // average 36 x 47 / 144 = 11.75%. 240 = 16 x 25.00 x 11.75% = 47.00, with a warning
    // that the history is short (28 of the 184 days since 23 August 2025).
    let mut v = with_vacation();
    v.dienstverband.datum_in_dienst = d("2026-01-26");
    v.historie = vec![sbworker::contract::HistoriePeriode {
        id: 1,
        begin: d("2026-01-26"),
        einde: d("2026-02-22"),
        factoren: vec![("100".into(), "144".parse().unwrap()), ("212".into(), "36".parse().unwrap())],
    }];
    let c = calc(&v);
    expect(&c, &[("100", "128.00"), ("130", "16.00"), ("133", "16.00"), ("240", "47.00")]);
    assert_eq!(warnings(&c), ["ort-vakantie-korte-historie"]);
}

#[test]
fn without_history_vacation_carries_no_ort_and_says_so() {
    // No stored period: the average is 0%, nothing is paid and the year's maximum is not
    // used up; a warning names it.
    let c = calc(&with_vacation());
    expect(&c, &[("100", "128.00"), ("130", "16.00")]);
    assert_eq!(warnings(&c), ["ort-vakantie-geen-historie"]);
}

#[test]
fn other_vacation_and_leave_are_factors_of_their_own_without_ort() {
    // Vacation above the statutory hours (131) and other leave (132) are rostered hours:
    // they count towards the period's hours (no extra hours here: 128 + 8 + 8 = 144) and
    // carry no ORT, not even with a history.
    use sbworker::contract::Verlof;
    let mut ds = day_shifts(16);
    ds.push(dienst("2026-03-19", vec![verlof("08:00", "16:00", Verlof::Bovenwettelijk)]));
    ds.push(dienst("2026-03-20", vec![verlof("08:00", "16:00", Verlof::Overig)]));
    let mut v = vraag("2026-02-23", "2026-03-22", true, ds);
    v.historie = six_months("0");
    expect(&calc(&v), &[("100", "128.00"), ("131", "8.00"), ("132", "8.00")]);
}

#[test]
fn a_four_week_years_first_period_belongs_to_its_iso_year() {
    // Period 1 of 2026 began on 29 December 2025: the 140 hours it used count for 2026
    // (the ISO year of its first week), so 4 hours are left, as when January's period
    // used them. 133 = 4.00, 240 = 11.39.
    let mut v = with_vacation();
    v.historie = six_months("0");
    let first_2026 = v.historie.iter_mut().find(|h| h.begin == d("2025-12-29")).unwrap();
    first_2026.factoren.extend([("130".into(), "140".parse().unwrap()), ("133".into(), "140".parse().unwrap())]);
    expect(&calc(&v), &[("100", "128.00"), ("130", "16.00"), ("133", "4.00"), ("240", "11.39")]);
}

#[test]
fn only_the_past_six_months_make_the_average() {
    // Added to the six periods: the period itself, which may not count, and one from 11
    // August to 7 September 2025, which straddles the window's start (23 August 2025):
    // by default (`deels_in_venster = "naar_rato"`) it counts for the share of its days
    // in the six months, 16 of 28 (23 August - 7 September). Both are all night work,
    // 144 h at 47%. Average = (9,840 + 144 x 47 x 16/28) / (864 + 144 x 16/28) = (95,952
    // / 7) / (6,624 / 7) = 95,952 / 6,624 = 14.4855...%; 240 = 16 x 25.00 x 14.4855...%
    // = 57.942... = 57.94.
    let straddling = || {
        let mut v = with_vacation();
        v.historie = six_months("0");
        for (begin, einde) in [("2025-08-11", "2025-09-07"), ("2026-02-23", "2026-03-22")] {
            v.historie.push(sbworker::contract::HistoriePeriode {
                id: 99,
                begin: d(begin),
                einde: d(einde),
                factoren: vec![("100".into(), "144".parse().unwrap()), ("212".into(), "144".parse().unwrap())],
            });
        }
        v
    };
    let c = calc(&straddling());
    expect(&c, &[("100", "128.00"), ("130", "16.00"), ("133", "16.00"), ("240", "57.94")]);
    // With it the six months are covered whole: no short-history warning.
    assert!(c.antwoord.waarschuwingen.is_empty(), "{:?}", c.antwoord.waarschuwingen);
    // `heel`: counted whole, (9,840 + 6,768) / (864 + 144) = 16,608 / 1,008 = 16.4761...%,
    // 240 = 16 x 25.00 x 16.4761...% = 65.904... = 65.90. `niet`: not at all, 45.56 as
    // without it.
    for (choice, amount) in [("heel", "65.90"), ("niet", "45.56")] {
        let t = with_setting("deels_in_venster = \"naar_rato\"", &format!("deels_in_venster = \"{choice}\""));
        let c = engine::calculate(&straddling(), &t, true).unwrap();
        expect(&c, &[("100", "128.00"), ("130", "16.00"), ("133", "16.00"), ("240", amount)]);
    }
}

/// The built-in tables with one setting of CAO Ziekenhuizen changed.
fn with_setting(from: &str, to: &str) -> Tables {
    let text = engine::tables::BUILT_IN.replacen(from, to, 1);
    assert_ne!(text, engine::tables::BUILT_IN, "{from} is not in the tables");
    Tables::from_toml(&text).unwrap()
}

#[test]
fn statutory_hours_at_a_zero_average_use_the_maximum_up() {
    // Period 1 of 2026 (29 December 2025 - 25 January 2026) took 140 statutory hours at an
    // average of 0%: 130 = 140, 133 = 0. By default (`maximum_telt = "opgenomen"`) every
    // statutory hour taken uses the year's maximum of 144 h up (art. 12.1.2 lid 2 sets it
    // on "opgenomen wettelijke vakantie-uren"): 4 h left, 133 = 4.00, 240 = 4 x 25.00 x
    // 11.3888...% = 11.39. With `met_ort` only hours that carried ORT count: all 16 carry
    // it, 240 = 45.56.
    let mut v = with_vacation();
    v.historie = six_months("0");
    let first_2026 = v.historie.iter_mut().find(|h| h.begin == d("2025-12-29")).unwrap();
    first_2026.factoren.extend([("130".into(), "140".parse().unwrap()), ("133".into(), "0".parse().unwrap())]);
    expect(&calc(&v), &[("100", "128.00"), ("130", "16.00"), ("133", "4.00"), ("240", "11.39")]);
    let t = with_setting("maximum_telt = \"opgenomen\"", "maximum_telt = \"met_ort\"");
    let c = engine::calculate(&v, &t, true).unwrap();
    expect(&c, &[("100", "128.00"), ("130", "16.00"), ("133", "16.00"), ("240", "45.56")]);
}

#[test]
fn the_average_is_over_worked_hours_or_as_the_table_says_over_paid_hours() {
    // Each of the six periods also holds 36 sick hours (120). By default (`noemer =
    // "gewerkt"`) the average is over worked hours: 11.3888...%, 240 = 45.56 as without
    // them. Over paid hours (`betaald`: 100 + 120 + 130-132): 9,840 / (6 x 180) =
    // 9.1111...%; 240 = 16 x 25.00 x 9.1111...% = 36.444... = 36.44.
    let mut v = with_vacation();
    v.historie = six_months("0");
    for h in &mut v.historie {
        h.factoren.push(("120".into(), "36".parse().unwrap()));
    }
    expect(&calc(&v), &[("100", "128.00"), ("130", "16.00"), ("133", "16.00"), ("240", "45.56")]);
    let t = with_setting("noemer = \"gewerkt\"", "noemer = \"betaald\"");
    let c = engine::calculate(&v, &t, true).unwrap();
    expect(&c, &[("100", "128.00"), ("130", "16.00"), ("133", "16.00"), ("240", "36.44")]);
    assert!(c.explanation.unwrap().to_string().contains("1080.00 paid hours"));
}

/// A full-timer's 4-week period (23 February - 22 March 2026, limit 36 x 4 = 144 h) with
/// 144 worked hours, every one at the weekday night rate of 47% (art. 9.4): each week a
/// Monday 04:00-06:00, four nights Monday to Thursday 22:00-06:00 and Friday 22:00-24:00
/// (2 + 32 + 2 = 36 h), plus `extra` on `day`.
fn nights_and(day: &str, extra: sbworker::contract::Tijdblok) -> sbworker::contract::Vraag {
    let mut ds = Vec::new();
    for week in 0..4u64 {
        let monday = d("2026-02-23") + chrono::Days::new(7 * week);
        let date = |n: u64| (monday + chrono::Days::new(n)).to_string();
        ds.push(dienst(&date(0), vec![w("04:00", "06:00"), w("22:00", "06:00")]));
        for n in 1..4 {
            ds.push(dienst(&date(n), vec![w("22:00", "06:00")]));
        }
        ds.push(dienst(&date(4), vec![w("22:00", "00:00")]));
    }
    ds.push(dienst(day, vec![extra]));
    vraag("2026-02-23", "2026-03-22", true, ds)
}

#[test]
fn a_sick_day_first_or_last_gives_the_same_pay() {
    // 144 worked hours at 47% and an 8-hour sick day (Sunday 22 March or Monday 23
    // February, 08:00-16:00). Sick hours fill the limit first wherever they fall (they are
    // rostered hours, not work; hours above the working time are work, art. 8.1): the room
    // for ORT-bearing work is 144 - 8 = 136 h, and the worked hours after it in time order
    // (Friday 20 March 22:00-24:00 and the Thursday night's 00:00-06:00: 8 h) carry none
    // (art. 9.1 lid 1) and are the overtime (art. 8.5 lid 3): 310 = 144 + 8 - 144 = 8.00.
    // 212 = 136.00; 230 = 136 x 25.00 x 0.47 = 1,598.00. Before the rule, the sick day
    // last left ORT on all 144 h beside 310 = 8.
    let last = calc(&nights_and("2026-03-22", z("08:00", "16:00")));
    let first = calc(&nights_and("2026-02-23", z("08:00", "16:00")));
    for c in [&last, &first] {
        expect(c, &[("100", "144.00"), ("120", "8.00"), ("212", "136.00"), ("230", "1598.00"), ("310", "8.00")]);
        assert_eq!(rows(c)["101"], "20");
        assert_eq!(c.totals.over_limit_minutes, 8 * 60);
    }
    assert_eq!(last.antwoord.mutaties, first.antwoord.mutaties);
}

#[test]
fn a_vacation_day_first_or_last_gives_the_same_vacation_ort() {
    // The same with a statutory vacation day instead of the sick day, and the six stored
    // periods (average 11.3888...%). Vacation fills the limit first as sick hours do, so
    // ORT on 136 worked hours either way; and every statutory vacation hour carries the
    // vacation ORT up to the year's maximum (art. 12.1.2 lid 2 knows no other limit):
    // 133 = 8.00, 240 = 8 x 25.00 x 11.3888...% = 22.777... = 22.78. Before the rule, the
    // vacation day last got none (133 = 0, 240 = 0).
    use sbworker::contract::Verlof;
    let with = |day: &str| {
        let mut v = nights_and(day, verlof("08:00", "16:00", Verlof::Wettelijk));
        v.historie = six_months("0");
        calc(&v)
    };
    let (last, first) = (with("2026-03-22"), with("2026-02-23"));
    for c in [&last, &first] {
        expect(
            c,
            &[
                ("100", "144.00"),
                ("130", "8.00"),
                ("133", "8.00"),
                ("212", "136.00"),
                ("230", "1598.00"),
                ("240", "22.78"),
                ("310", "8.00"),
            ],
        );
    }
    assert_eq!(last.antwoord.mutaties, first.antwoord.mutaties);
}

#[test]
fn overtime_without_a_percentage_in_the_table_is_named_in_a_warning() {
    // CAO Ziekenhuizen: art. 8.5 lid 3 sends the hours above full time to art. 8.4, whose
    // text was not read, so the table holds no percentage. The full-timer's night of 19
    // March (146 h, 310 = 2.00) is answered with hours only and a warning that names the
    // 2 h; 315 and 330 stay 0.
    let mut ds = day_shifts(17);
    ds.push(dienst("2026-03-19", vec![w("21:00", "07:00")]));
    let c = calc(&vraag("2026-02-23", "2026-03-22", true, ds.clone()));
    expect(&c, &[("100", "146.00"), ("210", "1.00"), ("212", "7.00"), ("230", "87.75"), ("310", "2.00")]);
    assert_eq!(warnings(&c), ["overwerk-zonder-percentage"]);
    assert!(c.antwoord.waarschuwingen[0].tekst.starts_with("2.00 overtime hours"), "{:?}", c.antwoord.waarschuwingen);
    // FNV (2025-2027): the overtime compensation applies up to FWG scale 60. Job group 65
    // gets none, so there is nothing for payroll to add and no warning.
    let mut v = vraag("2026-02-23", "2026-03-22", true, ds);
    v.dienstverband.functiegroep = 65;
    let c = calc(&v);
    assert!(c.antwoord.waarschuwingen.is_empty(), "{:?}", c.antwoord.waarschuwingen);
    assert!(c.explanation.unwrap().to_string().contains("job group 65 is above 60: no overtime pay"));
}

#[test]
fn a_contract_above_the_caos_maximum_is_answered_with_a_warning() {
    // Art. 6.1 lid 2: at most 2,087 hours a year, 40 a week on average. A 42-hour contract
    // is computed as given (its own limit, 42 x 4 = 168 h) with a warning.
    let mut v = vraag("2026-02-23", "2026-03-22", true, day_shifts(20));
    v.dienstverband.parttime_uren = 42.into();
    let c = calc(&v);
    expect(&c, &[("100", "160.00")]);
    assert_eq!(warnings(&c), ["contract-boven-maximum"]);
    v.dienstverband.parttime_uren = 40.into();
    assert!(calc(&v).antwoord.waarschuwingen.is_empty());
}

/// A GGZ full-timer in the same 4-week period (limit 36 x 4 = 144 h; hourly wage 25.00).
fn ggz(ds: Vec<sbworker::contract::Dienst>) -> sbworker::contract::Vraag {
    let mut v = vraag("2026-02-23", "2026-03-22", true, ds);
    v.dienstverband.cao.code = "GGZ".into();
    v.dienstverband.cao.naam = "CAO GGZ".into();
    v
}

#[test]
fn ggz_overtime_in_each_window_and_across_its_cap() {
    // CAO GGZ, H10 A Overwerk art. 3 (the opening read): time off equal to the overtime
    // (315), plus 25% Monday to Friday 06:00-22:00 for at most 5 h in seven consecutive
    // weekdays, the rest 50%; 50% 22:00-06:00 (taken Monday to Friday). GGZ pays ORT on
    // every worked hour (no limit in the table). 18 day shifts 08:00-16:00 (144 h, to
    // Wednesday 18 March), then overtime:
    // - Thursday 19 March 08:00-16:00: 08-13 at 25% (5 h, the cap), 13-16 at 50% (3 h);
    // - Friday 20 March 04:00-06:00: 50% (2 h); ORT 44% (212);
    // - Friday 20 March 20:00-24:00: 20-22 in the 25% window but the cap is used: 50%
    //   (2 h); 22-24 at 50% (2 h); ORT 20-22 at 22% (210), 22-24 at 44% (212);
    // - Saturday 21 March 10:00-12:00: no overtime window read for Saturday: no percentage,
    //   a warning (2.00 h); ORT 38% (211).
    // 310 = 16.00 = 315; 321 = 5.00; 322 = 3 + 2 + 2 + 2 = 9.00; 330 = 25.00 x (5 x 0.25 +
    // 9 x 0.50) = 25.00 x 5.75 = 143.75. ORT: 210 = 2, 211 = 2, 212 = 4; 230 = 25.00 x (2 x
    // 0.22 + 2 x 0.38 + 4 x 0.44) = 25.00 x 2.96 = 74.00.
    let mut ds = day_shifts(18);
    ds.push(dienst("2026-03-19", vec![w("08:00", "16:00")]));
    ds.push(dienst("2026-03-20", vec![w("04:00", "06:00"), w("20:00", "00:00")]));
    ds.push(dienst("2026-03-21", vec![w("10:00", "12:00")]));
    let c = calc(&ggz(ds));
    expect(
        &c,
        &[
            ("100", "160.00"),
            ("210", "2.00"),
            ("211", "2.00"),
            ("212", "4.00"),
            ("230", "74.00"),
            ("310", "16.00"),
            ("315", "16.00"),
            ("321", "5.00"),
            ("322", "9.00"),
            ("330", "143.75"),
        ],
    );
    assert_eq!(warnings(&c), ["overwerk-zonder-percentage"]);
    assert!(c.antwoord.waarschuwingen[0].tekst.starts_with("2.00 overtime hours"));
    let text = c.explanation.unwrap().to_string();
    assert!(text.contains("2026-03-19 thu 13:00-16:00   3:00 overtime     50%"), "{text}");
}

#[test]
fn ggz_overtime_cap_counts_seven_consecutive_weekdays() {
    // "in een periode van zeven achtereenvolgende doordeweekse dagen ... maximaal 5": any
    // seven consecutive weekdays, not a calendar week. 12 day shifts 07:00-19:00 (144 h,
    // no ORT, to Tuesday 10 March), then overtime 08:00 onwards:
    // - Wednesday 11 March 3 h: 25% (3 of 5 used);
    // - Thursday 12 March 3 h: 2 h at 25%, 1 h at 50%;
    // - Monday 16 March 4 h: the seven weekdays 6-16 March hold 5 h at 25%: all 50% (a
    //   calendar week, 16-22 March, would have paid them at 25%);
    // - Friday 20 March 3 h: the seven weekdays 12-20 March hold 2 h: 3 h at 25%.
    // 321 = 8.00, 322 = 5.00, 310 = 315 = 13.00; 330 = 25.00 x (8 x 0.25 + 5 x 0.50) =
    // 112.50.
    let mut ds = long_days("2026-02-23", 12);
    for (date, end) in
        [("2026-03-11", "11:00"), ("2026-03-12", "11:00"), ("2026-03-16", "12:00"), ("2026-03-20", "11:00")]
    {
        ds.push(dienst(date, vec![w("08:00", end)]));
    }
    let c = calc(&ggz(ds));
    expect(
        &c,
        &[("100", "157.00"), ("310", "13.00"), ("315", "13.00"), ("321", "8.00"), ("322", "5.00"), ("330", "112.50")],
    );
    assert!(c.antwoord.waarschuwingen.is_empty(), "{:?}", c.antwoord.waarschuwingen);
}

#[test]
fn ggz_a_night_shift() {
    // A GGZ night in March 2026, Tuesday 10 March 22:00 - Wednesday 07:00 (9 h, far below
    // the month's 36 x 52/12 = 156 h): 22-24 and 00-06 at 44% (8 h, 212), 06-07 at 22%
    // (1 h, 210). 230 = 25.00 x (8 x 0.44 + 1 x 0.22) = 25.00 x 3.74 = 93.50. No overtime
    // and no warning (that the table is unverified is said by `calc --explain`, `calc` on
    // stderr and the worker at start-up, not in every Antwoord).
    let mut v = maart(vec![dienst("2026-03-10", vec![w("22:00", "07:00")])]);
    v.dienstverband.cao.code = "GGZ".into();
    let c = calc(&v);
    expect(&c, &[("100", "9.00"), ("210", "1.00"), ("212", "8.00"), ("230", "93.50")]);
    assert!(c.antwoord.waarschuwingen.is_empty(), "{:?}", c.antwoord.waarschuwingen);
    assert!(c.explanation.unwrap().to_string().contains("The rate table of CAO GGZ is not checked against its text"));
}

/// `n` GGZ day shifts 07:00-19:00 (12 h, no ORT) on the weekdays from `first`.
fn long_days(first: &str, n: usize) -> Vec<sbworker::contract::Dienst> {
    weekday_shifts(first, n, "07:00", "19:00")
}

#[test]
fn ggz_overtime_on_a_holiday_on_a_weekday_gets_no_weekday_percentage() {
    // 4-week period 16 March - 12 April 2026: 12 days of 12 h (144 h, to Tuesday 31
    // March, skipping no holiday), then Easter Monday 6 April 08:00-12:00. A public holiday
    // is no working day for the Monday-to-Friday percentages read (the holiday rule of
    // art. 3 was not): 4 h without a percentage and the warning; ORT 60% (214 = 4.00, 230
    // = 25.00 x 4 x 0.60 = 60.00) and the time off (315 = 4.00) as for any overtime hour.
    let mut ds = long_days("2026-03-16", 12);
    ds.push(dienst("2026-04-06", vec![w("08:00", "12:00")]));
    let mut v = vraag("2026-03-16", "2026-04-12", true, ds);
    v.dienstverband.cao.code = "GGZ".into();
    let c = calc(&v);
    expect(&c, &[("100", "148.00"), ("214", "4.00"), ("230", "60.00"), ("310", "4.00"), ("315", "4.00")]);
    assert_eq!(warnings(&c), ["overwerk-zonder-percentage"]);
}

#[test]
fn ggz_a_part_timers_overtime_gets_no_percentage_of_the_full_time_article() {
    // Art. 3 of A Overwerk is headed "voor werknemers met een volledige werkweek". A
    // 24-hour part-timer (limit max(24, 36) x 4 = 144 h) with 18 day shifts and Thursday
    // 19 March 08:00-16:00: 8 h of overtime, no percentage, no time off, a warning; the
    // extra hours up to full time are 300 = 144 - 96 = 48.00.
    let mut ds = day_shifts(18);
    ds.push(dienst("2026-03-19", vec![w("08:00", "16:00")]));
    let mut v = ggz(ds);
    v.dienstverband.parttime_uren = 24.into();
    let c = calc(&v);
    expect(&c, &[("100", "152.00"), ("300", "48.00"), ("310", "8.00")]);
    assert_eq!(warnings(&c), ["overwerk-zonder-percentage"]);
    assert!(c.antwoord.waarschuwingen[0].tekst.contains("read for full-timers"), "{:?}", c.antwoord.waarschuwingen);
}

#[test]
fn a_fractional_contract_places_the_same_overtime_it_reports() {
    // 38.33 h a week: the roster's hours are 38.33 x 4 = 153.32 h = 9,199.2 minutes,
    // placed to the minute (9,199). 18 day shifts (144 h) and Thursday 19 March
    // 08:00-17:20 (9:20): 153:20 = 9,200 minutes, so 1 minute is overtime: 310 = 0.02
    // (1/60 h, rounded half away from zero), and so are 321 and 315 (GGZ); 330 = 25.00 x
    // 0.25 / 60 = 0.104... = 0.10. 310, 315, 321 and 330 come from one count.
    let mut ds = day_shifts(18);
    ds.push(dienst("2026-03-19", vec![w("08:00", "17:20")]));
    let mut v = ggz(ds);
    v.dienstverband.parttime_uren = "38.33".parse().unwrap();
    expect(&calc(&v), &[("100", "153.33"), ("310", "0.02"), ("315", "0.02"), ("321", "0.02"), ("330", "0.10")]);
}

#[test]
fn the_cap_looks_back_into_the_previous_period_from_its_first_weekday() {
    // GGZ, March 2026, a month that begins on Sunday 1 March (limit 36 x 52/12 = 156 h).
    // Sick 13 weekdays 07:00-19:00 from Tuesday 10 March (156 h) fill the limit, so the 2
    // hours worked on Monday 9 March 08:00-10:00 are overtime, at 25%: 321 = 2.00, 315 =
    // 2.00, 330 = 25.00 x 2 x 0.25 = 12.50. Their seven weekdays (27 February - 9 March)
    // reach back into February, whose stored result has 3 h at 25%: the cap may have been
    // used already, and a warning says so. (The period's first weekday is Monday 2 March;
    // counting from the Friday before, which is February's, missed it.) Without 25% hours
    // in February there is nothing to say.
    let mut ds: Vec<_> = long_days("2026-03-10", 13)
        .into_iter()
        .map(|x| sbworker::contract::Dienst { datum: x.datum, tijdblokken: vec![z("07:00", "19:00")] })
        .collect();
    ds.push(dienst("2026-03-09", vec![w("08:00", "10:00")]));
    let mut v = maart(ds);
    v.dienstverband.cao.code = "GGZ".into();
    let february = |hours_at_25: &str| {
        vec![sbworker::contract::HistoriePeriode {
            id: 202602,
            begin: d("2026-02-01"),
            einde: d("2026-02-28"),
            factoren: vec![("100".into(), "150".parse().unwrap()), ("321".into(), hours_at_25.parse().unwrap())],
        }]
    };
    v.historie = february("3");
    let c = calc(&v);
    let want =
        [("100", "2.00"), ("120", "156.00"), ("310", "2.00"), ("315", "2.00"), ("321", "2.00"), ("330", "12.50")];
    expect(&c, &want);
    assert_eq!(warnings(&c), ["overwerk-maximum-vorige-periode"]);
    v.historie = february("0");
    let c = calc(&v);
    expect(&c, &want);
    assert!(c.antwoord.waarschuwingen.is_empty(), "{:?}", c.antwoord.waarschuwingen);
}

#[test]
fn sick_hours_above_the_limit_are_no_overtime() {
    // A full-timer sick 19 weekdays 07:00-15:00 (152 h) and working Saturday 21 March
    // 08:00-16:00 (8 h) in the 4-week period (limit 144 h): the sick hours fill the
    // limit and more, so all 8 worked hours are above it (no ORT: 211 = 0) and are the
    // overtime, 310 = min(8, 152 + 8 - 144 = 16) = 8.00: overtime is work (art. 8.1), and
    // the 8 sick hours past the limit are not. Warning: no art. 8.4 percentage.
    let mut ds: Vec<_> = day_shifts(19)
        .into_iter()
        .map(|x| sbworker::contract::Dienst { datum: x.datum, tijdblokken: vec![z("07:00", "15:00")] })
        .collect();
    ds.push(dienst("2026-03-21", vec![w("08:00", "16:00")]));
    let c = calc(&vraag("2026-02-23", "2026-03-22", true, ds));
    expect(&c, &[("100", "8.00"), ("120", "152.00"), ("310", "8.00")]);
    assert_eq!(warnings(&c), ["overwerk-zonder-percentage"]);
}
