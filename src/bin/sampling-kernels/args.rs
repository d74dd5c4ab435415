//! The command line. Combinations that cannot work (two inputs, log-probabilities without the
//! seeded sampler, filters on log-probabilities) are refused by clap before any file is read.

use crate::input::Role;
use crate::logprobs::Asked;
use crate::stage::{Flags, Stage};
use anyhow::{bail, Result};
use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use sampling_kernels::{FilterOrder, FilterPath, LogprobsMode, RowParams, SeededHash, SeededMode, StageRow};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "sampling-kernels", version, about = "Exact LLM token sampling on CUDA, wgpu or the CPU")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Sample one token per row of a file; prints one JSON object per row.
    Sample(SampleArgs),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum BackendChoice {
    /// CUDA, then wgpu, then the CPU.
    Auto,
    Cpu,
    Wgpu,
    Cuda,
}

/// The order of the filters (`--order`).
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Order {
    /// Every filter on the original distribution (SGLang's torch path).
    Joint,
    /// Top-p measured on the top-k set, renormalized (FlashInfer).
    TopKFirst,
    /// Min-p first, then top-k, then top-p measured on what both keep, renormalized (vLLM v1).
    MinPFirst,
}

/// Which device path samples the filtered rows (`--filter-path`); every path gives the same
/// token, and the CPU has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PathChoice {
    /// The routing's choice, row by row.
    Auto,
    /// The one-read path: a candidate select per part of the row, a merge, and where top-p
    /// needs it the cut's second read; rows it cannot decide take the filter kernel's body in
    /// its merge launch.
    OneRead,
    /// The filter kernels: a radix select over the whole row, a few reads.
    FilterKernel,
    /// The portable filter kernel of devices without float64, 64-bit integers or 32 KiB of
    /// workgroup memory (wgpu only; seeded rows with a filter are refused there).
    Portable,
}

/// Whose order and float32 arithmetic the logits stage follows (`--definitions`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Definitions {
    /// vLLM v1: bitmask and bans, logit bias, then the penalties; repetition over prompt and output.
    Vllm,
    /// SGLang: its penalizers' order and arithmetic (docs/logits-stage.md).
    Sglang,
}

