//! The example messages in `schemas/examples/` against xmllint and our codec.

use std::path::Path;

use sbworker::contract::{self, Limits, Reden};

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
