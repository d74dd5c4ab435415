//! Outlining: a block of statements that a kernel repeats becomes a [`Procedure`], printed once,
//! and each place it stood calls it; then a long body's largest blocks become procedures too
//! ([`BODY_LINES`]), so that a kernel reads as its phases.
//!
//! Builders are Rust functions a kernel calls many times (the merge kernel reads a step of
//! columns in sixty places), and each call used to print its code again: files of thousands of
//! lines that no one could read. The targets compile what they compiled before: CUDA prints a
//! procedure as a macro, and the Vulkan drivers inline SPIR-V functions.
//!
//! Two blocks are one procedure when they are equal once the names they declare are numbered in
//! order, the variables they read from outside (their free variables) are numbered in order of
//! first use, and their literals are numbered too, with the same types. A free variable the block
//! assigns is an inout, and so is a histogram declared outside it; a literal that differs between
//! the blocks is a parameter (so the sixteen steps of a digit select, which differ in their digit,
//! are one procedure). Literals in the index of a load stay (CUDA adds a literal offset to an
//! index in 64 bits, see `cuda.rs`). A block stays where it is if it returns, breaks out of a
//! loop it does not hold, or declares a name it also reads from outside (the procedure's
//! parameter would clash with it).

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

use crate::ir::*;
use crate::passes::map_children;

/// A block shorter than this many printed lines stays where it is: its call and signature would
/// cost about what it saves.
const MIN_LINES: usize = 6;

/// A body (the kernel's or a procedure's) that prints more than this many lines gives its largest
/// block of at most this many to a procedure of its own, until it prints fewer or has no such
/// block: so that each, a file of its own once printed (`gen.rs`), can be read, and a kernel reads
/// as the calls of its phases. CUDA expands the macros to the code it compiled before.
const BODY_LINES: usize = 500;

/// Outlines `kernel`'s repeated blocks, the largest savings first, until none is left, then the
/// blocks of its long bodies ([`BODY_LINES`]); then puts each procedure after those it calls.
pub fn outline(kernel: &mut Kernel) -> Result<(), IrError> {
    loop {
        let mut groups: Vec<Group> = blocks(kernel)?.into_values().filter(|g| g.saving() > 0).collect();
        groups.sort_by_key(|g| std::cmp::Reverse(g.saving()));
        // Outline, this round, groups whose places neither hold nor lie in each other's, so each
        // place's path stays valid while the others are replaced.
        let mut taken: Vec<&Site> = Vec::new();
        let mut chosen: Vec<&Group> = Vec::new();
        for g in &groups {
            if g.sites.iter().all(|s| taken.iter().all(|t| !s.nests(t))) {
                taken.extend(&g.sites);
                chosen.push(g);
            }
        }
        if chosen.is_empty() {
            break;
        }
        for g in chosen {
            outline_group(kernel, g)?;
        }
    }
    // Bodies still too long to read give their largest blocks, each to a procedure of its own.
    while let Some(g) = phase(kernel)? {
        outline_group(kernel, &g)?;
    }
    order_procedures(kernel);
    Ok(())
}

/// The largest block of at most [`BODY_LINES`] that can be a procedure, in the first body that
/// prints more, as a group of one site.
fn phase(kernel: &Kernel) -> Result<Option<Group>, IrError> {
    for i in 0..=kernel.procedures.len() {
        let (scope, body) = body_scope(kernel, i);
        if lines(body) <= BODY_LINES {
            continue;
        }
        let mut found = Blocks { counting: false, single: true, shapes: HashMap::new(), groups: BTreeMap::new() };
        let mut walk = Walk { scope, body: i, path: vec![], until: None, found: None, blocks: Some(&mut found) };
        walk.block(body, "");
        if let Some(mut g) = found.groups.into_values().max_by_key(|g| g.lines) {
            // Named for what it does: a block that is a branch of its builder's code takes the
            // name of the first builder it calls, where it calls one.
            let block = block_at(kernel, &g.sites[0]);
            if !matches!(block.first(), Some(Stmt::Comment(_))) {
                let mut inner = None;
                visit_stmts(block, &mut |s| {
                    if let (None, Stmt::Comment(c)) = (&inner, s) {
                        inner = c.strip_prefix("built by ").map(str::to_string);
                    }
                });
                g.name = inner.unwrap_or(g.name);
            }
            return Ok(Some(g));
        }
    }
    Ok(None)
}

