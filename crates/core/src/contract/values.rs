//! Lexical value types of the message contract and their strict parsers.
//!
//! Each parser follows the XSD lexical space of its type (see `schemas/`), trims the
//! whitespace XSD collapses, and returns a short reason on failure; the decoder adds
//! the element path and position.

use std::fmt;
use std::str::FromStr;

use chrono::NaiveDate;
use rust_decimal::Decimal;

/// A local wall-clock time `hh:mm` (00:00 to 23:59), minutes since midnight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClockTime(u16);

impl ClockTime {
    /// Builds a time from hours and minutes; `None` outside 00:00..=23:59.
    pub fn from_hm(hour: u16, minute: u16) -> Option<Self> {
        (hour < 24 && minute < 60).then_some(Self(hour * 60 + minute))
    }

    /// Minutes since midnight.
    pub fn minutes(self) -> u16 {
        self.0
    }

    pub fn hour(self) -> u16 {
        self.0 / 60
    }

    pub fn minute(self) -> u16 {
        self.0 % 60
    }
}

impl fmt::Display for ClockTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02}:{:02}", self.hour(), self.minute())
    }
}

/// An `xs:dateTime` kept exactly as sent, so an answer echoes it byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Timestamp(String);

impl Timestamp {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for Timestamp {
    type Err = &'static str;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_timestamp(xml_trim(s)).map(|()| Self(xml_trim(s).to_owned()))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Trims XML white space (space, tab, CR, LF) as XSD's whitespace facet does; other
/// Unicode spaces are kept, so a value padded with them is rejected.
pub fn xml_trim(s: &str) -> &str {
    let b = s.as_bytes();
    let ws = |c: &u8| matches!(c, b' ' | b'\t' | b'\n' | b'\r');
    let start = b.iter().position(|c| !ws(c)).unwrap_or(b.len());
    let end = b.iter().rposition(|c| !ws(c)).map_or(start, |i| i + 1);
    &s[start..end]
}

fn digits(b: &[u8]) -> Option<u32> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0')))
}

/// `yyyy-mm-ddThh:mm:ss[.f+][Z|(+|-)hh:mm]`, with a real calendar date.
fn parse_timestamp(s: &str) -> Result<(), &'static str> {
    const WHY: &str = "is not a date-time yyyy-mm-ddThh:mm:ss[.fff][zone]";
    let b = s.as_bytes();
    if b.len() < 19 || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return Err(WHY);
    }
    parse_date(&s[..10]).map_err(|_| WHY)?;
    let (h, m, sec) = (digits(&b[11..13]), digits(&b[14..16]), digits(&b[17..19]));
    match (h, m, sec) {
        (Some(h), Some(m), Some(sec)) if h < 24 && m < 60 && sec < 60 => {}
        _ => return Err(WHY),
    }
    let mut rest = &b[19..];
    if let Some(frac) = rest.strip_prefix(b".") {
        let n = frac.iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 {
            return Err(WHY);
        }
        rest = &frac[n..];
    }
    match rest {
        [] | [b'Z'] => Ok(()),
        [b'+' | b'-', zone @ ..]
            if zone.len() == 5
                && zone[2] == b':'
                && digits(&zone[..2]).is_some_and(|h| h <= 14)
                && digits(&zone[3..]).is_some_and(|m| m < 60) =>
        {
            Ok(())
        }
        _ => Err(WHY),
    }
}

/// `yyyy-mm-dd`, a real calendar date.
pub fn parse_date(s: &str) -> Result<NaiveDate, &'static str> {
    const WHY: &str = "is not a date yyyy-mm-dd";
    let b = xml_trim(s).as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return Err(WHY);
    }
    let (y, m, d) = (digits(&b[..4]), digits(&b[5..7]), digits(&b[8..]));
    match (y, m, d) {
        (Some(y), Some(m), Some(d)) => NaiveDate::from_ymd_opt(y as i32, m, d).ok_or("is not a real calendar date"),
        _ => Err(WHY),
    }
}

/// `hh:mm`, 00:00 to 23:59.
pub fn parse_clock(s: &str) -> Result<ClockTime, &'static str> {
    const WHY: &str = "is not a time hh:mm";
    let b = xml_trim(s).as_bytes();
    if b.len() != 5 || b[2] != b':' {
        return Err(WHY);
    }
    match (digits(&b[..2]), digits(&b[3..])) {
        (Some(h), Some(m)) => ClockTime::from_hm(h as u16, m as u16).ok_or(WHY),
        _ => Err(WHY),
    }
}

