//! Strict decoders for the three messages, one function per element.
//!
//! Each function reads its element's attributes, then its children in schema order
//! (see `cursor`), and builds the typed model. Every error carries the element path,
//! line and column, and a reason code.

use super::CONTRACT_VERSIE;
use super::body::{Limits, body_text};
use super::cursor::{Child, Cursor, many, one};
use super::error::DecodeError;
use super::model::{
    Antwoord, Cao, Dienst, DienstType, Diensten, Dienstverband, HistoriePeriode, Periode, Reden, RekenserverFout,
    Salaris, Tijdblok, VariabeleMutatie, Verlof, Vraag, Waarschuwing,
};
use super::values::{
    Timestamp, parse_bit, parse_clock, parse_contract_version, parse_date, parse_decimal, parse_int, parse_uuid,
    parse_version, xml_trim,
};

fn token(max: usize) -> impl Fn(&str) -> Result<(), &'static str> {
    move |t: &str| {
        let n = xml_trim(t).chars().count();
        if n == 0 {
            Err("is empty")
        } else if n > max {
            Err("is too long")
        } else {
            Ok(())
        }
    }
}

fn text_max(max: usize) -> impl Fn(&str) -> Result<(), &'static str> {
    move |t: &str| {
        if t.chars().count() > max { Err("is too long") } else { Ok(()) }
    }
}

fn compact(t: &str) -> compact_str::CompactString {
    compact_str::CompactString::new(xml_trim(t))
}

/// A code (xs:token, 1 to 20 characters), kept inline.
fn parse_code(t: &str) -> Result<compact_str::CompactString, &'static str> {
    token(20)(t).map(|()| compact(t))
}

