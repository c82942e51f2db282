//! The example messages in `schemas/examples/` against xmllint and our codec.

use std::path::Path;

use sbworker::contract::{self, CONTRACT_VERSIE, Limits, Reden};

use crate::common::{root, root_of, xml_files, xmllint, xsd};

fn decode_and_reencode(path: &Path, bytes: &[u8], limits: &Limits) -> Result<String, contract::DecodeError> {
    Ok(match root_of(path) {
        "LoonfactorBerekeningVraag" => contract::encode_vraag(&contract::decode_vraag(bytes, limits)?),
        "LoonfactorBerekeningAntwoord" => contract::encode_antwoord(&contract::decode_antwoord(bytes, limits)?),
        _ => contract::encode_fout(&contract::decode_fout(bytes, limits)?),
    })
}

#[test]
fn valid_examples_pass_xmllint_and_decode_and_reencode_valid() {
    for path in xml_files(&root().join("schemas/examples/valid")) {
        let bytes = std::fs::read(&path).unwrap();
        let schema = xsd(root_of(&path));
        xmllint(&schema, &bytes).unwrap_or_else(|e| panic!("{}: xmllint: {e}", path.display()));
        let again = decode_and_reencode(&path, &bytes, &Limits::default())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        xmllint(&schema, again.as_bytes()).unwrap_or_else(|e| panic!("{} re-encoded: {e}\n{again}", path.display()));
        // Encoding is stable: decode(encode(x)) encodes to the same text.
        let twice = decode_and_reencode(&path, again.as_bytes(), &Limits::default()).unwrap();
        assert_eq!(again, twice, "{}", path.display());
    }
}

#[test]
fn invalid_examples_fail_xmllint_and_yield_a_fout_naming_the_path() {
    for path in xml_files(&root().join("schemas/examples/invalid")) {
        let bytes = std::fs::read(&path).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        let expect = text
            .strip_prefix("<!-- expect: ")
            .and_then(|r| r.split_once(" -->"))
            .map(|(p, _)| p.to_owned())
            .unwrap_or_else(|| panic!("{}: first line must be <!-- expect: PATH -->", path.display()));
        assert!(xmllint(&xsd(root_of(&path)), &bytes).is_err(), "{}: xmllint accepted it", path.display());
        let err = decode_and_reencode(&path, &bytes, &Limits::default())
            .expect_err(&format!("{}: our decoder accepted it", path.display()));
        let fout = err.to_fout();
        assert!(
            fout.error_message.starts_with(&format!("{expect}: ")),
            "{}: message '{}' does not name '{expect}'",
            path.display(),
            fout.error_message
        );
        assert!(fout.error_line > 0, "{}: no line in {fout:?}", path.display());
        assert_eq!(fout.error_number, err.reden.error_number());
        let xml = contract::encode_fout(&fout);
        xmllint(&xsd("RekenserverFout"), xml.as_bytes())
            .unwrap_or_else(|e| panic!("{}: Fout invalid: {e}\n{xml}", path.display()));
        assert_eq!(contract::decode_fout(xml.as_bytes(), &Limits::default()).unwrap(), fout);
    }
}

#[test]
fn the_vraag_id_is_in_the_fout_when_it_was_read() {
    let bytes = std::fs::read(root().join("schemas/examples/invalid/vraag-einde-25.xml")).unwrap();
    let fout = contract::decode_vraag(&bytes, &Limits::default()).unwrap_err().to_fout();
    assert_eq!(fout.vraag_id.unwrap().to_string(), "0b7e5f3a-1c2d-4e5f-8a9b-c0d1e2f3a4b5");
    assert_eq!(fout.reden, Reden::InvalidValue);
}

fn utf16(s: &str, le: bool, bom: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if bom {
        out.extend(if le { [0xFF, 0xFE] } else { [0xFE, 0xFF] });
    }
    for u in s.encode_utf16() {
        out.extend(if le { u.to_le_bytes() } else { u.to_be_bytes() });
    }
    out
}

