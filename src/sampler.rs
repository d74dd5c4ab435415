//! The per-step API for engines: one call per decode step, any mix of greedy, sampled, filtered
//! and seeded rows in the same launches whatever the mix (the plain kernel, whose rows are split over
//! workgroups where the batch is small, the seeded kernel over the seeded rows and the filter
//! kernel over the filtered rows), the row records' device buffers made once and rewritten in
//! place.

use crate::backend::logprobs::{LogprobsOutput, LogprobsRequest};
use crate::backend::stage::LogitsStage;
#[cfg(feature = "wgpu")]
use crate::backend::wgpu::WgpuBackend;
use crate::backend::{sample_job, AtRead, Backend, Logits, Output, RowLists};
use crate::error::{Error, Result};
use crate::sglang::NormalizedParams;
use crate::types::{FilterPath, RowMode, RowParams, Shape};
use std::ops::Deref;

/// SGLang's seed for requests that give none, in deterministic inference.
pub const DEFAULT_SEED: u64 = 42;

/// Samples one decode step at a time on a backend, routing each row by its own parameters.
///
/// `P` is how the sampler holds its backend: a borrow (`&B`), or shared ownership (`Arc<B>`,
/// `Rc<B>`) so an engine can keep the backend and the sampler in one struct.
pub struct Sampler<P: Deref<Target = B>, B: Backend = <P as Deref>::Target> {
    backend: P,
    rows: B::Buffer<RowParams>,
    /// The rows with a filter this step that the one-read path takes (and greedy ones), on the
    /// host and on the device (made once).
    filtered: Vec<u32>,
    filtered_rows: B::Buffer<u32>,
    /// The other sampled rows with a filter, likewise.
    off_path: Vec<u32>,
    off_path_rows: B::Buffer<u32>,
    /// The seeded rows this step, likewise.
    seeded: Vec<u32>,
    seeded_rows: B::Buffer<u32>,
    capacity: usize,
    /// The logits after a call's stage ([`step_staged`](Self::step_staged)), made by the first
    /// call that needs one and grown only for a larger shape.
    staged: Option<B::Buffer<f32>>,
}

impl<P: Deref<Target = B>, B: Backend> Sampler<P, B> {
    /// A sampler for batches of up to `max_batch` rows (its buffers are made here, once).
    pub fn new(backend: P, max_batch: usize) -> Result<Self> {
        let rows = backend.zeros::<RowParams>(max_batch)?;
        let list = || Ok::<_, Error>((Vec::with_capacity(max_batch), backend.zeros::<u32>(max_batch)?));
        let ((filtered, filtered_rows), (off_path, off_path_rows)) = (list()?, list()?);
        let (seeded, seeded_rows) = list()?;
        Ok(Sampler {
            backend,
            rows,
            filtered,
            filtered_rows,
            off_path,
            off_path_rows,
            seeded,
            seeded_rows,
            capacity: max_batch,
            staged: None,
        })
    }

    /// One decode step: row `r` of `logits` is sampled as `rows[r]` asks (see
    /// [`Backend::sample`]). Tokens, and on request log-probabilities and statuses, go to `out`
    /// on the device; nothing waits for the host.
    ///
    /// The records are on the host here, so the seeded and filter kernels are launched over
    /// their rows only, and not at all when there are none: a batch of plain and greedy rows is
    /// one launch, and a top-p or seeded request in a batch costs its own row's launches, not a
    /// launch over the batch.
    ///
    /// On wgpu this records the launches into an encoder of the backend's own and submits it;
    /// [`Sampler::step_into`] records them into an engine's encoder instead.
    pub fn step(&mut self, shape: Shape, logits: Logits<'_, B>, rows: &[RowParams], out: Output<'_, B>) -> Result<()> {
        let top_p_cut = self.write_rows(shape, rows)?;
        self.backend.run(self.job(shape, logits, out, top_p_cut, AtRead::none())?)
    }