/// `xs:boolean`: 0, 1, true or false.
pub fn parse_bit(s: &str) -> Result<bool, &'static str> {
    match xml_trim(s) {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        _ => Err("is not a boolean (0, 1, true or false)"),
    }
}

/// `xs:int`.
pub fn parse_int(s: &str) -> Result<i32, &'static str> {
    let t = xml_trim(s);
    let body = t.strip_prefix(['+', '-']).unwrap_or(t);
    if body.is_empty() || !body.bytes().all(|c| c.is_ascii_digit()) {
        return Err("is not a whole number");
    }
    t.parse().map_err(|_| "is out of range for a 32-bit number")
}

/// `xs:long` restricted to 0 or more (a roster version).
/// A contract version: xs:positiveInteger, 1 or more (at most 2^32-1 here).
pub fn parse_contract_version(s: &str) -> Result<u32, &'static str> {
    let t = xml_trim(s);
    let body = t.strip_prefix('+').unwrap_or(t);
    if body.is_empty() || !body.bytes().all(|c| c.is_ascii_digit()) {
        return Err("is not a contract version (a whole number, 1 or more)");
    }
    match body.parse::<u32>() {
        Ok(0) => Err("is not a contract version (a whole number, 1 or more)"),
        Ok(v) => Ok(v),
        Err(_) => Err("is out of range for a contract version"),
    }
}

pub fn parse_version(s: &str) -> Result<i64, &'static str> {
    let t = xml_trim(s);
    let body = t.strip_prefix('+').unwrap_or(t);
    if body.is_empty() || !body.bytes().all(|c| c.is_ascii_digit()) {
        return Err("is not a version (a whole number, 0 or more)");
    }
    body.parse().map_err(|_| "is out of range for a version (at most 2^63-1)")
}

/// `xs:decimal`: optional sign, digits, optional fraction; no exponent, no separators.
pub fn parse_decimal(s: &str) -> Result<Decimal, &'static str> {
    const WHY: &str = "is not a decimal number";
    let t = xml_trim(s);
    let body = t.strip_prefix(['+', '-']).unwrap_or(t);
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let all_digits = |p: &str| p.bytes().all(|c| c.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !all_digits(int) || !all_digits(frac) {
        return Err(WHY);
    }
    Decimal::from_str(t.strip_prefix('+').unwrap_or(t)).map_err(|_| "is out of range for a decimal")
}

/// A `uuid` as the XSD pattern writes it (8-4-4-4-12 hex digits).
pub fn parse_uuid(s: &str) -> Result<uuid::Uuid, &'static str> {
    let t = xml_trim(s);
    if t.len() != 36 {
        return Err("is not a uuid 8-4-4-4-12");
    }
    uuid::Uuid::try_parse(t).map_err(|_| "is not a uuid 8-4-4-4-12")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_times() {
        assert_eq!(parse_clock("07:15").unwrap().minutes(), 435);
        assert_eq!(parse_clock("23:59").unwrap().to_string(), "23:59");
        for bad in ["24:00", "25:00", "7:15", "07:60", "07-15", "", "0715", "07:1a"] {
            assert!(parse_clock(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dates_and_timestamps() {
        assert!(parse_date("2026-03-11").is_ok());
        assert!(parse_date("2026-02-29").is_err());
        assert!(parse_date("2026-3-11").is_err());
        for ok in ["2008-07-22T14:31:05.487", "2026-03-11T10:00:00Z", "2026-03-11T10:00:00+01:00"] {
            assert!(ok.parse::<Timestamp>().is_ok(), "{ok}");
        }
        for bad in ["2026-03-11", "2026-03-11T25:00:00", "2026-03-11T10:00:00.", "x"] {
            assert!(bad.parse::<Timestamp>().is_err(), "{bad}");
        }
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_decimal("1234.5600").unwrap().to_string(), "1234.5600");
        assert_eq!(parse_decimal(".5").unwrap().to_string(), "0.5");
        for bad in ["1e5", "1_000", "", ".", "abc", "1.2.3", "--1"] {
            assert!(parse_decimal(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_int(" 42 "), Ok(42));
        assert!(parse_int("4.0").is_err());
        assert!(parse_int("99999999999").is_err());
        assert_eq!(parse_version("7"), Ok(7));
        assert!(parse_version("-1").is_err());
        assert!(parse_bit("2").is_err());
    }
}
