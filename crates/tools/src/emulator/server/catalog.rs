//! The system procedures drivers call on their own, before any statement of the user's:
//! ODBC's `SQLGetTypeInfo` runs `sp_datatype_info_100` (pyodbc asks it for the longest
//! varchar, nvarchar and varbinary and for the precision of a timestamp, and binds its
//! parameters by the answers). The rows are SQL Server's for the types drivers bind;
//! a system procedure the emulator does not have is refused as not supported, never as
//! a procedure that does not exist.

use super::{ColType, Failure, Sql, Tokens, describe, fail, result_set};

/// A procedure's name without its schema and brackets, lower case (`[sys].sp_who` →
/// `sp_who`).
pub(super) fn bare_name(procedure: &str) -> String {
    let last = procedure.rsplit('.').next().unwrap_or(procedure);
    last.trim_matches(|c| c == '[' || c == ']').to_lowercase()
}

/// One row of `sp_datatype_info`: the type, its ODBC code, its precision (COLUMN_SIZE),
/// literal prefix and suffix, creation parameters, searchability (2 LIKE only, 3 WHERE
/// only, 4 both), unsignedness, the scale range, SQL_DATA_TYPE and SQL_DATETIME_SUB,
/// and the radix of its precision.
struct TypeRow {
    name: &'static str,
    data_type: i32,
    precision: i32,
    prefix: Option<&'static str>,
    suffix: Option<&'static str>,
    create_params: Option<&'static str>,
    searchable: i32,
    unsigned: Option<i32>,
    scale: Option<(i32, i32)>,
    sql_data_type: i32,
    datetime_sub: Option<i32>,
    radix: Option<i32>,
}

const fn text(name: &'static str, data_type: i32, precision: i32, prefix: &'static str) -> TypeRow {
    TypeRow {
        name,
        data_type,
        precision,
        prefix: Some(prefix),
        suffix: Some("'"),
        create_params: Some("max length"),
        searchable: 3,
        unsigned: None,
        scale: None,
        sql_data_type: data_type,
        datetime_sub: None,
        radix: None,
    }
}

const fn number(name: &'static str, data_type: i32, precision: i32, unsigned: i32, radix: i32) -> TypeRow {
    TypeRow {
        name,
        data_type,
        precision,
        prefix: None,
        suffix: None,
        create_params: None,
        searchable: 2,
        unsigned: Some(unsigned),
        scale: Some((0, 0)),
        sql_data_type: data_type,
        datetime_sub: None,
        radix: Some(radix),
    }
}

const fn moment(name: &'static str, data_type: i32, precision: i32, scale: (i32, i32), sub: i32) -> TypeRow {
    TypeRow {
        name,
        data_type,
        precision,
        prefix: Some("'"),
        suffix: Some("'"),
        create_params: None,
        searchable: 3,
        unsigned: None,
        scale: Some(scale),
        sql_data_type: 9,
        datetime_sub: Some(sub),
        radix: None,
    }
}

/// SQL Server's rows; within one ODBC code in SQL Server's order (the first row of a
/// code is the type a driver takes for it).
const TYPES: &[TypeRow] = &[
    text("nchar", -8, 4000, "N'"),
    text("nvarchar", -9, 4000, "N'"),
    text("sysname", -9, 128, "N'"),
    TypeRow { create_params: None, ..text("ntext", -10, 1_073_741_823, "N'") },
    TypeRow { searchable: 2, ..text("uniqueidentifier", -11, 36, "'") },
    TypeRow { suffix: None, create_params: None, searchable: 2, ..text("xml", -152, 0, "N'") },
    number("bit", -7, 1, 0, 10),
    number("tinyint", -6, 3, 1, 10),
    number("bigint", -5, 19, 0, 10),
    TypeRow { suffix: None, create_params: None, searchable: 2, ..text("image", -4, 2_147_483_647, "0x") },
    TypeRow { suffix: None, searchable: 2, ..text("varbinary", -3, 8000, "0x") },
    TypeRow { suffix: None, searchable: 2, ..text("binary", -2, 8000, "0x") },
    TypeRow { create_params: None, ..text("text", -1, 2_147_483_647, "'") },
    text("char", 1, 8000, "'"),
    TypeRow { create_params: Some("precision,scale"), scale: Some((0, 38)), ..number("numeric", 2, 38, 0, 10) },
    TypeRow { create_params: Some("precision,scale"), scale: Some((0, 38)), ..number("decimal", 3, 38, 0, 10) },
    TypeRow { scale: Some((4, 4)), ..number("money", 3, 19, 0, 10) },
    number("int", 4, 10, 0, 10),
    number("smallint", 5, 5, 0, 10),
    TypeRow { scale: None, ..number("float", 6, 53, 0, 2) },
    TypeRow { scale: None, ..number("real", 7, 24, 0, 2) },
    text("varchar", 12, 8000, "'"),
    moment("date", 91, 10, (0, 0), 1),
    moment("datetime", 93, 23, (3, 3), 3),
    moment("smalldatetime", 93, 16, (0, 0), 3),
    TypeRow { create_params: Some("scale"), ..moment("datetime2", 93, 27, (0, 7), 3) },
    TypeRow { create_params: Some("scale"), ..moment("time", -154, 16, (0, 7), 0) },
    TypeRow { create_params: Some("scale"), ..moment("datetimeoffset", -155, 34, (0, 7), 0) },
];

