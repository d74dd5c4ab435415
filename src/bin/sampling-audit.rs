//! `sampling-audit`: which sampler path SGLang v0.5.20 takes for your traffic, and what per-row
//! routing would take instead.
//!
//! Reads request bodies as your clients send them (JSON lines), the model's
//! `generation_config.json` and the server's flags; prints each request's effective parameters
//! and path, the path of all requests as one batch, and, given a trace of decode steps, the share
//! of steps and row-steps SGLang runs on its fast path against per-row routing's share.
//! Every bad input is reported with its file, line and field, and a non-zero exit.

use std::collections::HashMap;
use std::fs;
use std::path::{Path as FilePath, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use sampling_kernels::sglang::{
    path_for_batch, row_path, FieldError, GenerationConfig, NormalizedParams, Request, SamplingDefaults,
    SamplingParams, ServerDefaults, Simulation, TraceStep,
};
use serde_json::Value;

#[derive(Parser)]
#[command(version, about = "Which sampler path SGLang takes for a set of requests, against per-row routing")]
struct Args {
    /// The model's generation_config.json (absent: the model ships none).
    #[arg(long, value_name = "FILE")]
    generation_config: Option<PathBuf>,
    /// Requests, one JSON object a line: `{"id": ..., "endpoint": "chat"|"responses"|"completions"|"generate", "body": {...}}`.
    #[arg(long, value_name = "FILE.jsonl")]
    requests: PathBuf,
    /// Decode steps, one JSON object a line: `{"step": N, "arrive": [ids], "finish": [ids]}`.
    #[arg(long, value_name = "FILE.jsonl")]
    trace: Option<PathBuf>,
    /// SGLang's --sampling-defaults: `model` or `openai`.
    #[arg(long, value_name = "model|openai", default_value = "model")]
    sampling_defaults: SamplingDefaults,
    /// The server runs with --enable-deterministic-inference.
    #[arg(long)]
    deterministic: bool,
    /// SGLang's --preferred-sampling-params, as JSON.
    #[arg(long, value_name = "JSON")]
    preferred_sampling_params: Option<String>,
}

/// An input the audit cannot use, with where it was found.
#[derive(Debug, thiserror::Error)]
enum AuditError {
    #[error("{file}: {source}")]
    Read { file: String, source: std::io::Error },
    /// `line` is `None` for inputs that are one JSON document (a file or an argument).
    #[error("{place}: {message}", place = match line { Some(line) => format!("{file}:{line}"), None => file.clone() })]
    Input { file: String, line: Option<usize>, message: String },
}

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("sampling-audit: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), AuditError> {
    let server = ServerDefaults {
        sampling_defaults: args.sampling_defaults,
        generation_config: args.generation_config.as_deref().map(read_document::<GenerationConfig>).transpose()?,
        preferred: args
            .preferred_sampling_params
            .as_deref()
            .map(|text| {
                parse::<SamplingParams>(text).map_err(|message| input("--preferred-sampling-params", None, message))
            })
            .transpose()?,
    };
    let requests = read_lines::<Request>(&args.requests)?;

    println!(
        "{}",
        table_row(["request", "endpoint", "temperature", "top_p", "top_k", "min_p", "path"].map(String::from))
    );
    let mut normalized: HashMap<String, NormalizedParams> = HashMap::new();
    let mut batch = Vec::with_capacity(requests.len());
    for (line, request) in &requests {
        let fail = |message: String| input(&display(&args.requests), Some(*line), message);
        let effective = server.effective(request.endpoint, &request.params);
        let row = effective.normalize().map_err(|e| fail(e.to_string()))?;
        if normalized.insert(request.id.clone(), row).is_some() {
            return Err(fail(format!("`id`: `{}` appears twice", request.id)));
        }
        println!(
            "{}",
            table_row([
                request.id.clone(),
                request.endpoint.to_string(),
                shown(effective.temperature),
                shown(effective.top_p),
                shown(effective.top_k),
                shown(effective.min_p),
                row_path(&row, args.deterministic).to_string(),
            ])
        );
        batch.push(row);
    }
    match path_for_batch(&batch, args.deterministic) {
        Ok(path) => println!("\nSGLang path for all {} requests in one batch: {path}", batch.len()),
        Err(empty) => println!("\nno requests: {empty}"),
    }

    let Some(trace_file) = &args.trace else { return Ok(()) };
    let (line_numbers, steps): (Vec<usize>, Vec<TraceStep>) = read_lines(trace_file)?.into_iter().unzip();
    let simulation = Simulation::run(&normalized, &steps, args.deterministic)
        .map_err(|e| input(&display(trace_file), line_numbers.get(e.index).copied(), e.kind.to_string()))?;

    println!("\ntrace {}:", display(trace_file));
    for step in &simulation.steps {
        let rows: Vec<String> = step.rows.iter().map(|(id, path)| format!("{id}={path}")).collect();
        println!("  step {:>4}  SGLang {:<13}  per row: {}", step.step, step.sglang, rows.join(" "));
    }
    let shares = simulation.shares();
    println!("\nfast path (greedy or gumbel):");
    println!("  SGLang, decode steps:      {}", shares.sglang_steps);
    println!("  SGLang, row-steps:         {}", shares.sglang_rows);
    println!("  per-row routing, row-steps: {}", shares.per_row_rows);
    if args.deterministic {
        let dependence = simulation.batch_dependence();
        let share = 100.0 * dependence.rows as f64 / dependence.total.max(1) as f64;
        println!(
            "\nseeded requests whose SGLang token depends on their batch mates (sent through the filtered function):"
        );
        println!("  row-steps: {}/{} ({share:.1}%); per-row routing: 0", dependence.rows, dependence.total);
        println!(
            "  requests: {}",
            if dependence.requests.is_empty() { "none".into() } else { dependence.requests.join(" ") }
        );
    }
    Ok(())
}

/// One line of the request table: the header and every request go through it, so columns line up.
fn table_row([id, endpoint, temperature, top_p, top_k, min_p, path]: [String; 7]) -> String {
    format!("{id:<20} {endpoint:<11} {temperature:>11} {top_p:>6} {top_k:>6} {min_p:>6}  {path}")
}

fn shown<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn display(file: &FilePath) -> String {
    file.display().to_string()
}

fn input(file: &str, line: Option<usize>, message: String) -> AuditError {
    AuditError::Input { file: file.to_owned(), line, message }
}

/// One JSON document as `T`; the message names the field, or the column of a syntax error.
fn parse<T: TryFrom<Value, Error = FieldError>>(text: &str) -> Result<T, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| syntax(&e))?;
    T::try_from(value).map_err(|e| e.to_string())
}

