//! Writing the messages as XML: a small direct writer over a `String`.
//!
//! Element and attribute names are the XSDs' (fixed strings here), so nothing needs
//! validating at run time. No XML declaration is written: a body goes into SQL Server
//! `xml` as is, whatever encoding it is sent in. Numbers are written without the
//! formatting machinery; the encoder cannot fail, and what it writes is always
//! well-formed: text and attribute values are escaped (`&`, `<`, `>`, CR, and in
//! attributes quotes, tab and LF, so they read back as written) and a character XML
//! does not allow is replaced by its escape, e.g. `\u{1}` (see `chars`).

use chrono::{Datelike, NaiveDate};
use rust_decimal::Decimal;
use uuid::Uuid;

use super::NAMESPACE;
use super::chars::push_replacement;
use super::model::{Antwoord, Dienstverband, RekenserverFout, Vraag};
use super::values::ClockTime;

/// Appends XML to a string.
struct Out<'a>(&'a mut String);

impl Out<'_> {
    fn open(&mut self, name: &str) {
        self.0.push('<');
        self.0.push_str(name);
    }

    fn root(&mut self, name: &str) {
        self.open(name);
        self.attr("xmlns", NAMESPACE);
    }

    fn attr(&mut self, name: &str, value: &str) {
        self.0.push(' ');
        self.0.push_str(name);
        self.0.push_str("=\"");
        escape_into(self.0, value, true);
        self.0.push('"');
    }

    /// An attribute whose value needs no escaping (numbers, dates, times, uuids).
    fn attr_with(&mut self, name: &str, write: impl FnOnce(&mut String)) {
        self.0.push(' ');
        self.0.push_str(name);
        self.0.push_str("=\"");
        write(self.0);
        self.0.push('"');
    }

    fn gt(&mut self) {
        self.0.push('>');
    }

    fn empty_end(&mut self) {
        self.0.push_str("/>");
    }

    fn close(&mut self, name: &str) {
        self.0.push_str("</");
        self.0.push_str(name);
        self.0.push('>');
    }

    fn text(&mut self, name: &str, text: &str) {
        self.open(name);
        self.gt();
        escape_into(self.0, text, false);
        self.close(name);
    }

    /// An element whose text needs no escaping.
    fn value(&mut self, name: &str, write: impl FnOnce(&mut String)) {
        self.open(name);
        self.gt();
        write(self.0);
        self.close(name);
    }
}

/// Appends `s` escaped for element text or (`attr`) a double-quoted attribute value.
/// A string with nothing to escape (the usual case) is copied whole after one pass; a
/// character XML does not allow (a control other than tab, LF and CR, U+FFFE, U+FFFF)
/// is replaced by its escape.
fn escape_into(out: &mut String, s: &str, attr: bool) {
    // A superset of the bytes either mode changes.
    let special = |c: u8| c < 0x20 || matches!(c, b'&' | b'<' | b'>' | b'"' | b'\'' | 0xEF);
    let b = s.as_bytes();
    let Some(first) = b.iter().position(|&c| special(c)) else {
        out.push_str(s);
        return;
    };
    let mut done = 0;
    let mut i = first;
    while i < b.len() {
        let (with, len): (&str, usize) = match b[i] {
            b'&' => ("&amp;", 1),
            b'<' => ("&lt;", 1),
            b'>' => ("&gt;", 1),
            b'\r' => ("&#13;", 1),
            b'"' if attr => ("&quot;", 1),
            b'\'' if attr => ("&apos;", 1),
            b'\n' if attr => ("&#10;", 1),
            b'\t' if attr => ("&#9;", 1),
            0..=0x08 | 0x0B | 0x0C | 0x0E..=0x1F => ("", 1),
            0xEF if b.get(i + 1) == Some(&0xBF) && matches!(b.get(i + 2), Some(0xBE | 0xBF)) => ("", 3),
            _ => {
                i += 1;
                continue;
            }
        };
        out.push_str(&s[done..i]);
        if with.is_empty() {
            push_replacement(out, s[i..].chars().next().expect("a character starts here"));
        } else {
            out.push_str(with);
        }
        i += len;
        done = i;
    }
    out.push_str(&s[done..]);
}

