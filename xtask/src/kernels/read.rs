//! The bandwidth yardstick: a kernel that only reads each row once, so the benchmarks can say
//! what fraction of the device's attainable read bandwidth every sampling kernel reaches.
//!
//! It walks the rows and columns with the same helpers as the sampling kernels (one workgroup per
//! row, four consecutive columns per invocation step) and reads each value as they all do (NaN
//! as -inf), so what it measures is the floor of their memory traffic and of the work they do per
//! element, on the same launch shape. It writes each row's sum (a block reduction) so no compiler
//! can drop the reads.

use super::abi::{buffer, for_each_column, for_each_row, kernel, load_clean, logits_input, Dtype};
use crate::ir::*;

/// `sums[row]` = the float32 sum of the row's `vocab` values (NaN read as -inf), in an order
/// that depends on the block size; one read of every element.
fn read_rows(dtype: Dtype) -> Kernel {
    let mut b = Block::new();
    for_each_row(&mut b, |b| {
        b.let_("s", Ty::F32, f(0.0));
        for_each_column(b, |_, _| {}, |b, col, _| b.set("s", var("s") + load_clean(col)));
        let total = b.reduce(ReduceOp::Sum, Ty::F32, var("s"), "row_sum");
        b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| b.store("sums", var("row"), total));
    });
    let mut buffers = logits_input(dtype).to_vec();
    buffers.push(buffer("sums", Storage::F32, true));
    let doc = "each row's sum, reading every element once: the read bandwidth the benchmarks compare with";
    kernel(format!("read_rows_{}", dtype.suffix()), doc, 1, buffers, vec![], b)
}

/// The read kernel for every input format the sampling kernels take.
pub fn all() -> Vec<Kernel> {
    Dtype::ALL.iter().map(|&d| read_rows(d)).collect()
}
