//! Each target's lowering of [`Stmt::LastPart`], the end of a part of a split row, before the
//! passes: the kernels write the merge once, and the target decides where it runs.
//!
//! - **CUDA** ([`Lowering::Fenced`]): in the same launch. The part's stores, `__threadfence()`,
//!   a barrier, then invocation 0 counts the part in on the row's counter (`atomicAdd`); the
//!   workgroup whose add returns `parts - 1` takes a fence, merges (reading the records
//!   `volatile`, from L2) and sets the counter back to 0. CUDA's memory model orders the
//!   records before the count through the fences.
//! - **WGSL** ([`Lowering::MergeDispatch`]): WGSL's `storageBarrier()` orders storage accesses
//!   within a workgroup only and its atomics are relaxed, so nothing it has orders a record
//!   stored by one workgroup before another workgroup's read of it in the same launch. The
//!   merge therefore runs in a second dispatch of the same shader, after the first in the same
//!   command buffer (a dispatch boundary orders every storage write before the next dispatch's
//!   reads): the body becomes `if (flags & FLAG_MERGE) == 0 { parts } else { merges }`.
//!   - *parts*: the body with each `LastPart` left out where the row has more than one part
//!     (every part is one that did not merge); a row of one part merges there, in place, and
//!     gets no merge dispatch;
//!   - *merges*: the part of the body on the way to each `LastPart` that the merge and the code
//!     after it read (the row loop, the row's words), then `merge` in part 0 of the row, then
//!     the code after it in that workgroup only ([`MERGING`]). The rest (the part's read of its
//!     columns) is left out; a merge that reads a value only that work makes is an error, so
//!     the merge dispatch never reads the input (its `passes` stay the part's).
//!   No counter is touched, and no barrier sits under a condition on an atomic word.

use crate::ir::*;
use crate::kernels::abi::FLAG_MERGE;
use std::collections::BTreeSet;

/// Where a target runs a split row's merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lowering {
    /// In the parts' launch, by the part that arrives last (CUDA).
    Fenced,
    /// In a second dispatch of the kernel, with [`FLAG_MERGE`] (WGSL).
    MergeDispatch,
}

/// In the merge dispatch, whether this workgroup merged the row at its last `LastPart`: the
/// code after that statement runs only where it did.
pub const MERGING: &str = "sk_merging";

/// Whether `kernel` has a split row's merge (and so, in WGSL, a merge dispatch).
pub fn has_merge(kernel: &Kernel) -> bool {
    bodies(kernel).any(contains_last_part)
}

fn contains_last_part(stmts: &[Stmt]) -> bool {
    let mut found = false;
    visit_stmts(stmts, &mut |s| found |= matches!(s, Stmt::LastPart { .. }));
    found
}

/// `kernel` with every [`Stmt::LastPart`] lowered as `how` says (the kernel itself where it has
/// none).
pub fn lower(kernel: &Kernel, how: Lowering) -> Result<Kernel, IrError> {
    check(kernel)?;
    if !has_merge(kernel) {
        return Ok(kernel.clone());
    }
    let body = match how {
        Lowering::Fenced => merge_if_last(&kernel.body),
        Lowering::MergeDispatch => {
            let merges = merge_stage(kernel, &kernel.body, &BTreeSet::new()).map_err(|e| IrError::ty(kernel, e))?;
            let mut b = Block::new();
            b.if_else(
                (param("flags") & u(FLAG_MERGE)).eq_(u(0)),
                |b| b.stmts.extend(merges_of_whole_rows(&kernel.body)),
                |b| {
                    b.let_(MERGING, Ty::Bool, boolean(false));
                    b.stmts.extend(merges);
                },
            );
            b.stmts
        }
    };
    let out = Kernel { body, ..kernel.clone() };
    check(&out)?;
    Ok(out)
}

