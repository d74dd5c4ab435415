//! The WGSL emitter: one compute shader per kernel, entry point `main`.
//!
//! Lowerings particular to WGSL:
//! - collectives use a workgroup-memory tree (no subgroup width is assumed, since lavapipe's is 8,
//!   NVIDIA's 32 and AMD's 64);
//! - f16/bf16 buffers are `array<u32>` words unpacked in the shader, so no `enable f16` is needed;
//! - `mulhi` is a helper built from 16-bit halves (WGSL has no 64-bit product in core);
//! - parameters are one uniform struct, padded to 16 bytes;
//! - atomic buffers are `array<atomic<u32>>`, read and written only through `atomicLoad`,
//!   `atomicStore` and `atomicAdd`, and the fence is `storageBarrier()`;
//! - a kernel built for devices without 64-bit integers ([`Kernel::u64_as_words`]) holds each
//!   u64 as two u32 words (`wgsl_u64.rs`).

use crate::ir::*;
use crate::out::{argmax_name, header, reduce_name, sums_name, CLike, Out, Printed};
use crate::passes::Prepared;
use crate::wgsl_u64;

pub fn ty(t: Ty) -> &'static str {
    match t {
        Ty::Bool => "bool",
        Ty::U32 => "u32",
        Ty::I32 => "i32",
        Ty::U64 => "u64",
        Ty::F32 => "f32",
        Ty::F64 => "f64",
        Ty::U32x4 => "vec4<u32>",
    }
}

fn lit(l: Lit) -> String {
    match l {
        Lit::Bool(v) => v.to_string(),
        Lit::U32(v) => format!("{v}u"),
        Lit::I32(v) => format!("({v}i)"),
        Lit::U64(v) => format!("{v}lu"),
        Lit::F32(v) if v.is_finite() => format!("({v:?}f)"),
        Lit::F32(v) => format!("bitcast<f32>({}u)", v.to_bits()),
        Lit::F64(v) if v.is_finite() => format!("({v:?}lf)"),
        Lit::F64(v) => format!("bitcast<f64>({}lu)", v.to_bits()),
    }
}

#[derive(Clone)]
struct Emitter<'k> {
    kernel: &'k Kernel,
    block: u32,
    /// The histograms that are pointers here: a procedure's, which it reaches through the
    /// caller's (a copy in and out would move every counter at each call).
    pointed: Vec<String>,
}

impl Emitter<'_> {
    /// Whether `arr` is an atomic workgroup array, whose loads and stores WGSL makes atomic.
    fn atomic_shared(&self, arr: &str) -> bool {
        self.kernel.shared.iter().any(|s| s.name == arr && s.atomic)
    }
    /// How histogram `name` is read and written here.
    fn histogram(&self, name: &str) -> String {
        match self.pointed.iter().any(|p| p == name) {
            true => format!("(*{name})"),
            false => name.to_string(),
        }
    }
    /// Whether u64 values are two u32 words in this kernel.
    fn words(&self) -> bool {
        self.kernel.u64_as_words
    }
    /// How `t` is spelled in this kernel.
    fn ty(&self, t: Ty) -> &'static str {
        if t == Ty::U64 && self.words() {
            wgsl_u64::TYPE
        } else {
            ty(t)
        }
    }
    /// Whether `e` is a u64 held as words.
    fn wide(&self, e: &Expr, scope: &Scope) -> Result<bool, IrError> {
        Ok(self.words() && scope.ty_of(e).map_err(|m| IrError::ty(self.kernel, m))? == Ty::U64)
    }
    /// `a + b` of type `t`, as the sums of the collectives take it.
    fn add(&self, t: Ty, a: &str, b: &str) -> String {
        match t {
            Ty::U64 if self.words() => format!("sk_add64({a}, {b})"),
            _ => format!("{a} + {b}"),
        }
    }
}

