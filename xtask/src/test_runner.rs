//! `cargo xtask test`: the README's test command. Checks the generated files, runs every test of
//! the workspace under cargo-nextest with NVRTC on the library path (each test in its own
//! process, none skipped when another fails), then the doctests (nextest runs none), then prints
//! which backends ran on what device and how many checks each ran or could not run. Under
//! `CI=true` it fails unless the wgpu backend ran (on lavapipe, in CI).
//!
//! The pass and fail counts come from nextest's machine-readable events (libtest's JSON lines,
//! still behind `NEXTEST_EXPERIMENTAL_LIBTEST_JSON`), not from scraping the human output; that
//! output goes to stderr as usual.

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

/// One line of libtest's JSON, as nextest writes it: only a test's end counts here.
#[derive(serde::Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Event {
    Test {
        event: Outcome,
    },
    #[serde(other)]
    Other,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum Outcome {
    Ok,
    Failed,
    /// `started`, `ignored`, `timeout`...: neither a pass nor a failure.
    #[serde(other)]
    Other,
}

/// Whether the test an event line ends passed (`Some(true)`) or failed; `None` for the other
/// events (a suite's start and end, a test's start).
fn outcome(line: &str) -> Result<Option<bool>, String> {
    match serde_json::from_str(line) {
        Ok(Event::Test { event: Outcome::Ok }) => Ok(Some(true)),
        Ok(Event::Test { event: Outcome::Failed }) => Ok(Some(false)),
        Ok(_) => Ok(None),
        Err(e) => Err(format!("nextest's event {line}: {e}")),
    }
}

/// Cargo in `root`, with what every test needs: NVRTC on the library path, the report file and a
/// runtime folder for Mesa's Vulkan layer.
fn cargo(root: &Path, report: &Path) -> Result<Command, String> {
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    // Mesa's Vulkan device-select layer asks libwayland for a display, which prints an error
    // line where no runtime folder is set (a headless machine): give it an empty one of its own.
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        let dir = root.join("target").join("xdg-runtime");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        cargo.env("XDG_RUNTIME_DIR", dir);
    }
    cargo.current_dir(root).env("LD_LIBRARY_PATH", cuda_tools::find().library_path()).env("SK_TEST_REPORT", report);
    Ok(cargo)
}

/// Every test but the doctests under nextest (`extra` goes to `cargo nextest run`), its output
/// on stderr; the tests that passed and failed.
fn nextest(root: &Path, report: &Path, extra: &[String]) -> Result<(u64, u64), String> {
    let mut child = cargo(root, report)?
        // The command-line tools are a feature: their tests run them.
        .args(["nextest", "run", "--workspace", "--features", "sampling-kernels/cli", "--no-fail-fast"])
        .args(["--message-format", "libtest-json"])
        .env("NEXTEST_EXPERIMENTAL_LIBTEST_JSON", "1")
        .args(extra)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cargo nextest (install it: cargo install --locked cargo-nextest): {e}"))?;
    let (mut passed, mut failed) = (0u64, 0u64);
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        match outcome(&line.map_err(|e| e.to_string())?)? {
            Some(true) => passed += 1,
            Some(false) => failed += 1,
            None => {}
        }
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    // A run that stopped before its tests (a build error) reported none: it counts as a failure.
    if !status.success() && failed == 0 {
        failed = 1;
    }
    Ok((passed, failed))
}

pub fn run(root: &Path, extra: &[String]) -> Result<(), String> {
    gen::run(root, true)?;
    let report = root.join("target").join("sampling-kernels-test-report.tsv");
    let _ = std::fs::remove_file(&report);
    let (passed, mut failed) = nextest(root, &report, extra)?;
    // Nextest runs no doctests; cargo's output says how many ran, its status whether they passed.
    let doctests = cargo(root, &report)?
        .args(["test", "--doc", "--features", "sampling-kernels/cli"])
        .status()
        .map_err(|e| format!("cargo test --doc: {e}"))?
        .success();
    failed += u64::from(!doctests);

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
    if failed > 0 {
        return Err(format!("{failed} test(s) failed"));
    }
    if ci && wgpu_ran == 0 {
        return Err("CI=true but no wgpu test ran: install mesa-vulkan-drivers (lavapipe)".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::outcome;

    /// Lines as cargo-nextest 0.9 writes them with `--message-format libtest-json`.
    #[test]
    fn nextest_events_count_ends_only() {
        let lines = [
            (r#"{"type":"suite","event":"started","test_count":2}"#, None),
            (r#"{"type":"test","event":"started","name":"sampling-kernels::sglang$a"}"#, None),
            (r#"{"type":"test","event":"ok","name":"sampling-kernels::sglang$a","exec_time":0.02}"#, Some(true)),
            (r#"{"type":"test","event":"failed","name":"x$b","exec_time":0.4,"stdout":"panicked"}"#, Some(false)),
            (r#"{"type":"test","event":"ignored","name":"x$c"}"#, None),
            (r#"{"type":"suite","event":"failed","passed":1,"failed":1,"ignored":1,"measured":0}"#, None),
        ];
        for (line, expected) in lines {
            assert_eq!(outcome(line), Ok(expected), "{line}");
        }
        assert!(outcome("   Compiling xtask").is_err());
    }
}