    /// Checks a step's row records and writes them, and the row lists they make, to the
    /// device; returns whether a listed row may take the top-p cut.
    fn write_rows(&mut self, shape: Shape, rows: &[RowParams]) -> Result<bool> {
        if rows.len() != shape.batch {
            return Err(Error::Shape(format!("{} row records for a batch of {}", rows.len(), shape.batch)));
        }
        if rows.len() > self.capacity {
            return Err(Error::Shape(format!("batch {} exceeds the sampler's {} rows", rows.len(), self.capacity)));
        }
        let refused = rows.iter().enumerate().filter(|(_, r)| r.mode() == RowMode::Seeded).find_map(|(row, r)| {
            let filtered = r.has_filters() && r.is_sampled();
            self.backend.missing_for_seeded(filtered).map(|feature| Error::UnsupportedRow { row, feature })
        });
        if let Some(e) = refused {
            return Err(e);
        }
        self.backend.write(&mut self.rows, rows)?;
        // Supersets of the rows the kernels take (a filter also needs a temperature and a top-k
        // below the vocabulary; a seeded row with a filter is the filter kernel's): each kernel
        // checks each row it is given. A list left empty launches nothing (the seeded kernel,
        // the one-read path, the filter kernels' own plan); the top-p cut only for rows that
        // take it.
        let pick = |list: &mut Vec<u32>, device: &mut B::Buffer<u32>, take: &dyn Fn(&RowParams) -> bool| {
            list.clear();
            list.extend((0..rows.len() as u32).filter(|&r| take(&rows[r as usize])));
            if list.is_empty() {
                return Ok(());
            }
            self.backend.write(device, list)
        };
        // Greedy rows with a filter are the plain kernel's; the filter kernels skip them. Rows
        // that hash ranks stay on the path's list, whose merge ranks them whole: the filter
        // kernels' own plan may split rows, which cannot rank them. So do rows forced onto the
        // path, which its merge samples with the filter kernel's body where the path cannot.
        let off_path = |r: &RowParams| {
            let listed = r.hashes_ranks() || r.filter_path() == FilterPath::OneRead;
            r.has_filters() && r.is_sampled() && !r.takes_one_read(shape.vocab) && !listed
        };
        pick(&mut self.filtered, &mut self.filtered_rows, &|r| r.has_filters() && !off_path(r))?;
        pick(&mut self.off_path, &mut self.off_path_rows, &off_path)?;
        pick(&mut self.seeded, &mut self.seeded_rows, &|r| r.mode() == RowMode::Seeded)?;
        Ok(self.filtered.iter().any(|&r| rows[r as usize].may_take_cut(shape.vocab)))
    }

    /// What a device's kernels apply of `stage` as they read the logits, once it is checked for
    /// `shape`; the rest of a stage is refused by name.
    fn at_read<'a>(&self, shape: Shape, stage: &LogitsStage<'a, B>) -> Result<AtRead<'a, B>> {
        shape.validate()?;
        stage.validate(shape)?;
        match stage.sparse_feature() {
            Some(feature) => Err(Error::UnsupportedStage { feature }),
            None => Ok(stage.at_read()),
        }
    }

    /// The checked job of a step whose rows [`Sampler::write_rows`] wrote.
    fn job<'a>(
        &'a self,
        shape: Shape,
        logits: Logits<'a, B>,
        out: Output<'a, B>,
        top_p_cut: bool,
        at_read: AtRead<'a, B>,
    ) -> Result<crate::backend::Job<'a, B>> {
        let listed = RowLists {
            seeded: (&self.seeded_rows, self.seeded.len()),
            filtered: (&self.filtered_rows, self.filtered.len()),
            off_path: (&self.off_path_rows, self.off_path.len()),
            top_p_cut,
        };
        sample_job(shape, logits, &self.rows, out, Some(listed), at_read)
    }
}