impl CLike for Emitter<'_> {
    fn kernel(&self) -> &Kernel {
        self.kernel
    }
    fn expr(&self, e: &Expr, scope: &Scope) -> Result<String, IrError> {
        let x = |e: &Expr| self.expr(e, scope);
        Ok(match e {
            Expr::Lit(l) => match wgsl_u64::is_u64(l).filter(|_| self.words()) {
                Some(v) => wgsl_u64::lit(v),
                None => lit(*l),
            },
            Expr::Var(n) => n.clone(),
            Expr::Param(n) => format!("params.{n}"),
            Expr::Builtin(b) => match b {
                Builtin::LocalId => "sk_lid".into(),
                Builtin::GroupId => "sk_wid.x".into(),
                Builtin::NumGroups => "sk_nwg.x".into(),
                Builtin::BlockSize => "BLOCK".into(),
            },
            // WGSL orders no plain read after another workgroup's atomic: a settled word is read
            // as every other word of its buffer.
            Expr::Load(buf, idx) | Expr::Settled(buf, idx) => {
                let decl = buffer(self.kernel, buf)?;
                match decl.storage {
                    _ if decl.holds_values() => format!("sk_load_{buf}({})", x(idx)?),
                    Storage::AtomicU32 => format!("atomicLoad(&{buf}[{}])", x(idx)?),
                    Storage::F32 | Storage::F16 | Storage::Bf16 | Storage::U32 | Storage::F64 => {
                        format!("{buf}[{}]", x(idx)?)
                    }
                }
            }
            Expr::LoadShared(arr, idx) if self.atomic_shared(arr) => format!("atomicLoad(&{arr}[{}])", x(idx)?),
            Expr::LoadShared(arr, idx) => format!("{arr}[{}]", x(idx)?),
            Expr::Bin(op, a, b) if self.wide(a, scope)? => {
                match wgsl_u64::bin(*op, &x(a)?, &x(b)?).map_err(|m| IrError::target(self.kernel, m))? {
                    Some(call) => call,
                    None => format!("({} {} {})", x(a)?, op.symbol(), x(b)?),
                }
            }
            Expr::Bin(op, a, b) => format!("({} {} {})", x(a)?, op.symbol(), x(b)?),
            Expr::Un(op, a) => {
                let s = match op {
                    UnOp::Neg => "-",
                    UnOp::Not => "!",
                    UnOp::BitNot => "~",
                };
                format!("({s}{})", x(a)?)
            }
            Expr::Cast(t, a) if self.words() && (*t == Ty::U64 || self.wide(a, scope)?) => {
                let from = scope.ty_of(a).map_err(|m| IrError::ty(self.kernel, m))?;
                wgsl_u64::cast(self.kernel, *t, from, &x(a)?)?
            }
            Expr::Cast(t, a) => format!("{}({})", ty(*t), x(a)?),
            Expr::Bitcast(t, a) if self.words() && (*t == Ty::U64 || self.wide(a, scope)?) => {
                return Err(IrError::target(self.kernel, "a bitcast of a u64 held as words"))
            }
            Expr::Bitcast(t, a) => format!("bitcast<{}>({})", ty(*t), x(a)?),
            Expr::Math(m, args) => {
                let name = match m {
                    MathFn::Min => "min",
                    MathFn::Max => "max",
                    MathFn::Fma => "fma",
                    MathFn::Floor => "floor",
                    MathFn::Abs => "abs",
                };
                let wide = match args.first() {
                    Some(a) => self.wide(a, scope)?,
                    None => false,
                };
                let args: Vec<String> = args.iter().map(x).collect::<Result<_, _>>()?;
                match wgsl_u64::math(*m, &args).filter(|_| wide) {
                    Some(lowered) => lowered,
                    None => format!("{name}({})", args.join(", ")),
                }
            }
            Expr::Intrinsic(Intrinsic::MulHi, args) => {
                format!("sk_mulhi({}, {})", x(&args[0])?, x(&args[1])?)
            }
            Expr::Intrinsic(Intrinsic::ApproxLog, args) => format!("log({})", x(&args[0])?),
            Expr::Intrinsic(Intrinsic::ApproxExp, args) => format!("exp({})", x(&args[0])?),
            Expr::Intrinsic(Intrinsic::ApproxDiv, args) => format!("({} / {})", x(&args[0])?, x(&args[1])?),
            Expr::Intrinsic(Intrinsic::HighBit, args) => format!("firstLeadingBit({})", x(&args[0])?),
            // 2147483520 is the largest f32 below 2^31.
            Expr::Intrinsic(Intrinsic::FloorI32, args) => {
                format!("i32(clamp(floor({}), -2147483648.0, 2147483520.0))", x(&args[0])?)
            }
            Expr::Select(c, a, b) => format!("select({}, {}, {})", x(b)?, x(a)?, x(c)?),
            Expr::Call(name, args) => {
                let args: Vec<String> = args.iter().map(x).collect::<Result<_, _>>()?;
                format!("{name}({})", args.join(", "))
            }
            Expr::Component(v, i) => format!("{}[{i}]", x(v)?),
            Expr::BinValue(name, i) => format!("{}[{i}]", self.histogram(name)),
            Expr::MakeU32x4(p) => format!("vec4<u32>({}, {}, {}, {})", x(&p[0])?, x(&p[1])?, x(&p[2])?, x(&p[3])?),
        })
    }

    fn stmt(&self, out: &mut Out, s: &Stmt, scope: &mut Scope) -> Result<(), IrError> {
        match s {
            Stmt::LastPart { .. } => {
                return Err(IrError::target(
                    self.kernel,
                    "a last part reached the emitter unlowered (`last_part::lower`)",
                ))
            }
            Stmt::Let { name, ty: t, init } => {
                out.line(format!("var {name}: {} = {};", self.ty(*t), self.expr(init, scope)?));
                scope.declare(name, *t);
            }
            Stmt::Bind { name, ty: t, value } => {
                out.line(format!("let {name}: {} = {};", self.ty(*t), self.expr(value, scope)?));
                scope.declare(name, *t);
            }
            // An indexed array (zeroed by WGSL): one add whatever the bin.
            Stmt::LetBins { name, ty: t, bins } => {
                out.line(format!("var {name}: array<{}, {bins}>;", self.ty(*t)));
                scope.declare_bins(name, *t, *bins);
            }
            Stmt::AddToBin { name, bin, value } => {
                let (bin, value) = (self.expr(bin, scope)?, self.expr(value, scope)?);
                let (t, _) = scope.histogram(name).map_err(|m| IrError::ty(self.kernel, m))?;
                let counter = format!("{}[{bin}]", self.histogram(name));
                match t {
                    Ty::U64 if self.words() => out.line(format!("{counter} = {};", self.add(t, &counter, &value))),
                    _ => out.line(format!("{counter} += {value};")),
                }
            }
            Stmt::Store { buf, index, value } if buffer(self.kernel, buf)?.storage == Storage::AtomicU32 => {
                out.line(format!("atomicStore(&{buf}[{}], {});", self.expr(index, scope)?, self.expr(value, scope)?));
            }
            Stmt::StoreShared { arr, index, value } if self.atomic_shared(arr) => {
                out.line(format!("atomicStore(&{arr}[{}], {});", self.expr(index, scope)?, self.expr(value, scope)?));
            }
            Stmt::AtomicAdd { buf, index, value, old } => {
                let (index, value) = (self.expr(index, scope)?, self.expr(value, scope)?);
                out.line(format!("{old} = atomicAdd(&{buf}[{index}], {value});"));
            }
            Stmt::Fence => out.line("storageBarrier();"),
            Stmt::Call { name, args, inouts, histograms } => {
                let proc = procedure(self.kernel, name)?;
                let mut all: Vec<String> =
                    builtins(self.kernel, proc).into_iter().map(|(n, _)| n.to_string()).collect();
                for a in args {
                    all.push(self.expr(a, scope)?);
                }
                all.extend(inouts.iter().map(|n| format!("&{n}")));
                all.extend(histograms.iter().map(|h| match self.pointed.contains(h) {
                    true => h.clone(),
                    false => format!("&{h}"),
                }));
                out.line(format!("{name}({});", all.join(", ")));
            }
            Stmt::Assign { .. }
            | Stmt::Store { .. }
            | Stmt::StoreShared { .. }
            | Stmt::If { .. }
            | Stmt::Scope(_)
            | Stmt::Comment(_)
            | Stmt::Break
            | Stmt::Return(_) => self.c_like(out, s, scope)?,
            Stmt::For { var, from, to, step, body } => {
                let (from, to, step) = (self.expr(from, scope)?, self.expr(to, scope)?, self.expr(step, scope)?);
                out.open(format!("for (var {var}: u32 = {from}; {var} < {to}; {var} = {var} + {step}) {{"));
                scope.push();
                scope.declare(var, Ty::U32);
                self.block(out, body, scope)?;
                scope.pop();
                out.close("}");
            }
            Stmt::Barrier => out.line("workgroupBarrier();"),
            Stmt::Reduce { op, ty: t, value, out: dst } => {
                out.line(format!("{dst} = {}(sk_lid, {});", reduce_name(*op, *t), self.expr(value, scope)?))
            }
            Stmt::Scan { value, out: dst } => {
                out.line(format!("{dst} = sk_block_scan(sk_lid, {});", self.expr(value, scope)?))
            }
            Stmt::SumMany { ty: t, values, outs } => {
                let mut args = vec!["sk_lid".to_string()];
                for v in values {
                    args.push(self.expr(v, scope)?);
                }
                args.extend(outs.iter().map(|o| format!("&{o}")));
                out.line(format!("{}({});", sums_name(*t, values.len()), args.join(", ")));
            }
            Stmt::ArgMax { ty: t, value, index, out_value, out_index } => {
                let (value, index) = (self.expr(value, scope)?, self.expr(index, scope)?);
                out.line(format!("{}(sk_lid, {value}, {index}, &{out_value}, &{out_index});", argmax_name(*t)));
            }
        }
        Ok(())
    }
}

