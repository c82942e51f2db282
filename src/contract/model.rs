//! The typed message model: Vraag (request), Antwoord (answer) and RekenserverFout.
//!
//! Field names follow the XSDs in `schemas/`; the serde attributes give the XML names
//! (`@` for attributes) used by the encoder (`quick_xml::se`).

use chrono::NaiveDate;
use rust_decimal::Decimal;
use serde::{Serialize, Serializer};
use uuid::Uuid;

use super::values::{ClockTime, Timestamp};

fn bit<S: Serializer>(v: &bool, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(if *v { "1" } else { "0" })
}

fn dec<S: Serializer>(v: &Decimal, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

fn opt_dec<S: Serializer>(v: &Option<Decimal>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(d) => s.collect_str(d),
        None => s.serialize_none(),
    }
}

fn date<S: Serializer>(v: &NaiveDate, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&v.format("%Y-%m-%d"))
}

fn opt_date<S: Serializer>(v: &Option<NaiveDate>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(d) => date(d, s),
        None => s.serialize_none(),
    }
}

fn upper_uuid<S: Serializer>(v: &Uuid, s: S) -> Result<S::Ok, S::Error> {
    let mut buf = Uuid::encode_buffer();
    s.serialize_str(v.hyphenated().encode_upper(&mut buf))
}

fn opt_upper_uuid<S: Serializer>(v: &Option<Uuid>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(u) => upper_uuid(u, s),
        None => s.serialize_none(),
    }
}

/// LoonfactorBerekeningVraag: one (dienstverband, periode) and its roster.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Vraag {
    #[serde(rename = "@Id", serialize_with = "upper_uuid")]
    pub id: Uuid,
    #[serde(rename = "@Timestamp")]
    pub timestamp: Timestamp,
    /// Roster version of this (dienstverband, periode); only grows.
    #[serde(rename = "@Versie")]
    pub versie: i64,
    #[serde(rename = "Dienstverband")]
    pub dienstverband: Dienstverband,
    #[serde(rename = "Periode")]
    pub periode: Periode,
    #[serde(rename = "Diensten")]
    pub diensten: Diensten,
}

/// The employment: contract terms the engine needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dienstverband {
    #[serde(rename = "@Id")]
    pub id: i32,
    #[serde(rename = "Cao")]
    pub cao: Cao,
    #[serde(rename = "DagenPerWeek", serialize_with = "dec")]
    pub dagen_per_week: Decimal,
    #[serde(rename = "DatumInDienst", serialize_with = "date")]
    pub datum_in_dienst: NaiveDate,
    #[serde(
        rename = "DatumUitDienst",
        serialize_with = "opt_date",
        skip_serializing_if = "Option::is_none"
    )]
    pub datum_uit_dienst: Option<NaiveDate>,
    /// Contract hours per week (part-time hours; the full week for a full-timer).
    #[serde(rename = "ParttimeUren", serialize_with = "dec")]
    pub parttime_uren: Decimal,
    #[serde(rename = "Salaris", skip_serializing_if = "Option::is_none")]
    pub salaris: Option<Salaris>,
    #[serde(rename = "Soort")]
    pub soort: String,
    #[serde(rename = "Functiegroep")]
    pub functiegroep: i32,
}

/// The collective labour agreement (CAO) the employment falls under.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cao {
    #[serde(rename = "@Id")]
    pub id: i32,
    #[serde(rename = "Code")]
    pub code: String,
    #[serde(rename = "IsVierWeken", serialize_with = "bit")]
    pub is_vier_weken: bool,
    #[serde(rename = "Naam")]
    pub naam: String,
    #[serde(rename = "WerkweekUren", serialize_with = "dec")]
    pub werkweek_uren: Decimal,
}

