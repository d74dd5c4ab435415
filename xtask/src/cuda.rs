//! The CUDA emitter: one `extern "C" __global__` function per kernel, compiled at run time by
//! NVRTC with `-DSK_BLOCK=<threads>` from the tuning table of the device's architecture.
//!
//! Lowerings particular to CUDA:
//! - collectives use warp shuffles (`__shfl_xor_sync`, 32 lanes, which is every NVIDIA GPU) and
//!   one shared slot per warp;
//! - f16 loads use the `cvt.f32.f16` instruction and bf16 loads a shift, so no header is needed
//!   (NVRTC has no system headers);
//! - `mulhi` is `__umulhi`; infinities are spelled with bit patterns (NVRTC has no `INFINITY`);
//! - atomic buffers are plain `unsigned int*`: stores are plain (a `__threadfence()` publishes
//!   them), loads `volatile` (from L2), adds `atomicAdd`.

use crate::ir::*;
use crate::out::{argmax_name, atom, header, reduce_name, sums_name, CLike, Out, Printed};
use crate::passes::Prepared;

pub fn ty(t: Ty) -> &'static str {
    match t {
        Ty::Bool => "bool",
        Ty::U32 => "unsigned int",
        Ty::I32 => "int",
        Ty::U64 => "unsigned long long",
        Ty::F32 => "float",
        Ty::F64 => "double",
        Ty::U32x4 => "uint4",
    }
}

fn lit(l: Lit) -> String {
    match l {
        Lit::Bool(v) => v.to_string(),
        Lit::U32(v) => format!("{v}u"),
        Lit::I32(v) => format!("({v})"),
        Lit::U64(v) => format!("{v}ull"),
        Lit::F32(v) if v.is_finite() => format!("({v:?}f)"),
        Lit::F32(v) => format!("sk_bitcast<float>({}u)", v.to_bits()),
        Lit::F64(v) if v.is_finite() => format!("({v:?})"),
        Lit::F64(v) => format!("sk_bitcast<double>({}ull)", v.to_bits()),
    }
}

/// The launch shape every file starts with (`SK_BLOCK` is set by NVRTC's `-DSK_BLOCK`).
const BLOCK_DEFINES: &str = r#"#ifndef SK_BLOCK
#define SK_BLOCK 256
#endif
#define SK_WARPS (SK_BLOCK / 32)
"#;

/// The blocks a multiprocessor holds at most by its threads, for a [`Kernel::occupancy`]
/// kernel's `__launch_bounds__`: 1024 threads on Turing, 1536 on sm_86, sm_87, sm_89 and sm_120,
/// 2048 on the rest (CUDA C++ Programming Guide, compute capabilities table).
const FULL_BLOCKS: &str = r#"#if __CUDA_ARCH__ == 750
#define SK_FULL_BLOCKS (1024 / SK_BLOCK)
#define SK_SM_SHARED 65536
#define SK_BLOCK_RESERVED 0
#elif __CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 870 || __CUDA_ARCH__ == 890 || __CUDA_ARCH__ == 1200
#define SK_FULL_BLOCKS (1536 / SK_BLOCK)
#define SK_SM_SHARED 102400
#define SK_BLOCK_RESERVED 1024
#else
#define SK_FULL_BLOCKS (2048 / SK_BLOCK)
#define SK_SM_SHARED 233472
#define SK_BLOCK_RESERVED 1024
#endif
"#;

/// Reinterprets bits: what `Bitcast`, infinite literals and bf16 loads are spelled with.
const BITCAST: &str = r#"template <typename To, typename From>
__device__ __forceinline__ To sk_bitcast(From x) {
    static_assert(sizeof(To) == sizeof(From), "bitcast changes size");
    union { From f; To t; } u;
    u.f = x;
    return u.t;
}
"#;

/// The highest set bit's index: PTX's `bfind` is one `FLO`, where `31 - __clz(x)` makes ptxas
/// add two more.
const HIGH_BIT: &str = r#"__device__ __forceinline__ unsigned int sk_high_bit(unsigned int x) {
    unsigned int r;
    asm("bfind.u32 %0, %1;" : "=r"(r) : "r"(x));
    return r;
}
"#;

/// The fast exponential: `ex2.approx.ftz` of `x log2 e`, as `__expf` computes it but without
/// its scaling of results below 2^-126 (four instructions a call), which an estimate's sum does
/// not need (a weight of 2^-126 or less is at most 1.2e-38 of the largest).
const FAST_EXP: &str = r#"__device__ __forceinline__ float sk_fast_exp(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.44269504088896341f));
    return y;
}
"#;

const LOAD_F16: &str = r#"__device__ __forceinline__ float sk_f16(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
"#;

const LOAD_BF16: &str = r#"__device__ __forceinline__ float sk_bf16(unsigned short h) {
    return sk_bitcast<float>(((unsigned int)h) << 16);
}
"#;

