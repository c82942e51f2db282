//! `sbworker export`: claims the unexported results of a period in one statement
//! (`UPDATE … RETURNING`), only those with factor rows (a result with nothing to
//! export is never marked), and writes them as CSV (flat, one row per factor) or JSON
//! (factors nested under each employee). Each result carries a stable key
//! `dienstverband-periode-versie`, so a receiver can spot a repeat.

use std::io::Write;

use tokio_postgres::GenericClient;
use uuid::Uuid;

use super::stmt;

/// How a claim marks what it takes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// Marked exported when claimed: at-most-once.
    Once,
    /// Claimed under a lease; confirmed with [`ack`]; taken again once the lease has
    /// passed unconfirmed: at-least-once.
    Lease { seconds: f64 },
}

impl Mode {
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Once => "once",
            Mode::Lease { .. } => "lease",
        }
    }
}

/// One exported factor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub dienstverband_id: i32,
    pub periode_id: i32,
    pub versie: i64,
    pub kaart_soort: i32,
    pub loonfactor_code: String,
    /// Exact decimal, as stored.
    pub waarde: String,
    /// A correction: this result replaces the version exported before (Dutch payroll
    /// imports take a corrected period's full new set, replacing the old: the marker
    /// says so, and which version it replaces).
    pub vervangt_versie: Option<i64>,
    /// The result's warnings (the same on each of its rows): what payroll must look at
    /// (overtime no percentage is paid for, a contract above the CAO's maximum, …).
    pub waarschuwingen: Vec<Warning>,
}

/// A warning of a stored result, as the engine wrote it in the Antwoord.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Warning {
    pub code: String,
    pub tekst: String,
}

/// The warnings column as stored (JSON `[{"code", "tekst"}]`, NULL for none). What does
/// not read as that is handed on as one warning saying so, never dropped.
pub fn warnings_of(stored: Option<&str>) -> Vec<Warning> {
    match stored {
        None => Vec::new(),
        Some(text) => serde_json::from_str(text).unwrap_or_else(|e| {
            vec![Warning { code: "waarschuwingen-onleesbaar".into(), tekst: format!("{e}: {text}") }]
        }),
    }
}

impl Row {
    /// The result's stable key: the same figures always carry the same key.
    pub fn key(&self) -> String {
        format!("{}-{}-{}", self.dienstverband_id, self.periode_id, self.versie)
    }
}

/// What one claim took.
#[derive(Debug, Clone)]
pub struct Batch {
    pub id: Uuid,
    pub periode_id: i32,
    pub mode: Mode,
    pub rows: Vec<Row>,
}

impl Batch {
    /// Results (employees) in the batch.
    pub fn results(&self) -> usize {
        let mut keys: Vec<(i32, i32)> = self.rows.iter().map(|r| (r.dienstverband_id, r.periode_id)).collect();
        keys.dedup();
        keys.len()
    }

    /// What payroll must look at: how many results carry each warning code, e.g.
    /// `warning: 3 results carry warnings (overwerk-zonder-percentage 3): see the
    /// waarschuwingen column`; `None` when none does.
    pub fn warning_summary(&self) -> Option<String> {
        let mut per_code: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
        let mut results = 0;
        let mut last = None;
        for r in &self.rows {
            let key = (r.dienstverband_id, r.periode_id);
            if last == Some(key) || r.waarschuwingen.is_empty() {
                last = Some(key);
                continue;
            }
            last = Some(key);
            results += 1;
            for w in &r.waarschuwingen {
                *per_code.entry(w.code.as_str()).or_default() += 1;
            }
        }
        (results > 0).then(|| {
            let codes: Vec<String> = per_code.iter().map(|(c, n)| format!("{c} {n}")).collect();
            format!(
                "warning: {results} results carry warnings ({}): see their waarschuwingen (CSV: codes; JSON: texts)",
                codes.join(", ")
            )
        })
    }

