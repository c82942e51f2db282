//! The check's second builder: the Vraag of a key built here, in Rust, from the roster
//! rows themselves (plain reads of the roster tables), never from `rekenserver.vraag`,
//! the SQL function the commit trigger sends. The check computes its expected results
//! from this Vraag and compares it with the SQL builder's, so a mistake in either one
//! shows instead of being checked against itself.

use compact_str::CompactString;
use rust_decimal::Decimal;
use tokio_postgres::Client;

use super::stmt;
use crate::contract::values::{Timestamp, parse_clock, parse_date, parse_decimal};
use crate::contract::{
    Cao, Dienst, DienstType, Diensten, Dienstverband, HistoriePeriode, Periode, Salaris, Tijdblok, Verlof, Vraag,
};

fn decimal(s: &str, what: &str) -> anyhow::Result<Decimal> {
    parse_decimal(s).map_err(|e| anyhow::anyhow!("{what} {s:?} {e}"))
}

fn date(s: &str, what: &str) -> anyhow::Result<chrono::NaiveDate> {
    parse_date(s).map_err(|e| anyhow::anyhow!("{what} {s:?} {e}"))
}

/// The Vraag of key (`dv`, `periode`) at version `versie` as the roster rows give it
/// (`id` and `timestamp` as given: they are not the roster's); `None` when the key's
/// employment or period does not exist.
pub async fn vraag(
    client: &Client,
    dv: i32,
    periode: i32,
    versie: i64,
    id: uuid::Uuid,
    timestamp: Timestamp,
) -> anyhow::Result<Option<Vraag>> {
    let Some(r) = client.query_opt(stmt::ORACLE_DIENSTVERBAND.sql, &[&dv]).await? else { return Ok(None) };
    let Some(p) = client.query_opt(stmt::ORACLE_PERIODE.sql, &[&periode]).await? else { return Ok(None) };
    let cao = Cao {
        id: r.get(0),
        code: CompactString::from(r.get::<_, &str>(1)),
        is_vier_weken: r.get(2),
        naam: r.get(3),
        werkweek_uren: decimal(r.get(4), "werkweek_uren")?,
    };
    // Part-time hours: NULL or 0 mean full time, the CAO's week.
    let parttime = match r.get::<_, Option<&str>>(8).map(|s| decimal(s, "parttime_uren")).transpose()? {
        Some(h) if !h.is_zero() => h,
        _ => cao.werkweek_uren,
    };
    let optional = |i: usize, what: &str| r.get::<_, Option<&str>>(i).map(|s| decimal(s, what)).transpose();
    let salaris = match optional(9, "salaris")? {
        Some(nominaal_salaris) => Some(Salaris {
            garantie_toeslag: optional(10, "garantie_toeslag")?,
            garantie_trede_bedrag: optional(11, "garantie_trede_bedrag")?,
            loon_toeslag: optional(12, "loon_toeslag")?,
            nominaal_salaris,
        }),
        None => None,
    };
    let dienstverband = Dienstverband {
        id: dv,
        cao,
        dagen_per_week: decimal(r.get(5), "dagen_per_week")?,
        datum_in_dienst: date(r.get(6), "datum_in_dienst")?,
        datum_uit_dienst: r.get::<_, Option<&str>>(7).map(|s| date(s, "datum_uit_dienst")).transpose()?,
        parttime_uren: parttime,
        salaris,
        soort: CompactString::from(r.get::<_, &str>(13)),
        functiegroep: r.get(14),
    };
    let periode_row =
        Periode { id: periode, begin: date(p.get(0), "begin_datum")?, einde: date(p.get(1), "eind_datum")? };
    // The shifts with at least one block (the join), in date order, each with its
    // blocks in order of their start.
    let mut diensten: Vec<(i64, Dienst)> = Vec::new();
    for b in client.query(stmt::ORACLE_BLOCKS.sql, &[&dv, &periode]).await? {
        let dienst_id: i64 = b.get(0);
        let blok = Tijdblok {
            begin: parse_clock(b.get(2)).map_err(|e| anyhow::anyhow!("begin_tijd {e}"))?,
            einde: parse_clock(b.get(3)).map_err(|e| anyhow::anyhow!("eind_tijd {e}"))?,
            is_ziek: b.get(4),
            dienst_type: DienstType {
                code: CompactString::from(b.get::<_, &str>(5)),
                telt_mee_in_gewerkte_uren: b.get(6),
            },
            verlof: match b.get::<_, Option<&str>>(7) {
                None => None,
                Some("Wettelijk") => Some(Verlof::Wettelijk),
                Some("Bovenwettelijk") => Some(Verlof::Bovenwettelijk),
                Some("Overig") => Some(Verlof::Overig),
                Some(other) => anyhow::bail!("verlof '{other}'"),
            },
        };
        match diensten.last_mut() {
            Some((last, d)) if *last == dienst_id => d.tijdblokken.push(blok),
            _ => diensten.push((dienst_id, Dienst { datum: date(b.get(1), "datum")?, tijdblokken: vec![blok] })),
        }
    }
    // The stored results of earlier periods, as the SQL builder adds them.
    let mut historie: Vec<HistoriePeriode> = Vec::new();
    for h in client.query(stmt::ORACLE_HISTORY.sql, &[&dv, &periode]).await? {
        let id: i32 = h.get(0);
        if historie.last().is_none_or(|l| l.id != id) {
            historie.push(HistoriePeriode {
                id,
                begin: date(h.get(1), "begin_datum")?,
                einde: date(h.get(2), "eind_datum")?,
                factoren: Vec::new(),
            });
        }
        let value = decimal(h.get(4), "waarde")?;
        historie.last_mut().expect("pushed").factoren.push((CompactString::from(h.get::<_, &str>(3)), value));
    }
    Ok(Some(Vraag {
        id,
        timestamp,
        versie,
        dienstverband,
        periode: periode_row,
        diensten: Diensten { dienst: diensten.into_iter().map(|(_, d)| d).collect() },
        historie,
        contract_versie: Some(crate::contract::CONTRACT_VERSIE),
    }))
}