/// `c += add` where `bin == i`, for counters of type `t`: the histograms' adds
/// ([`Stmt::AddToBin`]), one predicated add a counter. Written as sixteen `if`s, NVVM adds to
/// every counter and selects each result (78 instructions a counted key in the parts' select on
/// sm_90, 46 this way).
fn bin_add(t: Ty) -> String {
    let (tn, reg, width) = (ty(t), if t == Ty::U64 { "l" } else { "r" }, if t == Ty::U64 { 64 } else { 32 });
    format!(
        "__device__ __forceinline__ void {}({tn}& c, unsigned int bin, unsigned int i, {tn} add) {{\n    \
         asm(\"{{ .reg .pred p; setp.eq.u32 p, %1, %2; @p add.u{width} %0, %0, %3; }}\" : \"+{reg}\"(c) : \"r\"(bin), \"r\"(i), \"{reg}\"(add));\n}}\n",
        bin_add_name(t)
    )
}

fn bin_add_name(t: Ty) -> String {
    format!("sk_bin_add_{}", short(t))
}

/// The counter types of the histograms `kernel` adds to.
fn bin_types(kernel: &Kernel) -> Vec<Ty> {
    let mut declared: Vec<(&str, Ty)> = Vec::new();
    for p in &kernel.procedures {
        declared.extend(p.histograms.iter().map(|(n, t, _)| (n.as_str(), *t)));
    }
    for body in bodies(kernel) {
        visit_stmts(body, &mut |st| {
            if let Stmt::LetBins { name, ty, .. } = st {
                declared.push((name, *ty));
            }
        });
    }
    let mut types: Vec<Ty> = Vec::new();
    for body in bodies(kernel) {
        visit_stmts(body, &mut |st| {
            if let Stmt::AddToBin { name, .. } = st {
                for &(_, t) in declared.iter().filter(|(n, _)| n == name) {
                    if !types.contains(&t) {
                        types.push(t);
                    }
                }
            }
        });
    }
    types
}

struct Emitter<'k> {
    kernel: &'k Kernel,
    /// Printing a procedure, a macro's body.
    macro_body: bool,
}

/// The largest literal offset [`Emitter::index`] widens.
const FOLDED_OFFSET: u32 = 1 << 16;

