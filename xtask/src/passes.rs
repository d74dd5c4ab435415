//! The passes every kernel goes through between the builders and the emitters, so both targets
//! print the same simplified IR:
//! 1. only the helpers the body calls are kept (a file carries the helpers it uses, each once);
//! 2. literal conditions are folded (no `if (false)` reaches a generated file);
//! 3. an expression a statement evaluates more than once is bound to a name once, before it
//!    (naga's `Emit`: `let` in WGSL, `const` in CUDA);
//! 4. of the comments naming the Rust builder of each block, only those where the builder
//!    changes are kept;
//! 5. a block the kernel repeats becomes a procedure, printed once (`outline.rs`).

use crate::ir::*;

/// A kernel as the emitters print it, made only by [`prepare`]: both emitters and the workgroup
/// memory count take the same one, so the passes (outlining the most costly) run once a kernel.
pub struct Prepared(Kernel);

impl std::ops::Deref for Prepared {
    type Target = Kernel;
    fn deref(&self) -> &Kernel {
        &self.0
    }
}

impl Prepared {
    /// Renames procedure `from` to `to`, and every call to it: `gen` names procedures across
    /// kernels, so that one printed the same way by two kernels is one file.
    pub fn rename_procedure(&mut self, from: &str, to: &str) {
        fn calls(stmts: &mut [Stmt], from: &str, to: &str) {
            for s in stmts {
                match s {
                    Stmt::Call { name, .. } if name == from => *name = to.to_string(),
                    Stmt::If { then, els, .. } => {
                        calls(then, from, to);
                        calls(els, from, to);
                    }
                    Stmt::For { body, .. } | Stmt::Scope(body) => calls(body, from, to),
                    _ => {}
                }
            }
        }
        let k = &mut self.0;
        calls(&mut k.body, from, to);
        for p in &mut k.procedures {
            calls(&mut p.body, from, to);
            if p.name == from {
                p.name = to.to_string();
            }
        }
    }
}

/// `kernel` as the emitters print it: checked, then simplified as the module says, then checked
/// again (a pass that broke typing is a bug reported as an error, not a driver's complaint).
pub fn prepare(kernel: &Kernel) -> Result<Prepared, IrError> {
    check(kernel)?;
    let functions: Vec<Function> = used_functions(kernel)?.into_iter().cloned().collect();
    let mut out = Kernel { functions: vec![], body: vec![], ..kernel.clone() };
    // Helpers first: binding a kernel body's calls needs their return types.
    for func in functions {
        let body = simplify(&out, &func.params, Some(func.ret), func.body)?;
        out.functions.push(Function { body, ..func });
    }
    out.body = simplify(&out, &[], None, kernel.body.clone())?;
    crate::outline::outline(&mut out)?;
    check(&out)?;
    Ok(Prepared(out))
}

fn simplify(kernel: &Kernel, args: &[(String, Ty)], ret: Option<Ty>, body: Vec<Stmt>) -> Result<Vec<Stmt>, IrError> {
    let folded = fold_block(body);
    let mut binder = Binder { scope: Scope::new(kernel, args, ret), next: 0 };
    let bound = binder.block(folded).map_err(|e| IrError::ty(kernel, e))?;
    Ok(comments(bound, ""))
}

// ---------------------------------------------------------------------------------------------
// Folding literal conditions.

