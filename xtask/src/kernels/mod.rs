//! The kernel library: every entry point the crate launches, written once in the IR.

pub mod math;
pub mod murmur;
pub mod philox;
pub mod sampling;
pub mod seeded;

use crate::ir::Kernel;

/// Every kernel, in the order the manifest lists them.
pub fn all() -> Vec<Kernel> {
    let mut all = sampling::all();
    all.extend(seeded::all());
    all
}