impl Emitter<'_> {
    /// The index of a load of values (the streamed rows; records and counters keep 32-bit
    /// sums, which kept `top_p_cut_probs` from a spill). `i + k` with a small literal `k` is
    /// summed in 64 bits, `(size_t)(i) + k`, so that loads at `i`, `i + 1`, ... share one
    /// address and differ by an immediate offset (in 32 bits nvcc must allow for `i + k`
    /// wrapping and computes each address apart). The two
    /// agree on every index a kernel can make: the host refuses a batch whose elements would not
    /// all have 32-bit indices (`Shape::validate`), so an in-range `i + k` never wraps.
    fn index(&self, idx: &Expr, scope: &Scope) -> Result<String, IrError> {
        match idx {
            Expr::Bin(BinOp::Add, a, k) => match &**k {
                Expr::Lit(Lit::U32(k)) if *k < FOLDED_OFFSET => {
                    Ok(format!("(size_t)({}) + {k}u", self.expr(a, scope)?))
                }
                // `i + bs k`: the block size is a compile-time constant, so a step's columns
                // `bs` apart share one address too.
                Expr::Bin(BinOp::Mul, s, k) => match (&**s, &**k) {
                    (Expr::Builtin(Builtin::BlockSize), Expr::Lit(Lit::U32(k))) if *k < FOLDED_OFFSET / 1024 => {
                        Ok(format!("(size_t)({}) + (size_t)SK_BLOCK * {k}u", self.expr(a, scope)?))
                    }
                    _ => self.expr(idx, scope),
                },
                _ => self.expr(idx, scope),
            },
            _ => self.expr(idx, scope),
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
            Expr::Lit(l) => lit(*l),
            Expr::Var(n) | Expr::Param(n) => n.clone(),
            Expr::Builtin(b) => match b {
                Builtin::LocalId => "threadIdx.x".into(),
                Builtin::GroupId => "blockIdx.x".into(),
                Builtin::NumGroups => "gridDim.x".into(),
                Builtin::BlockSize => "((unsigned int)SK_BLOCK)".into(),
            },
            Expr::Load(buf, idx) | Expr::Settled(buf, idx) => {
                let decl = buffer(self.kernel, buf)?;
                let settled = matches!(e, Expr::Settled(..));
                let i = match decl.storage {
                    Storage::F32 | Storage::F16 | Storage::Bf16 | Storage::F64 => self.index(idx, scope)?,
                    Storage::U32 | Storage::AtomicU32 => x(idx)?,
                };
                match decl.storage {
                    _ if decl.holds_values() => format!("sk_load_{buf}({i})"),
                    // Written by other blocks of this launch: read from L2, past L1.
                    Storage::AtomicU32 if !settled => format!("(*(volatile unsigned int*)&{buf}[{i}])"),
                    Storage::F32 | Storage::F16 | Storage::Bf16 | Storage::U32 | Storage::F64 | Storage::AtomicU32 => {
                        format!("{buf}[{i}]")
                    }
                }
            }
            Expr::LoadShared(arr, idx) => format!("{arr}[{}]", x(idx)?),
            Expr::Bin(op, a, b) => format!("({} {} {})", x(a)?, op.symbol(), x(b)?),
            Expr::Un(op, a) => {
                let s = match op {
                    UnOp::Neg => "-",
                    UnOp::Not => "!",
                    UnOp::BitNot => "~",
                };
                format!("({s}{})", x(a)?)
            }
            Expr::Cast(t, a) => format!("(({}){})", ty(*t), atom(x(a)?)),
            Expr::Bitcast(t, a) => format!("sk_bitcast<{}>({})", ty(*t), x(a)?),
            Expr::Math(m, args) => {
                let t = scope.ty_of(&args[0]).map_err(|m| IrError::ty(self.kernel, m))?;
                let a: Vec<String> = args.iter().map(x).collect::<Result<_, _>>()?;
                let float = |f32name: &str, f64name: &str| {
                    format!("{}({})", if t == Ty::F64 { f64name } else { f32name }, a.join(", "))
                };
                match (m, t) {
                    (MathFn::Min, Ty::F32 | Ty::F64) => float("fminf", "fmin"),
                    (MathFn::Max, Ty::F32 | Ty::F64) => float("fmaxf", "fmax"),
                    (MathFn::Fma, _) => float("fmaf", "fma"),
                    (MathFn::Floor, _) => float("floorf", "floor"),
                    (MathFn::Abs, Ty::F32 | Ty::F64) => float("fabsf", "fabs"),
                    // CUDA's integer overloads: each operand printed (and evaluated) once.
                    (MathFn::Min, _) => format!("min({}, {})", a[0], a[1]),
                    (MathFn::Max, _) => format!("max({}, {})", a[0], a[1]),
                    (MathFn::Abs, _) => format!("abs({})", a[0]),
                }
            }
            Expr::Intrinsic(Intrinsic::MulHi, args) => {
                format!("__umulhi({}, {})", x(&args[0])?, x(&args[1])?)
            }
            Expr::Intrinsic(Intrinsic::ApproxLog, args) => format!("__logf({})", x(&args[0])?),
            Expr::Intrinsic(Intrinsic::ApproxExp, args) => format!("sk_fast_exp({})", x(&args[0])?),
            Expr::Intrinsic(Intrinsic::ApproxDiv, args) => format!("__fdividef({}, {})", x(&args[0])?, x(&args[1])?),
            Expr::Intrinsic(Intrinsic::HighBit, args) => format!("sk_high_bit({})", x(&args[0])?),
            Expr::Intrinsic(Intrinsic::FloorI32, args) => format!("__float2int_rd({})", x(&args[0])?),
            Expr::Select(c, a, b) => format!("({} ? {} : {})", atom(x(c)?), atom(x(a)?), atom(x(b)?)),
            Expr::Call(name, args) => {
                let args: Vec<String> = args.iter().map(x).collect::<Result<_, _>>()?;
                format!("{name}({})", args.join(", "))
            }
            Expr::Component(v, i) => format!("({}).{}", x(v)?, ["x", "y", "z", "w"][*i as usize]),
            Expr::BinValue(name, i) => format!("{name}_{i}"),
            Expr::MakeU32x4(p) => format!("make_uint4({}, {}, {}, {})", x(&p[0])?, x(&p[1])?, x(&p[2])?, x(&p[3])?),
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
                out.line(format!("{} {name} = {};", ty(*t), self.expr(init, scope)?));
                scope.declare(name, *t);
            }
            Stmt::Bind { name, ty: t, value } => {
                out.line(format!("const {} {name} = {};", ty(*t), self.expr(value, scope)?));
                scope.declare(name, *t);
            }
            // Separate registers (an indexed array would go to local memory) and a predicated
            // add for each (`bin_add`).
            Stmt::LetBins { name, ty: t, bins } => {
                for i in 0..*bins {
                    out.line(format!("{} {name}_{i} = 0;", ty(*t)));
                }
                scope.declare_bins(name, *t, *bins);
            }
            Stmt::AddToBin { name, bin, value } => {
                let (t, bins) = scope.histogram(name).map_err(|m| IrError::ty(self.kernel, m))?;
                out.open("{");
                out.line(format!("const unsigned int sk_bin = {};", self.expr(bin, scope)?));
                out.line(format!("const {} sk_add = {};", ty(t), self.expr(value, scope)?));
                for i in 0..bins {
                    out.line(format!("{}({name}_{i}, sk_bin, {i}u, sk_add);", bin_add_name(t)));
                }
                out.close("}");
            }
            Stmt::AtomicAdd { buf, index, value, old } => {
                let (index, value) = (self.expr(index, scope)?, self.expr(value, scope)?);
                out.line(format!("{old} = atomicAdd(&{buf}[{index}], {value});"));
            }
            Stmt::Fence => out.line("__threadfence();"),
            Stmt::Call { name, args, inouts, histograms } => {
                let proc = procedure(self.kernel, name)?;
                let mut all: Vec<String> = args.iter().map(|a| self.expr(a, scope)).collect::<Result<_, _>>()?;
                all.extend(inouts.iter().cloned());
                for (h, (_, _, bins)) in histograms.iter().zip(&proc.histograms) {
                    all.extend((0..*bins).map(|i| format!("{h}_{i}")));
                }
                out.line(format!("{name}({});", all.join(", ")));
            }
            // In a macro's body, where a line comment would swallow the continued line.
            Stmt::Comment(text) if self.macro_body => out.line(format!("/* {text} */")),
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
                out.open(format!("for (unsigned int {var} = {from}; {var} < {to}; {var} += {step}) {{"));
                scope.push();
                scope.declare(var, Ty::U32);
                self.block(out, body, scope)?;
                scope.pop();
                out.close("}");
            }
            Stmt::Barrier => out.line("__syncthreads();"),
            Stmt::Reduce { op, ty: t, value, out: dst } => {
                out.line(format!("{dst} = {}({});", reduce_name(*op, *t), self.expr(value, scope)?))
            }
            Stmt::Scan { value, out: dst } => out.line(format!("{dst} = sk_block_scan({});", self.expr(value, scope)?)),
            Stmt::SumMany { ty: t, values, outs } => {
                let mut args: Vec<String> = values.iter().map(|v| self.expr(v, scope)).collect::<Result<_, _>>()?;
                args.extend(outs.iter().cloned());
                out.line(format!("{}({});", sums_name(*t, values.len()), args.join(", ")));
            }
            Stmt::ArgMax { ty: t, value, index, out_value, out_index } => {
                let (value, index) = (self.expr(value, scope)?, self.expr(index, scope)?);
                out.line(format!("{}({value}, {index}, {out_value}, {out_index});", argmax_name(*t)));
            }
        }
        Ok(())
    }
}