    /// Flat: a header, then one line per factor.
    pub fn write_csv(&self, w: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            w,
            "batch,sleutel,dienstverband_id,periode_id,versie,kaart_soort,loonfactor_code,waarde,correctie,vervangt_versie,waarschuwingen"
        )?;
        for r in &self.rows {
            // The warning codes, `;` between them (the texts are in the JSON format).
            let codes: Vec<&str> = r.waarschuwingen.iter().map(|w| w.code.as_str()).collect();
            writeln!(
                w,
                "{},{},{},{},{},{},{},{},{},{},{}",
                self.id,
                r.key(),
                r.dienstverband_id,
                r.periode_id,
                r.versie,
                r.kaart_soort,
                r.loonfactor_code,
                r.waarde,
                u8::from(r.vervangt_versie.is_some()),
                r.vervangt_versie.map_or(String::new(), |v| v.to_string()),
                codes.join(";").replace([',', '"', '\n', '\r'], "_")
            )?;
        }
        Ok(())
    }

    /// Nested: the batch, then each employee's result with its factors. Amounts are
    /// JSON strings, so no decimal is rounded through a float.
    pub fn write_json(&self, w: &mut dyn Write) -> std::io::Result<()> {
        write!(
            w,
            "{{\"batch\":\"{}\",\"periode_id\":{},\"mode\":\"{}\",\"results\":[",
            self.id,
            self.periode_id,
            self.mode.name()
        )?;
        let mut i = 0;
        let mut first = true;
        while i < self.rows.len() {
            let head = &self.rows[i];
            if !first {
                write!(w, ",")?;
            }
            first = false;
            write!(
                w,
                "\n  {{\"sleutel\":\"{}\",\"dienstverband_id\":{},\"periode_id\":{},\"versie\":{},\"correctie\":{},\"vervangt_versie\":{},\"factors\":[",
                head.key(),
                head.dienstverband_id,
                head.periode_id,
                head.versie,
                head.vervangt_versie.is_some(),
                head.vervangt_versie.map_or("null".to_owned(), |v| v.to_string())
            )?;
            let mut j = i;
            while j < self.rows.len()
                && (self.rows[j].dienstverband_id, self.rows[j].periode_id) == (head.dienstverband_id, head.periode_id)
            {
                let r = &self.rows[j];
                if j > i {
                    write!(w, ",")?;
                }
                write!(
                    w,
                    "{{\"kaart_soort\":{},\"loonfactor_code\":\"{}\",\"waarde\":\"{}\"}}",
                    r.kaart_soort,
                    json_text(&r.loonfactor_code),
                    json_text(&r.waarde)
                )?;
                j += 1;
            }
            write!(w, "],\"waarschuwingen\":[")?;
            for (k, x) in head.waarschuwingen.iter().enumerate() {
                if k > 0 {
                    write!(w, ",")?;
                }
                write!(w, "{{\"code\":\"{}\",\"tekst\":\"{}\"}}", json_text(&x.code), json_text(&x.tekst))?;
            }
            write!(w, "]}}")?;
            i = j;
        }
        writeln!(w, "\n]}}")
    }
}

/// Escapes what JSON requires in a string.
fn json_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Claims the period's results inside the transaction `tx` is in (the caller commits
/// once the output is safely written, or rolls back and nothing is marked).
pub async fn claim(tx: &impl GenericClient, periode_id: i32, mode: Mode) -> Result<Batch, tokio_postgres::Error> {
    let id = Uuid::new_v4();
    let rows = match mode {
        Mode::Once => tx.query(stmt::CLAIM_ONCE.sql, &[&periode_id, &id]).await?,
        Mode::Lease { seconds } => tx.query(stmt::CLAIM_LEASE.sql, &[&periode_id, &id, &seconds]).await?,
    };
    let rows = rows
        .iter()
        .map(|r| Row {
            dienstverband_id: r.get(0),
            periode_id: r.get(1),
            versie: r.get(2),
            kaart_soort: r.get(3),
            loonfactor_code: r.get(4),
            waarde: r.get(5),
            vervangt_versie: r.get(6),
            waarschuwingen: warnings_of(r.get(7)),
        })
        .collect();
    Ok(Batch { id, periode_id, mode, rows })
}

