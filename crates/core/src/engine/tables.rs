//! Rate tables as data: ORT windows per CAO and effective date, public-holiday rules
//! and the ORT hourly-wage cap, parsed from TOML and validated before use.
//!
//! The shipped tables are `data/cao.toml`, built into the binary; another file can be
//! given at start-up. Any problem stops start-up with a message naming the entry.

use chrono::{Datelike, NaiveDate};
use rust_decimal::Decimal;
use serde::Deserialize;

use super::holidays::HolidayRule;

/// The tables shipped with sbworker.
pub const BUILT_IN: &str = include_str!("../../../../data/cao.toml");

/// A rate table that cannot be used, and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("rate tables: {at}: {message}")]
pub struct TableError {
    /// Which entry, e.g. `cao[0] (ZKH).versie[1].vensters[3]`.
    pub at: String,
    pub message: String,
}

fn bad(at: impl Into<String>, message: impl Into<String>) -> TableError {
    TableError { at: at.into(), message: message.into() }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    kaart_soort: i32,
    cao: Vec<RawCao>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCao {
    code: String,
    #[serde(default)]
    aliases: Vec<String>,
    naam: String,
    ort_max_functiegroep: i32,
    #[serde(default)]
    ort_tot_voltijd: bool,
    #[serde(default)]
    ort_vakantie: Option<RawVacationOrt>,
    #[serde(default)]
    max_uren_week: Option<Decimal>,
    #[serde(default)]
    niet_geverifieerd: Option<String>,
    #[serde(default)]
    overwerk: Option<RawOvertime>,
    feestdagen: Vec<RawHoliday>,
    #[serde(default)]
    ort_max_uurloon: Vec<RawCap>,
    versie: Vec<RawVersion>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVacationOrt {
    maanden: u32,
    max_uren_voltijd: Decimal,
    #[serde(default)]
    noemer: Option<String>,
    #[serde(default)]
    maximum_telt: Option<String>,
    #[serde(default)]
    deels_in_venster: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOvertime {
    #[serde(default)]
    max_functiegroep: Option<i32>,
    #[serde(default)]
    tijd_voor_tijd: bool,
    #[serde(default)]
    alleen_voltijd: bool,
    #[serde(default)]
    vensters: Vec<RawOvertimeWindow>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOvertimeWindow {
    dagen: String,
    van: String,
    tot: String,
    pct: u32,
    code: String,
    #[serde(default)]
    max_uren: Option<Decimal>,
    #[serde(default)]
    per_doordeweekse_dagen: Option<u32>,
    #[serde(default)]
    daarboven_pct: Option<u32>,
    #[serde(default)]
    daarboven_code: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHoliday {
    naam: String,
    regel: String,
    #[serde(default)]
    elke: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCap {
    vanaf: String,
    bedrag: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVersion {
    vanaf: String,
    vensters: Vec<RawWindow>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWindow {
    dagen: String,
    van: String,
    tot: String,
    pct: u32,
    code: String,
}

/// Which days a window applies to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DaySet {
    /// Bit 0 = Monday … bit 6 = Sunday.
    pub weekdays: u8,
    pub holiday: bool,
    /// Calendar days (month, day).
    pub dates: Vec<(u32, u32)>,
}

impl DaySet {
    pub fn matches(&self, day: &DayInfo<'_>) -> bool {
        self.weekdays & (1 << day.weekday) != 0
            || (self.holiday && day.holiday.is_some())
            || self.dates.iter().any(|&(m, d)| m == day.month && d == day.day)
    }
}

/// What a local calendar day is, for window matching.
#[derive(Debug, Clone, Copy)]
pub struct DayInfo<'a> {
    /// 0 = Monday … 6 = Sunday.
    pub weekday: u8,
    pub month: u32,
    pub day: u32,
    /// The holiday's name, when it is one under this CAO.
    pub holiday: Option<&'a str>,
}

/// One ORT window.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub days: DaySet,
    /// The text of `dagen`, for explanations.
    pub days_text: String,
    /// Minutes of the local day, `from < to <= 1440`.
    pub from: u16,
    pub to: u16,
    pub pct: u32,
    /// Index into [`Cao::rates`].
    pub rate: usize,
}

/// The windows in force from a date.
#[derive(Debug, Clone, PartialEq)]
pub struct Version {
    pub from: NaiveDate,
    pub windows: Vec<Window>,
    /// Every window edge plus 0 and 1440, sorted, unique.
    pub edges: Vec<u16>,
}

/// An ORT rate and the wage factor that receives its hours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rate {
    pub pct: u32,
    pub code: String,
}

/// One CAO's tables.
#[derive(Debug, Clone, PartialEq)]
pub struct Cao {
    pub code: String,
    pub aliases: Vec<String>,
    pub name: String,
    pub ort_max_functiegroep: i32,
    /// ORT only on the hours of a period up to full time (CAO Ziekenhuizen art. 9.1
    /// lid 1-2 with art. 8.5 lid 2): the hours after the first `max(contract, full
    /// time) x weeks` of the period carry none.
    pub ort_tot_voltijd: bool,
    /// ORT during statutory vacation (CAO Ziekenhuizen art. 9.1 lid 4, art. 12.1.2 lid
    /// 2): the hourly wage raised by the average ORT percentage of the past `months`, on
    /// at most `max_hours_full_time` statutory vacation hours a calendar year (pro rata).
    pub vacation_ort: Option<VacationOrt>,
    /// The most hours a week a contract may hold (CAO Ziekenhuizen art. 6.1 lid 2: 40);
    /// a Vraag above it is answered with a warning.
    pub max_hours_week: Option<Decimal>,
    /// Why this table is not checked against its CAO's text, when it is not: every
    /// Antwoord computed with it says so in a warning.
    pub unverified: Option<String>,
    /// Overtime pay: which worked hours above the roster's hours get which percentage.
    pub overtime: Option<Overtime>,
    pub holidays: Vec<HolidayRule>,
    /// (from, cap) sorted by date.
    pub caps: Vec<(NaiveDate, Decimal)>,
    /// Holiday dates of [`HOLIDAY_YEARS`], sorted, with the rule's index.
    holiday_dates: Vec<(NaiveDate, usize)>,
    pub versions: Vec<Version>,
    /// The distinct rates of all versions, sorted by code.
    pub rates: Vec<Rate>,
}

impl Cao {
    /// The windows in force on `date`, if any.
    pub fn version_on(&self, date: NaiveDate) -> Option<&Version> {
        self.versions.iter().rev().find(|v| v.from <= date)
    }

    /// The ORT hourly-wage cap on `date` (`None`: no cap configured then).
    pub fn cap_on(&self, date: NaiveDate) -> Option<(usize, Decimal)> {
        self.caps.iter().enumerate().rev().find(|(_, (from, _))| *from <= date).map(|(i, (_, c))| (i, *c))
    }

    /// The holidays of this CAO in the years `first..=last`, sorted by date (from the
    /// dates computed at load for [`HOLIDAY_YEARS`], computed on the spot outside them).
    pub fn holidays_in(&self, first: i32, last: i32) -> Vec<(NaiveDate, &str)> {
        if HOLIDAY_YEARS.contains(&first) && HOLIDAY_YEARS.contains(&last) {
            let from = NaiveDate::from_ymd_opt(first, 1, 1).expect("in range");
            let i = self.holiday_dates.partition_point(|(d, _)| *d < from);
            return self.holiday_dates[i..]
                .iter()
                .take_while(|(d, _)| d.year() <= last)
                .map(|(d, r)| (*d, self.holidays[*r].name.as_str()))
                .collect();
        }
        holiday_dates(&self.holidays, first..=last)
            .into_iter()
            .map(|(d, r)| (d, self.holidays[r].name.as_str()))
            .collect()
    }

    /// What `date` is under this CAO, given its holidays (from [`Cao::holidays_in`]).
    pub fn day_info<'a>(&self, date: NaiveDate, holidays: &[(NaiveDate, &'a str)]) -> DayInfo<'a> {
        DayInfo {
            weekday: date.weekday().num_days_from_monday() as u8,
            month: date.month(),
            day: date.day(),
            holiday: holidays.iter().find(|(d, _)| *d == date).map(|(_, n)| *n),
        }
    }
}