/// The collectives a kernel uses, each a function of its own (called where the IR has the
/// collective; a merge kernel runs dozens): warp shuffles, one shared slot per warp, and a
/// barrier after the result is read, so the scratch may be reused by the next.
fn collective_helpers(used: &Collectives, kernel: &Kernel) -> Result<Vec<(String, String)>, IrError> {
    let mut helpers = Vec::new();
    for &(op, t) in &used.reduce {
        let tn = ty(t);
        let arr = format!("sk_red_{}", short(t));
        let (combine, identity) = match (op, t) {
            (ReduceOp::Sum, Ty::F64) => ("sk_v = sk_v + ov;".to_string(), "0.0".to_string()),
            (ReduceOp::Sum, Ty::F32) => ("sk_v = sk_v + ov;".into(), "0.0f".into()),
            (ReduceOp::Sum, _) => ("sk_v = sk_v + ov;".into(), "0u".into()),
            (ReduceOp::Max, Ty::F32) => ("sk_v = fmaxf(sk_v, ov);".into(), lit(Lit::F32(f32::NEG_INFINITY))),
            (ReduceOp::Max, Ty::F64) => ("sk_v = fmax(sk_v, ov);".into(), lit(Lit::F64(f64::NEG_INFINITY))),
            (ReduceOp::Max, _) => ("sk_v = ov > sk_v ? ov : sk_v;".into(), "0u".into()),
        };
        let mut out = Out::default();
        out.open(format!("__device__ __forceinline__ {tn} {}({tn} sk_v) {{", reduce_name(op, t)));
        let refill = vec![format!("sk_v = threadIdx.x < SK_WARPS ? {arr}[threadIdx.x] : {identity};")];
        warp_tree(&mut out, &[(tn, "v", arr.clone())], &combine, &refill);
        out.line(format!("const {tn} sk_r = {arr}[32];"));
        out.line("__syncthreads();");
        out.line("return sk_r;");
        out.close("}");
        helpers.push((reduce_name(op, t), out.finish()));
    }
    if used.scan {
        // Inclusive scans by shuffles within each warp, then over the warp totals; exclusive out.
        let mut out = Out::default();
        out.open("__device__ __forceinline__ unsigned int sk_block_scan(unsigned int sk_x) {");
        out.line("unsigned int sk_v = sk_x;");
        let warp_scan = |out: &mut Out, lane: &str| {
            out.open("for (unsigned int sk_o = 1u; sk_o < 32u; sk_o <<= 1) {");
            out.line("unsigned int on = __shfl_up_sync(0xffffffffu, sk_v, sk_o);");
            out.line(format!("if ({lane} >= sk_o) sk_v += on;"));
            out.close("}");
        };
        warp_scan(&mut out, "(threadIdx.x & 31u)");
        out.line("if ((threadIdx.x & 31u) == 31u) sk_scan[threadIdx.x >> 5] = sk_v;");
        out.line("__syncthreads();");
        out.open("if (threadIdx.x < 32u) {");
        out.line("unsigned int sk_own = sk_v;");
        out.line("sk_v = threadIdx.x < SK_WARPS ? sk_scan[threadIdx.x] : 0u;");
        warp_scan(&mut out, "threadIdx.x");
        out.line("if (threadIdx.x < SK_WARPS) sk_scan[threadIdx.x] = sk_v;");
        out.line("sk_v = sk_own;");
        out.close("}");
        out.line("__syncthreads();");
        out.line("const unsigned int sk_r = sk_v - sk_x + ((threadIdx.x >> 5) > 0u ? sk_scan[(threadIdx.x >> 5) - 1u] : 0u);");
        out.line("__syncthreads();");
        out.line("return sk_r;");
        out.close("}");
        helpers.push(("sk_block_scan".to_string(), out.finish()));
    }
    for &(t, n) in &used.sums {
        // Sums within each warp, one shared slot per (value, warp), then one thread per value
        // adds the warps up: two barriers for all the values.
        let (tn, arr) = (ty(t), format!("sk_many_{}", short(t)));
        let params: Vec<String> =
            (0..n).map(|i| format!("{tn} sk_m{i}")).chain((0..n).map(|i| format!("{tn}& sk_o{i}"))).collect();
        let mut out = Out::default();
        out.open(format!("__device__ __forceinline__ void {}({}) {{", sums_name(t, n), params.join(", ")));
        // Padded with zeros to a power of two, the values a lane's warp sums ends with.
        let padded = n.next_power_of_two().max(2);
        if padded > 32 {
            return Err(IrError::target(kernel, format!("a block sum of {n} values: at most 32 (a warp's lanes)")));
        }
        for i in n..padded {
            out.line(format!("{tn} sk_m{i} = 0;"));
        }
        warp_reduce_scatter(&mut out, padded);
        out.open(format!("if ((threadIdx.x & 31u) < {n}u) {{"));
        out.line(format!("{arr}[(threadIdx.x & 31u) * 32 + (threadIdx.x >> 5)] = sk_m0;"));
        out.close("}");
        out.line("__syncthreads();");
        out.open(format!("if (threadIdx.x < {n}u) {{"));
        out.line(format!("{tn} sk_s = 0;"));
        out.line(format!(
            "for (unsigned int sk_w = 0u; sk_w < SK_WARPS; ++sk_w) sk_s += {arr}[threadIdx.x * 32 + sk_w];"
        ));
        out.line(format!("{arr}[{n} * 32 + threadIdx.x] = sk_s;"));
        out.close("}");
        out.line("__syncthreads();");
        for i in 0..n {
            out.line(format!("sk_o{i} = {arr}[{n} * 32 + {i}];"));
        }
        out.line("__syncthreads();");
        out.close("}");
        helpers.push((sums_name(t, n), out.finish()));
    }
    for &t in &used.argmax {
        let (tn, v) = (ty(t), format!("sk_am_{}", short(t)));
        let lowest = if t == Ty::F64 { Lit::F64(f64::NEG_INFINITY) } else { Lit::F32(f32::NEG_INFINITY) };
        let mut out = Out::default();
        out.open(format!(
            "__device__ __forceinline__ void {}({tn} sk_v, unsigned int sk_i, {tn}& sk_ov, unsigned int& sk_oi) {{",
            argmax_name(t)
        ));
        let combine = "if (ov > sk_v || (ov == sk_v && oi < sk_i)) { sk_v = ov; sk_i = oi; }";
        let refill = vec![
            format!("sk_v = threadIdx.x < SK_WARPS ? {v}[threadIdx.x] : {};", lit(lowest)),
            "sk_i = threadIdx.x < SK_WARPS ? sk_am_i[threadIdx.x] : 0xffffffffu;".to_string(),
        ];
        let slots = [(tn, "v", v.clone()), ("unsigned int", "i", "sk_am_i".to_string())];
        warp_tree(&mut out, &slots, combine, &refill);
        out.line(format!("sk_ov = {v}[32];"));
        out.line("sk_oi = sk_am_i[32];");
        out.line("__syncthreads();");
        out.close("}");
        helpers.push((argmax_name(t), out.finish()));
    }
    Ok(helpers)
}