/// Confirms a leased batch; how many results it confirmed (0: unknown batch, already
/// confirmed, or taken again by a later claim after its lease passed).
pub async fn ack(client: &tokio_postgres::Client, batch: Uuid) -> Result<i64, tokio_postgres::Error> {
    Ok(client.query_one(stmt::ACK.sql, &[&batch]).await?.get(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(dv: i32, code: &str, w: &str) -> Row {
        Row {
            dienstverband_id: dv,
            periode_id: 7,
            versie: 3,
            kaart_soort: 5,
            loonfactor_code: code.into(),
            waarde: w.into(),
            vervangt_versie: None,
            waarschuwingen: Vec::new(),
        }
    }

    #[test]
    fn csv_is_flat_and_json_nests_factors_per_employee() {
        let b = Batch {
            id: Uuid::nil(),
            periode_id: 7,
            mode: Mode::Once,
            rows: vec![
                row(1, "100", "8.50"),
                row(1, "230", "12.34"),
                Row {
                    vervangt_versie: Some(2),
                    waarschuwingen: vec![Warning {
                        code: "overwerk-zonder-percentage".into(),
                        tekst: "2.00 overtime hours carry \"no\" percentage".into(),
                    }],
                    ..row(2, "100", "0")
                },
            ],
        };
        assert_eq!(b.results(), 2);
        let mut csv = Vec::new();
        b.write_csv(&mut csv).unwrap();
        let csv = String::from_utf8(csv).unwrap();
        assert_eq!(csv.lines().count(), 4);
        assert!(csv.contains("\n00000000-0000-0000-0000-000000000000,1-7-3,1,7,3,5,230,12.34,0,,\n"), "{csv}");
        // A correction: the full new set, marked, naming the exported version it replaces;
        // its warning's code.
        assert!(
            csv.ends_with(
                "\n00000000-0000-0000-0000-000000000000,2-7-3,2,7,3,5,100,0,1,2,overwerk-zonder-percentage\n"
            ),
            "{csv}"
        );
        let mut json = Vec::new();
        b.write_json(&mut json).unwrap();
        let json = String::from_utf8(json).unwrap();
        assert_eq!(json.matches("\"sleutel\"").count(), 2);
        assert!(json.contains("\"sleutel\":\"2-7-3\",\"dienstverband_id\":2,\"periode_id\":7,\"versie\":3,\"correctie\":true,\"vervangt_versie\":2,"), "{json}");
        assert!(json.contains("\"sleutel\":\"1-7-3\",\"dienstverband_id\":1,\"periode_id\":7,\"versie\":3,\"correctie\":false,\"vervangt_versie\":null,\"factors\":[{\"kaart_soort\":5,\"loonfactor_code\":\"100\",\"waarde\":\"8.50\"},{\"kaart_soort\":5,\"loonfactor_code\":\"230\",\"waarde\":\"12.34\"}],\"waarschuwingen\":[]}"), "{json}");
        assert!(json.contains("\"waarschuwingen\":[{\"code\":\"overwerk-zonder-percentage\",\"tekst\":\"2.00 overtime hours carry \\\"no\\\" percentage\"}]"), "{json}");
        let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed["results"][1]["waarschuwingen"][0]["tekst"], "2.00 overtime hours carry \"no\" percentage");
        assert_eq!(
            warnings_of(Some("[{\"code\":\"a\",\"tekst\":\"b\"}]")),
            [Warning { code: "a".into(), tekst: "b".into() }]
        );
        assert_eq!(warnings_of(Some("{")).len(), 1);
        assert_eq!(
            b.warning_summary().as_deref(),
            Some(
                "warning: 1 results carry warnings (overwerk-zonder-percentage 1): see their waarschuwingen (CSV: \
                 codes; JSON: texts)"
            )
        );
        assert!(warnings_of(None).is_empty());
        assert_eq!(json_text("a\"b\\c\n"), "a\\\"b\\\\c\\u000a");
    }
}