/// Overtime pay as the CAO sets it: the overtime hours (worked hours above the roster's
/// hours) get the percentage of the window they fall in, over the hourly wage.
#[derive(Debug, Clone, PartialEq)]
pub struct Overtime {
    /// Job groups above this get no overtime pay (`None`: every job group).
    pub max_functiegroep: Option<i32>,
    /// The overtime hours themselves are compensated in time off (factor 315), the
    /// percentages paid on top.
    pub time_off: bool,
    /// The rules hold for full-timers only (as read): a part-timer's overtime gets no
    /// percentage and a warning (`alleen_voltijd`).
    pub full_time_only: bool,
    pub windows: Vec<OvertimeWindow>,
    /// Every window edge plus 0 and 1440, sorted, unique.
    pub edges: Vec<u16>,
    /// The distinct overtime percentages, sorted by code.
    pub rates: Vec<Rate>,
}

/// One overtime window.
#[derive(Debug, Clone, PartialEq)]
pub struct OvertimeWindow {
    pub window: Window,
    /// A most of minutes at this window's own percentage.
    pub cap: Option<Cap>,
}

/// At most `minutes` at a window's percentage in any `weekdays` consecutive days Monday
/// to Friday (CAO GGZ: 5 hours in seven consecutive weekdays); the window's other minutes
/// go to `rate` (an index into [`Overtime::rates`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap {
    pub minutes: i64,
    pub weekdays: u32,
    pub rate: usize,
}