/// Sums `n` (a power of two up to 32) per-lane values `sk_m0` .. across each warp, leaving lane
/// `l`'s sum of value `l % n` in its `sk_m0`: each round a lane keeps half its values and adds
/// the other half of its partner's, then the lanes holding the same value add theirs. 16 values
/// take 16 shuffles and 30 selects a lane, where shuffling each value down the warp took 80.
fn warp_reduce_scatter(out: &mut Out, n: usize) {
    out.line("const unsigned int sk_lane = threadIdx.x & 31u;");
    let mut len = n;
    while len > 1 {
        let half = len / 2;
        out.open("{");
        out.line(format!("const bool sk_up = (sk_lane & {half}u) != 0u;"));
        for i in 0..half {
            let (lo, hi) = (format!("sk_m{i}"), format!("sk_m{}", i + half));
            out.line(format!(
                "{lo} = (sk_up ? {hi} : {lo}) + __shfl_xor_sync(0xffffffffu, sk_up ? {lo} : {hi}, {half});"
            ));
        }
        out.close("}");
        len = half;
    }
    let mut d = n;
    while d < 32 {
        out.line(format!("sk_m0 += __shfl_xor_sync(0xffffffffu, sk_m0, {d});"));
        d *= 2;
    }
}

/// Reduces the per-thread values `sk_<var>` across the block: `combine` folds the shuffled
/// partner values `o<var>` in; each lane 0 publishes its warp's value to `arr[warp]`, warp 0
/// folds those (after `refill` loads them) and leaves the result in `arr[32]`.
fn warp_tree(out: &mut Out, slots: &[(&str, &str, String)], combine: &str, refill: &[String]) {
    let shuffle_all = |out: &mut Out| {
        out.open("for (int sk_o = 16; sk_o > 0; sk_o >>= 1) {");
        for (t, v, _) in slots {
            out.line(format!("{t} o{v} = __shfl_xor_sync(0xffffffffu, sk_{v}, sk_o);"));
        }
        out.line(combine);
        out.close("}");
    };
    shuffle_all(out);
    out.open("if ((threadIdx.x & 31u) == 0u) {");
    for (_, v, arr) in slots {
        out.line(format!("{arr}[threadIdx.x >> 5] = sk_{v};"));
    }
    out.close("}");
    out.line("__syncthreads();");
    out.open("if (threadIdx.x < 32u) {");
    for r in refill {
        out.line(r);
    }
    shuffle_all(out);
    out.open("if (threadIdx.x == 0u) {");
    for (_, v, arr) in slots {
        out.line(format!("{arr}[32] = sk_{v};"));
    }
    out.close("}");
    out.close("}");
    out.line("__syncthreads();");
}

