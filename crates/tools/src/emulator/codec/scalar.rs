//! Values the emulator carries without computing on them: decimal and numeric, float
//! and real, money, and the date and time types (MS-TDS 2.2.5.4.2, 2.2.5.5.1). A client
//! sends one as a parameter; the emulator keeps its TYPE_INFO and its bytes, so a
//! `SELECT @p` gives it back exactly as it came, and shows it as text the way SQL
//! Server's CAST to nvarchar does (style 0).

use super::{Malformed, R, Reader};

/// The type of such a value: its TDS type (the nullable form) and its TYPE_INFO bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scalar {
    pub ty: u8,
    info: [u8; 3],
}

pub mod wire {
    pub const DECIMALN: u8 = 0x6A;
    pub const NUMERICN: u8 = 0x6C;
    pub const FLTN: u8 = 0x6D;
    pub const MONEYN: u8 = 0x6E;
    pub const DATETIMN: u8 = 0x6F;
    pub const DATEN: u8 = 0x28;
    pub const TIMEN: u8 = 0x29;
    pub const DATETIME2N: u8 = 0x2A;
    pub const DATETIMEOFFSETN: u8 = 0x2B;
}

/// The longest value of each kind, in bytes.
fn max_len(ty: u8, info: [u8; 3]) -> usize {
    match ty {
        // A decimal's value is at most as long as its TYPE_INFO says.
        wire::DECIMALN | wire::NUMERICN => usize::from(info[0]),
        wire::FLTN | wire::MONEYN | wire::DATETIMN => usize::from(info[0]),
        wire::DATEN => 3,
        wire::TIMEN => time_len(info[0]),
        wire::DATETIME2N => time_len(info[0]) + 3,
        _ => time_len(info[0]) + 5,
    }
}

/// The bytes of a time of `scale` fractional digits (2.2.5.5.1.8).
fn time_len(scale: u8) -> usize {
    match scale {
        0..=2 => 3,
        3..=4 => 4,
        _ => 5,
    }
}

impl Scalar {
    /// decimal(precision, scale).
    pub fn decimal(precision: u8, scale: u8) -> Self {
        Self { ty: wire::NUMERICN, info: [17, precision, scale] }
    }

    /// float (8 bytes) or real (4).
    pub fn float(bytes: u8) -> Self {
        Self { ty: wire::FLTN, info: [bytes, 0, 0] }
    }

    /// A type with no TYPE_INFO beyond its own (`date`), or with one byte (a length:
    /// money, datetime; a scale: time, datetime2, datetimeoffset).
    pub fn of(ty: u8, first: u8) -> Self {
        Self { ty, info: [first, 0, 0] }
    }

    /// The TYPE_INFO after the type byte.
    pub fn info(&self) -> &[u8] {
        match self.ty {
            wire::DECIMALN | wire::NUMERICN => &self.info,
            wire::DATEN => &[],
            _ => &self.info[..1],
        }
    }

    /// Reads the TYPE_INFO of `ty` after its type byte; `None` when `ty` is none of these.
    pub fn read_info(ty: u8, r: &mut Reader<'_>) -> R<Option<Self>> {
        let scalar = match ty {
            wire::DECIMALN | wire::NUMERICN => {
                let (len, precision, scale) = (r.u8()?, r.u8()?, r.u8()?);
                if !(1..=38).contains(&precision) || scale > precision || !(1..=17).contains(&len) {
                    return Err(Malformed(format!("decimal({precision}, {scale}) of {len} bytes")));
                }
                Self { ty, info: [len, precision, scale] }
            }
            wire::FLTN | wire::MONEYN | wire::DATETIMN => {
                let len = r.u8()?;
                if !matches!(len, 4 | 8) {
                    return Err(Malformed(format!("type 0x{ty:02X} of {len} bytes")));
                }
                Self::of(ty, len)
            }
            wire::DATEN => Self::of(ty, 0),
            wire::TIMEN | wire::DATETIME2N | wire::DATETIMEOFFSETN => {
                let scale = r.u8()?;
                if scale > 7 {
                    return Err(Malformed(format!("a time scale of {scale}")));
                }
                Self::of(ty, scale)
            }
            // The fixed-length forms (2.2.5.4.1), kept as their nullable forms.
            0x3E => Self::float(8),
            0x3B => Self::float(4),
            0x3C => Self::of(wire::MONEYN, 8),
            0x7A => Self::of(wire::MONEYN, 4),
            0x3D => Self::of(wire::DATETIMN, 8),
            0x3A => Self::of(wire::DATETIMN, 4),
            _ => return Ok(None),
        };
        Ok(Some(scalar))
    }