/// ORT during statutory vacation, as the CAO sets it, with the three choices the text
/// leaves open (docs/payroll-rules.md gives the defaults and their reasons).
#[derive(Debug, Clone, PartialEq)]
pub struct VacationOrt {
    pub months: u32,
    pub max_hours_full_time: Decimal,
    /// What the average ORT percentage is a percentage of (`noemer`).
    pub denominator: AverageOver,
    /// Which statutory hours use the year's maximum up (`maximum_telt`).
    pub maximum_counts: MaximumCounts,
    /// How a stored period partly inside the past months counts (`deels_in_venster`).
    pub partial_period: PartialPeriod,
}

/// The denominator of the average ORT percentage over vacation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AverageOver {
    /// `gewerkt` (default): Σ(ORT hours x %) / worked hours (100).
    Worked,
    /// `betaald`: Σ(ORT hours x %) / paid hours (worked, sick and leave: 100, 120,
    /// 130-132).
    Paid,
}

/// Which statutory vacation hours of the year use up its maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaximumCounts {
    /// `opgenomen` (default): every statutory hour taken (130), whatever its average.
    Taken,
    /// `met_ort`: only the hours that carried ORT (133); hours at a 0% average do not.
    WithOrt,
}

/// How a stored period that straddles the start of the past months counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartialPeriod {
    /// `naar_rato` (default): its hours weighted by the share of its days in the window.
    ProRata,
    /// `heel`: whole.
    Whole,
    /// `niet`: not at all.
    Excluded,
}

fn choice<T: Copy>(at: &str, key: &str, given: Option<&str>, options: &[(&str, T)]) -> Result<T, TableError> {
    let Some(given) = given else { return Ok(options[0].1) };
    options.iter().find(|(name, _)| *name == given).map(|(_, v)| *v).ok_or_else(|| {
        let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
        bad(at, format!("{key} '{given}' is not one of {}", names.join(", ")))
    })
}