fn with_doc<T>(
    bytes: &[u8],
    limits: &Limits,
    f: impl FnOnce(&mut Cursor<'_>) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    let text = body_text(bytes, limits)?;
    let mut cur = Cursor::new(&text, limits.max_depth);
    let v = f(&mut cur)?;
    cur.finish()?;
    Ok(v)
}

/// Decodes a LoonfactorBerekeningVraag body.
pub fn decode_vraag(bytes: &[u8], limits: &Limits) -> Result<Vraag, DecodeError> {
    with_doc(bytes, limits, vraag)
}

/// Decodes a LoonfactorBerekeningAntwoord body.
pub fn decode_antwoord(bytes: &[u8], limits: &Limits) -> Result<Antwoord, DecodeError> {
    with_doc(bytes, limits, antwoord)
}

/// Decodes a RekenserverFout body.
pub fn decode_fout(bytes: &[u8], limits: &Limits) -> Result<RekenserverFout, DecodeError> {
    with_doc(bytes, limits, fout)
}

/// Why a Vraag of a later contract version is refused.
fn newer_contract_text(newer: u32) -> String {
    format!(
        "the Vraag is of contract version {newer}; this worker (sbworker {}) knows versions up to \
         {CONTRACT_VERSIE}: upgrade the calculation workers (the sweep sends it again)",
        env!("CARGO_PKG_VERSION")
    )
}

fn vraag(cur: &mut Cursor<'_>) -> Result<Vraag, DecodeError> {
    let (start, pos) = cur.open_root("LoonfactorBerekeningVraag")?;
    // A Vraag of a later contract version than this worker knows is refused before
    // anything else is read: an element or attribute this worker does not know is then
    // the sender's upgrade, not a fault of the request.
    if let Some(newer) = cur
        .plain_attr(&start, "ContractVersie")
        .and_then(|v| parse_contract_version(v).ok())
        .filter(|v| *v > CONTRACT_VERSIE)
    {
        cur.message_id = cur.plain_attr(&start, "Id").and_then(|v| parse_uuid(v).ok());
        return Err(cur.err(Reden::NewerContract, Some(("ContractVersie", true)), newer_contract_text(newer), pos));
    }
    let [id, ts, versie, contract_versie] = cur.attrs(&start, ["Id", "Timestamp", "Versie", "ContractVersie"], pos)?;
    let id = cur.req(id, "Id", pos, parse_uuid)?;
    cur.message_id = Some(id);
    let contract_versie = cur.opt(contract_versie, "ContractVersie", pos, parse_contract_version)?;
    // The same check for a value written with a character reference (not read above).
    if let Some(newer) = contract_versie.filter(|v| *v > CONTRACT_VERSIE) {
        return Err(cur.err(Reden::NewerContract, Some(("ContractVersie", true)), newer_contract_text(newer), pos));
    }
    let timestamp = cur.req(ts, "Timestamp", pos, str::parse::<Timestamp>)?;
    let versie = cur.req(versie, "Versie", pos, parse_version)?;
    const C: &[Child] =
        &[one("Dienstverband").with_attrs(), one("Periode").with_attrs(), one("Diensten"), one("Historie")];
    let (mut dv, mut periode, mut diensten, mut historie) = (None, None, None, Vec::new());
    let mut last = None;
    while let Some(open) = cur.next_child(C, &mut last)? {
        match open.which {
            0 => dv = Some(dienstverband(cur, &open.start, open.pos)?),
            1 => periode = Some(periode_el(cur, &open.start, open.pos)?),
            2 => diensten = Some(diensten_el(cur)?),
            _ => historie = historie_el(cur)?,
        }
    }
    let v = Vraag {
        id,
        timestamp,
        versie,
        dienstverband: dv.ok_or_else(|| cur.missing("Dienstverband"))?,
        periode: periode.ok_or_else(|| cur.missing("Periode"))?,
        diensten: diensten.ok_or_else(|| cur.missing("Diensten"))?,
        historie,
        contract_versie,
    };
    cur.close();
    Ok(v)
}

fn dienstverband(
    cur: &mut Cursor<'_>,
    start: &quick_xml::events::BytesStart<'_>,
    pos: u64,
) -> Result<Dienstverband, DecodeError> {
    let [id] = cur.attrs(start, ["Id"], pos)?;
    let id = cur.req(id, "Id", pos, parse_int)?;
    const C: &[Child] = &[
        one("Cao").with_attrs(),
        one("DagenPerWeek"),
        one("DatumInDienst"),
        one("DatumUitDienst"),
        one("ParttimeUren"),
        one("Salaris").with_attrs(),
        one("Soort"),
        one("Functiegroep"),
    ];
    let (mut cao_v, mut dagen, mut in_dienst, mut uit_dienst, mut pt, mut salaris_v, mut soort, mut fg) =
        (None, None, None, None, None, None, None, None);
    let mut last = None;
    while let Some(open) = cur.next_child(C, &mut last)? {
        match open.which {
            0 => cao_v = Some(cao(cur, &open.start, open.pos)?),
            1 => dagen = Some(cur.value(parse_decimal)?),
            2 => in_dienst = Some(cur.value(parse_date)?),
            3 => uit_dienst = Some(cur.value(parse_date)?),
            4 => pt = Some(cur.value(parse_decimal)?),
            5 => salaris_v = Some(salaris(cur, &open.start, open.pos)?),
            6 => soort = Some(cur.value(parse_code)?),
            _ => fg = Some(cur.value(parse_int)?),
        }
    }
    let v = Dienstverband {
        id,
        cao: cao_v.ok_or_else(|| cur.missing("Cao"))?,
        dagen_per_week: dagen.ok_or_else(|| cur.missing("DagenPerWeek"))?,
        datum_in_dienst: in_dienst.ok_or_else(|| cur.missing("DatumInDienst"))?,
        datum_uit_dienst: uit_dienst,
        parttime_uren: pt.ok_or_else(|| cur.missing("ParttimeUren"))?,
        salaris: salaris_v,
        soort: soort.ok_or_else(|| cur.missing("Soort"))?,
        functiegroep: fg.ok_or_else(|| cur.missing("Functiegroep"))?,
    };
    cur.close();
    Ok(v)
}

fn cao(cur: &mut Cursor<'_>, start: &quick_xml::events::BytesStart<'_>, pos: u64) -> Result<Cao, DecodeError> {
    let [id] = cur.attrs(start, ["Id"], pos)?;
    let id = cur.req(id, "Id", pos, parse_int)?;
    const C: &[Child] = &[one("Code"), one("IsVierWeken"), one("Naam"), one("WerkweekUren")];
    let (mut code, mut vier, mut naam, mut uren) = (None, None, None, None);
    let mut last = None;
    while let Some(open) = cur.next_child(C, &mut last)? {
        match open.which {
            0 => code = Some(cur.value(parse_code)?),
            1 => vier = Some(cur.value(parse_bit)?),
            2 => naam = Some(cur.string(text_max(100))?),
            _ => uren = Some(cur.value(parse_decimal)?),
        }
    }
    let v = Cao {
        id,
        code: code.ok_or_else(|| cur.missing("Code"))?,
        is_vier_weken: vier.ok_or_else(|| cur.missing("IsVierWeken"))?,
        naam: naam.ok_or_else(|| cur.missing("Naam"))?,
        werkweek_uren: uren.ok_or_else(|| cur.missing("WerkweekUren"))?,
    };
    cur.close();
    Ok(v)
}

fn salaris(cur: &mut Cursor<'_>, start: &quick_xml::events::BytesStart<'_>, pos: u64) -> Result<Salaris, DecodeError> {
    let [gt, gtb, lt] = cur.attrs(start, ["GarantieToeslag", "GarantieTredeBedrag", "LoonToeslag"], pos)?;
    let garantie_toeslag = cur.opt(gt, "GarantieToeslag", pos, parse_decimal)?;
    let garantie_trede_bedrag = cur.opt(gtb, "GarantieTredeBedrag", pos, parse_decimal)?;
    let loon_toeslag = cur.opt(lt, "LoonToeslag", pos, parse_decimal)?;
    const C: &[Child] = &[one("NominaalSalaris")];
    let mut nominaal = None;
    let mut last = None;
    while cur.next_child(C, &mut last)?.is_some() {
        nominaal = Some(cur.value(parse_decimal)?);
    }
    let v = Salaris {
        garantie_toeslag,
        garantie_trede_bedrag,
        loon_toeslag,
        nominaal_salaris: nominaal.ok_or_else(|| cur.missing("NominaalSalaris"))?,
    };
    cur.close();
    Ok(v)
}

fn periode_el(
    cur: &mut Cursor<'_>,
    start: &quick_xml::events::BytesStart<'_>,
    pos: u64,
) -> Result<Periode, DecodeError> {
    let [id] = cur.attrs(start, ["Id"], pos)?;
    let id = cur.req(id, "Id", pos, parse_int)?;
    const C: &[Child] = &[one("Begin"), one("Einde")];
    let (mut begin, mut einde) = (None, None);
    let mut last = None;
    while let Some(open) = cur.next_child(C, &mut last)? {
        let d = cur.value(parse_date)?;
        if open.which == 0 { begin = Some(d) } else { einde = Some(d) }
    }
    let v = Periode {
        id,
        begin: begin.ok_or_else(|| cur.missing("Begin"))?,
        einde: einde.ok_or_else(|| cur.missing("Einde"))?,
    };
    cur.close();
    Ok(v)
}

fn diensten_el(cur: &mut Cursor<'_>) -> Result<Diensten, DecodeError> {
    const C: &[Child] = &[many("Dienst").with_attrs()];
    let mut dienst = Vec::with_capacity(32);
    let mut last = None;
    while let Some(open) = cur.next_child(C, &mut last)? {
        let [datum] = cur.attrs(&open.start, ["Datum"], open.pos)?;
        let datum = cur.req(datum, "Datum", open.pos, parse_date)?;
        const B: &[Child] = &[many("Tijdblok").with_attrs()];
        let mut tijdblokken = Vec::with_capacity(2);
        let mut last_b = None;
        while let Some(b) = cur.next_child(B, &mut last_b)? {
            tijdblokken.push(tijdblok(cur, &b.start, b.pos)?);
        }
        if tijdblokken.is_empty() {
            return Err(cur.missing("Tijdblok"));
        }
        cur.close();
        dienst.push(Dienst { datum, tijdblokken });
    }
    cur.close();
    Ok(Diensten { dienst })
}

fn tijdblok(
    cur: &mut Cursor<'_>,
    start: &quick_xml::events::BytesStart<'_>,
    pos: u64,
) -> Result<Tijdblok, DecodeError> {
    let [b, e, z, l] = cur.attrs(start, ["Begin", "Einde", "IsZiek", "Verlof"], pos)?;
    let begin = cur.req(b, "Begin", pos, parse_clock)?;
    let einde = cur.req(e, "Einde", pos, parse_clock)?;
    let is_ziek = cur.req(z, "IsZiek", pos, parse_bit)?;
    let verlof = match l {
        None => None,
        Some(v) => Some(cur.req(Some(v), "Verlof", pos, parse_verlof)?),
    };
    if is_ziek && verlof.is_some() {
        return Err(cur.err(
            Reden::InvalidValue,
            Some(("Verlof", true)),
            "a leave block is not sick (IsZiek must be 0)",
            pos,
        ));
    }
    const C: &[Child] = &[one("DienstType").with_attrs()];
    let mut dt = None;
    let mut last = None;
    while let Some(open) = cur.next_child(C, &mut last)? {
        let [code, telt] = cur.attrs(&open.start, ["Code", "TeltMeeInGewerkteUren"], open.pos)?;
        let code = cur.req(code, "Code", open.pos, parse_code)?;
        let telt = cur.req(telt, "TeltMeeInGewerkteUren", open.pos, parse_bit)?;
        cur.expect_end()?;
        dt = Some(DienstType { code, telt_mee_in_gewerkte_uren: telt });
    }
    let v = Tijdblok { begin, einde, is_ziek, dienst_type: dt.ok_or_else(|| cur.missing("DienstType"))?, verlof };
    cur.close();
    Ok(v)
}

fn parse_verlof(s: &str) -> Result<Verlof, &'static str> {
    match s {
        "Wettelijk" => Ok(Verlof::Wettelijk),
        "Bovenwettelijk" => Ok(Verlof::Bovenwettelijk),
        "Overig" => Ok(Verlof::Overig),
        _ => Err("is not Wettelijk, Bovenwettelijk or Overig"),
    }
}

