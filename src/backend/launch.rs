//! The one place that turns a [`Job`] into a launch: which kernel, which buffers in binding
//! order, which parameters. The GPU backends only execute the plan.

use crate::backend::{Backend, Input, Job, LogProbs, Logits, SeededMode};
use crate::error::{Error, Result};
use crate::kernels::{Binding, KernelId, KernelSource};
use crate::types::{Element, Shape};
use arrayvec::ArrayVec;

use crate::generated::{
    FLAG_ALLOWED, FLAG_CUT_HERE, FLAG_FILTERED_ONLY, FLAG_LOGPROBS, FLAG_MERGE, FLAG_NAN_AS_FINITE, FLAG_PASSES,
    FLAG_ROW_LIST, FLAG_SEEDED_ONLY, FLAG_STATUS, MAX_BUFFERS, MAX_STAGES, PARTS_SHIFT, PART_WORDS, SLOT_WORDS,
    STAGE_BITS, STAGE_SHIFT, TOP_K_SLOT_WORDS,
};

/// A backend whose buffers have a raw handle that a launch can bind.
pub(crate) trait Device: Backend {
    type Handle<'a>: Copy
    where
        Self: 'a;
    fn handle<'a, T: Element>(buf: &'a Self::Buffer<T>) -> Self::Handle<'a>;
}

/// A launch's buffers: at most as many as the kernel that binds the most.
pub(crate) type Bindings<H> = ArrayVec<Option<H>, MAX_BUFFERS>;

/// Buffers to bind by name.
type Named<H, const N: usize> = [(Binding, Option<H>); N];

/// A launch in backend-neutral terms.
#[derive(Clone)]
pub(crate) struct Launch<H> {
    pub kernel: &'static KernelSource,
    /// In binding order; `None` is an output the kernel will not write (no log-probabilities).
    /// A fixed-capacity list, so a launch allocates nothing. Filled by name with [`Launch::bind`].
    pub buffers: Bindings<H>,
    /// Bit `i`: slot `i` of `buffers` was bound.
    bound: u32,
    /// The first buffer bound by a name the kernel does not declare.
    stray: Option<Binding>,
    /// `batch, vocab, stride, flags`.
    pub params: [u32; 4],
    /// Rows (one workgroup each), or items for the per-item Philox kernel.
    pub work: Work,
    /// Whether it may run on a side stream beside the call's first launch ([`Split::side`]).
    pub side: bool,
}

impl<H: Copy> Launch<H> {
    /// A launch of `id` with nothing bound yet.
    fn new(id: KernelId, params: [u32; 4], work: Work) -> Self {
        let kernel = id.source();
        let buffers = kernel.bindings.iter().map(|_| None).collect();
        Launch { kernel, buffers, bound: 0, stray: None, params, work, side: false }
    }

    /// Binds `buffer` (`None`: an output the kernel is told not to write) to the kernel's
    /// binding called `name`. The logits come with the bitmask their reads apply: until a
    /// call's stage binds one ([`Launch::read_stage`]), the logits stand in for it, never read
    /// (the flag is clear).
    fn bind(&mut self, name: Binding, buffer: Option<H>) {
        if name == Binding::X && self.kernel.slot(Binding::Allowed).is_some() {
            self.bind(Binding::Allowed, buffer);
        }
        match self.kernel.slot(name) {
            Some(slot) => {
                self.buffers[slot] = buffer;
                self.bound |= 1 << slot;
            }
            None => {
                self.stray.get_or_insert(name);
            }
        }
    }

    fn with(mut self, named: impl IntoIterator<Item = (Binding, Option<H>)>) -> Self {
        for (name, buffer) in named {
            self.bind(name, buffer);
        }
        self
    }

    /// Binds the bitmask of a call's stage and sets the flags of what the kernel reads with the
    /// logits ([`AtRead`](crate::backend::AtRead)). Every launch of a
    /// sampling call reads logits, so each declares it.
    fn read_stage(&mut self, allowed: Option<H>, nan_as_finite: bool) {
        if allowed.is_some() {
            self.bind(Binding::Allowed, allowed);
            self.params[3] |= FLAG_ALLOWED;
        }
        if nan_as_finite {
            self.params[3] |= FLAG_NAN_AS_FINITE;
        }
    }

    /// The buffer bound to `name`.
    fn bound(&self, name: Binding) -> Option<H> {
        self.kernel.slot(name).and_then(|slot| self.buffers[slot])
    }

    /// Whether the host bound exactly the kernel's bindings: a kernel whose IR gained, lost or
    /// renamed a buffer without the host following fails every launch, not just a wrong read.
    fn checked(self) -> Result<Self> {
        let unbound = self.kernel.bindings.iter().enumerate().find(|(slot, _)| self.bound & 1 << slot == 0);
        let (binding, problem) = match (self.stray, unbound) {
            (Some(b), _) => (b, "the host binds a buffer it does not declare"),
            (None, Some((_, b))) => (*b, "the host leaves a buffer it declares unbound"),
            (None, None) => return Ok(self),
        };
        Err(Error::Binding { kernel: self.kernel.name, binding: binding.name(), problem })
    }
}