/// `e` with `f` applied to each direct operand.
pub fn map_children(e: Expr, f: &mut impl FnMut(Expr) -> Expr) -> Expr {
    let mut b = |x: Box<Expr>| Box::new(f(*x));
    match e {
        Expr::Lit(_) | Expr::Var(_) | Expr::Param(_) | Expr::Builtin(_) | Expr::BinValue(..) => e,
        Expr::Load(n, i) => Expr::Load(n, b(i)),
        Expr::Settled(n, i) => Expr::Settled(n, b(i)),
        Expr::LoadShared(n, i) => Expr::LoadShared(n, b(i)),
        Expr::Bin(op, x, y) => {
            let x = b(x);
            Expr::Bin(op, x, b(y))
        }
        Expr::Un(op, x) => Expr::Un(op, b(x)),
        Expr::Cast(t, x) => Expr::Cast(t, b(x)),
        Expr::Bitcast(t, x) => Expr::Bitcast(t, b(x)),
        Expr::Component(x, i) => Expr::Component(b(x), i),
        Expr::Math(m, args) => Expr::Math(m, args.into_iter().map(&mut *f).collect()),
        Expr::Intrinsic(m, args) => Expr::Intrinsic(m, args.into_iter().map(&mut *f).collect()),
        Expr::Call(n, args) => Expr::Call(n, args.into_iter().map(&mut *f).collect()),
        Expr::Select(c, x, y) => {
            let c = b(c);
            let x = b(x);
            Expr::Select(c, x, b(y))
        }
        Expr::MakeU32x4(p) => {
            let [p0, p1, p2, p3] = *p;
            Expr::MakeU32x4(Box::new([f(p0), f(p1), f(p2), f(p3)]))
        }
    }
}

/// Folds boolean operators, selects and integer comparisons whose operands are literals. The IR's
/// expressions have no side effects, so an operand a literal makes irrelevant is dropped.
pub fn fold(e: Expr) -> Expr {
    let e = map_children(e, &mut fold);
    let lit_bool = |e: &Expr| match e {
        Expr::Lit(Lit::Bool(v)) => Some(*v),
        _ => None,
    };
    match e {
        Expr::Un(UnOp::Not, a) => match lit_bool(&a) {
            Some(v) => boolean(!v),
            None => Expr::Un(UnOp::Not, a),
        },
        Expr::Bin(op @ (BinOp::And | BinOp::Or), a, b) => {
            // `absorbing` decides the result alone; the other literal leaves the other operand.
            let absorbing = op == BinOp::Or;
            match (lit_bool(&a), lit_bool(&b)) {
                (Some(v), _) | (_, Some(v)) if v == absorbing => boolean(absorbing),
                (Some(_), _) => *b,
                (_, Some(_)) => *a,
                _ => Expr::Bin(op, a, b),
            }
        }
        Expr::Bin(op, a, b) if op.is_comparison() => match (&*a, &*b) {
            (Expr::Lit(Lit::U32(x)), Expr::Lit(Lit::U32(y))) => boolean(compare(op, x, y)),
            (Expr::Lit(Lit::I32(x)), Expr::Lit(Lit::I32(y))) => boolean(compare(op, x, y)),
            (Expr::Lit(Lit::Bool(x)), Expr::Lit(Lit::Bool(y))) => boolean(compare(op, x, y)),
            _ => Expr::Bin(op, a, b),
        },
        Expr::Select(c, a, b) => match lit_bool(&c) {
            Some(true) => *a,
            Some(false) => *b,
            None => Expr::Select(c, a, b),
        },
        e => e,
    }
}

fn compare<T: PartialOrd>(op: BinOp, x: T, y: T) -> bool {
    match op {
        BinOp::Eq => x == y,
        BinOp::Ne => x != y,
        BinOp::Lt => x < y,
        BinOp::Le => x <= y,
        BinOp::Gt => x > y,
        BinOp::Ge => x >= y,
        _ => unreachable!("only comparisons are folded here"),
    }
}

