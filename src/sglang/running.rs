//! SGLang's running decode batch over time, against per-row routing of the same rows.
//!
//! SGLang computes the batch flags when requests are prefilled, ORs them into the running batch
//! when they join (`merge_batch`), and keeps them when finished requests leave (`filter_batch`).
//! So a top-p request keeps every other row on the filtered path after it has finished, until the
//! running batch empties and the next prefill starts from fresh flags. Replaying a trace measures
//! how many decode steps, and row-steps, that costs.

use std::collections::HashMap;
use std::fmt;

use serde::Deserialize;
use serde_json::Value;

use super::json::{self, FieldError};
use super::params::NormalizedParams;
use super::route::{row_path, BatchFlags, Path};

/// One decode step of a trace. Requests in `arrive` join before the step and decode in it;
/// requests in `finish` leave after it (so a request that arrives and finishes in the same step
/// decodes once). Steps count up by one, from any start.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Value")]
pub struct TraceStep {
    /// The decode step.
    pub step: u64,
    /// Requests that join the running batch before this step.
    pub arrive: Vec<String>,
    /// Requests that finish after this step.
    pub finish: Vec<String>,
}

impl TryFrom<Value> for TraceStep {
    type Error = FieldError;

    fn try_from(value: Value) -> Result<Self, FieldError> {
        let object = json::object(&value, "trace step")?;
        Ok(TraceStep {
            step: json::required(object, "step")?,
            arrive: json::optional(object, "arrive")?.unwrap_or_default(),
            finish: json::optional(object, "finish")?.unwrap_or_default(),
        })
    }
}

/// What is wrong with a trace entry; each message names the field it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceErrorKind {
    #[error("`step`: {step} follows step {previous}; steps must count up by one")]
    /// Step numbers that do not count up by one.
    StepOrder {
        /// The step number found.
        step: u64,
        /// The step before it.
        previous: u64,
    },
    #[error("`arrive`: request `{0}` is not among the requests")]
    /// A request id the requests file does not have.
    Unknown(String),
    #[error("`arrive`: request `{0}` is already running")]
    /// A request that arrives while it is running.
    AlreadyRunning(String),
    #[error("`finish`: request `{0}` is not running")]
    /// A request that finishes while it is not running.
    NotRunning(String),
}

/// A trace entry that cannot be replayed; `index` counts entries from 0.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("trace entry {index}: {kind}")]
pub struct TraceError {
    /// The trace line (0-based entry).
    pub index: usize,
    /// What was wrong.
    pub kind: TraceErrorKind,
}

/// SGLang's running decode batch: its rows, and flags that outlive the rows that set them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunningBatch {
    rows: Vec<(String, NormalizedParams)>,
    /// `None` exactly when there are no rows: the next request starts fresh flags.
    flags: Option<BatchFlags>,
}

impl RunningBatch {
    /// A request joins (`merge_batch`): its flags are ORed in, `is_all_greedy` ANDed.
    pub fn merge(&mut self, id: &str, row: NormalizedParams) -> Result<(), TraceErrorKind> {
        if self.rows.iter().any(|(running, _)| running == id) {
            return Err(TraceErrorKind::AlreadyRunning(id.to_owned()));
        }
        let joining = BatchFlags::of_row(&row);
        self.flags = Some(self.flags.map_or(joining, |flags| flags.merge(joining)));
        self.rows.push((id.to_owned(), row));
        Ok(())
    }

    /// A request finishes (`filter_batch`): its row leaves, the flags stay unless none is left.
    pub fn filter(&mut self, id: &str) -> Result<(), TraceErrorKind> {
        let at = self.rows.iter().position(|(running, _)| running == id);
        self.rows.remove(at.ok_or_else(|| TraceErrorKind::NotRunning(id.to_owned()))?);
        if self.rows.is_empty() {
            self.flags = None;
        }
        Ok(())
    }

    /// The path SGLang takes for the next decode step; `None` when no request is running.
    pub fn path(&self, deterministic: bool) -> Option<Path> {
        self.flags.map(|flags| flags.path(deterministic))
    }

    /// The running requests in the order they joined.
    pub fn rows(&self) -> impl Iterator<Item = (&str, &NormalizedParams)> {
        self.rows.iter().map(|(id, row)| (id.as_str(), row))
    }
}

/// One decode step that ran: SGLang's path for the batch and each row's own path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepRecord {
    /// The decode step.
    pub step: u64,
    /// The path SGLang takes for the whole batch.
    pub sglang: Path,
    /// Each running request and its own path.
    pub rows: Vec<(String, Path)>,
}