/// All rate tables, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Tables {
    pub kaart_soort: i32,
    pub caos: Vec<Cao>,
    /// A fingerprint of the tables' text (FNV-1a, hex): which tables computed a result.
    pub fingerprint: String,
}

impl Tables {
    /// The tables shipped with sbworker.
    pub fn built_in() -> Result<Self, TableError> {
        Self::from_toml(BUILT_IN)
    }

    /// Finds a CAO by its code or one of its aliases.
    pub fn cao(&self, code: &str) -> Option<&Cao> {
        self.caos.iter().find(|c| c.code == code || c.aliases.iter().any(|a| a == code))
    }

    /// Parses and validates tables from TOML text.
    pub fn from_toml(text: &str) -> Result<Self, TableError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| bad("TOML", e.to_string().trim().to_owned()))?;
        if raw.cao.is_empty() {
            return Err(bad("cao", "no CAO is defined"));
        }
        let mut caos: Vec<Cao> = Vec::new();
        for (i, rc) in raw.cao.into_iter().enumerate() {
            let at = format!("cao[{i}] ({})", rc.code);
            let cao = cao_from_raw(&at, rc)?;
            for name in std::iter::once(&cao.code).chain(&cao.aliases) {
                if caos.iter().any(|c| c.code == *name || c.aliases.contains(name)) {
                    return Err(bad(&at, format!("code or alias '{name}' is used by another CAO")));
                }
            }
            caos.push(cao);
        }
        // FNV-1a 64 over the text (a fingerprint, not a security measure; the engine
        // uses nothing below it, so it is written out here).
        let hash =
            text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
        Ok(Self { kaart_soort: raw.kaart_soort, caos, fingerprint: format!("{hash:016x}") })
    }
}

/// Years whose holiday dates are computed once, when the tables load.
pub const HOLIDAY_YEARS: std::ops::RangeInclusive<i32> = 1990..=2100;

fn holiday_dates(rules: &[HolidayRule], years: std::ops::RangeInclusive<i32>) -> Vec<(NaiveDate, usize)> {
    let mut v: Vec<(NaiveDate, usize)> = years
        .flat_map(|y| {
            rules.iter().enumerate().filter_map(move |(i, h)| h.date_in(y).filter(|d| h.applies(*d)).map(|d| (d, i)))
        })
        .collect();
    v.sort();
    v
}

fn date(at: &str, s: &str) -> Result<NaiveDate, TableError> {
    crate::contract::values::parse_date(s).map_err(|why| bad(at, format!("'{s}' {why}")))
}

fn minute(at: &str, s: &str, allow_24: bool) -> Result<u16, TableError> {
    if allow_24 && s == "24:00" {
        return Ok(1440);
    }
    crate::contract::values::parse_clock(s).map(|c| c.minutes()).map_err(|why| bad(at, format!("'{s}' {why}")))
}

fn days(at: &str, s: &str) -> Result<DaySet, TableError> {
    const NAMES: [&str; 7] = ["ma", "di", "wo", "do", "vr", "za", "zo"];
    let idx = |n: &str| NAMES.iter().position(|x| *x == n);
    let mut set = DaySet::default();
    for part in s.split(',').map(str::trim) {
        if part == "feestdag" {
            set.holiday = true;
        } else if let Some((a, b)) = part.split_once('-').filter(|(a, b)| idx(a).is_some() && idx(b).is_some()) {
            let (a, b) = (idx(a).unwrap(), idx(b).unwrap());
            if a > b {
                return Err(bad(at, format!("day range '{part}' runs backwards")));
            }
            (a..=b).for_each(|d| set.weekdays |= 1 << d);
        } else if let Some(d) = idx(part) {
            set.weekdays |= 1 << d;
        } else if let Some((m, d)) =
            part.split_once('-').and_then(|(m, d)| Some((m.parse::<u32>().ok()?, d.parse::<u32>().ok()?)))
        {
            if NaiveDate::from_ymd_opt(2024, m, d).is_none() {
                return Err(bad(at, format!("'{part}' is not a calendar day MM-DD")));
            }
            set.dates.push((m, d));
        } else {
            return Err(bad(at, format!("'{part}' is not a day (ma … zo, ma-vr, feestdag or MM-DD)")));
        }
    }
    Ok(set)
}

