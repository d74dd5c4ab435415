//! WGSL's uniformity rule, checked on the IR: every barrier (a `Barrier`, a `Fence`, which WGSL
//! prints as `storageBarrier()`, and each collective, which holds barriers) must be reached in
//! uniform control flow, or Tint (Chrome's and Dawn's WebGPU) rejects the shader, whatever naga
//! accepts. The rule as WGSL states it, for the code the WGSL emitter prints:
//! - uniform values: literals, the parameters (a uniform buffer), the workgroup's index and
//!   count and the block size, loads from read-only storage at a uniform index, the IR's
//!   functions of uniform arguments, and the results of the reductions, argmaxes and sums (the
//!   emitter reads them with `workgroupUniformLoad`);
//! - non-uniform: the invocation's index, loads from read-write storage (atomic or not) or from
//!   workgroup memory, a scan's result, an atomic's old value, and every variable assigned a
//!   non-uniform value or under non-uniform control flow;
//! - control flow is non-uniform inside a branch or loop whose condition or bounds are, after a
//!   `return` under it (to the end of the body), and in a loop that a `break` under it may leave.
//!
//! A variable is tracked by its name over the whole body (a name two scopes reuse is
//! non-uniform if either is), which may only find more than WGSL does, never less.

use crate::ir::*;
use std::collections::BTreeMap;

/// Checks `kernel` (lowered for WGSL, before the passes): `Err` names the first barrier that
/// WGSL's uniformity analysis would reject, and why.
pub fn check(kernel: &Kernel) -> Result<(), String> {
    let mut a = Analysis { kernel, nonuniform: BTreeMap::new(), errors: Vec::new() };
    // The set only grows: a fixed point within as many rounds as the body has names.
    loop {
        let before = a.nonuniform.len();
        a.errors.clear();
        a.block(&kernel.body, None);
        if a.nonuniform.len() == before {
            break;
        }
    }
    match a.errors.first() {
        Some(e) => Err(format!("{}: {e}", kernel.name)),
        None => Ok(()),
    }
}

struct Analysis<'k> {
    kernel: &'k Kernel,
    /// Each non-uniform name, with why.
    nonuniform: BTreeMap<String, String>,
    errors: Vec<String>,
}

/// How a block ended for the code after it: whether a `return` (or, inside a loop, a `break`)
/// under non-uniform control flow was reached, and why that flow was not uniform.
#[derive(Default)]
struct Leaves {
    ret: Option<String>,
    brk: Option<String>,
}