#[cfg(feature = "wgpu")]
impl<P: Deref<Target = WgpuBackend>> Sampler<P, WgpuBackend> {
    /// [`Sampler::step`], recorded into an engine's command encoder instead of submitted: after
    /// the work the engine recorded before it (the pass that wrote the logits), before the work
    /// it records after (a pass that reads the tokens). The engine submits the encoder on the
    /// backend's queue; nothing here submits, waits or reads back, and once warm it allocates
    /// nothing of its own (its wgpu calls are `step`'s, less the encoder, `finish` and `submit`).
    ///
    /// The contract:
    /// - `encoder` is from the backend's device (the engine's, given to
    ///   [`WgpuBackend::from_device`]), and is submitted on its queue.
    /// - The row records and row lists are written with `Queue::write_buffer`, which wgpu
    ///   applies at the start of the queue's next submit, before that submit's command buffers.
    ///   So submit the encoder before this sampler's next step (`step` or `step_into`): a second
    ///   step recorded first overwrites the first's records before either runs. Two samplers may
    ///   be recorded into one encoder (one per step in flight).
    /// - Everything else the launches read is the engine's buffers or made inside the encoder
    ///   (the launch parameters are copied in by a command before the passes; the scratch is
    ///   only written by the passes), so other calls on the same backend, recorded or submitted
    ///   meanwhile, do not disturb the recorded step.
    /// - An error (bad shape or rows, a missing feature) is returned before anything is
    ///   recorded, leaving the encoder as it was; an encoder dropped unsubmitted ran nothing.
    /// - It cannot run inside [`WgpuBackend::time_launches`], which reads the clock before the
    ///   engine submits (an error there).
    pub fn step_into(
        &mut self,
        encoder: &mut ::wgpu::CommandEncoder,
        shape: Shape,
        logits: Logits<'_, WgpuBackend>,
        rows: &[RowParams],
        out: Output<'_, WgpuBackend>,
    ) -> Result<()> {
        let top_p_cut = self.write_rows(shape, rows)?;
        self.backend.record(encoder, self.job(shape, logits, out, top_p_cut, AtRead::none())?, true)
    }

    /// [`Sampler::step_into`] with the logits stage the kernels read with the logits (a
    /// grammar's bitmask, NaN as -1e5; see [`Sampler::step_staged`]), under the same contract;
    /// a stage that asks for more is refused by name, before anything is recorded.
    pub fn step_staged_into(
        &mut self,
        encoder: &mut ::wgpu::CommandEncoder,
        shape: Shape,
        logits: Logits<'_, WgpuBackend>,
        rows: &[RowParams],
        stage: &LogitsStage<'_, WgpuBackend>,
        out: Output<'_, WgpuBackend>,
    ) -> Result<()> {
        let at_read = self.at_read(shape, stage)?;
        let top_p_cut = self.write_rows(shape, rows)?;
        self.backend.record(encoder, self.job(shape, logits, out, top_p_cut, at_read)?, true)
    }
}

impl<P: Deref<Target = B>, B: Backend> Sampler<P, B> {
    /// [`step`](Self::step) after the call's logits stage: each row's logits are changed as
    /// `stage` says (penalties, logit bias, banned tokens, the allowed-token bitmask, NaN as
    /// -1e5; see [`crate::reference::stage`]) and then sampled as `rows` ask. A row whose
    /// bitmask allows nothing samples nothing: token 0, status 0. A stage that changes nothing
    /// is a plain `step`.
    ///
    /// The CPU backend applies the stage whole, into a float32 copy of the logits that it then
    /// samples. The wgpu and CUDA kernels apply the allowed-token bitmask and NaN as -1e5 as
    /// they read each logit, in the read that samples (no copy, no extra read of the logits:
    /// one bitmask word per 32 columns); they refuse the penalties, the logit bias and banned
    /// tokens with [`Error::UnsupportedStage`], naming the first, before anything is launched.
    pub fn step_staged(
        &mut self,
        shape: Shape,
        logits: Logits<'_, B>,
        rows: &[RowParams],
        stage: &LogitsStage<'_, B>,
        out: Output<'_, B>,
    ) -> Result<()> {
        if self.backend.reads_stage() || stage.first_feature().is_none() {
            let at_read = self.at_read(shape, stage)?;
            let top_p_cut = self.write_rows(shape, rows)?;
            return self.backend.run(self.job(shape, logits, out, top_p_cut, at_read)?);
        }
        shape.validate()?;
        stage.validate(shape)?;
        let mut staged = match self.staged.take() {
            Some(s) if B::len(&s) >= shape.elements() => s,
            _ => self.backend.zeros::<f32>(shape.elements())?,
        };
        let result = self
            .backend
            .apply_stage(shape, logits, stage, &mut staged)
            .and_then(|()| self.step(shape, Logits::F32(&staged), rows, out));
        self.staged = Some(staged);
        result
    }
}