/// A window's days and its local minutes `van` to `tot` (ORT and overtime windows alike).
fn span(at: &str, dagen: &str, van: &str, tot: &str) -> Result<(DaySet, u16, u16), TableError> {
    let dayset = days(at, dagen)?;
    let (f, t) = (minute(at, van, false)?, minute(at, tot, true)?);
    if f >= t {
        return Err(bad(at, format!("van {van} is not before tot {tot}")));
    }
    Ok((dayset, f, t))
}

/// A code a table assigns: three digits and none the engine writes itself.
fn check_code(at: &str, code: &str) -> Result<(), TableError> {
    if !super::codes::is_code_shaped(code) {
        return Err(bad(at, format!("code '{code}' is not a three-digit wage factor code")));
    }
    // An Antwoord holds each code once: a rate cannot take a code of another factor.
    if let Some((_, what)) = super::codes::FIXED.iter().find(|(c, _)| *c == code) {
        return Err(bad(at, format!("code '{code}' is the code of another wage factor ({what})")));
    }
    Ok(())
}

/// One rate, one code: the index of (pct, code) in `rates`, added when new.
fn rate_index(at: &str, rates: &mut Vec<Rate>, pct: u32, code: &str) -> Result<usize, TableError> {
    match rates.iter().position(|r| r.pct == pct || r.code == code) {
        Some(r) if rates[r].pct == pct && rates[r].code == code => Ok(r),
        Some(r) => Err(bad(
            at,
            format!(
                "{pct}% with code {code} clashes with {}% with code {}: one rate, one code",
                rates[r].pct, rates[r].code
            ),
        )),
        None => {
            rates.push(Rate { pct, code: code.to_owned() });
            Ok(rates.len() - 1)
        }
    }
}

/// Rates sorted by code; returns the old index → new index map.
fn sort_rates(rates: &mut Vec<Rate>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..rates.len()).collect();
    order.sort_by(|a, b| rates[*a].code.cmp(&rates[*b].code));
    let remap: Vec<usize> = (0..rates.len()).map(|old| order.iter().position(|o| *o == old).unwrap()).collect();
    *rates = order.into_iter().map(|i| rates[i].clone()).collect();
    remap
}