/// The result's columns: the name ODBC 2 gives it, the name ODBC 3 gives it, its type
/// (sysname and varchar(32) columns as nvarchar, smallint and int as documented).
const COLUMNS: [(&str, &str, ColType); 20] = [
    ("TYPE_NAME", "TYPE_NAME", ColType::NVarChar),
    ("DATA_TYPE", "DATA_TYPE", ColType::SmallInt),
    ("PRECISION", "COLUMN_SIZE", ColType::Int),
    ("LITERAL_PREFIX", "LITERAL_PREFIX", ColType::NVarChar),
    ("LITERAL_SUFFIX", "LITERAL_SUFFIX", ColType::NVarChar),
    ("CREATE_PARAMS", "CREATE_PARAMS", ColType::NVarChar),
    ("NULLABLE", "NULLABLE", ColType::SmallInt),
    ("CASE_SENSITIVE", "CASE_SENSITIVE", ColType::SmallInt),
    ("SEARCHABLE", "SEARCHABLE", ColType::SmallInt),
    ("UNSIGNED_ATTRIBUTE", "UNSIGNED_ATTRIBUTE", ColType::SmallInt),
    ("MONEY", "FIXED_PREC_SCALE", ColType::SmallInt),
    ("AUTO_INCREMENT", "AUTO_UNIQUE_VALUE", ColType::SmallInt),
    ("LOCAL_TYPE_NAME", "LOCAL_TYPE_NAME", ColType::NVarChar),
    ("MINIMUM_SCALE", "MINIMUM_SCALE", ColType::SmallInt),
    ("MAXIMUM_SCALE", "MAXIMUM_SCALE", ColType::SmallInt),
    ("SQL_DATA_TYPE", "SQL_DATA_TYPE", ColType::SmallInt),
    ("SQL_DATETIME_SUB", "SQL_DATETIME_SUB", ColType::SmallInt),
    ("NUM_PREC_RADIX", "NUM_PREC_RADIX", ColType::Int),
    ("INTERVAL_PRECISION", "INTERVAL_PRECISION", ColType::SmallInt),
    ("USERTYPE", "USERTYPE", ColType::SmallInt),
];

/// `sp_datatype_info[_100] [@data_type], [@ODBCVer]`: the rows of one ODBC type code,
/// or of all (0, the default); ODBC 3's column names when `@ODBCVer` is 3.
pub(super) fn datatype_info(params: &[(String, Sql)], t: &mut Tokens) -> Result<(), Failure> {
    let arg = |name: &str, position: usize| {
        params.iter().find(|(n, _)| n == name).or_else(|| params.get(position).filter(|(n, _)| n.starts_with('#')))
    };
    let code = match arg("@data_type", 0).map(|(_, v)| v) {
        None | Some(Sql::Null) => 0,
        Some(Sql::Int(i)) => *i,
        Some(other) => return Err(fail(format!("@data_type: {} is not an int", describe(other)))),
    };
    let odbc3 = matches!(arg("@odbcver", 1).map(|(_, v)| v), Some(Sql::Int(3)));
    // Ordered by DATA_TYPE, as SQLGetTypeInfo returns them (a stable sort keeps SQL
    // Server's order within one code).
    let mut types: Vec<&TypeRow> = TYPES.iter().collect();
    types.sort_by_key(|r| r.data_type);
    let rows: Vec<Vec<Sql>> = types
        .into_iter()
        .filter(|r| code == 0 || r.data_type == code)
        .map(|r| {
            let int = |i: Option<i32>| i.map_or(Sql::Null, Sql::Int);
            let txt = |s: Option<&str>| s.map_or(Sql::Null, |s| Sql::NVarChar(s.to_owned()));
            vec![
                Sql::NVarChar(r.name.to_owned()),
                Sql::Int(r.data_type),
                Sql::Int(r.precision),
                txt(r.prefix),
                txt(r.suffix),
                txt(r.create_params),
                Sql::Int(1),
                Sql::Int(0),
                Sql::Int(r.searchable),
                int(r.unsigned),
                Sql::Int(i32::from(r.name.contains("money"))),
                int(r.unsigned.map(|_| 0)),
                Sql::NVarChar(r.name.to_owned()),
                int(r.scale.map(|s| s.0)),
                int(r.scale.map(|s| s.1)),
                Sql::Int(r.sql_data_type),
                int(r.datetime_sub),
                int(r.radix),
                Sql::Null,
                Sql::Int(0),
            ]
        })
        .collect();
    let cols: Vec<(&str, ColType)> =
        COLUMNS.iter().map(|&(odbc2, odbc3_name, ty)| (if odbc3 { odbc3_name } else { odbc2 }, ty)).collect();
    result_set(t, &cols, &rows);
    Ok(())
}
