//! Property tests of the engine: ORT minutes add up to the worked minutes, splitting a
//! block at any minute changes no total, the order of Diensten does not matter, the ORT
//! limit (art. 9.1 lid 1-2) holds and changes nothing within it, and no input panics.

use chrono::{Days, NaiveDate};
use proptest::prelude::*;
use sbworker::contract::values::ClockTime;
use sbworker::contract::{Dienst, DienstType, Tijdblok, Vraag};
use sbworker::engine::{self, Calculation, Tables};

use crate::common::build::{d, vraag};

/// A block as (minutes after the Dienst's anchor, length, kind 0 worked / 1 sick / 2 other).
type Spec = (u16, u16, u8);

fn clock(m: u32) -> ClockTime {
    let m = (m % 1440) as u16;
    ClockTime::from_hm(m / 60, m % 60).unwrap()
}

fn block(anchor: u16, (off, len, kind): Spec) -> Tijdblok {
    let begin = u32::from(anchor) + u32::from(off);
    Tijdblok {
        begin: clock(begin),
        einde: clock(begin + u32::from(len)),
        is_ziek: kind == 1,
        dienst_type: DienstType { code: "X".into(), telt_mee_in_gewerkte_uren: kind != 2 },
        verlof: None,
    }
}

/// Blocks in order after the anchor, all within 24 hours of it.
fn specs() -> impl Strategy<Value = Vec<Spec>> {
    prop::collection::vec((0u16..240, 1u16..600, prop_oneof![6 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)]), 1..4)
        .prop_map(|raw| {
            let mut out = Vec::new();
            let mut at = 0u16;
            for (gap, len, kind) in raw {
                let off = if out.is_empty() { 0 } else { at + gap };
                let len = len.min(1439u16.saturating_sub(off));
                if len == 0 {
                    break;
                }
                out.push((off, len, kind));
                at = off + len;
            }
            out
        })
}

fn diensten(first: NaiveDate, days: u64) -> impl Strategy<Value = Vec<(NaiveDate, u16, Vec<Spec>)>> {
    prop::collection::vec((0..days, 0u16..1440, specs()), 0..12)
        .prop_map(move |v| v.into_iter().map(|(n, anchor, s)| (first + Days::new(n), anchor, s)).collect())
}

fn build(begin: &str, einde: &str, ds: &[(NaiveDate, u16, Vec<Spec>)]) -> Vraag {
    vraag(
        begin,
        einde,
        false,
        ds.iter()
            .map(|(date, anchor, s)| Dienst {
                datum: *date,
                tijdblokken: s.iter().map(|x| block(*anchor, *x)).collect(),
            })
            .collect(),
    )
}

fn calc(v: &Vraag) -> Calculation {
    engine::calculate(v, &Tables::built_in().unwrap(), false).unwrap_or_else(|e| panic!("{e}"))
}

fn same_figures(a: &Calculation, b: &Calculation) -> Result<(), TestCaseError> {
    prop_assert_eq!(&a.totals, &b.totals);
    prop_assert_eq!(&a.antwoord.mutaties, &b.antwoord.mutaties);
    Ok(())
}