/// Salary: the full-time nominal monthly amount and allowances.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Salaris {
    #[serde(
        rename = "@GarantieToeslag",
        serialize_with = "opt_dec",
        skip_serializing_if = "Option::is_none"
    )]
    pub garantie_toeslag: Option<Decimal>,
    #[serde(
        rename = "@GarantieTredeBedrag",
        serialize_with = "opt_dec",
        skip_serializing_if = "Option::is_none"
    )]
    pub garantie_trede_bedrag: Option<Decimal>,
    #[serde(
        rename = "@LoonToeslag",
        serialize_with = "opt_dec",
        skip_serializing_if = "Option::is_none"
    )]
    pub loon_toeslag: Option<Decimal>,
    #[serde(rename = "NominaalSalaris", serialize_with = "dec")]
    pub nominaal_salaris: Decimal,
}

/// The salary period, first and last day inclusive.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Periode {
    #[serde(rename = "@Id")]
    pub id: i32,
    #[serde(rename = "Begin", serialize_with = "date")]
    pub begin: NaiveDate,
    #[serde(rename = "Einde", serialize_with = "date")]
    pub einde: NaiveDate,
}

/// The shifts of the period.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Diensten {
    #[serde(rename = "Dienst", default)]
    pub dienst: Vec<Dienst>,
}

/// One shift on one date; its blocks may run past midnight.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dienst {
    #[serde(rename = "@Datum", serialize_with = "date")]
    pub datum: NaiveDate,
    #[serde(rename = "Tijdblok")]
    pub tijdblokken: Vec<Tijdblok>,
}

/// A time block; an end not after the start means the next day.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tijdblok {
    #[serde(rename = "@Begin")]
    pub begin: ClockTime,
    #[serde(rename = "@Einde")]
    pub einde: ClockTime,
    #[serde(rename = "@IsZiek", serialize_with = "bit")]
    pub is_ziek: bool,
    #[serde(rename = "DienstType")]
    pub dienst_type: DienstType,
}

/// The kind of duty and whether it counts as worked time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DienstType {
    #[serde(rename = "@Code")]
    pub code: String,
    #[serde(rename = "@TeltMeeInGewerkteUren", serialize_with = "bit")]
    pub telt_mee_in_gewerkte_uren: bool,
}

/// LoonfactorBerekeningAntwoord: the wage factors for one Vraag.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Antwoord {
    #[serde(rename = "@Id", serialize_with = "upper_uuid")]
    pub id: Uuid,
    #[serde(rename = "@Timestamp")]
    pub timestamp: Timestamp,
    #[serde(rename = "@Versie")]
    pub versie: i64,
    #[serde(rename = "@DienstverbandId")]
    pub dienstverband_id: i32,
    #[serde(rename = "@PeriodeId")]
    pub periode_id: i32,
    #[serde(rename = "VariabeleMutatie")]
    pub mutaties: Vec<VariabeleMutatie>,
    #[serde(rename = "Waarschuwing")]
    pub waarschuwingen: Vec<Waarschuwing>,
}

/// One wage factor value for payroll.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VariabeleMutatie {
    #[serde(rename = "DienstverbandId")]
    pub dienstverband_id: i32,
    #[serde(rename = "KaartSoort")]
    pub kaart_soort: i32,
    /// Three digits, e.g. `100`.
    #[serde(rename = "LoonfactorCode")]
    pub loonfactor_code: String,
    #[serde(rename = "PeriodeId")]
    pub periode_id: i32,
    #[serde(rename = "Waarde", serialize_with = "dec")]
    pub waarde: Decimal,
    #[serde(rename = "KostenPlaatsId", skip_serializing_if = "Option::is_none")]
    pub kosten_plaats_id: Option<i32>,
    #[serde(rename = "KostenSoortId", skip_serializing_if = "Option::is_none")]
    pub kosten_soort_id: Option<i32>,
}

