//! Every parser the emulator runs on bytes from the network, in one function: for the
//! fuzz target (`fuzz/fuzz_targets/tds.rs`) and the random-input test, so both exercise
//! what the server exercises. Errors are expected; a panic is a bug.
//!
//! And the response writer, checked by reading back what it wrote
//! (`fuzz/fuzz_targets/respond.rs`): result sets of every column type with values made
//! from the input bytes. A difference is a bug.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use super::codec::{ColType, Scalar, Sql, wire};
use super::{codec, tsql};

/// Runs `data` through packet framing, PRELOGIN, LOGIN7, SQL batch, RPC (with every
/// parameter type), transaction-manager requests and the T-SQL recogniser.
pub fn parse_everything(data: &[u8]) {
    // Framing reads from a slice, which is always ready: one poll completes it.
    let mut input = data;
    let framing = pin!(codec::read_message(&mut input));
    let polled = framing.poll(&mut Context::from_waker(Waker::noop()));
    debug_assert!(matches!(polled, Poll::Ready(_)), "reading from a slice never waits");
    let _ = codec::prelogin_encryption(data);
    let _ = codec::parse_login7(data);
    let _ = codec::parse_rpc(data);
    let _ = codec::parse_tm(data);
    if let Ok(text) = codec::parse_sql_batch(data) {
        let _ = tsql::parse_batch(&text);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = tsql::parse_batch(text);
    }
}

/// Input bytes as a source of choices; zeros when they run out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        let (first, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        *first
    }

    fn take(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }

    fn u128(&mut self) -> u128 {
        u128::from_le_bytes(self.take(16).try_into().expect("16"))
    }

    /// Text of every kind the writer meets: ASCII, Latin, characters outside the BMP
    /// (two UTF-16 units), and now and then over 4,000 units (an nvarchar(max) then).
    fn text(&mut self) -> String {
        let len = match self.byte() {
            0..=200 => usize::from(self.byte() % 40),
            _ => 3990 + usize::from(self.byte()) * 8,
        };
        let alphabet = ['a', 'Z', '<', '&', 'é', '€', '\u{1F600}', '\0', ' ', '\u{FEFF}'];
        let pattern: Vec<char> = (0..4).map(|_| alphabet[usize::from(self.byte()) % alphabet.len()]).collect();
        (0..len).map(|i| pattern[i % pattern.len()]).collect()
    }

    /// A value of a decimal, float, money, date or time type, in range (as `check` lets
    /// one in from a client); `None` when the bytes make one out of range.
    fn scalar(&mut self) -> Option<(Scalar, Vec<u8>)> {
        let scale = self.byte() % 8;
        let (s, data) = match self.byte() % 10 {
            0 => {
                let precision = self.byte() % 38 + 1;
                let scale = self.byte() % (precision + 1);
                let len = match precision {
                    1..=9 => 4,
                    10..=19 => 8,
                    20..=28 => 12,
                    _ => 16,
                };
                let value = self.u128() % 10u128.pow(u32::from(precision));
                let mut data = vec![self.byte() % 2];
                data.extend_from_slice(&value.to_le_bytes()[..len]);
                (Scalar::decimal(precision, scale), data)
            }
            1 => (Scalar::float(8), self.take(8)),
            2 => (Scalar::float(4), self.take(4)),
            3 => (Scalar::of(wire::MONEYN, 8), self.take(8)),
            4 => (Scalar::of(wire::MONEYN, 4), self.take(4)),
            5 => (Scalar::of(wire::DATETIMN, 8), self.take(8)),
            6 => (Scalar::of(wire::DATEN, 0), self.take(3)),
            7 => {
                let s = Scalar::of(wire::TIMEN, scale);
                let n = s.max_len();
                (s, self.take(n))
            }
            8 => {
                let s = Scalar::of(wire::DATETIME2N, scale);
                let n = s.max_len();
                (s, self.take(n))
            }
            _ => {
                let s = Scalar::of(wire::DATETIMEOFFSETN, scale);
                let n = s.max_len();
                (s, self.take(n))
            }
        };
        s.check(&data).ok().map(|()| (s, data))
    }
}

