//! The audit tool's inputs never panic the SGLang model (see `bodies::audit_inputs`).
#![no_main]

mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::audit_inputs(data));