/// A warning about input the engine worked around.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Waarschuwing {
    /// Stable code, lower case with dashes, e.g. `blok-buiten-dienstverband`.
    #[serde(rename = "@Code")]
    pub code: String,
    #[serde(
        rename = "@Datum",
        serialize_with = "opt_date",
        skip_serializing_if = "Option::is_none"
    )]
    pub datum: Option<NaiveDate>,
    #[serde(rename = "$text")]
    pub tekst: String,
}

/// RekenserverFout: why a Vraag could not be answered.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RekenserverFout {
    #[serde(rename = "ErrorNumber")]
    pub error_number: i32,
    #[serde(rename = "ErrorSeverity")]
    pub error_severity: i32,
    #[serde(rename = "ErrorState")]
    pub error_state: i32,
    #[serde(rename = "ErrorProcedure")]
    pub error_procedure: String,
    /// Line of the offending input where known, else 0.
    #[serde(rename = "ErrorLine")]
    pub error_line: i32,
    #[serde(rename = "ErrorMessage")]
    pub error_message: String,
    #[serde(
        rename = "VraagId",
        serialize_with = "opt_upper_uuid",
        skip_serializing_if = "Option::is_none"
    )]
    pub vraag_id: Option<Uuid>,
    #[serde(rename = "Reden")]
    pub reden: Reden,
}

/// Stable, machine-readable reason codes of a Fout (the `FoutReden` XSD enumeration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reden {
    BodyTooLarge,
    BadEncoding,
    MalformedXml,
    DoctypeForbidden,
    TooDeep,
    WrongRoot,
    WrongNamespace,
    UnexpectedElement,
    UnexpectedAttribute,
    MissingElement,
    MissingAttribute,
    InvalidValue,
    PeriodInverted,
    BlockTooLong,
    SalaryMissing,
    UnknownCao,
    Internal,
}

impl Reden {
    /// Every reason, in the order of their error numbers.
    pub const ALL: [Reden; 17] = [
        Reden::BodyTooLarge,
        Reden::BadEncoding,
        Reden::MalformedXml,
        Reden::DoctypeForbidden,
        Reden::TooDeep,
        Reden::WrongRoot,
        Reden::WrongNamespace,
        Reden::UnexpectedElement,
        Reden::UnexpectedAttribute,
        Reden::MissingElement,
        Reden::MissingAttribute,
        Reden::InvalidValue,
        Reden::PeriodInverted,
        Reden::BlockTooLong,
        Reden::SalaryMissing,
        Reden::UnknownCao,
        Reden::Internal,
    ];

    /// The code as written in XML.
    pub fn code(self) -> &'static str {
        match self {
            Reden::BodyTooLarge => "body-too-large",
            Reden::BadEncoding => "bad-encoding",
            Reden::MalformedXml => "malformed-xml",
            Reden::DoctypeForbidden => "doctype-forbidden",
            Reden::TooDeep => "too-deep",
            Reden::WrongRoot => "wrong-root",
            Reden::WrongNamespace => "wrong-namespace",
            Reden::UnexpectedElement => "unexpected-element",
            Reden::UnexpectedAttribute => "unexpected-attribute",
            Reden::MissingElement => "missing-element",
            Reden::MissingAttribute => "missing-attribute",
            Reden::InvalidValue => "invalid-value",
            Reden::PeriodInverted => "period-inverted",
            Reden::BlockTooLong => "block-too-long",
            Reden::SalaryMissing => "salary-missing",
            Reden::UnknownCao => "unknown-cao",
            Reden::Internal => "internal",
        }
    }

    /// Parses a code as written in XML.
    pub fn from_code(code: &str) -> Option<Reden> {
        Reden::ALL.into_iter().find(|r| r.code() == code)
    }

    /// The ErrorNumber of a Fout with this reason: user-defined range (50001 and up),
    /// stable per reason.
    pub fn error_number(self) -> i32 {
        50001 + Reden::ALL.iter().position(|r| *r == self).unwrap_or(16) as i32
    }
}

impl std::fmt::Display for Reden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}
