//! The SGLang module against SGLang's documented rules (docs/SEMANTICS.md, "Parameters of a row" and
//! "SGLang's batch-level routing", and the seed claim check), and the `sampling-audit` binary on
//! the shipped examples and on bad input.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Output};

use sampling_kernels::sglang::{
    path_for_batch, row_path, EmptyBatch, Endpoint, GenerationConfig, NormalizedParams, ParamError, Path,
    SamplingDefaults, SamplingParams, ServerDefaults, Simulation, TraceErrorKind, TraceStep, TOP_K_ALL,
};
use serde_json::json;

/// Qwen3's generation_config.json sampling keys.
fn qwen3() -> GenerationConfig {
    serde_json::from_value(json!({"temperature": 0.6, "top_k": 20, "top_p": 0.95, "do_sample": true})).unwrap()
}

fn server(generation_config: Option<GenerationConfig>) -> ServerDefaults {
    ServerDefaults { generation_config, ..ServerDefaults::default() }
}

fn params(body: serde_json::Value) -> SamplingParams {
    serde_json::from_value(body).unwrap()
}

/// A request through the merge and SGLang's normalization.
fn row(server: &ServerDefaults, endpoint: Endpoint, body: serde_json::Value) -> NormalizedParams {
    server.effective(endpoint, &params(body)).normalize().unwrap()
}

fn path(server: &ServerDefaults, endpoint: Endpoint, body: serde_json::Value) -> Path {
    path_for_batch(&[row(server, endpoint, body)], false).unwrap()
}

#[test]
fn qwen3_generation_config_filters_chat_but_not_generate() {
    let server = server(Some(qwen3()));
    assert_eq!(path(&server, Endpoint::Chat, json!({})), Path::Filtered);
    assert_eq!(path(&server, Endpoint::Responses, json!({})), Path::Filtered);
    assert_eq!(path(&server, Endpoint::Generate, json!({"temperature": 0.6})), Path::Gumbel);
    assert_eq!(path(&server, Endpoint::Completions, json!({})), Path::Gumbel);
}

#[test]
fn chat_takes_generation_config_values_under_the_requests_own() {
    let server = server(Some(qwen3()));
    let effective = server.effective(Endpoint::Chat, &params(json!({"top_p": 1.0, "top_k": -1})));
    assert_eq!((effective.temperature, effective.top_p, effective.top_k), (Some(0.6), Some(1.0), Some(-1)));
    assert_eq!(path(&server, Endpoint::Chat, json!({"top_p": 1.0, "top_k": -1})), Path::Gumbel);
}

#[test]
fn openai_sampling_defaults_or_no_generation_config_keep_chat_fast() {
    assert_eq!(path(&server(None), Endpoint::Chat, json!({})), Path::Gumbel);
    let openai = ServerDefaults { sampling_defaults: SamplingDefaults::Openai, ..server(Some(qwen3())) };
    assert_eq!(path(&openai, Endpoint::Chat, json!({})), Path::Gumbel);
}

#[test]
fn preferred_params_fill_generate_but_not_what_an_openai_endpoint_resolved() {
    let preferred = ServerDefaults { preferred: Some(params(json!({"top_k": 20, "seed": 7}))), ..server(None) };
    assert_eq!(path(&preferred, Endpoint::Generate, json!({})), Path::Filtered);
    assert_eq!(path(&preferred, Endpoint::Generate, json!({"top_k": -1})), Path::Gumbel);
    assert_eq!(path(&preferred, Endpoint::Chat, json!({})), Path::Gumbel);
    assert_eq!(preferred.effective(Endpoint::Chat, &params(json!({}))).seed, Some(7));
}

#[test]
fn normalization_makes_low_temperature_greedy_and_minus_one_the_whole_vocabulary() {
    let greedy = params(json!({"temperature": 0.0})).normalize().unwrap();
    assert_eq!((greedy.temperature(), greedy.top_k()), (1.0, 1));
    let almost = params(json!({"temperature": 0.9e-6})).normalize().unwrap();
    assert_eq!(almost.top_k(), 1);
    let sampled = params(json!({"temperature": 1e-6})).normalize().unwrap();
    assert_eq!((sampled.temperature(), sampled.top_k()), (1e-6, TOP_K_ALL));
    let defaults = SamplingParams::default().normalize().unwrap();
    assert_eq!(
        (defaults.temperature(), defaults.top_p(), defaults.top_k(), defaults.min_p()),
        (1.0, 1.0, TOP_K_ALL, 0.0)
    );
}

