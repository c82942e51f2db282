//! The typed message model: Vraag (request), Antwoord (answer) and RekenserverFout.
//!
//! Plain data: field names follow the XSD element and attribute names in `schemas/`
//! (`decode` reads them, `encode` writes them). Short codes are `CompactString`s: kept
//! inline, they cost no allocation per block.

use chrono::NaiveDate;
use compact_str::CompactString;
use rust_decimal::Decimal;
use uuid::Uuid;

use super::values::{ClockTime, Timestamp};

/// LoonfactorBerekeningVraag: one (dienstverband, periode) and its roster.
#[derive(Debug, Clone, PartialEq)]
pub struct Vraag {
    pub id: Uuid,
    pub timestamp: Timestamp,
    /// Roster version of this (dienstverband, periode); only grows.
    pub versie: i64,
    pub dienstverband: Dienstverband,
    pub periode: Periode,
    pub diensten: Diensten,
    /// Stored results of earlier periods (`Historie`; empty when absent).
    pub historie: Vec<HistoriePeriode>,
    /// The contract version the sender wrote (`ContractVersie`; absent in the shapes
    /// before it, versions 1 and 2). A worker refuses a Vraag of a later version than
    /// [`CONTRACT_VERSIE`](crate::contract::CONTRACT_VERSIE) as the environment's fault.
    pub contract_versie: Option<u32>,
}

/// The employment: contract terms the engine needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Dienstverband {
    pub id: i32,
    pub cao: Cao,
    pub dagen_per_week: Decimal,
    pub datum_in_dienst: NaiveDate,
    pub datum_uit_dienst: Option<NaiveDate>,
    /// Contract hours per week (part-time hours; the full week for a full-timer).
    pub parttime_uren: Decimal,
    pub salaris: Option<Salaris>,
    pub soort: CompactString,
    pub functiegroep: i32,
}

/// The collective labour agreement (CAO) the employment falls under.
#[derive(Debug, Clone, PartialEq)]
pub struct Cao {
    pub id: i32,
    pub code: CompactString,
    pub is_vier_weken: bool,
    pub naam: String,
    pub werkweek_uren: Decimal,
}

/// Salary: the full-time nominal monthly amount and allowances.
#[derive(Debug, Clone, PartialEq)]
pub struct Salaris {
    pub garantie_toeslag: Option<Decimal>,
    pub garantie_trede_bedrag: Option<Decimal>,
    pub loon_toeslag: Option<Decimal>,
    pub nominaal_salaris: Decimal,
}

/// The salary period, first and last day inclusive.
#[derive(Debug, Clone, PartialEq)]
pub struct Periode {
    pub id: i32,
    pub begin: NaiveDate,
    pub einde: NaiveDate,
}

/// The shifts of the period.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Diensten {
    pub dienst: Vec<Dienst>,
}

/// One shift on one date; its blocks may run past midnight.
#[derive(Debug, Clone, PartialEq)]
pub struct Dienst {
    pub datum: NaiveDate,
    pub tijdblokken: Vec<Tijdblok>,
}

/// A time block; an end not after the start means the next day.
#[derive(Debug, Clone, PartialEq)]
pub struct Tijdblok {
    pub begin: ClockTime,
    pub einde: ClockTime,
    pub is_ziek: bool,
    pub dienst_type: DienstType,
    /// Leave taken on the block's hours (`Verlof`), `None` for work or sickness.
    pub verlof: Option<Verlof>,
}

/// The kind of leave a block holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verlof {
    /// Statutory vacation hours (`Wettelijk`).
    Wettelijk,
    /// The rest of the vacation hours (`Bovenwettelijk`).
    Bovenwettelijk,
    /// Other paid leave (`Overig`).
    Overig,
}

impl Verlof {
    /// The attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            Verlof::Wettelijk => "Wettelijk",
            Verlof::Bovenwettelijk => "Bovenwettelijk",
            Verlof::Overig => "Overig",
        }
    }
}

/// An earlier period of the employment and its stored wage factors.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoriePeriode {
    pub id: i32,
    pub begin: NaiveDate,
    pub einde: NaiveDate,
    /// (code, value), as the stored Antwoord gave them.
    pub factoren: Vec<(CompactString, Decimal)>,
}

/// The kind of duty and whether it counts as worked time.
#[derive(Debug, Clone, PartialEq)]
pub struct DienstType {
    pub code: CompactString,
    pub telt_mee_in_gewerkte_uren: bool,
}

/// LoonfactorBerekeningAntwoord: the wage factors for one Vraag.
#[derive(Debug, Clone, PartialEq)]
pub struct Antwoord {
    pub id: Uuid,
    pub timestamp: Timestamp,
    pub versie: i64,
    pub dienstverband_id: i32,
    pub periode_id: i32,
    pub mutaties: Vec<VariabeleMutatie>,
    pub waarschuwingen: Vec<Waarschuwing>,
    /// What computed it (`Rekenversie`): the engine's version and its rate tables'
    /// fingerprint.
    pub rekenversie: Option<String>,
}

/// One wage factor value for payroll.
#[derive(Debug, Clone, PartialEq)]
pub struct VariabeleMutatie {
    pub dienstverband_id: i32,
    pub kaart_soort: i32,
    /// Three digits, e.g. `100`.
    pub loonfactor_code: String,
    pub periode_id: i32,
    pub waarde: Decimal,
    pub kosten_plaats_id: Option<i32>,
    pub kosten_soort_id: Option<i32>,
}

/// A warning about input the engine worked around.
#[derive(Debug, Clone, PartialEq)]
pub struct Waarschuwing {
    /// Stable code, lower case with dashes, e.g. `blok-buiten-dienstverband`.
    pub code: CompactString,
    pub datum: Option<NaiveDate>,
    pub tekst: String,
}

/// RekenserverFout: why a Vraag could not be answered.
#[derive(Debug, Clone, PartialEq)]
pub struct RekenserverFout {
    pub error_number: i32,
    pub error_severity: i32,
    pub error_state: i32,
    pub error_procedure: String,
    /// Line of the offending input where known, else 0.
    pub error_line: i32,
    pub error_message: String,
    pub vraag_id: Option<Uuid>,
    pub reden: Reden,
}

/// Stable, machine-readable reason codes of a Fout (the `FoutReden` XSD enumeration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
    /// The Vraag is of a later contract version than the worker knows (a rolling
    /// upgrade in the wrong order): the environment's fault, sent again after the upgrade.
    NewerContract,
}

impl Reden {
    /// Every reason, in the order of their error numbers.
    pub const ALL: [Reden; 18] = [
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
        Reden::NewerContract,
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
            Reden::NewerContract => "newer-contract",
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
