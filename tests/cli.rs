//! The `sampling-kernels sample` binary on the files of `examples/data/`: tokens from npy and
//! safetensors (f32 and bf16) on every backend present, histograms against the CPU oracle's
//! softmax, SGLang's seeded sampler on the golden vectors, and clean failures on bad input.

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn data(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data").join(name).display().to_string()
}

fn cli(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_sampling-kernels")).arg("sample").args(args).output().unwrap();
    let run = Run {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into(),
        stderr: String::from_utf8_lossy(&out.stderr).into(),
    };
    assert!(!run.stderr.contains("panicked"), "{args:?} panicked: {}", run.stderr);
    run
}

/// The JSON lines of a run that must succeed.
fn lines(args: &[&str]) -> Vec<Value> {
    let run = cli(args);
    assert!(run.ok, "{args:?} failed: {}", run.stderr);
    run.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn tokens(args: &[&str]) -> Vec<u64> {
    lines(args).iter().map(|l| l["token"].as_u64().unwrap()).collect()
}

/// Runs `check` with `--backend cpu`, and with `--backend wgpu` where wgpu has an adapter
/// (under `CI=true` a missing adapter fails, as in every other test binary).
fn on_backends(test: &str, check: impl Fn(&str)) {
    common::on("cpu", test, common::cpu(), |_| check("cpu"));
    common::on("wgpu", test, common::wgpu(), |_| check("wgpu"));
}

#[test]
fn samples_npy_and_safetensors() {
    on_backends("cli_samples_files", |backend| {
        let common = ["--temperature", "0.8", "--seed", "1", "--return-logprob", "--backend", backend];
        let npy = data("logits_small.npy");
        let st = data("logits_small.safetensors");
        let from_npy = lines(&[&["--logits", &npy][..], &common].concat());
        assert_eq!(from_npy.len(), 4);
        for (row, line) in from_npy.iter().enumerate() {
            assert_eq!(line["row"], row);
            assert!(line["token"].as_u64().unwrap() < 32);
            assert!(line["logprob"].as_f64().unwrap() < 0.0);
        }
        let want: Vec<u64> = from_npy.iter().map(|l| l["token"].as_u64().unwrap()).collect();
        // The shipped logits are exact in bfloat16, so both tensors sample the same tokens.
        for tensor in ["logits", "logits_bf16"] {
            assert_eq!(tokens(&[&["--logits", &st, "--tensor", tensor][..], &common].concat()), want, "{tensor}");
        }
        // Per-row flags: the same values given once per row change nothing.
        let per_row = ["--temperature", "0.8,0.8,0.8,0.8", "--seed", "1,1,1,1", "--backend", backend];
        assert_eq!(tokens(&[&["--logits", &npy][..], &per_row].concat()), want);
        if backend != "cpu" {
            assert_eq!(want, tokens(&["--logits", &npy, "--temperature", "0.8", "--seed", "1", "--backend", "cpu"]));
        }
    });
}

#[test]
fn histogram_matches_softmax() {
    on_backends("cli_histogram", |backend| {
        for (input, tensor) in
            [(data("logits_small.npy"), None), (data("logits_small.safetensors"), Some("logits_bf16"))]
        {
            let mut args =
                vec!["--logits", &input, "--seed", "1", "--draws", "100000", "--compare", "--backend", backend];
            args.extend(tensor.iter().flat_map(|t| ["--tensor", *t]));
            for line in lines(&args) {
                let tv = line["tv"].as_f64().unwrap();
                let counted: u64 =
                    line["tokens"].as_array().unwrap().iter().map(|b| b["count"].as_u64().unwrap()).sum();
                eprintln!("{backend} {input} {tensor:?} row {}: TV {tv:.5}", line["row"]);
                assert_eq!(counted, 100_000);
                assert!(tv < 0.01, "{backend} row {}: TV {tv}", line["row"]);
            }
        }
    });
}

/// With filters, every draw lies in the set and the histogram follows the renormalized
/// distribution (the oracle's `--compare`), joint and top-k first. 10,000 draws over at most 6
/// tokens put the expected total variation near 0.01; the limit 0.04 is beyond 8 standard
/// deviations (the distribution itself is checked at 100,000 draws in `tests/filters.rs`).
#[test]
fn filtered_histogram_matches_the_set() {
    on_backends("cli_filtered_histogram", |backend| {
        let input = data("logits_small.npy");
        for order in ["joint", "top-k-first"] {
            let flags = format!(
                "--seed 3 --top-k 6 --top-p 0.8 --min-p 0.02 --order {order} --draws 10000 --compare --backend {backend}"
            );
            let args: Vec<&str> = ["--logits", &input].into_iter().chain(flags.split(' ')).collect();
            for line in lines(&args) {
                let tv = line["tv"].as_f64().unwrap();
                for bin in line["tokens"].as_array().unwrap() {
                    let (count, prob) = (bin["count"].as_u64().unwrap(), bin["prob"].as_f64().unwrap());
                    assert!(
                        count == 0 || prob > 0.0,
                        "{backend} {order}: token {} drawn outside the set",
                        bin["token"]
                    );
                }
                eprintln!("{backend} {order} row {}: TV {tv:.5}", line["row"]);
                assert!(tv < 0.04, "{backend} {order} row {}: TV {tv}", line["row"]);
            }
        }
    });
}

#[test]
fn seeded_reproduces_golden_tokens() {
    let golden = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/golden/seeded_f64_small.json");
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(golden).unwrap()).unwrap();
    let list = |key: &str| meta[key].as_array().unwrap().iter().map(|v| v.to_string()).collect::<Vec<_>>().join(",");
    let want: Vec<u64> = meta["expected_tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    let (seeds, positions, input) = (list("seeds"), list("positions"), data("golden_logprobs.npy"));
    on_backends("cli_seeded_golden", |backend| {
        for mode in ["float64", "screened"] {
            let args = ["--logprobs", &input, "--seeded", "--mode", mode, "--seed", &seeds, "--position", &positions];
            assert_eq!(tokens(&[&args[..], &["--backend", backend]].concat()), want, "{backend} {mode}");
        }
    });
}

/// Writes an `.npy` of `shape` filled with `value` into the test's scratch folder.
fn scratch_npy<T: npyz::AutoSerialize + Copy>(name: &str, shape: &[u64], value: T) -> String {
    use npyz::WriterBuilder;
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let file = std::fs::File::create(&path).unwrap();
    let mut writer = npyz::WriteOptions::new().default_dtype().shape(shape).writer(file).begin_nd().unwrap();
    writer.extend(std::iter::repeat_n(value, shape.iter().product::<u64>() as usize)).unwrap();
    writer.finish().unwrap();
    path.display().to_string()
}

#[test]
fn bad_input_fails_with_a_message() {
    let (npy, st, golden) = (data("logits_small.npy"), data("logits_small.safetensors"), data("golden_logprobs.npy"));
    let missing = data("missing.npy");
    let rank3 = scratch_npy("rank3.npy", &[2, 2, 8], 1f32);
    let ints = scratch_npy("ints.npy", &[2, 8], 1i32);
    let cases: [(&[&str], &str); 14] = [
        (&["--logits", &missing], "missing.npy: cannot read"),
        (&["--logits", &rank3], "rank3.npy: rank 3 (shape [2, 2, 8]); expected 1 (one row) or 2"),
        (&["--logits", &ints], "ints.npy: dtype '<i4' is not f16, f32 or f64"),
        (&["--logits", &golden], "golden_logprobs.npy: dtype f64 cannot be read by --logits"),
        (&["--probs", &st, "--tensor", "logits_bf16"], "tensor `logits_bf16`: dtype bf16 cannot be read by --probs"),
        (&["--logits", &st], "holds 2 tensors (`logits`, `logits_bf16`); choose one with --tensor"),
        (&["--logits", &st, "--tensor", "nope"], "no tensor `nope`; it holds `logits`, `logits_bf16`"),
        (&["--logits", &npy, "--tensor", "logits"], "selects a tensor of a .safetensors file"),
        (&["--logits", &npy, "--temperature", "nan"], "invalid value 'nan' for '--temperature"),
        (&["--logits", &npy, "--temperature", "-0.5"], "must be finite and at least 0"),
        (&["--logits", &npy, "--probs", &npy], "'--logits <FILE>' cannot be used with '--probs <FILE>'"),
        (&["--logits", &npy, "--top-p", "1.5"], "top_p"),
        (&["--logits", &npy, "--seed", "1,2"], "--seed has 2 values for 4 rows"),
        (&["--logprobs", &golden], "required arguments were not provided:\n  --seeded"),
    ];
    for (args, message) in cases {
        let run = cli(&[args, &["--backend", "cpu"][..]].concat());
        assert!(!run.ok, "{args:?} succeeded");
        assert!(run.stderr.contains(message), "{args:?}: expected {message:?} in\n{}", run.stderr);
    }
}
