//! The kept sets of top-k, top-p and min-p, defined the plain way (by sorting): the reference the
//! filter kernels are tested against, exact to SEMANTICS.md, and what the CPU backend samples in.
//!
//! Tokens are ordered by (probability descending, index ascending), a strict total order, so
//! every set is exact and ties at a boundary go to the lower index. Every filter keeps a prefix
//! of that order, so their intersection is the shortest of the prefixes. Tokens without
//! probability (NaN, -inf, or outside a +inf class) are never kept.

use super::softmax::softmax;
use crate::types::{Filters, Order, RowParams};

/// Which tokens of one row the filters keep. `probs` are the row's probabilities (from
/// [`softmax`] of the logits, or given).
pub fn kept(probs: &[f64], filters: &Filters) -> Vec<bool> {
    let order = order(probs);
    let by_k = filters.top_k.map_or(order.len(), |k| k.min(order.len()));
    let largest = order.first().map_or(0.0, |&j| probs[j]);
    let by_min_p = order.iter().take_while(|&&j| probs[j] >= filters.min_p * largest).count();
    // Top-p's reference mass: the whole row (joint), the top-k set (top-k first), or what
    // min-p and then top-k keep (min-p first).
    let total: f64 = match filters.order {
        Order::Joint => order.iter().map(|&j| probs[j]).sum(),
        Order::TopKFirst => order[..by_k].iter().map(|&j| probs[j]).sum(),
        Order::MinPFirst => order[..by_k.min(by_min_p)].iter().map(|&j| probs[j]).sum(),
    };
    let mut before = 0.0;
    let by_p = order
        .iter()
        .take_while(|&&j| {
            let keep = before <= filters.top_p * total;
            before += probs[j];
            keep
        })
        .count();
    let mut out = vec![false; probs.len()];
    for &j in &order[..by_k.min(by_p).min(by_min_p)] {
        out[j] = true;
    }
    out
}

/// The tokens with probability in the filters' order: probability descending, index ascending.
/// A token's place in it is its rank (what SGLang's filtered seeded path hashes).
pub fn order(probs: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..probs.len()).filter(|&j| probs[j] > 0.0).collect();
    // Probabilities are never NaN here, so the comparison is total.
    order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
    order
}

/// The kept set of one row of logits sampled with `row`'s temperature.
pub fn kept_from_logits(logits: &[f64], row: &RowParams, filters: &Filters) -> Vec<bool> {
    kept(&softmax(logits, row), filters)
}

/// The most times the filter kernels read a row with these filters: the maximum and the race,
/// plus eight digit passes when top-k or top-p is active, plus eight more where top-p is
/// measured after a prefix (the mass of the top-k set, or of what min-p and top-k keep:
/// [`Filters::top_p_after_a_prefix`]). A row whose select narrows to a few
/// thousand candidates takes fewer: one read lists them in workgroup memory and the select goes
/// on there (see `find_set` in `xtask/src/kernels/filters.rs`). The CPU backend reports this bound.
pub fn passes(filters: &Filters, vocab: usize) -> u32 {
    let by_k = filters.top_k.is_some_and(|k| k < vocab);
    let by_p = filters.top_p < 1.0;
    let selects = match (by_k || by_p, filters.top_p_after_a_prefix(vocab)) {
        (_, true) => 2,
        (false, _) => 0,
        _ => 1,
    };
    2 + 8 * selects
}

/// [`passes`] for a row the filter kernels split over workgroups (a batch too small to fill a
/// GPU): one read more where top-k or top-p is active, which ranks each part's tokens tied at
/// the set's boundary.
pub fn split_passes(filters: &Filters, vocab: usize) -> u32 {
    let whole = passes(filters, vocab);
    whole + u32::from(whole > 2)
}

/// Probabilities as the filters see them: NaN, negative and infinite values weigh nothing.
pub fn clean_probs(x: &[f64]) -> Vec<f64> {
    x.iter().map(|&p| if p > 0.0 && p < f64::INFINITY { p } else { 0.0 }).collect()
}

pub use crate::types::ONE_READ_TOP_K;
