//! The one trait every backend implements, and the checks every call goes through first.
//!
//! A backend supplies buffers and a hidden `run`, which launches one already-validated job.
//! Engines call the provided methods ([`Backend::race_from_logits`] and friends); they check
//! shapes and buffer lengths on the host, so no kernel is ever launched with bad sizes. The trait
//! is sealed and the job type private, so nothing outside the crate reaches `run`.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
mod job;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod launch;
pub mod logprobs;
#[cfg(feature = "cuda")]
pub mod ptx_isa;
pub mod stage;
pub mod timing;
#[cfg(feature = "wgpu")]
pub mod wgpu;

use crate::error::{Error, Result};
use crate::types::{Element, RowParams, Shape};
use half::{bf16, f16};
pub(crate) use job::{AtRead, Job, Sealed};

/// Logits in one of the supported element formats, on a backend's device.
pub enum Logits<'a, B: Backend + ?Sized> {
    /// float32 logits.
    F32(&'a B::Buffer<f32>),
    /// IEEE half-precision logits, widened to f32 in the kernel.
    F16(&'a B::Buffer<f16>),
    /// bfloat16 logits, widened to f32 in the kernel.
    Bf16(&'a B::Buffer<bf16>),
}

impl<B: Backend + ?Sized> Clone for Logits<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend + ?Sized> Copy for Logits<'_, B> {}

impl<B: Backend + ?Sized> Logits<'_, B> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Logits::F32(b) => B::len(*b),
            Logits::F16(b) => B::len(*b),
            Logits::Bf16(b) => B::len(*b),
        }
    }
}

/// Where a sampling call writes: one token per row, and when given, the token's log-probability
/// under softmax(l / T) (T = 1 for greedy rows) and a status per row: 1 when the row had a valid
/// value to sample, 0 when it had none (every value NaN or -inf), in which case its token is 0
/// and its log-probability -inf.
/// Built with [`Output::new`] and the `with_` methods; its fields are private, since on CUDA it
/// may hold an engine's memory lent by an alias (`Output::aliased`), which no safe code may
/// take out of it.
pub struct Output<'a, B: Backend + ?Sized> {
    /// One token per row.
    pub(crate) tokens: &'a mut B::Buffer<u32>,
    /// One log-probability per row, when asked.
    pub(crate) logprobs: Option<&'a mut B::Buffer<f32>>,
    /// One status per row (1 valid, 0 nothing to sample), when asked.
    pub(crate) status: Option<&'a mut B::Buffer<u32>>,
    /// How many times each row was read, when asked: written by the filter kernels and the
    /// seeded kernel from logits (for the rows they take), so tests and benchmarks see the pass
    /// count the data did not choose.
    pub(crate) passes: Option<&'a mut B::Buffer<u32>>,
}

impl<'a, B: Backend + ?Sized> Output<'a, B> {
    /// Tokens only.
    pub fn new(tokens: &'a mut B::Buffer<u32>) -> Self {
        Output { tokens, logprobs: None, status: None, passes: None }
    }
    /// Also write each token's log-probability.
    pub fn with_logprobs(mut self, logprobs: &'a mut B::Buffer<f32>) -> Self {
        self.logprobs = Some(logprobs);
        self
    }
    /// Also write each row's status.
    pub fn with_status(mut self, status: &'a mut B::Buffer<u32>) -> Self {
        self.status = Some(status);
        self
    }
    /// Also write, for the rows a filter kernel takes, how many times it read the row.
    pub fn with_passes(mut self, passes: &'a mut B::Buffer<u32>) -> Self {
        self.passes = Some(passes);
        self
    }
    /// The same destinations, reborrowed (to write several rows from one `Output`).
    pub fn reborrow(&mut self) -> Output<'_, B> {
        Output {
            tokens: &mut *self.tokens,
            logprobs: self.logprobs.as_deref_mut(),
            status: self.status.as_deref_mut(),
            passes: self.passes.as_deref_mut(),
        }
    }
}