fn int(out: &mut String, v: i64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut n = v.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if v < 0 {
        out.push('-');
    }
    out.push_str(std::str::from_utf8(&buf[i..]).expect("ascii digits"));
}

/// `xs:decimal` text: sign, digits, and as many decimals as the value's scale.
fn decimal(out: &mut String, d: &Decimal) {
    let m = d.mantissa();
    let scale = d.scale() as usize;
    let mut buf = [0u8; 40];
    let mut i = buf.len();
    let mut n = m.unsigned_abs();
    let mut written = 0;
    while n > 0 || written <= scale {
        if written == scale && scale > 0 {
            i -= 1;
            buf[i] = b'.';
        }
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        written += 1;
    }
    if m < 0 {
        out.push('-');
    }
    out.push_str(std::str::from_utf8(&buf[i..]).expect("ascii digits"));
}

fn two(out: &mut String, v: u32) {
    out.push((b'0' + (v / 10 % 10) as u8) as char);
    out.push((b'0' + (v % 10) as u8) as char);
}

fn date(out: &mut String, d: NaiveDate) {
    let y = d.year();
    if (0..=9999).contains(&y) {
        two(out, y as u32 / 100);
        two(out, y as u32 % 100);
    } else {
        int(out, i64::from(y));
    }
    out.push('-');
    two(out, d.month());
    out.push('-');
    two(out, d.day());
}

fn clock(out: &mut String, t: ClockTime) {
    two(out, u32::from(t.hour()));
    out.push(':');
    two(out, u32::from(t.minute()));
}

fn uuid(out: &mut String, u: &Uuid) {
    let mut buf = Uuid::encode_buffer();
    out.push_str(u.hyphenated().encode_upper(&mut buf));
}

fn bit(out: &mut String, b: bool) {
    out.push(if b { '1' } else { '0' });
}

/// Appends a LoonfactorBerekeningVraag to `out`.
pub fn encode_vraag_into(out: &mut String, v: &Vraag) {
    let mut o = Out(out);
    o.root("LoonfactorBerekeningVraag");
    o.attr_with("Id", |s| uuid(s, &v.id));
    o.attr("Timestamp", v.timestamp.as_str());
    o.attr_with("Versie", |s| int(s, v.versie));
    if let Some(c) = v.contract_versie {
        o.attr_with("ContractVersie", |s| int(s, i64::from(c)));
    }
    o.gt();
    dienstverband(&mut o, &v.dienstverband);
    let p = &v.periode;
    o.open("Periode");
    o.attr_with("Id", |s| int(s, i64::from(p.id)));
    o.gt();
    o.value("Begin", |s| date(s, p.begin));
    o.value("Einde", |s| date(s, p.einde));
    o.close("Periode");
    o.open("Diensten");
    o.gt();
    for d in &v.diensten.dienst {
        o.open("Dienst");
        o.attr_with("Datum", |s| date(s, d.datum));
        o.gt();
        for b in &d.tijdblokken {
            o.open("Tijdblok");
            o.attr_with("Begin", |s| clock(s, b.begin));
            o.attr_with("Einde", |s| clock(s, b.einde));
            o.attr_with("IsZiek", |s| bit(s, b.is_ziek));
            if let Some(l) = b.verlof {
                o.attr("Verlof", l.as_str());
            }
            o.gt();
            o.open("DienstType");
            o.attr("Code", &b.dienst_type.code);
            o.attr_with("TeltMeeInGewerkteUren", |s| bit(s, b.dienst_type.telt_mee_in_gewerkte_uren));
            o.empty_end();
            o.close("Tijdblok");
        }
        o.close("Dienst");
    }
    o.close("Diensten");
    if !v.historie.is_empty() {
        o.open("Historie");
        o.gt();
        for h in &v.historie {
            o.open("Periode");
            o.attr_with("Id", |s| int(s, i64::from(h.id)));
            o.attr_with("Begin", |s| date(s, h.begin));
            o.attr_with("Einde", |s| date(s, h.einde));
            o.gt();
            for (code, waarde) in &h.factoren {
                o.open("Factor");
                o.attr("Code", code);
                o.attr_with("Waarde", |s| decimal(s, waarde));
                o.empty_end();
            }
            o.close("Periode");
        }
        o.close("Historie");
    }
    o.close("LoonfactorBerekeningVraag");
}

