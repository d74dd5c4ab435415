//! `cargo xtask test`: the README's test command. Checks the generated files, runs every test of
//! the workspace with NVRTC on the library path (every test binary, so one that fails hides no
//! other), then prints which backends ran on what device and how many checks each ran or could
//! not run. Under `CI=true` it fails unless the wgpu backend ran (on lavapipe, in CI).

use crate::{cuda_tools, gen};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

#[derive(Default)]
struct Row {
    device: String,
    ran: u32,
    not_run: u32,
}

pub fn run(root: &Path, extra: &[String]) -> Result<(), String> {
    gen::run(root, true)?;
    let report = root.join("target").join("sampling-kernels-test-report.tsv");
    let _ = std::fs::remove_file(&report);
    let tools = cuda_tools::find();
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    // Mesa's Vulkan device-select layer asks libwayland for a display, which prints an error
    // line where no runtime folder is set (a headless machine): give it an empty one of its own.
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        let dir = root.join("target").join("xdg-runtime");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        cargo.env("XDG_RUNTIME_DIR", dir);
    }
    let mut child = cargo
        // The command-line tools are a feature: their tests run them.
        .args(["test", "--workspace", "--features", "sampling-kernels/cli", "--no-fail-fast"])
        .args(extra)
        .current_dir(root)
        .env("LD_LIBRARY_PATH", tools.library_path())
        .env("SK_TEST_REPORT", &report)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cargo test: {e}"))?;
    // Echo the output while counting cargo's own results.
    let (mut passed, mut failed) = (0u64, 0u64);
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let line = line.map_err(|e| e.to_string())?;
        println!("{line}");
        if let Some(rest) = line.strip_prefix("test result: ") {
            let count = |key: &str| -> u64 {
                rest.split([';', '.'])
                    .find_map(|part| part.trim().strip_suffix(key).and_then(|n| n.trim().parse().ok()))
                    .unwrap_or(0)
            };
            passed += count("passed");
            failed += count("failed");
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    // A binary that died (a crash, a build error) printed no result line: it counts as a failure.
    if !status.success() && failed == 0 {
        failed = 1;
    }

    let text = std::fs::read_to_string(&report).unwrap_or_default();
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() != 4 {
            continue;
        }
        let row = rows.entry(f[0].to_string()).or_default();
        if f[1] == "ran" {
            row.ran += 1;
            row.device = f[3].to_string();
        } else {
            row.not_run += 1;
            if row.device.is_empty() {
                row.device = "absent".into();
            }
        }
    }
    let not_run: u32 = rows.values().map(|r| r.not_run).sum();
    println!();
    println!("{:<8} {:<48} {:>6} {:>8}", "backend", "device", "ran", "not run");
    for (name, r) in &rows {
        println!("{:<8} {:<48} {:>6} {:>8}", name, r.device, r.ran, r.not_run);
    }
    let wgpu_ran = rows.get("wgpu").map_or(0, |r| r.ran);
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    // Tests whose backend was absent passed vacuously in cargo's count: they are skipped here.
    let truly_passed = passed.saturating_sub(not_run as u64);
    println!();
    println!("xtask: {truly_passed} passed, {failed} failed, {not_run} skipped");
    if !status.success() {
        return Err("cargo test failed".into());
    }
    if ci && wgpu_ran == 0 {
        return Err("CI=true but no wgpu test ran: install mesa-vulkan-drivers (lavapipe)".into());
    }
    Ok(())
}