impl Emitter<'_> {
    /// The collectives, the IR's functions and the procedures the kernel calls, each as its name
    /// and text.
    fn functions(&self) -> Result<Vec<(String, String)>, IrError> {
        let mut texts = self.collective_helpers(&Collectives::of(self.kernel));
        for func in &self.kernel.functions {
            let mut out = Out::default();
            self.function(&mut out, func)?;
            texts.push((func.name.clone(), out.finish()));
        }
        for proc in &self.kernel.procedures {
            texts.push((proc.name.clone(), self.procedure(proc)?));
        }
        Ok(texts)
    }

    /// A procedure takes the builtins it reaches (the entry point's arguments), then its values,
    /// then pointers to its inouts, copied in and out (no procedure returns early), then pointers
    /// to its histograms.
    fn procedure(&self, proc: &Procedure) -> Result<String, IrError> {
        let kernel = self.kernel;
        let mut params: Vec<String> = builtins(kernel, proc).into_iter().map(|(n, t)| format!("{n}: {t}")).collect();
        params.extend(proc.params.iter().map(|(n, t)| format!("{n}: {}", self.ty(*t))));
        params.extend(proc.inouts.iter().map(|(n, t)| format!("sk_io_{n}: ptr<function, {}>", self.ty(*t))));
        for (n, t, bins) in &proc.histograms {
            params.push(format!("{n}: ptr<function, array<{}, {bins}>>", self.ty(*t)));
        }
        let mut out = Out::default();
        out.open(format!("fn {}({}) {{", proc.name, params.join(", ")));
        for (n, t) in &proc.inouts {
            out.line(format!("var {n}: {} = *sk_io_{n};", self.ty(*t)));
        }
        let inner = Emitter { pointed: proc.histograms.iter().map(|h| h.0.clone()).collect(), ..self.clone() };
        inner.block(&mut out, &proc.body, &mut proc.scope(kernel))?;
        for (n, _) in &proc.inouts {
            out.line(format!("*sk_io_{n} = {n};"));
        }
        out.close("}");
        Ok(out.finish())
    }

    fn function(&self, out: &mut Out, func: &Function) -> Result<(), IrError> {
        let params: Vec<String> = func.params.iter().map(|(n, t)| format!("{n}_in: {}", self.ty(*t))).collect();
        out.open(format!("fn {}({}) -> {} {{", func.name, params.join(", "), self.ty(func.ret)));
        // WGSL parameters are immutable; copy them into variables so bodies may assign.
        for (n, t) in &func.params {
            out.line(format!("var {n}: {} = {n}_in;", self.ty(*t)));
        }
        let mut scope = Scope::new(self.kernel, &func.params, Some(func.ret));
        self.block(out, &func.body, &mut scope)?;
        out.close("}");
        Ok(())
    }

    /// The collectives the kernel uses, each a function of its own over workgroup memory, with
    /// a barrier after the result is read so the next may reuse the scratch.
    fn collective_helpers(&self, used: &Collectives) -> Vec<(String, String)> {
        let mut helpers = Vec::new();
        for &(op, t) in &used.reduce {
            let (tn, arr) = (self.ty(t), format!("sk_red_{}", ty(t)));
            let (mine, theirs) = (format!("{arr}[sk_lid]"), format!("{arr}[sk_lid + sk_s]"));
            let combine = match op {
                ReduceOp::Max if t == Ty::U64 && self.words() => {
                    wgsl_u64::math(MathFn::Max, &[mine, theirs]).expect("max of two")
                }
                ReduceOp::Max => format!("max({mine}, {theirs})"),
                ReduceOp::Sum => self.add(t, &mine, &theirs),
            };
            let mut out = Out::default();
            out.open(format!("fn {}(sk_lid: u32, sk_v: {tn}) -> {tn} {{", reduce_name(op, t)));
            out.line(format!("{arr}[sk_lid] = sk_v;"));
            out.line("workgroupBarrier();");
            out.open("for (var sk_s: u32 = BLOCK / 2u; sk_s > 0u; sk_s = sk_s >> 1u) {");
            out.open("if (sk_lid < sk_s) {");
            out.line(format!("{arr}[sk_lid] = {combine};"));
            out.close("}");
            out.line("workgroupBarrier();");
            out.close("}");
            // Uniform for WGSL's analysis, so a branch on it may hold barriers.
            out.line(format!("let sk_r = workgroupUniformLoad(&{arr}[0]);"));
            out.line("workgroupBarrier();");
            out.line("return sk_r;");
            out.close("}");
            helpers.push((reduce_name(op, t), out.finish()));
        }
        if used.scan {
            // Hillis-Steele over workgroup memory: log2(BLOCK) steps, inclusive, then the
            // invocation's own value taken back out.
            let mut out = Out::default();
            out.open("fn sk_block_scan(sk_lid: u32, sk_x: u32) -> u32 {");
            out.line("sk_scan[sk_lid] = sk_x;");
            out.line("workgroupBarrier();");
            out.open("for (var sk_s: u32 = 1u; sk_s < BLOCK; sk_s = sk_s << 1u) {");
            out.line("let sk_t = select(0u, sk_scan[sk_lid - min(sk_s, sk_lid)], sk_lid >= sk_s);");
            out.line("workgroupBarrier();");
            out.line("sk_scan[sk_lid] = sk_scan[sk_lid] + sk_t;");
            out.line("workgroupBarrier();");
            out.close("}");
            out.line("let sk_r = sk_scan[sk_lid] - sk_x;");
            out.line("workgroupBarrier();");
            out.line("return sk_r;");
            out.close("}");
            helpers.push(("sk_block_scan".to_string(), out.finish()));
        }
        for &(t, n) in &used.sums {
            // Integer atomics in workgroup memory: exact, so the order they land in does not
            // matter. u64 values go in as two u32 halves, the low half's carry into the high.
            let (wide, tn) = (t == Ty::U64, self.ty(t));
            let params: Vec<String> = std::iter::once("sk_lid: u32".to_string())
                .chain((0..n).map(|i| format!("sk_m{i}: {tn}")))
                .chain((0..n).map(|i| format!("sk_o{i}: ptr<function, {tn}>")))
                .collect();
            let mut out = Out::default();
            out.open(format!("fn {}({}) {{", sums_name(t, n), params.join(", ")));
            out.open(format!("if (sk_lid < {n}u) {{"));
            out.line("atomicStore(&sk_sum_lo[sk_lid], 0u);");
            if wide {
                out.line("atomicStore(&sk_sum_hi[sk_lid], 0u);");
            }
            out.close("}");
            out.line("workgroupBarrier();");
            for i in 0..n {
                out.open("{");
                out.line(format!("let sk_v = sk_m{i};"));
                if wide && self.words() {
                    out.line("let sk_lo = sk_v.x;");
                    out.line("let sk_hi = sk_v.y;");
                } else if wide {
                    out.line("let sk_lo = u32(sk_v & 0xfffffffflu);");
                    out.line("let sk_hi = u32(sk_v >> 32u);");
                }
                if wide {
                    out.open("if (sk_lo != 0u) {");
                    out.line(format!("let sk_old = atomicAdd(&sk_sum_lo[{i}], sk_lo);"));
                    out.line(format!("if (sk_old > 0xffffffffu - sk_lo) {{ atomicAdd(&sk_sum_hi[{i}], 1u); }}"));
                    out.close("}");
                    out.line(format!("if (sk_hi != 0u) {{ atomicAdd(&sk_sum_hi[{i}], sk_hi); }}"));
                } else {
                    out.line(format!("if (sk_v != 0u) {{ atomicAdd(&sk_sum_lo[{i}], sk_v); }}"));
                }
                out.close("}");
            }
            out.line("workgroupBarrier();");
            // The sums copied out of the atomics and read with `workgroupUniformLoad`, so that
            // they are uniform for WGSL's analysis (it loads no atomic).
            out.open(format!("if (sk_lid < {n}u) {{"));
            out.line("sk_sums_lo[sk_lid] = atomicLoad(&sk_sum_lo[sk_lid]);");
            if wide {
                out.line("sk_sums_hi[sk_lid] = atomicLoad(&sk_sum_hi[sk_lid]);");
            }
            out.close("}");
            out.line("let sk_lo = workgroupUniformLoad(&sk_sums_lo);");
            if wide {
                out.line("let sk_hi = workgroupUniformLoad(&sk_sums_hi);");
            }
            for i in 0..n {
                if wide && self.words() {
                    out.line(format!("*sk_o{i} = vec2<u32>(sk_lo[{i}], sk_hi[{i}]);"));
                } else if wide {
                    out.line(format!("*sk_o{i} = (u64(sk_hi[{i}]) << 32u) | u64(sk_lo[{i}]);"));
                } else {
                    out.line(format!("*sk_o{i} = sk_lo[{i}];"));
                }
            }
            out.line("workgroupBarrier();");
            out.close("}");
            helpers.push((sums_name(t, n), out.finish()));
        }
        for &t in &used.argmax {
            let (tn, v) = (self.ty(t), format!("sk_am_{}", ty(t)));
            let mut out = Out::default();
            out.open(format!(
                "fn {}(sk_lid: u32, sk_v: {tn}, sk_i: u32, sk_ov: ptr<function, {tn}>, sk_oi: ptr<function, u32>) {{",
                argmax_name(t)
            ));
            out.line(format!("{v}[sk_lid] = sk_v;"));
            out.line("sk_am_i[sk_lid] = sk_i;");
            out.line("workgroupBarrier();");
            out.open("for (var sk_s: u32 = BLOCK / 2u; sk_s > 0u; sk_s = sk_s >> 1u) {");
            out.open("if (sk_lid < sk_s) {");
            out.line(format!("let ov = {v}[sk_lid + sk_s];"));
            out.line("let oi = sk_am_i[sk_lid + sk_s];");
            out.open(format!("if (ov > {v}[sk_lid] || (ov == {v}[sk_lid] && oi < sk_am_i[sk_lid])) {{"));
            out.line(format!("{v}[sk_lid] = ov;"));
            out.line("sk_am_i[sk_lid] = oi;");
            out.close("}");
            out.close("}");
            out.line("workgroupBarrier();");
            out.close("}");
            out.line(format!("*sk_ov = workgroupUniformLoad(&{v}[0]);"));
            out.line("*sk_oi = workgroupUniformLoad(&sk_am_i[0]);");
            out.line("workgroupBarrier();");
            out.close("}");
            helpers.push((argmax_name(t), out.finish()));
        }
        helpers
    }
}