fn dienstverband(o: &mut Out<'_>, dv: &Dienstverband) {
    o.open("Dienstverband");
    o.attr_with("Id", |s| int(s, i64::from(dv.id)));
    o.gt();
    let c = &dv.cao;
    o.open("Cao");
    o.attr_with("Id", |s| int(s, i64::from(c.id)));
    o.gt();
    o.text("Code", &c.code);
    o.value("IsVierWeken", |s| bit(s, c.is_vier_weken));
    o.text("Naam", &c.naam);
    o.value("WerkweekUren", |s| decimal(s, &c.werkweek_uren));
    o.close("Cao");
    o.value("DagenPerWeek", |s| decimal(s, &dv.dagen_per_week));
    o.value("DatumInDienst", |s| date(s, dv.datum_in_dienst));
    if let Some(d) = dv.datum_uit_dienst {
        o.value("DatumUitDienst", |s| date(s, d));
    }
    o.value("ParttimeUren", |s| decimal(s, &dv.parttime_uren));
    if let Some(sal) = &dv.salaris {
        o.open("Salaris");
        for (name, v) in [
            ("GarantieToeslag", &sal.garantie_toeslag),
            ("GarantieTredeBedrag", &sal.garantie_trede_bedrag),
            ("LoonToeslag", &sal.loon_toeslag),
        ] {
            if let Some(v) = v {
                o.attr_with(name, |s| decimal(s, v));
            }
        }
        o.gt();
        o.value("NominaalSalaris", |s| decimal(s, &sal.nominaal_salaris));
        o.close("Salaris");
    }
    o.text("Soort", &dv.soort);
    o.value("Functiegroep", |s| int(s, i64::from(dv.functiegroep)));
    o.close("Dienstverband");
}

/// Appends a LoonfactorBerekeningAntwoord to `out`.
pub fn encode_antwoord_into(out: &mut String, a: &Antwoord) {
    let mut o = Out(out);
    o.root("LoonfactorBerekeningAntwoord");
    o.attr_with("Id", |s| uuid(s, &a.id));
    o.attr("Timestamp", a.timestamp.as_str());
    o.attr_with("Versie", |s| int(s, a.versie));
    o.attr_with("DienstverbandId", |s| int(s, i64::from(a.dienstverband_id)));
    o.attr_with("PeriodeId", |s| int(s, i64::from(a.periode_id)));
    if let Some(r) = &a.rekenversie {
        o.attr("Rekenversie", r);
    }
    o.gt();
    for m in &a.mutaties {
        o.open("VariabeleMutatie");
        o.gt();
        o.value("DienstverbandId", |s| int(s, i64::from(m.dienstverband_id)));
        o.value("KaartSoort", |s| int(s, i64::from(m.kaart_soort)));
        o.text("LoonfactorCode", &m.loonfactor_code);
        o.value("PeriodeId", |s| int(s, i64::from(m.periode_id)));
        o.value("Waarde", |s| decimal(s, &m.waarde));
        if let Some(k) = m.kosten_plaats_id {
            o.value("KostenPlaatsId", |s| int(s, i64::from(k)));
        }
        if let Some(k) = m.kosten_soort_id {
            o.value("KostenSoortId", |s| int(s, i64::from(k)));
        }
        o.close("VariabeleMutatie");
    }
    for w in &a.waarschuwingen {
        o.open("Waarschuwing");
        o.attr("Code", &w.code);
        if let Some(d) = w.datum {
            o.attr_with("Datum", |s| date(s, d));
        }
        o.gt();
        escape_into(o.0, &w.tekst, false);
        o.close("Waarschuwing");
    }
    o.close("LoonfactorBerekeningAntwoord");
}