/// What the filter kernels sample from: logits (with the row's temperature) or probabilities.
pub enum Input<'a, B: Backend + ?Sized> {
    /// Logits, sampled from softmax(l / T).
    Logits(Logits<'a, B>),
    /// Probabilities (any non-negative weights; NaN, negative and infinite values are never kept).
    Probs(&'a B::Buffer<f32>),
}

impl<B: Backend + ?Sized> Clone for Input<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend + ?Sized> Copy for Input<'_, B> {}

impl<B: Backend + ?Sized> Input<'_, B> {
    fn len(&self) -> usize {
        match self {
            Input::Logits(l) => l.len(),
            Input::Probs(p) => B::len(*p),
        }
    }
}

/// Log-probabilities for the seeded sampler: float64 as SGLang keeps them, float32 promoted, or
/// the float32 log of float32 probabilities.
pub enum LogProbs<'a, B: Backend + ?Sized> {
    /// float64, as SGLang keeps them.
    F64(&'a B::Buffer<f64>),
    /// float32, promoted to float64 in the kernel.
    F32(&'a B::Buffer<f32>),
    /// float32 probabilities: the kernel takes their float32 log (0, NaN and negative values give
    /// -inf), as SGLang's unfiltered seeded path from probabilities (`sampling_from_probs_torch`)
    /// takes `torch.log(probs)`; tokens agree with SGLang's except where its float32 log and
    /// the kernel's differ by an ulp at a near-tie.
    LogOf(&'a B::Buffer<f32>),
}

impl<B: Backend + ?Sized> Clone for LogProbs<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend + ?Sized> Copy for LogProbs<'_, B> {}

/// How the seeded float64 sampler computes its scores; both give the same token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SeededMode {
    /// Every column in float64: one read (the choice where float64 is fast, as on an H200).
    Float64,
    /// Float32 scores with a proven error bound, float64 only for the columns that could still
    /// win: two reads (the choice where float64 is slow, as on a T4 at 1/32 rate).
    Screened,
}

/// Where the host knows a sampling call's row records ([`crate::Sampler`] does): the rows each of
/// the per-row sampler's launches after the plain one may take, so each is as small as its rows.
/// Each list holds row indices, the rows in its first entries (how many, the `usize`); each is a
/// superset of the rows its kernel takes, which checks each row again.
pub struct RowLists<'a, B: Backend + ?Sized> {
    /// The seeded rows (the seeded kernel takes those without a filter).
    pub seeded: (&'a B::Buffer<u32>, usize),
    /// The rows with a filter that the one-read path takes
    /// ([`RowParams::takes_one_read`](crate::RowParams::takes_one_read)), and greedy rows with
    /// a filter (which the filter kernels leave to the plain one): the path's launches.
    pub filtered: (&'a B::Buffer<u32>, usize),
    /// The other sampled rows with a filter (top-k first with a top-k above the path's and
    /// top-p): the filter kernels' own plan, split over workgroups where they are few, launched
    /// only where there are any. So such a row costs its own launches, never the path of the
    /// batch's other filtered rows; either gives the same tokens.
    pub off_path: (&'a B::Buffer<u32>, usize),
    /// Whether a listed row may take the one-read path's launch between its two, the top-p cut
    /// ([`RowParams::may_take_cut`](crate::RowParams::may_take_cut)); without one, the path is
    /// the parts and the merge.
    pub top_p_cut: bool,
}

impl<B: Backend + ?Sized> Clone for RowLists<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend + ?Sized> Copy for RowLists<'_, B> {}

/// [`Backend::sample`]'s job, checked, the seeded and filter launches visiting only the rows
/// `listed` where the caller knows them on the host ([`crate::Sampler::step`]).
pub(crate) fn sample_job<'a, B: Backend + ?Sized>(
    shape: Shape,
    logits: Logits<'a, B>,
    rows: &'a B::Buffer<RowParams>,
    out: Output<'a, B>,
    listed: Option<RowLists<'a, B>>,
    at_read: AtRead<'a, B>,
) -> Result<Job<'a, B>> {
    check_filter_shape(shape)?;
    check_rows::<B>(shape, logits.len(), rows)?;
    check_output(shape, &out)?;
    if let Some(l) = listed {
        for (list, count) in [l.seeded, l.filtered, l.off_path] {
            need("row list", B::len(list), count)?;
        }
    }
    if let Some(mask) = at_read.allowed {
        need("allowed-token bitmask", B::len(mask), shape.batch * shape.vocab.div_ceil(32))?;
    }
    Ok(Job::Sample { shape, logits, rows, out, listed, at_read })
}

/// `write` must fit: the data may be shorter than the buffer, never longer.
fn check_write(len: usize, data: usize) -> Result<()> {
    need("write target", len, data)
}

/// A per-item diagnostic launch: at least one item, every word index within 32 bits.
fn check_items(items: usize, words_each: usize) -> Result<()> {
    let most = u32::MAX as usize / words_each;
    if items == 0 || items > most {
        return Err(Error::Shape(format!("{items} items; a call takes 1..={most}")));
    }
    Ok(())
}

pub(crate) fn need(name: &'static str, len: usize, need: usize) -> Result<()> {
    if len < need {
        return Err(Error::BufferTooShort { name, len, need });
    }
    Ok(())
}

/// A place that samples: the CPU, a wgpu device or a CUDA device.
///
/// Sealed: the kernels trust the sizes their launch was checked for, so only this crate's
/// backends implement it, and a launch is reachable only through the provided methods, which
/// check every size first. Neither the job type nor the seal can be named from outside:
///
/// ```compile_fail
/// use sampling_kernels::backend::Job;
/// ```
/// ```compile_fail
/// struct Mine;
/// impl sampling_kernels::backend::Sealed for Mine {}
/// ```
///
/// Nor can safe code write without the length check, past the end of a buffer:
///
/// ```compile_fail,E0133
/// use sampling_kernels::{Backend, CpuBackend};
/// let mut buf = CpuBackend.zeros::<u32>(1).unwrap();
/// CpuBackend.write_unchecked(&mut buf, &[1, 2, 3]).unwrap();
/// ```
/// ```compile_fail,E0133
/// fn past_the_end<B: sampling_kernels::Backend>(b: &B, buf: &mut B::Buffer<u32>) {
///     b.write_unchecked(buf, &[1, 2, 3]).unwrap();
/// }
/// ```
pub trait Backend: Sealed {
    /// A device buffer of `T` (a `Vec` on the CPU, a wrapped `wgpu::Buffer`, a `CudaSlice`).
    type Buffer<T: Element>;

    /// What this backend runs on, for logs and test reports.
    fn describe(&self) -> String;
    /// A new buffer holding `data`, without checking it (see [`Backend::upload`]).
    fn upload_unchecked<T: Element>(&self, data: &[T]) -> Result<Self::Buffer<T>>;
    /// A new buffer of `len` zeroed elements.
    fn zeros<T: Element>(&self, len: usize) -> Result<Self::Buffer<T>>;
    /// Overwrites the start of `buf` with `data`, without the checks of [`Backend::write`].
    ///
    /// # Safety
    /// `data` must fit: `data.len() <= Self::len(buf)`. A longer write runs past the end of the
    /// buffer (on CUDA into whatever device memory follows it, on wgpu into the rest of an
    /// engine's buffer beyond the view).
    unsafe fn write_unchecked<T: Element>(&self, buf: &mut Self::Buffer<T>, data: &[T]) -> Result<()>;

    /// A new buffer holding `data`, after the host-side checks of its element type (row
    /// parameters: temperature finite and non-negative).
    fn upload<T: Element>(&self, data: &[T]) -> Result<Self::Buffer<T>> {
        T::validate(data)?;
        self.upload_unchecked(data)
    }
    /// Overwrites the start of `buf` with `data`, without allocating (for per-step parameters),
    /// after the same checks as [`Backend::upload`].
    fn write<T: Element>(&self, buf: &mut Self::Buffer<T>, data: &[T]) -> Result<()> {
        T::validate(data)?;
        check_write(Self::len(buf), data.len())?;
        // SAFETY: checked just above.
        unsafe { self.write_unchecked(buf, data) }
    }
    /// Compiles every kernel this backend can run (NVRTC modules on CUDA, pipelines on wgpu), so
    /// the first sampling call pays no compilation; returns how many. The CPU has none.
    fn warm_up(&self) -> Result<usize> {
        Ok(0)
    }
    /// What SGLang's seeded sampler needs (with a filter where `filtered`) and this device
    /// lacks (float64, 64-bit integers; with a filter, the filter kernels' workgroup memory), if
    /// anything: [`crate::Sampler::step`] refuses such a row, naming it.
    fn missing_for_seeded(&self, filtered: bool) -> Option<&'static str> {
        let _ = filtered;
        None
    }
    /// Writes `logits` after the call's logits stage into `staged` (float32, `shape`'s layout),
    /// for [`crate::Sampler::step_staged`]; the stage must have been validated for `shape`.
    /// Only the CPU backend has it: the device backends read the bitmask and the NaN rule with
    /// the logits ([`Backend::reads_stage`]) and refuse the rest, naming it.
    #[doc(hidden)]
    fn apply_stage(
        &self,
        shape: Shape,
        logits: Logits<'_, Self>,
        stage: &stage::LogitsStage<'_, Self>,
        staged: &mut Self::Buffer<f32>,
    ) -> Result<()> {
        let _ = (shape, logits, staged);
        Err(Error::UnsupportedStage { feature: stage.first_feature().unwrap_or("logits stage") })
    }
    /// Whether this backend's kernels read the stage's bitmask and NaN rule with the logits
    /// ([`AtRead`]) instead of applying the whole stage first ([`Backend::apply_stage`],
    /// the CPU's).
    #[doc(hidden)]
    fn reads_stage(&self) -> bool {
        false
    }
    /// Whether this backend computes log-probabilities ([`crate::Sampler::step_with_logprobs`]):
    /// only the CPU backend does yet, and the step refuses the others before it launches anything.
    #[doc(hidden)]
    fn computes_logprobs(&self) -> bool {
        false
    }
    /// Writes a step's log-probabilities: each row's values under the request's mode, from
    /// `raw` (the logits as given) or `staged` (after the call's stage), `rows` (on the host) and
    /// the step's `tokens`; the request must have been validated for `shape` and `out`. The
    /// device backends refuse it, as [`Backend::computes_logprobs`] says.
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    fn write_logprobs(
        &self,
        shape: Shape,
        raw: Logits<'_, Self>,
        staged: Logits<'_, Self>,
        rows: &[RowParams],
        tokens: &Self::Buffer<u32>,
        request: &logprobs::LogprobsRequest<'_>,
        out: logprobs::LogprobsOutput<'_, Self>,
    ) -> Result<()> {
        let _ = (shape, raw, staged, rows, tokens, out);
        Err(request.unsupported())
    }
    /// Copies a buffer back to the host, waiting for the work that writes it.
    fn download<T: Element>(&self, buf: &Self::Buffer<T>) -> Result<Vec<T>>;
    /// How many elements `buf` holds.
    fn len<T: Element>(buf: &Self::Buffer<T>) -> usize;
    /// Launches a job whose sizes were checked by the provided methods. The job's type cannot be
    /// named outside the crate, so neither can this be called there.
    #[doc(hidden)]
    fn run(&self, job: Job<'_, Self>) -> Result<()>;

    /// Softmax of `l / T` per row (greedy rows at T = 1) into `probs`, with the logits' stride.
    ///
    /// Defined as PyTorch computes it in float32: `z = l / T` and `z - max z` are rounded to
    /// f32; the exponentials and their sum are then accurate to about one ulp, so every backend
    /// agrees with the float64 reference within 1e-6 relative.
    fn softmax(
        &self,
        shape: Shape,
        logits: Logits<'_, Self>,
        rows: &Self::Buffer<RowParams>,
        probs: &mut Self::Buffer<f32>,
    ) -> Result<()> {
        check_rows::<Self>(shape, logits.len(), rows)?;
        need("probs", Self::len(probs), shape.elements())?;
        self.run(Job::Softmax { shape, logits, rows, probs })
    }

    /// The lowest index of each row's largest logit (NaN is never chosen).
    fn greedy(&self, shape: Shape, logits: Logits<'_, Self>, out: Output<'_, Self>) -> Result<()> {
        shape.validate()?;
        need("logits", logits.len(), shape.elements())?;
        check_output(shape, &out)?;
        self.run(Job::Greedy { shape, logits, out })
    }

    /// Samples each row from softmax(l / T) with one read of the logits: argmax of
    /// `l / T + Gumbel` with the row's Philox noise. Greedy rows take the plain argmax.
    fn race_from_logits(
        &self,
        shape: Shape,
        logits: Logits<'_, Self>,
        rows: &Self::Buffer<RowParams>,
        out: Output<'_, Self>,
    ) -> Result<()> {
        check_rows::<Self>(shape, logits.len(), rows)?;
        check_output(shape, &out)?;
        self.run(Job::RaceLogits { shape, logits, rows, out })
    }

    /// Samples each row from probabilities: argmax of `p / Exponential` (SGLang v0.5.20's rule)
    /// with the same noise as [`Backend::race_from_logits`]. Greedy rows take the argmax of `p`.
    fn race_from_probs(
        &self,
        shape: Shape,
        probs: &Self::Buffer<f32>,
        rows: &Self::Buffer<RowParams>,
        out: Output<'_, Self>,
    ) -> Result<()> {
        check_rows::<Self>(shape, Self::len(probs), rows)?;
        check_output(shape, &out)?;
        self.run(Job::RaceProbs { shape, probs, rows, out })
    }

    /// SGLang's deterministic sampler (`--enable-deterministic-inference`): the first index of
    /// the maximum of `logprob + g` in float64, `g` the Murmur-hashed Gumbel noise of the row's
    /// (seed, position) and the column ([`crate::reference::murmur`]). A request's token depends on its seed
    /// and position only. Masked columns (`-inf`) never win while any column is finite.
    fn seeded(
        &self,
        shape: Shape,
        logprobs: LogProbs<'_, Self>,
        rows: &Self::Buffer<RowParams>,
        mode: SeededMode,
        out: Output<'_, Self>,
    ) -> Result<()> {
        let len = match logprobs {
            LogProbs::F64(b) => Self::len(b),
            LogProbs::F32(b) | LogProbs::LogOf(b) => Self::len(b),
        };
        check_rows::<Self>(shape, len, rows)?;
        check_output(shape, &out)?;
        self.run(Job::Seeded { shape, logprobs, rows, mode, out })
    }

    /// [`Backend::seeded`] from logits and temperature, with the log-probabilities computed as
    /// SGLang computes them (float32 log of the float32 softmax of `l / T`); they agree with
    /// PyTorch's to a few float32 ulps, so tokens agree except at such near-ties.
    fn seeded_from_logits(
        &self,
        shape: Shape,
        logits: Logits<'_, Self>,
        rows: &Self::Buffer<RowParams>,
        out: Output<'_, Self>,
    ) -> Result<()> {
        check_rows::<Self>(shape, logits.len(), rows)?;
        check_output(shape, &out)?;
        self.run(Job::SeededLogits { shape, logits, rows, out })
    }

    /// The per-row sampler: each row runs the path its own [`RowParams`] ask for: the Philox
    /// race (greedy below [`crate::GREEDY_EPS`]), SGLang's seeded float64 race for rows made
    /// with [`RowParams::seeded`], or the race inside the row's top-k / top-p / min-p set. The
    /// same launches whatever the mix (the plain kernel, its rows split where the batch is small,
    /// then the seeded kernel and the filter kernel, whose workgroups leave the rows that are not
    /// theirs at once; with the records on the host, [`crate::Sampler::step`] launches them
    /// over their rows only), each row paying only for its own path. Gives each row the token of
    /// [`Backend::race_from_logits`], [`Backend::seeded_from_logits`] or
    /// [`Backend::sample_filtered`].
    fn sample(
        &self,
        shape: Shape,
        logits: Logits<'_, Self>,
        rows: &Self::Buffer<RowParams>,
        out: Output<'_, Self>,
    ) -> Result<()> {
        self.run(sample_job(shape, logits, rows, out, None, AtRead::none())?)
    }

    /// Samples each row inside its kept set `S` (top-k, top-p and min-p from its [`RowParams`],
    /// joint or top-k first; exact sets, ties to the lower index), with the race and the noise
    /// of the plain path: `S` = everything gives [`Backend::race_from_logits`]'s token (or
    /// [`Backend::race_from_probs`]'s), and top-k 1 gives greedy. Sorting-free; a row is read at
    /// most 2 times with min-p alone, 10 with top-k or top-p, 18 with both top-k first, fewer
    /// once its select narrows to a few thousand candidates (see [`crate::reference::filters::passes`]; a GPU
    /// backend splits the rows of a batch too small to fill it over workgroups: then exactly 2,
    /// 11 and 19, see [`crate::reference::filters::split_passes`]; the tokens do not change). The
    /// log-probability is the token's under the whole row's distribution, as on the plain path.
    /// Rows made with [`RowParams::seeded`] run SGLang's seeded float64 race inside `S` instead
    /// (on `z - max`, or `ln p`, which differ from its log-probabilities by the row's constant).
    fn sample_filtered(
        &self,
        shape: Shape,
        input: Input<'_, Self>,
        rows: &Self::Buffer<RowParams>,
        out: Output<'_, Self>,
    ) -> Result<()> {
        check_filter_shape(shape)?;
        check_rows::<Self>(shape, input.len(), rows)?;
        check_output(shape, &out)?;
        self.run(Job::Filter { shape, input, rows, out })
    }

    /// The logits with every token outside the row's kept set at -inf, in f32 with the input's
    /// stride: top-k masking, min-p masking, or any combination, per row. The set uses the
    /// row's temperature (it matters for top-p only); the values written are the logits.
    fn mask_logits(
        &self,
        shape: Shape,
        logits: Logits<'_, Self>,
        rows: &Self::Buffer<RowParams>,
        masked: &mut Self::Buffer<f32>,
    ) -> Result<()> {
        check_filter_shape(shape)?;
        check_rows::<Self>(shape, logits.len(), rows)?;
        need("masked", Self::len(masked), shape.elements())?;
        self.run(Job::MaskLogits { shape, logits, rows, masked })
    }

    /// The probabilities renormalized over each row's kept set (zero outside), with the input's
    /// stride: top-k renorm, top-p renorm, or any combination, per row.
    fn renorm_probs(
        &self,
        shape: Shape,
        probs: &Self::Buffer<f32>,
        rows: &Self::Buffer<RowParams>,
        renormed: &mut Self::Buffer<f32>,
    ) -> Result<()> {
        check_filter_shape(shape)?;
        check_rows::<Self>(shape, Self::len(probs), rows)?;
        need("renormed", Self::len(renormed), shape.elements())?;
        self.run(Job::RenormProbs { shape, probs, rows, renormed })
    }
}

/// Known-answer probes of the kernels' building blocks (Murmur, Philox, the float64 log, the
/// noise) and the plain read the benchmarks measure bandwidth against. They sample nothing, so
/// they live apart from [`Backend`]; tests and benchmarks use them to check each backend's
/// pieces against [`crate::reference`]. Every backend has them.
pub trait Diagnostics: Backend {
    /// MurmurHash3_x86_32 of `items` groups of four words (for known-answer tests).
    fn murmur3(&self, items: usize, words: &Self::Buffer<u32>, out: &mut Self::Buffer<u32>) -> Result<()> {
        check_items(items, 4)?;
        need("words", Self::len(words), items * 4)?;
        need("out", Self::len(out), items)?;
        self.run(Job::Murmur { items, words, out })
    }

    /// The float64 natural log the seeded kernels use, on `items` values (for accuracy tests).
    fn log_f64(&self, items: usize, x: &Self::Buffer<f64>, out: &mut Self::Buffer<f64>) -> Result<()> {
        check_items(items, 1)?;
        need("x", Self::len(x), items)?;
        need("out", Self::len(out), items)?;
        self.run(Job::LogF64 { items, x, out })
    }

    /// Philox4x32-10 of `items` (counter, key) blocks of six words each (for known-answer tests).
    fn philox(&self, items: usize, blocks: &Self::Buffer<u32>, out: &mut Self::Buffer<u32>) -> Result<()> {
        check_items(items, 6)?;
        need("blocks", Self::len(blocks), items * 6)?;
        need("out", Self::len(out), items * 4)?;
        self.run(Job::Philox { items, blocks, out })
    }

    /// The Gumbel noise the race adds to each (row, column), written densely.
    fn gumbel_noise(&self, shape: Shape, rows: &Self::Buffer<RowParams>, noise: &mut Self::Buffer<f32>) -> Result<()> {
        let dense = Shape::dense(shape.batch, shape.vocab);
        check_rows::<Self>(dense, dense.elements(), rows)?;
        need("noise", Self::len(noise), dense.elements())?;
        self.run(Job::GumbelNoise { shape: dense, rows, noise })
    }

    /// Diagnostic: each row's float32 sum (NaN read as -inf, summed in an order that depends on
    /// the backend), from one read of every element with the launch shape and per-element
    /// loads of the sampling kernels. It samples nothing: it is the plain read whose bandwidth
    /// `benches/kernels.rs` measures, so each kernel's speed is stated as a fraction of what the
    /// same device reaches when it only reads.
    fn read_rows(&self, shape: Shape, logits: Logits<'_, Self>, sums: &mut Self::Buffer<f32>) -> Result<()> {
        shape.validate()?;
        need("logits", logits.len(), shape.elements())?;
        need("sums", Self::len(sums), shape.batch)?;
        self.run(Job::ReadRows { shape, logits, sums })
    }
}

impl<B: Backend> Diagnostics for B {}

pub(crate) fn check_rows<B: Backend + ?Sized>(
    shape: Shape,
    input_len: usize,
    rows: &B::Buffer<RowParams>,
) -> Result<()> {
    shape.validate()?;
    need("input", input_len, shape.elements())?;
    need("rows", B::len(rows), shape.batch)
}

/// The filter kernels sum fixed-point masses that must not overflow: rows of at most
/// [`crate::generated::FILTER_MAX_VOCAB`] tokens (2^23; the largest vocabularies are near 2^18).
fn check_filter_shape(shape: Shape) -> Result<()> {
    let most = crate::generated::FILTER_MAX_VOCAB;
    if shape.vocab > most {
        return Err(Error::Shape(format!("vocab {} exceeds the filter kernels' limit of {most}", shape.vocab)));
    }
    Ok(())
}

fn check_output<B: Backend + ?Sized>(shape: Shape, out: &Output<'_, B>) -> Result<()> {
    need("tokens", B::len(out.tokens), shape.batch)?;
    if let Some(lp) = &out.logprobs {
        need("logprobs", B::len(*lp), shape.batch)?;
    }
    if let Some(st) = &out.status {
        need("status", B::len(*st), shape.batch)?;
    }
    if let Some(p) = &out.passes {
        need("passes", B::len(*p), shape.batch)?;
    }
    Ok(())
}
