//! One validated kernel launch, and the seal on [`crate::Backend`]. This module is private:
//! outside the crate neither `Job` nor `Sealed` can be named, so no one can hand a backend a
//! launch whose sizes were not checked, nor implement a backend that would take one.

use crate::backend::{Backend, Input, LogProbs, Logits, Output, RowLists, SeededMode};
use crate::types::{Element, RowParams, Shape};

/// Implemented by this crate's backends only.
pub trait Sealed {}

/// One validated kernel launch, what a backend's `Backend::run` executes. Each variant's
/// fields are the arguments of the provided method of the same name ([`Backend::softmax`],
/// [`Backend::greedy`], [`Backend::race_from_logits`], [`Backend::race_from_probs`],
/// [`Backend::seeded`], [`Backend::seeded_from_logits`], [`Backend::sample`], and the
/// [`crate::Diagnostics`] probes `murmur3`, `log_f64`, `philox`, `gumbel_noise`, `read_rows`;
/// `Filter` is [`Backend::sample_filtered`]'s, `MaskLogits` [`Backend::mask_logits`]'s and
/// `RenormProbs` [`Backend::renorm_probs`]'s), checked by it.
#[allow(missing_docs)]
pub enum Job<'a, B: Backend + ?Sized> {
    Softmax {
        shape: Shape,
        logits: Logits<'a, B>,
        rows: &'a B::Buffer<RowParams>,
        probs: &'a mut B::Buffer<f32>,
    },
    Greedy {
        shape: Shape,
        logits: Logits<'a, B>,
        out: Output<'a, B>,
    },
    RaceLogits {
        shape: Shape,
        logits: Logits<'a, B>,
        rows: &'a B::Buffer<RowParams>,
        out: Output<'a, B>,
    },
    RaceProbs {
        shape: Shape,
        probs: &'a B::Buffer<f32>,
        rows: &'a B::Buffer<RowParams>,
        out: Output<'a, B>,
    },
    Seeded {
        shape: Shape,
        logprobs: LogProbs<'a, B>,
        rows: &'a B::Buffer<RowParams>,
        mode: SeededMode,
        out: Output<'a, B>,
    },
    SeededLogits {
        shape: Shape,
        logits: Logits<'a, B>,
        rows: &'a B::Buffer<RowParams>,
        out: Output<'a, B>,
    },
    /// Every row on its own path: the plain sampler's launch, then the seeded kernel's over the
    /// seeded rows without a filter, then the filter kernel's over the rows with a filter (all
    /// rows each, or the [`RowLists`] where the host knows the records).
    Sample {
        shape: Shape,
        logits: Logits<'a, B>,
        rows: &'a B::Buffer<RowParams>,
        out: Output<'a, B>,
        listed: Option<RowLists<'a, B>>,
        /// The stage the kernels apply as they read the logits (a device backend's only:
        /// [`Backend::reads_stage`](crate::Backend::reads_stage)).
        at_read: AtRead<'a, B>,
    },
    Filter {
        shape: Shape,
        input: Input<'a, B>,
        rows: &'a B::Buffer<RowParams>,
        out: Output<'a, B>,
    },
    MaskLogits {
        shape: Shape,
        logits: Logits<'a, B>,
        rows: &'a B::Buffer<RowParams>,
        masked: &'a mut B::Buffer<f32>,
    },
    RenormProbs {
        shape: Shape,
        probs: &'a B::Buffer<f32>,
        rows: &'a B::Buffer<RowParams>,
        renormed: &'a mut B::Buffer<f32>,
    },
    /// `words` holds four words per item; `out` one hash per item.
    Murmur {
        items: usize,
        words: &'a B::Buffer<u32>,
        out: &'a mut B::Buffer<u32>,
    },
    /// The IR's float64 natural log of each value.
    LogF64 {
        items: usize,
        x: &'a B::Buffer<f64>,
        out: &'a mut B::Buffer<f64>,
    },
    /// `blocks` holds six words per item (counter, key); `out` four per item.
    Philox {
        items: usize,
        blocks: &'a B::Buffer<u32>,
        out: &'a mut B::Buffer<u32>,
    },
    /// The race's Gumbel noise, `batch x vocab`, dense.
    GumbelNoise {
        shape: Shape,
        rows: &'a B::Buffer<RowParams>,
        noise: &'a mut B::Buffer<f32>,
    },
    /// One sum per row, from one read of each element (the benchmarks' bandwidth yardstick).
    ReadRows {
        shape: Shape,
        logits: Logits<'a, B>,
        sums: &'a mut B::Buffer<f32>,
    },
}