impl<H> Launch<H> {
    /// A launch over a row list that lists no row (the seeded or filter kernel of a step with no
    /// such row): it changes nothing, so a device that cannot run its kernel may leave it out
    /// (wgpu's portable devices do).
    #[cfg(feature = "wgpu")]
    pub fn visits_no_row(&self) -> bool {
        self.params[3] & FLAG_ROW_LIST != 0 && self.params[0] == 0
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Work {
    Rows(u32),
    Items(u32),
}

impl Work {
    /// Workgroups to launch with `block` invocations each, at most `max_groups` (every kernel
    /// loops over what its grid does not cover).
    pub fn groups(self, block: u32, max_groups: u32) -> u32 {
        let n = match self {
            Work::Rows(rows) => rows,
            Work::Items(items) => items.div_ceil(block),
        };
        n.clamp(1, max_groups)
    }
}

/// How a backend splits rows over workgroups (see [`parts`]).
pub(crate) struct Split<H> {
    /// The workgroups a launch aims at: about what the device holds resident at once.
    pub target_groups: u32,
    /// Invocations per workgroup.
    pub block: u32,
    /// The scratch of split and staged launches: [`scratch_words`] u32 for the job.
    pub partials: H,
    /// The split rows' arrival counters, and the seeded kernel's records after them:
    /// [`counter_words`] u32 for the job, zeroed when allocated; each call's last part of a
    /// row sets the row's counter back to 0 and clears the records it merged.
    pub counters: H,
    /// Whether filtered rows are split too: a launch per stage then (19), which pays where
    /// launches are cheap beside a row's passes (GPUs), not on a CPU adapter.
    pub split_filters: bool,
    /// Whether the device lacks what the filter kernels need (float64, 64-bit integers, 32 KiB
    /// of workgroup memory): then the filtered rows of a call with row lists (whose host
    /// refused seeded rows) take the portable filter kernel, each row whole.
    pub portable: bool,
    /// The scratch of a second stream, where the backend has one (CUDA): a `sample` call's
    /// seeded and filter launches bind it and run there, beside the plain launch, whose rows
    /// they never touch. A batch with one top-p row then waits for the longer of the two chains,
    /// not for their sum (`docs/cost-model.md`).
    pub side: Option<Scratch<H>>,
    /// The most workgroups of a one-read merge launch that is also the top-p cut's
    /// (`FLAG_CUT_HERE`): about the multiprocessors, where each part has one to itself, so the
    /// cut's read runs as fast in the merge's workgroups (one a multiprocessor, by its registers)
    /// as in the cut kernel's, and the call saves a launch. Beyond, the cut kernel's own launch.
    pub cut_here_groups: u32,
    /// Whether a launch that splits rows over workgroups is followed by its merge dispatch
    /// ([`KernelSource::merges`]; wgpu), rather than merging in the same launch (CUDA).
    pub merge_dispatch: bool,
}

/// The filter kernels of a device without float64, 64-bit integers or 32 KiB of workgroup
/// memory ([`Split::portable`]), by dtype: no other device launches them.
pub(crate) const PORTABLE_FILTERS: [KernelId; 3] =
    [KernelId::FilterPortableLogitsF32, KernelId::FilterPortableLogitsF16, KernelId::FilterPortableLogitsBf16];

/// Each invocation of a part of the seeded kernel from logits reads at least this many quads
/// of four columns, so a part's fixed costs (its reductions and its record) stay small beside
/// its reads.
const MIN_QUADS_PER_INVOCATION: u32 = 2;

/// Workgroups per row for the kernels that split rows by the batch (the argmax family, `sample`,
/// softmax and the filters' split sampling path) when `rows` rows of `vocab` columns are
/// launched: enough for them to fill `target_groups`, but no part shorter than one quad per
/// invocation. One when the rows alone fill the device; then no stage launch follows (the
/// argmax family's row is combined by its last part, in the same launch). One quad, not the
/// seeded kernel's two: a row of 151936 gets 74 parts at batch 1, not 37, so half the H200's
/// SMs read it (the race there: 5.8 -> 5.0 µs modelled, the launch's floor).
pub(crate) fn parts(rows: usize, vocab: usize, target_groups: u32, block: u32) -> u32 {
    (target_groups / (rows as u32).max(1)).min((vocab as u32 / (block * 4)).max(1)).max(1)
}

/// Workgroups per row of the seeded kernel from logits: as many as the row's length allows
/// ([`MIN_QUADS_PER_INVOCATION`] quads per invocation), whatever the batch, since the row's
/// float32 sum (and so, at a near-tie, its token) rounds as its split does: a request gets the
/// same token in every batch. A split row is still one launch: its last part to finish merges
/// the parts' records, as the argmax family's does.
pub(crate) fn seeded_parts(vocab: usize, block: u32) -> u32 {
    (vocab as u32 / (block * 4 * MIN_QUADS_PER_INVOCATION)).max(1)
}

/// The rows of a job's seeded launch from logits that are split over workgroups, and the parts
/// each gets; `None` where it has no such launch or its rows are whole.
fn seeded_split_rows<B: Backend + ?Sized>(job: &Job<'_, B>, block: u32) -> Option<(usize, u32)> {
    let (rows, vocab) = match job {
        Job::SeededLogits { shape, .. } => (shape.batch, shape.vocab),
        Job::Sample { shape, listed, .. } => (listed.map_or(shape.batch, |l| l.seeded.1), shape.vocab),
        _ => return None,
    };
    Some((rows, seeded_parts(vocab, block))).filter(|&(_, parts)| parts > 1)
}

/// The parts of each of `rows` rows in the filter kernels' own plan (1: the one-workgroup
/// kernel; more: the staged kernel): at most the seeded kernel's, as each stage of the split
/// filters sums every part's counts per digit, so parts of one quad an invocation cost them
/// more than they read faster (a T4 at batch 1 from probabilities: 63.3 -> 79.8 µs, modelled).
fn staged_parts(rows: usize, vocab: usize, target_groups: u32, block: u32, split: bool) -> u32 {
    let parts = parts(rows, vocab, target_groups, block).min(seeded_parts(vocab, block));
    if split {
        parts
    } else {
        1
    }
}

/// The shape of a filter job (or `sample`'s) and how many rows its filter launch visits (with
/// row lists, the one-read path's).
fn filter_rows<'j, B: Backend + ?Sized>(job: &'j Job<'_, B>) -> Option<(&'j Shape, usize)> {
    match job {
        Job::Filter { shape, .. } => Some((shape, shape.batch)),
        Job::Sample { shape, listed, .. } => Some((shape, listed.map_or(shape.batch, |l| l.filtered.1))),
        _ => None,
    }
}

/// The rows of `sample`'s row lists that take the filter kernels' own plan, and their parts.
fn off_path_parts<B: Backend + ?Sized>(
    job: &Job<'_, B>,
    target_groups: u32,
    block: u32,
    split: bool,
) -> Option<(usize, u32)> {
    match job {
        Job::Sample { shape, listed: Some(l), .. } if l.off_path.1 > 0 => {
            let rows = l.off_path.1;
            Some((rows, staged_parts(rows, shape.vocab, target_groups, block, split)))
        }
        _ => None,
    }
}

/// Which of a job's launches a scratch serves: all of them, or, where a `sample` call's seeded
/// and filter launches run on a side stream ([`Split::side`]), the first launch's or the rest's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Share {
    All,
    First,
    Rest,
}

/// The u32 of scratch a job needs: a record per part of a split launch (never more parts in
/// all than `target_groups`), or a slot per (row, part) of a staged one, of the launches
/// `share` names. The backends keep one buffer and grow it to the largest job they have run.
fn scratch_words<B: Backend + ?Sized>(
    job: &Job<'_, B>,
    target_groups: u32,
    block: u32,
    split_filters: bool,
    share: Share,
) -> usize {
    let records = if share == Share::Rest { 0 } else { target_groups.max(1) as usize * PART_WORDS };
    if share == Share::First {
        return records;
    }
    let slots = |plan: Option<(usize, u32)>| match plan {
        Some((rows, parts)) if parts > 1 => rows * parts as usize,
        _ => 0,
    };
    let slots = slots(off_path_parts(job, target_groups, block, split_filters));
    let one_read = filter_rows(job).map_or(0, |(shape, rows)| one_read_words(rows, shape.vocab).unwrap_or(0));
    records.max(slots * SLOT_WORDS).max(one_read).max(1)
}

/// The most scratch the one-read path takes: 128 MiB, the storage binding every wgpu adapter
/// allows (WebGPU's least `maxStorageBufferBindingSize`). 256 rows of 256,000 columns take 85 MiB
/// since a top-p part's record holds its fine grid's counts (1,317 words a part).
const ONE_READ_MAX_WORDS: usize = 1 << 25;

/// The scratch words of the one-read path over `rows` rows of `vocab` columns (a record per
/// part, sized for the largest top-k), or `None` where that exceeds [`ONE_READ_MAX_WORDS`]:
/// then the batch (a shape, never the rows' parameters, decides) takes the filter kernels.
fn one_read_words(rows: usize, vocab: usize) -> Option<usize> {
    Some(rows * crate::types::one_read_parts(vocab) as usize * TOP_K_SLOT_WORDS).filter(|&w| w <= ONE_READ_MAX_WORDS)
}

/// The u32 of the split rows' arrival counters a job needs (one per row of a split launch,
/// indexed by the row's place in the batch or in its row list). The argmax family splits rows
/// only when each gets at least two parts, so at most `target_groups / 2` of them; the seeded
/// kernel from logits splits every row by its length ([`seeded_parts`]), so as many as it has,
/// and keeps its parts' records after them (it binds no `partials`, to stay within eight
/// storage buffers); the one-read path's parts count themselves in on one per filtered row.
/// Of the launches `share` names.
fn counter_words<B: Backend + ?Sized>(job: &Job<'_, B>, target_groups: u32, block: u32, share: Share) -> usize {
    let split = if share == Share::Rest { 0 } else { target_groups as usize / 2 };
    if share == Share::First {
        return split.max(1);
    }
    let seeded = seeded_split_rows(job, block).map_or(0, |(rows, parts)| rows + rows * parts as usize * PART_WORDS);
    let filtered = filter_rows(job).map_or(0, |(_, rows)| rows);
    split.max(seeded).max(filtered).max(1)
}

/// A backend's scratch of split and staged launches, kept from call to call and grown to the
/// largest job run so far.
#[derive(Clone, Copy)]
pub(crate) struct Scratch<T> {
    /// The part records and slots ([`scratch_words`]).
    pub partials: T,
    /// The split rows' arrival counters and the seeded kernel's records ([`counter_words`]):
    /// zeroed when allocated and left zeroed by every call (each row's last part sets its
    /// counter back to 0 and clears the records it merged), so never cleared.
    pub counters: T,
}

