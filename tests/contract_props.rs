//! Property tests of the codec: model → XML → model is the identity, arbitrary or
//! mutated bytes never panic the decoder, whatever the encoder writes is valid against
//! its XSD, and well-formed XML whatever strings it is given (xmllint, a third-party
//! parser, is the judge).

use chrono::NaiveDate;
use proptest::prelude::*;
use rust_decimal::Decimal;
use sbworker::contract::values::{ClockTime, Timestamp};
use sbworker::contract::*;
use uuid::Uuid;

use crate::common::{forbidden_chars, root, xmllint, xmllint_all, xsd};

/// `s` as the encoder and the Fout write it: each character XML does not allow as its
/// escape (`\u{1}`).
fn replaced(s: &str) -> String {
    let bad = forbidden_chars();
    s.chars().map(|c| if bad.contains(&c) { c.escape_unicode().to_string() } else { c.to_string() }).collect()
}

/// Any string, with the characters XML does not allow and those it escapes often.
fn any_text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            4 => any::<char>(),
            3 => prop::sample::select(forbidden_chars()),
            2 => prop::sample::select(vec!['&', '<', '>', '"', '\'', '\r', '\n', '\t', ']', ' ']),
        ],
        0..max,
    )
    .prop_map(|v| v.into_iter().collect())
}

fn date() -> impl Strategy<Value = NaiveDate> {
    (0i64..60_000).prop_map(|d| NaiveDate::from_ymd_opt(1950, 1, 1).unwrap() + chrono::Days::new(d as u64))
}

fn clock() -> impl Strategy<Value = ClockTime> {
    (0u16..24, 0u16..60).prop_map(|(h, m)| ClockTime::from_hm(h, m).unwrap())
}

fn timestamp() -> impl Strategy<Value = Timestamp> {
    (
        date(),
        0u32..24,
        0u32..60,
        0u32..60,
        prop::option::of(0u32..1000),
        prop_oneof![Just(""), Just("Z"), Just("+01:00"), Just("-05:30")],
    )
        .prop_map(|(d, h, m, s, ms, z)| {
            let frac = ms.map(|ms| format!(".{ms:03}")).unwrap_or_default();
            format!("{}T{h:02}:{m:02}:{s:02}{frac}{z}", d.format("%Y-%m-%d")).parse().unwrap()
        })
}

fn decimal(max_units: i64, max_scale: u32) -> impl Strategy<Value = Decimal> {
    (0u32..=max_scale).prop_flat_map(move |scale| {
        let bound = max_units * 10i64.pow(scale);
        (0..=bound).prop_map(move |m| Decimal::new(m, scale))
    })
}

fn token() -> impl Strategy<Value = String> {
    "[A-Za-z0-9][A-Za-z0-9._-]{0,19}"
}

/// Free text as XML can carry it: any character but the control characters XML 1.0
/// excludes (CR, LF and tab included: the encoder must preserve them).
fn text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop_oneof![8 => any::<char>().prop_filter("xml char", |c| !c.is_control() && !matches!(c, '\u{FFFE}' | '\u{FFFF}')), 1 => Just('\n'), 1 => Just('\r'), 1 => Just('\t'), 1 => Just('&'), 1 => Just('<'), 1 => Just('"'), 1 => Just(' ')], 0..max)
        .prop_map(|v| v.into_iter().collect())
}

fn uuid() -> impl Strategy<Value = Uuid> {
    any::<u128>().prop_map(Uuid::from_u128)
}

prop_compose! {
    fn dienstverband()(id in any::<i32>(), cao_id in any::<i32>(), code in token(), vier in any::<bool>(), naam in text(100),
        werkweek in decimal(168, 4), dagen in decimal(7, 2), in_dienst in date(), uit in prop::option::of(date()),
        pt in decimal(168, 4), salaris in prop::option::of((decimal(1_000_000, 4), prop::option::of(decimal(10_000, 2)),
            prop::option::of(decimal(10_000, 2)), prop::option::of(decimal(10_000, 2)))),
        soort in token(), fg in 0i32..=999) -> Dienstverband {
        Dienstverband {
            id,
            cao: Cao { id: cao_id, code: code.into(), is_vier_weken: vier, naam, werkweek_uren: werkweek },
            dagen_per_week: dagen,
            datum_in_dienst: in_dienst,
            datum_uit_dienst: uit,
            parttime_uren: pt,
            salaris: salaris.map(|(n, a, b, c)| Salaris { nominaal_salaris: n, garantie_toeslag: a, garantie_trede_bedrag: b, loon_toeslag: c }),
            soort: soort.into(),
            functiegroep: fg,
        }
    }
}

prop_compose! {
    fn tijdblok()(begin in clock(), einde in clock(), ziek in any::<bool>(), code in token(), telt in any::<bool>(),
        verlof in prop::option::of(prop::sample::select(vec![Verlof::Wettelijk, Verlof::Bovenwettelijk, Verlof::Overig]))) -> Tijdblok {
        // A leave block is not sick.
        Tijdblok { begin, einde, is_ziek: ziek, dienst_type: DienstType { code: code.into(), telt_mee_in_gewerkte_uren: telt },
            verlof: if ziek { None } else { verlof } }
    }
}