/// A buffer as a kernel or procedure takes it.
fn buffer_arg(b: &BufferDecl) -> String {
    let elem = match b.storage {
        Storage::F16 | Storage::Bf16 => "unsigned short",
        s => ty(s.value_ty()),
    };
    let konst = if b.writable { "" } else { "const " };
    format!("{konst}{elem}* __restrict__ {}", b.name)
}

/// The workgroup arrays `emit` declares for `kernel` at file scope, each its declaration and its
/// bytes: the collectives' scratch, then the kernel's own (aligned to 16 bytes, so that nvcc may
/// read four consecutive words, the race's Philox table, with one vector load).
fn shared_arrays(kernel: &Kernel, used: &Collectives) -> Vec<(String, u32)> {
    let array = |t: Ty, name: String, len: u32| (format!("__shared__ {} {name}[{len}];", ty(t)), len * size_of(t));
    let mut arrays: Vec<(String, u32)> =
        scratch_types(&used.reduce).into_iter().map(|t| array(t, format!("sk_red_{}", short(t)), 33)).collect();
    arrays.extend(used.argmax.iter().map(|&t| array(t, format!("sk_am_{}", short(t)), 33)));
    if !used.argmax.is_empty() {
        arrays.push(array(Ty::U32, "sk_am_i".into(), 33));
    }
    if used.scan {
        arrays.push(array(Ty::U32, "sk_scan".into(), 32));
    }
    arrays.extend(
        used.most_summed().into_iter().map(|(t, n)| array(t, format!("sk_many_{}", short(t)), (n as u32 + 1) * 32)),
    );
    arrays.extend(kernel.shared.iter().map(|s| {
        let (decl, bytes) = array(s.ty, s.name.clone(), s.len);
        (decl.replacen("__shared__ ", "__shared__ __align__(16) ", 1), bytes)
    }));
    arrays
}

/// A short tag for scratch-array names.
fn short(t: Ty) -> &'static str {
    crate::wgsl::ty(t)
}