/// The entry point's builtin arguments `proc` reaches, itself or through the procedures it calls
/// (the collectives read the invocation's index), as names and types: a function other than the
/// entry point sees them only as parameters.
fn builtins(kernel: &Kernel, proc: &Procedure) -> Vec<(&'static str, &'static str)> {
    let (mut used, mut collectives) = (vec![], false);
    let (mut queue, mut seen) = (vec![proc], vec![]);
    while let Some(p) = queue.pop() {
        if seen.contains(&&p.name) {
            continue;
        }
        seen.push(&p.name);
        visit_exprs(&p.body, &mut |e| {
            if let Expr::Builtin(b) = e {
                used.push(*b);
            }
        });
        visit_stmts(&p.body, &mut |s| match s {
            Stmt::Reduce { .. } | Stmt::Scan { .. } | Stmt::SumMany { .. } | Stmt::ArgMax { .. } => collectives = true,
            Stmt::Call { name, .. } => queue.extend(kernel.procedures.iter().find(|q| &q.name == name)),
            _ => {}
        });
    }
    let all = [
        (collectives || used.contains(&Builtin::LocalId), ("sk_lid", "u32")),
        (used.contains(&Builtin::GroupId), ("sk_wid", "vec3<u32>")),
        (used.contains(&Builtin::NumGroups), ("sk_nwg", "vec3<u32>")),
    ];
    all.into_iter().filter(|(wanted, _)| *wanted).map(|(_, b)| b).collect()
}

