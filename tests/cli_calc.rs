//! `sbworker calc` as a user runs it: the real binary, files and standard input,
//! exit codes, and what goes to stdout and stderr.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use sbworker::contract::{self, Limits, Reden};

use crate::common::{root, xmllint, xsd};

fn calc(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sbworker"))
        .arg("calc")
        .args(args)
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sbworker runs");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or_default()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

#[test]
fn a_vraag_gets_an_antwoord_on_stdout() {
    let out = calc(&["schemas/examples/valid/vraag-voorbeeld2.xml"], None);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    xmllint(&xsd("LoonfactorBerekeningAntwoord"), &out.stdout).unwrap();
    let a = contract::decode_antwoord(&out.stdout, &Limits::default()).unwrap();
    let amount = a.mutaties.iter().find(|m| m.loonfactor_code == "230").unwrap();
    assert_eq!(amount.waarde.to_string(), "94.75");
    assert!(out.stderr.is_empty());
}

#[test]
fn standard_input_and_utf16_work_too() {
    let text = std::fs::read_to_string(root().join("schemas/examples/valid/vraag-voorbeeld1.xml")).unwrap();
    let mut utf16 = vec![0xFF, 0xFE];
    utf16.extend(text.encode_utf16().flat_map(u16::to_le_bytes));
    let out = calc(&["-"], Some(&utf16));
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8(out.stdout).unwrap().contains("<Waarde>28.63</Waarde>"));
}

#[test]
fn explain_goes_to_stderr_and_shows_each_stretch() {
    let out = calc(&["--explain", "schemas/examples/valid/vraag-voorbeeld2.xml"], None);
    assert_eq!(out.status.code(), Some(0));
    let explained = String::from_utf8(out.stderr).unwrap();
    for line in [
        "2026-04-19 sun 22:45-24:00   1:15 worked       60%  window zo,feestdag 00:00-24:00 at 60%",
        "2026-04-20 mon 00:00-06:00   6:00 worked       47%  window ma-vr 00:00-06:00 at 47%",
        "2026-04-20 mon 07:00-07:15   0:15 worked        -   no ORT window at this time",
        "  230 = 94.75",
    ] {
        assert!(explained.contains(line), "missing: {line}\n{explained}");
    }
    // stdout stays one XML document.
    assert!(contract::decode_antwoord(&out.stdout, &Limits::default()).is_ok());
}

#[test]
fn a_bad_vraag_gets_a_fout_on_stdout_and_the_reason_on_stderr() {
    let out = calc(&["schemas/examples/invalid/vraag-einde-25.xml"], None);
    assert_eq!(out.status.code(), Some(2));
    xmllint(&xsd("RekenserverFout"), &out.stdout).unwrap();
    let f = contract::decode_fout(&out.stdout, &Limits::default()).unwrap();
    assert_eq!(f.reden, Reden::InvalidValue);
    let why = String::from_utf8(out.stderr).unwrap();
    assert!(why.contains("Diensten/Dienst[3]/Tijdblok[1]/@Einde: '25:00' is not a time hh:mm"), "{why}");
    // An engine-level Fout carries the Vraag's Id.
    let mut v = contract::decode_vraag(
        &std::fs::read(root().join("schemas/examples/valid/vraag-voorbeeld1.xml")).unwrap(),
        &Limits::default(),
    )
    .unwrap();
    v.dienstverband.salaris = None;
    let out = calc(&["-"], Some(contract::encode_vraag(&v).as_bytes()));
    assert_eq!(out.status.code(), Some(2));
    let f = contract::decode_fout(&out.stdout, &Limits::default()).unwrap();
    assert_eq!((f.reden, f.vraag_id), (Reden::SalaryMissing, Some(v.id)));
}

