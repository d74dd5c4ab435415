//! The `sampling-kernels sample` binary on the files of `examples/data/`: tokens from npy and
//! safetensors (f32 and bf16) on every backend present, histograms against the CPU oracle's
//! softmax, SGLang's seeded sampler on the golden vectors of `tests/data/` (with filters too), a
//! status on every line, and clean failures on bad input.

mod common;

use serde_json::Value;
use std::path::Path;
use std::process::Command;

struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn data(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data").join(name).display().to_string()
}

/// The seeded golden vectors' files (`tests/data/make_seeded_golden.py`).
fn golden(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name).display().to_string()
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
            assert_eq!(line["status"], "ok");
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

/// `--filter-path` forces each path its `--help` names, and each gives the CPU's tokens: the
/// shipped rows under top-p alone (which the routing gives the one-read path's cut), Qwen3's
/// top-k 20 with top-p 0.95, and min-p first with top-p (which it gives the filter kernels).
#[test]
fn every_filter_path_gives_the_cpus_tokens() {
    let help = cli(&["--help"]).stdout;
    let names = ["auto", "one-read", "filter-kernel", "portable"];
    assert!(names.iter().all(|n| help.contains(n)), "--help lists the paths: {help}");
    let npy = data("logits_small.npy");
    let settings: [&[&str]; 3] = [
        &["--top-p", "0.9"],
        &["--top-k", "20", "--top-p", "0.95"],
        &["--min-p", "0.1", "--top-p", "0.8", "--order", "min-p-first"],
    ];
    common::on("wgpu", "cli_filter_paths", common::wgpu(), |_| {
        for filters in settings {
            let base = [&["--logits", &npy, "--temperature", "1.3", "--seed", "5"][..], filters].concat();
            let want = tokens(&[&base[..], &["--backend", "cpu"]].concat());
            for name in names {
                let args = [&base[..], &["--backend", "wgpu", "--filter-path", name]].concat();
                assert_eq!(tokens(&args), want, "{args:?}");
            }
        }
    });
    let run = cli(&["--logits", &npy, "--top-p", "0.9", "--backend", "cuda", "--filter-path", "portable"]);
    assert!(!run.ok && run.stderr.contains("portable"), "{}", run.stderr);
}

/// A row's histogram from a `--draws` line: (token, count) for every token drawn.
fn counts(line: &Value) -> Vec<(u64, u64)> {
    let bins = line["tokens"].as_array().unwrap().iter();
    bins.map(|b| (b["token"].as_u64().unwrap(), b["count"].as_u64().unwrap())).filter(|&(_, c)| c > 0).collect()
}

/// The draws a device backend makes beside the oracle's in the histogram tests: at most this
/// share of them may differ from the oracle's tokens (each backend draws the same Philox numbers
/// through the same formulas, so only a near-tie that a driver's fused multiply-add flips can).
const DEVICE_MISMATCH: f64 = 0.001;

/// `args` (a `--draws` run) on `backend` and on the CPU oracle give the same histogram per row,
/// but for at most `DEVICE_MISMATCH` of the draws: the device's draws then follow whatever the
/// oracle's are shown to follow. Every device draw, those that differ included, lies on a token
/// the oracle gives a probability (inside the set, with filters).
fn same_draws_as_the_oracle(backend: &str, args: &[&str], draws: u64) {
    let on = |b: &str, more: &[&str]| lines(&[args, &["--draws", &draws.to_string(), "--backend", b], more].concat());
    for (device, oracle) in on(backend, &["--compare"]).iter().zip(on("cpu", &[])) {
        for bin in device["tokens"].as_array().unwrap() {
            let (count, prob) = (bin["count"].as_u64().unwrap(), bin["prob"].as_f64().unwrap());
            assert!(count == 0 || prob > 0.0, "{backend} {args:?}: token {} drawn outside the set", bin["token"]);
        }
        let (d, o) = (counts(device), counts(&oracle));
        let tokens: std::collections::BTreeSet<u64> = d.iter().chain(&o).map(|&(t, _)| t).collect();
        let count = |h: &[(u64, u64)], t: u64| h.iter().find(|&&(x, _)| x == t).map_or(0, |&(_, c)| c);
        // Each draw that differs moves one count out of one bin and into another.
        let moved: u64 = tokens.iter().map(|&t| count(&d, t).abs_diff(count(&o, t))).sum::<u64>() / 2;
        eprintln!("{backend} {args:?} row {}: {moved} of {draws} draws differ from the oracle's", device["row"]);
        assert!(
            moved as f64 <= DEVICE_MISMATCH * draws as f64,
            "{backend} row {}: {moved} draws differ",
            device["row"]
        );
    }
}