/// serde_json's message without its " at line L column C", which means little inside one line.
fn syntax(error: &serde_json::Error) -> String {
    let text = error.to_string();
    let position = format!(" at line {} column {}", error.line(), error.column());
    match text.strip_suffix(&position) {
        Some(message) => format!("invalid JSON at column {}: {message}", error.column()),
        None => format!("invalid JSON: {text}"),
    }
}

fn read(file: &FilePath) -> Result<String, AuditError> {
    fs::read_to_string(file).map_err(|source| AuditError::Read { file: display(file), source })
}

fn read_document<T: TryFrom<Value, Error = FieldError>>(file: &FilePath) -> Result<T, AuditError> {
    let text = read(file)?;
    let value: Value = serde_json::from_str(&text).map_err(|e| input(&display(file), Some(e.line()), syntax(&e)))?;
    T::try_from(value).map_err(|e| input(&display(file), None, e.to_string()))
}

/// Each non-blank line of a JSON-lines file as `T`, with its 1-based line number.
fn read_lines<T: TryFrom<Value, Error = FieldError>>(file: &FilePath) -> Result<Vec<(usize, T)>, AuditError> {
    let text = read(file)?;
    let numbered = text.lines().enumerate().map(|(index, line)| (index + 1, line));
    numbered
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(number, line)| {
            parse(line).map(|item| (number, item)).map_err(|m| input(&display(file), Some(number), m))
        })
        .collect()
}