prop_compose! {
    fn historie_periode()(id in any::<i32>(), begin in date(), einde in date(),
        factoren in prop::collection::vec(("[0-9]{3}", any::<bool>(), decimal(999_999_999, 4)), 0..6)) -> HistoriePeriode {
        HistoriePeriode { id, begin, einde,
            factoren: factoren.into_iter().map(|(c, neg, d)| (c.as_str().into(), if neg { -d } else { d })).collect() }
    }
}

prop_compose! {
    fn vraag()(id in uuid(), ts in timestamp(), versie in 0i64..=i64::MAX, dv in dienstverband(), pid in any::<i32>(),
        begin in date(), einde in date(),
        diensten in prop::collection::vec((date(), prop::collection::vec(tijdblok(), 1..4)), 0..8),
        historie in prop::collection::vec(historie_periode(), 0..3),
        contract_versie in prop::option::of(1u32..=sbworker::contract::CONTRACT_VERSIE)) -> Vraag {
        Vraag {
            id, timestamp: ts, versie, dienstverband: dv,
            periode: Periode { id: pid, begin, einde },
            diensten: Diensten { dienst: diensten.into_iter().map(|(datum, tijdblokken)| Dienst { datum, tijdblokken }).collect() },
            historie,
            contract_versie,
        }
    }
}

fn waarde() -> impl Strategy<Value = Decimal> {
    (any::<bool>(), decimal(9_999_999, 2)).prop_map(|(neg, d)| if neg { -d } else { d })
}

prop_compose! {
    fn mutatie()(dv in any::<i32>(), ks in any::<i32>(), code in "[0-9]{3}", per in any::<i32>(), w in waarde(),
        kp in prop::option::of(any::<i32>()), kso in prop::option::of(any::<i32>())) -> VariabeleMutatie {
        VariabeleMutatie { dienstverband_id: dv, kaart_soort: ks, loonfactor_code: code, periode_id: per, waarde: w, kosten_plaats_id: kp, kosten_soort_id: kso }
    }
}

prop_compose! {
    fn antwoord()(id in uuid(), ts in timestamp(), versie in 0i64..=i64::MAX, dv in any::<i32>(), per in any::<i32>(),
        mutaties in prop::collection::vec(mutatie(), 0..12),
        w in prop::collection::vec(("[a-z][a-z0-9-]{0,20}", prop::option::of(date()), text(60)), 0..3),
        rekenversie in prop::option::of("[a-z0-9 .]{1,40}")) -> Antwoord {
        // Each wage factor code once, as the contract says.
        let mut seen = std::collections::HashSet::new();
        let mutaties: Vec<VariabeleMutatie> =
            mutaties.into_iter().filter(|m| seen.insert(m.loonfactor_code.clone())).collect();
        Antwoord { id, timestamp: ts, versie, dienstverband_id: dv, periode_id: per, mutaties,
            waarschuwingen: w.into_iter().map(|(code, datum, tekst)| Waarschuwing { code: code.into(), datum, tekst }).collect(),
            rekenversie }
    }
}

prop_compose! {
    fn fout()(n in any::<i32>(), s in any::<i32>(), st in any::<i32>(), p in text(40), l in any::<i32>(), m in text(200),
        v in prop::option::of(uuid()), r in prop::sample::select(Reden::ALL.to_vec())) -> RekenserverFout {
        RekenserverFout { error_number: n, error_severity: s, error_state: st, error_procedure: p, error_line: l, error_message: m, vraag_id: v, reden: r }
    }
}

proptest! {
    #[test]
    fn vraag_roundtrips(v in vraag()) {
        let xml = encode_vraag(&v);
        prop_assert_eq!(decode_vraag(xml.as_bytes(), &Limits::default()).unwrap(), v);
    }

    #[test]
    fn antwoord_roundtrips(a in antwoord()) {
        let xml = encode_antwoord(&a);
        prop_assert_eq!(decode_antwoord(xml.as_bytes(), &Limits::default()).unwrap(), a);
    }

    #[test]
    fn fout_roundtrips(f in fout()) {
        let xml = encode_fout(&f);
        prop_assert_eq!(decode_fout(xml.as_bytes(), &Limits::default()).unwrap(), f);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let l = Limits::default();
        let _ = decode_vraag(&bytes, &l);
        let _ = decode_antwoord(&bytes, &l);
        let _ = decode_fout(&bytes, &l);
    }

    #[test]
    fn mutated_examples_never_panic_and_errors_render(
        cut in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        which in 0usize..3,
    ) {
        let name = ["vraag-voorbeeld2.xml", "antwoord-voorbeeld1.xml", "fout-tijd.xml"][which];
        let mut bytes = std::fs::read(root().join("schemas/examples/valid").join(name)).unwrap();
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        let keep = cut.index(bytes.len() + 1);
        bytes.truncate(keep.max(bytes.len() * 3 / 4));
        let l = Limits::default();
        let r = match which {
            0 => decode_vraag(&bytes, &l).map(|_| ()),
            1 => decode_antwoord(&bytes, &l).map(|_| ()),
            _ => decode_fout(&bytes, &l).map(|_| ()),
        };
        if let Err(e) = r {
            let f = e.to_fout();
            prop_assert!(!f.error_message.is_empty());
            prop_assert_eq!(decode_fout(encode_fout(&f).as_bytes(), &l).unwrap(), f);
        }
    }
}