impl<T> Scratch<T> {
    /// Replaces either buffer that holds fewer u32 (`len`) than the launches of `job` that
    /// `share` names need with a new one from `zeros(name, words)`, which must be zeroed (the
    /// counters' one clearing).
    #[allow(clippy::too_many_arguments)]
    pub fn fit<B: Backend + ?Sized>(
        &mut self,
        job: &Job<'_, B>,
        target_groups: u32,
        block: u32,
        split_filters: bool,
        share: Share,
        len: impl Fn(&T) -> usize,
        mut zeros: impl FnMut(&str, usize) -> Result<T>,
    ) -> Result<()> {
        let need = scratch_words(job, target_groups, block, split_filters, share);
        if len(&self.partials) < need {
            self.partials = zeros("scratch", need)?;
        }
        let need = counter_words(job, target_groups, block, share);
        if len(&self.counters) < need {
            self.counters = zeros("counters", need)?;
        }
        Ok(())
    }
}

/// The most launches one job takes: the plain sampler, the seeded kernel, the one-read path's
/// three, then a staged kernel's stages; with merge dispatches, one after each of the first four.
pub(crate) const MAX_LAUNCHES: usize = MAX_STAGES + 9;

// A staged kernel's stage fits its flag bits.
const _: () = assert!(MAX_STAGES <= STAGE_BITS as usize + 1);

/// The launches of one job, in the order they must run: one; a staged kernel's stages; or the
/// plain sampler's launch then the seeded kernel's and the filter kernel's.
pub(crate) type Plan<H> = ArrayVec<Launch<H>, MAX_LAUNCHES>;

/// The streams a plan is queued on: where the backend has a side stream ([`Split::side`]), the
/// caller's and the side one (CUDA's), or a test's recorder.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) trait Streams<H> {
    /// The side stream waits for what the caller's stream has queued so far.
    fn fork(&mut self) -> Result<()>;
    /// The caller's stream waits for what the side stream has queued so far.
    fn join(&mut self) -> Result<()>;
    /// Queues `launch` on the side stream where it is marked so ([`Launch::side`]), else on the
    /// caller's.
    fn launch(&mut self, launch: Launch<H>) -> Result<()>;
}

/// Queues `plan` in order. A plan with side launches forks before its first launch: the side
/// stream then waits for what the caller queued before the call (the logits, the row records),
/// not for the plain launch, and the two run side by side. It joins after the last launch, even
/// after a failed one, so the caller's stream orders everything that was queued.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn queue<H>(plan: Plan<H>, streams: &mut impl Streams<H>) -> Result<()> {
    let forked = plan.iter().any(|l| l.side);
    if forked {
        streams.fork()?;
    }
    let launched = plan.into_iter().try_for_each(|launch| streams.launch(launch));
    if forked {
        streams.join()?;
    }
    launched
}

/// The argmax family's launch (or the plain sampler's), the part records bound and its rows
/// split as [`parts`] says.
fn split_rows<H: Copy>(mut first: Launch<H>, shape: Shape, split: &Split<H>) -> Plan<H> {
    first.bind(Binding::Partials, Some(split.partials));
    first.spread(shape.batch, parts(shape.batch, shape.vocab, split.target_groups, split.block), split.counters)
}

/// The kernel of `[f32, f16, bf16]` that reads `logits`.
fn by_dtype<B: Backend + ?Sized>(ids: [KernelId; 3], logits: &Logits<'_, B>) -> KernelId {
    match logits {
        Logits::F32(_) => ids[0],
        Logits::F16(_) => ids[1],
        Logits::Bf16(_) => ids[2],
    }
}

fn logits_handle<'a, B: Device + ?Sized>(logits: &Logits<'a, B>) -> B::Handle<'a> {
    match logits {
        Logits::F32(b) => B::handle(*b),
        Logits::F16(b) => B::handle(*b),
        Logits::Bf16(b) => B::handle(*b),
    }
}

/// The kernels' `batch, vocab, stride, flags` (the shape was validated to fit in 32 bits).
fn params(shape: Shape, flags: u32) -> [u32; 4] {
    [shape.batch as u32, shape.vocab as u32, shape.stride as u32, flags]
}

/// A sampling launch over rows: `id` with `inputs`, then the outputs of `out` (tokens,
/// log-probabilities and status, all but the tokens where asked, and with `passes` the pass
/// counts of a filter or seeded kernel) and the flags that tell the kernel which to write.
fn sampling<'a, B: Device + ?Sized, const N: usize>(
    id: KernelId,
    shape: Shape,
    inputs: Named<B::Handle<'a>, N>,
    out: &'a crate::backend::Output<'a, B>,
    extra_flags: u32,
    passes: bool,
) -> Launch<B::Handle<'a>> {
    let lp = out.logprobs.as_deref().map(|b| B::handle(b));
    let status = out.status.as_deref().map(|b| B::handle(b));
    let mut flags = if lp.is_some() { FLAG_LOGPROBS } else { 0 } | if status.is_some() { FLAG_STATUS } else { 0 };
    let outputs =
        [(Binding::Tokens, Some(B::handle(&*out.tokens))), (Binding::Logprobs, lp), (Binding::Status, status)];
    let mut launch = Launch::new(id, params(shape, 0), Work::Rows(shape.batch as u32)).with(inputs).with(outputs);
    if passes {
        let passes = out.passes.as_deref().map(|b| B::handle(b));
        flags |= if passes.is_some() { FLAG_PASSES } else { 0 };
        launch.bind(Binding::Passes, passes);
    }
    launch.params[3] = flags | extra_flags;
    launch
}

