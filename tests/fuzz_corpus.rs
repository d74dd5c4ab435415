//! The fuzz corpora (`fuzz/corpus/`), replayed through the fuzz targets' bodies on stable Rust:
//! every input the fuzzers kept, crashes they once found included, stays a regression test.

#[macro_use]
mod common;

#[path = "../fuzz/fuzz_targets/bodies.rs"]
mod bodies;
#[cfg(feature = "wgpu")]
#[path = "../fuzz/fuzz_targets/sampler_step.rs"]
mod sampler_step;

fn replay(target: &str, mut body: impl FnMut(&[u8])) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        body(&std::fs::read(&path).unwrap());
        count += 1;
    }
    assert!(count > 0, "{} is empty", dir.display());
}

#[test]
fn params_corpus() {
    replay("params", bodies::params);
}

#[test]
fn audit_inputs_corpus() {
    replay("audit_inputs", bodies::audit_inputs);
}

/// The `step` target's corpus on the wgpu backend (lavapipe with `CI=true`) against the oracle.
#[cfg(feature = "wgpu")]
#[test]
fn step_corpus() {
    // The body keeps a sampler on the backend for the process: the backend's `'static` borrow.
    let wgpu = common::wgpu();
    common::on("wgpu", "step_corpus", wgpu, |_| replay("step", |data| sampler_step::step(wgpu.unwrap(), data)));
}