/// The oracle's draws follow softmax(l / T): 100,000 a row, total variation below 0.01. For these
/// rows the total variation of 100,000 true multinomial draws has mean 0.005 to 0.007 and standard
/// deviation 0.001 (simulated), so the limit fails a correct sampler with probability about 0.0015
/// for the file (0.0013 of it the nearly flat row 3); the seeds are fixed, so a run that passes
/// passes every time. Each device backend then draws the oracle's tokens (2,000 a row).
#[test]
fn histogram_matches_softmax() {
    let files = [(data("logits_small.npy"), None), (data("logits_small.safetensors"), Some("logits_bf16"))];
    let args = |(input, tensor): &(String, Option<&'static str>)| {
        let mut args = vec!["--logits".to_string(), input.clone(), "--seed".into(), "1".into()];
        args.extend(tensor.iter().flat_map(|t| ["--tensor".to_string(), t.to_string()]));
        args
    };
    common::on("cpu", "cli_histogram", common::cpu(), |_| {
        for file in &files {
            let args = args(file);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            for line in lines(&[&args[..], &["--draws", "100000", "--compare", "--backend", "cpu"]].concat()) {
                let tv = line["tv"].as_f64().unwrap();
                let counted: u64 = counts(&line).iter().map(|&(_, c)| c).sum();
                eprintln!("cpu {file:?} row {}: TV {tv:.5}", line["row"]);
                assert_eq!(counted, 100_000);
                assert!(tv < 0.01, "cpu row {}: TV {tv}", line["row"]);
            }
        }
    });
    common::on("wgpu", "cli_histogram", common::wgpu(), |_| {
        for file in &files {
            let args = args(file);
            same_draws_as_the_oracle("wgpu", &args.iter().map(String::as_str).collect::<Vec<_>>(), 2_000);
        }
    });
}

/// With filters, every draw lies in the set and the histogram follows the renormalized
/// distribution (the oracle's `--compare`), joint and top-k first. 10,000 draws over at most 6
/// tokens put the expected total variation near 0.01; the limit 0.04 is beyond 8 standard
/// deviations (the distribution itself is checked at 100,000 draws in `tests/filters.rs`). Each
/// device backend then draws the oracle's tokens (400 a row: every filtered draw on lavapipe
/// runs the one-read path's three launches, and 1,000 took a minute of the suite's ten).
#[test]
fn filtered_histogram_matches_the_set() {
    let input = data("logits_small.npy");
    let flags = |order: &str| format!("--seed 3 --top-k 6 --top-p 0.8 --min-p 0.02 --order {order}");
    common::on("cpu", "cli_filtered_histogram", common::cpu(), |_| {
        for order in ["joint", "top-k-first"] {
            let flags = flags(order) + " --draws 10000 --compare --backend cpu";
            let args: Vec<&str> = ["--logits", &input].into_iter().chain(flags.split(' ')).collect();
            for line in lines(&args) {
                let tv = line["tv"].as_f64().unwrap();
                for bin in line["tokens"].as_array().unwrap() {
                    let (count, prob) = (bin["count"].as_u64().unwrap(), bin["prob"].as_f64().unwrap());
                    assert!(count == 0 || prob > 0.0, "cpu {order}: token {} drawn outside the set", bin["token"]);
                }
                eprintln!("cpu {order} row {}: TV {tv:.5}", line["row"]);
                assert!(tv < 0.04, "cpu {order} row {}: TV {tv}", line["row"]);
            }
        }
    });
    common::on("wgpu", "cli_filtered_histogram", common::wgpu(), |_| {
        for order in ["joint", "top-k-first"] {
            let flags = flags(order);
            let args: Vec<&str> = ["--logits", &input].into_iter().chain(flags.split(' ')).collect();
            same_draws_as_the_oracle("wgpu", &args, 400);
        }
    });
}