impl Analysis<'_> {
    /// Why `e` may differ between the invocations of a workgroup, if it may.
    fn why(&self, e: &Expr) -> Option<String> {
        let own = match e {
            Expr::Builtin(Builtin::LocalId) => Some("the invocation's index".to_string()),
            Expr::Var(n) | Expr::BinValue(n, _) if self.nonuniform.contains_key(n) => {
                Some(format!("`{n}` ({})", self.nonuniform[n]))
            }
            Expr::Load(b, _) | Expr::Settled(b, _) if buffer(self.kernel, b).is_ok_and(|d| d.writable) => {
                Some(format!("a load of read-write `{b}`"))
            }
            Expr::LoadShared(a, _) => Some(format!("a load of workgroup `{a}`")),
            _ => None,
        };
        own.or_else(|| children(e).into_iter().find_map(|c| self.why(c)))
    }

    fn mark(&mut self, name: &str, why: impl FnOnce() -> String) {
        if !self.nonuniform.contains_key(name) {
            let why = why();
            // Only the start of a long chain of reasons.
            let why = if why.len() > 300 { format!("{}...", &why[..why.floor_char_boundary(300)]) } else { why };
            self.nonuniform.insert(name.to_string(), why);
        }
    }

    fn barrier(&mut self, what: &str, cf: &Option<String>) {
        if let Some(why) = cf {
            self.errors.push(format!("{what} in control flow that depends on {why}"));
        }
    }

    fn block(&mut self, stmts: &[Stmt], cf: Option<String>) -> Leaves {
        let mut cf = cf;
        let mut leaves = Leaves::default();
        for s in stmts {
            let under = |cf: &Option<String>| cf.as_ref().map(|c| format!("assigned under {c}"));
            match s {
                Stmt::Let { name, init: e, .. }
                | Stmt::Bind { name, value: e, .. }
                | Stmt::Assign { name, value: e } => {
                    if let Some(w) = under(&cf).or_else(|| self.why(e)) {
                        self.mark(name, || w);
                    }
                }
                Stmt::AddToBin { name, bin, value } => {
                    if let Some(w) = under(&cf).or_else(|| self.why(bin)).or_else(|| self.why(value)) {
                        self.mark(name, || w);
                    }
                }
                Stmt::AtomicAdd { old, .. } => self.mark(old, || "an atomic's old value".into()),
                Stmt::Barrier => self.barrier("a workgroup barrier", &cf),
                Stmt::Fence => self.barrier("a storage barrier", &cf),
                Stmt::Reduce { out, .. } => self.collective(&[out], &cf),
                Stmt::ArgMax { out_value, out_index, .. } => self.collective(&[out_value, out_index], &cf),
                Stmt::SumMany { outs, .. } => self.collective(&outs.iter().collect::<Vec<_>>(), &cf),
                Stmt::Scan { out, .. } => {
                    self.barrier(&format!("the scan into `{out}`"), &cf);
                    self.mark(out, || "a scan".into());
                }
                Stmt::If { cond, then, els } => {
                    let inner = cf.clone().or_else(|| self.why(cond).map(|w| format!("a condition on {w}")));
                    for branch in [then, els] {
                        let l = self.block(branch, inner.clone());
                        leaves.ret = leaves.ret.or(l.ret);
                        leaves.brk = leaves.brk.or(l.brk);
                    }
                }
                Stmt::For { var, from, to, step, body } => {
                    let bounds = [from, to, step].into_iter().find_map(|e| self.why(e));
                    let mut inner = cf.clone().or_else(|| bounds.map(|w| format!("a loop bound on {w}")));
                    if let Some(w) = inner.clone().or_else(|| self.why(from)).or_else(|| self.why(step)) {
                        self.mark(var, || w);
                    }
                    let l = self.block(body, inner.clone());
                    if let (None, Some(b)) = (&inner, l.brk) {
                        // A loop some invocations may leave early: its body is non-uniform.
                        inner = Some(b);
                        self.block(body, inner);
                    }
                    leaves.ret = leaves.ret.or(l.ret);
                }
                Stmt::Scope(body) => {
                    let l = self.block(body, cf.clone());
                    leaves.ret = leaves.ret.or(l.ret);
                    leaves.brk = leaves.brk.or(l.brk);
                }
                Stmt::Return(_) => leaves.ret = leaves.ret.or(cf.clone()),
                Stmt::Break => leaves.brk = leaves.brk.or(cf.clone()),
                Stmt::Call { name, .. } => {
                    self.errors.push(format!("procedure `{name}`: check the kernel before outlining"))
                }
                Stmt::LastPart { .. } => self.errors.push("a last part: check the kernel as a target lowers it".into()),
                Stmt::LetBins { .. } | Stmt::Comment(_) | Stmt::Store { .. } | Stmt::StoreShared { .. } => {}
            }
            // After a non-uniform return, the rest of the body is reached by some invocations.
            if cf.is_none() {
                if let Some(r) = &leaves.ret {
                    cf = Some(format!("a return under {r}"));
                }
            }
        }
        leaves
    }

    /// A collective: its barriers need uniform control flow; its results are uniform where it
    /// is (the emitter reads them with `workgroupUniformLoad`).
    fn collective(&mut self, outs: &[&String], cf: &Option<String>) {
        self.barrier(&format!("the collective into `{}`", outs[0]), cf);
        if let Some(c) = cf {
            for o in outs {
                self.mark(o, || format!("a collective under {c}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::last_part::{lower, Lowering};

    /// Every kernel as the WGSL emitter gets it (its merge lowered to a dispatch of its own).
    #[test]
    fn every_wgsl_kernel_reaches_its_barriers_in_uniform_control_flow() {
        let bad: Vec<String> = crate::kernels::all()
            .iter()
            .filter_map(|k| check(&lower(k, Lowering::MergeDispatch).unwrap()).err())
            .collect();
        assert!(bad.is_empty(), "{} kernels:\n{}", bad.len(), bad.join("\n"));
    }

    fn kernel(body: Vec<Stmt>) -> Kernel {
        let mut k = crate::kernels::all().into_iter().find(|k| k.name == "greedy_f32").unwrap();
        k.body = body;
        k
    }

    /// A barrier under a condition on the invocation's index, on a variable assigned from it,
    /// on a read-write word, or after a return some invocations take, is rejected; the same
    /// barrier under a condition on a parameter or a reduction's result is not.
    #[test]
    fn a_planted_barrier_under_a_per_invocation_condition_fails() {
        let lid = || builtin(Builtin::LocalId);
        let mut plants = Vec::new();
        let mut b = Block::new();
        b.if_(lid().eq_(u(0)), |b| b.barrier());
        plants.push(b.stmts);
        let mut b = Block::new();
        b.let_("mine", Ty::U32, lid() * u(2));
        b.if_(var("mine").gt(u(3)), |b| {
            b.reduce(ReduceOp::Max, Ty::U32, u(1), "r");
        });
        plants.push(b.stmts);
        let mut b = Block::new();
        b.if_(load("partials", u(0)).ne_(u(0)), |b| b.fence());
        plants.push(b.stmts);
        let mut b = Block::new();
        b.if_(lid().gt(u(7)), |b| b.stmts.push(Stmt::Return(None)));
        b.barrier();
        plants.push(b.stmts);
        for body in plants {
            let k = kernel(body.clone());
            assert!(check(&k).is_err(), "accepted {body:?}");
        }
        let mut b = Block::new();
        let r = b.reduce(ReduceOp::Max, Ty::U32, lid(), "r");
        b.if_(r.gt(u(3)).and((param("flags") & u(1)).ne_(u(0))), |b| b.barrier());
        check(&kernel(b.stmts)).unwrap();
    }
}
