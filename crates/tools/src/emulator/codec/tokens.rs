//! The token stream of a response (2.2.7): COLMETADATA, ROW, DONE, DONEPROC, ERROR,
//! ENVCHANGE, LOGINACK.

use super::{ColType, Sql, guid_wire, put_b_varchar, put_us_varchar, put_utf16};

/// A PLP value in one chunk (2.2.5.2.3).
pub(super) fn put_plp(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u64).to_le_bytes());
    if !b.is_empty() {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    }
    out.extend_from_slice(&0u32.to_le_bytes());
}

/// The longest message text an ERROR token carries.
pub const MAX_MESSAGE_CHARS: usize = 2047;

/// The token stream of a response, written in order.
#[derive(Default)]
pub struct Tokens {
    pub out: Vec<u8>,
}

pub mod done {
    pub const MORE: u16 = 0x0001;
    pub const ERROR: u16 = 0x0002;
    pub const COUNT: u16 = 0x0010;
    /// The acknowledgement of an attention (cancel) request.
    pub const ATTN: u16 = 0x0020;
}

impl Tokens {
    pub fn login_ack(&mut self) {
        let mut body = vec![0x01];
        body.extend_from_slice(&0x7400_0004u32.to_be_bytes());
        put_b_varchar(&mut body, "sbworker emulator");
        body.extend_from_slice(&[16, 0, 0, 0]);
        self.out.push(0xAD);
        self.out.extend_from_slice(&(body.len() as u16).to_le_bytes());
        self.out.extend_from_slice(&body);
    }

    /// ENVCHANGE with string values (database: type 1; packet size: type 4).
    pub fn env_change_text(&mut self, kind: u8, new: &str, old: &str) {
        let mut body = vec![kind];
        put_b_varchar(&mut body, new);
        put_b_varchar(&mut body, old);
        self.env(&body);
    }

    /// ENVCHANGE of a transaction: 8 begin (new descriptor), 9 commit and 10 rollback
    /// (old descriptor).
    pub fn env_change_tran(&mut self, kind: u8, descriptor: u64) {
        let mut body = vec![kind];
        if kind == 8 {
            body.push(8);
            body.extend_from_slice(&descriptor.to_le_bytes());
            body.push(0);
        } else {
            body.push(0);
            body.push(8);
            body.extend_from_slice(&descriptor.to_le_bytes());
        }
        self.env(&body);
    }

    fn env(&mut self, body: &[u8]) {
        self.out.push(0xE3);
        self.out.extend_from_slice(&(body.len() as u16).to_le_bytes());
        self.out.extend_from_slice(body);
    }

    pub fn col_metadata(&mut self, cols: &[(&str, ColType)]) {
        self.out.push(0x81);
        self.out.extend_from_slice(&(cols.len() as u16).to_le_bytes());
        for (name, ty) in cols {
            self.out.extend_from_slice(&0u32.to_le_bytes());
            self.out.extend_from_slice(&0x0001u16.to_le_bytes()); // nullable
            match ty {
                ColType::TinyInt => self.out.extend_from_slice(&[0x26, 1]),
                ColType::SmallInt => self.out.extend_from_slice(&[0x26, 2]),
                ColType::Int => self.out.extend_from_slice(&[0x26, 4]),
                ColType::BigInt => self.out.extend_from_slice(&[0x26, 8]),
                ColType::Bit => self.out.extend_from_slice(&[0x68, 1]),
                ColType::Guid => self.out.extend_from_slice(&[0x24, 16]),
                ColType::NVarChar => {
                    self.out.push(0xE7);
                    self.out.extend_from_slice(&8000u16.to_le_bytes());
                    self.out.extend_from_slice(&[0x09, 0x04, 0xD0, 0x00, 0x34]); // Latin1_General_CI_AS
                }
                ColType::NVarCharMax => {
                    self.out.push(0xE7);
                    self.out.extend_from_slice(&0xFFFFu16.to_le_bytes());
                    self.out.extend_from_slice(&[0x09, 0x04, 0xD0, 0x00, 0x34]);
                }
                ColType::VarBinaryMax => {
                    self.out.push(0xA5);
                    self.out.extend_from_slice(&0xFFFFu16.to_le_bytes());
                }
                ColType::Xml => self.out.extend_from_slice(&[0xF1, 0x00]),
                ColType::Typed(s) => {
                    self.out.push(s.ty);
                    self.out.extend_from_slice(s.info());
                }
            }
            put_b_varchar(&mut self.out, name);
        }
    }

