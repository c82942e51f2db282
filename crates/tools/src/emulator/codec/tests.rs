//! The codec's values read back as written, and its framing.

use super::*;
use uuid::Uuid;

#[test]
fn a_guid_and_a_plp_value_read_back() {
    let u = Uuid::from_u128(0x0011_2233_4455_6677_8899_aabb_ccdd_eeff);
    let mut req = vec![0x24, 16, 16];
    req.extend_from_slice(&guid_wire(&u));
    req.extend_from_slice(&[0xA5, 0xFF, 0xFF]);
    req.extend_from_slice(&(3u64).to_le_bytes());
    req.extend_from_slice(&(3u32).to_le_bytes());
    req.extend_from_slice(b"abc");
    req.extend_from_slice(&0u32.to_le_bytes());
    req.push(0x1F);
    let mut r = Reader::new(&req);
    assert_eq!(read_value(&mut r).unwrap(), Sql::Guid(u));
    assert_eq!(read_value(&mut r).unwrap(), Sql::VarBinary(b"abc".to_vec()));
    assert_eq!(read_value(&mut r).unwrap(), Sql::Null);
    assert!(r.rest().is_empty());
}

#[test]
fn a_login7_reads_back() {
    let l = parse_login7(&login7_request("ik", "geheim;\"", "payroll")).unwrap();
    assert_eq!((l.user.as_str(), l.password.as_str(), l.database.as_str()), ("ik", "geheim;\"", "payroll"));
    assert_eq!(prelogin_encryption(&prelogin_request(3)), Some(3));
}

#[test]
fn the_prelogin_answer_says_no_encryption() {
    let p = prelogin_response();
    assert_eq!(prelogin_encryption(&p), Some(2));
}