/// `stmts` with each nested block mapped by `f`, and each `LastPart` replaced by `last(...)`.
fn map_blocks(stmts: &[Stmt], last: &impl Fn(&str, &Expr, &[Stmt]) -> Vec<Stmt>) -> Vec<Stmt> {
    let mut out = Vec::new();
    for s in stmts {
        match s {
            Stmt::LastPart { counter, at, merge } => out.extend(last(counter, at, &map_blocks(merge, last))),
            Stmt::If { cond, then, els } => {
                out.push(Stmt::If { cond: cond.clone(), then: map_blocks(then, last), els: map_blocks(els, last) })
            }
            Stmt::For { var, from, to, step, body } => out.push(Stmt::For {
                var: var.clone(),
                from: from.clone(),
                to: to.clone(),
                step: step.clone(),
                body: map_blocks(body, last),
            }),
            Stmt::Scope(body) => out.push(Stmt::Scope(map_blocks(body, last))),
            s => out.push(s.clone()),
        }
    }
    out
}

/// CUDA's protocol: every invocation's record stores reach the device before invocation 0
/// counts the part in; the part whose count completes the row merges after a fence (every other
/// part's records were published before its add, which came before ours).
fn merge_if_last(stmts: &[Stmt]) -> Vec<Stmt> {
    map_blocks(stmts, &|counter, at, merge| {
        let mut b = Block::new();
        b.fence();
        b.barrier();
        b.let_("arrived", Ty::U32, u(0));
        b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| {
            let old = b.atomic_add(counter, at.clone(), u(1), "before");
            b.set("arrived", old + u(1));
        });
        let arrived = b.reduce(ReduceOp::Max, Ty::U32, var("arrived"), "arrivals");
        b.if_(arrived.eq_(var("parts")), |b| {
            b.fence();
            b.stmts.extend(merged_and_reset(counter, at, merge));
        });
        b.stmts
    })
}

/// `merge`, then the row's counter set back to 0 (WGSL's merge dispatch keeps it at 0 too, and
/// so binds it as CUDA does).
fn merged_and_reset(counter: &str, at: &Expr, merge: &[Stmt]) -> Vec<Stmt> {
    let mut b = Block::new();
    b.stmts.extend(merge.iter().cloned());
    b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| b.store(counter, at.clone(), u(0)));
    b.stmts
}

/// The parts dispatch: a split row's parts do not merge, but a row of one part merges in
/// place, after a storage barrier (its own records are all it reads). The host follows a launch
/// with a merge dispatch only where it gives a row more than one workgroup
/// (`Launch::splits_rows`), so a row of one part has no other merge.
fn merges_of_whole_rows(stmts: &[Stmt]) -> Vec<Stmt> {
    map_blocks(stmts, &|_, _, merge| {
        let mut b = Block::new();
        b.if_(var("parts").le(u(1)), |b| {
            b.fence();
            b.stmts.extend(merge.iter().cloned());
        });
        b.stmts
    })
}

