//! The filter reference (`sampling_kernels::filters`) against SEMANTICS.md's definitions written
//! token by token (rank and mass ahead counted directly, no sorting or prefixes), and the cases
//! the filters issue names.

mod common;

use common::Rng;
use sampling_kernels::filters::{kept, kept_from_logits, Filters, Order};
use sampling_kernels::RowParams;

/// SEMANTICS.md per token: rank(j) counts the tokens ahead of j in (p desc, index asc); the mass
/// ahead sums theirs. Top-k keeps rank < k; top-p keeps mass ahead <= top_p (of the top-k set's
/// mass, renormalized, for top-k first); min-p keeps p >= min_p * p_max.
fn by_definition(p: &[f64], f: &Filters) -> Vec<bool> {
    let ahead = |i: usize, j: usize| p[i] > p[j] || (p[i] == p[j] && i < j);
    let rank = |j: usize| (0..p.len()).filter(|&i| p[i] > 0.0 && ahead(i, j)).count();
    let k = f.top_k.unwrap_or(usize::MAX);
    let in_top_k = |j: usize| rank(j) < k;
    let p_max = p.iter().cloned().fold(0.0, f64::max);
    let top_k_mass: f64 = (0..p.len()).filter(|&i| p[i] > 0.0 && in_top_k(i)).map(|i| p[i]).sum();
    let total: f64 = p.iter().filter(|&&x| x > 0.0).sum();
    (0..p.len())
        .map(|j| {
            let mass_ahead: f64 = (0..p.len()).filter(|&i| p[i] > 0.0 && ahead(i, j)).map(|i| p[i]).sum();
            let reference = if f.order == Order::TopKFirst { top_k_mass } else { total };
            p[j] > 0.0 && in_top_k(j) && mass_ahead <= f.top_p * reference && p[j] >= f.min_p * p_max
        })
        .collect()
}

#[test]
fn matches_the_definition_on_random_rows() {
    let mut rng = Rng::new(31);
    for case in 0..3000 {
        let vocab = 1 + rng.below(40) as usize;
        // Integer logits make ties; some tokens are masked.
        let logits: Vec<f64> =
            (0..vocab).map(|_| if rng.below(6) == 0 { f64::NEG_INFINITY } else { rng.below(8) as f64 * 0.5 }).collect();
        let row = RowParams::new([1.0, 0.5, 2.0][case % 3], 0, 0);
        let filters = Filters {
            top_k: [None, Some(1), Some(1 + rng.below(vocab as u64 + 2) as usize)][case % 3],
            top_p: [1.0, 0.05 + rng.unit() * 0.95][case % 2],
            min_p: [0.0, rng.unit()][(case / 2) % 2],
            order: [Order::Joint, Order::TopKFirst][(case / 4) % 2],
        };
        let p = sampling_kernels::cpu::softmax(&logits, &row);
        assert_eq!(kept(&p, &filters), by_definition(&p, &filters), "{logits:?} {filters:?}");
    }
}

const ALL: Filters = Filters { top_k: None, top_p: 1.0, min_p: 0.0, order: Order::Joint };

#[test]
fn named_cases() {
    let p = [0.4, 0.3, 0.2, 0.1];
    let set = |f: Filters| kept(&p, &f).iter().enumerate().filter(|(_, &k)| k).map(|(j, _)| j).collect::<Vec<_>>();
    // No filter keeps everything; top_k = 1 is greedy; top_p below the largest keeps only it.
    assert_eq!(set(ALL), [0, 1, 2, 3]);
    assert_eq!(set(Filters { top_k: Some(1), ..ALL }), [0]);
    assert_eq!(set(Filters { top_k: Some(9), ..ALL }), [0, 1, 2, 3]);
    assert_eq!(set(Filters { top_p: 0.3, ..ALL }), [0]);
    // Joint and top-k-first differ: 0.4 of the mass lies before token 1, 0.4/0.7 within the top 2.
    let both = Filters { top_k: Some(2), top_p: 0.5, ..ALL };
    assert_eq!(set(both), [0, 1]);
    assert_eq!(set(Filters { order: Order::TopKFirst, ..both }), [0]);
    // min_p = 1 keeps exactly the tokens tied at the maximum; ties at a top-k boundary go to the
    // lower index.
    let flat = kept_from_logits(&[1.0, 3.0, 3.0, 0.0, 3.0], &RowParams::new(1.0, 0, 0), &Filters { min_p: 1.0, ..ALL });
    assert_eq!(flat, [false, true, true, false, true]);
    let ties = kept(&[0.25; 4], &Filters { top_k: Some(2), ..ALL });
    assert_eq!(ties, [true, true, false, false]);
}