#[test]
fn one_greedy_request_among_sampled_ones_filters_the_batch() {
    let server = server(None);
    let sampled = row(&server, Endpoint::Chat, json!({"temperature": 0.7}));
    let greedy = row(&server, Endpoint::Chat, json!({"temperature": 0}));
    assert_eq!(path_for_batch(&[greedy, greedy], false), Ok(Path::Greedy));
    assert_eq!(path_for_batch(&[sampled, sampled], false), Ok(Path::Gumbel));
    assert_eq!(path_for_batch(&[sampled, greedy, sampled], false), Ok(Path::Filtered));
    assert_eq!((row_path(&sampled, false), row_path(&greedy, false)), (Path::Gumbel, Path::Greedy));
}

#[test]
fn any_filter_flag_filters_the_batch() {
    let plain = params(json!({})).normalize().unwrap();
    for body in [json!({"top_p": 0.9}), json!({"top_k": 50}), json!({"min_p": 0.1})] {
        let filtered = params(body).normalize().unwrap();
        assert_eq!(path_for_batch(&[plain, filtered], false), Ok(Path::Filtered));
        assert_eq!(row_path(&filtered, false), Path::Filtered);
    }
    let huge_k = params(json!({"top_k": TOP_K_ALL})).normalize().unwrap();
    assert_eq!(path_for_batch(&[plain, huge_k], false), Ok(Path::Gumbel));
}

#[test]
fn deterministic_inference_replaces_only_the_gumbel_path() {
    let plain = params(json!({})).normalize().unwrap();
    let greedy = params(json!({"temperature": 0})).normalize().unwrap();
    let top_p = params(json!({"top_p": 0.5})).normalize().unwrap();
    assert_eq!(path_for_batch(&[plain], true), Ok(Path::Deterministic));
    assert_eq!(path_for_batch(&[greedy], true), Ok(Path::Greedy));
    assert_eq!(path_for_batch(&[plain, top_p], true), Ok(Path::Filtered));
    assert_eq!(row_path(&plain, true), Path::Deterministic);
}

#[test]
fn empty_batch_is_an_error() {
    assert_eq!(path_for_batch(&[], false), Err(EmptyBatch));
}

fn step(step: u64, arrive: &[&str], finish: &[&str]) -> TraceStep {
    serde_json::from_value(json!({"step": step, "arrive": arrive, "finish": finish})).unwrap()
}

#[test]
fn finished_top_p_request_keeps_the_running_batch_filtered_until_it_empties() {
    let rows: HashMap<String, NormalizedParams> =
        [("a", json!({})), ("b", json!({})), ("p", json!({"top_p": 0.95})), ("c", json!({}))]
            .into_iter()
            .map(|(id, body)| (id.to_owned(), params(body).normalize().unwrap()))
            .collect();
    let trace = [
        step(1, &["a"], &[]),
        step(2, &["p"], &[]),
        step(3, &["b"], &["p"]),
        step(4, &[], &["a"]),
        step(5, &[], &["b"]),
        step(6, &[], &[]),
        step(7, &["c"], &[]),
    ];
    let simulation = Simulation::run(&rows, &trace, false).unwrap();
    let sglang: Vec<(u64, Path)> = simulation.steps.iter().map(|s| (s.step, s.sglang)).collect();
    use Path::{Filtered, Gumbel};
    assert_eq!(sglang, [(1, Gumbel), (2, Filtered), (3, Filtered), (4, Filtered), (5, Filtered), (7, Gumbel)]);
    assert!(simulation.steps[3].rows.iter().all(|(_, path)| *path == Gumbel), "p left before step 4");

    let shares = simulation.shares();
    assert_eq!((shares.sglang_steps.fast, shares.sglang_steps.total), (2, 6));
    // Row-steps: 1 + 2 + 3 + 2 + 1 + 1 = 10; per row only p's two steps are filtered.
    assert_eq!((shares.sglang_rows.fast, shares.sglang_rows.total), (2, 10));
    assert_eq!((shares.per_row_rows.fast, shares.per_row_rows.total), (8, 10));
}