/// A stored factor's value: at most 4 decimals, below 10^9 in size (the XSD's).
fn parse_factor_value(t: &str) -> Result<rust_decimal::Decimal, &'static str> {
    let d = parse_decimal(t)?;
    if d.normalize().scale() > 4 {
        return Err("has more than 4 decimals");
    }
    if d.abs() > rust_decimal::Decimal::new(1_000_000_000, 0) {
        return Err("is larger than 1000000000");
    }
    Ok(d)
}

fn historie_el(cur: &mut Cursor<'_>) -> Result<Vec<HistoriePeriode>, DecodeError> {
    const C: &[Child] = &[many("Periode").with_attrs()];
    let mut out = Vec::new();
    let mut last = None;
    while let Some(open) = cur.next_child(C, &mut last)? {
        let [id, b, e] = cur.attrs(&open.start, ["Id", "Begin", "Einde"], open.pos)?;
        let id = cur.req(id, "Id", open.pos, parse_int)?;
        let begin = cur.req(b, "Begin", open.pos, parse_date)?;
        let einde = cur.req(e, "Einde", open.pos, parse_date)?;
        const F: &[Child] = &[many("Factor").with_attrs()];
        let mut factoren = Vec::new();
        let mut last_f = None;
        while let Some(f) = cur.next_child(F, &mut last_f)? {
            let [code, waarde] = cur.attrs(&f.start, ["Code", "Waarde"], f.pos)?;
            let code = cur.req(code, "Code", f.pos, parse_code)?;
            let waarde = cur.req(waarde, "Waarde", f.pos, parse_factor_value)?;
            cur.expect_end()?;
            factoren.push((code, waarde));
        }
        cur.close();
        out.push(HistoriePeriode { id, begin, einde, factoren });
    }
    cur.close();
    Ok(out)
}