proptest! {
    #[test]
    fn ort_minutes_add_up_to_worked_minutes(ds in diensten(d("2026-10-01"), 31)) {
        // October 2026 holds the autumn clock change.
        let c = calc(&build("2026-10-01", "2026-10-31", &ds));
        let t = &c.totals;
        prop_assert_eq!(t.ort_minutes.iter().sum::<i64>() + t.no_ort_minutes + t.over_limit_minutes, t.worked_minutes);
        prop_assert_eq!(c.antwoord.mutaties.len(), 17);
    }

    #[test]
    fn splitting_a_block_changes_no_total(
        ds in diensten(d("2026-03-01"), 26),
        pick in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
    ) {
        // 1 to 26 March 2026: no clock change within a day of any block.
        let whole = calc(&build("2026-03-01", "2026-03-31", &ds));
        let blocks: Vec<(usize, usize)> = ds.iter().enumerate().flat_map(|(i, (_, _, s))| (0..s.len()).map(move |j| (i, j))).collect();
        prop_assume!(!blocks.is_empty());
        let (i, j) = blocks[pick.index(blocks.len())];
        let (off, len, kind) = ds[i].2[j];
        prop_assume!(len >= 2);
        let k = 1 + at.index(usize::from(len) - 1) as u16;
        let mut split = ds.clone();
        split[i].2[j] = (off, k, kind);
        split[i].2.insert(j + 1, (off + k, len - k, kind));
        same_figures(&whole, &calc(&build("2026-03-01", "2026-03-31", &split)))?;
    }

    #[test]
    fn the_order_of_diensten_does_not_matter(ds in diensten(d("2026-03-20"), 14).prop_shuffle().prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle()))) {
        // Late March 2026 into April: includes the spring clock change and Easter.
        let (a, b) = ds;
        let ca = calc(&build("2026-03-20", "2026-04-02", &a));
        let cb = calc(&build("2026-03-20", "2026-04-02", &b));
        same_figures(&ca, &cb)?;
        let codes = |c: &Calculation| { let mut v: Vec<String> = c.antwoord.waarschuwingen.iter().map(|w| w.code.to_string()).collect(); v.sort(); v };
        prop_assert_eq!(codes(&ca), codes(&cb));
    }

    #[test]
    fn no_input_panics(
        begin in 0u64..4000, len in 0u64..70, back in any::<bool>(),
        ds in diensten(d("2024-01-01"), 4000),
        code in prop::sample::select(vec!["ZKH", "GGZ", "4", "X"]),
        fg in 0i32..100, salary in any::<bool>(), vier in any::<bool>(),
    ) {
        let b = d("2024-01-01") + Days::new(begin);
        let e = if back { b - Days::new(len) } else { b + Days::new(len) };
        let mut v = build(&b.to_string(), &e.to_string(), &ds);
        v.dienstverband.cao.code = code.into();
        v.dienstverband.functiegroep = fg;
        v.dienstverband.cao.is_vier_weken = vier;
        if !salary { v.dienstverband.salaris = None; }
        if let Ok(c) = engine::calculate(&v, &Tables::built_in().unwrap(), true) {
            let t = &c.totals;
            prop_assert_eq!(t.ort_minutes.iter().sum::<i64>() + t.no_ort_minutes + t.over_limit_minutes, t.worked_minutes);
            prop_assert!(!c.explanation.unwrap().to_string().is_empty());
        }
    }

    #[test]
    fn the_ort_limit_holds_and_changes_nothing_within_it(
        ds in diensten(d("2026-03-01"), 31),
        werkweek in 1u32..40,
        parttime in 1u32..40,
    ) {
        // A small week makes the limit (max(contract, full time) x 52/12) often reached.
        let mut v = build("2026-03-01", "2026-03-31", &ds);
        v.dienstverband.cao.werkweek_uren = werkweek.into();
        v.dienstverband.parttime_uren = parttime.into();
        let with = calc(&v);
        let without = engine::calculate(&v, &without_limit(), false).unwrap();
        let t = &with.totals;
        let limit = t.ort_limit_minutes.expect("ZKH limits ORT");
        // ORT minutes never exceed the limit; every worked minute is counted once.
        prop_assert!(t.ort_minutes.iter().sum::<i64>() <= limit);
        prop_assert_eq!(t.ort_minutes.iter().sum::<i64>() + t.no_ort_minutes + t.over_limit_minutes, t.worked_minutes);
        // Only what lies above the limit loses ORT.
        let counted = t.worked_minutes + t.sick_minutes;
        prop_assert!(t.over_limit_minutes <= (counted - limit).max(0));
        if counted <= limit {
            prop_assert_eq!(t.over_limit_minutes, 0);
            prop_assert_eq!(&with.antwoord.mutaties, &without.antwoord.mutaties);
            prop_assert_eq!(&t.ort_minutes, &without.totals.ort_minutes);
        } else {
            for (a, b) in t.ort_minutes.iter().zip(&without.totals.ort_minutes) {
                prop_assert!(a <= b);
            }
        }
        // Hours are conserved: the extra hours and the overtime are what lies above the
        // contract norm (to the cent of an hour: each factor is rounded on its own).
        let factor = |code: &str| -> rust_decimal::Decimal {
            with.antwoord.mutaties.iter().find(|m| m.loonfactor_code == code).unwrap().waarde
        };
        let norm = rust_decimal::Decimal::from(parttime) * rust_decimal::Decimal::from(52) / rust_decimal::Decimal::from(12);
        let above = (rust_decimal::Decimal::from(counted) / rust_decimal::Decimal::from(60) - norm).max(rust_decimal::Decimal::ZERO);
        prop_assert!((factor("300") + factor("310") - above).abs() <= rust_decimal::Decimal::new(2, 2),
            "300 {} + 310 {} vs {}", factor("300"), factor("310"), above);
    }
}

/// The built-in tables with CAO Ziekenhuizen's ORT limit switched off: the engine as it
/// was before the limit.
fn without_limit() -> Tables {
    let text = std::fs::read_to_string(crate::common::root().join("data/cao.toml")).unwrap();
    assert!(text.contains("ort_tot_voltijd = true"));
    Tables::from_toml(&text.replacen("ort_tot_voltijd = true", "ort_tot_voltijd = false", 1)).unwrap()
}
