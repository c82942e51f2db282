//! Benchmarks of the message codec and the engine on a realistic month
//! (`schemas/examples/valid/vraag-maand.xml`: 22 shifts, 44 blocks).
//!
//! Run: `cargo bench --bench codec`. Targets: decode + encode under
//! 25 µs and within 3x of a raw quick-xml event scan of the same bytes; the engine under
//! 5 µs. Criterion measures each; the ratio is measured again at the end, interleaved,
//! so both sides see the same machine state, and printed.

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, criterion_group};
use quick_xml::Reader;
use quick_xml::events::Event;
use sbworker::contract::{self, Antwoord, Limits};
use sbworker::engine::{self, Tables};

const VRAAG: &[u8] = include_bytes!("../schemas/examples/valid/vraag-maand.xml");

/// The baseline: UTF-8 check and every quick-xml event of the document, nothing kept.
fn raw_scan(bytes: &[u8]) -> usize {
    let text = std::str::from_utf8(bytes).expect("utf-8");
    let mut r = Reader::from_str(text);
    let mut n = 0;
    loop {
        match r.read_event() {
            Ok(Event::Eof) => return n,
            Ok(e) => n += black_box(&e).len(),
            Err(e) => panic!("{e}"),
        }
    }
}

fn decode_encode(bytes: &[u8], answer: &Antwoord, out: &mut String) -> usize {
    let v = contract::decode_vraag(bytes, &Limits::default()).expect("valid");
    black_box(&v);
    out.clear();
    contract::encode_antwoord_into(out, answer);
    out.len()
}

fn benches(c: &mut Criterion) {
    let tables = Tables::built_in().expect("tables");
    let vraag = contract::decode_vraag(VRAAG, &Limits::default()).expect("valid");
    let answer = engine::calculate(&vraag, &tables, false).expect("computes").antwoord;
    let mut out = String::with_capacity(4096);

    let mut g = c.benchmark_group("codec");
    g.bench_function("raw_quick_xml_scan", |b| b.iter(|| raw_scan(black_box(VRAAG))));
    g.bench_function("decode_vraag", |b| {
        b.iter(|| contract::decode_vraag(black_box(VRAAG), &Limits::default()).expect("valid"))
    });
    g.bench_function("encode_antwoord", |b| {
        b.iter(|| {
            out.clear();
            contract::encode_antwoord_into(&mut out, black_box(&answer));
        })
    });
    g.bench_function("decode_plus_encode", |b| b.iter(|| decode_encode(black_box(VRAAG), &answer, &mut out)));
    g.finish();

    let mut g = c.benchmark_group("engine");
    g.bench_function("calculate_month", |b| {
        b.iter(|| engine::calculate(black_box(&vraag), &tables, false).expect("computes"))
    });
    g.bench_function("decode_calculate_encode", |b| {
        b.iter(|| {
            let v = contract::decode_vraag(black_box(VRAAG), &Limits::default()).expect("valid");
            let a = engine::calculate(&v, &tables, false).expect("computes").antwoord;
            out.clear();
            contract::encode_antwoord_into(&mut out, &a);
        })
    });
    g.finish();
}

/// Median nanoseconds per call of `f` over `rounds` rounds of `iters` calls.
fn median_ns(rounds: &mut [Vec<f64>; 2], fs: [&mut dyn FnMut(); 2], iters: u32) {
    for (i, f) in fs.into_iter().enumerate() {
        let t = Instant::now();
        for _ in 0..iters {
            f();
        }
        rounds[i].push(t.elapsed().as_nanos() as f64 / f64::from(iters));
    }
}

fn ratio_report() {
    let tables = Tables::built_in().expect("tables");
    let vraag = contract::decode_vraag(VRAAG, &Limits::default()).expect("valid");
    let answer = engine::calculate(&vraag, &tables, false).expect("computes").antwoord;
    let mut out = String::with_capacity(4096);
    let mut rounds: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..31 {
        let mut scan = || {
            black_box(raw_scan(black_box(VRAAG)));
        };
        let mut codec = || {
            black_box(decode_encode(black_box(VRAAG), &answer, &mut out));
        };
        median_ns(&mut rounds, [&mut scan, &mut codec], 2000);
    }
    for r in &mut rounds {
        r.sort_by(f64::total_cmp);
    }
    let (scan, codec) = (rounds[0][15], rounds[1][15]);
    println!("\nratio report ({} bytes, 31 interleaved rounds of 2000 calls, medians):", VRAAG.len());
    println!("  raw quick-xml scan      {:>8.2} µs", scan / 1000.0);
    println!("  decode + encode         {:>8.2} µs  (target < 25 µs)", codec / 1000.0);
    println!("  ratio                   {:>8.2}x    (target <= 3x)", codec / scan);
}

criterion_group!(codec_benches, benches);

fn main() {
    codec_benches();
    Criterion::default().configure_from_args().final_summary();
    ratio_report();
}