/// Every statement's expressions folded; an `if` on a literal replaced by the branch it takes
/// (in a scope of its own where that branch declares names), one with two empty branches
/// dropped.
fn fold_block(stmts: Vec<Stmt>) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(stmts.len());
    for s in stmts {
        match s {
            Stmt::If { cond, then, els } => {
                let (cond, then, els) = (fold(cond), fold_block(then), fold_block(els));
                let taken = match cond {
                    Expr::Lit(Lit::Bool(v)) => Some(if v { then } else { els }),
                    _ if then.iter().chain(&els).all(|s| matches!(s, Stmt::Comment(_))) => Some(vec![]),
                    cond => {
                        out.push(Stmt::If { cond, then, els });
                        None
                    }
                };
                if let Some(taken) = taken {
                    let declares =
                        taken.iter().any(|s| matches!(s, Stmt::Let { .. } | Stmt::Bind { .. } | Stmt::LetBins { .. }));
                    if declares {
                        out.push(Stmt::Scope(taken));
                    } else {
                        out.extend(taken);
                    }
                }
            }
            Stmt::For { var, from, to, step, body } => {
                out.push(Stmt::For { var, from: fold(from), to: fold(to), step: fold(step), body: fold_block(body) })
            }
            Stmt::Scope(body) => out.push(Stmt::Scope(fold_block(body))),
            s => out.push(map_exprs(s, &mut fold)),
        }
    }
    out
}

/// `s` (a statement without nested blocks) with `f` applied to each expression it evaluates.
fn map_exprs(s: Stmt, f: &mut impl FnMut(Expr) -> Expr) -> Stmt {
    match s {
        Stmt::Let { name, ty, init } => Stmt::Let { name, ty, init: f(init) },
        Stmt::Bind { name, ty, value } => Stmt::Bind { name, ty, value: f(value) },
        Stmt::Assign { name, value } => Stmt::Assign { name, value: f(value) },
        Stmt::Store { buf, index, value } => {
            let index = f(index);
            Stmt::Store { buf, index, value: f(value) }
        }
        Stmt::StoreShared { arr, index, value } => {
            let index = f(index);
            Stmt::StoreShared { arr, index, value: f(value) }
        }
        Stmt::AddToBin { name, bin, value } => {
            let bin = f(bin);
            Stmt::AddToBin { name, bin, value: f(value) }
        }
        Stmt::AtomicAdd { buf, index, value, old } => {
            let index = f(index);
            Stmt::AtomicAdd { buf, index, value: f(value), old }
        }
        Stmt::If { cond, then, els } => Stmt::If { cond: f(cond), then, els },
        Stmt::LastPart { counter, at, merge } => Stmt::LastPart { counter, at: f(at), merge },
        Stmt::Return(e) => Stmt::Return(e.map(f)),
        Stmt::Reduce { op, ty, value, out } => Stmt::Reduce { op, ty, value: f(value), out },
        Stmt::SumMany { ty, values, outs } => Stmt::SumMany { ty, values: values.into_iter().map(f).collect(), outs },
        Stmt::Scan { value, out } => Stmt::Scan { value: f(value), out },
        Stmt::ArgMax { ty, value, index, out_value, out_index } => {
            let value = f(value);
            Stmt::ArgMax { ty, value, index: f(index), out_value, out_index }
        }
        Stmt::Call { name, args, inouts, histograms } => {
            Stmt::Call { name, args: args.into_iter().map(f).collect(), inouts, histograms }
        }
        s @ (Stmt::For { .. }
        | Stmt::Scope(_)
        | Stmt::Comment(_)
        | Stmt::LetBins { .. }
        | Stmt::Break
        | Stmt::Barrier
        | Stmt::Fence) => s,
    }
}

// ---------------------------------------------------------------------------------------------
// Binding repeated expressions.

struct Binder<'k> {
    scope: Scope<'k>,
    /// The next `sk_e<n>`: names are unique per function, so no binding shadows another.
    next: u32,
}

/// Whether binding `e` to a name would name nothing worth naming: a leaf, or a conversion or
/// component of one (free on both targets).
fn trivial(e: &Expr) -> bool {
    let leaf = |e: &Expr| children(e).is_empty();
    leaf(e) || matches!(e, Expr::Cast(_, a) | Expr::Bitcast(_, a) | Expr::Component(a, _) | Expr::Un(_, a) if leaf(a))
}

fn size(e: &Expr) -> usize {
    1 + children(e).into_iter().map(size).sum::<usize>()
}