fn antwoord(cur: &mut Cursor<'_>) -> Result<Antwoord, DecodeError> {
    let (start, pos) = cur.open_root("LoonfactorBerekeningAntwoord")?;
    let [id, ts, versie, dv, per, rv] =
        cur.attrs(&start, ["Id", "Timestamp", "Versie", "DienstverbandId", "PeriodeId", "Rekenversie"], pos)?;
    let rekenversie = cur.opt(rv, "Rekenversie", pos, parse_rekenversie)?;
    let id = cur.req(id, "Id", pos, parse_uuid)?;
    cur.message_id = Some(id);
    let timestamp = cur.req(ts, "Timestamp", pos, str::parse::<Timestamp>)?;
    let versie = cur.req(versie, "Versie", pos, parse_version)?;
    let dienstverband_id = cur.req(dv, "DienstverbandId", pos, parse_int)?;
    let periode_id = cur.req(per, "PeriodeId", pos, parse_int)?;
    const C: &[Child] = &[many("VariabeleMutatie"), many("Waarschuwing").with_attrs()];
    let (mut mutaties, mut waarschuwingen) = (Vec::new(), Vec::new());
    let mut last = None;
    while let Some(open) = cur.next_child(C, &mut last)? {
        if open.which == 0 {
            let m = mutatie(cur)?;
            // One row per wage factor: the result's key holds each code once, and a
            // second value for a code could be neither stored nor summed safely.
            if let Some(n) = mutaties.iter().position(|e: &VariabeleMutatie| e.loonfactor_code == m.loonfactor_code) {
                let which = format!("VariabeleMutatie[{}]/LoonfactorCode", mutaties.len() + 1);
                return Err(cur.err(
                    Reden::InvalidValue,
                    Some((&which, false)),
                    format!(
                        "'{}' is also the code of VariabeleMutatie[{}]: each code appears once",
                        m.loonfactor_code,
                        n + 1
                    ),
                    open.pos,
                ));
            }
            mutaties.push(m);
        } else {
            let [code, datum] = cur.attrs(&open.start, ["Code", "Datum"], open.pos)?;
            let code = cur.req(code, "Code", open.pos, parse_warning_code)?;
            let datum = cur.opt(datum, "Datum", open.pos, parse_date)?;
            let tekst = cur.string(|_| Ok(()))?;
            waarschuwingen.push(Waarschuwing { code, datum, tekst });
        }
    }
    cur.close();
    Ok(Antwoord { id, timestamp, versie, dienstverband_id, periode_id, mutaties, waarschuwingen, rekenversie })
}

