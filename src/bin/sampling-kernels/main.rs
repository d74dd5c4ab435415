//! `sampling-kernels sample`: samples tokens from logits, probabilities or log-probabilities
//! stored in `.npy` or `.safetensors` files, on CUDA, wgpu or the CPU oracle, and prints JSON
//! lines. Made for checking the kernels on real model outputs, not for serving.

mod args;
mod draws;
mod input;
mod logprobs;
mod stage;
mod tensor;

use anyhow::{bail, Context, Result};
use args::{BackendChoice, Cli, Command, PathChoice, SampleArgs};
use clap::Parser;
use input::Input;
use sampling_kernels::{Backend, CpuBackend, CudaBackend, RowParams, WgpuBackend};
use serde::Serialize;
use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    give_vulkan_a_runtime_dir();
    let Command::Sample(args) = Cli::parse().command;
    match sample(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Mesa's Vulkan device-select layer looks for a Wayland display to learn which GPU drives it, and
/// where `XDG_RUNTIME_DIR` is unset (a headless machine, a container) libwayland prints an error
/// line although nothing is wrong. Give it what it asks for: a private runtime folder of this
/// user's, where no display listens, so the layer goes on quietly. Called first in `main`, before
/// any thread exists to read the environment.
fn give_vulkan_a_runtime_dir() {
    #[cfg(target_os = "linux")]
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else { return };
        let dir = std::env::temp_dir().join(format!("sampling-kernels-runtime-{uid}"));
        // Made once; afterwards used only while it is still this user's and no one else's.
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
        if std::fs::metadata(&dir).is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0) {
            std::env::set_var("XDG_RUNTIME_DIR", &dir);
        }
    }
}

/// A parsed request, ready for whichever backend is chosen.
struct Job<'a> {
    args: &'a SampleArgs,
    input: Input<CpuBackend>,
    vocab: usize,
    rows: Vec<RowParams>,
    /// The log-probabilities asked for, if any.
    asked: Option<logprobs::Asked>,
    /// The logits stage asked for, if any.
    stage: Option<stage::Stage>,
}

/// One sampled token.
#[derive(Serialize)]
struct Token {
    row: usize,
    token: u32,
    status: Status,
    /// `null` where it is `-inf` (JSON has no infinities).
    #[serde(skip_serializing_if = "Option::is_none")]
    logprob: Option<f32>,
    /// What `--top-logprobs`, `--logprob-ids` and `--logprobs-mode` ask for.
    #[serde(skip_serializing_if = "Option::is_none")]
    logprobs: Option<logprobs::RowLogprobs>,
}

/// Whether a row had anything to sample: a row of NaN or -inf has not, and its token 0 is no draw.
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum Status {
    Ok,
    NothingToSample,
}

impl Status {
    fn of(word: u32) -> Self {
        match word {
            0 => Status::NothingToSample,
            _ => Status::Ok,
        }
    }
}

fn sample(args: &SampleArgs) -> Result<()> {
    let (path, role) = args.input().context("one of --logits, --probs or --logprobs is required")?;
    let tensor = tensor::load(path, args.tensor.as_deref())?;
    let (batch, vocab) = (tensor.batch, tensor.vocab);
    let input = Input::new(role, tensor, args.mode())?;
    let (rows, asked, stage) = (args.rows(batch)?, args.logprobs(batch)?, args.stage(batch, vocab)?);
    let job = Job { args, input, vocab, rows, asked, stage };
    let portable = args.filter_path == PathChoice::Portable;
    let wgpu = || WgpuBackend::new().map(|b| b.with_portable_filters(portable));
    let sparse = job.stage.as_ref().map(stage::Stage::sparse).transpose()?.unwrap_or(false);
    match args.backend {
        // Only the CPU computes log-probabilities and the stage's penalties, bias and banned
        // tokens yet: `auto` takes it, and a named wgpu or cuda backend refuses them (the
        // library's `UnsupportedLogprobs` and `UnsupportedStage`). The devices read a bitmask
        // and NaN as -1e5 with the logits.
        BackendChoice::Auto if job.asked.is_some() || sparse => {
            eprintln!("log-probabilities, penalties, logit bias, banned tokens: only the CPU computes them yet; using the CPU");
            job.run(&CpuBackend)
        }
        BackendChoice::Cpu => job.run(&CpuBackend),
        BackendChoice::Wgpu => job.run(&wgpu()?),
        BackendChoice::Cuda if portable => bail!("--filter-path portable is wgpu's; CUDA has the full filter kernels"),
        BackendChoice::Cuda => job.run(&CudaBackend::new(0)?),
        BackendChoice::Auto => {
            // The portable kernel is wgpu's: no CUDA context for it.
            match (!portable).then(|| CudaBackend::new(0)) {
                None => eprintln!("CUDA: --filter-path portable is wgpu's; trying wgpu"),
                Some(Ok(b)) => return job.run(&b),
                Some(Err(e)) => eprintln!("CUDA: {e}; trying wgpu"),
            }
            match wgpu() {
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
                let asked = self.asked.as_ref();
                let (rows, lp) = (&self.rows, self.args.return_logprob);
                let got = device.sample(backend, self.vocab, rows, lp, asked, self.stage.as_ref())?;
                for (row, (&token, &status)) in got.tokens.iter().zip(&got.status).enumerate() {
                    let logprob = got.logprobs.as_ref().map(|lp| lp[row]);
                    let logprobs = asked.zip(got.asked.as_ref()).map(|(a, values)| a.row(row, values));
                    json_line(&mut out, &Token { row, token, status: Status::of(status), logprob, logprobs })?;
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
