//! Parameter parsing and validation never panic (see `bodies::params`).
#![no_main]

mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::params(data));
