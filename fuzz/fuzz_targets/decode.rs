//! Fuzz target: arbitrary bytes through every decoder, and what decodes through the
//! engine and the encoder. Nothing may panic; whatever decodes must encode and decode
//! back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sbworker::contract::{self, Limits};
use sbworker::engine::{self, Tables};

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    if let Ok(v) = contract::decode_vraag(data, &limits) {
        let again = contract::decode_vraag(contract::encode_vraag(&v).as_bytes(), &limits).expect("re-decodes");
        assert_eq!(again, v);
        let tables = Tables::built_in().expect("built-in tables");
        match engine::calculate(&v, &tables, true) {
            Ok(c) => {
                let a = contract::encode_antwoord(&c.antwoord);
                assert!(contract::decode_antwoord(a.as_bytes(), &limits).is_ok());
            }
            Err(e) => {
                let f = contract::encode_fout(&e.to_fout(Some(v.id)));
                assert!(contract::decode_fout(f.as_bytes(), &limits).is_ok());
            }
        }
    } else if let Err(e) = contract::decode_vraag(data, &limits) {
        let f = contract::encode_fout(&e.to_fout());
        assert!(contract::decode_fout(f.as_bytes(), &limits).is_ok());
    }
    if let Ok(a) = contract::decode_antwoord(data, &limits) {
        assert_eq!(contract::decode_antwoord(contract::encode_antwoord(&a).as_bytes(), &limits).expect("re-decodes"), a);
    }
    if let Ok(f) = contract::decode_fout(data, &limits) {
        assert_eq!(contract::decode_fout(contract::encode_fout(&f).as_bytes(), &limits).expect("re-decodes"), f);
    }
});