impl<P: Deref<Target = B>, B: Backend> Sampler<P, B> {
    /// A step ([`step`](Self::step), or [`step_staged`](Self::step_staged) with a `stage`) and
    /// the log-probabilities `request` asks for, written to `logprobs`: each row's top-n values
    /// and ids, the requested ids' values, and the sampled token's value and rank, under the
    /// request's [`LogprobsMode`](crate::LogprobsMode) (docs/logprobs.md). The raw modes read
    /// `logits` as given; the processed modes and SGLang's read them after the stage, with the
    /// row's temperature (and, processed, its filters). The sampled token is the one written to
    /// `out` (0 for a row with nothing to sample).
    ///
    /// The CPU backend computes them; the wgpu and CUDA backends refuse the call with
    /// [`Error::UnsupportedLogprobs`] before anything is launched. The request and the buffers
    /// are checked first (a requested id outside the vocabulary is an [`Error::Param`]).
    #[allow(clippy::too_many_arguments)]
    pub fn step_with_logprobs(
        &mut self,
        shape: Shape,
        logits: Logits<'_, B>,
        rows: &[RowParams],
        stage: Option<&LogitsStage<'_, B>>,
        request: &LogprobsRequest<'_>,
        mut out: Output<'_, B>,
        logprobs: LogprobsOutput<'_, B>,
    ) -> Result<()> {
        shape.validate()?;
        request.validate(shape, &logprobs)?;
        if !self.backend.computes_logprobs() {
            return Err(request.unsupported());
        }
        match stage {
            Some(stage) => self.step_staged(shape, logits, rows, stage, out.reborrow())?,
            None => self.step(shape, logits, rows, out.reborrow())?,
        }
        // `staged` holds this call's stage only where the stage changed anything.
        let staged = match (stage, &self.staged) {
            (Some(stage), Some(staged)) if stage.first_feature().is_some() => Logits::F32(staged),
            _ => logits,
        };
        self.backend.write_logprobs(shape, logits, staged, rows, out.tokens, request, logprobs)
    }
}

impl RowParams {
    /// The row record of a request with SGLang-normalized parameters at decode step (position)
    /// `step`: greedy when SGLang would be (`top_k = 1`); SGLang's seeded race under
    /// deterministic inference (seed 42 when the request gives none); else the Philox race keyed
    /// by the request's seed and step. Either race runs inside the request's top-k / top-p /
    /// min-p set, in SGLang's joint order. (SGLang's deterministic filtered path hashes a token's
    /// rank in the sorted set; this crate hashes its vocabulary id unless the row is given
    /// [`SeededHash::SortedRank`](crate::SeededHash::SortedRank), see [`crate::reference::murmur`].)
    pub fn from_request(params: &NormalizedParams, step: u64, deterministic: bool) -> Result<Self> {
        let seed = params.seed().unwrap_or(if deterministic { DEFAULT_SEED } else { 0 });
        if params.top_k() == 1 {
            return Ok(if deterministic { RowParams::seeded(0.0, seed, step) } else { RowParams::greedy() });
        }
        let temperature = params.temperature() as f32;
        let row = if deterministic {
            RowParams::seeded(temperature, seed, step)
        } else {
            RowParams::new(temperature, seed, step)
        };
        let top_k = match params.top_k() {
            crate::sglang::TOP_K_ALL => u32::MAX,
            k => u32::try_from(k).unwrap_or(u32::MAX),
        };
        let row = row.with_top_k(top_k).with_top_p(params.top_p() as f32).with_min_p(params.min_p() as f32);
        <RowParams as crate::types::Element>::validate(std::slice::from_ref(&row))?;
        Ok(row)
    }
}