    /// Whether `ty` is a fixed-length type (its value has no length byte).
    pub fn fixed(ty: u8) -> bool {
        matches!(ty, 0x3E | 0x3B | 0x3C | 0x7A | 0x3D | 0x3A)
    }

    /// The longest value of this type, in bytes (a fixed-length type's length).
    pub fn max_len(&self) -> usize {
        max_len(self.ty, self.info)
    }

    /// The length a value of this type has on the wire, when it has one length only.
    fn fixed_len(&self) -> Option<usize> {
        match self.ty {
            wire::FLTN | wire::MONEYN | wire::DATETIMN => Some(usize::from(self.info[0])),
            wire::DATEN => Some(3),
            wire::TIMEN | wire::DATETIME2N | wire::DATETIMEOFFSETN => Some(max_len(self.ty, self.info)),
            _ => None,
        }
    }

    /// Checks the bytes of a value of this type as SQL Server does before it takes one:
    /// its length, and that it is in the type's range (a decimal within its precision, a
    /// finite float, a date from 0001-01-01 to 9999-12-31 and from 1753 for datetime, a
    /// time within the day, an offset within ±14:00).
    pub fn check(&self, data: &[u8]) -> R<()> {
        let length = match self.fixed_len() {
            Some(n) => data.len() == n,
            None => (2..=max_len(self.ty, self.info)).contains(&data.len()),
        };
        if !length {
            return Err(Malformed(format!("a {} value of {} bytes", self.name(), data.len())));
        }
        let day_units = |scale: u8| 86_400 * 10u128.pow(u32::from(scale));
        let in_range = match self.ty {
            wire::DECIMALN | wire::NUMERICN => data[0] <= 1 && le(&data[1..]) < 10u128.pow(u32::from(self.info[1])),
            wire::FLTN if data.len() == 4 => f32::from_le_bytes(data.try_into().expect("4")).is_finite(),
            wire::FLTN => f64::from_le_bytes(data.try_into().expect("8")).is_finite(),
            wire::MONEYN => true,
            wire::DATETIMN if data.len() == 4 => u16::from_le_bytes([data[2], data[3]]) < 1440,
            wire::DATETIMN => {
                let days = i32::from_le_bytes(data[..4].try_into().expect("4"));
                let ticks = u32::from_le_bytes(data[4..].try_into().expect("4"));
                (-53_690..=2_958_463).contains(&days) && ticks < 86_400 * 300
            }
            wire::DATEN => days_of(data) <= MAX_DAYS,
            wire::TIMEN => le(data) < day_units(self.info[0]),
            wire::DATETIME2N => {
                let t = time_len(self.info[0]);
                le(&data[..t]) < day_units(self.info[0]) && days_of(&data[t..]) <= MAX_DAYS
            }
            _ => {
                let t = time_len(self.info[0]);
                let offset = i16::from_le_bytes([data[t + 3], data[t + 4]]);
                le(&data[..t]) < day_units(self.info[0])
                    && days_of(&data[t..t + 3]) <= MAX_DAYS
                    && offset.unsigned_abs() <= 840
            }
        };
        if in_range { Ok(()) } else { Err(Malformed(format!("a {} value out of its range", self.name()))) }
    }

    /// Its SQL Server type name, for messages.
    pub fn name(&self) -> String {
        match (self.ty, self.info[0]) {
            (wire::DECIMALN | wire::NUMERICN, _) => format!("decimal({},{})", self.info[1], self.info[2]),
            (wire::FLTN, 4) => "real".into(),
            (wire::FLTN, _) => "float".into(),
            (wire::MONEYN, 4) => "smallmoney".into(),
            (wire::MONEYN, _) => "money".into(),
            (wire::DATETIMN, 4) => "smalldatetime".into(),
            (wire::DATETIMN, _) => "datetime".into(),
            (wire::DATEN, _) => "date".into(),
            (wire::TIMEN, s) => format!("time({s})"),
            (wire::DATETIME2N, s) => format!("datetime2({s})"),
            (_, s) => format!("datetimeoffset({s})"),
        }
    }

