//! The one place that turns a [`Job`] into a launch: which kernel, which buffers in binding
//! order, which parameters. The GPU backends only execute the plan.

use crate::backend::{Backend, Job, LogProbs, Logits, SeededMode};
use crate::kernels::{source, KernelSource};
use crate::types::{Element, Shape};

use crate::generated::{FLAG_LOGPROBS, FLAG_STATUS};

/// A backend whose buffers have a raw handle that a launch can bind.
pub(crate) trait Device: Backend {
    type Handle<'a>: Copy
    where
        Self: 'a;
    fn handle<'a, T: Element>(buf: &'a Self::Buffer<T>) -> Self::Handle<'a>;
}

/// A launch in backend-neutral terms.
pub(crate) struct Launch<H> {
    pub kernel: &'static KernelSource,
    /// In binding order; `None` is an output the kernel will not write (no log-probabilities).
    pub buffers: Vec<Option<H>>,
    /// `batch, vocab, stride, flags`.
    pub params: [u32; 4],
    /// Rows (one workgroup each), or items for the per-item Philox kernel.
    pub work: Work,
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

fn suffixed<B: Backend + ?Sized>(family: &str, logits: &Logits<'_, B>) -> &'static KernelSource {
    let dtype = match logits {
        Logits::F32(_) => "f32",
        Logits::F16(_) => "f16",
        Logits::Bf16(_) => "bf16",
    };
    source(&format!("{family}_{dtype}"))
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

/// Appends a sampling call's outputs (tokens, log-probabilities, status; the last two where
/// asked) to `inputs`, and the flags that tell the kernel which to write.
fn with_outputs<'a, B: Device + ?Sized>(
    mut inputs: Vec<Option<B::Handle<'a>>>,
    out: &'a crate::backend::Output<'a, B>,
) -> (Vec<Option<B::Handle<'a>>>, u32) {
    let lp = out.logprobs.as_deref().map(|b| B::handle(b));
    let status = out.status.as_deref().map(|b| B::handle(b));
    let flags = if lp.is_some() { FLAG_LOGPROBS } else { 0 } | if status.is_some() { FLAG_STATUS } else { 0 };
    inputs.extend([Some(B::handle(&*out.tokens)), lp, status]);
    (inputs, flags)
}

impl<'a, H: Copy> Launch<H> {
    pub fn from_job<B: Device<Handle<'a> = H> + ?Sized>(job: &'a Job<'a, B>) -> Self {
        let rows = |shape: Shape| Work::Rows(shape.batch as u32);
        match job {
            Job::Softmax { shape, logits, rows: r, probs } => Launch {
                kernel: suffixed("softmax", logits),
                buffers: vec![Some(logits_handle(logits)), Some(B::handle(*r)), Some(B::handle(&**probs))],
                params: params(*shape, 0),
                work: rows(*shape),
            },
            Job::Greedy { shape, logits, out } => {
                let (buffers, flags) = with_outputs::<B>(vec![Some(logits_handle(logits))], out);
                Launch {
                    kernel: suffixed("greedy", logits),
                    buffers,
                    params: params(*shape, flags),
                    work: rows(*shape),
                }
            }
            Job::RaceLogits { shape, logits, rows: r, out } => {
                let (buffers, flags) = with_outputs::<B>(vec![Some(logits_handle(logits)), Some(B::handle(*r))], out);
                Launch {
                    kernel: suffixed("race_logits", logits),
                    buffers,
                    params: params(*shape, flags),
                    work: rows(*shape),
                }
            }
            Job::RaceProbs { shape, probs, rows: r, out } => {
                let (buffers, flags) = with_outputs::<B>(vec![Some(B::handle(*probs)), Some(B::handle(*r))], out);
                Launch { kernel: source("race_probs"), buffers, params: params(*shape, flags), work: rows(*shape) }
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
                let (buffers, flags) = with_outputs::<B>(vec![Some(lp), Some(B::handle(*r))], out);
                Launch {
                    kernel: source(&format!("{family}_{suffix}")),
                    buffers,
                    params: params(*shape, flags),
                    work: rows(*shape),
                }
            }
            Job::SeededLogits { shape, logits, rows: r, out } => {
                let (buffers, flags) = with_outputs::<B>(vec![Some(logits_handle(logits)), Some(B::handle(*r))], out);
                Launch {
                    kernel: suffixed("seeded_logits", logits),
                    buffers,
                    params: params(*shape, flags),
                    work: rows(*shape),
                }
            }
            Job::Sample { shape, logits, rows: r, out } => {
                let (buffers, flags) = with_outputs::<B>(vec![Some(logits_handle(logits)), Some(B::handle(*r))], out);
                Launch {
                    kernel: suffixed("sample", logits),
                    buffers,
                    params: params(*shape, flags),
                    work: rows(*shape),
                }
            }
            Job::Murmur { items, words, out } => Launch {
                kernel: source("murmur3"),
                buffers: vec![Some(B::handle(*words)), Some(B::handle(&**out))],
                params: [*items as u32, 0, 0, 0],
                work: Work::Items(*items as u32),
            },
            Job::LogF64 { items, x, out } => Launch {
                kernel: source("log_f64"),
                buffers: vec![Some(B::handle(*x)), Some(B::handle(&**out))],
                params: [*items as u32, 0, 0, 0],
                work: Work::Items(*items as u32),
            },
            Job::Philox { items, blocks, out } => Launch {
                kernel: source("philox4x32_10"),
                buffers: vec![Some(B::handle(*blocks)), Some(B::handle(&**out))],
                params: [*items as u32, 0, 0, 0],
                work: Work::Items(*items as u32),
            },
            Job::GumbelNoise { shape, rows: r, noise } => Launch {
                kernel: source("gumbel_noise"),
                buffers: vec![Some(B::handle(*r)), Some(B::handle(&**noise))],
                params: params(*shape, 0),
                work: rows(*shape),
            },
            Job::ReadRows { shape, logits, sums } => Launch {
                kernel: suffixed("read_rows", logits),
                buffers: vec![Some(logits_handle(logits)), Some(B::handle(&**sums))],
                params: params(*shape, 0),
                work: rows(*shape),
            },
        }
    }
}
