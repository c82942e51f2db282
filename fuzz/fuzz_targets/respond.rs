//! Fuzz target: result sets of every column type, with values made from the input,
//! written by the emulator's response writer and read back as a client reads them.
//! What comes back must be what was written.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| sbworker::emulator::fuzz::response_roundtrip(data));
