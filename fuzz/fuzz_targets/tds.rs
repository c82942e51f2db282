//! Fuzz target: arbitrary bytes through every parser the emulator runs on what a TDS
//! client sends (framing, PRELOGIN, LOGIN7, SQL batch, RPC, transaction manager, the
//! T-SQL recogniser). Nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| sbworker::emulator::fuzz::parse_everything(data));