fn overtime_from_raw(at: &str, ro: &RawOvertime, ort_rates: &[Rate]) -> Result<Overtime, TableError> {
    let mut rates: Vec<Rate> = Vec::new();
    let mut windows = Vec::new();
    let mut edges = vec![0u16, 1440];
    for (wi, w) in ro.vensters.iter().enumerate() {
        let wat = format!("{at}.vensters[{wi}]");
        let (dayset, f, t) = span(&wat, &w.dagen, &w.van, &w.tot)?;
        let mut add = |pct: u32, code: &str| -> Result<usize, TableError> {
            if pct == 0 || pct > 200 {
                return Err(bad(&wat, format!("pct {pct} is not between 1 and 200")));
            }
            check_code(&wat, code)?;
            if let Some(r) = ort_rates.iter().find(|r| r.code == code) {
                return Err(bad(&wat, format!("code '{code}' is the code of the ORT rate of {}%", r.pct)));
            }
            rate_index(&wat, &mut rates, pct, code)
        };
        let rate = add(w.pct, &w.code)?;
        let cap = match (&w.max_uren, w.per_doordeweekse_dagen, w.daarboven_pct, &w.daarboven_code) {
            (None, None, None, None) => None,
            (Some(hours), Some(weekdays), Some(pct), Some(code)) => {
                if *hours <= Decimal::ZERO || *hours > Decimal::from(1000) {
                    return Err(bad(&wat, format!("max_uren {hours} is not more than 0 and at most 1000")));
                }
                if !(1..=260).contains(&weekdays) {
                    return Err(bad(&wat, format!("per_doordeweekse_dagen {weekdays} is not 1 to 260")));
                }
                let minutes = i64::try_from((*hours * Decimal::from(60)).round()).unwrap_or(0);
                if minutes == 0 {
                    return Err(bad(&wat, "max_uren is less than a minute"));
                }
                Some(Cap { minutes, weekdays, rate: add(pct, code)? })
            }
            _ => {
                return Err(bad(
                    &wat,
                    "max_uren, per_doordeweekse_dagen, daarboven_pct and daarboven_code go together",
                ));
            }
        };
        edges.extend([f, t]);
        windows.push(OvertimeWindow {
            window: Window { days: dayset, days_text: w.dagen.clone(), from: f, to: t, pct: w.pct, rate },
            cap,
        });
    }
    edges.sort_unstable();
    edges.dedup();
    let remap = sort_rates(&mut rates);
    for w in &mut windows {
        w.window.rate = remap[w.window.rate];
        if let Some(c) = &mut w.cap {
            c.rate = remap[c.rate];
        }
    }
    if let Some(g) = ro.max_functiegroep
        && g < 0
    {
        return Err(bad(at, format!("max_functiegroep {g} is below 0")));
    }
    Ok(Overtime {
        max_functiegroep: ro.max_functiegroep,
        time_off: ro.tijd_voor_tijd,
        full_time_only: ro.alleen_voltijd,
        windows,
        edges,
        rates,
    })
}

