//! Profiling aid: runs one hot path of the benchmark month in a loop, for `perf record`
//! or `valgrind --tool=callgrind`.
//!
//! Run from the crate root: `cargo run --release --example profile -- decode|encode|engine [N]`.

use sbworker::contract::{self, Limits};
use sbworker::engine::{self, Tables};

fn main() {
    let mut args = std::env::args().skip(1);
    let what = args.next().unwrap_or_else(|| "decode".to_owned());
    let n: u32 = args.next().map_or(20_000, |s| s.parse().expect("N is a whole number"));
    let bytes = std::fs::read("schemas/examples/valid/vraag-maand.xml").expect("run from the crate root");
    let tables = Tables::built_in().expect("tables");
    let vraag = contract::decode_vraag(&bytes, &Limits::default()).expect("valid");
    let answer = engine::calculate(&vraag, &tables, false).expect("computes").antwoord;
    let mut out = String::new();
    let mut sum = 0usize;
    for _ in 0..n {
        sum += match what.as_str() {
            "decode" => contract::decode_vraag(&bytes, &Limits::default()).expect("valid").diensten.dienst.len(),
            "encode" => {
                out.clear();
                contract::encode_antwoord_into(&mut out, &answer);
                out.len()
            }
            "engine" => engine::calculate(&vraag, &tables, false).expect("computes").antwoord.mutaties.len(),
            other => panic!("unknown path '{other}': decode, encode or engine"),
        };
    }
    println!("{what} x {n}: {sum}");
}
