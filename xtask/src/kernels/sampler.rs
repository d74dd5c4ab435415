//! The per-row sampler's first launch: the plain rows (greedy and Philox-race) of any mix.

use super::abi::{for_each_row_part, kernel, part_buffers, row_is_seeded, row_temperature, Dtype};
use super::filters::row_is_filtered;
use super::race::{race_row, race_shared, Race};
use super::seeded::logits_buffers;
use super::{math, philox};
use crate::ir::*;

/// The per-row sampler's plain rows: each runs the Philox race (greedy below 1e-6), so any mix
/// of rows is one launch and each row pays only for its own path. Seeded rows and rows with a
/// filter are left to the seeded and filter kernels, launched after this one over those rows
/// (their code in this kernel, never run by a plain row, made plain rows 23% slower on lavapipe).
fn sample(dtype: Dtype) -> Kernel {
    let mut b = Block::new();
    for_each_row_part(&mut b, |b| {
        b.let_("skip", Ty::Bool, boolean(false));
        b.scope(|b| {
            row_temperature(b);
            let filtered = row_is_filtered(b);
            b.set("skip", filtered.or(row_is_seeded()));
        });
        // The mode and filters are the same for every invocation of the row's workgroup (and
        // every part of the row: a skipped row's parts never count in): the branch is uniform.
        b.if_(var("skip").not(), |b| race_row(b, Race::Logits));
    });
    let functions = super::union([vec![math::exp()], philox::noise_functions()]);
    let doc = "per-row sampler: the Philox race on the rows without a seed or a filter (the seeded and filter kernels take those)";
    let mut buffers = logits_buffers(dtype);
    buffers.extend(part_buffers());
    let mut k = kernel(format!("sample_{}", dtype.suffix()), doc, 1, buffers, functions, b);
    k.shared.push(race_shared());
    k
}

pub fn all() -> Vec<Kernel> {
    Dtype::ALL.iter().map(|&d| sample(d)).collect()
}