/// Makes group `g` a procedure and puts a call to it at each of its sites.
fn outline_group(kernel: &mut Kernel, g: &Group) -> Result<(), IrError> {
    let name = fresh_name(kernel, &g.name);
    // The literals that differ between sites become parameters `sk_c<n>`.
    let varying: Vec<Option<String>> = {
        let mut n = 0;
        (0..g.lits[0].len())
            .map(|j| {
                let differs = g.lits.iter().any(|l| l[j] != g.lits[0][j]);
                differs.then(|| {
                    n += 1;
                    format!("sk_c{}", n - 1)
                })
            })
            .collect()
    };
    let mut body = {
        let scope = walk_scope(kernel, &g.sites[0])?;
        let mut c = Canon::new(&scope, Some(&varying));
        c.block(block_at(kernel, &g.sites[0]))
    };
    if !matches!(body.first(), Some(Stmt::Comment(_))) {
        body.insert(0, Stmt::Comment(format!("built by {}", g.builder)));
    }
    let named = |v: Vec<(String, Ty)>| v.into_iter().map(|(n, t)| (param_name(&n), t)).collect::<Vec<_>>();
    let (params, inouts) = split_free(&g.free[0]);
    let (mut params, inouts) = (named(params), named(inouts));
    for (j, v) in varying.iter().enumerate() {
        if let Some(v) = v {
            params.push((v.clone(), g.lits[0][j].ty()));
        }
    }
    for (((site, free), lits), bins) in g.sites.iter().zip(&g.free).zip(&g.lits).zip(&g.bins) {
        let (args, outs) = split_free(free);
        let mut args: Vec<Expr> = args.iter().map(|(n, _)| var(n)).collect();
        args.extend(varying.iter().zip(lits).filter(|(v, _)| v.is_some()).map(|(_, l)| Expr::Lit(*l)));
        *block_at_mut(kernel, site) = vec![Stmt::Call {
            name: name.clone(),
            args,
            inouts: outs.into_iter().map(|(n, _)| n).collect(),
            histograms: bins.iter().map(|(n, ..)| n.clone()).collect(),
        }];
    }
    let histograms = g.bins[0].iter().map(|(n, t, b)| (param_name(n), *t, *b)).collect();
    kernel.procedures.push(Procedure { name, params, inouts, histograms, body });
    Ok(())
}

/// A free variable of a block: its name, type, and whether the block assigns it.
type Free = (String, Ty, bool);

/// The name a procedure gives its parameter for the caller's `n`: `n`, but for the names of
/// vector members (`x` to `w`), which CUDA, whose procedures are macros (`cuda.rs`), would
/// substitute in `.x` too.
fn param_name(n: &str) -> String {
    match n {
        "x" | "y" | "z" | "w" => format!("sk_{n}"),
        n => n.to_string(),
    }
}

/// The value parameters and the inouts among a block's free variables.
fn split_free(free: &[Free]) -> (Vec<(String, Ty)>, Vec<(String, Ty)>) {
    let (outs, ins): (Vec<&Free>, Vec<&Free>) = free.iter().partition(|f| f.2);
    let pairs = |v: Vec<&Free>| v.into_iter().map(|(n, t, _)| (n.clone(), *t)).collect();
    (pairs(ins), pairs(outs))
}

/// Where a block is: the kernel body (`body` 0) or a procedure's (`i + 1`), then for each level
/// the statement's index and which of its blocks (0, or 1 for an `else`).
#[derive(Clone, Debug, PartialEq)]
struct Site {
    body: usize,
    path: Vec<(usize, usize)>,
}

impl Site {
    /// Whether one of the two blocks holds the other (or they are one).
    fn nests(&self, other: &Site) -> bool {
        let n = self.path.len().min(other.path.len());
        self.body == other.body && self.path[..n] == other.path[..n]
    }
}

/// Blocks that are one procedure: where each stands, and its free variables and literals there.
struct Group {
    lines: usize,
    builder: String,
    /// What the procedure is named for: its builder, or for a [`phase`] the builder it calls.
    name: String,
    /// The names the first site's block declares.
    declared: Vec<String>,
    sites: Vec<Site>,
    free: Vec<Vec<Free>>,
    lits: Vec<Vec<Lit>>,
    bins: Vec<Vec<Bins>>,
}

/// A histogram declared outside a block: its name, counter type and counters.
type Bins = (String, Ty, u32);