#[test]
fn size_limit_and_unreadable_input_and_bad_tables() {
    let out = calc(&["--max-body-bytes", "100", "schemas/examples/valid/vraag-voorbeeld1.xml"], None);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(contract::decode_fout(&out.stdout, &Limits::default()).unwrap().reden, Reden::BodyTooLarge);

    let out = calc(&["no/such/file.xml"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read no/such/file.xml"));

    let dir = std::env::temp_dir().join(format!("sbworker-tables-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("cao.toml");
    let text = std::fs::read_to_string(root().join("data/cao.toml")).unwrap().replacen("pct = 22", "pct = 220", 1);
    std::fs::write(&bad, text).unwrap();
    let out = calc(&["--tables", bad.to_str().unwrap(), "schemas/examples/valid/vraag-voorbeeld1.xml"], None);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.status.code(), Some(1));
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(why.contains("cao[0] (ZKH).versie[0].vensters[0]: pct 220 is not between 1 and 100"), "{why}");
    assert!(out.stdout.is_empty());
}

#[test]
fn characters_xml_does_not_allow_get_a_well_formed_fout() {
    let body = std::fs::read_to_string(root().join("schemas/examples/valid/vraag-voorbeeld1.xml")).unwrap();
    let utf16 =
        |s: &str| -> Vec<u8> { [0xFF, 0xFE].into_iter().chain(s.encode_utf16().flat_map(u16::to_le_bytes)).collect() };
    // (the body, the reason, what stderr says)
    let cases = [
        (
            body.replace("<Naam>CAO Ziekenhuizen</Naam>", "<Naam>CAO\u{1}Ziekenhuizen</Naam>").into_bytes(),
            Reden::InvalidValue,
            "Dienstverband/Cao/Naam: holds U+0001, a character XML 1.0 does not allow (line 7, column 16)",
        ),
        (
            utf16(&body.replace("Code=\"L\"", "Code=\"L\u{0}\"")),
            Reden::InvalidValue,
            "Diensten/Dienst[1]/Tijdblok[1]/DienstType/@Code: holds U+0000",
        ),
        (
            body.replace("<Naam>CAO Ziekenhuizen</Naam>", "<Naam>CAO &#xFFFF;</Naam>").into_bytes(),
            Reden::InvalidValue,
            "Dienstverband/Cao/Naam: holds U+FFFF (as the character reference '&#xFFFF;')",
        ),
        // A message that quotes the input (quick-xml names the end tag it found): the
        // character is written as its escape.
        (body.replace("</Naam>", "</Naam\u{1F}>").into_bytes(), Reden::MalformedXml, "Naam\\u{1f}"),
    ];
    let mut fouts = Vec::new();
    for (input, reden, says) in cases {
        let out = calc(&["-"], Some(&input));
        let why = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{why}");
        let f = contract::decode_fout(&out.stdout, &Limits::default()).unwrap_or_else(|e| panic!("{e}: {why}"));
        assert_eq!(f.reden, reden, "{why}");
        assert!(f.error_message.contains(says), "{f:?}");
        assert!(why.contains(says) && !why.contains(|c: char| c.is_control() && c != '\n'), "{why:?}");
        fouts.push(out.stdout);
    }
    let docs: Vec<&[u8]> = fouts.iter().map(Vec::as_slice).collect();
    crate::common::xmllint_all(Some(&xsd("RekenserverFout")), &docs).unwrap();
}

#[test]
fn a_warning_is_in_the_antwoord_and_said_on_stderr() {
    // A CAO Ziekenhuizen full-timer with 2 hours above the 144 of a 4-week period: the
    // table holds no art. 8.4 percentage, so the Antwoord warns, and so does stderr.
    use crate::common::build::{dienst, vraag, w, weekday_shifts};
    let mut ds = weekday_shifts("2026-02-23", 18, "08:00", "16:00");
    ds.push(dienst("2026-03-19", vec![w("16:00", "18:00")]));
    let xml = contract::encode_vraag(&vraag("2026-02-23", "2026-03-22", true, ds));
    let out = calc(&["-"], Some(xml.as_bytes()));
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let a = contract::decode_antwoord(&out.stdout, &Limits::default()).unwrap();
    let codes: Vec<&str> = a.waarschuwingen.iter().map(|w| w.code.as_str()).collect();
    assert_eq!(codes, ["overwerk-zonder-percentage"]);
    let said = String::from_utf8(out.stderr).unwrap();
    assert!(said.starts_with("sbworker calc: warning overwerk-zonder-percentage: 2.00 overtime hours"), "{said}");
}