    /// A value of this type as SQL Server's CAST to nvarchar writes it.
    pub fn text(&self, data: &[u8]) -> String {
        match self.ty {
            wire::DECIMALN | wire::NUMERICN => {
                let value = le(&data[1..]);
                let digits = value.to_string();
                let scale = usize::from(self.info[2]);
                let padded = format!("{digits:0>width$}", width = scale + 1);
                let (int, frac) = padded.split_at(padded.len() - scale);
                // A negative zero is written as zero.
                let sign = if data[0] == 0 && value != 0 { "-" } else { "" };
                if scale == 0 { format!("{sign}{int}") } else { format!("{sign}{int}.{frac}") }
            }
            wire::FLTN if data.len() == 4 => float_text(f64::from(f32::from_le_bytes(data.try_into().expect("4")))),
            wire::FLTN => float_text(f64::from_le_bytes(data.try_into().expect("8"))),
            wire::MONEYN => {
                let units: i64 = if data.len() == 4 {
                    i64::from(i32::from_le_bytes(data.try_into().expect("4")))
                } else {
                    let high = i64::from(i32::from_le_bytes(data[..4].try_into().expect("4")));
                    (high << 32) | i64::from(u32::from_le_bytes(data[4..].try_into().expect("4")))
                };
                // Two decimals, rounded half away from zero (style 0).
                let cents = (units.unsigned_abs() + 50) / 100;
                format!("{}{}.{:02}", if units < 0 { "-" } else { "" }, cents / 100, cents % 100)
            }
            wire::DATETIMN => {
                let (days, seconds) = if data.len() == 4 {
                    let d = u16::from_le_bytes([data[0], data[1]]);
                    let m = u16::from_le_bytes([data[2], data[3]]);
                    (i64::from(d), i64::from(m) * 60)
                } else {
                    let d = i32::from_le_bytes(data[..4].try_into().expect("4"));
                    let ticks = u32::from_le_bytes(data[4..].try_into().expect("4"));
                    (i64::from(d), i64::from(ticks) / 300)
                };
                let base = chrono::NaiveDate::from_ymd_opt(1900, 1, 1).expect("a date");
                let at = base.and_hms_opt(0, 0, 0).expect("a time")
                    + chrono::Duration::days(days)
                    + chrono::Duration::seconds(seconds);
                // Style 0: `mon dd yyyy hh:miAM`.
                at.format("%b %e %Y %l:%M%p").to_string()
            }
            wire::DATEN => date_text(data),
            wire::TIMEN => time_text(data, self.info[0]),
            wire::DATETIME2N => {
                let t = time_len(self.info[0]);
                format!("{} {}", date_text(&data[t..]), time_text(&data[..t], self.info[0]))
            }
            _ => {
                // Stored as UTC with the offset in minutes; shown at the offset.
                let t = time_len(self.info[0]);
                let offset = i16::from_le_bytes([data[t + 3], data[t + 4]]);
                let units = le(&data[..t]) as i64 + i64::from(offset) * 60 * 10i64.pow(u32::from(self.info[0]));
                let per_day = 86_400 * 10i64.pow(u32::from(self.info[0]));
                let days = days_of(&data[t..t + 3]) + units.div_euclid(per_day);
                let time = units.rem_euclid(per_day);
                let sign = if offset < 0 { '-' } else { '+' };
                format!(
                    "{} {} {sign}{:02}:{:02}",
                    date_from_days(days),
                    time_of_units(time as u128, self.info[0]),
                    offset.unsigned_abs() / 60,
                    offset.unsigned_abs() % 60
                )
            }
        }
    }
}

/// A float as CAST(float AS nvarchar) writes it (style 0): at most six significant
/// digits, scientific notation from 1e6 up or below 1e-4 (`1.23457e+006`).
fn float_text(f: f64) -> String {
    if f == 0.0 || !f.is_finite() {
        return if f.is_finite() { "0".into() } else { f.to_string() };
    }
    // The exponent after rounding to six significant digits (999999.5 is 1e+006).
    let exp: i32 = format!("{f:.5e}").split_once('e').and_then(|(_, e)| e.parse().ok()).unwrap_or(0);
    if (-4..6).contains(&exp) {
        let decimals = (5 - exp).max(0) as usize;
        let s = format!("{f:.decimals$}");
        let s = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_owned() } else { s };
        if s == "-0" { "0".into() } else { s }
    } else {
        let s = format!("{f:.5e}");
        let (mantissa, e) = s.split_once('e').expect("an exponent");
        let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
        let e: i32 = e.parse().expect("a number");
        format!("{mantissa}e{}{:03}", if e < 0 { '-' } else { '+' }, e.abs())
    }
}

/// An unsigned little-endian integer of up to 16 bytes.
fn le(b: &[u8]) -> u128 {
    b.iter().rev().fold(0u128, |n, &x| (n << 8) | u128::from(x))
}

/// 9999-12-31, in days since 0001-01-01.
const MAX_DAYS: i64 = 3_652_058;