/// One `var<workgroup>` array of a module.
struct WorkgroupArray {
    name: String,
    elem: &'static str,
    /// Its length as WGSL reads it (a number, or `BLOCK`).
    len: String,
    bytes: u32,
}

/// The workgroup arrays of a prepared kernel's module: the collectives' scratch, then the
/// kernel's own.
fn workgroup_arrays(e: &Emitter) -> Result<Vec<WorkgroupArray>, IrError> {
    let (kernel, block) = (e.kernel, e.block);
    let array = |name: String, t: Ty, len: Option<u32>| WorkgroupArray {
        name,
        elem: e.ty(t),
        len: len.map_or("BLOCK".into(), |n| n.to_string()),
        bytes: size_of(t) * len.unwrap_or(block),
    };
    let atomic =
        |name: &str, len: u32| WorkgroupArray { elem: "atomic<u32>", ..array(name.into(), Ty::U32, Some(len)) };
    let used = Collectives::of(kernel);
    let mut arrays = vec![];
    // Max and Sum over one type share their scratch array.
    for t in scratch_types(&used.reduce) {
        arrays.push(array(format!("sk_red_{}", ty(t)), t, None));
    }
    for t in &used.argmax {
        arrays.push(array(format!("sk_am_{}", ty(*t)), *t, None));
    }
    if !used.argmax.is_empty() {
        arrays.push(array("sk_am_i".into(), Ty::U32, None));
    }
    if used.scan {
        arrays.push(array("sk_scan".into(), Ty::U32, None));
    }
    // One pair of atomic arrays serves every SumMany (u32 sums use the low half only).
    if let Some(n) = used.sums.iter().map(|(_, n)| *n).max() {
        if n as u32 > block {
            return Err(IrError::target(
                kernel,
                format!("a sum of {n} values zeroes one slot per invocation of {block}"),
            ));
        }
        arrays.push(atomic("sk_sum_lo", n as u32));
        arrays.push(atomic("sk_sum_hi", n as u32));
        arrays.push(array("sk_sums_lo".into(), Ty::U32, Some(n as u32)));
        arrays.push(array("sk_sums_hi".into(), Ty::U32, Some(n as u32)));
    }
    for s in &kernel.shared {
        arrays.push(if s.atomic { atomic(&s.name, s.len) } else { array(s.name.clone(), s.ty, Some(s.len)) });
    }
    Ok(arrays)
}

