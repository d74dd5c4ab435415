//! The kernel library: every entry point the crate launches, written once in the IR.

pub mod math;
pub mod philox;
pub mod sampling;

use crate::ir::Kernel;

/// Every kernel, in the order the manifest lists them.
pub fn all() -> Vec<Kernel> {
    sampling::all()
}