/// Prints `kernel` as a CUDA translation unit, and the function files it includes
/// ([`function_files`]).
pub fn emit(kernel: &Prepared, default_block: u32, source: &str) -> Result<Printed, IrError> {
    if !default_block.is_multiple_of(32) || default_block > 1024 {
        let message = format!("a block of {default_block}: CUDA blocks are whole warps, at most 1024 threads");
        return Err(IrError::target(kernel, message));
    }
    let e = Emitter { kernel, macro_body: false };
    let mut out = Out::default();
    for l in header("//", source).lines() {
        out.line(l);
    }
    out.line(format!("// kernel `{}`: {}", kernel.name, kernel.doc));
    out.line(format!("// passes over each row: {}", kernel.passes));
    out.line(format!("// workgroup: {}", kernel.workgroup.word()));
    out.blank();
    let used = Collectives::of(kernel);
    let loads = |storage: Storage| kernel.buffers.iter().any(|d| d.storage == storage && reads(kernel, &d.name));
    let (f16, bf16) = (loads(Storage::F16), loads(Storage::Bf16));
    let infinite = |e: &Expr| match e {
        Expr::Lit(Lit::F32(v)) => !v.is_finite(),
        Expr::Lit(Lit::F64(v)) => !v.is_finite(),
        _ => false,
    };
    // Float maxima and argmaxes start from an infinity, which is spelled with a bitcast.
    let bitcast = bf16
        || any_expr(kernel, |e| matches!(e, Expr::Bitcast(..)) || infinite(e))
        || used.reduce.iter().any(|(op, t)| *op == ReduceOp::Max && matches!(t, Ty::F32 | Ty::F64))
        || !used.argmax.is_empty();
    let prelude = BLOCK_DEFINES.replace("#define SK_BLOCK 256", &format!("#define SK_BLOCK {default_block}"));
    let helpers = [
        (true, prelude.as_str()),
        (kernel.occupancy != Occupancy::Any, FULL_BLOCKS),
        (bitcast, BITCAST),
        (any_expr(kernel, |e| matches!(e, Expr::Intrinsic(Intrinsic::HighBit, _))), HIGH_BIT),
        (any_expr(kernel, |e| matches!(e, Expr::Intrinsic(Intrinsic::ApproxExp, _))), FAST_EXP),
        (f16, LOAD_F16),
        (bf16, LOAD_BF16),
    ];
    let bin_adds: Vec<String> = bin_types(kernel).into_iter().map(bin_add).collect();
    for (wanted, text) in helpers.into_iter().chain(bin_adds.iter().map(|t| (true, t.as_str()))) {
        if wanted {
            out.blank();
            text.lines().for_each(|l| out.line(l));
        }
    }
    // Each input of float32, f16 or bf16 values is read through a macro of its own, so that the
    // code that reads it (the function files) is one text for the three.
    for b in kernel.buffers.iter().filter(|b| b.holds_values() && reads(kernel, &b.name)) {
        let read = match b.storage {
            Storage::F16 => format!("sk_f16({}[i])", b.name),
            Storage::Bf16 => format!("sk_bf16({}[i])", b.name),
            _ => format!("{}[i]", b.name),
        };
        out.line(format!("#define sk_load_{}(i) {read}", b.name));
    }
    out.blank();
    // At file scope, so that procedures reach them as the kernel does.
    let arrays = shared_arrays(kernel, &used);
    for (decl, _) in &arrays {
        out.line(decl);
    }
    out.blank();
    let functions = function_files(kernel, source)?;
    for (path, _) in &functions {
        out.line(format!("#include \"{path}\""));
    }
    out.blank();
    let mut args: Vec<String> = kernel.buffers.iter().map(buffer_arg).collect();
    args.extend(kernel.params.iter().map(|p| format!("unsigned int {p}")));
    // A bound asks for no more blocks than the kernel's workgroup memory lets a multiprocessor
    // hold (counted from the arrays above without ptxas's padding, so never fewer than fit): a
    // T4 holds two of the one-read path's parts by their 25 KB, and their registers were held
    // to four blocks' 64 for nothing (they spilled there).
    let shared: u32 = arrays.iter().map(|(_, bytes)| bytes).sum();
    let blocks = format!("(SK_SM_SHARED / ({shared} + SK_BLOCK_RESERVED))");
    let least = |n: &str| format!("SK_BLOCK, ({n} < {blocks} ? {n} : {blocks})");
    let bounds = match kernel.occupancy {
        Occupancy::Any => "SK_BLOCK".to_string(),
        Occupancy::Full => least("SK_FULL_BLOCKS"),
        Occupancy::AtLeast(n) => least(&format!("({n} < SK_FULL_BLOCKS ? {n} : SK_FULL_BLOCKS)")),
    };
    out.line(format!("extern \"C\" __global__ void __launch_bounds__({bounds}) {}(", kernel.name));
    out.open(format!("    {}) {{", args.join(", ")));
    let mut scope = Scope::new(kernel, &[], None);
    e.block(&mut out, &kernel.body, &mut scope)?;
    out.close("}");
    Ok(Printed { text: out.finish(), functions })
}

