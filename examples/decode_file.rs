//! Decodes message files and prints the model or the error.
//! Run: `cargo run --example decode_file -- schemas/examples/invalid/*.xml`

use sbworker::contract::{self, Limits};

fn main() {
    for path in std::env::args().skip(1) {
        let bytes = std::fs::read(&path).expect("readable file");
        let name = std::path::Path::new(&path).file_name().unwrap().to_string_lossy().into_owned();
        let l = Limits::default();
        let r = if name.starts_with("antwoord") {
            contract::decode_antwoord(&bytes, &l).map(|v| format!("{v:?}"))
        } else if name.starts_with("fout") {
            contract::decode_fout(&bytes, &l).map(|v| format!("{v:?}"))
        } else {
            contract::decode_vraag(&bytes, &l).map(|v| format!("{} diensten", v.diensten.dienst.len()))
        };
        match r {
            Ok(s) => println!("{name}: ok {}", &s[..s.len().min(100)]),
            Err(e) => println!("{name}: {} [{}]", e, e.reden),
        }
    }
}