impl Group {
    /// Printed lines saved by outlining every site: all copies but one, less a call per site and
    /// a signature.
    fn saving(&self) -> i64 {
        let n = self.sites.len() as i64;
        if n < 2 || self.lines < MIN_LINES {
            return 0;
        }
        let varying = (0..self.lits[0].len()).filter(|&j| self.lits.iter().any(|l| l[j] != self.lits[0][j])).count();
        self.lines as i64 * (n - 1) - n - 3 - (self.free[0].len() + self.bins[0].len() + varying) as i64
    }
}

/// Every nested block of the kernel's body and procedures that could be outlined, grouped by its
/// canonical form.
fn blocks(kernel: &Kernel) -> Result<BTreeMap<String, Group>, IrError> {
    // Two walks: the first counts each block's shape (cheap), the second puts in canonical form
    // only blocks whose shape another shares.
    let mut found = Blocks { counting: true, single: false, shapes: HashMap::new(), groups: BTreeMap::new() };
    for counting in [true, false] {
        found.counting = counting;
        for i in 0..=kernel.procedures.len() {
            let (scope, body) = body_scope(kernel, i);
            let mut walk = Walk { scope, body: i, path: vec![], until: None, found: None, blocks: Some(&mut found) };
            walk.block(body, "");
        }
    }
    Ok(found.groups)
}

/// What a walk over every body gathers.
struct Blocks {
    counting: bool,
    /// Each block a group of its own, whatever the others, kept only while it is the largest
    /// that fits ([`phase`]).
    single: bool,
    /// How many blocks have each [`shape`].
    shapes: HashMap<u64, usize>,
    groups: BTreeMap<String, Group>,
}

/// A hash of `stmts`' statement and expression kinds, names and literals left out: equal for
/// blocks that may be one procedure.
fn shape(stmts: &[Stmt]) -> u64 {
    fn expr(e: &Expr, h: &mut impl Hasher) {
        std::mem::discriminant(e).hash(h);
        children(e).into_iter().for_each(|c| expr(c, h));
    }
    fn block(stmts: &[Stmt], h: &mut impl Hasher) {
        for s in stmts.iter().filter(|s| !matches!(s, Stmt::Comment(_))) {
            std::mem::discriminant(s).hash(h);
            stmt_exprs(s).into_iter().for_each(|e| expr(e, h));
            for b in stmt_blocks(s) {
                b.len().hash(h);
                block(b, h);
            }
        }
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    block(stmts, &mut h);
    h.finish()
}

/// Body `i` (0 the kernel's, `p + 1` procedure `p`'s) and the names in scope at its top.
fn body_scope(kernel: &Kernel, i: usize) -> (Scope<'_>, &[Stmt]) {
    match i {
        0 => (Scope::new(kernel, &[], None), &kernel.body),
        i => (kernel.procedures[i - 1].scope(kernel), &kernel.procedures[i - 1].body),
    }
}

/// The names in scope where the block at `site` starts.
fn walk_scope<'k>(kernel: &'k Kernel, site: &Site) -> Result<Scope<'k>, IrError> {
    let (scope, body) = body_scope(kernel, site.body);
    let mut walk =
        Walk { scope, body: site.body, path: vec![], until: Some(site.path.clone()), found: None, blocks: None };
    walk.block(body, "");
    walk.found.ok_or_else(|| IrError::ty(kernel, "an outlined block's site went missing"))
}

/// A walk through one body that keeps the types of the names in scope: it groups every nested
/// block into `groups`, and keeps the scope where the block at `until` starts in `found`.
struct Walk<'a, 'k> {
    scope: Scope<'k>,
    body: usize,
    path: Vec<(usize, usize)>,
    until: Option<Vec<(usize, usize)>>,
    found: Option<Scope<'k>>,
    blocks: Option<&'a mut Blocks>,
}

impl Walk<'_, '_> {
    fn block(&mut self, stmts: &[Stmt], outer: &str) {
        if self.until.as_ref() == Some(&self.path) {
            self.found = Some(self.scope.clone());
        }
        let builder = match stmts.first() {
            Some(Stmt::Comment(c)) => c.strip_prefix("built by ").unwrap_or(c).to_string(),
            _ => outer.to_string(),
        };
        let printed = lines(stmts);
        if !self.path.is_empty() && printed >= MIN_LINES {
            self.candidate(stmts, printed, &builder);
        }
        self.scope.push();
        for (i, s) in stmts.iter().enumerate() {
            match s {
                Stmt::Let { name, ty, .. } | Stmt::Bind { name, ty, .. } => self.scope.declare(name, *ty),
                Stmt::LetBins { name, ty, bins } => self.scope.declare_bins(name, *ty, *bins),
                Stmt::For { var, body, .. } => {
                    self.scope.push();
                    self.scope.declare(var, Ty::U32);
                    self.nested(i, 0, body, &builder);
                    self.scope.pop();
                }
                Stmt::If { then, els, .. } => {
                    self.nested(i, 0, then, &builder);
                    self.nested(i, 1, els, &builder);
                }
                Stmt::Scope(body) => self.nested(i, 0, body, &builder),
                _ => {}
            }
        }
        self.scope.pop();
    }

