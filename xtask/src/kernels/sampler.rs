//! The per-row sampler: one launch for any mix of greedy, Philox-race and seeded rows.

use super::filters::row_is_filtered;
use super::sampling::{
    for_each_row_part, kernel, mark_not_raced, partials_buffer, race_row, row_temperature, row_word, word, Dtype, Race,
    MODE_SEEDED,
};
use super::seeded::{functions, logits_buffers, seeded_logits_row};
use super::{math, philox};
use crate::ir::*;

/// The per-row sampler: each row runs its own mode's path (the Philox race, greedy below
/// 1e-6, or SGLang's seeded float64 race), so any mix of rows is one launch and each row pays
/// only for its own path. A race row reads its logits once, a seeded row three times. Rows with
/// a filter are left to the filter kernels, launched after this one over those rows.
fn sample(dtype: Dtype) -> Kernel {
    let mut b = Block::new();
    for_each_row_part(&mut b, |b| {
        // Rows with a filter are the filter kernel's (the launch that follows this one).
        b.let_("skip", Ty::Bool, boolean(false));
        b.scope(|b| {
            row_temperature(b);
            let filtered = row_is_filtered(b);
            b.set("skip", filtered);
        });
        // The mode is the same for every invocation of the row's workgroup: the branch is uniform.
        let seeded = row_word(word::MODE).eq_(u(MODE_SEEDED));
        b.if_else(
            seeded,
            |b| {
                // A seeded row is not split: its first part reads it whole (three reads) and
                // writes its results.
                b.if_(var("part").eq_(u(0)).and(var("skip").not()), |b| {
                    b.set("col_lo", u(0));
                    b.set("col_hi", param("vocab"));
                    seeded_logits_row(b);
                });
                mark_not_raced(b);
            },
            |b| b.if_else(var("skip").not(), |b| race_row(b, Race::Logits), mark_not_raced),
        );
    });
    let functions = super::union([vec![math::exp()], philox::noise_functions(), functions()]);
    let doc = "per-row sampler: each row's mode picks the Philox race or the seeded float64 race";
    let mut buffers = logits_buffers(dtype);
    buffers.push(partials_buffer());
    kernel(format!("sample_{}", dtype.suffix()), doc, 3, buffers, functions, b)
}

pub fn all() -> Vec<Kernel> {
    Dtype::ALL.iter().map(|&d| sample(d)).collect()
}