/// Appends a RekenserverFout to `out`.
pub fn encode_fout_into(out: &mut String, f: &RekenserverFout) {
    let mut o = Out(out);
    o.root("RekenserverFout");
    o.gt();
    o.value("ErrorNumber", |s| int(s, i64::from(f.error_number)));
    o.value("ErrorSeverity", |s| int(s, i64::from(f.error_severity)));
    o.value("ErrorState", |s| int(s, i64::from(f.error_state)));
    o.text("ErrorProcedure", &f.error_procedure);
    o.value("ErrorLine", |s| int(s, i64::from(f.error_line)));
    o.text("ErrorMessage", &f.error_message);
    if let Some(id) = &f.vraag_id {
        o.value("VraagId", |s| uuid(s, id));
    }
    o.text("Reden", f.reden.code());
    o.close("RekenserverFout");
}

/// Encodes a LoonfactorBerekeningVraag.
pub fn encode_vraag(v: &Vraag) -> String {
    let mut s = String::with_capacity(1024 + 200 * v.diensten.dienst.len());
    encode_vraag_into(&mut s, v);
    s
}

/// Encodes a LoonfactorBerekeningAntwoord.
pub fn encode_antwoord(a: &Antwoord) -> String {
    let mut s = String::with_capacity(256 + 200 * a.mutaties.len());
    encode_antwoord_into(&mut s, a);
    s
}

/// Encodes a RekenserverFout.
pub fn encode_fout(f: &RekenserverFout) -> String {
    let mut s = String::with_capacity(512 + f.error_message.len());
    encode_fout_into(&mut s, f);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_keeps_what_xml_can_carry_and_replaces_the_rest() {
        let esc = |s: &str, attr: bool| {
            let mut out = String::new();
            escape_into(&mut out, s, attr);
            out
        };
        assert_eq!(esc("a & b < c > d \"e\" 'f'", false), "a &amp; b &lt; c &gt; d \"e\" 'f'");
        assert_eq!(esc("a & b < c > d \"e\" 'f'", true), "a &amp; b &lt; c &gt; d &quot;e&quot; &apos;f&apos;");
        assert_eq!(esc("r\rn\nt\t", false), "r&#13;n\nt\t");
        assert_eq!(esc("r\rn\nt\t", true), "r&#13;n&#10;t&#9;");
        assert_eq!(
            esc("\0x\u{1}y\u{1F}z\u{FFFE}\u{FFFF}€\u{FFFD}", false),
            "\\u{0}x\\u{1}y\\u{1f}z\\u{fffe}\\u{ffff}€\u{FFFD}"
        );
        assert_eq!(esc("gewoon", true), "gewoon");
    }

    #[test]
    fn numbers_are_written_like_display() {
        for v in [0i64, 7, -7, 10, 1234567890, i64::MIN, i64::MAX] {
            let mut s = String::new();
            int(&mut s, v);
            assert_eq!(s, v.to_string());
        }
        for (m, sc) in [(0i64, 0u32), (0, 2), (850, 2), (-150, 2), (5, 3), (-5, 1), (123456789, 4), (1, 0)] {
            let d = Decimal::new(m, sc);
            let mut s = String::new();
            decimal(&mut s, &d);
            assert_eq!(s, d.to_string(), "{m} scale {sc}");
        }
    }
}