    fn nested(&mut self, i: usize, which: usize, stmts: &[Stmt], builder: &str) {
        self.path.push((i, which));
        self.block(stmts, builder);
        self.path.pop();
    }

    fn candidate(&mut self, stmts: &[Stmt], printed: usize, builder: &str) {
        let Some(blocks) = self.blocks.as_deref_mut() else { return };
        let fingerprint = shape(stmts);
        if blocks.counting {
            *blocks.shapes.entry(fingerprint).or_default() += 1;
            return;
        }
        if !blocks.single && blocks.shapes.get(&fingerprint).copied().unwrap_or(0) < 2 {
            return;
        }
        // A phase is the largest block that fits: one too long, or shorter than one found, is
        // not put in canonical form.
        if blocks.single && (printed > BODY_LINES || blocks.groups.values().any(|g| g.lines > printed)) {
            return;
        }
        let mut c = Canon::new(&self.scope, None);
        let canon = c.block(stmts);
        let names: Vec<&String> = c.free.iter().map(|f| &f.0).chain(c.bins.iter().map(|b| &b.0)).collect();
        if !c.ok || names.iter().any(|n| c.declared.contains(n)) {
            return;
        }
        let types: Vec<Ty> = c.free.iter().map(|f| f.1).chain(c.lits.iter().map(|l| l.ty())).collect();
        let bins: Vec<(Ty, u32)> = c.bins.iter().map(|b| (b.1, b.2)).collect();
        let site = Site { body: self.body, path: self.path.clone() };
        let key = if blocks.single { format!("{site:?}") } else { format!("{canon:?}{types:?}{bins:?}") };
        let g = blocks.groups.entry(key).or_insert_with(|| Group {
            lines: printed,
            builder: builder.to_string(),
            name: builder.to_string(),
            declared: c.declared.clone(),
            sites: vec![],
            free: vec![],
            lits: vec![],
            bins: vec![],
        });
        // The procedure's body is the first site's: a site that passes a name the body declares
        // would have it shadowed where CUDA substitutes it (see `cuda.rs`).
        if names.iter().any(|n| g.declared.contains(n)) {
            return;
        }
        g.sites.push(site);
        g.free.push(c.free);
        g.lits.push(c.lits);
        g.bins.push(c.bins);
    }
}

/// A block with its declared names numbered (`l0`, `l1`, ...) and its free variables numbered in
/// order of first use (`f0`, ...), comments left out: equal for blocks one procedure can be.
struct Canon<'a, 'k> {
    outer: &'a Scope<'k>,
    /// Set to print a procedure's body instead: names stay, comments stay, and literal `j`
    /// becomes the parameter `varying[j]` where it has one.
    varying: Option<&'a [Option<String>]>,
    /// The literals read, in order (those of load indices left out).
    lits: Vec<Lit>,
    scopes: Vec<HashMap<String, String>>,
    histograms: Vec<Vec<String>>,
    /// Every name the block declares, as written.
    declared: Vec<String>,
    locals: usize,
    free: Vec<Free>,
    /// Histograms declared outside, in order of first use.
    bins: Vec<Bins>,
    ok: bool,
    /// Loops of the block around the statement being read.
    loops: usize,
}

impl<'a, 'k> Canon<'a, 'k> {
    fn new(outer: &'a Scope<'k>, varying: Option<&'a [Option<String>]>) -> Self {
        Canon {
            outer,
            varying,
            lits: vec![],
            scopes: vec![],
            histograms: vec![],
            declared: vec![],
            locals: 0,
            free: vec![],
            bins: vec![],
            ok: true,
            loops: 0,
        }
    }