/// What the seeded sampler hashes inside the filters (`--hash`).
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Hash {
    /// The token's vocabulary id: its noise does not move when the filters change.
    VocabId,
    /// The token's rank in the kept set, as SGLang's sort-based filtered path: SGLang's token.
    SortedRank,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Mode {
    /// Every column in float64 (one read).
    Float64,
    /// Float32 scores first, float64 only where a column could still win (two reads).
    Screened,
}

#[derive(Args)]
#[command(group(ArgGroup::new("input").required(true).args(["logits", "probs", "logprobs"])))]
// So that `--temperature -1` reaches the temperature check rather than reading as a flag.
#[command(allow_negative_numbers = true)]
pub struct SampleArgs {
    /// Logits (f32, f16 or bf16), rank 1 or batch x vocab, in .npy or .safetensors.
    #[arg(long, value_name = "FILE")]
    pub logits: Option<PathBuf>,
    /// Probabilities (f32), sampled with SGLang's `argmax p / Exponential`; with --seeded, its
    /// deterministic sampler on `log(p)` (float32, as `sampling_from_probs_torch`).
    #[arg(long, value_name = "FILE")]
    pub probs: Option<PathBuf>,
    /// Log-probabilities (f64 or f32) for the seeded float64 sampler.
    #[arg(long, value_name = "FILE", requires = "seeded")]
    pub logprobs: Option<PathBuf>,
    /// The tensor to read from a .safetensors file (default: its only tensor).
    #[arg(long, value_name = "NAME")]
    pub tensor: Option<String>,
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    /// Temperature: one for every row, or one per row (`0.7,1,0`); below 1e-6 the row is greedy.
    #[arg(long, value_delimiter = ',', default_value = "1", value_parser = temperature)]
    pub temperature: Vec<f32>,
    /// The request's seed: one for every row, or one per row.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub seed: Vec<u64>,
    /// The decode step, one or one per row: the race's Philox offset, the seeded sampler's position.
    #[arg(long, visible_alias = "position", value_delimiter = ',', default_value = "0")]
    pub offset: Vec<u64>,
    /// SGLang's deterministic sampler: float64 `argmax logprob + Gumbel(Murmur3(seed, position, column))`;
    /// with --top-k, --top-p or --min-p, inside the kept set (see --hash).
    #[arg(long)]
    pub seeded: bool,
    /// What --seeded hashes inside the filters: each token's vocabulary id, or its rank in the
    /// kept set as SGLang's filtered path does.
    #[arg(long, value_enum, default_value = "vocab-id", requires = "seeded")]
    pub hash: Hash,
    /// How the seeded sampler reads --logprobs or --probs (both give the same token; default
    /// float64). From --logits it has one path.
    #[arg(long, value_enum, requires = "seeded", conflicts_with = "logits")]
    pub mode: Option<Mode>,
    /// Keep the K most likely tokens of each row (ties to the lower index).
    #[arg(long, value_name = "K", conflicts_with = "logprobs")]
    pub top_k: Option<u32>,
    /// Keep the tokens whose probability mass ranked before them is at most P, in (0, 1].
    #[arg(long, value_name = "P", conflicts_with = "logprobs")]
    pub top_p: Option<f32>,
    /// Keep the tokens at least P times as likely as the most likely, P in [0, 1].
    #[arg(long, value_name = "P", conflicts_with = "logprobs")]
    pub min_p: Option<f32>,
    /// How the filters combine: joint (SGLang), top-k-first (FlashInfer) or min-p-first (vLLM v1).
    #[arg(long, value_enum, default_value = "joint")]
    pub order: Order,
    /// Logit bias, as OpenAI's `logit_bias`: a JSON object from token id (a string) to the bias
    /// added to that token's logit, for every row, or a list of such objects, one per row.
    #[arg(long, value_name = "FILE", requires = "logits", conflicts_with = "draws")]
    pub logit_bias: Option<PathBuf>,
    /// The grammar's allowed tokens, xgrammar's packed bitmask in .npy: int32 (or uint32) of
    /// shape [batch, ceil(vocab / 32)], or [ceil(vocab / 32)] for every row; bit j % 32 of word
    /// j / 32 set allows token j. A row that allows nothing samples nothing.
    #[arg(long, value_name = "FILE", requires = "logits", conflicts_with = "draws")]
    pub bitmask: Option<PathBuf>,
    /// Repetition penalty, one or one per row (1: none): a positive logit of a token seen in the
    /// prompt or output (see --definitions) is divided by it, a negative one multiplied.
    #[arg(long, value_delimiter = ',', requires = "token_ids")]
    pub repetition_penalty: Vec<f32>,
    /// Frequency penalty, one or one per row: `freq * count` is taken from the logit of a token
    /// generated `count` times.
    #[arg(long, value_delimiter = ',', requires = "token_ids")]
    pub frequency_penalty: Vec<f32>,
    /// Presence penalty, one or one per row: taken from the logit of every generated token.
    #[arg(long, value_delimiter = ',', requires = "token_ids")]
    pub presence_penalty: Vec<f32>,
    /// The rows' tokens: a JSON object {"prompt": [ids], "output": [ids], "banned": [ids]} (each
    /// key optional) for every row, or a list of them, one per row. The penalties count
    /// "prompt" and "output"; "banned" ids are set to -inf (min-tokens' stop ids).
    #[arg(long, value_name = "FILE", requires = "logits", conflicts_with = "draws")]
    pub token_ids: Option<PathBuf>,
    /// Replace NaN logits by -1e5 after the stage, as SGLang's --enable-nan-detection does.
    #[arg(long, requires = "logits", conflicts_with = "draws")]
    pub nan_as_finite: bool,
    /// Whose order and arithmetic the stage follows.
    #[arg(long, value_enum, default_value = "vllm")]
    pub definitions: Definitions,
    /// Force the device path of the filtered rows (for checks and replaying dumps).
    #[arg(long, value_enum, default_value = "auto")]
    pub filter_path: PathChoice,
    /// Also print each token's log-probability under the row's whole distribution (`null` for -inf).
    #[arg(long, conflicts_with = "draws")]
    pub return_logprob: bool,
    /// Also print each row's N largest log-probabilities (one N, or one per row; at most 256,
    /// ties to the lower id) under --logprobs-mode, with the sampled token's value and rank.
    #[arg(long, value_name = "N", value_delimiter = ',', conflicts_with_all = ["probs", "logprobs", "draws"])]
    pub top_logprobs: Vec<u32>,
    /// Also print the log-probabilities of these token ids: one line per row of comma-separated
    /// ids (an empty line asks for none), or one line for every row.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["probs", "logprobs", "draws"])]
    pub logprob_ids: Option<PathBuf>,
    /// Which values the log-probabilities are: raw_logprobs (the default, vLLM's), raw_logits,
    /// processed_logprobs, processed_logits (after the temperature and the filters) or sglang.
    /// Only the CPU computes them: `--backend auto` then uses the CPU, wgpu and cuda refuse.
    #[arg(long, value_name = "MODE", value_parser = logprobs_mode, conflicts_with_all = ["probs", "logprobs", "draws"])]
    pub logprobs_mode: Option<LogprobsMode>,
    /// Draw N tokens per row (decode steps offset..offset+N) and print a histogram per row.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub draws: Option<u64>,
    /// With --draws: also print each token's probability from the CPU oracle and the total
    /// variation distance between the histogram and that distribution.
    #[arg(long, requires = "draws")]
    pub compare: bool,
}

fn temperature(text: &str) -> Result<f32, String> {
    match text.parse::<f32>() {
        Ok(t) if t.is_finite() && t >= 0.0 => Ok(t),
        Ok(_) => Err("must be finite and at least 0 (below 1e-6 is greedy)".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn logprobs_mode(text: &str) -> Result<LogprobsMode, String> {
    LogprobsMode::from_name(text).ok_or_else(|| {
        let names: Vec<&str> = LogprobsMode::ALL.iter().map(|m| m.name()).collect();
        format!("one of {}", names.join(", "))
    })
}

impl SampleArgs {
    /// The input file and what it holds (clap guarantees exactly one).
    pub fn input(&self) -> Option<(&PathBuf, Role)> {
        let named = [(&self.logits, Role::Logits), (&self.probs, Role::Probs), (&self.logprobs, Role::LogProbs)];
        named.into_iter().find_map(|(path, role)| Some((path.as_ref()?, role)))
    }

    /// The log-probability request of `batch` rows, where any of its flags is given.
    pub fn logprobs(&self, batch: usize) -> Result<Option<Asked>> {
        if self.top_logprobs.is_empty() && self.logprob_ids.is_none() && self.logprobs_mode.is_none() {
            return Ok(None);
        }
        let mode = self.logprobs_mode.unwrap_or_default();
        Asked::new(mode, &self.top_logprobs, self.logprob_ids.as_deref(), batch).map(Some)
    }

    /// The logits stage of `batch` rows of `vocab` columns, where any of its flags is given.
    /// Only the CPU applies it yet.
    pub fn stage(&self, batch: usize, vocab: usize) -> Result<Option<Stage>> {
        let penalties = [&self.repetition_penalty, &self.frequency_penalty, &self.presence_penalty];
        let files = [&self.logit_bias, &self.bitmask, &self.token_ids];
        if penalties.iter().all(|p| p.is_empty()) && files.iter().all(|f| f.is_none()) && !self.nan_as_finite {
            return Ok(None);
        }
        let values = |flag: &str, values: &[f32], none: f32| match values {
            [] => Ok(vec![none; batch]),
            v => per_row(flag, v, batch),
        };
        let repetition = values("--repetition-penalty", &self.repetition_penalty, 1.0)?;
        let frequency = values("--frequency-penalty", &self.frequency_penalty, 0.0)?;
        let presence = values("--presence-penalty", &self.presence_penalty, 0.0)?;
        let base = match self.definitions {
            Definitions::Vllm => StageRow::vllm(),
            Definitions::Sglang => StageRow::sglang(),
        };
        let rows = (0..batch)
            .map(|r| base.with_repetition(repetition[r]).with_frequency(frequency[r]).with_presence(presence[r]))
            .collect();
        let flags = Flags {
            rows,
            bias: self.logit_bias.as_deref(),
            ids: self.token_ids.as_deref(),
            bitmask: self.bitmask.as_deref(),
            nan_as_finite: self.nan_as_finite,
        };
        Stage::new(flags, batch, vocab).map(Some)
    }

    pub fn mode(&self) -> SeededMode {
        match self.mode {
            None | Some(Mode::Float64) => SeededMode::Float64,
            Some(Mode::Screened) => SeededMode::Screened,
        }
    }

    /// Each row's parameters from the per-row flags.
    pub fn rows(&self, batch: usize) -> Result<Vec<RowParams>> {
        let temperature = per_row("--temperature", &self.temperature, batch)?;
        let seed = per_row("--seed", &self.seed, batch)?;
        let offset = per_row("--offset", &self.offset, batch)?;
        let order = match self.order {
            Order::Joint => FilterOrder::Joint,
            Order::TopKFirst => FilterOrder::TopKFirst,
            Order::MinPFirst => FilterOrder::MinPFirst,
        };
        let path = match self.filter_path {
            PathChoice::OneRead => FilterPath::OneRead,
            PathChoice::FilterKernel => FilterPath::FilterKernel,
            PathChoice::Auto | PathChoice::Portable => FilterPath::Auto,
        };
        let filtered = |row: RowParams| {
            let row = self.top_k.map_or(row, |k| row.with_top_k(k)).with_filter_path(path);
            let row = self.top_p.map_or(row, |p| row.with_top_p(p));
            self.min_p.map_or(row, |p| row.with_min_p(p)).with_order(order)
        };
        let hash = match self.hash {
            Hash::VocabId => SeededHash::VocabId,
            Hash::SortedRank => SeededHash::SortedRank,
        };
        let row = |r: usize| {
            let make = if self.seeded { RowParams::seeded } else { RowParams::new };
            make(temperature[r], seed[r], offset[r]).with_seeded_hash(hash)
        };
        Ok((0..batch).map(|r| filtered(row(r))).collect())
    }
}

/// One value for every row, or one value per row.
pub fn per_row<T: Copy>(flag: &str, values: &[T], batch: usize) -> Result<Vec<T>> {
    match values {
        [one] => Ok(vec![*one; batch]),
        _ if values.len() == batch => Ok(values.to_vec()),
        _ => bail!("{flag} has {} values for {batch} rows; give one, or one per row", values.len()),
    }
}