/// The merge dispatch of `stmts`, a block that holds a `LastPart`: its statements before the
/// first that holds one, those the rest reads ([`slice()`]); each that holds one, lowered; the
/// others after, in the merging workgroup only. `after`: what the code after the block reads.
fn merge_stage(kernel: &Kernel, stmts: &[Stmt], after: &BTreeSet<String>) -> Result<Vec<Stmt>, String> {
    let holds = |s: &Stmt| contains_last_part(std::slice::from_ref(s));
    let first = stmts.iter().position(holds).ok_or("no last part")?;
    // Lowered from the last statement back, so each knows what the merging workgroup reads
    // after it.
    let mut tail: Vec<Stmt> = Vec::new();
    let mut rest: Vec<Stmt> = Vec::new();
    let flush = |tail: &mut Vec<Stmt>, rest: &mut Vec<Stmt>| {
        if !rest.is_empty() {
            rest.reverse();
            tail.insert(0, Stmt::If { cond: var(MERGING), then: std::mem::take(rest), els: vec![] });
        }
    };
    for s in stmts[first..].iter().rev() {
        if !holds(s) {
            rest.push(s.clone());
            continue;
        }
        flush(&mut tail, &mut rest);
        let mut later = free_vars(&merged(&tail));
        later.extend(after.iter().cloned());
        let lowered = match s {
            Stmt::LastPart { counter, at, merge } => vec![
                Stmt::Assign { name: MERGING.into(), value: var("part").eq_(u(0)) },
                Stmt::If { cond: var(MERGING), then: merged_and_reset(counter, at, merge), els: vec![] },
            ],
            Stmt::If { cond, then, els } => {
                let branch = |b: &[Stmt]| match contains_last_part(b) {
                    true => merge_stage(kernel, b, &later),
                    false => Ok(vec![]),
                };
                vec![Stmt::If { cond: cond.clone(), then: branch(then)?, els: branch(els)? }]
            }
            Stmt::For { var: v, from, to, step, body } => {
                let mut inner = vec![Stmt::Assign { name: MERGING.into(), value: boolean(false) }];
                inner.extend(merge_stage(kernel, body, &later)?);
                vec![Stmt::For { var: v.clone(), from: from.clone(), to: to.clone(), step: step.clone(), body: inner }]
            }
            Stmt::Scope(body) => vec![Stmt::Scope(merge_stage(kernel, body, &later)?)],
            _ => return Err("a last part in a statement that is not a block".into()),
        };
        tail.splice(0..0, lowered);
    }
    flush(&mut tail, &mut rest);
    let mut needed = free_vars(&merged(&tail));
    needed.extend(after.iter().cloned());
    let mut named = mentioned(&tail);
    let mut kept = Vec::new();
    for s in stmts[..first].iter().rev() {
        if let Some(s) = slice(kernel, s, &mut needed, &mut named)? {
            kept.push(s);
        }
    }
    kept.reverse();
    kept.extend(tail);
    Ok(kept)
}

/// Whether lowered `stmts` set [`MERGING`] from a merge (not the loop's reset).
fn sets_merging(stmts: &[Stmt]) -> bool {
    let mut found = false;
    visit_stmts(stmts, &mut |s| {
        found |= matches!(s, Stmt::Assign { name, value } if name == MERGING && *value != boolean(false))
    });
    found
}

/// What the merging workgroup runs of lowered `stmts`, for [`free_vars`]: a branch on the way
/// to a merge as taken, the merge and the code under [`MERGING`] as run. Its reads are what
/// the merge dispatch must compute before them.
fn merged(stmts: &[Stmt]) -> Vec<Stmt> {
    let mut out = Vec::new();
    for s in stmts {
        match s {
            Stmt::If { cond: Expr::Var(n), then, .. } if n == MERGING => out.push(Stmt::Scope(merged(then))),
            Stmt::If { cond, then, els } if sets_merging(then) != sets_merging(els) => {
                out.push(Stmt::If { cond: cond.clone(), then: vec![], els: vec![] });
                out.push(Stmt::Scope(merged(if sets_merging(then) { then } else { els })));
            }
            Stmt::If { cond, then, els } => {
                out.push(Stmt::If { cond: cond.clone(), then: merged(then), els: merged(els) })
            }
            Stmt::For { var: v, from, to, step, body } => out.push(Stmt::For {
                var: v.clone(),
                from: from.clone(),
                to: to.clone(),
                step: step.clone(),
                body: merged(body),
            }),
            Stmt::Scope(body) => out.push(Stmt::Scope(merged(body))),
            s => out.push(s.clone()),
        }
    }
    out
}