    fn name(&mut self, n: &str, assigned: bool) -> String {
        if let Some(c) = self.scopes.iter().rev().find_map(|s| s.get(n)) {
            return c.clone();
        }
        let i = match self.free.iter().position(|f| f.0 == n) {
            Some(i) => i,
            None => {
                match self.outer.lookup(n) {
                    Ok(t) => self.free.push((n.to_string(), t, false)),
                    Err(_) => self.ok = false,
                }
                self.free.len().saturating_sub(1)
            }
        };
        if let Some(f) = self.free.get_mut(i) {
            f.2 |= assigned;
        }
        match self.varying {
            Some(_) => param_name(n),
            None => format!("f{i}"),
        }
    }

    fn declare(&mut self, n: &str) -> String {
        let c = match self.varying {
            Some(_) => n.to_string(),
            None => format!("l{}", self.locals),
        };
        self.locals += 1;
        self.declared.push(n.to_string());
        self.scopes.last_mut().expect("scope").insert(n.to_string(), c.clone());
        c
    }

    fn histogram(&mut self, n: &str) -> String {
        if self.histograms.iter().any(|h| h.iter().any(|x| x == n)) {
            return n.to_string();
        }
        let i = match self.bins.iter().position(|b| b.0 == n) {
            Some(i) => i,
            None => {
                match self.outer.histogram(n) {
                    Ok((t, bins)) => self.bins.push((n.to_string(), t, bins)),
                    Err(_) => self.ok = false,
                }
                self.bins.len().saturating_sub(1)
            }
        };
        match self.varying {
            Some(_) => param_name(n),
            None => format!("h{i}"),
        }
    }

    fn expr(&mut self, e: &Expr) -> Expr {
        match e {
            Expr::Var(n) => Expr::Var(self.name(n, false)),
            Expr::BinValue(n, i) => Expr::BinValue(self.histogram(n), *i),
            Expr::Lit(l) => {
                let j = self.lits.len();
                self.lits.push(*l);
                match self.varying {
                    Some(v) => v.get(j).cloned().flatten().map_or(Expr::Lit(*l), Expr::Var),
                    None => Expr::Var(format!("k{j}")),
                }
            }
            // A load's index keeps its literals (see the module's doc) but not its names.
            Expr::Load(..) | Expr::Settled(..) => map_children(e.clone(), &mut |c| self.index(&c)),
            e => map_children(e.clone(), &mut |c| self.expr(&c)),
        }
    }

    /// [`Canon::expr`] of a load's index.
    fn index(&mut self, e: &Expr) -> Expr {
        match e {
            Expr::Lit(_) => e.clone(),
            Expr::Var(_) | Expr::BinValue(..) | Expr::Load(..) | Expr::Settled(..) => self.expr(e),
            e => map_children(e.clone(), &mut |c| self.index(&c)),
        }
    }

    fn block(&mut self, stmts: &[Stmt]) -> Vec<Stmt> {
        self.scopes.push(HashMap::new());
        self.histograms.push(vec![]);
        let out = stmts.iter().filter_map(|s| self.stmt(s)).collect();
        self.scopes.pop();
        self.histograms.pop();
        out
    }