/// One column and its cells: the type the server declares, each value as the server
/// hands it to the writer, and what a client must read back.
fn column(b: &mut Bytes<'_>, rows: usize) -> (ColType, Vec<(Sql, Sql)>) {
    let kind = b.byte() % 11;
    let mut scalar = None;
    let ty = match kind {
        0 => ColType::TinyInt,
        1 => ColType::SmallInt,
        2 => ColType::Int,
        3 => ColType::BigInt,
        4 => ColType::Bit,
        5 => ColType::Guid,
        6 => ColType::NVarChar,
        7 => ColType::NVarCharMax,
        8 => ColType::VarBinaryMax,
        9 => ColType::Xml,
        _ => {
            let first = b.scalar();
            let ty = first.as_ref().map_or(ColType::Int, |(s, _)| ColType::Typed(*s));
            scalar = first;
            ty
        }
    };
    let cells = (0..rows)
        .map(|row| {
            if b.byte() % 7 == 0 {
                return (Sql::Null, Sql::Null);
            }
            let word = i64::from_le_bytes(b.take(8).try_into().expect("8"));
            match ty {
                ColType::TinyInt => (Sql::Int(i32::from(word as u8)), Sql::Int(i32::from(word as u8))),
                ColType::SmallInt => (Sql::Int(i32::from(word as i16)), Sql::Int(i32::from(word as i16))),
                // An int column may be handed a bigint that fits (and a bigint column an
                // int): the writer writes the column's width.
                ColType::Int if word % 2 == 0 => (Sql::BigInt(i64::from(word as i32)), Sql::Int(word as i32)),
                ColType::Int => (Sql::Int(word as i32), Sql::Int(word as i32)),
                ColType::BigInt if word % 2 == 0 => (Sql::Int(word as i32), Sql::BigInt(i64::from(word as i32))),
                ColType::BigInt => (Sql::BigInt(word), Sql::BigInt(word)),
                ColType::Bit => (Sql::Bit(word % 2 == 0), Sql::Bit(word % 2 == 0)),
                ColType::Guid => {
                    let g = uuid::Uuid::from_u128(b.u128());
                    (Sql::Guid(g), Sql::Guid(g))
                }
                // Text, handed over as nvarchar or (now and then) as varchar bytes, which
                // a client reads as their characters.
                ColType::NVarChar | ColType::NVarCharMax | ColType::Xml if word % 3 == 0 => {
                    let n = usize::from(b.byte()) * 20;
                    let bytes = b.take(n);
                    (Sql::VarChar(bytes.clone()), Sql::NVarChar(Sql::varchar_text(&bytes)))
                }
                ColType::NVarChar | ColType::NVarCharMax | ColType::Xml => {
                    let t = b.text();
                    (Sql::NVarChar(t.clone()), Sql::NVarChar(t))
                }
                ColType::VarBinaryMax => {
                    let n = usize::from(b.byte());
                    let v = b.take(n);
                    (Sql::VarBinary(v.clone()), Sql::VarBinary(v))
                }
                ColType::Typed(s) => {
                    // The first cell's value, or another of the same type.
                    let (_, data) = match (row, &scalar) {
                        (0, Some(first)) => first.clone(),
                        _ => std::iter::repeat_with(|| b.scalar())
                            .take(4)
                            .flatten()
                            .find(|(t, _)| *t == s)
                            .unwrap_or_else(|| scalar.clone().expect("a typed column has a first value")),
                    };
                    // Shown as text without a panic, whatever the value.
                    let _ = s.text(&data);
                    (Sql::Typed(s, data.clone()), Sql::Typed(s, data))
                }
            }
        })
        .collect();
    (ty, cells)
}

/// Writes a result set made from `data` as the server writes one (`result_set`) and
/// reads it back as a client does: the same columns (an nvarchar(4000) column holding a
/// longer value declared nvarchar(max)) and the same values. Panics on a difference.
pub fn response_roundtrip(data: &[u8]) {
    let mut b = Bytes(data);
    let (ncols, rows) = (usize::from(b.byte() % 6) + 1, usize::from(b.byte() % 4));
    let columns: Vec<(ColType, Vec<(Sql, Sql)>)> = (0..ncols).map(|_| column(&mut b, rows)).collect();
    let names: Vec<String> = (0..ncols).map(|i| format!("c{i}")).collect();
    let cols: Vec<(&str, ColType)> = names.iter().map(String::as_str).zip(columns.iter().map(|c| c.0)).collect();
    let sent: Vec<Vec<Sql>> = (0..rows).map(|r| columns.iter().map(|c| c.1[r].0.clone()).collect()).collect();
    let expected: Vec<Vec<Sql>> = (0..rows).map(|r| columns.iter().map(|c| c.1[r].1.clone()).collect()).collect();
    let mut t = codec::Tokens::default();
    super::server::write_result_set(&mut t, &cols, &sent);
    let (got_cols, got_rows) = codec::read_result_set(&t.out).expect("the writer's result set reads back");
    for ((name, ty), (got_name, got_ty)) in cols.iter().zip(&got_cols) {
        // (The expected cells are the text a client reads, so their length decides.)
        let long = expected.iter().any(|r| {
            matches!(&r[names.iter().position(|n| n == name).expect("a column")], Sql::NVarChar(s) if s.encode_utf16().count() > 4000)
        });
        let declared = if *ty == ColType::NVarChar && long { ColType::NVarCharMax } else { *ty };
        assert_eq!((*name, declared), (got_name.as_str(), *got_ty), "column metadata");
    }
    assert_eq!(got_cols.len(), cols.len());
    assert_eq!(got_rows, expected, "rows");
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            super::parse_everything(&data);
        }

        #[test]
        fn random_result_sets_read_back_as_written(data in proptest::collection::vec(any::<u8>(), 0..1024)) {
            super::response_roundtrip(&data);
        }

        #[test]
        fn random_t_sql_of_the_statement_words_never_panics(words in proptest::collection::vec(
            proptest::sample::select(vec![
                "WAITFOR", "(", ")", "RECEIVE", "TOP", "*", ",", "FROM", "q", "WHERE", "conversation_handle",
                "=", "@h", "TIMEOUT", "5", "SEND", "ON", "CONVERSATION", "MESSAGE", "TYPE", "[t]", "END",
                "WITH", "ERROR", "DESCRIPTION", "'x'", "CLEANUP", "BEGIN", "DIALOG", "SERVICE", "TO",
                "CONTRACT", "MOVE", "GET", "GROUP", "DECLARE", "SET", "SELECT", "CAST", "AS", "xml",
                "CONVERT", ";", "--", "/*", "*/", "N'", "EXEC", "TRAN", "COMMIT",
            ]),
            0..24,
        )) {
            let _ = crate::emulator::tsql::parse_batch(&words.join(" "));
        }
    }
}