/// Days since 0001-01-01 in three bytes.
fn days_of(b: &[u8]) -> i64 {
    i64::from(u32::from_le_bytes([b[0], b[1], b[2], 0]))
}

fn date_from_days(days: i64) -> String {
    let base = chrono::NaiveDate::from_ymd_opt(1, 1, 1).expect("a date");
    (base + chrono::Duration::days(days)).format("%Y-%m-%d").to_string()
}

fn date_text(b: &[u8]) -> String {
    date_from_days(days_of(b))
}

fn time_text(b: &[u8], scale: u8) -> String {
    time_of_units(le(b), scale)
}

/// A time of day in units of 10^-scale seconds: `hh:mm:ss[.fffffff]`.
fn time_of_units(units: u128, scale: u8) -> String {
    let per_second = 10u128.pow(u32::from(scale));
    let seconds = units / per_second;
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    if scale == 0 {
        format!("{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}.{:0width$}", units % per_second, width = usize::from(scale))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_as_sql_servers_cast_to_nvarchar_writes_them() {
        // decimal(10,2) 1234.56 and -0.05: sign byte then the integer 123456 / 5.
        let d = Scalar::decimal(10, 2);
        assert_eq!(d.text(&[1, 0x40, 0xE2, 0x01, 0x00]), "1234.56");
        assert_eq!(d.text(&[0, 5, 0, 0, 0]), "-0.05");
        assert_eq!(Scalar::decimal(5, 0).text(&[1, 7, 0, 0, 0]), "7");
        assert_eq!(float_text(1.5), "1.5");
        assert_eq!(float_text(1234567.0), "1.23457e+006");
        assert_eq!(float_text(0.000012), "1.2e-005");
        assert_eq!(float_text(-2.0 / 3.0), "-0.666667");
        assert_eq!(float_text(999_999.5), "1e+006");
        assert_eq!(d.text(&[0, 0, 0, 0, 0]), "0.00");
        // money's whole range: i64::MIN and i64::MAX ten-thousandths.
        let money = |units: i64| {
            let mut b = ((units >> 32) as i32).to_le_bytes().to_vec();
            b.extend_from_slice(&(units as u32).to_le_bytes());
            Scalar::of(wire::MONEYN, 8).text(&b)
        };
        assert_eq!(money(i64::MIN), "-922337203685477.58");
        assert_eq!(money(i64::MAX), "922337203685477.58");
        // money 12.3456 is 123456 ten-thousandths: high 0, low 123456.
        let mut m = 0i32.to_le_bytes().to_vec();
        m.extend_from_slice(&123_456u32.to_le_bytes());
        assert_eq!(Scalar::of(wire::MONEYN, 8).text(&m), "12.35");
        // datetime 2026-04-01 08:30: 46111 days after 1900-01-01, 8.5 h of 1/300 s.
        let mut dt = 46_111i32.to_le_bytes().to_vec();
        dt.extend_from_slice(&(8 * 3600 * 300 + 30 * 60 * 300u32).to_le_bytes());
        assert_eq!(Scalar::of(wire::DATETIMN, 8).text(&dt), "Apr  1 2026  8:30AM");
        // date 2026-04-01: 739706 days after 0001-01-01.
        let date = &739_706u32.to_le_bytes()[..3];
        assert_eq!(Scalar::of(wire::DATEN, 0).text(date), "2026-04-01");
        // datetime2(3) 2026-04-01 08:30:15.123: the time in milliseconds, then the date.
        let mut d2 = (30_615_123u32).to_le_bytes().to_vec();
        d2.extend_from_slice(date);
        assert_eq!(Scalar::of(wire::DATETIME2N, 3).text(&d2), "2026-04-01 08:30:15.123");
        // datetimeoffset(0) 06:30 UTC at +02:00 is 08:30 local.
        let mut dto = (6 * 3600 + 30 * 60u32).to_le_bytes()[..3].to_vec();
        dto.extend_from_slice(date);
        dto.extend_from_slice(&120i16.to_le_bytes());
        assert_eq!(Scalar::of(wire::DATETIMEOFFSETN, 0).text(&dto), "2026-04-01 08:30:00 +02:00");
    }

    #[test]
    fn an_offset_out_of_range_is_refused_not_a_panic() {
        // The fuzz target's find: an offset of i16::MIN minutes.
        let mut dto = vec![0, 0, 0];
        dto.extend_from_slice(&739_706u32.to_le_bytes()[..3]);
        dto.extend_from_slice(&i16::MIN.to_le_bytes());
        assert!(Scalar::of(wire::DATETIMEOFFSETN, 0).check(&dto).is_err());
    }
}
