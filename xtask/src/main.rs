//! The project's tasks: `cargo xtask <command>`.
//!
//! - `gen [--check]`: write (or verify) `shaders/`, `kernels/` and `src/generated.rs` from the IR.
//! - `test [cargo nextest run args]`: every test, then a table of backends, devices and checks run.
//! - `bundle-device [--dry-run]`: release test and bench binaries and a script for the GPU
//!   machine, in `dist/device.tgz`; `--dry-run` runs it here, CUDA hidden, and checks its output.
//! - `ptx-report`: registers, shared memory, spills and occupancy of every kernel (NVRTC + ptxas).
//! - `cost [--check] [--calibrate] [--kernels DIR]`: the modelled time of every kernel on a T4 and
//!   an H200, from its SASS (nvcc + cuobjdump); see `cost/mod.rs`.

mod bundle;
mod cost;
mod cuda;
mod cuda_tools;
mod gen;
mod host;
// The IR's whole vocabulary (f64, u64, workgroup arrays...) is there for every kernel family;
// the ones generated so far do not use all of it.
#[allow(dead_code)]
mod ir;
mod kernels;
mod last_part;
mod out;
mod outline;
mod passes;
// The backend's table of drivers and PTX ISAs, so the report assembles at the ISA it uses (the
// backend's driver lookup is not needed here). A comment, not a doc comment: rustdoc would resolve
// the module's own intra-doc links in this scope instead.
#[allow(dead_code)]
#[path = "../../src/backend/ptx_isa.rs"]
mod ptx_isa;
mod ptx_report;
mod test_runner;
mod tuning;
#[cfg(test)]
mod uniformity;
mod wgsl;
mod wgsl_u64;

use std::path::PathBuf;
use std::process::ExitCode;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask sits in the workspace").to_path_buf()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("gen") => gen::run(&root(), args.iter().any(|a| a == "--check")),
        Some("ptx-report") => {
            if let Some(code) = cuda_tools::reexec_with_nvrtc() {
                return code;
            }
            ptx_report::run()
        }
        Some("cost") => cost::run(&root(), &args[1..]),
        Some("bundle-device") => bundle::run(&root(), &args[1..]),
        Some("test") => test_runner::run(&root(), &args[1..]),
        _ => Err("usage: cargo xtask gen [--check] | test [nextest args] | ptx-report | cost [--check] [--calibrate] [--kernels DIR] | bundle-device [--dry-run]".to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}