/// The functions `kernel` calls, each a file of its own in `kernels/functions/` (the path a
/// kernel file includes), written once for every kernel that calls it: its collectives, the
/// IR's functions, then its procedures (macros). NVRTC takes one source, so the crate puts each
/// in its include line's place (`KernelSource::cuda_unit`). They read the file-scope arrays and
/// helpers (`sk_bitcast`) the including file defines before them.
fn function_files(kernel: &Prepared, source: &str) -> Result<Vec<(String, String)>, IrError> {
    let mut texts = collective_helpers(&Collectives::of(kernel), kernel)?;
    for func in &kernel.functions {
        let mut out = Out::default();
        let params: Vec<String> = func.params.iter().map(|(n, t)| format!("{} {n}", ty(*t))).collect();
        out.open(format!("__device__ __forceinline__ {} {}({}) {{", ty(func.ret), func.name, params.join(", ")));
        let mut scope = Scope::new(kernel, &func.params, Some(func.ret));
        Emitter { kernel, macro_body: false }.block(&mut out, &func.body, &mut scope)?;
        out.close("}");
        texts.push((func.name.clone(), out.finish()));
    }
    for proc in &kernel.procedures {
        texts.push((proc.name.clone(), procedure_macro(kernel, proc)?));
    }
    let file = |(name, text): (String, String)| {
        let head = format!("{}// `{name}`, included by each kernel that calls it\n", header("//", source));
        (format!("functions/{name}.cuh"), head + &text)
    };
    Ok(texts.into_iter().map(file).collect())
}

/// Procedure `proc` as a macro, so that NVVM compiles the code a kernel would have inline: as
/// `__forceinline__` functions the top-p cut's column loop took 4.5 more instructions a column
/// on sm_90. The outlining pass leaves no name a body declares among the arguments.
pub fn procedure_macro(kernel: &Prepared, proc: &Procedure) -> Result<String, IrError> {
    let mut params: Vec<String> = proc.params.iter().chain(&proc.inouts).map(|(n, _)| n.clone()).collect();
    for (n, _, bins) in &proc.histograms {
        params.extend((0..*bins).map(|i| format!("{n}_{i}")));
    }
    if let Some(p) = params.iter().find(|p| ["x", "y", "z", "w"].contains(&p.as_str())) {
        return Err(IrError::target(kernel, format!("procedure {} has a parameter `{p}`, a member's name", proc.name)));
    }
    let mut text = Out::default();
    text.open(format!("#define {}({}) {{", proc.name, params.join(", ")));
    Emitter { kernel, macro_body: true }.block(&mut text, &proc.body, &mut proc.scope(kernel))?;
    text.close("}");
    let text = text.finish();
    let lines: Vec<&str> = text.lines().collect();
    let continued = |(i, l): (usize, &&str)| if i + 1 < lines.len() { format!("{l} \\\n") } else { format!("{l}\n") };
    Ok(lines.iter().enumerate().map(continued).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the lines `warp_reduce_scatter` prints on 32 lanes (each assignment reads every
    /// lane's values before any lane writes, as a warp's shuffle does) and checks each lane
    /// against a plain sum over the warp: lane `l` must hold the sum of value `l % n`.
    #[test]
    fn reduce_scatter_leaves_each_lane_its_values_sum() {
        for n in [2usize, 4, 8, 16, 32] {
            let mut out = Out::default();
            warp_reduce_scatter(&mut out, n);
            let text = out.finish();
            let mut m: Vec<Vec<u64>> =
                (0..32u64).map(|l| (0..n as u64).map(|i| (l + 1) * 1000 + i * i).collect()).collect();
            let want: Vec<u64> = (0..n).map(|i| (0..32).map(|l| m[l][i]).sum()).collect();
            let mut up_bit = 0usize;
            let number = |s: &str| s.trim_start_matches("sk_m").parse::<usize>().expect("a value");
            for line in text.lines().map(str::trim) {
                if let Some(rest) = line.strip_prefix("const bool sk_up = (sk_lane & ") {
                    up_bit = rest.split('u').next().unwrap().parse().unwrap();
                } else if let Some((dst, rest)) = line.split_once(" = (sk_up ? ") {
                    // `sk_mI = (sk_up ? sk_mH : sk_mI) + __shfl_xor_sync(.., sk_up ? sk_mI : sk_mH, D);`
                    let words: Vec<&str> =
                        rest.split(|c: char| !c.is_alphanumeric() && c != '_').filter(|w| !w.is_empty()).collect();
                    let (keep_up, keep_down) = (number(words[0]), number(words[1]));
                    let (send_up, send_down) = (number(words[5]), number(words[6]));
                    let d: usize = words[7].parse().unwrap();
                    let old = m.clone();
                    for l in 0..32 {
                        let (up, p) = (l & up_bit != 0, l ^ d);
                        let sent = old[p][if p & up_bit != 0 { send_up } else { send_down }];
                        m[l][number(dst)] = old[l][if up { keep_up } else { keep_down }] + sent;
                    }
                } else if let Some(rest) = line.strip_prefix("sk_m0 += __shfl_xor_sync(0xffffffffu, sk_m0, ") {
                    let d: usize = rest.trim_end_matches(");").parse().unwrap();
                    let old = m.clone();
                    for l in 0..32 {
                        m[l][0] = old[l][0] + old[l ^ d][0];
                    }
                } else {
                    assert!(line.starts_with("const unsigned int sk_lane") || line == "{" || line == "}", "{line}");
                }
            }
            for l in 0..32 {
                assert_eq!(m[l][0], want[l % n], "n = {n}, lane {l}");
            }
        }
    }
}