/// Counts each non-trivial subexpression of `e` into `seen`.
fn occurrences(e: &Expr, seen: &mut Vec<(Expr, usize)>) {
    if !trivial(e) {
        match seen.iter_mut().find(|(x, _)| x == e) {
            Some((_, n)) => *n += 1,
            None => seen.push((e.clone(), 1)),
        }
    }
    children(e).into_iter().for_each(|c| occurrences(c, seen));
}

/// The non-trivial subexpressions of `e` evaluated whenever `e` is. Both arms of a select are
/// (the IR's contract, and WGSL's `select`), the right operand of `&&`/`||` is not (both targets
/// short-circuit, and a load there may be out of bounds otherwise).
fn always(e: &Expr) -> Vec<&Expr> {
    let mut out = match e {
        Expr::Bin(BinOp::And | BinOp::Or, a, _) => always(a),
        e => children(e).into_iter().flat_map(always).collect(),
    };
    if !trivial(e) {
        out.push(e);
    }
    out
}

/// Whether evaluating `e` where the program might not could fault (a load) or cost much (a call).
fn guarded(e: &Expr) -> bool {
    matches!(e, Expr::Load(..) | Expr::Settled(..) | Expr::LoadShared(..) | Expr::Call(..))
        || children(e).into_iter().any(guarded)
}

fn replace(e: Expr, what: &Expr, with: &Expr) -> Expr {
    if &e == what {
        return with.clone();
    }
    map_children(e, &mut |c| replace(c, what, with))
}

fn mentions(e: &Expr, name: &str) -> bool {
    matches!(e, Expr::Var(n) if n == name) || children(e).into_iter().any(|c| mentions(c, name))
}

impl Binder<'_> {
    fn block(&mut self, stmts: Vec<Stmt>) -> Result<Vec<Stmt>, String> {
        self.scope.push();
        let mut out = Vec::with_capacity(stmts.len());
        for s in stmts {
            let s = match s {
                // Loop bounds are evaluated every iteration: nothing is hoisted out of them.
                Stmt::For { var, from, to, step, body } => {
                    self.scope.push();
                    self.scope.declare(&var, Ty::U32);
                    let body = self.block(body)?;
                    self.scope.pop();
                    Stmt::For { var, from, to, step, body }
                }
                Stmt::Scope(body) => Stmt::Scope(self.block(body)?),
                s => {
                    let (binds, s) = self.statement(s)?;
                    out.extend(binds);
                    match s {
                        Stmt::If { cond, then, els } => {
                            let then = self.block(then)?;
                            Stmt::If { cond, then, els: self.block(els)? }
                        }
                        s => s,
                    }
                }
            };
            match &s {
                Stmt::Let { name, ty, .. } => self.scope.declare(name, *ty),
                Stmt::LetBins { name, ty, bins } => self.scope.declare_bins(name, *ty, *bins),
                _ => {}
            }
            out.push(s);
        }
        self.scope.pop();
        Ok(out)
    }

    /// The bindings `s` needs, in dependency order, and `s` reading them.
    fn statement(&mut self, mut s: Stmt) -> Result<(Vec<Stmt>, Stmt), String> {
        let mut binds: Vec<(String, Ty, Expr)> = Vec::new();
        loop {
            let exprs: Vec<&Expr> = stmt_exprs(&s).into_iter().chain(binds.iter().map(|(_, _, v)| v)).collect();
            let mut seen = Vec::new();
            exprs.iter().for_each(|e| occurrences(e, &mut seen));
            let evaluated: Vec<&Expr> = exprs.iter().flat_map(|e| always(e)).collect();
            let best = seen
                .into_iter()
                .filter(|(e, n)| *n > 1 && (!guarded(e) || evaluated.contains(&e)))
                .max_by_key(|(e, _)| size(e));
            let Some((what, _)) = best else { break };
            let name = format!("sk_e{}", self.next);
            self.next += 1;
            let ty = self.scope.ty_of(&what)?;
            self.scope.declare(&name, ty);
            let with = var(&name);
            s = map_exprs(s, &mut |e| replace(e, &what, &with));
            for (_, _, value) in &mut binds {
                *value = replace(std::mem::replace(value, boolean(false)), &what, &with);
            }
            binds.push((name, ty, what));
        }
        // A later binding is part of an earlier one: each goes before the first that reads it.
        let mut ordered: Vec<Stmt> = Vec::with_capacity(binds.len());
        while !binds.is_empty() {
            let ready = (0..binds.len())
                .find(|&i| !binds.iter().any(|(n, ..)| mentions(&binds[i].2, n)))
                .ok_or("bindings that read each other")?;
            let (name, ty, value) = binds.remove(ready);
            ordered.push(Stmt::Bind { name, ty, value });
        }
        Ok((ordered, s))
    }
}