/// What a job does with each of its buffers, for a backend that tracks them across streams
/// (CUDA): told of every buffer a job reads and every one it writes.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) trait Visit<B: Backend + ?Sized> {
    fn read<T: Element>(&mut self, buf: &B::Buffer<T>);
    fn write<T: Element>(&mut self, buf: &mut B::Buffer<T>);
}

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
impl<B: Backend + ?Sized> Job<'_, B> {
    /// Shows `v` every buffer the job's launches read and write.
    pub(crate) fn visit(&mut self, v: &mut impl Visit<B>) {
        fn logits<B: Backend + ?Sized>(l: &Logits<'_, B>, v: &mut impl Visit<B>) {
            match l {
                Logits::F32(b) => v.read(*b),
                Logits::F16(b) => v.read(*b),
                Logits::Bf16(b) => v.read(*b),
            }
        }
        fn out<B: Backend + ?Sized>(o: &mut Output<'_, B>, v: &mut impl Visit<B>) {
            v.write(&mut *o.tokens);
            if let Some(b) = o.logprobs.as_deref_mut() {
                v.write(b);
            }
            for b in [o.status.as_deref_mut(), o.passes.as_deref_mut()].into_iter().flatten() {
                v.write(b);
            }
        }
        match self {
            Job::Softmax { logits: l, rows, probs, .. } => {
                logits(l, v);
                v.read(*rows);
                v.write(&mut **probs);
            }
            Job::Greedy { logits: l, out: o, .. } => {
                logits(l, v);
                out(o, v);
            }
            Job::RaceLogits { logits: l, rows, out: o, .. } | Job::SeededLogits { logits: l, rows, out: o, .. } => {
                logits(l, v);
                v.read(*rows);
                out(o, v);
            }
            Job::RaceProbs { probs, rows, out: o, .. } => {
                v.read(*probs);
                v.read(*rows);
                out(o, v);
            }
            Job::Seeded { logprobs, rows, out: o, .. } => {
                match logprobs {
                    LogProbs::F64(b) => v.read(*b),
                    LogProbs::F32(b) | LogProbs::LogOf(b) => v.read(*b),
                }
                v.read(*rows);
                out(o, v);
            }
            Job::Sample { logits: l, rows, out: o, listed, at_read, .. } => {
                logits(l, v);
                v.read(*rows);
                if let Some(mask) = at_read.allowed {
                    v.read(mask);
                }
                for lists in listed.iter() {
                    v.read(lists.seeded.0);
                    v.read(lists.filtered.0);
                }
                out(o, v);
            }
            Job::Filter { input, rows, out: o, .. } => {
                match input {
                    Input::Logits(l) => logits(l, v),
                    Input::Probs(b) => v.read(*b),
                }
                v.read(*rows);
                out(o, v);
            }
            Job::MaskLogits { logits: l, rows, masked: w, .. } => {
                logits(l, v);
                v.read(*rows);
                v.write(&mut **w);
            }
            Job::RenormProbs { probs, rows, renormed: w, .. } => {
                v.read(*probs);
                v.read(*rows);
                v.write(&mut **w);
            }
            Job::Murmur { words: r, out: w, .. } | Job::Philox { blocks: r, out: w, .. } => {
                v.read(*r);
                v.write(&mut **w);
            }
            Job::LogF64 { x, out: w, .. } => {
                v.read(*x);
                v.write(&mut **w);
            }
            Job::GumbelNoise { rows, noise, .. } => {
                v.read(*rows);
                v.write(&mut **noise);
            }
            Job::ReadRows { logits: l, sums, .. } => {
                logits(l, v);
                v.write(&mut **sums);
            }
        }
    }
}

/// The inputs of a call's stage that the device kernels apply in the read that samples, as they
/// load each logit: the allowed-token bitmask, one word per 32 columns beside the logits (a
/// disallowed column reads as -inf), and NaN as -1e5 (`FLAG_ALLOWED`, `FLAG_NAN_AS_FINITE`).
pub struct AtRead<'a, B: Backend + ?Sized> {
    /// `[batch, ceil(vocab / 32)]` words, checked by [`LogitsStage::validate`].
    pub allowed: Option<&'a B::Buffer<u32>>,
    pub nan_as_finite: bool,
}

impl<B: Backend + ?Sized> Clone for AtRead<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend + ?Sized> Copy for AtRead<'_, B> {}

impl<B: Backend + ?Sized> AtRead<'_, B> {
    /// Nothing read with the logits: the kernels' reads as without a stage.
    pub fn none() -> Self {
        AtRead { allowed: None, nan_as_finite: false }
    }
}