fn parse_rekenversie(t: &str) -> Result<String, &'static str> {
    match t.chars().count() {
        1..=200 => Ok(t.to_owned()),
        _ => Err("must be 1 to 200 characters"),
    }
}

fn parse_warning_code(t: &str) -> Result<compact_str::CompactString, &'static str> {
    let t = xml_trim(t);
    let ok = t.len() <= 64
        && t.starts_with(|c: char| c.is_ascii_lowercase())
        && t.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
    if ok { Ok(compact(t)) } else { Err("is not a warning code (lower case letters, digits, dashes)") }
}

fn parse_loonfactor_code(t: &str) -> Result<String, &'static str> {
    if t.len() == 3 && t.bytes().all(|c| c.is_ascii_digit()) {
        Ok(t.to_owned())
    } else {
        Err("is not a wage factor code (three digits)")
    }
}

fn parse_waarde(t: &str) -> Result<rust_decimal::Decimal, &'static str> {
    let d = parse_decimal(t)?;
    if d.normalize().scale() > 2 {
        return Err("has more than 2 decimals");
    }
    if d.abs() >= rust_decimal::Decimal::new(10_000_000, 0) {
        return Err("has more than 9 digits");
    }
    Ok(d)
}

fn mutatie(cur: &mut Cursor<'_>) -> Result<VariabeleMutatie, DecodeError> {
    const C: &[Child] = &[
        one("DienstverbandId"),
        one("KaartSoort"),
        one("LoonfactorCode"),
        one("PeriodeId"),
        one("Waarde"),
        one("KostenPlaatsId"),
        one("KostenSoortId"),
    ];
    let (mut dv, mut ks, mut code, mut per, mut waarde, mut kp, mut ksoort) =
        (None, None, None, None, None, None, None);
    let mut last = None;
    while let Some(open) = cur.next_child(C, &mut last)? {
        match open.which {
            0 => dv = Some(cur.value(parse_int)?),
            1 => ks = Some(cur.value(parse_int)?),
            2 => code = Some(cur.value(parse_loonfactor_code)?),
            3 => per = Some(cur.value(parse_int)?),
            4 => waarde = Some(cur.value(parse_waarde)?),
            5 => kp = Some(cur.value(parse_int)?),
            _ => ksoort = Some(cur.value(parse_int)?),
        }
    }
    let v = VariabeleMutatie {
        dienstverband_id: dv.ok_or_else(|| cur.missing("DienstverbandId"))?,
        kaart_soort: ks.ok_or_else(|| cur.missing("KaartSoort"))?,
        loonfactor_code: code.ok_or_else(|| cur.missing("LoonfactorCode"))?,
        periode_id: per.ok_or_else(|| cur.missing("PeriodeId"))?,
        waarde: waarde.ok_or_else(|| cur.missing("Waarde"))?,
        kosten_plaats_id: kp,
        kosten_soort_id: ksoort,
    };
    cur.close();
    Ok(v)
}