    fn stmt(&mut self, s: &Stmt) -> Option<Stmt> {
        Some(match s {
            // Comments name builders: a procedure's body keeps them, its key does not.
            Stmt::Comment(_) if self.varying.is_none() => return None,
            Stmt::Comment(_) => s.clone(),
            Stmt::Let { name, ty, init } => {
                let init = self.expr(init);
                Stmt::Let { name: self.declare(name), ty: *ty, init }
            }
            Stmt::Bind { name, ty, value } => {
                let value = self.expr(value);
                Stmt::Bind { name: self.declare(name), ty: *ty, value }
            }
            Stmt::Assign { name, value } => {
                let value = self.expr(value);
                Stmt::Assign { name: self.name(name, true), value }
            }
            Stmt::Store { buf, index, value } => {
                Stmt::Store { buf: buf.clone(), index: self.expr(index), value: self.expr(value) }
            }
            Stmt::StoreShared { arr, index, value } => {
                Stmt::StoreShared { arr: arr.clone(), index: self.expr(index), value: self.expr(value) }
            }
            Stmt::If { cond, then, els } => {
                Stmt::If { cond: self.expr(cond), then: self.block(then), els: self.block(els) }
            }
            Stmt::For { var, from, to, step, body } => {
                let (from, to, step) = (self.expr(from), self.expr(to), self.expr(step));
                self.scopes.push(HashMap::new());
                let var = self.declare(var);
                self.loops += 1;
                let body = self.block(body);
                self.loops -= 1;
                self.scopes.pop();
                Stmt::For { var, from, to, step, body }
            }
            Stmt::LetBins { name, ty, bins } => {
                self.histograms.last_mut().expect("scope").push(name.clone());
                self.declared.push(name.clone());
                Stmt::LetBins { name: name.clone(), ty: *ty, bins: *bins }
            }
            Stmt::AddToBin { name, bin, value } => {
                Stmt::AddToBin { name: self.histogram(name), bin: self.expr(bin), value: self.expr(value) }
            }
            Stmt::Scope(body) => Stmt::Scope(self.block(body)),
            Stmt::Break => {
                self.ok &= self.loops > 0;
                Stmt::Break
            }
            // Lowered before the passes (`last_part.rs`).
            Stmt::Return(_) | Stmt::LastPart { .. } => {
                self.ok = false;
                return None;
            }
            Stmt::Barrier => Stmt::Barrier,
            Stmt::Fence => Stmt::Fence,
            Stmt::AtomicAdd { buf, index, value, old } => {
                let (index, value) = (self.expr(index), self.expr(value));
                Stmt::AtomicAdd { buf: buf.clone(), index, value, old: self.name(old, true) }
            }
            Stmt::Reduce { op, ty, value, out } => {
                let value = self.expr(value);
                Stmt::Reduce { op: *op, ty: *ty, value, out: self.name(out, true) }
            }
            Stmt::SumMany { ty, values, outs } => {
                let values = values.iter().map(|v| self.expr(v)).collect();
                Stmt::SumMany { ty: *ty, values, outs: outs.iter().map(|o| self.name(o, true)).collect() }
            }
            Stmt::Scan { value, out } => {
                let value = self.expr(value);
                Stmt::Scan { value, out: self.name(out, true) }
            }
            Stmt::ArgMax { ty, value, index, out_value, out_index } => {
                let (value, index) = (self.expr(value), self.expr(index));
                let (out_value, out_index) = (self.name(out_value, true), self.name(out_index, true));
                Stmt::ArgMax { ty: *ty, value, index, out_value, out_index }
            }
            Stmt::Call { name, args, inouts, histograms } => {
                let args = args.iter().map(|a| self.expr(a)).collect();
                let inouts = inouts.iter().map(|o| self.name(o, true)).collect();
                Stmt::Call {
                    name: name.clone(),
                    args,
                    inouts,
                    histograms: histograms.iter().map(|h| self.histogram(h)).collect(),
                }
            }
        })
    }
}

/// About how many lines `stmts` print as (CUDA's lowering of the collectives and histograms).
fn lines(stmts: &[Stmt]) -> usize {
    stmts
        .iter()
        .map(|s| match s {
            Stmt::If { then, els, .. } => 2 + lines(then) + if els.is_empty() { 0 } else { 1 + lines(els) },
            Stmt::For { body, .. } | Stmt::Scope(body) | Stmt::LastPart { merge: body, .. } => 2 + lines(body),
            Stmt::LetBins { bins, .. } => *bins as usize,
            Stmt::AddToBin { .. } => 20,
            Stmt::Reduce { .. } | Stmt::Scan { .. } | Stmt::ArgMax { .. } => 25,
            Stmt::SumMany { values, .. } => 15 + 3 * values.len(),
            Stmt::Let { .. }
            | Stmt::Bind { .. }
            | Stmt::Comment(_)
            | Stmt::Assign { .. }
            | Stmt::Store { .. }
            | Stmt::StoreShared { .. }
            | Stmt::Break
            | Stmt::Return(_)
            | Stmt::Barrier
            | Stmt::AtomicAdd { .. }
            | Stmt::Fence
            | Stmt::Call { .. } => 1,
        })
        .sum()
}

/// `sk_<the builder's last path segment>`, numbered where the kernel has one already.
fn fresh_name(kernel: &Kernel, builder: &str) -> String {
    let base = format!("sk_{}", builder.rsplit("::").next().filter(|s| !s.is_empty()).unwrap_or("block"));
    let taken = |n: &str| kernel.procedures.iter().any(|p| p.name == n) || kernel.functions.iter().any(|f| f.name == n);
    (1..).map(|i| if i == 1 { base.clone() } else { format!("{base}_{i}") }).find(|n| !taken(n)).expect("a free name")
}