// ---------------------------------------------------------------------------------------------
// Comments.

/// Drops each builder comment that names the builder already in effect: a block's leading
/// comment names the builder of the whole block, and of the blocks in it until one names
/// another.
fn comments(stmts: Vec<Stmt>, outer: &str) -> Vec<Stmt> {
    let builder = match stmts.first() {
        Some(Stmt::Comment(c)) => c.clone(),
        _ => outer.to_string(),
    };
    let mut out = Vec::with_capacity(stmts.len());
    for (i, s) in stmts.into_iter().enumerate() {
        let s = match s {
            Stmt::Comment(c) if (i == 0 && c == outer) || (i > 0 && c == builder) => continue,
            Stmt::If { cond, then, els } => {
                Stmt::If { cond, then: comments(then, &builder), els: comments(els, &builder) }
            }
            Stmt::For { var, from, to, step, body } => {
                Stmt::For { var, from, to, step, body: comments(body, &builder) }
            }
            Stmt::Scope(body) => Stmt::Scope(comments(body, &builder)),
            s => s,
        };
        out.push(s);
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A kernel with buffers `x` (f32, read) and `y` (f32, written), parameter `n` and `body`.
    pub(crate) fn kernel(body: Vec<Stmt>) -> Kernel {
        let buffer = |name: &str, writable| BufferDecl { name: name.into(), storage: Storage::F32, writable };
        Kernel {
            name: "t".into(),
            doc: String::new(),
            passes: 1,
            stages: 1,
            workgroup: crate::tuning::Workgroup::Fitted,
            buffers: vec![buffer("x", false), buffer("y", true)],
            params: vec!["n".into()],
            shared: vec![],
            functions: vec![function("unused", &[("a", Ty::U32)], Ty::U32, |b| b.ret(var("a")))],
            procedures: vec![],
            body,
            u64_as_words: false,
            occupancy: Occupancy::Any,
        }
    }

    /// The statements of `body` that are not comments.
    fn code(body: &[Stmt]) -> Vec<&Stmt> {
        body.iter().filter(|s| !matches!(s, Stmt::Comment(_))).collect()
    }

    #[test]
    fn an_if_on_a_literal_becomes_the_branch_it_takes() {
        let mut b = Block::new();
        b.if_else(boolean(false).or(boolean(false)), |b| b.store("y", u(0), f(1.0)), |b| b.store("y", u(1), f(2.0)));
        b.if_(param("n").gt(u(0)).and(boolean(true).not()), |b| b.store("y", u(2), f(3.0)));
        let out = prepare(&kernel(b.stmts)).unwrap();
        assert_eq!(code(&out.body), [&Stmt::Store { buf: "y".into(), index: u(1), value: f(2.0) }]);
        assert!(out.functions.is_empty(), "a helper nobody calls is dropped");
    }

    #[test]
    fn a_repeated_load_is_bound_once_before_its_statement() {
        let at = param("n") + u(1);
        let mut b = Block::new();
        b.store("y", u(0), load("x", at.clone()) * load("x", at.clone()) + load("x", at.clone()));
        let out = prepare(&kernel(b.stmts)).unwrap();
        let bound = Stmt::Bind { name: "sk_e0".into(), ty: Ty::F32, value: load("x", at) };
        let store = Stmt::Store { buf: "y".into(), index: u(0), value: var("sk_e0") * var("sk_e0") + var("sk_e0") };
        assert_eq!(code(&out.body), [&bound, &store]);
    }

    #[test]
    fn a_load_only_behind_a_short_circuit_stays_there() {
        let guarded = load("x", param("n")).gt(f(0.0)).and(load("x", param("n")).lt(f(1.0)));
        let cond = param("n").lt(u(8)).and(guarded);
        let mut b = Block::new();
        b.if_(cond.clone(), |b| b.store("y", u(0), f(1.0)));
        let out = prepare(&kernel(b.stmts)).unwrap();
        assert!(matches!(code(&out.body)[..], [Stmt::If { cond: c, .. }] if *c == cond), "{:?}", out.body);
    }

    #[test]
    fn a_builder_comment_is_kept_only_where_the_builder_changes() {
        let mut b = Block::new();
        b.scope(|b| b.scope(|b| b.store("y", u(0), f(1.0))));
        let out = prepare(&kernel(b.stmts)).unwrap();
        let comments = |stmts: &[Stmt]| stmts.iter().filter(|s| matches!(s, Stmt::Comment(_))).count();
        let [Stmt::Scope(outer)] = &out.body[..] else { panic!("{:?}", out.body) };
        assert_eq!(comments(outer), 1, "{outer:?}");
        let Some(Stmt::Scope(inner)) = outer.last() else { panic!("{outer:?}") };
        assert_eq!(comments(inner), 0, "{inner:?}");
        let Stmt::Comment(text) = &outer[0] else { unreachable!() };
        assert_eq!(text, "built by passes::tests::a_builder_comment_is_kept_only_where_the_builder_changes");
    }
    /// An atomic add into an atomic buffer, a fence, an atomic store and an atomic load type-check
    /// and are spelled as each target needs (WGSL: `atomic<u32>` and its built-ins; CUDA: a plain
    /// pointer, `atomicAdd`, `__threadfence()`, a volatile load); an add into a plain buffer and
    /// a read-only atomic buffer are errors, not panics.
    #[test]
    fn atomics_type_check_and_lower_on_both_targets() {
        let counters = BufferDecl { name: "c".into(), storage: Storage::AtomicU32, writable: true };
        let with = |c: BufferDecl, add_to: &str| {
            let mut b = Block::new();
            let old = b.atomic_add(add_to, u(0), u(1), "old");
            b.fence();
            b.store("c", u(1), old);
            b.store("y", u(0), load("c", u(2)).cast(Ty::F32));
            let mut k = kernel(b.stmts);
            k.buffers.push(c);
            k
        };
        let k = prepare(&with(counters.clone(), "c")).unwrap();
        let wgsl = crate::wgsl::emit(&k, 64, "test").unwrap().text;
        for want in [
            "var<storage, read_write> c: array<atomic<u32>>;",
            "old = atomicAdd(&c[0u], 1u);",
            "storageBarrier();",
            "atomicStore(&c[1u], old);",
            "f32(atomicLoad(&c[2u]))",
        ] {
            assert!(wgsl.contains(want), "WGSL lacks `{want}`:\n{wgsl}");
        }
        let cuda = crate::cuda::emit(&k, 64, "test").unwrap().text;
        for want in [
            "unsigned int* __restrict__ c",
            "old = atomicAdd(&c[0u], 1u);",
            "__threadfence();",
            "c[1u] = old;",
            "(*(volatile unsigned int*)&c[2u])",
        ] {
            assert!(cuda.contains(want), "CUDA lacks `{want}`:\n{cuda}");
        }
        assert!(matches!(prepare(&with(counters.clone(), "y")), Err(IrError::Type { .. })));
        let read_only = BufferDecl { writable: false, ..counters };
        assert!(matches!(prepare(&with(read_only, "c")), Err(IrError::Type { .. })));
    }

    /// The highest set bit, the fast exponential and the fast division type-check (u32 and
    /// f32, one argument; two f32) and are spelled as each target has them: `firstLeadingBit`,
    /// `exp` and `/` in WGSL; in CUDA helpers of `bfind` and of `ex2.approx.ftz`, each written
    /// once and only where used, and `__fdividef`.
    #[test]
    fn bit_and_fast_exp_intrinsics_lower_on_both_targets() {
        let with = |bit: Expr, e: Expr| {
            let mut b = Block::new();
            let quotient = approx_div(e.clone(), e.clone() + f(1.0));
            b.store("y", u(0), high_bit(bit).cast(Ty::F32) + approx_exp(e) + quotient);
            kernel(b.stmts)
        };
        let k = prepare(&with(load("x", u(0)).bitcast(Ty::U32), load("x", u(1)))).unwrap();
        let wgsl = crate::wgsl::emit(&k, 64, "test").unwrap().text;
        for want in ["firstLeadingBit(", "exp(", " / ("] {
            assert!(wgsl.contains(want), "WGSL lacks `{want}`:\n{wgsl}");
        }
        let cuda = crate::cuda::emit(&k, 64, "test").unwrap().text;
        assert_eq!(cuda.matches("asm(\"bfind.u32").count(), 1, "{cuda}");
        assert_eq!(cuda.matches("asm(\"ex2.approx.ftz.f32").count(), 1, "{cuda}");
        for want in ["sk_high_bit(", "sk_fast_exp(", "__fdividef("] {
            assert!(cuda.contains(want), "CUDA lacks `{want}`:\n{cuda}");
        }
        let mut plain = Block::new();
        plain.store("y", u(0), load("x", u(0)));
        let plain = crate::cuda::emit(&prepare(&kernel(plain.stmts)).unwrap(), 64, "test").unwrap().text;
        assert!(!plain.contains("bfind") && !plain.contains("ex2.approx"), "{plain}");
        assert!(matches!(prepare(&with(load("x", u(0)), load("x", u(1)))), Err(IrError::Type { .. })));
        assert!(matches!(prepare(&with(u(1), u(1))), Err(IrError::Type { .. })));
    }

    /// An atomic workgroup array (a histogram's bins) is declared `atomic<u32>` in WGSL, where
    /// its stores, adds and loads go through the atomic built-ins, and plainly in CUDA; an add
    /// into a plain workgroup array is an error.
    #[test]
    fn atomic_workgroup_arrays_lower_on_both_targets() {
        let with = |shared: SharedDecl| {
            let mut b = Block::new();
            b.store_shared("h", u(0), u(0));
            b.barrier();
            b.atomic_add("h", u(1), u(2), "old");
            b.barrier();
            b.store("y", u(0), load_shared("h", u(3)).cast(Ty::F32));
            let mut k = kernel(b.stmts);
            k.shared.push(shared);
            k
        };
        let k = prepare(&with(SharedDecl::atomic("h", 16))).unwrap();
        let wgsl = crate::wgsl::emit(&k, 64, "test").unwrap().text;
        for want in [
            "var<workgroup> h: array<atomic<u32>, 16>;",
            "atomicStore(&h[0u], 0u);",
            "old = atomicAdd(&h[1u], 2u);",
            "f32(atomicLoad(&h[3u]))",
        ] {
            assert!(wgsl.contains(want), "WGSL lacks `{want}`:\n{wgsl}");
        }
        let cuda = crate::cuda::emit(&k, 64, "test").unwrap().text;
        for want in ["__shared__ __align__(16) unsigned int h[16];", "h[0u] = 0u;", "old = atomicAdd(&h[1u], 2u);"] {
            assert!(cuda.contains(want), "CUDA lacks `{want}`:\n{cuda}");
        }
        assert!(matches!(prepare(&with(SharedDecl::new("h", Ty::U32, 16))), Err(IrError::Type { .. })));
    }
}
