//! The project's tasks: `cargo xtask <command>`.
//!
//! - `gen [--check]`: write (or verify) `shaders/`, `kernels/` and `src/generated.rs` from the IR.

mod cuda;
mod gen;
mod ir;
mod kernels;
mod out;
mod tuning;
mod wgsl;

use std::path::PathBuf;
use std::process::ExitCode;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask sits in the workspace").to_path_buf()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("gen") => gen::run(&root(), args.iter().any(|a| a == "--check")),
        _ => Err("usage: cargo xtask gen [--check]".to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}