#[test]
fn bad_traces_are_errors_that_name_the_field() {
    let rows: HashMap<String, NormalizedParams> =
        [("a".to_owned(), SamplingParams::default().normalize().unwrap())].into_iter().collect();
    let cases = [
        (vec![step(1, &["x"], &[])], TraceErrorKind::Unknown("x".into())),
        (vec![step(1, &["a", "a"], &[])], TraceErrorKind::AlreadyRunning("a".into())),
        (vec![step(1, &["a"], &["a"]), step(2, &[], &["a"])], TraceErrorKind::NotRunning("a".into())),
        (vec![step(1, &[], &[]), step(3, &[], &[])], TraceErrorKind::StepOrder { step: 3, previous: 1 }),
    ];
    for (trace, kind) in cases {
        let error = Simulation::run(&rows, &trace, false).unwrap_err();
        assert_eq!((error.index, &error.kind), (trace.len() - 1, &kind));
    }
    let error = serde_json::from_value::<TraceStep>(json!({"step": 1, "arrive": "a"})).unwrap_err();
    assert!(error.to_string().contains("arrive"), "{error}");
}

#[test]
fn sglang_rejects_out_of_range_values_naming_the_field() {
    let cases = [
        (json!({"temperature": -1.0}), "temperature"),
        (json!({"top_p": 0.0}), "top_p"),
        (json!({"top_p": 1.5}), "top_p"),
        (json!({"top_k": 0}), "top_k"),
        (json!({"top_k": -2}), "top_k"),
        (json!({"min_p": 1.5}), "min_p"),
        (json!({"min_p": -0.1}), "min_p"),
    ];
    for (body, field) in cases {
        let error = params(body.clone()).normalize().unwrap_err();
        assert_eq!(error.field(), field, "{body}");
        assert!(error.to_string().contains(field), "{error}");
    }
}

#[test]
fn non_finite_values_are_rejected() {
    for temperature in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let error = SamplingParams { temperature: Some(temperature), ..Default::default() }.normalize().unwrap_err();
        assert!(matches!(error, ParamError::Temperature(_)), "{error}");
        assert!(error.to_string().contains("non-negative finite"), "{error}");
    }
    for top_p in [f64::NAN, f64::INFINITY] {
        let error = SamplingParams { top_p: Some(top_p), ..Default::default() }.normalize().unwrap_err();
        assert_eq!(error.field(), "top_p");
    }
    let error = SamplingParams { min_p: Some(f64::NAN), ..Default::default() }.normalize().unwrap_err();
    assert_eq!(error.field(), "min_p");
}

#[test]
fn greedy_normalization_comes_before_the_top_k_check() {
    // SGLang calls normalize() before verify(), so a greedy request's top_k is 1 when checked.
    let greedy = params(json!({"temperature": 0, "top_k": 0})).normalize().unwrap();
    assert_eq!(greedy.top_k(), 1);
}

#[test]
fn wrong_json_types_name_the_field() {
    let error = Endpoint::Generate.sampling_params(&json!({"sampling_params": {"top_k": "many"}})).unwrap_err();
    assert_eq!(error.field, "body.sampling_params.top_k");
    let error = Endpoint::Chat.sampling_params(&json!({"temperature": [1]})).unwrap_err();
    assert_eq!(error.field, "body.temperature");
    let ignored = Endpoint::Chat.sampling_params(&json!({"messages": [], "temperature": null})).unwrap();
    assert_eq!(ignored, SamplingParams::default());
}

// --- the `sampling-audit` binary ---

fn example(name: &str) -> String {
    format!("{}/examples/audit/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn audit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sampling-audit")).args(args).output().expect("sampling-audit runs")
}

fn temp_file(name: &str, contents: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("sampling-audit-{}-{name}", std::process::id()));
    std::fs::write(&path, contents).unwrap();
    path
}

