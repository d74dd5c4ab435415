//! The one place that turns a [`Job`] into a launch: which kernel, which buffers in binding
//! order, which parameters. The GPU backends only execute the plan.

use crate::backend::{Backend, Input, Job, LogProbs, Logits, SeededMode};
use crate::kernels::{source, KernelSource};
use crate::types::{Element, Shape};
use arrayvec::ArrayVec;

use crate::generated::{
    FLAG_FILTERED_ONLY, FLAG_LOGPROBS, FLAG_PASSES, FLAG_ROW_LIST, FLAG_SEEDED_ONLY, FLAG_STATUS, MAX_BUFFERS,
    MAX_STAGES, PARTS_SHIFT, PART_WORDS, SLOT_WORDS, STAGE_SHIFT,
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

/// `items` as a launch's bindings.
fn bind<H, const N: usize>(items: [Option<H>; N]) -> Bindings<H> {
    items.into_iter().collect()
}

/// A launch in backend-neutral terms.
#[derive(Clone)]
pub(crate) struct Launch<H> {
    pub kernel: &'static KernelSource,
    /// In binding order; `None` is an output the kernel will not write (no log-probabilities).
    /// A fixed-capacity list, so a launch allocates nothing.
    pub buffers: Bindings<H>,
    /// `batch, vocab, stride, flags`.
    pub params: [u32; 4],
    /// Rows (one workgroup each), or items for the per-item Philox kernel.
    pub work: Work,
}

impl<H> Launch<H> {
    /// A launch over a row list that lists no row (the seeded or filter kernel of a step with no
    /// such row): it changes nothing, so a device that cannot run its kernel may leave it out.
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
    /// Whether filtered rows are split too: a launch per stage then (19), which pays where
    /// launches are cheap beside a row's passes (GPUs), not on a CPU adapter.
    pub split_filters: bool,
}

/// Each invocation of a part reads at least this many quads of four columns, so a part's
/// fixed costs (its reductions and its record) stay small beside its reads.
const MIN_QUADS_PER_INVOCATION: u32 = 2;

/// Workgroups per row for the kernels that split rows (the argmax family, `sample`, and the
/// filters' sampling path) when `rows` rows of `vocab` columns are launched: enough for them to
/// fill `target_groups`, but no part shorter than [`MIN_QUADS_PER_INVOCATION`] quads per
/// invocation. One when the rows alone fill the device; then no combine (or stage) launch
/// follows.
pub(crate) fn parts(rows: usize, vocab: usize, target_groups: u32, block: u32) -> u32 {
    let by_size = vocab as u32 / (block * 4 * MIN_QUADS_PER_INVOCATION);
    (target_groups / (rows as u32).max(1)).min(by_size).max(1)
}

/// The rows a job's filter launches go over, and the parts each gets (1: the one-workgroup
/// kernel; more: the staged kernel); `None` for a job without filter launches.
fn filter_parts<B: Backend + ?Sized>(
    job: &Job<'_, B>,
    target_groups: u32,
    block: u32,
    split: bool,
) -> Option<(usize, u32)> {
    let (shape, rows) = match job {
        Job::Filter { shape, .. } => (shape, shape.batch),
        Job::Sample { shape, listed, .. } => (shape, listed.map_or(shape.batch, |l| l.filtered.1)),
        _ => return None,
    };
    Some((rows, if split { parts(rows, shape.vocab, target_groups, block) } else { 1 }))
}

/// The u32 of scratch a job needs: a record per part of a split launch (never more parts in
/// all than `target_groups`), or a slot per (row, part) of a staged one. The backends keep one
/// buffer and grow it to the largest job they have run.
pub(crate) fn scratch_words<B: Backend + ?Sized>(
    job: &Job<'_, B>,
    target_groups: u32,
    block: u32,
    split_filters: bool,
) -> usize {
    let records = target_groups.max(1) as usize * PART_WORDS;
    let slots = match filter_parts(job, target_groups, block, split_filters) {
        Some((rows, parts)) if parts > 1 => rows * parts as usize,
        _ => 0,
    };
    records.max(slots * SLOT_WORDS)
}

/// The most launches one job takes: the plain sampler and its combine, the seeded kernel, then a
/// staged kernel's stages.
pub(crate) const MAX_LAUNCHES: usize = MAX_STAGES + 3;

/// The launches of one job, in the order they must run: one; a split launch and its combine;
/// a staged kernel's stages; or the plain sampler's launches then the seeded kernel's and the
/// filter kernel's.
pub(crate) type Plan<H> = ArrayVec<Launch<H>, MAX_LAUNCHES>;

/// Binds the part records to a split kernel's launch and, when its rows get more than one part,
/// widens its grid to `batch x parts` and adds the `combine` launch that writes the results.
fn split_rows<'a, B: Device + ?Sized>(
    mut first: Launch<B::Handle<'a>>,
    shape: Shape,
    out: &'a crate::backend::Output<'a, B>,
    split: &Split<B::Handle<'a>>,
    combine: &str,
) -> Plan<B::Handle<'a>> {
    first.buffers.push(Some(split.partials));
    let parts = parts(shape.batch, shape.vocab, split.target_groups, split.block);
    let mut plan = Plan::new();
    if parts <= 1 {
        plan.push(first);
        return plan;
    }
    first.params[3] |= parts << PARTS_SHIFT;
    first.work = Work::Rows(shape.batch as u32 * parts);
    let kernel = source(combine);
    let (buffers, flags) = with_outputs::<B>(kernel, bind([Some(split.partials)]), out);
    let combine = Launch {
        kernel,
        buffers,
        params: params(shape, flags | parts << PARTS_SHIFT),
        work: Work::Rows(shape.batch as u32),
    };
    plan.extend([first, combine]);
    plan
}