fn fout(cur: &mut Cursor<'_>) -> Result<RekenserverFout, DecodeError> {
    let (start, pos) = cur.open_root("RekenserverFout")?;
    cur.attrs(&start, [], pos)?;
    const C: &[Child] = &[
        one("ErrorNumber"),
        one("ErrorSeverity"),
        one("ErrorState"),
        one("ErrorProcedure"),
        one("ErrorLine"),
        one("ErrorMessage"),
        one("VraagId"),
        one("Reden"),
    ];
    let (mut num, mut sev, mut state, mut proc_, mut line, mut msg, mut vid, mut reden) =
        (None, None, None, None, None, None, None, None);
    let mut last = None;
    while let Some(open) = cur.next_child(C, &mut last)? {
        match open.which {
            0 => num = Some(cur.value(parse_int)?),
            1 => sev = Some(cur.value(parse_int)?),
            2 => state = Some(cur.value(parse_int)?),
            3 => proc_ = Some(cur.string(|_| Ok(()))?),
            4 => line = Some(cur.value(parse_int)?),
            5 => msg = Some(cur.string(|_| Ok(()))?),
            6 => vid = Some(cur.value(parse_uuid)?),
            _ => reden = Some(cur.value(|t| Reden::from_code(xml_trim(t)).ok_or("is not a known reason code"))?),
        }
    }
    let v = RekenserverFout {
        error_number: num.ok_or_else(|| cur.missing("ErrorNumber"))?,
        error_severity: sev.ok_or_else(|| cur.missing("ErrorSeverity"))?,
        error_state: state.ok_or_else(|| cur.missing("ErrorState"))?,
        error_procedure: proc_.ok_or_else(|| cur.missing("ErrorProcedure"))?,
        error_line: line.ok_or_else(|| cur.missing("ErrorLine"))?,
        error_message: msg.ok_or_else(|| cur.missing("ErrorMessage"))?,
        vraag_id: vid,
        reden: reden.ok_or_else(|| cur.missing("Reden"))?,
    };
    cur.close();
    Ok(v)
}