    pub fn row(&mut self, cols: &[ColType], values: &[Sql]) {
        self.out.push(0xD1);
        for (ty, v) in cols.iter().zip(values) {
            // A varchar goes to the client as its text (the columns are nvarchar).
            let text;
            let v = match v {
                Sql::VarChar(b) => {
                    text = Sql::NVarChar(Sql::varchar_text(b));
                    &text
                }
                v => v,
            };
            match (ty, v) {
                (ColType::VarBinaryMax | ColType::Xml | ColType::NVarCharMax, Sql::Null) => {
                    self.out.extend_from_slice(&u64::MAX.to_le_bytes())
                }
                (ColType::Xml | ColType::NVarCharMax, Sql::NVarChar(s)) => {
                    let mut b = Vec::new();
                    put_utf16(&mut b, s);
                    put_plp(&mut self.out, &b);
                }
                (ColType::NVarChar, Sql::Null) => self.out.extend_from_slice(&0xFFFFu16.to_le_bytes()),
                (_, Sql::Null) => self.out.push(0),
                // An integer as wide as its column says (the metadata is the contract).
                (ColType::TinyInt, Sql::Int(i)) => self.out.extend_from_slice(&[1, *i as u8]),
                (ColType::SmallInt, Sql::Int(i)) => {
                    self.out.push(2);
                    self.out.extend_from_slice(&(*i as i16).to_le_bytes());
                }
                (ColType::BigInt, Sql::Int(i)) => {
                    self.out.push(8);
                    self.out.extend_from_slice(&i64::from(*i).to_le_bytes());
                }
                (_, Sql::Int(i)) => {
                    self.out.push(4);
                    self.out.extend_from_slice(&i.to_le_bytes());
                }
                (ColType::Int, Sql::BigInt(i)) => {
                    self.out.push(4);
                    let i = i32::try_from(*i).unwrap_or(if *i < 0 { i32::MIN } else { i32::MAX });
                    self.out.extend_from_slice(&i.to_le_bytes());
                }
                (_, Sql::BigInt(i)) => {
                    self.out.push(8);
                    self.out.extend_from_slice(&i.to_le_bytes());
                }
                (_, Sql::Bit(b)) => {
                    self.out.push(1);
                    self.out.push(u8::from(*b));
                }
                (_, Sql::Guid(u)) => {
                    self.out.push(16);
                    self.out.extend_from_slice(&guid_wire(u));
                }
                (_, Sql::VarChar(_)) => unreachable!("read as text above"),
                (_, Sql::NVarChar(s)) => {
                    let mut b = Vec::new();
                    put_utf16(&mut b, s);
                    self.out.extend_from_slice(&(b.len() as u16).to_le_bytes());
                    self.out.extend_from_slice(&b);
                }
                (_, Sql::VarBinary(b)) => put_plp(&mut self.out, b),
                (_, Sql::Typed(_, data)) => {
                    self.out.push(data.len() as u8);
                    self.out.extend_from_slice(data);
                }
            }
        }
    }

    /// RETURNSTATUS (0x79): an RPC's return status.
    pub fn return_status(&mut self, status: i32) {
        self.out.push(0x79);
        self.out.extend_from_slice(&status.to_le_bytes());
    }

    /// RETURNVALUE (0xAC) of an int OUTPUT parameter (MS-TDS 2.2.7.19): its ordinal and
    /// name in the call, status 0x01 (an output parameter), the type INTN(4), the value.
    pub fn return_value_int(&mut self, ordinal: u16, name: &str, value: i32) {
        self.out.push(0xAC);
        self.out.extend_from_slice(&ordinal.to_le_bytes());
        put_b_varchar(&mut self.out, name);
        self.out.push(0x01);
        self.out.extend_from_slice(&0u32.to_le_bytes()); // user type
        self.out.extend_from_slice(&0x0001u16.to_le_bytes()); // nullable
        self.out.extend_from_slice(&[0x26, 4, 4]);
        self.out.extend_from_slice(&value.to_le_bytes());
    }

    /// DONE (0xFD), DONEPROC (0xFE) or DONEINPROC (0xFF).
    pub fn done(&mut self, token: u8, status: u16, count: u64) {
        self.out.push(token);
        self.out.extend_from_slice(&status.to_le_bytes());
        self.out.extend_from_slice(&0u16.to_le_bytes());
        self.out.extend_from_slice(&count.to_le_bytes());
    }

    /// ERROR (0xAA) as SQL Server writes it. The text is bounded as SQL Server bounds a
    /// message (RAISERROR: 2,047 characters; a longer one keeps its first 2,044 and an
    /// ellipsis), so the token always fits its 16-bit length.
    pub fn error(&mut self, number: i32, state: u8, class: u8, message: &str) {
        let bounded: String;
        let message = if message.chars().count() > MAX_MESSAGE_CHARS {
            bounded = message.chars().take(MAX_MESSAGE_CHARS - 3).chain("...".chars()).collect();
            &bounded
        } else {
            message
        };
        let mut body = Vec::new();
        body.extend_from_slice(&number.to_le_bytes());
        body.push(state);
        body.push(class);
        put_us_varchar(&mut body, message);
        put_b_varchar(&mut body, "sbworker-emulator");
        put_b_varchar(&mut body, "");
        body.extend_from_slice(&1u32.to_le_bytes());
        self.out.push(0xAA);
        self.out.extend_from_slice(&(body.len() as u16).to_le_bytes());
        self.out.extend_from_slice(&body);
    }
}