#[test]
fn seeded_reproduces_golden_tokens() {
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(golden("seeded_golden.json")).unwrap()).unwrap();
    let list = |key: &str| meta[key].as_array().unwrap().iter().map(|v| v.to_string()).collect::<Vec<_>>().join(",");
    let expected = |key: &str| meta[key].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect::<Vec<_>>();
    let (seeds, positions) = (list("seeds"), list("positions"));
    let inputs = [
        ("--logprobs", golden("seeded_golden.npy"), expected("expected_tokens")),
        ("--probs", golden("seeded_golden_probs.npy"), expected("expected_tokens_from_probs")),
    ];
    on_backends("cli_seeded_golden", |backend| {
        for (flag, input, want) in &inputs {
            for mode in ["float64", "screened"] {
                let args =
                    [*flag, input.as_str(), "--seeded", "--mode", mode, "--seed", &seeds, "--position", &positions];
                assert_eq!(tokens(&[&args[..], &["--backend", backend]].concat()), *want, "{backend} {flag} {mode}");
            }
        }
    });
}

/// `--seeded` takes the filters, as the library does: top-k 1 gives each row's largest logit
/// (read here from the file, the lowest index among ties), and top-k 3 draws only among the three.
#[test]
fn seeded_rows_take_filters() {
    let npy = data("logits_small.npy");
    let logits: Vec<f32> = npyz::NpyFile::new(std::fs::File::open(&npy).unwrap()).unwrap().into_vec().unwrap();
    let argmax: Vec<u64> = logits
        .chunks(32)
        .map(|row| (0..32).fold(0, |best, j| if row[j] > row[best] { j } else { best }) as u64)
        .collect();
    on_backends("cli_seeded_filters", |backend| {
        let args = ["--logits", &npy, "--seeded", "--seed", "9", "--top-k", "1", "--backend", backend];
        assert_eq!(tokens(&args), argmax, "{backend}: seeded top-k 1");
        let args = ["--logits", &npy, "--seeded", "--top-k", "3", "--draws", "300", "--compare", "--backend", backend];
        for line in lines(&args) {
            let bins = line["tokens"].as_array().unwrap();
            // Bins list the tokens drawn and those expected at least once in 300 draws.
            let kept = bins.iter().filter(|b| b["prob"].as_f64().unwrap() > 0.0).count();
            assert!((1..=3).contains(&kept), "{backend} row {}: {kept} tokens kept", line["row"]);
            assert!(bins.iter().all(|b| b["count"] == 0 || b["prob"].as_f64().unwrap() > 0.0), "{backend}: {line}");
        }
    });
}

/// `--hash sorted-rank` gives SGLang's filtered tokens: the vector file's rows under Qwen3's
/// top-k 20 and top-p 0.95 (every row is given those filters and its own temperature, seed and
/// position; the rows the vectors define under them, from logits, are checked), and the default
/// hashing gives the vectors' vocabulary-id tokens there.
#[test]
fn seeded_hash_sorted_rank_gives_sglangs_tokens() {
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(golden("sglang_filtered.json")).unwrap()).unwrap();
    let cases = meta["cases"].as_array().unwrap();
    let list = |key: &str| cases.iter().map(|c| c[key].to_string()).collect::<Vec<_>>().join(",");
    let (temperatures, seeds, positions) = (list("temperature"), list("seed"), list("position"));
    let qwen3 =
        |c: &&Value| c["input"] == "logits" && c["top_k"] == 20 && c["top_p"].as_f64() == Some(0.949999988079071);
    let checked: Vec<&Value> = cases.iter().filter(qwen3).collect();
    assert!(checked.len() >= 4, "{} rows under Qwen3's filters", checked.len());
    let file = golden("sglang_filtered.npy");
    on_backends("cli_seeded_sorted_rank", |backend| {
        for (hash, key) in [("sorted-rank", "token"), ("vocab-id", "id_token")] {
            let args = [
                "--logits",
                &file,
                "--seeded",
                "--hash",
                hash,
                "--temperature",
                &temperatures,
                "--seed",
                &seeds,
                "--position",
                &positions,
                "--top-k",
                "20",
                "--top-p",
                "0.95",
                "--backend",
                backend,
            ];
            let got = lines(&args);
            for c in &checked {
                let line = &got[c["row"].as_u64().unwrap() as usize];
                assert_eq!(line["token"], c[key], "{backend} --hash {hash}: {line}");
                assert_eq!(line["status"], "ok", "{backend} --hash {hash}: {line}");
            }
        }
    });
}