/// `s`, a statement before a block's first `LastPart`, if the merge dispatch needs it: it
/// declares a name the rest uses (`named`), or declares or writes a value the rest reads
/// (`needed`, which then gains what it reads), or it may leave the block. Such a statement must
/// be cheap: no loop, collective, barrier, store or read of the input, so that the merge
/// dispatch never repeats a part's work. A reduction is let through: what it reduces is sliced
/// in turn, so it is a word every invocation read (a row's state, made uniform for WGSL), never a
/// part's work.
fn slice(
    kernel: &Kernel,
    s: &Stmt,
    needed: &mut BTreeSet<String>,
    named: &mut BTreeSet<String>,
) -> Result<Option<Stmt>, String> {
    let one = std::slice::from_ref(s);
    let declared = match s {
        Stmt::Let { name, .. } | Stmt::Bind { name, .. } | Stmt::LetBins { name, .. } => Some(name),
        _ => None,
    };
    let wanted = match declared {
        // A variable the rest assigns before it reads it: declared, its first value unused.
        Some(name) if !needed.contains(name) && named.contains(name) => {
            if let Stmt::Let { name, ty, .. } = s {
                return Ok(Some(Stmt::Let { name: name.clone(), ty: *ty, init: zero(*ty) }));
            }
            true
        }
        Some(name) => needed.remove(name),
        None => {
            let mut w = BTreeSet::new();
            writes(one, &mut w);
            w.iter().any(|n| needed.contains(n)) || leaves(s)
        }
    };
    if !wanted {
        return Ok(None);
    }
    if let Some(why) = costly(kernel, one) {
        let what = declared.map_or_else(|| format!("{needed:?}"), |n| format!("`{n}`"));
        return Err(format!("the merge reads {what}, which the part's work makes ({why})"));
    }
    needed.extend(free_vars(one));
    named.extend(mentioned(one));
    Ok(Some(s.clone()))
}

/// Every variable and histogram name `stmts` read or write that they do not declare.
fn mentioned(stmts: &[Stmt]) -> BTreeSet<String> {
    names(stmts, true)
}

/// Whether `s` may leave the enclosing block (a `return`, or a `break` not inside its own loop).
fn leaves(s: &Stmt) -> bool {
    fn any(stmts: &[Stmt], in_loop: bool) -> bool {
        stmts.iter().any(|s| match s {
            Stmt::Return(_) => true,
            Stmt::Break => !in_loop,
            Stmt::For { body, .. } => any(body, true),
            _ => stmt_blocks(s).into_iter().any(|b| any(b, in_loop)),
        })
    }
    any(std::slice::from_ref(s), false)
}

/// Why `stmts` are not cheap enough to run again in the merge dispatch, if they are not.
fn costly(kernel: &Kernel, stmts: &[Stmt]) -> Option<&'static str> {
    let mut why = None;
    visit_stmts(stmts, &mut |s| {
        why = why.or(match s {
            Stmt::For { .. } => Some("a loop"),
            Stmt::SumMany { .. } | Stmt::Scan { .. } | Stmt::ArgMax { .. } => Some("a collective"),
            Stmt::Barrier | Stmt::Fence | Stmt::AtomicAdd { .. } | Stmt::LastPart { .. } => Some("a barrier or atomic"),
            Stmt::Store { .. } | Stmt::StoreShared { .. } | Stmt::AddToBin { .. } | Stmt::Call { .. } => {
                Some("a store")
            }
            _ => None,
        });
    });
    let input = any_load(stmts, &|b| kernel.buffers.iter().any(|d| d.name == b && d.holds_values()));
    why.or(input.then_some("a read of the input"))
}

fn any_load(stmts: &[Stmt], pred: &impl Fn(&str) -> bool) -> bool {
    let mut found = false;
    visit_exprs(stmts, &mut |e| found |= matches!(e, Expr::Load(b, _) | Expr::Settled(b, _) if pred(b)));
    found
}

/// The names `stmts` assign (variables, collectives' outputs, histograms), through nested blocks.
fn writes(stmts: &[Stmt], out: &mut BTreeSet<String>) {
    visit_stmts(stmts, &mut |s| match s {
        Stmt::Assign { name, .. } | Stmt::AddToBin { name, .. } => {
            out.insert(name.clone());
        }
        Stmt::AtomicAdd { old: name, .. } | Stmt::Reduce { out: name, .. } | Stmt::Scan { out: name, .. } => {
            out.insert(name.clone());
        }
        Stmt::SumMany { outs, .. } | Stmt::Call { inouts: outs, .. } => out.extend(outs.iter().cloned()),
        Stmt::ArgMax { out_value, out_index, .. } => {
            out.insert(out_value.clone());
            out.insert(out_index.clone());
        }
        _ => {}
    });
}