fn block_at<'k>(kernel: &'k Kernel, site: &Site) -> &'k Vec<Stmt> {
    let mut block = if site.body == 0 { &kernel.body } else { &kernel.procedures[site.body - 1].body };
    for &(i, which) in &site.path {
        block = match (&block[i], which) {
            (Stmt::If { then, .. }, 0) => then,
            (Stmt::If { els, .. }, _) => els,
            (Stmt::For { body, .. } | Stmt::Scope(body), _) => body,
            (s, _) => unreachable!("a site's path goes through blocks, not {s:?}"),
        };
    }
    block
}

fn block_at_mut<'k>(kernel: &'k mut Kernel, site: &Site) -> &'k mut Vec<Stmt> {
    let mut block = if site.body == 0 { &mut kernel.body } else { &mut kernel.procedures[site.body - 1].body };
    for &(i, which) in &site.path {
        block = match (&mut block[i], which) {
            (Stmt::If { then, .. }, 0) => then,
            (Stmt::If { els, .. }, _) => els,
            (Stmt::For { body, .. } | Stmt::Scope(body), _) => body,
            (s, _) => unreachable!("a site's path goes through blocks, not {s:?}"),
        };
    }
    block
}

/// Each procedure after the procedures it calls (CUDA calls only what is declared above).
fn order_procedures(kernel: &mut Kernel) {
    let calls = |p: &Procedure| {
        let mut names = vec![];
        visit_stmts(&p.body, &mut |s| {
            if let Stmt::Call { name, .. } = s {
                names.push(name.clone());
            }
        });
        names
    };
    let mut left = std::mem::take(&mut kernel.procedures);
    while !left.is_empty() {
        let ready = left
            .iter()
            .position(|p| calls(p).iter().all(|c| kernel.procedures.iter().any(|q| &q.name == c)))
            .expect("procedures made from nested blocks call no cycle");
        kernel.procedures.push(left.remove(ready));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::tests::kernel;

    /// Nine statements under `if (n > 0)` that read `v` and add to `acc`, scaled by `k`, with
    /// locals named `<local>x` and `<local>y`.
    fn step(b: &mut Block, v: &str, acc: &str, k: f32, local: &str) {
        b.if_(param("n").gt(u(0)), |b| {
            let x = b.let_(&format!("{local}x"), Ty::F32, load("x", var(v)));
            let y = b.let_(&format!("{local}y"), Ty::F32, x.clone() * f(k));
            b.set(acc, var(acc) + y.clone());
            b.set(acc, var(acc) * x);
            b.store("y", var(v), y);
            for _ in 0..4 {
                b.set(acc, var(acc) - f(1.0));
            }
        });
    }

    /// `lets` declared, then the steps.
    fn outlined(lets: &[(&str, Ty)], steps: &[(&str, &str, f32, &str)]) -> Kernel {
        let mut b = Block::new();
        for (n, t) in lets {
            b.let_(n, *t, if *t == Ty::F32 { f(0.0) } else { u(0) });
        }
        for (v, acc, k, local) in steps {
            step(&mut b, v, acc, *k, local);
        }
        let mut k = kernel(b.stmts);
        outline(&mut k).unwrap();
        check(&k).unwrap();
        k
    }

    fn calls(k: &Kernel) -> Vec<&Stmt> {
        let mut out = vec![];
        visit_stmts(&k.body, &mut |s| {
            if matches!(s, Stmt::Call { .. }) {
                out.push(s)
            }
        });
        out
    }

    #[test]
    fn blocks_alike_but_for_names_are_one_procedure() {
        let k = outlined(
            &[("a", Ty::U32), ("c", Ty::U32), ("s", Ty::F32), ("t", Ty::F32)],
            &[("a", "s", 2.0, "p"), ("c", "t", 2.0, "q")],
        );
        assert_eq!(k.procedures.len(), 1);
        let p = &k.procedures[0];
        assert_eq!((p.params.clone(), p.inouts.clone()), (vec![("a".into(), Ty::U32)], vec![("s".into(), Ty::F32)]));
        let call = |v: &str, acc: &str| Stmt::Call {
            name: p.name.clone(),
            args: vec![var(v)],
            inouts: vec![acc.into()],
            histograms: vec![],
        };
        assert_eq!(calls(&k), [&call("a", "s"), &call("c", "t")]);
    }

    #[test]
    fn a_literal_that_differs_is_a_parameter() {
        let k = outlined(&[("a", Ty::U32), ("s", Ty::F32)], &[("a", "s", 2.0, "p"), ("a", "s", 3.0, "p")]);
        let p = &k.procedures[0];
        assert_eq!(p.params, [("a".into(), Ty::U32), ("sk_c0".into(), Ty::F32)]);
        let args: Vec<&Vec<Expr>> = calls(&k)
            .into_iter()
            .map(|s| match s {
                Stmt::Call { args, .. } => args,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(args, [&vec![var("a"), f(2.0)], &vec![var("a"), f(3.0)]]);
    }

    #[test]
    fn a_site_passing_a_name_the_body_declares_stays_inline() {
        // The second step reads `px`, which the first's body declares: a macro would capture it.
        let k = outlined(
            &[("a", Ty::U32), ("px", Ty::U32), ("s", Ty::F32)],
            &[("a", "s", 2.0, "p"), ("px", "s", 2.0, "q")],
        );
        assert!(k.procedures.is_empty(), "{:?}", k.procedures);
        // The same steps with other locals are one procedure.
        let k = outlined(
            &[("a", Ty::U32), ("px", Ty::U32), ("s", Ty::F32)],
            &[("a", "s", 2.0, "r"), ("px", "s", 2.0, "q")],
        );
        assert_eq!(k.procedures.len(), 1);
    }

    #[test]
    fn a_block_that_returns_stays_inline() {
        let mut b = Block::new();
        b.let_("s", Ty::F32, f(0.0));
        for _ in 0..2 {
            b.if_(param("n").gt(u(0)), |b| {
                for i in 0..6 {
                    b.store("y", u(i), var("s"));
                }
                b.stmts.push(Stmt::Return(None));
            });
        }
        let mut k = kernel(b.stmts);
        outline(&mut k).unwrap();
        assert!(k.procedures.is_empty());
    }

    /// A body over [`BODY_LINES`] of blocks of different lengths (no two one procedure) gives its
    /// largest blocks to procedures until it prints fewer, and the kernel computes what it did:
    /// the statements are the same once the calls are put back.
    #[test]
    fn a_long_body_gives_its_largest_blocks_to_procedures() {
        let mut b = Block::new();
        b.let_("s", Ty::F32, f(0.0));
        for i in 0..60 {
            b.if_(param("n").gt(u(i)), |b| {
                for j in 0..=i {
                    b.store("y", u(i * 64 + j), var("s") * f(i as f32));
                }
                b.set("s", var("s") + f(1.0));
            });
        }
        let mut k = kernel(b.stmts);
        let before = lines(&k.body);
        assert!(before > BODY_LINES, "{before} lines");
        outline(&mut k).unwrap();
        check(&k).unwrap();
        assert!(lines(&k.body) <= BODY_LINES, "{} lines left", lines(&k.body));
        assert!(!k.procedures.is_empty());
        // The largest blocks went: every block left inline is at most as long as any outlined.
        let outlined = k.procedures.iter().map(|p| lines(&p.body)).min().unwrap();
        let mut inline = 0;
        visit_stmts(&k.body, &mut |s| {
            if let Stmt::If { then, .. } = s {
                inline = inline.max(lines(then));
            }
        });
        assert!(inline <= outlined, "a block of {inline} lines stayed where one of {outlined} went");
        // Put back, the calls give the body as it was (the procedures' bodies start with their
        // builder's comment, which the test's blocks lacked).
        let mut body = k.body.clone();
        for s in &mut body {
            if let Stmt::If { then, .. } = s {
                if let [Stmt::Call { name, .. }] = then.as_slice() {
                    let p = k.procedures.iter().find(|p| &p.name == name).unwrap();
                    *then = p.body.iter().filter(|s| !matches!(s, Stmt::Comment(_))).cloned().collect();
                }
            }
        }
        let mut want = Block::new();
        want.let_("s", Ty::F32, f(0.0));
        for i in 0..60 {
            want.if_(param("n").gt(u(i)), |b| {
                for j in 0..=i {
                    b.store("y", u(i * 64 + j), var("s") * f(i as f32));
                }
                b.set("s", var("s") + f(1.0));
            });
        }
        let strip = |v: Vec<Stmt>| -> Vec<Stmt> {
            v.into_iter()
                .filter(|s| !matches!(s, Stmt::Comment(_)))
                .map(|s| match s {
                    Stmt::If { cond, then, els } => Stmt::If {
                        cond,
                        then: then.into_iter().filter(|s| !matches!(s, Stmt::Comment(_))).collect(),
                        els,
                    },
                    s => s,
                })
                .collect()
        };
        assert_eq!(strip(body), strip(want.stmts));
    }
}
