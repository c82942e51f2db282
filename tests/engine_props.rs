//! Property tests of the engine: ORT minutes add up to the worked minutes, splitting a
//! block at any minute changes no total, the order of Diensten does not matter, the ORT
//! limit (art. 9.1 lid 1-2) holds and changes nothing within it, moving a sick or leave
//! block to another free day changes no factor, ORT and overtime hours stay within the
//! worked hours, every code written is fixed or the table's, and no input panics.

use chrono::{Days, NaiveDate};
use proptest::prelude::*;
use sbworker::contract::values::ClockTime;
use sbworker::contract::{Dienst, DienstType, HistoriePeriode, Tijdblok, Verlof, Vraag};
use sbworker::engine::{self, Calculation, Tables};

use crate::common::build::{d, vraag};

/// A block as (minutes after the Dienst's anchor, length, kind 0 worked / 1 sick / 2 other
/// / 3 statutory vacation / 4 other leave).
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
        dienst_type: DienstType { code: "X".into(), telt_mee_in_gewerkte_uren: kind < 2 },
        verlof: match kind {
            3 => Some(Verlof::Wettelijk),
            4 => Some(Verlof::Overig),
            _ => None,
        },
    }
}

/// Blocks in order after the anchor, all within 24 hours of it.
fn specs() -> impl Strategy<Value = Vec<Spec>> {
    prop::collection::vec(
        (
            0u16..240,
            1u16..600,
            prop_oneof![6 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8), 1 => Just(4u8)],
        ),
        1..4,
    )
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
        prop_assert_eq!(c.antwoord.mutaties.len(), 19);
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
        let tables = Tables::built_in().unwrap();
        if let Ok(c) = engine::calculate(&v, &tables, true) {
            let t = &c.totals;
            prop_assert_eq!(t.ort_minutes.iter().sum::<i64>() + t.no_ort_minutes + t.over_limit_minutes, t.worked_minutes);
            overtime_is_placed_whole(t)?;
            // Every code written is one the engine writes for every CAO, or one the CAO's
            // table assigns (an ORT rate or an overtime percentage), and each once.
            let cao = tables.cao(code).unwrap();
            let assigned: Vec<&str> = cao.rates.iter().map(|r| r.code.as_str())
                .chain(cao.overtime.iter().flat_map(|o| o.rates.iter().map(|r| r.code.as_str()))).collect();
            let written: Vec<&str> = c.antwoord.mutaties.iter().map(|m| m.loonfactor_code.as_str()).collect();
            for w in &written {
                prop_assert!(engine::codes::is_fixed(w) || assigned.contains(w), "code {} is in no list", w);
            }
            prop_assert_eq!(written.len(), engine::codes::FIXED.len() + assigned.len());
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
        // ORT minutes never exceed the room the sick and leave minutes leave in the limit.
        let off = t.sick_minutes + t.leave_minutes.iter().sum::<i64>();
        prop_assert!(t.ort_minutes.iter().sum::<i64>() <= (limit - off).max(0));
        prop_assert_eq!(t.ort_minutes.iter().sum::<i64>() + t.no_ort_minutes + t.over_limit_minutes, t.worked_minutes);
        // Only what lies above the limit loses ORT.
        let counted = t.worked_minutes + t.sick_minutes + t.leave_minutes.iter().sum::<i64>();
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
        // ORT minutes and overtime minutes never exceed the worked minutes: overtime is
        // work above the roster's hours and carries no ORT (art. 9.1 lid 1, 8.5 lid 3).
        prop_assert!(t.ort_minutes.iter().sum::<i64>() + t.overtime_minutes <= t.worked_minutes);
        prop_assert_eq!(t.over_limit_minutes, t.overtime_minutes);
        overtime_is_placed_whole(t)?;
        // Hours are conserved: the extra hours are what lies above the contract norm up to
        // full time (art. 8.5 lid 1), the overtime what lies above full time and at most the
        // worked hours (art. 8.1: it is work); to the cent of an hour, each factor being
        // rounded on its own.
        use rust_decimal::Decimal;
        let factor = |code: &str| -> Decimal {
            with.antwoord.mutaties.iter().find(|m| m.loonfactor_code == code).unwrap().waarde
        };
        let weeks = |h: u32| Decimal::from(h) * Decimal::from(52) / Decimal::from(12);
        let (norm, full) = (weeks(parttime), weeks(parttime.max(werkweek)));
        let hours = |m: i64| Decimal::from(m) / Decimal::from(60);
        let total = hours(counted);
        let extra = (total - norm).min(full - norm).max(Decimal::ZERO);
        let over = (total - full).max(Decimal::ZERO).min(hours(t.worked_minutes));
        let cent = Decimal::new(1, 2);
        prop_assert!((factor("300") - extra).abs() <= cent, "300 {} vs {}", factor("300"), extra);
        prop_assert!((factor("310") - over).abs() <= cent, "310 {} vs {}", factor("310"), over);
        prop_assert!((factor("310") - hours(t.overtime_minutes)).abs() <= cent, "310 {} vs placed {}", factor("310"), t.overtime_minutes);
        let ort: Decimal = ["210", "211", "212", "213", "214"].iter().map(|c| factor(c)).sum();
        prop_assert!(ort + factor("310") <= factor("100") + Decimal::new(6, 2));
    }

    #[test]
    fn moving_a_sick_or_leave_block_changes_no_factor(
        ds in diensten(d("2026-03-01"), 31),
        kind in prop::sample::select(vec![1u8, 3, 4]),
        len in 60u16..600,
        from in any::<prop::sample::Index>(),
        to in any::<prop::sample::Index>(),
        werkweek in 1u32..16,
        code in prop::sample::select(vec!["ZKH", "GGZ"]),
    ) {
        // An 08:00 block of sick hours, statutory vacation or other leave, on one free day
        // of March 2026 or another (a day with no Dienst on it or the day before, so no
        // block overlaps it): first, last or between the worked hours. Sick and leave
        // hours fill the limit wherever they fall, so no factor may change. A small week
        // makes the limit often reached; a stored period gives vacation an average.
        let taken: Vec<NaiveDate> = ds.iter().map(|(date, _, _)| *date).collect();
        let free: Vec<NaiveDate> = (0..31u64).map(|n| d("2026-03-01") + Days::new(n))
            .filter(|f| !taken.contains(f) && !taken.iter().any(|t| *t + Days::new(1) == *f)).collect();
        prop_assume!(!free.is_empty());
        let (a, b) = (free[from.index(free.len())], free[to.index(free.len())]);
        let with_block_on = |day: NaiveDate| {
            let mut all = ds.clone();
            all.push((day, 8 * 60, vec![(0, len, kind)]));
            let mut v = build("2026-03-01", "2026-03-31", &all);
            v.dienstverband.cao.code = code.into();
            v.dienstverband.cao.werkweek_uren = werkweek.into();
            v.dienstverband.parttime_uren = werkweek.into();
            v.historie = vec![HistoriePeriode {
                id: 202602,
                begin: d("2026-02-01"),
                einde: d("2026-02-28"),
                factoren: vec![("100".into(), 100.into()), ("212".into(), 30.into()), ("214".into(), 10.into())],
            }];
            calc(&v)
        };
        let (ca, cb) = (with_block_on(a), with_block_on(b));
        prop_assert_eq!(&ca.antwoord.mutaties, &cb.antwoord.mutaties);
        prop_assert_eq!(&ca.antwoord.waarschuwingen, &cb.antwoord.waarschuwingen);
    }
}

/// The overtime minutes are placed whole: each in an overtime rate or in none.
fn overtime_is_placed_whole(t: &engine::Totals) -> Result<(), TestCaseError> {
    prop_assert_eq!(t.overtime_rate_minutes.iter().sum::<i64>() + t.overtime_unpaid_minutes, t.overtime_minutes);
    prop_assert!(t.overtime_minutes <= t.worked_minutes);
    Ok(())
}

/// The built-in tables with CAO Ziekenhuizen's ORT limit switched off: the engine as it
/// was before the limit.
fn without_limit() -> Tables {
    let text = std::fs::read_to_string(crate::common::root().join("data/cao.toml")).unwrap();
    assert!(text.contains("ort_tot_voltijd = true"));
    Tables::from_toml(&text.replacen("ort_tot_voltijd = true", "ort_tot_voltijd = false", 1)).unwrap()
}