/// A row with nothing valid to sample says so instead of passing its token 0 off as a draw.
#[test]
fn rows_of_nan_say_nothing_to_sample() {
    let nan = scratch_npy("nan.npy", &[2, 8], f32::NAN);
    on_backends("cli_nothing_to_sample", |backend| {
        for line in lines(&["--logits", &nan, "--return-logprob", "--backend", backend]) {
            assert_eq!(line["status"], "nothing_to_sample", "{backend}: {line}");
            assert_eq!(line["token"], 0, "{backend}: {line}");
            assert!(line["logprob"].is_null(), "{backend}: {line}");
        }
        for line in lines(&["--logits", &nan, "--draws", "10", "--backend", backend]) {
            assert_eq!(line["nothing_to_sample"], 10, "{backend}: {line}");
        }
    });
}

/// Writes an `.npy` of `shape` filled with `value` into the test's scratch folder.
fn scratch_npy<T: npyz::AutoSerialize + Copy>(name: &str, shape: &[u64], value: T) -> String {
    scratch_npy_of(name, shape, std::iter::repeat_n(value, shape.iter().product::<u64>() as usize))
}

/// Writes an `.npy` of `shape` holding `values` (C order) into the test's scratch folder.
fn scratch_npy_of<T: npyz::AutoSerialize>(name: &str, shape: &[u64], values: impl IntoIterator<Item = T>) -> String {
    use npyz::WriterBuilder;
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let file = std::fs::File::create(&path).unwrap();
    let mut writer = npyz::WriteOptions::new().default_dtype().shape(shape).writer(file).begin_nd().unwrap();
    writer.extend(values).unwrap();
    writer.finish().unwrap();
    path.display().to_string()
}