fn cao_from_raw(at: &str, rc: RawCao) -> Result<Cao, TableError> {
    if rc.code.trim().is_empty() {
        return Err(bad(at, "code is empty"));
    }
    let mut holidays = Vec::new();
    for (i, h) in rc.feestdagen.iter().enumerate() {
        let hat = format!("{at}.feestdagen[{i}]");
        let rule = HolidayRule::parse(&h.naam, &h.regel, h.elke).map_err(|m| bad(&hat, m))?;
        holidays.push(rule);
    }
    let vacation_ort = match &rc.ort_vakantie {
        None => None,
        Some(v) => {
            let vat = format!("{at}.ort_vakantie");
            if !(1..=24).contains(&v.maanden) {
                return Err(bad(&vat, format!("maanden {} is not 1 to 24", v.maanden)));
            }
            if v.max_uren_voltijd <= Decimal::ZERO {
                return Err(bad(&vat, "max_uren_voltijd must be more than 0"));
            }
            let denominator = choice(
                &vat,
                "noemer",
                v.noemer.as_deref(),
                &[("gewerkt", AverageOver::Worked), ("betaald", AverageOver::Paid)],
            )?;
            let maximum_counts = choice(
                &vat,
                "maximum_telt",
                v.maximum_telt.as_deref(),
                &[("opgenomen", MaximumCounts::Taken), ("met_ort", MaximumCounts::WithOrt)],
            )?;
            let partial_period = choice(
                &vat,
                "deels_in_venster",
                v.deels_in_venster.as_deref(),
                &[
                    ("naar_rato", PartialPeriod::ProRata),
                    ("heel", PartialPeriod::Whole),
                    ("niet", PartialPeriod::Excluded),
                ],
            )?;
            Some(VacationOrt {
                months: v.maanden,
                max_hours_full_time: v.max_uren_voltijd,
                denominator,
                maximum_counts,
                partial_period,
            })
        }
    };
    let mut caps = Vec::new();
    for (i, c) in rc.ort_max_uurloon.iter().enumerate() {
        let cat = format!("{at}.ort_max_uurloon[{i}]");
        let from = date(&cat, &c.vanaf)?;
        let amount = crate::contract::values::parse_decimal(&c.bedrag)
            .map_err(|why| bad(&cat, format!("bedrag '{}' {why}", c.bedrag)))?;
        if amount <= Decimal::ZERO {
            return Err(bad(&cat, "bedrag must be more than 0"));
        }
        if caps.last().is_some_and(|(prev, _)| *prev >= from) {
            return Err(bad(&cat, "entries must be in increasing date order"));
        }
        caps.push((from, amount));
    }
    if rc.versie.is_empty() {
        return Err(bad(at, "no versie (window table) is defined"));
    }
    let mut rates: Vec<Rate> = Vec::new();
    let mut versions: Vec<Version> = Vec::new();
    for (vi, rv) in rc.versie.iter().enumerate() {
        let vat = format!("{at}.versie[{vi}]");
        let from = date(&vat, &rv.vanaf)?;
        if versions.last().is_some_and(|p| p.from >= from) {
            return Err(bad(&vat, "versions must be in increasing vanaf order"));
        }
        let mut windows = Vec::new();
        let mut edges = vec![0u16, 1440];
        for (wi, w) in rv.vensters.iter().enumerate() {
            let wat = format!("{vat}.vensters[{wi}]");
            let (dayset, f, t) = span(&wat, &w.dagen, &w.van, &w.tot)?;
            if w.pct == 0 || w.pct > 100 {
                return Err(bad(&wat, format!("pct {} is not between 1 and 100", w.pct)));
            }
            check_code(&wat, &w.code)?;
            let rate = rate_index(&wat, &mut rates, w.pct, &w.code)?;
            edges.extend([f, t]);
            windows.push(Window { days: dayset, days_text: w.dagen.clone(), from: f, to: t, pct: w.pct, rate });
        }
        edges.sort_unstable();
        edges.dedup();
        versions.push(Version { from, windows, edges });
    }
    // Rates sorted by code, window indices remapped.
    let remap = sort_rates(&mut rates);
    for v in &mut versions {
        for w in &mut v.windows {
            w.rate = remap[w.rate];
        }
    }
    let overtime = rc.overwerk.as_ref().map(|o| overtime_from_raw(&format!("{at}.overwerk"), o, &rates)).transpose()?;
    if let Some(h) = rc.max_uren_week
        && h <= Decimal::ZERO
    {
        return Err(bad(at, "max_uren_week must be more than 0"));
    }
    let holiday_dates = holiday_dates(&holidays, HOLIDAY_YEARS);
    Ok(Cao {
        holiday_dates,
        code: rc.code,
        aliases: rc.aliases,
        name: rc.naam,
        ort_max_functiegroep: rc.ort_max_functiegroep,
        ort_tot_voltijd: rc.ort_tot_voltijd,
        vacation_ort,
        max_hours_week: rc.max_uren_week,
        unverified: rc.niet_geverifieerd.filter(|s| !s.trim().is_empty()),
        overtime,
        holidays,
        caps,
        versions,
        rates,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_tables_load() {
        let t = Tables::built_in().unwrap();
        let zkh = t.cao("ZKH").unwrap();
        assert_eq!(t.cao("4").unwrap().code, "ZKH");
        let pcts: Vec<u32> = zkh.rates.iter().map(|r| r.pct).collect();
        assert_eq!(pcts, [22, 38, 47, 52, 60]);
        let ggz: Vec<u32> = t.cao("GGZ").unwrap().rates.iter().map(|r| r.pct).collect();
        assert_eq!(ggz, [22, 38, 44, 49, 60]);
        assert!(zkh.version_on(NaiveDate::from_ymd_opt(2025, 1, 31).unwrap()).is_none());
    }

    #[test]
    fn a_rate_cannot_take_the_code_of_another_factor() {
        let text = BUILT_IN.replacen("code = \"210\"", "code = \"230\"", 2);
        let e = Tables::from_toml(&text).unwrap_err().to_string();
        assert!(e.contains("code '230' is the code of another wage factor"), "{e}");
    }

    #[test]
    fn a_rate_cannot_take_any_fixed_code() {
        // Every code the engine writes itself (codes::FIXED), 130-133 and 240 among them:
        // an ORT rate or an overtime percentage with one would put that code in every
        // Antwoord twice, which the collector refuses.
        for (code, _) in super::super::codes::FIXED {
            let text = BUILT_IN.replacen("code = \"210\"", &format!("code = \"{code}\""), 2);
            let e = Tables::from_toml(&text).unwrap_err().to_string();
            assert!(e.contains(&format!("code '{code}' is the code of another wage factor")), "{code}: {e}");
            let text = BUILT_IN.replacen("code = \"321\"", &format!("code = \"{code}\""), 1);
            let e = Tables::from_toml(&text).unwrap_err();
            assert_eq!(e.at, "cao[1] (GGZ).overwerk.vensters[0]", "{code}: {e}");
        }
    }

    #[test]
    fn overtime_entries_are_checked() {
        let cases = [
            // An overtime percentage cannot take an ORT rate's code.
            (BUILT_IN.replacen("code = \"322\" }", "code = \"212\" }", 1), "cao[1] (GGZ).overwerk.vensters[0]"),
            // A cap needs all four keys.
            (BUILT_IN.replacen(", daarboven_pct = 50", "", 1), "cao[1] (GGZ).overwerk.vensters[0]"),
            (BUILT_IN.replacen("max_uren = \"5\"", "max_uren = \"0\"", 1), "cao[1] (GGZ).overwerk.vensters[0]"),
            // One percentage, one code.
            (
                BUILT_IN.replacen("pct = 50, code = \"322\" }", "pct = 60, code = \"322\" }", 1),
                "cao[1] (GGZ).overwerk.vensters[1]",
            ),
            (BUILT_IN.replacen("noemer = \"gewerkt\"", "noemer = \"uren\"", 1), "cao[0] (ZKH).ort_vakantie"),
        ];
        for (text, at) in cases {
            assert_ne!(text, BUILT_IN, "{at}: replacement did not apply");
            let e = Tables::from_toml(&text).unwrap_err();
            assert_eq!(e.at, at, "{e}");
        }
    }

    #[test]
    fn bad_tables_say_where() {
        let cases = [
            (
                BUILT_IN.replacen("van = \"06:00\", tot = \"07:00\"", "van = \"07:00\", tot = \"06:00\"", 1),
                "cao[0] (ZKH).versie[0].vensters[0]",
            ),
            (BUILT_IN.replacen("pct = 22", "pct = 0", 1), "cao[0] (ZKH).versie[0].vensters[0]"),
            (BUILT_IN.replacen("dagen = \"za\"", "dagen = \"zaterdag\"", 1), "cao[0] (ZKH).versie[0].vensters[4]"),
            (
                BUILT_IN.replacen("pct = 47, code = \"212\"", "pct = 47, code = \"210\"", 1),
                "cao[0] (ZKH).versie[0].vensters[2]",
            ),
            (BUILT_IN.replacen("regel = \"pasen+39\"", "regel = \"pinksteren\"", 1), "cao[0] (ZKH).feestdagen[5]"),
            (BUILT_IN.replacen("vanaf = \"2025-05-01\"", "vanaf = \"2025-01-01\"", 1), "cao[0] (ZKH).versie[1]"),
            (BUILT_IN.replacen("code = \"GGZ\"\naliases = []", "code = \"GGZ\"\naliases = [\"4\"]", 1), "cao[1] (GGZ)"),
            (BUILT_IN.replacen("kaart_soort = 5", "kaart_soort = 5\nonbekend = 1", 1), "TOML"),
        ];
        for (text, at) in cases {
            assert_ne!(text, BUILT_IN, "{at}: replacement did not apply");
            let e = Tables::from_toml(&text).unwrap_err();
            assert_eq!(e.at, at, "{e}");
        }
    }
}
