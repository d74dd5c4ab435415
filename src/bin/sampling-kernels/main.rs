//! `sampling-kernels sample`: samples tokens from logits, probabilities or log-probabilities
//! stored in `.npy` or `.safetensors` files, on CUDA, wgpu or the CPU oracle, and prints JSON
//! lines. Made for checking the kernels on real model outputs, not for serving.

mod args;
mod draws;
mod input;
mod tensor;

use anyhow::{Context, Result};
use args::{BackendChoice, Cli, Command, SampleArgs};
use clap::Parser;
use input::Input;
use sampling_kernels::{Backend, CpuBackend, CudaBackend, RowParams, WgpuBackend};
use serde::Serialize;
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let Command::Sample(args) = Cli::parse().command;
    match sample(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A parsed request, ready for whichever backend is chosen.
struct Job<'a> {
    args: &'a SampleArgs,
    input: Input<CpuBackend>,
    vocab: usize,
    rows: Vec<RowParams>,
}

/// One sampled token.
#[derive(Serialize)]
struct Token {
    row: usize,
    token: u32,
    /// `null` where it is `-inf` (JSON has no infinities).
    #[serde(skip_serializing_if = "Option::is_none")]
    logprob: Option<f32>,
}

fn sample(args: &SampleArgs) -> Result<()> {
    let (path, role) = args.input().context("one of --logits, --probs or --logprobs is required")?;
    let tensor = tensor::load(path, args.tensor.as_deref())?;
    let (batch, vocab) = (tensor.batch, tensor.vocab);
    let input = Input::new(role, tensor, args.seeded, args.mode())?;
    let job = Job { args, input, vocab, rows: args.rows(batch)? };
    match args.backend {
        BackendChoice::Cpu => job.run(&CpuBackend),
        BackendChoice::Wgpu => job.run(&WgpuBackend::new()?),
        BackendChoice::Cuda => job.run(&CudaBackend::new(0)?),
        BackendChoice::Auto => {
            match CudaBackend::new(0) {
                Ok(b) => return job.run(&b),
                Err(e) => eprintln!("CUDA: {e}; trying wgpu"),
            }
            match WgpuBackend::new() {
                Ok(b) => return job.run(&b),
                Err(e) => eprintln!("wgpu: {e}; using the CPU"),
            }
            job.run(&CpuBackend)
        }
    }
}

impl Job<'_> {
    fn run<B: Backend>(&self, backend: &B) -> Result<()> {
        eprintln!("backend: {}", backend.describe());
        let mut out = std::io::stdout().lock();
        match self.args.draws {
            None => {
                let device = self.input.upload(backend)?;
                let (tokens, logprobs) = device.sample(backend, self.vocab, &self.rows, self.args.return_logprob)?;
                for (row, &token) in tokens.iter().enumerate() {
                    let logprob = logprobs.as_ref().map(|lp| lp[row]);
                    json_line(&mut out, &Token { row, token, logprob })?;
                }
            }
            Some(draws) => {
                for (row, &params) in self.rows.iter().enumerate() {
                    let histogram =
                        draws::histogram(backend, &self.input, self.vocab, row, params, draws, self.args.compare)?;
                    json_line(&mut out, &histogram)?;
                }
            }
        }
        Ok(())
    }
}

/// Writes one JSON object and a newline; a closed pipe is an error, not a panic.
fn json_line(out: &mut impl Write, value: &impl Serialize) -> Result<()> {
    serde_json::to_writer(&mut *out, value)?;
    writeln!(out)?;
    Ok(())
}