impl<'a, H: Copy> Launch<H> {
    /// The launches of `job`, the split kernels' rows spread as `split` says; an error where a
    /// launch does not bind exactly what its kernel declares.
    pub fn plan<B: Device<Handle<'a> = H> + ?Sized>(job: &'a Job<'a, B>, split: &Split<H>) -> Result<Plan<H>> {
        let first = Self::from_job(job);
        let plan = match job {
            Job::Sample { shape, logits, rows, out, listed, at_read } => {
                // The plain rows, then the seeded kernel's launch over the seeded rows and the
                // filter kernel's over the filtered rows; a list the host knows to be empty
                // launches nothing (without lists, every row may be either).
                let handle = |(list, count): (&'a B::Buffer<u32>, usize)| (B::handle(list), count);
                let inputs = [(Binding::X, Some(logits_handle(logits))), (Binding::Rows, Some(B::handle(*rows)))];
                let seeded = by_dtype(
                    [KernelId::SeededLogitsF32, KernelId::SeededLogitsF16, KernelId::SeededLogitsBf16],
                    logits,
                );
                let seeded = sampling::<B, 2>(seeded, *shape, inputs, out, FLAG_SEEDED_ONLY, true);
                let filter = by_dtype(
                    [KernelId::FilterLogitsF32, KernelId::FilterLogitsF16, KernelId::FilterLogitsBf16],
                    logits,
                );
                let filter = sampling::<B, 2>(filter, *shape, inputs, out, FLAG_FILTERED_ONLY, true);
                let filtered = listed.map_or(shape.batch, |l| l.filtered.1);
                let mut plan = split_rows(first, *shape, split);
                // The launches after the plain one bind the side stream's scratch where there is
                // one, and are marked to run there (below).
                let on_side = split.side.is_some();
                let side_split;
                let split = match split.side {
                    Some(side) => {
                        side_split = Split { partials: side.partials, counters: side.counters, side: None, ..*split };
                        &side_split
                    }
                    None => split,
                };
                let seeded_rows = listed.map_or(shape.batch, |l| l.seeded.1);
                let seeded = seeded.with_list(listed.map(|l| handle(l.seeded)));
                if seeded_rows > 0 {
                    plan.extend(seeded.seeded_split(seeded_rows, shape.vocab, split));
                }
                if let (true, Some(l)) = (split.portable, listed) {
                    let portable = sampling::<B, 2>(
                        by_dtype(PORTABLE_FILTERS, logits),
                        *shape,
                        inputs,
                        out,
                        FLAG_FILTERED_ONLY,
                        true,
                    );
                    for list in [l.filtered, l.off_path].into_iter().filter(|&(_, n)| n > 0) {
                        plan.push(portable.clone().with_list(Some(handle(list))));
                    }
                } else {
                    let cut = listed.is_none_or(|l| l.top_p_cut);
                    let on_path = filter.clone().with_list(listed.map(|l| handle(l.filtered)));
                    if filtered > 0 {
                        plan.extend(on_path.on_path(filtered, shape.vocab, cut, split));
                    }
                    // The rows the path does not take: the filter kernels' own plan over their
                    // list.
                    if let (Some(l), Some((rows, parts))) =
                        (listed, off_path_parts(job, split.target_groups, split.block, split.split_filters))
                    {
                        let off_path = filter.with_list(Some(handle(l.off_path)));
                        plan.extend(off_path.staged(rows, parts, split));
                    }
                }
                if on_side {
                    plan.iter_mut().skip(1).for_each(|l| l.side = true);
                }
                let allowed = at_read.allowed.map(|m| B::handle(m));
                plan.iter_mut().for_each(|l| l.read_stage(allowed, at_read.nan_as_finite));
                plan
            }
            Job::Greedy { shape, .. } | Job::RaceLogits { shape, .. } | Job::RaceProbs { shape, .. } => {
                split_rows(first, *shape, split)
            }
            Job::SeededLogits { shape, .. } => first.seeded_split(shape.batch, shape.vocab, split),
            Job::Softmax { shape, .. } => {
                // Rows split as the argmax family's: the parts' (max, sum) pairs, then the write.
                let mut first = first;
                first.bind(Binding::Partials, Some(split.partials));
                let parts = parts(shape.batch, shape.vocab, split.target_groups, split.block);
                first.split_stages(shape.batch, parts)
            }
            Job::Filter { shape, .. } => first.on_path(shape.batch, shape.vocab, true, split),
            _ => std::iter::once(first).collect(),
        };
        let mut out = Plan::new();
        for launch in plan {
            let merge = (split.merge_dispatch && launch.kernel.merges && launch.splits_rows()).then(|| {
                let mut merge = launch.clone();
                merge.params[3] |= FLAG_MERGE;
                merge
            });
            out.push(launch.checked()?);
            out.extend(merge.map(Launch::checked).transpose()?);
        }
        Ok(out)
    }

    /// Whether the launch gives a row more than one workgroup: the rows it visits are the
    /// first parameter, its grid covers more.
    fn splits_rows(&self) -> bool {
        matches!(self.work, Work::Rows(groups) if groups > self.params[0])
    }

    /// With `listed` (a row list and its length), a filter or seeded launch visits only the rows
    /// listed. Without it, the row records stand in for the list (never read; a read-only
    /// binding, which wgpu will not share with an unused writable output).
    fn with_list(mut self, listed: Option<(H, usize)>) -> Self {
        let rows = self.bound(Binding::Rows);
        self.bind(Binding::Listed, listed.map_or(rows, |(list, _)| Some(list)));
        if let Some((_, count)) = listed {
            self.params[0] = count as u32;
            self.params[3] |= FLAG_ROW_LIST;
            self.work = Work::Rows(count as u32);
        }
        self
    }

    /// A filter sampling launch over `rows` rows on the one-read top-k path (`cut`: whether the
    /// top-p cut is needed), or where its scratch would not fit them, the kernel with each row
    /// whole. Never split: rows that hash ranks may be among them, and a split row cannot rank
    /// its set.
    fn on_path(self, rows: usize, vocab: usize, cut: bool, split: &Split<H>) -> Plan<H> {
        self.clone().one_read(rows, vocab, cut, split).unwrap_or_else(|| std::iter::once(self).collect())
    }

    /// A filter sampling launch over the `rows` rows of the filter kernels' own plan, as it is
    /// with one part each, else split in `parts` (the staged kernel's launches, one per stage
    /// with the stage in its flags, over `rows x parts` workgroups, the scratch bound last).
    fn staged(self, rows: usize, parts: u32, split: &Split<H>) -> Plan<H> {
        if parts <= 1 {
            return std::iter::once(self).collect();
        }
        let staged_id = match self.kernel.id {
            KernelId::FilterLogitsF32 => KernelId::FilterSplitLogitsF32,
            KernelId::FilterLogitsF16 => KernelId::FilterSplitLogitsF16,
            KernelId::FilterLogitsBf16 => KernelId::FilterSplitLogitsBf16,
            KernelId::FilterProbs => KernelId::FilterSplitProbs,
            // Only the filter kernels are staged; any other is launched whole.
            _ => return std::iter::once(self).collect(),
        };
        // The staged kernel binds what the one-workgroup kernel does, then the scratch.
        let mut staged = Launch::new(staged_id, self.params, Work::Rows(rows as u32 * parts));
        for (name, buffer) in self.kernel.bindings.iter().zip(&self.buffers) {
            staged.bind(*name, *buffer);
        }
        staged.stray = self.stray.or(staged.stray);
        staged.bind(Binding::Partials, Some(split.partials));
        staged.split_stages(rows, parts)
    }

    /// A filter sampling launch as the one-read top-k path (`filter_top_k.rs`): the
    /// parts launch over `rows x parts` workgroups (a top-p row's last part counts itself in on
    /// the row's counter); with `cut`, the top-p cut (`filter_top_p.rs`) over `rows x parts`,
    /// each part's second read; then the merge, one workgroup per row, which takes the filter
    /// kernel's place (it binds what that kernel does, then the scratch, and runs its body on the
    /// rows the candidates or the cut do not decide). Where the cut's parts number at most
    /// [`Split::cut_here_groups`], the merge launch does the cut too (`FLAG_CUT_HERE`, over
    /// `rows x parts`): two launches. `None` for any other launch.
    fn one_read(self, rows: usize, vocab: usize, cut: bool, split: &Split<H>) -> Option<Plan<H>> {
        use KernelId::*;
        let (parts_id, merge_id, cut_id) = match self.kernel.id {
            FilterLogitsF32 => (TopKPartsLogitsF32, TopKMergeLogitsF32, TopPCutLogitsF32),
            FilterLogitsF16 => (TopKPartsLogitsF16, TopKMergeLogitsF16, TopPCutLogitsF16),
            FilterLogitsBf16 => (TopKPartsLogitsBf16, TopKMergeLogitsBf16, TopPCutLogitsBf16),
            FilterProbs => (TopKPartsProbs, TopKMergeProbs, TopPCutProbs),
            _ => return None,
        };
        one_read_words(rows, vocab)?;
        let parts = crate::types::one_read_parts(vocab);
        let mut params = self.params;
        params[3] |= parts << PARTS_SHIFT;
        let mut merge = Launch::new(merge_id, params, Work::Rows(rows as u32));
        for (name, buffer) in self.kernel.bindings.iter().zip(&self.buffers) {
            merge.bind(*name, *buffer);
        }
        merge.stray = self.stray.or(merge.stray);
        merge.bind(Binding::Partials, Some(split.partials));
        let over_parts = |id: KernelId| {
            let mut l = Launch::new(id, params, Work::Rows(rows as u32 * parts));
            for name in [Binding::X, Binding::Rows, Binding::Listed, Binding::Partials] {
                l.bind(name, merge.bound(name));
            }
            l
        };
        let mut first = over_parts(parts_id);
        first.bind(Binding::Counters, Some(split.counters));
        let here = cut && rows as u64 * parts as u64 <= split.cut_here_groups as u64;
        let cut = (cut && !here).then(|| over_parts(cut_id));
        if here {
            merge.params[3] |= FLAG_CUT_HERE;
            merge.work = Work::Rows(rows as u32 * parts);
        }
        Some(std::iter::once(first).chain(cut).chain([merge]).collect())
    }

    /// The seeded kernel from logits over `rows` rows, split as [`seeded_parts`] says (its
    /// records beside the counters).
    fn seeded_split(self, rows: usize, vocab: usize, split: &Split<H>) -> Plan<H> {
        self.spread(rows, seeded_parts(vocab, split.block), split.counters)
    }

    /// Binds the row counters to a split kernel's launch over `rows` rows and, when they get
    /// more than one part, widens its grid to `rows x parts`: each row's last part to finish
    /// combines the parts' records and writes the row's results in the same launch.
    fn spread(mut self, rows: usize, parts: u32, counters: H) -> Plan<H> {
        self.bind(Binding::Counters, Some(counters));
        if parts > 1 {
            self.params[3] |= parts << PARTS_SHIFT;
            self.work = Work::Rows(rows as u32 * parts);
        }
        std::iter::once(self).collect()
    }

    /// A staged kernel's launches over `rows` rows in `parts` each (one launch when `parts` is
    /// 1): one per stage, with the stage and the parts in the flags, over `rows x parts`
    /// workgroups.
    fn split_stages(mut self, rows: usize, parts: u32) -> Plan<H> {
        if parts <= 1 {
            return std::iter::once(self).collect();
        }
        self.params[3] |= parts << PARTS_SHIFT;
        self.work = Work::Rows(rows as u32 * parts);
        (0..self.kernel.stages)
            .map(|stage| {
                let mut l = self.clone();
                l.params[3] |= stage << STAGE_SHIFT;
                l
            })
            .collect()
    }

    fn from_job<B: Device<Handle<'a> = H> + ?Sized>(job: &'a Job<'a, B>) -> Self {
        let rows = |shape: Shape| Work::Rows(shape.batch as u32);
        let items = |n: usize| ([n as u32, 0, 0, 0], Work::Items(n as u32));
        match job {
            Job::Softmax { shape, logits, rows: r, probs } => {
                let id = by_dtype([KernelId::SoftmaxF32, KernelId::SoftmaxF16, KernelId::SoftmaxBf16], logits);
                Launch::new(id, params(*shape, 0), rows(*shape)).with([
                    (Binding::X, Some(logits_handle(logits))),
                    (Binding::Rows, Some(B::handle(*r))),
                    (Binding::Probs, Some(B::handle(&**probs))),
                ])
            }
            Job::Greedy { shape, logits, out } => {
                let id = by_dtype([KernelId::GreedyF32, KernelId::GreedyF16, KernelId::GreedyBf16], logits);
                sampling::<B, 1>(id, *shape, [(Binding::X, Some(logits_handle(logits)))], out, 0, false)
            }
            Job::RaceLogits { shape, logits, rows: r, out } => {
                let id = by_dtype([KernelId::RaceLogitsF32, KernelId::RaceLogitsF16, KernelId::RaceLogitsBf16], logits);
                let inputs = [(Binding::X, Some(logits_handle(logits))), (Binding::Rows, Some(B::handle(*r)))];
                sampling::<B, 2>(id, *shape, inputs, out, 0, false)
            }
            Job::RaceProbs { shape, probs, rows: r, out } => {
                let inputs = [(Binding::X, Some(B::handle(*probs))), (Binding::Rows, Some(B::handle(*r)))];
                sampling::<B, 2>(KernelId::RaceProbs, *shape, inputs, out, 0, false)
            }
            Job::Seeded { shape, logprobs, rows: r, mode, out } => {
                let (id, lp) = match (mode, logprobs) {
                    (SeededMode::Float64, LogProbs::F64(b)) => (KernelId::SeededF64, B::handle(*b)),
                    (SeededMode::Float64, LogProbs::F32(b)) => (KernelId::SeededF32, B::handle(*b)),
                    (SeededMode::Screened, LogProbs::F64(b)) => (KernelId::SeededScreenedF64, B::handle(*b)),
                    (SeededMode::Screened, LogProbs::F32(b)) => (KernelId::SeededScreenedF32, B::handle(*b)),
                    (SeededMode::Float64, LogProbs::LogOf(b)) => (KernelId::SeededProbs, B::handle(*b)),
                    (SeededMode::Screened, LogProbs::LogOf(b)) => (KernelId::SeededScreenedProbs, B::handle(*b)),
                };
                let inputs = [(Binding::Lp, Some(lp)), (Binding::Rows, Some(B::handle(*r)))];
                sampling::<B, 2>(id, *shape, inputs, out, 0, false)
            }
            Job::SeededLogits { shape, logits, rows: r, out } => {
                let ids = [KernelId::SeededLogitsF32, KernelId::SeededLogitsF16, KernelId::SeededLogitsBf16];
                let inputs = [(Binding::X, Some(logits_handle(logits))), (Binding::Rows, Some(B::handle(*r)))];
                sampling::<B, 2>(by_dtype(ids, logits), *shape, inputs, out, 0, true).with_list(None)
            }
            // The plain sampler, which leaves the seeded and filtered rows to the launches `plan`
            // adds.
            Job::Sample { shape, logits, rows: r, out, .. } => {
                let id = by_dtype([KernelId::SampleF32, KernelId::SampleF16, KernelId::SampleBf16], logits);
                let inputs = [(Binding::X, Some(logits_handle(logits))), (Binding::Rows, Some(B::handle(*r)))];
                sampling::<B, 2>(id, *shape, inputs, out, 0, false)
            }
            Job::Filter { shape, input, rows: r, out } => {
                let (id, x) = match input {
                    Input::Logits(l) => {
                        let ids = [KernelId::FilterLogitsF32, KernelId::FilterLogitsF16, KernelId::FilterLogitsBf16];
                        (by_dtype(ids, l), logits_handle(l))
                    }
                    Input::Probs(p) => (KernelId::FilterProbs, B::handle(*p)),
                };
                let inputs = [(Binding::X, Some(x)), (Binding::Rows, Some(B::handle(*r)))];
                sampling::<B, 2>(id, *shape, inputs, out, 0, true).with_list(None)
            }
            Job::MaskLogits { shape, logits, rows: r, masked } => {
                let id = by_dtype([KernelId::MaskLogitsF32, KernelId::MaskLogitsF16, KernelId::MaskLogitsBf16], logits);
                Launch::new(id, params(*shape, 0), rows(*shape)).with([
                    (Binding::X, Some(logits_handle(logits))),
                    (Binding::Rows, Some(B::handle(*r))),
                    (Binding::Out, Some(B::handle(&**masked))),
                ])
            }
            Job::RenormProbs { shape, probs, rows: r, renormed } => {
                Launch::new(KernelId::RenormProbs, params(*shape, 0), rows(*shape)).with([
                    (Binding::X, Some(B::handle(*probs))),
                    (Binding::Rows, Some(B::handle(*r))),
                    (Binding::Out, Some(B::handle(&**renormed))),
                ])
            }
            Job::Murmur { items: n, words, out } => {
                let (p, work) = items(*n);
                Launch::new(KernelId::Murmur3, p, work)
                    .with([(Binding::Input, Some(B::handle(*words))), (Binding::Output, Some(B::handle(&**out)))])
            }
            Job::LogF64 { items: n, x, out } => {
                let (p, work) = items(*n);
                Launch::new(KernelId::LogF64, p, work)
                    .with([(Binding::Input, Some(B::handle(*x))), (Binding::Output, Some(B::handle(&**out)))])
            }
            Job::Philox { items: n, blocks, out } => {
                let (p, work) = items(*n);
                Launch::new(KernelId::Philox4x3210, p, work)
                    .with([(Binding::Input, Some(B::handle(*blocks))), (Binding::Output, Some(B::handle(&**out)))])
            }
            Job::GumbelNoise { shape, rows: r, noise } => {
                Launch::new(KernelId::GumbelNoise, params(*shape, 0), rows(*shape))
                    .with([(Binding::Rows, Some(B::handle(*r))), (Binding::Noise, Some(B::handle(&**noise)))])
            }
            Job::ReadRows { shape, logits, sums } => {
                let id = by_dtype([KernelId::ReadRowsF32, KernelId::ReadRowsF16, KernelId::ReadRowsBf16], logits);
                Launch::new(id, params(*shape, 0), rows(*shape))
                    .with([(Binding::X, Some(logits_handle(logits))), (Binding::Sums, Some(B::handle(&**sums)))])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Every job the host plans, through the public methods that build them, on a backend that
    //! only plans: each launch must bind exactly what its generated kernel declares, whether or
    //! not a test runs that kernel on a device.

    use super::*;
    use crate::backend::{AtRead, Diagnostics, Output, RowLists};
    use crate::types::{Order, RowParams};
    use crate::CpuBackend;
    use half::{bf16, f16};

    /// Plans each job it is given, with rows whole and with rows split (split and staged
    /// launches), and keeps nothing.
    struct Planner;

    impl crate::backend::Sealed for Planner {}

    /// Host memory as the CPU backend keeps it.
    impl Backend for Planner {
        type Buffer<T: Element> = Vec<T>;
        fn describe(&self) -> String {
            "planner".into()
        }
        fn upload_unchecked<T: Element>(&self, data: &[T]) -> Result<Vec<T>> {
            CpuBackend.upload_unchecked(data)
        }
        fn zeros<T: Element>(&self, len: usize) -> Result<Vec<T>> {
            CpuBackend.zeros(len)
        }
        unsafe fn write_unchecked<T: Element>(&self, buf: &mut Vec<T>, data: &[T]) -> Result<()> {
            // SAFETY: the caller's contract, which is the CPU backend's.
            unsafe { CpuBackend.write_unchecked(buf, data) }
        }
        fn download<T: Element>(&self, buf: &Vec<T>) -> Result<Vec<T>> {
            CpuBackend.download(buf)
        }
        fn len<T: Element>(buf: &Vec<T>) -> usize {
            CpuBackend::len(buf)
        }
        fn run(&self, job: Job<'_, Self>) -> Result<()> {
            // Whole and split rows (with the merge launch doing the cut where it may), and a
            // portable device's plan.
            let plans = [(1, false, false, 0), (4096, true, false, 4096), (1, false, true, 0)];
            for (target_groups, split_filters, portable, cut_here_groups) in plans {
                let (partials, counters) = (usize::MAX, usize::MAX - 1);
                let split = Split {
                    target_groups,
                    block: 32,
                    partials,
                    counters,
                    split_filters,
                    portable,
                    side: None,
                    cut_here_groups,
                    merge_dispatch: false,
                };
                let plan = Launch::plan(&job, &split)?;
                assert!(!plan.is_empty());
            }
            Ok(())
        }
    }

    impl Device for Planner {
        type Handle<'a> = usize;
        fn handle<T: Element>(buf: &Vec<T>) -> usize {
            buf.as_ptr() as usize
        }
    }

    /// A device as large as an H200 (132 SMs, three blocks of 512 each) with one stream: the
    /// part records at handle 1, the counters at 2.
    fn h200_split() -> Split<usize> {
        Split {
            target_groups: 396,
            block: 512,
            partials: 1,
            counters: 2,
            split_filters: true,
            portable: false,
            side: None,
            cut_here_groups: 132,
            merge_dispatch: false,
        }
    }

    #[test]
    fn every_launch_binds_exactly_what_its_kernel_declares() {
        let b = Planner;
        let shape = Shape::dense(2, 4096);
        let n = shape.elements();
        let (x32, x16, xb) = (vec![0.0f32; n], vec![f16::ZERO; n], vec![bf16::ZERO; n]);
        let filtered = RowParams::new(1.0, 7, 0).with_top_k(5);
        let rows = vec![filtered, RowParams::seeded(1.0, 3, 0)];
        let (lp64, list) = (vec![0.0f64; n], vec![0u32; shape.batch]);
        let (mut t, mut lp, mut st, mut ps) = (vec![0u32; 2], vec![0.0f32; 2], vec![0u32; 2], vec![0u32; 2]);
        let mut dense = vec![0.0f32; n];
        // Every output asked for, so every optional binding is bound.
        macro_rules! out {
            () => {
                Output::new(&mut t).with_logprobs(&mut lp).with_status(&mut st).with_passes(&mut ps)
            };
        }
        for logits in [Logits::F32(&x32), Logits::F16(&x16), Logits::Bf16(&xb)] {
            // Both filter plans: the one-read path's and the filter kernels' own.
            let listed = RowLists { seeded: (&list, 1), filtered: (&list, 1), off_path: (&list, 1), top_p_cut: true };
            b.softmax(shape, logits, &rows, &mut dense).unwrap();
            b.greedy(shape, logits, out!()).unwrap();
            b.race_from_logits(shape, logits, &rows, out!()).unwrap();
            b.seeded_from_logits(shape, logits, &rows, out!()).unwrap();
            b.sample(shape, logits, &rows, out!()).unwrap();
            b.run(crate::backend::sample_job(shape, logits, &rows, out!(), Some(listed), AtRead::none()).unwrap())
                .unwrap();
            b.sample_filtered(shape, Input::Logits(logits), &rows, out!()).unwrap();
            b.mask_logits(shape, logits, &rows, &mut dense).unwrap();
            b.read_rows(shape, logits, &mut vec![0.0; 2]).unwrap();
        }
        b.race_from_probs(shape, &x32, &rows, out!()).unwrap();
        b.sample_filtered(shape, Input::Probs(&x32), &rows, out!()).unwrap();
        b.renorm_probs(shape, &x32, &rows, &mut dense).unwrap();
        for mode in [SeededMode::Float64, SeededMode::Screened] {
            b.seeded(shape, LogProbs::F64(&lp64), &rows, mode, out!()).unwrap();
            b.seeded(shape, LogProbs::F32(&x32), &rows, mode, out!()).unwrap();
            b.seeded(shape, LogProbs::LogOf(&x32), &rows, mode, out!()).unwrap();
        }
        b.gumbel_noise(shape, &rows, &mut dense).unwrap();
        b.murmur3(2, &vec![0; 8], &mut vec![0; 2]).unwrap();
        b.philox(2, &vec![0; 12], &mut vec![0; 8]).unwrap();
        b.log_f64(2, &vec![1.0; 2], &mut vec![0.0; 2]).unwrap();
    }
    /// The argmax family at batch 1 on a device as large as an H200 (132 SMs, three blocks of
    /// 512 each): the row is split over many workgroups, and it is still one launch, which
    /// binds the part records and the counters; the parts combine the row themselves.
    #[test]
    fn a_split_row_is_one_launch() {
        let shape = Shape::dense(1, 151_936);
        let (x, rows) = (vec![0.0f32; shape.elements()], vec![RowParams::new(0.8, 1, 0)]);
        let (mut t, mut lp) = (vec![0u32; 1], vec![0.0f32; 1]);
        let split = h200_split();
        let want = parts(1, shape.vocab, 396, 512);
        assert!(want > 1, "the row must be split for this test to mean anything");
        for job in 0..3 {
            let out = Output::new(&mut t).with_logprobs(&mut lp);
            let job: Job<'_, Planner> = match job {
                0 => Job::Greedy { shape, logits: Logits::F32(&x), out },
                1 => Job::RaceLogits { shape, logits: Logits::F32(&x), rows: &rows, out },
                _ => Job::RaceProbs { shape, probs: &x, rows: &rows, out },
            };
            let plan = Launch::plan(&job, &split).unwrap();
            assert_eq!(plan.len(), 1, "{}: {} launches", plan[0].kernel.name, plan.len());
            let launch = &plan[0];
            assert_eq!(launch.params[3] >> PARTS_SHIFT, want, "{}", launch.kernel.name);
            assert!(matches!(launch.work, Work::Rows(n) if n == want), "{}: {:?}", launch.kernel.name, launch.work);
            assert_eq!(launch.bound(Binding::Partials), Some(1));
            assert_eq!(launch.bound(Binding::Counters), Some(2));
        }
        // Every row that splits has a counter.
        let most_rows = (1..=396).filter(|&rows| parts(rows, shape.vocab, 396, 512) > 1).max().unwrap();
        let job: Job<'_, Planner> = Job::Greedy { shape, logits: Logits::F32(&x), out: Output::new(&mut t) };
        let counters = counter_words(&job, 396, 512, Share::All);
        assert!(most_rows <= counters, "{most_rows} split rows, {counters} counters");
    }

    /// With merge dispatches (wgpu), each launch that gives a row more than one workgroup, of a
    /// kernel that merges split rows, is followed by the same launch with `FLAG_MERGE`, and no
    /// other launch is: a split greedy row takes 2 launches (CUDA: 1), a seeded one 2 (1), a
    /// top-p row alone 4 (2: the parts and the merge that also cuts, each with its merge
    /// dispatch), four top-p rows 4 (3: the cut's own launch merges nothing).
    #[test]
    fn merge_dispatches_follow_split_launches() {
        let split = Split { merge_dispatch: true, ..h200_split() };
        // The planner's buffers are vectors of the call's own length.
        let (x1, x4, small) = (vec![0.0f32; 151_936], vec![0.0f32; 4 * 151_936], vec![0.0f32; 4 * 1024]);
        let (mut t1, mut t4) = (vec![0u32; 1], vec![0u32; 4]);
        let merged = |plan: &Plan<usize>| -> Vec<(&str, bool)> {
            plan.iter().map(|l| (l.kernel.name, l.params[3] & FLAG_MERGE != 0)).collect()
        };
        let shape = Shape::dense(1, 151_936);
        let rows = vec![RowParams::new(0.8, 1, 0); 1];
        let job: Job<'_, Planner> = Job::Greedy { shape, logits: Logits::F32(&x1), out: Output::new(&mut t1) };
        let plan = Launch::plan(&job, &split).unwrap();
        assert_eq!(merged(&plan), [("greedy_f32", false), ("greedy_f32", true)]);
        assert_eq!(Launch::plan(&job, &h200_split()).unwrap().len(), 1);
        let job: Job<'_, Planner> =
            Job::SeededLogits { shape, logits: Logits::F32(&x1), rows: &rows, out: Output::new(&mut t1) };
        assert_eq!(
            merged(&Launch::plan(&job, &split).unwrap()),
            [("seeded_logits_f32", false), ("seeded_logits_f32", true)]
        );
        let top_p = vec![RowParams::new(0.8, 1, 0).with_top_p(0.9); 4];
        let one_row = top_p[..1].to_vec();
        let one_top_p = [
            ("top_k_parts_logits_f32", false),
            ("top_k_parts_logits_f32", true),
            ("top_k_merge_logits_f32", false),
            ("top_k_merge_logits_f32", true),
        ];
        let job: Job<'_, Planner> =
            Job::Filter { shape, input: Input::Logits(Logits::F32(&x1)), rows: &one_row, out: Output::new(&mut t1) };
        assert_eq!(merged(&Launch::plan(&job, &split).unwrap()), one_top_p);
        let four_top_p = [
            ("top_k_parts_logits_f32", false),
            ("top_k_parts_logits_f32", true),
            ("top_p_cut_logits_f32", false),
            ("top_k_merge_logits_f32", false),
        ];
        let shape = Shape::dense(4, 151_936);
        let job: Job<'_, Planner> =
            Job::Filter { shape, input: Input::Logits(Logits::F32(&x4)), rows: &top_p, out: Output::new(&mut t4) };
        assert_eq!(merged(&Launch::plan(&job, &split).unwrap()), four_top_p);
        // Rows whole: no merge dispatch.
        let shape = Shape::dense(4, 1024);
        let job: Job<'_, Planner> = Job::Greedy { shape, logits: Logits::F32(&small), out: Output::new(&mut t4) };
        let whole = Split { target_groups: 4, ..split };
        assert_eq!(merged(&Launch::plan(&job, &whole).unwrap()), [("greedy_f32", false)]);
    }

    /// The seeded kernel from logits splits every row of 151936 columns, whatever the batch
    /// (here more rows than the argmax family ever splits), and still takes one launch, alone
    /// and within `sample`: each row's last part combines it, on a counter of its own.
    #[test]
    fn a_split_seeded_row_is_one_launch() {
        let shape = Shape::dense(300, 151_936);
        let x = vec![0.0f32; shape.elements()];
        let rows = vec![RowParams::seeded(0.8, 1, 0); shape.batch];
        let (mut t, list) = (vec![0u32; shape.batch], vec![0u32; shape.batch]);
        let split = h200_split();
        let want = seeded_parts(shape.vocab, 512);
        assert!(want > 1, "the rows must be split for this test to mean anything");
        for listed in [false, true] {
            let job: Job<'_, Planner> = if listed {
                let listed = RowLists {
                    seeded: (&list, shape.batch),
                    filtered: (&list, 0),
                    off_path: (&list, 0),
                    top_p_cut: false,
                };
                crate::backend::sample_job(
                    shape,
                    Logits::F32(&x),
                    &rows,
                    Output::new(&mut t),
                    Some(listed),
                    AtRead::none(),
                )
                .unwrap()
            } else {
                Job::SeededLogits { shape, logits: Logits::F32(&x), rows: &rows, out: Output::new(&mut t) }
            };
            let plan = Launch::plan(&job, &split).unwrap();
            let seeded: Vec<_> = plan.iter().filter(|l| l.kernel.id == KernelId::SeededLogitsF32).collect();
            assert_eq!(seeded.len(), 1, "listed {listed}: {} seeded launches", seeded.len());
            let launch = seeded[0];
            assert_eq!(launch.params[3] >> PARTS_SHIFT, want);
            assert!(matches!(launch.work, Work::Rows(n) if n == 300 * want), "{:?}", launch.work);
            assert_eq!(launch.bound(Binding::Partials), None, "the records lie beside the counters");
            assert_eq!(launch.bound(Binding::Counters), Some(2));
            let (counters, records) = (counter_words(&job, 396, 512, Share::All), 300 * want as usize * PART_WORDS);
            assert!(counters >= 300 + records, "300 split rows and {records} record words, {counters} u32");
        }
    }

    /// `sample_filtered` cannot read its rows' parameters, so from logits and from probabilities
    /// alike it takes the one-read path's three launches, the kernels of its input.
    #[test]
    fn filtered_batches_take_the_one_read_path_from_either_input() {
        let shape = Shape::dense(4, 151_936);
        let x = vec![0.0f32; shape.elements()];
        let rows = vec![RowParams::new(0.8, 1, 0).with_top_p(0.9); 4];
        let mut t = vec![0u32; 4];
        let split = h200_split();
        use KernelId::*;
        for (input, want) in [
            (Input::Logits(Logits::F32(&x)), [TopKPartsLogitsF32, TopPCutLogitsF32, TopKMergeLogitsF32]),
            (Input::Probs(&x), [TopKPartsProbs, TopPCutProbs, TopKMergeProbs]),
        ] {
            let job: Job<'_, Planner> = Job::Filter { shape, input, rows: &rows, out: Output::new(&mut t) };
            let plan = Launch::plan(&job, &split).unwrap();
            assert_eq!(plan.iter().map(|l| l.kernel.id).collect::<Vec<_>>(), want);
        }
    }

    /// `Sampler::step` with one filtered row at batch 4 x 151936: a top-k row takes the one-read
    /// path's parts and merge, and so does a min-p row alone; a top-p row alone, or a top-k row
    /// above the cap, those with the top-p cut between them; a top-k row above the cap applied
    /// before top-p the split filter kernel's stages over its own list, as `RowLists` says; the
    /// empty lists (the seeded rows', and the path's for that row) launch nothing.
    #[test]
    fn listed_rows_choose_the_filter_plan() {
        let shape = Shape::dense(4, 151_936);
        let x = vec![0.0f32; shape.elements()];
        let (mut t, list) = (vec![0u32; 4], vec![0u32; 4]);
        let split = h200_split();
        for (row, launches, filter) in [
            (RowParams::new(0.8, 1, 0).with_top_k(20).with_top_p(0.95), 2, KernelId::TopKMergeLogitsF32),
            (RowParams::new(0.8, 1, 0).with_min_p(0.05), 2, KernelId::TopKMergeLogitsF32),
            (RowParams::new(0.8, 1, 0).with_top_p(0.9), 2, KernelId::TopKMergeLogitsF32),
            (RowParams::new(0.8, 1, 0).with_top_p(0.9).with_top_k(1000), 2, KernelId::TopKMergeLogitsF32),
            (RowParams::new(0.8, 1, 0).with_top_k(1000), 2, KernelId::TopKMergeLogitsF32),
            (
                RowParams::new(0.8, 1, 0).with_top_k(1000).with_top_p(0.9).with_order(Order::TopKFirst),
                19,
                KernelId::FilterSplitLogitsF32,
            ),
        ] {
            let one_read = row.takes_one_read(shape.vocab);
            let top_p_cut = row.may_take_cut(shape.vocab);
            assert_eq!(one_read, launches <= 2);
            let rows = vec![RowParams::new(0.8, 1, 0), row, RowParams::greedy(), RowParams::new(1.0, 2, 0)];
            let (on, off) = if one_read { (1, 0) } else { (0, 1) };
            let listed = RowLists { seeded: (&list, 0), filtered: (&list, on), off_path: (&list, off), top_p_cut };
            let job: Job<'_, Planner> = crate::backend::sample_job(
                shape,
                Logits::F32(&x),
                &rows,
                Output::new(&mut t),
                Some(listed),
                AtRead::none(),
            )
            .unwrap();
            let plan = Launch::plan(&job, &split).unwrap();
            let last = plan.last().unwrap().kernel.id;
            assert_eq!(last, filter, "{:?}", plan.iter().map(|l| l.kernel.name).collect::<Vec<_>>());
            // The plain sampler's launch, then the filter's: no seeded row, no seeded launch.
            let seeded = plan.iter().filter(|l| l.kernel.id == KernelId::SeededLogitsF32).count();
            assert_eq!(seeded, 0, "a seeded launch over no rows");
            assert_eq!(plan.len() - 1, launches, "filter launches");
            // The cut reads after the parts (which count themselves in on the row's counter,
            // the last one estimating the cut), in the merge's launch: the row's 38 parts fit
            // the device.
            let merge = plan.last().unwrap();
            assert_eq!(merge.params[3] & FLAG_CUT_HERE != 0, top_p_cut);
            assert!(plan.iter().all(|l| l.kernel.id != KernelId::TopPCutLogitsF32));
            if top_p_cut {
                let parts = &plan[plan.len() - 2];
                assert_eq!(parts.kernel.id, KernelId::TopKPartsLogitsF32);
                assert_eq!(parts.bound(Binding::Counters), Some(2));
            }
        }
    }

    /// What [`queue`] asked of the streams, in order: a launch by its kernel's name.
    #[derive(Debug, PartialEq)]
    enum Queued {
        Fork,
        Join,
        Main(&'static str),
        Side(&'static str),
    }

    /// Records what is queued, failing the launch at index `fail_at` where one is given.
    #[derive(Default)]
    struct Recorder {
        queued: Vec<Queued>,
        launches: usize,
        fail_at: Option<usize>,
    }

    impl Streams<usize> for Recorder {
        fn fork(&mut self) -> Result<()> {
            self.queued.push(Queued::Fork);
            Ok(())
        }
        fn join(&mut self) -> Result<()> {
            self.queued.push(Queued::Join);
            Ok(())
        }
        fn launch(&mut self, launch: Launch<usize>) -> Result<()> {
            self.launches += 1;
            if self.fail_at == Some(self.launches - 1) {
                return Err(Error::Device { backend: "recorder", message: "a failed launch".into() });
            }
            let name = launch.kernel.name;
            self.queued.push(if launch.side { Queued::Side(name) } else { Queued::Main(name) });
            Ok(())
        }
    }

    /// Where the backend has a side stream, a `sample` call's seeded and filter launches (all
    /// after its plain launch) are marked for it and bind only its scratch, so the plain launch,
    /// which binds only the caller's, can run beside them; without one, none is marked. Queued,
    /// the fork comes before the plain launch (forked after it, as it once was, the side launches
    /// waited for the plain one: no overlap) and the join after the last launch, even a failed
    /// one; a plan without side launches neither forks nor joins.
    #[test]
    fn launches_after_the_plain_one_take_the_side_streams_scratch() {
        let shape = Shape::dense(4, 151_936);
        let x = vec![0.0f32; shape.elements()];
        let (mut t, list) = (vec![0u32; 4], vec![0u32; 4]);
        let off_path = RowParams::new(0.8, 1, 0).with_top_k(1000).with_top_p(0.9).with_order(Order::TopKFirst);
        let rows = vec![
            RowParams::new(0.8, 1, 0),
            RowParams::new(0.8, 1, 0).with_top_p(0.9),
            off_path,
            RowParams::seeded(1.0, 3, 0),
        ];
        let listed = RowLists { seeded: (&list, 1), filtered: (&list, 1), off_path: (&list, 1), top_p_cut: true };
        let job: Job<'_, Planner> = crate::backend::sample_job(
            shape,
            Logits::F32(&x),
            &rows,
            Output::new(&mut t),
            Some(listed),
            AtRead::none(),
        )
        .unwrap();
        let side = Scratch { partials: 3, counters: 4 };
        let caller = h200_split();
        let split = Split { side: Some(side), ..caller };
        let plan = Launch::plan(&job, &split).unwrap();
        let scratch = |l: &Launch<usize>| [Binding::Partials, Binding::Counters].map(|n| l.bound(n));
        assert!(!plan[0].side);
        assert_eq!(scratch(&plan[0]), [Some(1), Some(2)]);
        // The seeded launch, the one-read path's two (its merge doing the cut of the one row's
        // 38 parts) and the staged filter's stages.
        assert!(plan.len() > 5, "{}", plan.len());
        for l in &plan[1..] {
            assert!(l.side, "{}", l.kernel.name);
            assert!(
                scratch(l).iter().all(|b| !matches!(b, Some(1 | 2))),
                "{} binds the caller's scratch",
                l.kernel.name
            );
        }
        let bound: Vec<_> = plan[1..].iter().flat_map(scratch).flatten().collect();
        assert!(bound.contains(&3) && bound.contains(&4), "{bound:?}");

        let mut streams = Recorder::default();
        queue(plan.clone(), &mut streams).unwrap();
        let queued = &streams.queued;
        assert_eq!(queued.len(), plan.len() + 2, "{queued:?}");
        assert_eq!(queued[..2], [Queued::Fork, Queued::Main(plan[0].kernel.name)], "{queued:?}");
        assert!(queued[2..queued.len() - 1].iter().all(|q| matches!(q, Queued::Side(_))), "{queued:?}");
        assert_eq!(queued.last(), Some(&Queued::Join), "{queued:?}");
        let mut streams = Recorder { fail_at: Some(2), ..Recorder::default() };
        assert!(queue(plan, &mut streams).is_err());
        assert_eq!(streams.launches, 3, "launches queued after a failed one");
        assert_eq!(streams.queued.last(), Some(&Queued::Join), "{:?}", streams.queued);

        let plan = Launch::plan(&job, &caller).unwrap();
        assert!(plan.iter().all(|l| !l.side));
        let mut streams = Recorder::default();
        queue(plan.clone(), &mut streams).unwrap();
        assert!(streams.queued.iter().all(|q| matches!(q, Queued::Main(_))), "{:?}", streams.queued);
        assert_eq!(streams.queued.len(), plan.len());
    }

    /// The one-read path's merge launch does the top-p cut too where the rows' parts fit the
    /// device's multiprocessors (two launches), over every part of each row; beyond, the cut
    /// kernel has its own launch (three) and the merge one workgroup a row.
    #[test]
    fn a_few_rows_take_the_cut_in_the_merge_launch() {
        let split = h200_split();
        // 38 parts a row: three rows fit the H200's 132 SMs, four do not.
        for (batch, launches) in [(1, 2), (3, 2), (4, 3)] {
            let shape = Shape::dense(batch, 151_936);
            let x = vec![0.0f32; shape.elements()];
            let rows = vec![RowParams::new(0.8, 1, 0).with_top_p(0.9); batch];
            let mut t = vec![0u32; batch];
            let (input, out) = (Input::Logits(Logits::F32(&x)), Output::new(&mut t));
            let job: Job<'_, Planner> = Job::Filter { shape, input, rows: &rows, out };
            let plan = Launch::plan(&job, &split).unwrap();
            let names: Vec<_> = plan.iter().map(|l| l.kernel.name).collect();
            assert_eq!(plan.len(), launches, "{names:?}");
            let merge = plan.last().unwrap();
            let here = merge.params[3] & FLAG_CUT_HERE != 0;
            assert_eq!(here, launches == 2, "{names:?}");
            let groups = match merge.work {
                Work::Rows(n) => n,
                Work::Items(_) => 0,
            };
            assert_eq!(groups, batch as u32 * if here { 38 } else { 1 }, "{names:?}");
        }
    }
}
