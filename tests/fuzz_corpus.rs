//! The fuzz corpora (`fuzz/corpus/`), replayed through the fuzz targets' bodies on stable Rust:
//! every input the fuzzers kept, crashes they once found included, stays a regression test.

#[path = "../fuzz/fuzz_targets/bodies.rs"]
mod bodies;

fn replay(target: &str, body: fn(&[u8])) {
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