proptest! {
    // Each case runs xmllint twice (two processes): fewer cases, same generators.
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn what_the_encoder_writes_is_schema_valid(a in antwoord(), f in fout(), v in vraag()) {
        let xa = encode_antwoord(&a);
        prop_assert!(xmllint(&xsd("LoonfactorBerekeningAntwoord"), xa.as_bytes()).is_ok(), "{}", xa);
        let xf = encode_fout(&f);
        prop_assert!(xmllint(&xsd("RekenserverFout"), xf.as_bytes()).is_ok(), "{}", xf);
        let xv = encode_vraag(&v);
        prop_assert!(xmllint(&xsd("LoonfactorBerekeningVraag"), xv.as_bytes()).is_ok(), "{}", xv);
    }
}

proptest! {
    // One xmllint process per case, for three documents.
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every string the encoder writes, as text or as an attribute value, with any
    /// characters at all: the documents are well-formed, and the Fout's message reads
    /// back with the characters XML does not allow replaced.
    #[test]
    fn what_the_encoder_writes_is_well_formed_whatever_the_strings(
        a in antwoord(), f in fout(), v in vraag(),
        s in prop::collection::vec(any_text(40), 9),
    ) {
        let mut a = a;
        if a.mutaties.is_empty() {
            a.mutaties.push(VariabeleMutatie { dienstverband_id: 1, kaart_soort: 1, loonfactor_code: String::new(), periode_id: 1, waarde: Decimal::ONE, kosten_plaats_id: None, kosten_soort_id: None });
        }
        a.mutaties[0].loonfactor_code = s[0].clone();
        a.waarschuwingen.push(Waarschuwing { code: s[1].as_str().into(), datum: None, tekst: s[2].clone() });
        let mut f = f;
        f.error_procedure = s[3].clone();
        f.error_message = s[4].clone();
        let mut v = v;
        v.dienstverband.cao.code = s[5].as_str().into();
        v.dienstverband.cao.naam = s[6].clone();
        v.dienstverband.soort = s[7].as_str().into();
        v.diensten.dienst.push(Dienst { datum: v.periode.begin, tijdblokken: vec![Tijdblok {
            begin: ClockTime::from_hm(7, 0).unwrap(), einde: ClockTime::from_hm(8, 0).unwrap(), is_ziek: false,
            dienst_type: DienstType { code: s[8].as_str().into(), telt_mee_in_gewerkte_uren: true }, verlof: None,
        }] });
        let (xa, xf, xv) = (encode_antwoord(&a), encode_fout(&f), encode_vraag(&v));
        let lint = xmllint_all(None, &[xa.as_bytes(), xf.as_bytes(), xv.as_bytes()]);
        prop_assert!(lint.is_ok(), "{}\n{:?}\n{:?}\n{:?}", lint.unwrap_err(), xa, xf, xv);
        let back = decode_fout(xf.as_bytes(), &Limits::default()).unwrap();
        prop_assert_eq!(back.error_message, replaced(&f.error_message));
        prop_assert_eq!(back.error_procedure, replaced(&f.error_procedure));
        // A Fout built by `fout_for` holds the replaced message already: it reads back equal.
        let built = fout_for(f.reden, f.error_message.clone(), None, None);
        prop_assert_eq!(&built.error_message, &replaced(&f.error_message));
        prop_assert_eq!(decode_fout(encode_fout(&built).as_bytes(), &Limits::default()).unwrap(), built);
    }
}

/// The judge above can fail: xmllint refuses each character XML does not allow, raw and
/// as a reference, in text and in an attribute value (one process: it names each
/// document it refuses).
#[test]
fn xmllint_refuses_what_xml_does_not_allow() {
    let mut docs = Vec::new();
    for c in forbidden_chars() {
        docs.push(format!("<a>x{c}y</a>"));
        docs.push(format!("<a b=\"x{c}y\"/>"));
        docs.push(format!("<a>&#{};</a>", u32::from(c)));
        docs.push(format!("<a b=\"&#x{:X};\"/>", u32::from(c)));
    }
    docs.push("<a>&#xD800;</a>".to_owned());
    let bytes: Vec<&[u8]> = docs.iter().map(|d| d.as_bytes()).collect();
    let complaint = xmllint_all(None, &bytes).expect_err("xmllint accepted them all");
    for (i, d) in docs.iter().enumerate() {
        assert!(complaint.contains(&format!("/doc{i}.xml:")), "xmllint accepted {d:?}:\n{complaint}");
    }
    assert!(xmllint_all(None, &[b"<a b=\"&#9;\">\t\r\n&#xD;\xEF\xBF\xBD</a>"]).is_ok());
}