fn suffixed<B: Backend + ?Sized>(family: &str, logits: &Logits<'_, B>) -> &'static KernelSource {
    let dtype = match logits {
        Logits::F32(_) => "f32",
        Logits::F16(_) => "f16",
        Logits::Bf16(_) => "bf16",
    };
    named(family, dtype)
}

/// The kernel `{family}_{suffix}`, matched in parts so a launch formats no name (no allocation
/// per call).
fn named(family: &str, suffix: &str) -> &'static KernelSource {
    let is = |k: &&KernelSource| k.name.strip_prefix(family).and_then(|r| r.strip_prefix('_')) == Some(suffix);
    crate::kernels::all().iter().find(is).unwrap_or_else(|| panic!("kernel `{family}_{suffix}` is generated"))
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

/// Appends a sampling call's outputs (tokens, log-probabilities, status, and the pass counts
/// where the kernel writes them; all but the tokens where asked) to `inputs`, and the flags that
/// tell the kernel which to write.
fn with_outputs<'a, B: Device + ?Sized>(
    kernel: &KernelSource,
    mut inputs: Bindings<B::Handle<'a>>,
    out: &'a crate::backend::Output<'a, B>,
) -> (Bindings<B::Handle<'a>>, u32) {
    let lp = out.logprobs.as_deref().map(|b| B::handle(b));
    let status = out.status.as_deref().map(|b| B::handle(b));
    let mut flags = if lp.is_some() { FLAG_LOGPROBS } else { 0 } | if status.is_some() { FLAG_STATUS } else { 0 };
    inputs.extend([Some(B::handle(&*out.tokens)), lp, status]);
    if kernel.buffers.contains(&"passes") {
        let passes = out.passes.as_deref().map(|b| B::handle(b));
        flags |= if passes.is_some() { FLAG_PASSES } else { 0 };
        inputs.push(passes);
    }
    (inputs, flags)
}

/// A sampling launch over rows: `kernel` with `inputs` then the outputs of `out`.
fn sampling<'a, B: Device + ?Sized>(
    kernel: &'static KernelSource,
    shape: Shape,
    inputs: Bindings<B::Handle<'a>>,
    out: &'a crate::backend::Output<'a, B>,
    extra_flags: u32,
) -> Launch<B::Handle<'a>> {
    let (buffers, flags) = with_outputs::<B>(kernel, inputs, out);
    Launch { kernel, buffers, params: params(shape, flags | extra_flags), work: Work::Rows(shape.batch as u32) }
}