/// Writes `text` into the test's scratch folder.
fn scratch_text(name: &str, text: &str) -> String {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// The logits stage's flags replay an engine's inputs from files, on the CPU (which `--backend
/// auto` takes for them), and the greedy tokens are those of the stage's formulas applied here
/// by hand to the shipped 4 x 32 logits (docs/logits-stage.md, vLLM's order): a logit bias per
/// row; a bitmask (one row allowing two tokens, one nothing); repetition 1.5 over prompt and
/// output, then frequency 0.5 and presence 0.25 over the output, on each row's own largest
/// token; banned ids. wgpu reads the bitmask with the logits, giving the CPU's lines, and
/// refuses the logit bias, naming it; `--help` gives each file's format.
#[test]
fn logits_stage_flags_replay_an_engines_inputs() {
    let npy = data("logits_small.npy");
    let logits: Vec<f32> = npyz::NpyFile::new(std::fs::File::open(&npy).unwrap()).unwrap().into_vec().unwrap();
    let rows: Vec<&[f32]> = logits.chunks(32).collect();
    let greedy = |row: &[f32]| (0..row.len()).fold(0, |best, j| if row[j] > row[best] { j } else { best }) as u64;
    let run = |flags: &[&str]| tokens(&[&["--logits", &npy, "--temperature", "0"][..], flags].concat());
    let top: Vec<u64> = rows.iter().map(|r| greedy(r)).collect();
    let bias = scratch_text("bias.json", r#"[{"3": 50.0}, {}, {"31": 50.0, "0": -1000.0}, {"7": -0.0}]"#);
    assert_eq!(run(&["--logit-bias", &bias]), [3, top[1], 31, top[3]]);
    let everything = scratch_text("bias_all.json", r#"{"12": 1000.0}"#);
    assert_eq!(run(&["--logit-bias", &everything]), [12; 4]);
    // Row 0 allows tokens 1 and 2, row 1 nothing, rows 2 and 3 all (-1: every bit).
    let mask = scratch_npy_of("mask.npy", &[4, 1], [0b110i32, 0, -1, -1]);
    let lines = lines(&["--logits", &npy, "--temperature", "0", "--bitmask", &mask]);
    let pair = if rows[0][2] > rows[0][1] { 2 } else { 1 };
    assert_eq!(lines[0]["token"], pair);
    assert_eq!((&lines[1]["token"], &lines[1]["status"]), (&Value::from(0), &Value::from("nothing_to_sample")));
    assert_eq!((lines[2]["token"].as_u64(), lines[3]["token"].as_u64()), (Some(top[2]), Some(top[3])));
    // Each row's largest token was in its prompt and twice in its output, and token 0 is banned.
    let ids: Vec<String> =
        top.iter().map(|t| format!(r#"{{"prompt": [{t}], "output": [{t}, {t}], "banned": [0]}}"#)).collect();
    let ids = scratch_text("ids.json", &format!("[{}]", ids.join(", ")));
    let penalties = ["--repetition-penalty", "1.5", "--frequency-penalty", "0.5", "--presence-penalty", "0.25"];
    let want: Vec<u64> = rows
        .iter()
        .zip(&top)
        .map(|(row, &t)| {
            let mut x = row.to_vec();
            let v = x[t as usize];
            x[t as usize] = (if v > 0.0 { v / 1.5 } else { v * 1.5 }) - 0.5 * 2.0 - 0.25;
            x[0] = f32::NEG_INFINITY;
            greedy(&x)
        })
        .collect();
    assert_eq!(run(&[&penalties[..], &["--token-ids", &ids]].concat()), want);
    // Banning each row's largest token leaves its second.
    let banned: Vec<String> = top.iter().map(|t| format!(r#"{{"banned": [{t}]}}"#)).collect();
    let banned = scratch_text("banned.json", &format!("[{}]", banned.join(", ")));
    let second: Vec<u64> = rows
        .iter()
        .zip(&top)
        .map(|(row, &t)| {
            let mut x = row.to_vec();
            x[t as usize] = f32::NEG_INFINITY;
            greedy(&x)
        })
        .collect();
    assert_eq!(run(&["--token-ids", &banned]), second);
    common::on("wgpu", "cli_wgpu_reads_the_bitmask", common::wgpu(), |_| {
        for extra in [&[][..], &["--nan-as-finite"], &["--temperature", "0.7", "--top-p", "0.9", "--seed", "5"]] {
            let masked = [&["--logits", &npy, "--bitmask", &mask][..], extra].concat();
            let on = |backend: &str| cli(&[&masked[..], &["--backend", backend]].concat()).stdout;
            assert_eq!(on("wgpu"), on("cpu"), "{extra:?}");
        }
        let refused = cli(&["--logits", &npy, "--logit-bias", &bias, "--backend", "wgpu"]);
        assert!(!refused.ok && refused.stderr.contains("logit bias"), "{}", refused.stderr);
    });
    let help = cli(&["--help"]).stdout;
    assert!(["--logit-bias", "--bitmask", "--token-ids", "--nan-as-finite", "int32"].iter().all(|f| help.contains(f)));
    // The penalties need the tokens they count.
    assert!(!cli(&["--logits", &npy, "--frequency-penalty", "0.5"]).ok);
}

#[test]
fn bad_input_fails_with_a_message() {
    let (npy, st, golden) = (data("logits_small.npy"), data("logits_small.safetensors"), golden("seeded_golden.npy"));
    let missing = data("missing.npy");
    let rank3 = scratch_npy("rank3.npy", &[2, 2, 8], 1f32);
    let ints = scratch_npy("ints.npy", &[2, 8], 1i32);
    let cases: [(&[&str], &str); 17] = [
        (&["--logits", &missing], "missing.npy: cannot read"),
        (&["--logits", &rank3], "rank3.npy: rank 3 (shape [2, 2, 8]); expected 1 (one row) or 2"),
        (&["--logits", &ints], "ints.npy: dtype '<i4' is not f16, f32 or f64"),
        (&["--logits", &golden], "seeded_golden.npy: dtype f64 cannot be read by --logits"),
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
        (&["--probs", &npy, "--mode", "screened"], "required arguments were not provided:\n  --seeded"),
        (&["--logprobs", &golden, "--seeded", "--top-k", "3"], "'--logprobs <FILE>' cannot be used with '--top-k <K>'"),
        (&["--logits", &npy, "--hash", "sorted-rank"], "required arguments were not provided:\n  --seeded"),
    ];
    for (args, message) in cases {
        let run = cli(&[args, &["--backend", "cpu"][..]].concat());
        assert!(!run.ok, "{args:?} succeeded");
        assert!(run.stderr.contains(message), "{args:?}: expected {message:?} in\n{}", run.stderr);
    }
}

/// `--top-logprobs`, `--logprob-ids` and `--logprobs-mode` print what the oracle gives for each
/// row's token, read back here from the JSON lines (`null` for -inf); `--backend auto` computes
/// them on the CPU; a requested id outside the vocabulary and a count above the limit fail by name.
#[test]
fn logprobs_are_printed() {
    use sampling_kernels::reference::logprobs::{rank, top, values};
    use sampling_kernels::{LogprobsMode, RowParams};
    let npy = data("logits_small.npy");
    let logits: Vec<f32> = npyz::NpyFile::new(std::fs::File::open(&npy).unwrap()).unwrap().into_vec().unwrap();
    let ids_file = |name: &str, text: &str| {
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let ids = ids_file("logprob_ids.txt", "3,31\n\n5\n7, 7,0\n");
    let want_ids: [&[u32]; 4] = [&[3, 31], &[], &[5], &[7, 7, 0]];
    let value = |v: &Value| v.as_f64().map_or(f32::NEG_INFINITY, |x| x as f32);
    for (mode, filters) in [("raw_logprobs", &[][..]), ("processed_logprobs", &["--top-k", "4"][..]), ("sglang", &[])] {
        let args = [
            &["--logits", &npy, "--temperature", "0.8,0,1.5,0.8", "--seed", "3", "--top-logprobs", "5,1,0,32"][..],
            &["--logprob-ids", &ids, "--logprobs-mode", mode, "--backend", "auto"],
            filters,
        ]
        .concat();
        let run = cli(&args);
        assert!(run.ok && run.stderr.contains("backend: cpu"), "{args:?}: {}", run.stderr);
        let temperatures = [0.8, 0.0, 1.5, 0.8];
        for (r, line) in run.stdout.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).enumerate() {
            let lp = &line["logprobs"];
            assert_eq!(lp["mode"], mode);
            let row = RowParams::new(temperatures[r], 3, 0);
            let row = if filters.is_empty() { row } else { row.with_top_k(4) };
            let x: Vec<f64> = logits[r * 32..(r + 1) * 32].iter().map(|&v| v as f64).collect();
            let v = values(LogprobsMode::from_name(mode).unwrap(), &x, &x, &row);
            let token = line["token"].as_u64().unwrap() as usize;
            assert_eq!(
                (value(&lp["sampled"]), lp["rank"].as_u64().unwrap() as u32),
                (v[token], rank(&v, token)),
                "{mode} row {r}"
            );
            let entries = |key: &str| -> Vec<(u32, f32)> {
                let list = lp[key].as_array().unwrap();
                list.iter().map(|e| (e["token"].as_u64().unwrap() as u32, value(&e["logprob"]))).collect()
            };
            assert_eq!(entries("top"), top(&v, [5, 1, 0, 32][r]), "{mode} row {r}");
            let requested: Vec<(u32, f32)> = want_ids[r].iter().map(|&id| (id, v[id as usize])).collect();
            assert_eq!(entries("requested"), requested, "{mode} row {r}");
        }
    }
    let bad_id = ids_file("logprob_ids_bad.txt", "1\n2\n3\n32\n");
    let cases: [(&[&str], &str); 3] = [
        (&["--logprob-ids", &bad_id], "row 3: logprob_ids = 32: must be below the vocabulary"),
        (&["--top-logprobs", "257"], "n_max = 257: must be at most MAX_TOP_LOGPROBS"),
        (&["--logprobs-mode", "raw"], "one of raw_logprobs, raw_logits, processed_logprobs, processed_logits, sglang"),
    ];
    for (args, message) in cases {
        let run = cli(&[&["--logits", &npy, "--backend", "cpu"][..], args].concat());
        assert!(!run.ok && run.stderr.contains(message), "{args:?}: expected {message:?} in\n{}", run.stderr);
    }
    common::on("wgpu", "cli_wgpu_refuses_logprobs", common::wgpu(), |_| {
        let run = cli(&["--logits", &npy, "--top-logprobs", "2", "--backend", "wgpu"]);
        assert!(!run.ok && run.stderr.contains("do not compute log-probabilities (raw_logprobs)"), "{}", run.stderr);
    });
}
