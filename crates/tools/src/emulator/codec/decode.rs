//! The client's side of a result set: COLMETADATA and ROW tokens (2.2.7.4, 2.2.7.19)
//! read back into columns and values. The emulator never reads its own responses; the
//! fuzz target and the tests do, to check that what the response writer puts on the wire
//! is what it meant (`fuzz::response_roundtrip`).

use super::{ColType, Malformed, R, Reader, Scalar, Sql, guid_from_wire, read_plp, read_scalar, utf16_string};

/// A result set read back: its columns (name and type) and its rows.
pub type ResultSet = (Vec<(String, ColType)>, Vec<Vec<Sql>>);

/// Reads the first result set of a token stream: COLMETADATA, then ROWs up to the next
/// token that is not a ROW.
pub fn read_result_set(stream: &[u8]) -> R<ResultSet> {
    let mut r = Reader::new(stream);
    if r.u8()? != 0x81 {
        return Err(Malformed("no COLMETADATA".into()));
    }
    let n = r.u16()?;
    let mut cols = Vec::new();
    for _ in 0..n {
        r.u32()?; // user type
        r.u16()?; // flags
        let ty = column_type(&mut r)?;
        let name = r.b_varchar()?;
        cols.push((name, ty));
    }
    let mut rows = Vec::new();
    while r.rest().first() == Some(&0xD1) {
        r.u8()?;
        rows.push(cols.iter().map(|(_, ty)| column_value(&mut r, *ty)).collect::<R<Vec<Sql>>>()?);
    }
    Ok((cols, rows))
}

fn column_type(r: &mut Reader<'_>) -> R<ColType> {
    let ty = r.u8()?;
    if let Some(s) = Scalar::read_info(ty, r)? {
        return Ok(ColType::Typed(s));
    }
    Ok(match ty {
        0x26 => match r.u8()? {
            1 => ColType::TinyInt,
            2 => ColType::SmallInt,
            4 => ColType::Int,
            8 => ColType::BigInt,
            n => return Err(Malformed(format!("INTN of {n} bytes"))),
        },
        0x68 => {
            r.u8()?;
            ColType::Bit
        }
        0x24 => {
            r.u8()?;
            ColType::Guid
        }
        0xE7 => {
            let max = r.u16()?;
            r.bytes(5)?;
            if max == 0xFFFF { ColType::NVarCharMax } else { ColType::NVarChar }
        }
        0xA5 if r.u16()? == 0xFFFF => ColType::VarBinaryMax,
        0xF1 => {
            if r.u8()? != 0 {
                return Err(Malformed("a typed xml column".into()));
            }
            ColType::Xml
        }
        other => return Err(Malformed(format!("column type 0x{other:02X}"))),
    })
}

fn column_value(r: &mut Reader<'_>, ty: ColType) -> R<Sql> {
    let short = |r: &mut Reader<'_>| -> R<Option<Vec<u8>>> {
        let n = r.u8()?;
        Ok(if n == 0 { None } else { Some(r.bytes(usize::from(n))?.to_vec()) })
    };
    Ok(match ty {
        ColType::Typed(s) => return read_scalar(r, s, false),
        ColType::TinyInt | ColType::SmallInt | ColType::Int | ColType::BigInt => match short(r)? {
            None => Sql::Null,
            Some(b) => match b.len() {
                1 => Sql::Int(i32::from(b[0])),
                2 => Sql::Int(i32::from(i16::from_le_bytes([b[0], b[1]]))),
                4 => Sql::Int(i32::from_le_bytes(b[..].try_into().expect("4"))),
                8 => Sql::BigInt(i64::from_le_bytes(b[..].try_into().expect("8"))),
                n => return Err(Malformed(format!("an integer of {n} bytes"))),
            },
        },
        ColType::Bit => match short(r)? {
            None => Sql::Null,
            Some(b) if b.len() == 1 => Sql::Bit(b[0] != 0),
            Some(b) => return Err(Malformed(format!("a bit of {} bytes", b.len()))),
        },
        ColType::Guid => match short(r)? {
            None => Sql::Null,
            Some(b) if b.len() == 16 => Sql::Guid(guid_from_wire(b[..].try_into().expect("16"))),
            Some(b) => return Err(Malformed(format!("a uniqueidentifier of {} bytes", b.len()))),
        },
        ColType::NVarChar => match r.u16()? {
            0xFFFF => Sql::Null,
            n if n > 8000 => return Err(Malformed(format!("{n} bytes in an nvarchar(4000) column"))),
            n => Sql::NVarChar(utf16_string(r.bytes(usize::from(n))?)?),
        },
        ColType::NVarCharMax | ColType::Xml => match read_plp(r)? {
            None => Sql::Null,
            Some(b) => Sql::NVarChar(utf16_string(&b)?),
        },
        ColType::VarBinaryMax => read_plp(r)?.map_or(Sql::Null, Sql::VarBinary),
    })
}