/// The variables and histograms `stmts` read before they declare or assign them (an assignment
/// inside a branch or loop counts as not made).
pub fn free_vars(stmts: &[Stmt]) -> BTreeSet<String> {
    names(stmts, false)
}

/// [`free_vars`], and with `all` every name they assign without declaring it too.
fn names(stmts: &[Stmt], all: bool) -> BTreeSet<String> {
    fn reads(e: &Expr, defined: &BTreeSet<String>, out: &mut BTreeSet<String>) {
        let mut add = |n: &String| {
            if !defined.contains(n) {
                out.insert(n.clone());
            }
        };
        match e {
            Expr::Var(n) | Expr::BinValue(n, _) => add(n),
            _ => {}
        }
        for c in children(e) {
            reads(c, defined, out);
        }
    }
    /// Returns the names it assigns for certain that it does not declare. `defined`: the
    /// names declared or assigned so far; `declared`, declared.
    fn block(
        stmts: &[Stmt],
        (mut defined, mut declared): (BTreeSet<String>, BTreeSet<String>),
        all: bool,
        out: &mut BTreeSet<String>,
    ) -> BTreeSet<String> {
        let (mut assigned, mut mine) = (BTreeSet::new(), BTreeSet::new());
        for s in stmts {
            if all {
                let mut w = BTreeSet::new();
                writes(std::slice::from_ref(s), &mut w);
                w.retain(|n| !declared.contains(n));
                if let Stmt::If { .. } | Stmt::For { .. } | Stmt::Scope(_) | Stmt::LastPart { .. } = s {
                    // Their blocks' own declarations are found below.
                } else {
                    out.extend(w);
                }
            }
            for e in stmt_exprs(s) {
                reads(e, &defined, out);
            }
            match s {
                Stmt::AddToBin { name, .. } if !defined.contains(name) => {
                    out.insert(name.clone());
                }
                Stmt::Call { inouts, histograms, .. } => {
                    out.extend(inouts.iter().chain(histograms).filter(|n| !defined.contains(*n)).cloned())
                }
                _ => {}
            }
            match s {
                Stmt::If { then, els, .. } => {
                    block(then, (defined.clone(), declared.clone()), all, out);
                    block(els, (defined.clone(), declared.clone()), all, out);
                }
                Stmt::For { var, body, .. } => {
                    let (mut inner, mut inner_declared) = (defined.clone(), declared.clone());
                    inner.insert(var.clone());
                    inner_declared.insert(var.clone());
                    block(body, (inner, inner_declared), all, out);
                }
                Stmt::Scope(body) | Stmt::LastPart { merge: body, .. } => {
                    let w = block(body, (defined.clone(), declared.clone()), all, out);
                    assigned.extend(w.iter().cloned());
                    defined.extend(w);
                }
                _ => {
                    let mut w = BTreeSet::new();
                    writes(std::slice::from_ref(s), &mut w);
                    assigned.extend(w.iter().cloned());
                    defined.extend(w);
                }
            }
            if let Stmt::Let { name, .. } | Stmt::Bind { name, .. } | Stmt::LetBins { name, .. } = s {
                defined.insert(name.clone());
                declared.insert(name.clone());
                mine.insert(name.clone());
            }
        }
        assigned.retain(|n| !mine.contains(n));
        assigned
    }
    let mut out = BTreeSet::new();
    block(stmts, Default::default(), all, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernels() -> impl Iterator<Item = Kernel> {
        crate::kernels::all().into_iter().filter(has_merge)
    }

    /// Whether `stmts` add atomically to a storage buffer.
    fn counts(kernel: &Kernel, stmts: &[Stmt]) -> bool {
        let mut found = false;
        visit_stmts(stmts, &mut |s| found |= matches!(s, Stmt::AtomicAdd { buf, .. } if buffer(kernel, buf).is_ok()));
        found
    }

    /// WGSL: no kernel counts parts in on a storage word (the only way a workgroup learned it
    /// may read another's record in the launch), and the merges run only where the flags say
    /// it is the merge dispatch.
    #[test]
    fn wgsl_merges_in_a_dispatch_of_its_own() {
        let mut n = 0;
        for k in kernels() {
            let lowered = lower(&k, Lowering::MergeDispatch).unwrap();
            assert!(!counts(&lowered, &lowered.body), "{}", k.name);
            let [Stmt::If { cond, then, els }] = lowered.body.as_slice() else {
                panic!("{}: {:?}", k.name, lowered.body)
            };
            assert_eq!(*cond, (param("flags") & u(FLAG_MERGE)).eq_(u(0)), "{}", k.name);
            let mut merging = false;
            visit_stmts(then, &mut |s| merging |= matches!(s, Stmt::Assign { name, .. } if name == MERGING));
            assert!(!merging, "{}: the parts' dispatch merges a split row", k.name);
            assert!(sets_merging(els), "{}: the merge dispatch merges nothing", k.name);
            n += 1;
        }
        // The argmax family (7), `sample` (3), the seeded kernel from logits (3), the one-read
        // path's parts and merge (8).
        assert_eq!(n, 21);
    }

    /// CUDA: every count is preceded by a device-scope fence after the part's stores, and the
    /// workgroup that completes the count fences again before the merge reads.
    #[test]
    fn cuda_fences_around_the_count() {
        for k in kernels() {
            let lowered = lower(&k, Lowering::Fenced).unwrap();
            let mut seen = 0;
            fn walk(k: &Kernel, stmts: &[Stmt], seen: &mut usize, name: &str) {
                for (i, s) in stmts.iter().enumerate() {
                    if let Stmt::If { then, .. } = s {
                        if then.iter().any(|t| matches!(t, Stmt::AtomicAdd { buf, .. } if buffer(k, buf).is_ok())) {
                            assert!(
                                matches!(stmts[..i].iter().rev().nth(2), Some(Stmt::Fence)),
                                "{name}: no fence before the count"
                            );
                            let arrival = stmts[i..].iter().find_map(|t| match t {
                                Stmt::If { cond, then, .. } if *cond == var("arrivals").eq_(var("parts")) => Some(then),
                                _ => None,
                            });
                            let first = arrival.and_then(|t| t.iter().find(|t| !matches!(t, Stmt::Comment(_))));
                            assert_eq!(first, Some(&Stmt::Fence), "{name}: no fence before the merge");
                            *seen += 1;
                        }
                    }
                    for b in stmt_blocks(s) {
                        walk(k, b, seen, name);
                    }
                }
            }
            walk(&lowered, &lowered.body, &mut seen, &k.name);
            assert!(seen > 0, "{}", k.name);
        }
    }

    /// A merge that reads what only the part's read of its columns makes (here a reduction
    /// over them) cannot run in the merge dispatch: the lowering refuses it, rather than read
    /// the row again.
    #[test]
    fn a_merge_that_needs_the_parts_work_is_refused() {
        let mut k = kernels().next().unwrap();
        let mut b = Block::new();
        crate::kernels::abi::for_each_row_part(&mut b, |b| {
            let v = b.reduce(ReduceOp::Max, Ty::F32, load("x", var("col_lo")), "part_max");
            let n = b.scan(u(1), "part_n");
            b.last_part("counters", var("row_slot"), |b| {
                b.store("tokens", var("row"), v.bitcast(Ty::U32));
                b.store("tokens", var("row"), n);
            });
        });
        k.body = b.stmts;
        lower(&k, Lowering::Fenced).unwrap();
        let err = lower(&k, Lowering::MergeDispatch).unwrap_err();
        assert!(err.to_string().contains("a collective") || err.to_string().contains("a read of the input"), "{err}");
    }
}