impl<'a, H: Copy> Launch<H> {
    /// The launches of `job`, the split kernels' rows spread as `split` says.
    pub fn plan<B: Device<Handle<'a> = H> + ?Sized>(job: &'a Job<'a, B>, split: &Split<H>) -> Plan<H> {
        let first = Self::from_job(job);
        let filters = filter_parts(job, split.target_groups, split.block, split.split_filters);
        match job {
            Job::Sample { shape, logits, rows, out, listed } => {
                // The plain rows, then the seeded kernel's launch over the seeded rows and the
                // filter kernel's over the filtered rows.
                let handle = |(list, count): (&'a B::Buffer<u32>, usize)| (B::handle(list), count);
                let inputs = bind([Some(logits_handle(logits)), Some(B::handle(*rows))]);
                let seeded =
                    sampling::<B>(suffixed("seeded_logits", logits), *shape, inputs.clone(), out, FLAG_SEEDED_ONLY);
                let filter = sampling::<B>(suffixed("filter_logits", logits), *shape, inputs, out, FLAG_FILTERED_ONLY);
                let (filtered, parts) = filters.unwrap_or((shape.batch, 1));
                let mut plan = split_rows::<B>(first, *shape, out, split, "combine_logits");
                plan.push(seeded.with_list(listed.map(|l| handle(l.seeded))));
                plan.extend(filter.with_list(listed.map(|l| handle(l.filtered))).staged(
                    filtered,
                    parts,
                    split.partials,
                ));
                plan
            }
            Job::Greedy { shape, out, .. } | Job::RaceLogits { shape, out, .. } => {
                split_rows::<B>(first, *shape, out, split, "combine_logits")
            }
            Job::RaceProbs { shape, out, .. } => split_rows::<B>(first, *shape, out, split, "combine_probs"),
            Job::Softmax { shape, .. } => {
                // Rows split as the argmax family's: the parts' (max, sum) pairs, then the write.
                let mut first = first;
                first.buffers.push(Some(split.partials));
                let parts = parts(shape.batch, shape.vocab, split.target_groups, split.block);
                first.split_stages(shape.batch, parts)
            }
            _ => match filters {
                Some((rows, parts)) => first.staged(rows, parts, split.partials),
                None => std::iter::once(first).collect(),
            },
        }
    }

    /// With `listed` (a row list and its length), a filter or seeded launch visits only the rows
    /// listed. Without it, the row records stand in for the list (never read; a read-only
    /// binding, which wgpu will not share with an unused writable output).
    fn with_list(mut self, listed: Option<(H, usize)>) -> Self {
        let rows = self.buffers[1];
        self.buffers.push(listed.map_or(rows, |(list, _)| Some(list)));
        if let Some((_, count)) = listed {
            self.params[0] = count as u32;
            self.params[3] |= FLAG_ROW_LIST;
            self.work = Work::Rows(count as u32);
        }
        self
    }

    /// A filter sampling launch over `rows` rows: as it is with one part each, else split in
    /// `parts` (the staged kernel's launches, one per stage with the stage in its flags, over
    /// `rows x parts` workgroups, the scratch bound last).
    fn staged(mut self, rows: usize, parts: u32, partials: H) -> Plan<H> {
        if parts <= 1 {
            return std::iter::once(self).collect();
        }
        self.kernel = match self.kernel.name.strip_prefix("filter_") {
            Some(rest) => named("filter_split", rest),
            None => unreachable!("only the filter kernels are staged"),
        };
        self.buffers.push(Some(partials));
        self.split_stages(rows, parts)
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
        match job {
            Job::Softmax { shape, logits, rows: r, probs } => Launch {
                kernel: suffixed("softmax", logits),
                buffers: bind([Some(logits_handle(logits)), Some(B::handle(*r)), Some(B::handle(&**probs))]),
                params: params(*shape, 0),
                work: rows(*shape),
            },
            Job::Greedy { shape, logits, out } => {
                sampling::<B>(suffixed("greedy", logits), *shape, bind([Some(logits_handle(logits))]), out, 0)
            }
            Job::RaceLogits { shape, logits, rows: r, out } => {
                let inputs = bind([Some(logits_handle(logits)), Some(B::handle(*r))]);
                sampling::<B>(suffixed("race_logits", logits), *shape, inputs, out, 0)
            }
            Job::RaceProbs { shape, probs, rows: r, out } => {
                let inputs = bind([Some(B::handle(*probs)), Some(B::handle(*r))]);
                sampling::<B>(source("race_probs"), *shape, inputs, out, 0)
            }
            Job::Seeded { shape, logprobs, rows: r, mode, out } => {
                let (suffix, lp) = match logprobs {
                    LogProbs::F64(b) => ("f64", B::handle(*b)),
                    LogProbs::F32(b) => ("f32", B::handle(*b)),
                };
                let family = match mode {
                    SeededMode::Float64 => "seeded",
                    SeededMode::Screened => "seeded_screened",
                };
                let kernel = named(family, suffix);
                sampling::<B>(kernel, *shape, bind([Some(lp), Some(B::handle(*r))]), out, 0)
            }
            Job::SeededLogits { shape, logits, rows: r, out } => {
                let inputs = bind([Some(logits_handle(logits)), Some(B::handle(*r))]);
                sampling::<B>(suffixed("seeded_logits", logits), *shape, inputs, out, 0).with_list(None)
            }
            // The plain sampler, which leaves the seeded and filtered rows to the launches `plan`
            // adds.
            Job::Sample { shape, logits, rows: r, out, .. } => {
                let inputs = bind([Some(logits_handle(logits)), Some(B::handle(*r))]);
                sampling::<B>(suffixed("sample", logits), *shape, inputs, out, 0)
            }
            Job::Filter { shape, input, rows: r, out } => {
                let (kernel, x) = match input {
                    Input::Logits(l) => (suffixed("filter_logits", l), logits_handle(l)),
                    Input::Probs(p) => (source("filter_probs"), B::handle(*p)),
                };
                sampling::<B>(kernel, *shape, bind([Some(x), Some(B::handle(*r))]), out, 0).with_list(None)
            }
            Job::MaskLogits { shape, logits, rows: r, masked } => Launch {
                kernel: suffixed("mask_logits", logits),
                buffers: bind([Some(logits_handle(logits)), Some(B::handle(*r)), Some(B::handle(&**masked))]),
                params: params(*shape, 0),
                work: rows(*shape),
            },
            Job::RenormProbs { shape, probs, rows: r, renormed } => Launch {
                kernel: source("renorm_probs"),
                buffers: bind([Some(B::handle(*probs)), Some(B::handle(*r)), Some(B::handle(&**renormed))]),
                params: params(*shape, 0),
                work: rows(*shape),
            },
            Job::Murmur { items, words, out } => Launch {
                kernel: source("murmur3"),
                buffers: bind([Some(B::handle(*words)), Some(B::handle(&**out))]),
                params: [*items as u32, 0, 0, 0],
                work: Work::Items(*items as u32),
            },
            Job::LogF64 { items, x, out } => Launch {
                kernel: source("log_f64"),
                buffers: bind([Some(B::handle(*x)), Some(B::handle(&**out))]),
                params: [*items as u32, 0, 0, 0],
                work: Work::Items(*items as u32),
            },
            Job::Philox { items, blocks, out } => Launch {
                kernel: source("philox4x32_10"),
                buffers: bind([Some(B::handle(*blocks)), Some(B::handle(&**out))]),
                params: [*items as u32, 0, 0, 0],
                work: Work::Items(*items as u32),
            },
            Job::GumbelNoise { shape, rows: r, noise } => Launch {
                kernel: source("gumbel_noise"),
                buffers: bind([Some(B::handle(*r)), Some(B::handle(&**noise))]),
                params: params(*shape, 0),
                work: rows(*shape),
            },
            Job::ReadRows { shape, logits, sums } => Launch {
                kernel: suffixed("read_rows", logits),
                buffers: bind([Some(logits_handle(logits)), Some(B::handle(&**sums))]),
                params: params(*shape, 0),
                work: rows(*shape),
            },
        }
    }
}