#[test]
fn utf16_bodies_decode_like_utf8() {
    for path in xml_files(&root().join("schemas/examples/valid")) {
        if root_of(&path) != "LoonfactorBerekeningVraag" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let want = contract::decode_vraag(text.as_bytes(), &Limits::default()).unwrap();
        // As SQL Server sends an xml value: UTF-16LE with a BOM, often declaring it.
        let declared = format!(
            "<?xml version=\"1.0\" encoding=\"utf-16\"?>{}",
            text.trim_start_matches("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
        );
        for bytes in [
            utf16(&text, true, true),
            utf16(&text, false, true),
            utf16(&text, true, false),
            utf16(&declared, true, true),
        ] {
            assert_eq!(contract::decode_vraag(&bytes, &Limits::default()).unwrap(), want, "{}", path.display());
        }
    }
}

fn example(name: &str) -> String {
    std::fs::read_to_string(root().join("schemas/examples/valid").join(name)).unwrap()
}

#[test]
fn doctype_is_refused_before_any_entity_is_expanded() {
    let lol = "<?xml version=\"1.0\"?>\n<!DOCTYPE lolz [<!ENTITY lol \"lol\"><!ENTITY lol2 \"&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;\">]>\n";
    let body = example("vraag-voorbeeld1.xml").replace("<Naam>CAO Ziekenhuizen</Naam>", "<Naam>&lol2;</Naam>");
    let err = contract::decode_vraag(format!("{lol}{body}").as_bytes(), &Limits::default()).unwrap_err();
    assert_eq!(err.reden, Reden::DoctypeForbidden, "{err}");
    assert_eq!((err.line, err.column), (Some(2), Some(1)));
    // An undeclared entity without a DOCTYPE is malformed, not silently dropped.
    let err = contract::decode_vraag(body.as_bytes(), &Limits::default()).unwrap_err();
    assert_eq!(err.reden, Reden::MalformedXml, "{err}");
    assert!(err.path.ends_with("Dienstverband/Cao/Naam"), "{err}");
}

#[test]
fn size_and_depth_limits_apply() {
    let body = example("vraag-maand.xml");
    let small = Limits { max_body_bytes: body.len() - 1, ..Limits::default() };
    let err = contract::decode_vraag(body.as_bytes(), &small).unwrap_err();
    assert_eq!(err.reden, Reden::BodyTooLarge);
    assert!(contract::decode_vraag(body.as_bytes(), &Limits { max_body_bytes: body.len(), ..small }).is_ok());
    // The contract nests 4 levels below the root (Diensten/Dienst/Tijdblok/DienstType).
    let shallow = Limits { max_depth: 4, ..Limits::default() };
    let err = contract::decode_vraag(body.as_bytes(), &shallow).unwrap_err();
    assert_eq!(err.reden, Reden::TooDeep, "{err}");
    assert!(err.path.starts_with("Diensten/Dienst[1]/Tijdblok[1]/DienstType"), "{err}");
    assert!(contract::decode_vraag(body.as_bytes(), &Limits { max_depth: 5, ..Limits::default() }).is_ok());
}

#[test]
fn every_reason_code_is_in_the_fout_schema_and_back() {
    let xsd_text = std::fs::read_to_string(xsd("RekenserverFout")).unwrap();
    let listed: Vec<&str> =
        xsd_text.split("<xs:enumeration value=\"").skip(1).map(|r| r.split('"').next().unwrap()).collect();
    let ours: Vec<&str> = Reden::ALL.iter().map(|r| r.code()).collect();
    assert_eq!(listed, ours);
    let mut numbers: Vec<i32> = Reden::ALL.iter().map(|r| r.error_number()).collect();
    numbers.dedup();
    assert_eq!(numbers.len(), Reden::ALL.len());
    for r in Reden::ALL {
        assert_eq!(Reden::from_code(r.code()), Some(r));
    }
}

#[test]
fn trailing_content_and_wrong_documents_are_refused() {
    let body = example("vraag-voorbeeld1.xml");
    for (bad, reden) in [
        (format!("{body}<x/>"), Reden::MalformedXml),
        (format!("{body}tekst"), Reden::MalformedXml),
        (String::new(), Reden::MalformedXml),
        ("   ".to_owned(), Reden::MalformedXml),
        (body.replace("xmlns=\"http://www.sdbgroep.nl/MPlus/Rekenserver/2008\"", ""), Reden::WrongNamespace),
        (
            body.replace("<Diensten>", "<x:Diensten xmlns:x=\"urn:x\">").replace("</Diensten>", "</x:Diensten>"),
            Reden::WrongNamespace,
        ),
    ] {
        let err = contract::decode_vraag(bad.as_bytes(), &Limits::default()).unwrap_err();
        assert_eq!(err.reden, reden, "{err}");
    }
}

/// Line and column of `needle`'s first byte in `text` (1-based).
fn line_col(text: &str, needle: &str) -> (Option<u32>, Option<u32>) {
    let at = text.find(needle).expect("the needle is in the text");
    let line = text[..at].matches('\n').count() + 1;
    let column = text[..at].rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (Some(line as u32), Some(column as u32))
}

#[test]
fn errors_point_at_the_element_past_the_indentation_and_text_keeps_its_white_space() {
    // The reader skips the white space between elements; an error still names the
    // element's own '<', not the line break and indentation before it.
    let body = example("vraag-voorbeeld1.xml");
    // (what is replaced, by what, the reason expected, where the error must point)
    let cases = [
        ("    <Dienst Datum=", "    <Dienstje/>\n    <Dienst Datum=", Reden::UnexpectedElement, "<Dienstje/>"),
        ("<Tijdblok Begin=\"15:00\" ", "<Tijdblok ", Reden::MissingAttribute, "<Tijdblok "),
        ("  </Diensten>", "  stray text\n  </Diensten>", Reden::UnexpectedElement, "stray text"),
    ];
    for (from, to, reden, at) in cases {
        let bad = body.replacen(from, to, 1);
        let err = contract::decode_vraag(bad.as_bytes(), &Limits::default()).unwrap_err();
        assert_eq!(err.reden, reden, "{err}");
        assert_eq!((err.line, err.column), line_col(&bad, at), "{err}");
    }
    // Inside an element's text every character is kept, white space included.
    let spaced = body.replace("<Naam>CAO Ziekenhuizen</Naam>", "<Naam>\n  CAO Ziekenhuizen </Naam>");
    let v = contract::decode_vraag(spaced.as_bytes(), &Limits::default()).unwrap();
    assert_eq!(v.dienstverband.cao.naam, "\n  CAO Ziekenhuizen ");
}

/// The characters XML 1.0 does not allow that a string can hold.
fn forbidden() -> Vec<char> {
    crate::common::forbidden_chars()
}

/// `text` with `from` replaced once by `to`; and the 1-based line and column where `to`
/// begins plus `offset` characters.
fn put(text: &str, from: &str, to: &str, offset: usize) -> (String, (Option<u32>, Option<u32>)) {
    assert!(text.contains(from), "{from}");
    let bad = text.replacen(from, to, 1);
    let (line, col) = line_col(&bad, to);
    (bad, (line, col.map(|c| c + offset as u32)))
}

#[test]
fn characters_xml_does_not_allow_are_refused_raw_and_as_references_in_utf8_and_utf16() {
    let body = example("vraag-voorbeeld1.xml");
    const NAAM: &str = "<Naam>CAO Ziekenhuizen</Naam>";
    const CODE: &str = "<DienstType Code=\"L\"";
    const SOORT: &str = "<Soort>FT</Soort>";
    let mut fouts = Vec::new();
    let mut check = |bad: &str, reden: Reden, path: &str, at: (Option<u32>, Option<u32>), what: &str| {
        let le16: Vec<u8> = [0xFF, 0xFE].into_iter().chain(bad.encode_utf16().flat_map(u16::to_le_bytes)).collect();
        let be16: Vec<u8> = [0xFE, 0xFF].into_iter().chain(bad.encode_utf16().flat_map(u16::to_be_bytes)).collect();
        for (enc, bytes) in [("UTF-8", bad.as_bytes()), ("UTF-16LE", &le16), ("UTF-16BE", &be16)] {
            let err = contract::decode_vraag(bytes, &Limits::default()).unwrap_err();
            assert_eq!((err.reden, err.path.as_str()), (reden, path), "{what} ({enc}): {err}");
            assert_eq!((err.line, err.column), at, "{what} ({enc}): {err}");
            let fout = err.to_fout();
            assert_eq!(fout.reden, reden, "{what} ({enc})");
            // The Id is read with the root's attributes: known after them.
            assert_eq!(fout.vraag_id.is_some(), !path.starts_with('@'), "{what} ({enc})");
            fouts.push(contract::encode_fout(&fout));
        }
    };
    // Raw, in a text, in an attribute value (invalid-value, at the character) and in
    // markup (malformed-xml, at the character).
    for c in forbidden() {
        let what = format!("U+{:04X}", u32::from(c));
        let (bad, at) = put(&body, NAAM, &format!("<Naam>CAO {c}Ziekenhuizen</Naam>"), 10);
        check(&bad, Reden::InvalidValue, "Dienstverband/Cao/Naam", at, &format!("{what} in a text"));
        let (bad, at) = put(&body, CODE, &format!("<DienstType Code=\"L{c}\""), 19);
        let path = "Diensten/Dienst[1]/Tijdblok[1]/DienstType/@Code";
        check(&bad, Reden::InvalidValue, path, at, &format!("{what} in an attribute"));
        let (bad, at) = put(&body, SOORT, &format!("<Soort{c}>FT</Soort{c}>"), 6);
        check(&bad, Reden::MalformedXml, "Dienstverband", at, &format!("{what} in a name"));
        let (bad, at) = put(&body, SOORT, &format!("<!-- {c} -->{SOORT}"), 5);
        check(&bad, Reden::MalformedXml, "Dienstverband", at, &format!("{what} in a comment"));
    }
    // As a character reference, decimal and hexadecimal: also those that stand for no
    // character at all (0, surrogates, past U+10FFFF). Errors point at the reference in
    // a text, at the element for an attribute.
    let numbers = forbidden().into_iter().map(u32::from).chain([0xD800, 0xDBFF, 0xDC00, 0xDFFF, 0x110000]);
    for n in numbers {
        for r in [format!("&#{n};"), format!("&#x{n:X};")] {
            let (bad, at) = put(&body, NAAM, &format!("<Naam>CAO {r}Ziekenhuizen</Naam>"), 10);
            check(&bad, Reden::InvalidValue, "Dienstverband/Cao/Naam", at, &format!("{r} in a text"));
            let (bad, at) = put(&body, CODE, &format!("<DienstType Code=\"L{r}\""), 0);
            let path = "Diensten/Dienst[1]/Tijdblok[1]/DienstType/@Code";
            check(&bad, Reden::InvalidValue, path, at, &format!("{r} in an attribute"));
        }
    }
    // In namespace declarations and in the attributes the contract ignores (xsi:): the
    // same, named by their qualified name.
    const ROOT: &str = "Versie=\"1\"";
    const DV: &str = "<Dienstverband Id=\"3062\"";
    const XSI: &str = "xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\"";
    for (from, to, path) in [
        (ROOT, format!("{ROOT} xmlns:x=\"urn:\u{1}\""), "@xmlns:x"),
        (DV, format!("{DV} xmlns:x=\"urn:\u{1}\""), "Dienstverband/@xmlns:x"),
        (ROOT, format!("{ROOT} {XSI} xsi:type=\"t\u{1}\""), "@xsi:type"),
        (ROOT, format!("{ROOT} {XSI} xsi:type=\"t&#1;\""), "@xsi:type"),
    ] {
        let (bad, at) = match to.find('\u{1}') {
            Some(i) => put(&body, from, &to, to[..i].chars().count()),
            // A reference in an attribute: at the element.
            None => {
                let bad = body.replacen(from, &to, 1);
                let at = line_col(&bad, "<LoonfactorBerekeningVraag");
                (bad, at)
            }
        };
        check(&bad, Reden::InvalidValue, path, at, &to);
    }
    // Every Fout is valid (one xmllint process for all of them).
    let docs: Vec<&[u8]> = fouts.iter().map(|f| f.as_bytes()).collect();
    crate::common::xmllint_all(Some(&xsd("RekenserverFout")), &docs).unwrap();

    // An unpaired surrogate is no character in UTF-16 at all: the body is not UTF-16.
    let mut units: Vec<u16> = body.encode_utf16().collect();
    let at = body.find("CAO Ziekenhuizen").unwrap();
    units.insert(body[..at].encode_utf16().count(), 0xD800);
    let le16: Vec<u8> = [0xFF, 0xFE].into_iter().chain(units.iter().flat_map(|u| u.to_le_bytes())).collect();
    assert_eq!(contract::decode_vraag(&le16, &Limits::default()).unwrap_err().reden, Reden::BadEncoding);

    // What XML does allow, next to what it does not, raw and as references, is kept.
    let allowed = "\t\u{7F}\u{85}\u{D7FF}\u{E000}\u{FFFD}\u{10000}\u{10FFFF}";
    let refs = "&#9;&#xA;&#xD;&#x7F;&#xD7FF;&#xE000;&#xFFFD;&#x10000;&#x10FFFF;";
    let good = body
        .replace(NAAM, &format!("<Naam>{allowed}{refs}</Naam>"))
        .replace(CODE, &format!("<DienstType Code=\"L{refs}\""));
    let v = contract::decode_vraag(good.as_bytes(), &Limits::default()).unwrap();
    let from_refs = "\t\n\r\u{7F}\u{D7FF}\u{E000}\u{FFFD}\u{10000}\u{10FFFF}";
    assert_eq!(v.dienstverband.cao.naam, format!("{allowed}{from_refs}"));
    assert_eq!(v.diensten.dienst[0].tijdblokken[0].dienst_type.code, format!("L{from_refs}").as_str());
}

#[test]
fn a_vraag_of_a_later_contract_version_is_refused_as_the_environments_fault() {
    // A newer sender's Vraag: a later ContractVersie and an element this worker does not
    // know. Refused before the element is judged, as newer-contract (which the collector
    // records as repairable), naming the versions and with the Vraag's Id.
    let text = example("vraag-voorbeeld1.xml");
    let newer = text
        .replacen("Versie=\"1\">", &format!("Versie=\"1\" ContractVersie=\"{}\">", CONTRACT_VERSIE + 1), 1)
        .replacen("</LoonfactorBerekeningVraag>", "<Toekomst/></LoonfactorBerekeningVraag>", 1);
    assert_ne!(newer, text);
    let e = contract::decode_vraag(newer.as_bytes(), &Limits::default()).unwrap_err();
    assert_eq!(e.reden, contract::Reden::NewerContract, "{e}");
    assert!(e.detail.contains(&format!("contract version {}", CONTRACT_VERSIE + 1)), "{e}");
    assert!(e.detail.contains(&format!("knows versions up to {CONTRACT_VERSIE}")), "{e}");
    assert!(e.message_id.is_some());
    let fout = e.to_fout();
    assert_eq!(fout.reden, contract::Reden::NewerContract);
    xmllint(&xsd("RekenserverFout"), contract::encode_fout(&fout).as_bytes()).unwrap();
    // Written with a character reference, the later version is refused the same way.
    let referenced = text.replacen(
        "Versie=\"1\">",
        &format!("Versie=\"1\" ContractVersie=\"&#{};\">", u32::from(b'0') + CONTRACT_VERSIE + 1),
        1,
    );
    let e = contract::decode_vraag(referenced.as_bytes(), &Limits::default()).unwrap_err();
    assert_eq!(e.reden, contract::Reden::NewerContract, "{e}");
    // The same unknown element in a Vraag of this version, or of none (the shapes before
    // the attribute), is the request's own fault.
    for stamp in [format!(" ContractVersie=\"{CONTRACT_VERSIE}\""), String::new()] {
        let v = text.replacen("Versie=\"1\">", &format!("Versie=\"1\"{stamp}>"), 1).replacen(
            "</LoonfactorBerekeningVraag>",
            "<Toekomst/></LoonfactorBerekeningVraag>",
            1,
        );
        let e = contract::decode_vraag(v.as_bytes(), &Limits::default()).unwrap_err();
        assert_eq!(e.reden, contract::Reden::UnexpectedElement, "{e}");
    }
    // This version, written with the lexical freedom of xs:positiveInteger, decodes; 0
    // is no contract version.
    let v = text.replacen("Versie=\"1\">", &format!("Versie=\"1\" ContractVersie=\" +{CONTRACT_VERSIE}\">"), 1);
    let decoded = contract::decode_vraag(v.as_bytes(), &Limits::default()).unwrap();
    assert_eq!(decoded.contract_versie, Some(CONTRACT_VERSIE));
    let v = text.replacen("Versie=\"1\">", "Versie=\"1\" ContractVersie=\"0\">", 1);
    let e = contract::decode_vraag(v.as_bytes(), &Limits::default()).unwrap_err();
    assert_eq!(e.reden, contract::Reden::InvalidValue, "{e}");
}

#[test]
fn the_senders_write_this_contract_version() {
    // Both senders stamp the version this worker knows (a literal in their SQL).
    let pg = std::fs::read_to_string(root().join("broker/postgres/004_roster.sql")).unwrap();
    assert!(pg.contains(&format!("{CONTRACT_VERSIE} AS \"ContractVersie\"")));
    let ms = std::fs::read_to_string(root().join("broker/mssql/04_roster.sql")).unwrap();
    assert!(ms.contains(&format!("{CONTRACT_VERSIE} AS '@ContractVersie'")));
}