/// How many of `total` were on the fast path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Share {
    /// How many were on the fast path.
    pub fast: usize,
    /// How many there were.
    pub total: usize,
}

impl Share {
    /// `fast / total`, or `None` when there was nothing to count.
    pub fn fraction(self) -> Option<f64> {
        (self.total > 0).then(|| self.fast as f64 / self.total as f64)
    }
}

impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.fast, self.total)?;
        match self.fraction() {
            Some(fraction) => write!(f, " ({:.1}%)", 100.0 * fraction),
            None => f.write_str(" (no decode steps)"),
        }
    }
}

/// Fast-path shares of a replayed trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shares {
    /// Decode steps SGLang ran on Greedy or Gumbel.
    pub sglang_steps: Share,
    /// Row-steps in those decode steps.
    pub sglang_rows: Share,
    /// Row-steps whose own path is Greedy or Gumbel, as per-row routing runs them.
    pub per_row_rows: Share,
}

/// The requests whose token in SGLang depends on their batch mates under deterministic inference:
/// a request that alone takes the seeded path ([`Path::Deterministic`]) but is sent through the
/// filtered function because another request's flag (or a finished one's sticky flag) asks for a
/// filter. There SGLang hashes the token's rank in the sorted row, not its id, so the same
/// request gets another token (30 of 32 rows in the SGLang 0.5.20 check). Per-row routing
/// has no such rows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchDependence {
    /// Those requests, each once, in the order of their first such step.
    pub requests: Vec<String>,
    /// Their row-steps on the filtered path, of every row-step of the trace.
    pub rows: usize,
    /// Every row-step of the trace.
    pub total: usize,
}

/// A replayed trace: every decode step that had a running batch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Simulation {
    /// Every step with a running batch.
    pub steps: Vec<StepRecord>,
}

impl Simulation {
    /// Replays `trace` over the normalized parameters of each request id.
    pub fn run(
        requests: &HashMap<String, NormalizedParams>,
        trace: &[TraceStep],
        deterministic: bool,
    ) -> Result<Self, TraceError> {
        let mut batch = RunningBatch::default();
        let mut steps = Vec::new();
        let mut previous: Option<u64> = None;
        for (index, entry) in trace.iter().enumerate() {
            let fail = |kind| TraceError { index, kind };
            if let Some(previous) = previous.filter(|&p| p.checked_add(1) != Some(entry.step)) {
                return Err(fail(TraceErrorKind::StepOrder { step: entry.step, previous }));
            }
            previous = Some(entry.step);
            for id in &entry.arrive {
                let row = requests.get(id).ok_or_else(|| fail(TraceErrorKind::Unknown(id.clone())))?;
                batch.merge(id, *row).map_err(fail)?;
            }
            if let Some(sglang) = batch.path(deterministic) {
                let rows = batch.rows().map(|(id, row)| (id.to_owned(), row_path(row, deterministic))).collect();
                steps.push(StepRecord { step: entry.step, sglang, rows });
            }
            for id in &entry.finish {
                batch.filter(id).map_err(fail)?;
            }
        }
        Ok(Simulation { steps })
    }

    /// The row-steps whose SGLang token depends on the batch (see [`BatchDependence`]).
    pub fn batch_dependence(&self) -> BatchDependence {
        let mut found = BatchDependence::default();
        for step in &self.steps {
            found.total += step.rows.len();
            if step.sglang != Path::Filtered {
                continue;
            }
            for (id, _) in step.rows.iter().filter(|(_, own)| *own == Path::Deterministic) {
                found.rows += 1;
                if !found.requests.contains(id) {
                    found.requests.push(id.clone());
                }
            }
        }
        found
    }

    /// The fast-path shares of SGLang's batch routing and of per-row routing.
    pub fn shares(&self) -> Shares {
        let mut shares = Shares::default();
        for step in &self.steps {
            let rows = step.rows.len();
            let sglang_fast = step.sglang.is_fast();
            shares.sglang_steps.total += 1;
            shares.sglang_steps.fast += usize::from(sglang_fast);
            shares.sglang_rows.total += rows;
            shares.sglang_rows.fast += if sglang_fast { rows } else { 0 };
            shares.per_row_rows.total += rows;
            shares.per_row_rows.fast += step.rows.iter().filter(|(_, path)| path.is_fast()).count();
        }
        shares
    }
}
