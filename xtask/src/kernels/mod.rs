//! The kernel library: every entry point the crate launches, written once in the IR.

pub mod abi;
pub mod combine;
pub mod filter_min_p;
pub mod filter_rank;
pub mod filter_split;
pub mod filter_top_k;
pub mod filter_top_p;
pub mod filter_values;
pub mod filters;
pub mod math;
pub mod murmur;
pub mod philox;
pub mod race;
pub mod read;
pub mod sampler;
pub mod seeded;
pub mod select;
pub mod softmax;

use crate::ir::Kernel;

/// Every kernel, in the order the manifest lists them.
pub fn all() -> Vec<Kernel> {
    let mut all = softmax::all();
    all.extend(race::all());
    all.extend(philox::all());
    all.extend(seeded::all());
    all.extend(sampler::all());
    all.extend(filters::all());
    all.extend(filter_split::all());
    all.extend(filter_top_k::all());
    all.extend(filter_top_p::all());
    all.extend(read::all());
    all
}

/// The helpers of several lists, each once, in first-seen order (dependencies first).
pub fn union<const N: usize>(lists: [Vec<crate::ir::Function>; N]) -> Vec<crate::ir::Function> {
    let mut out: Vec<crate::ir::Function> = Vec::new();
    for f in lists.into_iter().flatten() {
        if !out.iter().any(|g| g.name == f.name) {
            out.push(f);
        }
    }
    out
}