/// The bytes of workgroup memory `kernel`'s module declares with workgroups of `block`: what a
/// device's `max_compute_workgroup_storage_size` must cover.
pub fn workgroup_bytes(kernel: &Prepared, block: u32) -> Result<u32, IrError> {
    Ok(workgroup_arrays(&Emitter { kernel, block, pointed: vec![] })?.iter().map(|a| a.bytes).sum())
}

/// The file of `kernel`'s function or procedure `name`: `functions/<name>.wgsl`, but where the
/// kernel holds u64 as words, whose functions and collectives print otherwise, `<name>.words.wgsl`
/// (its procedures are named apart from the others' by `gen`).
fn function_path(kernel: &Kernel, name: &str) -> String {
    let words = kernel.u64_as_words && !kernel.procedures.iter().any(|p| p.name == name);
    format!("functions/{name}{}.wgsl", if words { ".words" } else { "" })
}

/// Procedure `proc` of `kernel` as a WGSL function.
pub fn procedure_fn(kernel: &Prepared, block: u32, proc: &Procedure) -> Result<String, IrError> {
    Emitter { kernel, block, pointed: vec![] }.procedure(proc)
}

/// Prints `kernel` as a WGSL module with workgroup size `block` (a power of two), and the
/// functions it calls: its collectives, the IR's functions and its procedures, each a file of its
/// own in `shaders/functions/`, written once for every kernel that calls it. WGSL has no
/// includes, so the crate puts them before the kernel's file (the manifest's `concat!`); they
/// read the `BLOCK` and workgroup arrays that file declares.
pub fn emit(kernel: &Prepared, block: u32, source: &str) -> Result<Printed, IrError> {
    if !block.is_power_of_two() {
        return Err(IrError::target(
            kernel,
            format!("a workgroup of {block}: the tree reduction needs a power of two"),
        ));
    }
    let e = Emitter { kernel, block, pointed: vec![] };
    let mut out = Out::default();
    for l in header("//", source).lines() {
        out.line(l);
    }
    out.line(format!("// kernel `{}`: {}", kernel.name, kernel.doc));
    out.line(format!("// passes over each row: {}", kernel.passes));
    out.blank();
    out.line(format!("const BLOCK: u32 = {}u;", e.block));
    out.blank();

    // Parameters: one uniform struct padded to a multiple of 16 bytes.
    out.open("struct Params {");
    for p in &kernel.params {
        out.line(format!("{p}: u32,"));
    }
    for pad in kernel.params.len()..kernel.params.len().next_multiple_of(4) {
        out.line(format!("_pad{pad}: u32,"));
    }
    out.close("}");
    out.blank();
    for (binding, buf) in kernel.buffers.iter().enumerate() {
        let elem = match buf.storage {
            Storage::F16 | Storage::Bf16 => "u32",
            Storage::AtomicU32 => "atomic<u32>",
            s => ty(s.value_ty()),
        };
        let access = if buf.writable { "read_write" } else { "read" };
        out.line(format!("@group(0) @binding({binding}) var<storage, {access}> {}: array<{elem}>;", buf.name));
    }
    out.line(format!("@group(0) @binding({}) var<uniform> params: Params;", kernel.buffers.len()));
    out.blank();

    for array in workgroup_arrays(&e)? {
        out.line(format!("var<workgroup> {}: array<{}, {}>;", array.name, array.elem, array.len));
    }
    out.blank();

    // The collectives, the kernel's own functions and entry point, printed first so that the
    // helpers the lowering needs (`sk_mulhi`, the u64 words' arithmetic) are written where its
    // text calls them.
    let mut body = Out::default();
    // A kernel's functions are files of their own that the crate puts before it. The lowering's
    // helpers they call are written here.
    let functions: Vec<(String, String)> = e.functions()?;
    if !functions.is_empty() {
        body.line("// The crate puts these files before this one:");
        functions.iter().for_each(|(name, _)| body.line(format!("// shaders/{}", function_path(kernel, name))));
    }
    let called: String = functions.iter().map(|(_, text)| text.as_str()).collect();
    body.blank();
    body.line(format!("@compute @workgroup_size({})", e.block));
    body.open(
        "fn main(@builtin(local_invocation_index) sk_lid: u32, @builtin(workgroup_id) sk_wid: vec3<u32>, \
         @builtin(num_workgroups) sk_nwg: vec3<u32>) {",
    );
    let mut scope = Scope::new(kernel, &[], None);
    e.block(&mut body, &kernel.body, &mut scope)?;
    body.close("}");
    let body = body.finish();
    for helper in wgsl_u64::helpers_for(&(called + &body)) {
        for l in helper.lines() {
            out.line(l);
        }
    }
    // Each input of float32, f16 or bf16 values is read through a function of its own, so that
    // the code that reads it (the function files) is one text for the three.
    for buf in kernel.buffers.iter().filter(|b| b.holds_values() && reads(kernel, &b.name)) {
        out.open(format!("fn sk_load_{}(i: u32) -> f32 {{", buf.name));
        match buf.storage {
            Storage::F16 => {
                out.line(format!("let w = {}[i >> 1u];", buf.name));
                out.line("return unpack2x16float(w)[i & 1u];");
            }
            Storage::Bf16 => {
                out.line(format!("let w = {}[i >> 1u];", buf.name));
                out.line("return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (i & 1u) == 1u));");
            }
            _ => out.line(format!("return {}[i];", buf.name)),
        }
        out.close("}");
    }
    let file = |(name, text): (String, String)| {
        let head = format!("{}// `{name}`, put before each kernel that calls it\n", header("//", source));
        (function_path(kernel, &name), head + &text)
    };
    Ok(Printed { text: out.finish() + &body, functions: functions.into_iter().map(file).collect() })
}
