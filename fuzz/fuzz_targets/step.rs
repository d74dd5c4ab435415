//! `Sampler::step` on the wgpu backend (lavapipe here) against the CPU oracle, on any batch the
//! bytes decode to (see `sampler_step`). The backend and its sampler are made once a process.
#![no_main]

mod sampler_step;

use sampling_kernels::WgpuBackend;
use std::sync::OnceLock;

fn wgpu() -> &'static WgpuBackend {
    static B: OnceLock<WgpuBackend> = OnceLock::new();
    B.get_or_init(|| WgpuBackend::new().expect("the step target needs a wgpu adapter (lavapipe)"))
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| sampler_step::step(wgpu(), data));