#[test]
fn audit_prints_paths_and_both_shares_on_the_examples() {
    let requests = example("requests.jsonl");
    let (config, trace) = (example("generation_config.json"), example("trace.jsonl"));
    let out = audit(&["--generation-config", &config, "--requests", &requests, "--trace", &trace]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let line = |id: &str| stdout.lines().find(|l| l.starts_with(id)).unwrap_or_default().to_owned();
    assert!(line("chat-plain ").ends_with("filtered"), "{stdout}");
    assert!(line("generate-plain ").ends_with("gumbel"), "{stdout}");
    assert!(line("chat-explicit ").ends_with("gumbel"), "{stdout}");
    assert!(line("chat-greedy ").ends_with("greedy"), "{stdout}");
    assert!(stdout.contains("SGLang, decode steps:"), "{stdout}");
    assert!(stdout.contains("SGLang, row-steps:"), "{stdout}");
    assert!(stdout.contains("per-row routing, row-steps:"), "{stdout}");
}

/// Under deterministic inference, the example trace's seeded requests that a filtered batch
/// mate (chat-plain at steps 3 to 5, whose flag sticks until the batch empties after step 11;
/// completions-min-p at steps 15 and 16, sticking to step 18) sends through SGLang's filtered
/// function: generate-plain at steps 3 to 8, chat-explicit at 3 to 10, completions-plain at 15
/// to 18, so 6 + 8 + 4 = 18 row-steps (counted by hand from the trace). chat-greedy is greedy,
/// whose token the filtered path does not change.
#[test]
fn audit_lists_the_requests_whose_token_depends_on_their_batch_mates() {
    let requests = example("requests.jsonl");
    let (config, trace) = (example("generation_config.json"), example("trace.jsonl"));
    let args = ["--generation-config", &config, "--requests", &requests, "--trace", &trace];
    let out = audit(&[&args[..], &["--deterministic"]].concat());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let total: usize =
        stdout.lines().filter(|l| l.trim_start().starts_with("step ")).map(|l| l.split_whitespace().count() - 6).sum();
    assert!(stdout.contains(&format!("row-steps: 18/{total} ")), "{stdout}");
    assert!(stdout.contains("requests: generate-plain chat-explicit completions-plain\n"), "{stdout}");
    let plain = audit(&args);
    assert!(!String::from_utf8_lossy(&plain.stdout).contains("depends on their batch mates"));
}

#[test]
fn audit_reports_file_line_and_field_of_a_bad_request() {
    let good = r#"{"id": "a", "endpoint": "chat", "body": {}}"#;
    let bad_value = temp_file(
        "value.jsonl",
        &format!("{good}\n\n{}\n", r#"{"id": "b", "endpoint": "chat", "body": {"top_p": 0}}"#),
    );
    let bad_type = temp_file(
        "type.jsonl",
        &format!("{good}\n{}\n", r#"{"id": "b", "endpoint": "generate", "body": {"sampling_params": {"top_k": "x"}}}"#),
    );
    let bad_json = temp_file("syntax.jsonl", &format!("{good}\n{{\"id\": \"b\",\n"));
    for (file, expected) in [(&bad_value, ":3:"), (&bad_type, ":2:"), (&bad_json, ":2:")] {
        let out = audit(&["--requests", file.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains(&format!("{}{expected}", file.display())), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let stderr = String::from_utf8_lossy(&audit(&["--requests", bad_value.to_str().unwrap()]).stderr).into_owned();
    assert!(stderr.contains("top_p"), "{stderr}");
    let stderr = String::from_utf8_lossy(&audit(&["--requests", bad_type.to_str().unwrap()]).stderr).into_owned();
    assert!(stderr.contains("body.sampling_params.top_k"), "{stderr}");
    for file in [bad_value, bad_type, bad_json] {
        std::fs::remove_file(file).unwrap();
    }
}

#[test]
fn audit_reports_the_line_of_a_bad_trace_step() {
    let trace = temp_file(
        "trace.jsonl",
        "{\"step\": 1, \"arrive\": [\"chat-plain\"]}\n{\"step\": 2, \"finish\": [\"nobody\"]}\n",
    );
    let out = audit(&["--requests", &example("requests.jsonl"), "--trace", trace.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains(&format!("{}:2:", trace.display())) && stderr.contains("finish"), "{stderr}");
    std::fs::remove_file(trace).unwrap();
}
