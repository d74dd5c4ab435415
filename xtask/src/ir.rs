//! The typed kernel IR that every sampling kernel is written in, once.
//!
//! A kernel is a list of statements over typed expressions, plus declarations of the storage
//! buffers and scalar parameters it binds. Emitters (`wgsl.rs`, `cuda.rs`) walk it with exhaustive
//! matches, so a new node cannot be forgotten by one of them. Collective operations (block max,
//! block sum, block argmax) are nodes of their own: each emitter lowers them the way its target
//! does best (warp shuffles on CUDA, workgroup memory on WGSL), and neither assumes a subgroup
//! width.

use std::collections::BTreeMap;
use std::{fmt, ops};

/// Why a kernel cannot be emitted: what `cargo xtask gen` reports instead of panicking.
#[derive(Clone, Debug, PartialEq)]
pub enum IrError {
    /// The kernel does not type-check, or names something it does not declare.
    Type { kernel: String, message: String },
    /// Two of the kernel's helpers share a name but not a body.
    HelperClash { kernel: String, name: String },
    /// The target cannot run the kernel as asked (its block size, its scratch).
    Target { kernel: String, message: String },
}

impl IrError {
    pub fn ty(kernel: &Kernel, message: impl Into<String>) -> Self {
        IrError::Type { kernel: kernel.name.clone(), message: message.into() }
    }
    pub fn target(kernel: &Kernel, message: impl Into<String>) -> Self {
        IrError::Target { kernel: kernel.name.clone(), message: message.into() }
    }
}

impl fmt::Display for IrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IrError::Type { kernel, message } => write!(f, "{kernel}: {message}"),
            IrError::HelperClash { kernel, name } => {
                write!(f, "{kernel}: two helpers are called `{name}` and differ")
            }
            IrError::Target { kernel, message } => write!(f, "{kernel}: the target cannot run it: {message}"),
        }
    }
}

impl std::error::Error for IrError {}

impl From<IrError> for String {
    fn from(e: IrError) -> String {
        e.to_string()
    }
}

/// Value types. `U64` and `F64` exist where the target has them (WGSL needs SHADER_INT64 /
/// SHADER_F64); `U32x4` is the four-word block that Philox works on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    Bool,
    U32,
    I32,
    U64,
    F32,
    F64,
    U32x4,
}

/// How a storage buffer's elements are laid out in memory.
/// `F16` and `Bf16` are packed two to a 32-bit word, read-only, and load as `F32`.
/// `AtomicU32` is u32 that other workgroups read or update (a split row's part records and
/// per-row counters, [`Stmt::LastPart`]): WGSL declares it `array<atomic<u32>>` and every load
/// and store of it is `atomicLoad`/`atomicStore`; CUDA loads it `volatile` (from L2, never a
/// stale L1 line) and stores it plainly before a [`Stmt::Fence`]. Writable only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    F32,
    F16,
    Bf16,
    U32,
    F64,
    AtomicU32,
}

impl Storage {
    /// The type a load from such a buffer produces.
    pub fn value_ty(self) -> Ty {
        match self {
            Storage::F32 | Storage::F16 | Storage::Bf16 => Ty::F32,
            Storage::U32 | Storage::AtomicU32 => Ty::U32,
            Storage::F64 => Ty::F64,
        }
    }
    pub fn is_half(self) -> bool {
        matches!(self, Storage::F16 | Storage::Bf16)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Lit {
    Bool(bool),
    U32(u32),
    I32(i32),
    U64(u64),
    F32(f32),
    F64(f64),
}

impl Lit {
    pub fn ty(self) -> Ty {
        match self {
            Lit::Bool(_) => Ty::Bool,
            Lit::U32(_) => Ty::U32,
            Lit::I32(_) => Ty::I32,
            Lit::U64(_) => Ty::U64,
            Lit::F32(_) => Ty::F32,
            Lit::F64(_) => Ty::F64,
        }
    }
}

/// Values every invocation knows about itself. `BlockSize` is a compile-time constant of the
/// target (from the tuning table), not a runtime value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    LocalId,
    GroupId,
    NumGroups,
    BlockSize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl BinOp {
    pub fn is_comparison(self) -> bool {
        matches!(self, BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge)
    }
    /// The operator's spelling, which WGSL and CUDA share.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::BitAnd => "&",
            BinOp::BitOr => "|",
            BinOp::BitXor => "^",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::And => "&&",
            BinOp::Or => "||",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Not,
    BitNot,
}

/// Elementary functions every target has exactly (IEEE-rounded or exact). Transcendental
/// functions are not here on purpose: `exp` and `log` are IR functions (see `kernels/math.rs`),
/// so every backend computes the same values and none depends on a driver's accuracy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MathFn {
    Min,
    Max,
    Fma,
    Floor,
    Abs,
}

/// Target-specific operations with one meaning: lowered to an intrinsic where the target has
/// one, else to a helper the emitter writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intrinsic {
    /// High 32 bits of the 64-bit product of two u32 (`__umulhi` on CUDA).
    MulHi,
    /// The target's fast natural log of an f32: `__logf` on CUDA (the hardware's `lg2.approx`),
    /// `log` in WGSL. Only as accurate as Vulkan promises (absolute error below 2^-21 on
    /// [0.5, 2], 3 ulp elsewhere), so it may only screen values whose exact version is computed
    /// with `kernels/math.rs` before it decides anything (the screened race in `race.rs`).
    ApproxLog,
    /// The target's fast `e^x` of an f32: on CUDA the hardware's `ex2.approx.ftz` of `x log2 e`
    /// (as `__expf`, results below 2^-126 flushed to 0), `exp` in WGSL. Only as accurate as Vulkan promises (3 + 2|x| ulp), so it
    /// may only feed an estimate whose use is checked against a bound that counts that error
    /// (a part's sum of weights, `filter_top_k.rs`).
    ApproxExp,
    /// The target's fast `a / b` of f32s: `__fdividef` on CUDA (a reciprocal and a product,
    /// within 2 ulp for `b` below 2^126), `/` in WGSL (within 2.5 ulp). Where a division is
    /// correctly rounded (CUDA's `/`), its slow path for rare operands costs as much again, so
    /// an estimate (a probability's weight in a part's sum) takes this one.
    ApproxDiv,
    /// The index of the highest set bit of a nonzero u32 (`31 - __clz` on CUDA,
    /// `firstLeadingBit` in WGSL): an exact integer, where a conversion to f32 would round as
    /// the target pleases.
    HighBit,
    /// `floor(x)` of an f32 as an i32, saturated at the i32 bounds: `__float2int_rd` on CUDA
    /// (one conversion, where `floor` and a cast are two, and the conversion pipe is a quarter
    /// of the integer pipe's), in WGSL `floor` clamped before the cast (WGSL leaves an
    /// out-of-range conversion to the implementation). NaN gives 0 on CUDA, an unspecified i32
    /// in WGSL: callers pass none.
    FloorI32,
}

impl Intrinsic {
    /// Its arguments' types and its result's.
    pub fn signature(self) -> (&'static [Ty], Ty) {
        match self {
            Intrinsic::MulHi => (&[Ty::U32, Ty::U32], Ty::U32),
            Intrinsic::ApproxLog | Intrinsic::ApproxExp => (&[Ty::F32], Ty::F32),
            Intrinsic::ApproxDiv => (&[Ty::F32, Ty::F32], Ty::F32),
            Intrinsic::HighBit => (&[Ty::U32], Ty::U32),
            Intrinsic::FloorI32 => (&[Ty::F32], Ty::I32),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Lit(Lit),
    Var(String),
    Param(String),
    Builtin(Builtin),
    /// Element `index` of a storage buffer (half formats are widened to f32).
    Load(String, Box<Expr>),
    /// [`Expr::Load`] of a word no workgroup of the launch writes (an earlier launch did): on an
    /// atomic buffer, WGSL still reads it atomically, and CUDA as plain memory, through L1,
    /// where a word other workgroups write in the launch must be read past it.
    Settled(String, Box<Expr>),
    /// Element `index` of a workgroup array.
    LoadShared(String, Box<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
    Un(UnOp, Box<Expr>),
    /// Value conversion (rounds or truncates like a C cast).
    Cast(Ty, Box<Expr>),
    /// Reinterpret the bits of a value of the same size.
    Bitcast(Ty, Box<Expr>),
    Math(MathFn, Vec<Expr>),
    Intrinsic(Intrinsic, Vec<Expr>),
    /// `cond ? a : b`, both sides evaluated.
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
    /// A call of one of the kernel's helper functions.
    Call(String, Vec<Expr>),
    /// Word `i` (0..4) of a `U32x4`.
    Component(Box<Expr>, u8),
    /// Counter `i` (a constant) of a histogram declared by [`Stmt::LetBins`].
    BinValue(String, u32),
    MakeU32x4(Box<[Expr; 4]>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Max,
    Sum,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// Declare a mutable variable.
    Let {
        name: String,
        ty: Ty,
        init: Expr,
    },
    /// Bind an immutable name to a value computed once (what the binding pass introduces for an
    /// expression a statement uses more than once): `let` in WGSL, `const` in CUDA.
    Bind {
        name: String,
        ty: Ty,
        value: Expr,
    },
    /// A line of commentary in the generated code: the Rust function that built what follows.
    Comment(String),
    Assign {
        name: String,
        value: Expr,
    },
    Store {
        buf: String,
        index: Expr,
        value: Expr,
    },
    StoreShared {
        arr: String,
        index: Expr,
        value: Expr,
    },
    If {
        cond: Expr,
        then: Vec<Stmt>,
        els: Vec<Stmt>,
    },
    /// `for (var = from; var < to; var += step)` over u32.
    For {
        var: String,
        from: Expr,
        to: Expr,
        step: Expr,
        body: Vec<Stmt>,
    },
    /// Declare a per-invocation histogram: `bins` counters of `ty` (u32 or u64), all zero. A
    /// target keeps them where a data-dependent [`Stmt::AddToBin`] is cheapest: an indexed
    /// array on WGSL (lavapipe runs every branch of a chain of tests, so one indexed add beats
    /// sixteen tested ones), separate registers and a chain of tests on CUDA (an indexed array
    /// would live in local memory).
    LetBins {
        name: String,
        ty: Ty,
        bins: u32,
    },
    /// Counter `bin` (a u32 below the histogram's `bins`) of `name` += `value`.
    AddToBin {
        name: String,
        bin: Expr,
        value: Expr,
    },
    /// A nested scope, so unrolled code can reuse names.
    Scope(Vec<Stmt>),
    Break,
    Return(Option<Expr>),
    /// Workgroup barrier for workgroup memory.
    Barrier,
    /// `old` (a u32 declared beforehand) = element `index` of the [`Storage::AtomicU32`] buffer
    /// `buf` (or the atomic workgroup array `buf`, see [`SharedDecl::atomic`]), which gains
    /// `value` (u32) in one indivisible step: of several workgroups (invocations) adding at
    /// once, each sees a distinct `old`. Relaxed: it orders no other access (see [`Stmt::Fence`]).
    AtomicAdd {
        buf: String,
        index: Expr,
        value: Expr,
        old: String,
    },
    /// A memory fence over storage buffers: on CUDA a device-scope one (`__threadfence()`:
    /// this thread's stores before it are visible to every block before its accesses after
    /// it); in WGSL `storageBarrier()`, which orders storage accesses within the workgroup only
    /// (and is a workgroup barrier, so it is reached in uniform control flow like
    /// [`Stmt::Barrier`]). Work another workgroup reads goes through [`Stmt::LastPart`].
    Fence,
    /// The end of a part of a split row (inside a row loop that declares `parts` and `part`):
    /// the part has written its record; `merge`, which reads every part's record, runs once for
    /// the row after all of them have, in one workgroup, and the code after this statement runs
    /// in that workgroup with the state `merge` left (in the others, as if `merge` had not run).
    /// Written once; each target lowers it before the passes (`last_part.rs`): CUDA in the same
    /// launch, the part that arrives last on `counter[at]` (an atomic word, 0 between launches)
    /// merging after a device-scope fence; WGSL, whose memory model orders no plain data
    /// between workgroups of one launch, in a second dispatch of the kernel (`FLAG_MERGE`), where
    /// part 0 of each row merges.
    LastPart {
        counter: String,
        at: Expr,
        merge: Vec<Stmt>,
    },
    /// Every invocation of the block gets `op` over all invocations' `value` in `out` (declared
    /// beforehand). Must be reached in uniform control flow.
    Reduce {
        op: ReduceOp,
        ty: Ty,
        value: Expr,
        out: String,
    },
    /// Every invocation gets in each of `outs` (declared beforehand) the block's sum of the
    /// matching `values`, all of integer type `ty` (u32 or u64; at most 32 values). Integer sums
    /// are exact, so the result does not depend on the order the target adds in (atomics in
    /// workgroup memory are fine). One collective for many sums: a target pays its barriers once.
    SumMany {
        ty: Ty,
        values: Vec<Expr>,
        outs: Vec<String>,
    },
    /// Every invocation gets in `out` (declared beforehand) the sum of the u32 `value` of the
    /// invocations before it (local index order): an exclusive scan. Uniform control flow.
    Scan {
        value: Expr,
        out: String,
    },
    /// Every invocation gets the largest `value` (f32 or f64) over the block and its u32 `index`;
    /// ties go to the lower index. Values must not be NaN. Uniform control flow, like `Reduce`.
    ArgMax {
        ty: Ty,
        value: Expr,
        index: Expr,
        out_value: String,
        out_index: String,
    },
    /// Runs [`Procedure`] `name` with `args` for its `params`, the caller's variables `inouts`
    /// (declared beforehand) for its `inouts`, which it may assign, and the caller's histograms
    /// `histograms` for its own.
    Call {
        name: String,
        args: Vec<Expr>,
        inouts: Vec<String>,
        histograms: Vec<String>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    pub name: String,
    pub params: Vec<(String, Ty)>,
    pub ret: Ty,
    pub body: Vec<Stmt>,
}

/// A block a kernel repeats, written once (made by the outlining pass, `outline.rs`, never by a
/// builder): it reads `params` by value, assigns the caller's `inouts`, and reaches buffers,
/// workgroup arrays and collectives as the kernel body does. It has no `return`, and a `break`
/// in it leaves one of its own loops.
#[derive(Clone, Debug, PartialEq)]
pub struct Procedure {
    pub name: String,
    pub params: Vec<(String, Ty)>,
    pub inouts: Vec<(String, Ty)>,
    /// The caller's histograms it reads or adds to: name, counter type, counters.
    pub histograms: Vec<(String, Ty, u32)>,
    pub body: Vec<Stmt>,
}

impl Procedure {
    /// What its body sees at its top: its parameters, inouts and histograms.
    pub fn scope<'k>(&self, kernel: &'k Kernel) -> Scope<'k> {
        let vars: Vec<(String, Ty)> = self.params.iter().chain(&self.inouts).cloned().collect();
        let mut scope = Scope::new(kernel, &vars, None);
        for (n, t, bins) in &self.histograms {
            scope.declare_bins(n, *t, *bins);
        }
        scope
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct BufferDecl {
    pub name: String,
    pub storage: Storage,
    pub writable: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SharedDecl {
    pub name: String,
    pub ty: Ty,
    pub len: u32,
    /// u32 elements that invocations add to at once ([`Stmt::AtomicAdd`] names the array): a
    /// histogram of many bins, which per-invocation bins cannot hold. WGSL declares them
    /// `atomic<u32>`, so every load and store of them goes through `atomicLoad`/`atomicStore`.
    pub atomic: bool,
}

impl BufferDecl {
    /// An input of float32, f16 or bf16 values: each target reads it through `sk_load_<name>`,
    /// which the kernel file defines, so that code reading it prints one text for the three.
    pub fn holds_values(&self) -> bool {
        !self.writable && matches!(self.storage, Storage::F32 | Storage::F16 | Storage::Bf16)
    }
}

impl SharedDecl {
    pub fn new(name: &str, ty: Ty, len: u32) -> Self {
        SharedDecl { name: name.into(), ty, len, atomic: false }
    }
    /// An array of `len` u32 for [`Stmt::AtomicAdd`].
    pub fn atomic(name: &str, len: u32) -> Self {
        SharedDecl { name: name.into(), ty: Ty::U32, len, atomic: true }
    }
}

/// One entry point: what it binds, in binding order, and what it does.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub name: String,
    pub doc: String,
    /// How many times the kernel reads each element of a row, whatever the data.
    pub passes: u32,
    /// How many launches one call takes: 1, or for a staged kernel one per stage (each launch
    /// gets its stage in `flags`).
    pub stages: u32,
    /// What one workgroup covers, which picks its block from the tuning table.
    pub workgroup: crate::tuning::Workgroup,
    pub buffers: Vec<BufferDecl>,
    /// u32 scalar parameters, in order (a uniform struct on WGSL, arguments on CUDA).
    pub params: Vec<String>,
    pub shared: Vec<SharedDecl>,
    pub functions: Vec<Function>,
    /// Empty as built; the outlining pass fills it ([`Stmt::Call`]).
    pub procedures: Vec<Procedure>,
    pub body: Vec<Stmt>,
    /// WGSL holds each u64 as two u32 words, so the kernel runs on a device without 64-bit
    /// integers (`wgsl_u64.rs`). Such a kernel is WGSL only: every CUDA device has u64.
    pub u64_as_words: bool,
    /// How many of its blocks CUDA asks ptxas to fit on a multiprocessor.
    pub occupancy: Occupancy,
}

/// The blocks a multiprocessor must hold, by the registers ptxas allows a thread
/// (`__launch_bounds__`' second argument). For a kernel a few registers over a line, where the
/// block a multiprocessor cannot hold costs a round of the launch: `cargo xtask ptx-report`
/// must still show no spills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Occupancy {
    /// Whatever ptxas chooses.
    Any,
    /// As many as the multiprocessor's threads allow.
    Full,
    /// This many, or as many as its threads allow where fewer.
    AtLeast(u32),
}

// ---------------------------------------------------------------------------------------------
// Building expressions and statements.

pub fn u(v: u32) -> Expr {
    Expr::Lit(Lit::U32(v))
}
pub fn i(v: i32) -> Expr {
    Expr::Lit(Lit::I32(v))
}
pub fn f(v: f32) -> Expr {
    Expr::Lit(Lit::F32(v))
}
pub fn f64_(v: f64) -> Expr {
    Expr::Lit(Lit::F64(v))
}
pub fn boolean(v: bool) -> Expr {
    Expr::Lit(Lit::Bool(v))
}
/// The zero of `ty` (false, 0, 0.0, a vector of zeros).
pub fn zero(ty: Ty) -> Expr {
    match ty {
        Ty::Bool => boolean(false),
        Ty::U32 => u(0),
        Ty::I32 => i(0),
        Ty::U64 => Expr::Lit(Lit::U64(0)),
        Ty::F32 => f(0.0),
        Ty::F64 => f64_(0.0),
        Ty::U32x4 => u32x4(u(0), u(0), u(0), u(0)),
    }
}
pub fn var(name: &str) -> Expr {
    Expr::Var(name.to_string())
}
pub fn param(name: &str) -> Expr {
    Expr::Param(name.to_string())
}
pub fn builtin(b: Builtin) -> Expr {
    Expr::Builtin(b)
}
pub fn load(buf: &str, index: Expr) -> Expr {
    Expr::Load(buf.to_string(), Box::new(index))
}
/// [`Expr::Settled`].
pub fn load_settled(buf: &str, index: Expr) -> Expr {
    Expr::Settled(buf.to_string(), Box::new(index))
}
pub fn load_shared(arr: &str, index: Expr) -> Expr {
    Expr::LoadShared(arr.to_string(), Box::new(index))
}
pub fn select(cond: Expr, a: Expr, b: Expr) -> Expr {
    Expr::Select(Box::new(cond), Box::new(a), Box::new(b))
}
pub fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Call(name.to_string(), args)
}
pub fn fma(a: Expr, b: Expr, c: Expr) -> Expr {
    Expr::Math(MathFn::Fma, vec![a, b, c])
}
pub fn floor(a: Expr) -> Expr {
    Expr::Math(MathFn::Floor, vec![a])
}
pub fn mulhi(a: Expr, b: Expr) -> Expr {
    Expr::Intrinsic(Intrinsic::MulHi, vec![a, b])
}
pub fn approx_log(a: Expr) -> Expr {
    Expr::Intrinsic(Intrinsic::ApproxLog, vec![a])
}
pub fn approx_exp(a: Expr) -> Expr {
    Expr::Intrinsic(Intrinsic::ApproxExp, vec![a])
}
pub fn approx_div(a: Expr, b: Expr) -> Expr {
    Expr::Intrinsic(Intrinsic::ApproxDiv, vec![a, b])
}
pub fn high_bit(a: Expr) -> Expr {
    Expr::Intrinsic(Intrinsic::HighBit, vec![a])
}
pub fn floor_i32(a: Expr) -> Expr {
    Expr::Intrinsic(Intrinsic::FloorI32, vec![a])
}
pub fn bin_value(name: &str, i: u32) -> Expr {
    Expr::BinValue(name.to_string(), i)
}
pub fn u32x4(a: Expr, b: Expr, c: Expr, d: Expr) -> Expr {
    Expr::MakeU32x4(Box::new([a, b, c, d]))
}

impl Expr {
    fn bin(self, op: BinOp, rhs: Expr) -> Expr {
        Expr::Bin(op, Box::new(self), Box::new(rhs))
    }
    pub fn eq_(self, r: Expr) -> Expr {
        self.bin(BinOp::Eq, r)
    }
    pub fn ne_(self, r: Expr) -> Expr {
        self.bin(BinOp::Ne, r)
    }
    pub fn lt(self, r: Expr) -> Expr {
        self.bin(BinOp::Lt, r)
    }
    pub fn le(self, r: Expr) -> Expr {
        self.bin(BinOp::Le, r)
    }
    pub fn gt(self, r: Expr) -> Expr {
        self.bin(BinOp::Gt, r)
    }
    pub fn ge(self, r: Expr) -> Expr {
        self.bin(BinOp::Ge, r)
    }
    pub fn and(self, r: Expr) -> Expr {
        self.bin(BinOp::And, r)
    }
    pub fn or(self, r: Expr) -> Expr {
        self.bin(BinOp::Or, r)
    }
    pub fn not(self) -> Expr {
        Expr::Un(UnOp::Not, Box::new(self))
    }
    pub fn cast(self, ty: Ty) -> Expr {
        Expr::Cast(ty, Box::new(self))
    }
    pub fn bitcast(self, ty: Ty) -> Expr {
        Expr::Bitcast(ty, Box::new(self))
    }
    pub fn min(self, r: Expr) -> Expr {
        Expr::Math(MathFn::Min, vec![self, r])
    }
    pub fn max(self, r: Expr) -> Expr {
        Expr::Math(MathFn::Max, vec![self, r])
    }
    pub fn abs(self) -> Expr {
        Expr::Math(MathFn::Abs, vec![self])
    }
    pub fn comp(self, i: u8) -> Expr {
        Expr::Component(Box::new(self), i)
    }
}

macro_rules! binop_trait {
    ($tr:ident, $m:ident, $op:ident) => {
        impl ops::$tr for Expr {
            type Output = Expr;
            fn $m(self, rhs: Expr) -> Expr {
                self.bin(BinOp::$op, rhs)
            }
        }
    };
}
binop_trait!(Add, add, Add);
binop_trait!(Sub, sub, Sub);
binop_trait!(Mul, mul, Mul);
binop_trait!(Div, div, Div);
binop_trait!(Rem, rem, Rem);
binop_trait!(BitAnd, bitand, BitAnd);
binop_trait!(BitOr, bitor, BitOr);
binop_trait!(BitXor, bitxor, BitXor);
binop_trait!(Shl, shl, Shl);
binop_trait!(Shr, shr, Shr);

impl ops::Neg for Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        Expr::Un(UnOp::Neg, Box::new(self))
    }
}

/// Collects statements; control flow takes closures that fill nested blocks.
#[derive(Default)]
pub struct Block {
    pub stmts: Vec<Stmt>,
}

impl Block {
    pub fn new() -> Self {
        Self::default()
    }
    /// The statements `f` pushes, after a comment naming the Rust function that wrote `f`
    /// (`builder`; [`crate::passes`] keeps it only where the builder changes).
    fn nested(builder: String, f: impl FnOnce(&mut Block)) -> Vec<Stmt> {
        let mut b = Block::new();
        b.stmts.push(Stmt::Comment(format!("built by {builder}")));
        f(&mut b);
        b.stmts
    }
    /// Declares `name` and returns it as an expression.
    pub fn let_(&mut self, name: &str, ty: Ty, init: Expr) -> Expr {
        self.stmts.push(Stmt::Let { name: name.to_string(), ty, init });
        var(name)
    }
    pub fn set(&mut self, name: &str, value: Expr) {
        self.stmts.push(Stmt::Assign { name: name.to_string(), value });
    }
    pub fn store(&mut self, buf: &str, index: Expr, value: Expr) {
        self.stmts.push(Stmt::Store { buf: buf.to_string(), index, value });
    }
    /// Declares a histogram of `bins` zeroed counters of `ty` (see [`Stmt::LetBins`]).
    pub fn let_bins(&mut self, name: &str, ty: Ty, bins: u32) {
        self.stmts.push(Stmt::LetBins { name: name.to_string(), ty, bins });
    }
    pub fn add_to_bin(&mut self, name: &str, bin: Expr, value: Expr) {
        self.stmts.push(Stmt::AddToBin { name: name.to_string(), bin, value });
    }
    pub fn store_shared(&mut self, arr: &str, index: Expr, value: Expr) {
        self.stmts.push(Stmt::StoreShared { arr: arr.to_string(), index, value });
    }
    pub fn if_(&mut self, cond: Expr, then: impl FnOnce(&mut Block)) {
        self.stmts.push(Stmt::If { cond, then: Self::nested(builder_of(&then), then), els: vec![] });
    }
    pub fn if_else(&mut self, cond: Expr, then: impl FnOnce(&mut Block), els: impl FnOnce(&mut Block)) {
        let (then_by, els_by) = (builder_of(&then), builder_of(&els));
        self.stmts.push(Stmt::If { cond, then: Self::nested(then_by, then), els: Self::nested(els_by, els) });
    }
    /// `for (name = from; name < to; name += step)`; the closure gets the loop variable.
    pub fn for_(&mut self, name: &str, from: Expr, to: Expr, step: Expr, body: impl FnOnce(&mut Block, Expr)) {
        let body = Self::nested(builder_of(&body), |b| body(b, var(name)));
        self.stmts.push(Stmt::For { var: name.to_string(), from, to, step, body });
    }
    pub fn scope(&mut self, body: impl FnOnce(&mut Block)) {
        self.stmts.push(Stmt::Scope(Self::nested(builder_of(&body), body)));
    }
    pub fn ret(&mut self, e: Expr) {
        self.stmts.push(Stmt::Return(Some(e)));
    }
    pub fn barrier(&mut self) {
        self.stmts.push(Stmt::Barrier);
    }
    /// A device-scope fence (see [`Stmt::Fence`]).
    pub fn fence(&mut self) {
        self.stmts.push(Stmt::Fence);
    }
    /// [`Stmt::LastPart`]: `merge` runs once for the row, after every part wrote its record.
    pub fn last_part(&mut self, counter: &str, at: Expr, merge: impl FnOnce(&mut Block)) {
        let merge = Self::nested(builder_of(&merge), merge);
        self.stmts.push(Stmt::LastPart { counter: counter.to_string(), at, merge });
    }
    /// Atomically adds `value` to element `index` of the atomic buffer (or workgroup array) `buf`; the element's
    /// previous value goes into a new u32 variable `old`, returned as an expression.
    pub fn atomic_add(&mut self, buf: &str, index: Expr, value: Expr, old: &str) -> Expr {
        self.let_(old, Ty::U32, u(0));
        self.stmts.push(Stmt::AtomicAdd { buf: buf.to_string(), index, value, old: old.to_string() });
        var(old)
    }
    /// Block-wide reduction into a new variable `out`, returned as an expression.
    pub fn reduce(&mut self, op: ReduceOp, ty: Ty, value: Expr, out: &str) -> Expr {
        self.let_(out, ty, zero(ty));
        self.stmts.push(Stmt::Reduce { op, ty, value, out: out.to_string() });
        var(out)
    }
    /// `value`, a u32 every invocation holds alike (a word of workgroup or read-write memory
    /// read at one index), as a uniform value in a new variable `out`. WGSL counts such a read
    /// as differing between invocations, so a branch on it around a barrier breaks its
    /// uniformity rule (`uniformity.rs`); a reduction's result is uniform. The max of equal
    /// values is the value.
    pub fn uniform(&mut self, value: Expr, out: &str) -> Expr {
        self.reduce(ReduceOp::Max, Ty::U32, value, out)
    }
    /// Block-wide sums of several integer values at once, into new variables `outs`.
    pub fn sum_many(&mut self, ty: Ty, values: Vec<Expr>, outs: &[String]) {
        for o in outs {
            self.let_(o, ty, zero(ty));
        }
        self.stmts.push(Stmt::SumMany { ty, values, outs: outs.to_vec() });
    }
    /// Block-wide exclusive prefix sum of u32 values into a new variable `out`.
    pub fn scan(&mut self, value: Expr, out: &str) -> Expr {
        self.let_(out, Ty::U32, u(0));
        self.stmts.push(Stmt::Scan { value, out: out.to_string() });
        var(out)
    }
    /// Block-wide argmax of f32 values into new variables `out_value`, `out_index`.
    pub fn argmax(&mut self, value: Expr, index: Expr, out_value: &str, out_index: &str) -> (Expr, Expr) {
        self.argmax_of(Ty::F32, value, index, out_value, out_index)
    }
    /// Block-wide argmax of `ty` values (f32 or f64).
    pub fn argmax_of(&mut self, ty: Ty, value: Expr, index: Expr, out_value: &str, out_index: &str) -> (Expr, Expr) {
        let zero = if ty == Ty::F64 { f64_(0.0) } else { f(0.0) };
        self.let_(out_value, ty, zero);
        self.let_(out_index, Ty::U32, u(0));
        self.stmts.push(Stmt::ArgMax {
            ty,
            value,
            index,
            out_value: out_value.to_string(),
            out_index: out_index.to_string(),
        });
        (var(out_value), var(out_index))
    }
}

pub fn function(name: &str, params: &[(&str, Ty)], ret: Ty, body: impl FnOnce(&mut Block)) -> Function {
    Function {
        name: name.to_string(),
        params: params.iter().map(|(n, t)| (n.to_string(), *t)).collect(),
        ret,
        body: Block::nested(builder_of(&body), body),
    }
}

/// The Rust function that wrote the closure `f`, as a path under `xtask::` (`kernels::filters::
/// sweep`): the name of a closure's type is its enclosing function's path, then `{{closure}}`.
/// What a type's name reads like is not a stable Rust promise, but `gen --check` compares
/// output of one toolchain.
fn builder_of<F>(_: &F) -> String {
    let full = std::any::type_name::<F>();
    let mut path = full.split('<').next().unwrap_or(full);
    while let Some(p) = path.strip_suffix("::{{closure}}") {
        path = p;
    }
    path.strip_prefix("xtask::").unwrap_or(path).to_string()
}

// ---------------------------------------------------------------------------------------------
// Type checking: both emitters rely on it (CUDA spells `max` differently per type), and it
// catches a malformed kernel in `cargo xtask gen` rather than in a driver's compiler.

/// What names mean while checking one function or kernel body.
#[derive(Clone)]
pub struct Scope<'k> {
    kernel: &'k Kernel,
    vars: Vec<BTreeMap<String, Ty>>,
    /// Histograms in scope: their counters' type and how many there are.
    bins: Vec<BTreeMap<String, (Ty, u32)>>,
    ret: Option<Ty>,
}

impl<'k> Scope<'k> {
    pub fn new(kernel: &'k Kernel, args: &[(String, Ty)], ret: Option<Ty>) -> Self {
        let top = args.iter().cloned().collect();
        Scope { kernel, vars: vec![top], bins: vec![BTreeMap::new()], ret }
    }
    pub fn push(&mut self) {
        self.vars.push(BTreeMap::new());
        self.bins.push(BTreeMap::new());
    }
    pub fn pop(&mut self) {
        self.vars.pop();
        self.bins.pop();
    }
    pub fn declare_bins(&mut self, name: &str, ty: Ty, bins: u32) {
        self.bins.last_mut().expect("scope").insert(name.to_string(), (ty, bins));
    }
    /// The counters' type and number of histogram `name`.
    pub fn histogram(&self, name: &str) -> Result<(Ty, u32), String> {
        self.bins
            .iter()
            .rev()
            .find_map(|m| m.get(name).copied())
            .ok_or_else(|| format!("histogram `{name}` is not declared"))
    }
    pub fn declare(&mut self, name: &str, ty: Ty) {
        self.vars.last_mut().expect("scope").insert(name.to_string(), ty);
    }
    pub fn lookup(&self, name: &str) -> Result<Ty, String> {
        self.vars
            .iter()
            .rev()
            .find_map(|m| m.get(name).copied())
            .ok_or_else(|| format!("variable `{name}` is not declared"))
    }
    fn buffer(&self, name: &str) -> Result<&BufferDecl, String> {
        buffer(self.kernel, name).map_err(|_| format!("no buffer `{name}`"))
    }
    fn shared(&self, name: &str) -> Result<&SharedDecl, String> {
        self.kernel.shared.iter().find(|b| b.name == name).ok_or_else(|| format!("no workgroup array `{name}`"))
    }

    pub fn ty_of(&self, e: &Expr) -> Result<Ty, String> {
        let expect = |want: Ty, e: &Expr| -> Result<(), String> {
            let got = self.ty_of(e)?;
            if got == want {
                Ok(())
            } else {
                Err(format!("expected {want:?}, found {got:?} in {e:?}"))
            }
        };
        Ok(match e {
            Expr::Lit(l) => l.ty(),
            Expr::Var(n) => self.lookup(n)?,
            Expr::Param(n) => {
                if !self.kernel.params.iter().any(|p| p == n) {
                    return Err(format!("no parameter `{n}`"));
                }
                Ty::U32
            }
            Expr::Builtin(_) => Ty::U32,
            Expr::Load(buf, idx) | Expr::Settled(buf, idx) => {
                expect(Ty::U32, idx)?;
                self.buffer(buf)?.storage.value_ty()
            }
            Expr::LoadShared(arr, idx) => {
                expect(Ty::U32, idx)?;
                self.shared(arr)?.ty
            }
            Expr::Bin(op, a, b) => {
                let ta = self.ty_of(a)?;
                let tb = self.ty_of(b)?;
                match op {
                    BinOp::Shl | BinOp::Shr => {
                        if tb != Ty::U32 || !matches!(ta, Ty::U32 | Ty::I32 | Ty::U64) {
                            return Err(format!("bad shift operands {ta:?} {tb:?}"));
                        }
                        ta
                    }
                    BinOp::And | BinOp::Or => {
                        if ta != Ty::Bool || tb != Ty::Bool {
                            return Err(format!("logical op on {ta:?} {tb:?}"));
                        }
                        Ty::Bool
                    }
                    _ => {
                        if ta != tb {
                            return Err(format!("operands differ: {ta:?} {op:?} {tb:?} in {e:?}"));
                        }
                        if op.is_comparison() {
                            Ty::Bool
                        } else {
                            ta
                        }
                    }
                }
            }
            Expr::Un(op, a) => {
                let t = self.ty_of(a)?;
                match op {
                    UnOp::Not if t != Ty::Bool => return Err("`!` needs bool".into()),
                    UnOp::Neg if !matches!(t, Ty::F32 | Ty::F64 | Ty::I32) => return Err(format!("negation of {t:?}")),
                    _ => t,
                }
            }
            Expr::Cast(t, a) => {
                self.ty_of(a)?;
                *t
            }
            Expr::Bitcast(t, a) => {
                let from = self.ty_of(a)?;
                if size_of(from) != size_of(*t) {
                    return Err(format!("bitcast {from:?} -> {t:?} changes size"));
                }
                *t
            }
            Expr::Math(m, args) => {
                let n = match m {
                    MathFn::Min | MathFn::Max => 2,
                    MathFn::Fma => 3,
                    MathFn::Floor | MathFn::Abs => 1,
                };
                if args.len() != n {
                    return Err(format!("{m:?} takes {n} arguments"));
                }
                let t = self.ty_of(&args[0])?;
                for a in &args[1..] {
                    expect(t, a)?;
                }
                if matches!(m, MathFn::Fma | MathFn::Floor) && !matches!(t, Ty::F32 | Ty::F64) {
                    return Err(format!("{m:?} of {t:?}"));
                }
                t
            }
            Expr::Intrinsic(op, args) => {
                let (params, result) = op.signature();
                if args.len() != params.len() {
                    return Err(format!("{op:?} takes {} arguments", params.len()));
                }
                for (arg, &ty) in args.iter().zip(params) {
                    expect(ty, arg)?;
                }
                result
            }
            Expr::Select(c, a, b) => {
                expect(Ty::Bool, c)?;
                let t = self.ty_of(a)?;
                expect(t, b)?;
                t
            }
            Expr::Call(name, args) => {
                let func = self
                    .kernel
                    .functions
                    .iter()
                    .find(|f| &f.name == name)
                    .ok_or_else(|| format!("no function `{name}`"))?;
                if func.params.len() != args.len() {
                    return Err(format!("`{name}` takes {} arguments", func.params.len()));
                }
                for ((_, t), a) in func.params.iter().zip(args) {
                    expect(*t, a)?;
                }
                func.ret
            }
            Expr::BinValue(name, i) => {
                let (t, bins) = self.histogram(name)?;
                if *i >= bins {
                    return Err(format!("counter {i} of `{name}`, which has {bins}"));
                }
                t
            }
            Expr::Component(v, i) => {
                expect(Ty::U32x4, v)?;
                if *i > 3 {
                    return Err("component out of range".into());
                }
                Ty::U32
            }
            Expr::MakeU32x4(parts) => {
                for p in parts.iter() {
                    expect(Ty::U32, p)?;
                }
                Ty::U32x4
            }
        })
    }

    pub fn check_block(&mut self, stmts: &[Stmt]) -> Result<(), String> {
        self.push();
        for s in stmts {
            self.check_stmt(s)?;
        }
        self.pop();
        Ok(())
    }

    fn same(&self, want: Ty, e: &Expr) -> Result<(), String> {
        let got = self.ty_of(e)?;
        if got != want {
            return Err(format!("expected {want:?}, found {got:?} in {e:?}"));
        }
        Ok(())
    }

    fn check_stmt(&mut self, s: &Stmt) -> Result<(), String> {
        match s {
            Stmt::Let { name, ty, init } => {
                self.same(*ty, init)?;
                let top = self.vars.last_mut().expect("scope");
                if top.insert(name.clone(), *ty).is_some() {
                    return Err(format!("`{name}` declared twice in one scope"));
                }
            }
            Stmt::Bind { name, ty, value } => {
                self.same(*ty, value)?;
                let top = self.vars.last_mut().expect("scope");
                if top.insert(name.clone(), *ty).is_some() {
                    return Err(format!("`{name}` declared twice in one scope"));
                }
            }
            Stmt::Comment(_) => {}
            Stmt::Assign { name, value } => self.same(self.lookup(name)?, value)?,
            Stmt::Store { buf, index, value } => {
                let decl = self.buffer(buf)?;
                if !decl.writable || decl.storage.is_half() {
                    return Err(format!("buffer `{buf}` is not writable"));
                }
                let t = decl.storage.value_ty();
                self.same(Ty::U32, index)?;
                self.same(t, value)?;
            }
            Stmt::StoreShared { arr, index, value } => {
                let t = self.shared(arr)?.ty;
                self.same(Ty::U32, index)?;
                self.same(t, value)?;
            }
            Stmt::LetBins { name, ty, bins } => {
                if !matches!(ty, Ty::U32 | Ty::U64) || *bins == 0 {
                    return Err(format!("histogram `{name}` of {bins} {ty:?}"));
                }
                let top = self.bins.last_mut().expect("scope");
                if top.insert(name.clone(), (*ty, *bins)).is_some() {
                    return Err(format!("`{name}` declared twice in one scope"));
                }
            }
            Stmt::AddToBin { name, bin, value } => {
                let (t, _) = self.histogram(name)?;
                self.same(Ty::U32, bin)?;
                self.same(t, value)?;
            }
            Stmt::If { cond, then, els } => {
                self.same(Ty::Bool, cond)?;
                self.check_block(then)?;
                self.check_block(els)?;
            }
            Stmt::For { var, from, to, step, body } => {
                self.same(Ty::U32, from)?;
                self.same(Ty::U32, to)?;
                self.same(Ty::U32, step)?;
                self.push();
                self.declare(var, Ty::U32);
                self.check_block(body)?;
                self.pop();
            }
            Stmt::Scope(body) => self.check_block(body)?,
            Stmt::Break | Stmt::Barrier | Stmt::Fence => {}
            Stmt::LastPart { counter, at, merge } => {
                if self.buffer(counter)?.storage != Storage::AtomicU32 {
                    return Err(format!("last part counted on `{counter}`, which is not an atomic buffer"));
                }
                self.same(Ty::U32, at)?;
                for v in ["parts", "part"] {
                    if self.lookup(v)? != Ty::U32 {
                        return Err(format!("last part in a row loop whose `{v}` is not u32"));
                    }
                }
                self.check_block(merge)?;
            }
            Stmt::AtomicAdd { buf, index, value, old } => {
                let shared = self.shared(buf).is_ok_and(|a| a.atomic);
                if !shared && self.buffer(buf)?.storage != Storage::AtomicU32 {
                    return Err(format!("atomic add to `{buf}`, which is not an atomic buffer or workgroup array"));
                }
                self.same(Ty::U32, index)?;
                self.same(Ty::U32, value)?;
                if self.lookup(old)? != Ty::U32 {
                    return Err(format!("`{old}` is not u32"));
                }
            }
            Stmt::Call { name, args, inouts, histograms } => {
                let proc = procedure(self.kernel, name).map_err(|_| format!("no procedure `{name}`"))?;
                if proc.params.len() != args.len()
                    || proc.inouts.len() != inouts.len()
                    || proc.histograms.len() != histograms.len()
                {
                    return Err(format!(
                        "`{name}` takes {} values, {} variables and {} histograms",
                        proc.params.len(),
                        proc.inouts.len(),
                        proc.histograms.len()
                    ));
                }
                for ((_, t, bins), h) in proc.histograms.iter().zip(histograms) {
                    if self.histogram(h)? != (*t, *bins) {
                        return Err(format!("histogram `{h}` is not {bins} {t:?}, as `{name}` takes it"));
                    }
                }
                for ((_, t), a) in proc.params.iter().zip(args) {
                    self.same(*t, a)?;
                }
                for ((_, t), v) in proc.inouts.iter().zip(inouts) {
                    if self.lookup(v)? != *t {
                        return Err(format!("`{v}` is not {t:?}, as `{name}` assigns it"));
                    }
                }
            }
            Stmt::Return(e) => match (e, self.ret) {
                (Some(e), Some(t)) => self.same(t, e)?,
                (None, None) => {}
                _ => return Err("return does not match the function".into()),
            },
            Stmt::Scan { value, out } => {
                self.same(Ty::U32, value)?;
                self.same(self.lookup(out)?, value)?;
            }
            Stmt::SumMany { ty, values, outs } => {
                if !matches!(ty, Ty::U32 | Ty::U64) || values.len() != outs.len() || values.len() > 32 {
                    return Err(format!("sum_many of {} {ty:?} values into {} outputs", values.len(), outs.len()));
                }
                for (v, o) in values.iter().zip(outs) {
                    self.same(*ty, v)?;
                    if self.lookup(o)? != *ty {
                        return Err(format!("`{o}` is not {ty:?}"));
                    }
                }
            }
            Stmt::Reduce { ty, value, out, .. } => {
                if !matches!(ty, Ty::F32 | Ty::F64 | Ty::U32 | Ty::U64) {
                    return Err(format!("reduction over {ty:?}"));
                }
                self.same(*ty, value)?;
                self.same(self.lookup(out)?, value)?;
            }
            Stmt::ArgMax { ty, value, index, out_value, out_index } => {
                if !matches!(ty, Ty::F32 | Ty::F64) {
                    return Err(format!("argmax over {ty:?}"));
                }
                self.same(*ty, value)?;
                self.same(Ty::U32, index)?;
                if self.lookup(out_value)? != *ty || self.lookup(out_index)? != Ty::U32 {
                    return Err("argmax outputs must match the value type and be u32".into());
                }
            }
        }
        Ok(())
    }
}

pub fn size_of(t: Ty) -> u32 {
    match t {
        Ty::Bool | Ty::U32 | Ty::I32 | Ty::F32 => 4,
        Ty::U64 | Ty::F64 => 8,
        Ty::U32x4 => 16,
    }
}

/// Type-checks every helper and the body, so emitters can trust types.
pub fn check(kernel: &Kernel) -> Result<(), IrError> {
    if let Some(b) = kernel.buffers.iter().find(|b| b.storage == Storage::AtomicU32 && !b.writable) {
        return Err(IrError::ty(kernel, format!("atomic buffer `{}` must be writable", b.name)));
    }
    for func in &kernel.functions {
        Scope::new(kernel, &func.params, Some(func.ret))
            .check_block(&func.body)
            .map_err(|e| IrError::ty(kernel, format!("fn {}: {e}", func.name)))?;
    }
    for proc in &kernel.procedures {
        let mut returns = false;
        visit_stmts(&proc.body, &mut |s| returns |= matches!(s, Stmt::Return(_)));
        if returns {
            return Err(IrError::ty(kernel, format!("procedure {} returns", proc.name)));
        }
        proc.scope(kernel)
            .check_block(&proc.body)
            .map_err(|e| IrError::ty(kernel, format!("procedure {}: {e}", proc.name)))?;
    }
    Scope::new(kernel, &[], None).check_block(&kernel.body).map_err(|e| IrError::ty(kernel, e))
}

/// Calls `f` on every statement of `stmts`, through nested blocks.
pub fn visit_stmts<'a>(stmts: &'a [Stmt], f: &mut impl FnMut(&'a Stmt)) {
    for s in stmts {
        f(s);
        for body in stmt_blocks(s) {
            visit_stmts(body, f);
        }
    }
}

/// The kernel body and every procedure's: all the code a kernel runs but its helper functions.
pub fn bodies(kernel: &Kernel) -> impl Iterator<Item = &[Stmt]> {
    std::iter::once(kernel.body.as_slice()).chain(kernel.procedures.iter().map(|p| p.body.as_slice()))
}

/// The distinct value types of a list of reductions: one scratch array each.
pub fn scratch_types(reductions: &[(ReduceOp, Ty)]) -> Vec<Ty> {
    let mut tys: Vec<Ty> = Vec::new();
    for (_, t) in reductions {
        if !tys.contains(t) {
            tys.push(*t);
        }
    }
    tys
}

/// The collectives a body uses, so emitters declare only the scratch memory they need.
#[derive(Default)]
pub struct Collectives {
    /// Each (operation, type) of its reductions.
    pub reduce: Vec<(ReduceOp, Ty)>,
    /// The value types of its argmaxes.
    pub argmax: Vec<Ty>,
    /// Whether it scans.
    pub scan: bool,
    /// Each (type, number of values) of its `SumMany`s.
    pub sums: Vec<(Ty, usize)>,
}

impl Collectives {
    /// Those of the kernel's body and procedures, in the order the body reaches them (a
    /// procedure's where it is first called), so that outlining a block moves none: the emitters
    /// declare the collectives' scratch in this order, and ptxas lays workgroup memory out by it.
    pub fn of(kernel: &Kernel) -> Self {
        let mut c = Collectives::default();
        let mut seen = Vec::new();
        c.visit(kernel, &kernel.body, &mut seen);
        for p in &kernel.procedures {
            c.visit(kernel, &p.body, &mut seen);
        }
        c
    }
    /// The most values one `SumMany` of each type sums: what its scratch must hold.
    pub fn most_summed(&self) -> Vec<(Ty, usize)> {
        let mut out: Vec<(Ty, usize)> = Vec::new();
        for &(t, n) in &self.sums {
            match out.iter_mut().find(|(u, _)| *u == t) {
                Some((_, m)) => *m = (*m).max(n),
                None => out.push((t, n)),
            }
        }
        out
    }
    fn visit(&mut self, kernel: &Kernel, stmts: &[Stmt], seen: &mut Vec<String>) {
        for s in stmts {
            match s {
                Stmt::Reduce { op, ty, .. } => {
                    if !self.reduce.contains(&(*op, *ty)) {
                        self.reduce.push((*op, *ty));
                    }
                }
                Stmt::ArgMax { ty, .. } => {
                    if !self.argmax.contains(ty) {
                        self.argmax.push(*ty);
                    }
                }
                Stmt::Scan { .. } => self.scan = true,
                Stmt::SumMany { ty, values, .. } => {
                    if !self.sums.contains(&(*ty, values.len())) {
                        self.sums.push((*ty, values.len()));
                    }
                }
                Stmt::If { then, els, .. } => {
                    self.visit(kernel, then, seen);
                    self.visit(kernel, els, seen);
                }
                Stmt::For { body, .. } | Stmt::Scope(body) | Stmt::LastPart { merge: body, .. } => {
                    self.visit(kernel, body, seen)
                }
                Stmt::Call { name, .. } => {
                    if let Some(p) = kernel.procedures.iter().find(|p| &p.name == name && !seen.contains(name)) {
                        seen.push(name.clone());
                        self.visit(kernel, &p.body, seen);
                    }
                }
                Stmt::Let { .. }
                | Stmt::Bind { .. }
                | Stmt::Comment(_)
                | Stmt::LetBins { .. }
                | Stmt::AddToBin { .. }
                | Stmt::Assign { .. }
                | Stmt::Store { .. }
                | Stmt::StoreShared { .. }
                | Stmt::Break
                | Stmt::Return(_)
                | Stmt::Barrier
                | Stmt::AtomicAdd { .. }
                | Stmt::Fence => {}
            }
        }
    }
}

/// Whether a kernel declares values of type `ty` (in a buffer, a helper's signature or body, or
/// the kernel's body): what decides the device features it needs (SHADER_F64, SHADER_INT64).
pub fn uses(kernel: &Kernel, ty: Ty) -> bool {
    let wide = |t: Ty| t == ty;
    fn in_stmts(stmts: &[Stmt], wide: &dyn Fn(Ty) -> bool) -> bool {
        stmts.iter().any(|s| match s {
            Stmt::Let { ty, .. }
            | Stmt::Bind { ty, .. }
            | Stmt::LetBins { ty, .. }
            | Stmt::Reduce { ty, .. }
            | Stmt::ArgMax { ty, .. }
            | Stmt::SumMany { ty, .. } => wide(*ty),
            Stmt::If { then, els, .. } => in_stmts(then, wide) || in_stmts(els, wide),
            Stmt::For { body, .. } | Stmt::Scope(body) | Stmt::LastPart { merge: body, .. } => in_stmts(body, wide),
            Stmt::Assign { .. }
            | Stmt::Comment(_)
            | Stmt::AddToBin { .. }
            | Stmt::Store { .. }
            | Stmt::StoreShared { .. }
            | Stmt::Scan { .. }
            | Stmt::Break
            | Stmt::Return(_)
            | Stmt::Barrier
            | Stmt::AtomicAdd { .. }
            | Stmt::Call { .. }
            | Stmt::Fence => false,
        })
    }
    kernel.buffers.iter().any(|b| wide(b.storage.value_ty()))
        || kernel
            .functions
            .iter()
            .any(|f| wide(f.ret) || f.params.iter().any(|(_, t)| wide(*t)) || in_stmts(&f.body, &wide))
        || kernel
            .procedures
            .iter()
            .any(|p| p.params.iter().chain(&p.inouts).any(|(_, t)| wide(*t)) || in_stmts(&p.body, &wide))
        || in_stmts(&kernel.body, &wide)
}

/// Calls `f` on every expression of `stmts`, outermost first, through nested blocks: what the
/// emitters ask to learn which helpers a kernel uses.
pub fn visit_exprs(stmts: &[Stmt], f: &mut impl FnMut(&Expr)) {
    fn expr(e: &Expr, f: &mut impl FnMut(&Expr)) {
        f(e);
        for c in children(e) {
            expr(c, f);
        }
    }
    for s in stmts {
        for e in stmt_exprs(s) {
            expr(e, f);
        }
        for body in stmt_blocks(s) {
            visit_exprs(body, f);
        }
    }
}

/// The direct operands of `e`.
pub fn children(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::Lit(_) | Expr::Var(_) | Expr::Param(_) | Expr::Builtin(_) | Expr::BinValue(..) => vec![],
        Expr::Load(_, i) | Expr::Settled(_, i) | Expr::LoadShared(_, i) => vec![i],
        Expr::Bin(_, a, b) => vec![a, b],
        Expr::Un(_, a) | Expr::Cast(_, a) | Expr::Bitcast(_, a) | Expr::Component(a, _) => vec![a],
        Expr::Math(_, args) | Expr::Intrinsic(_, args) | Expr::Call(_, args) => args.iter().collect(),
        Expr::Select(c, a, b) => vec![c, a, b],
        Expr::MakeU32x4(p) => p.iter().collect(),
    }
}

/// The expressions a statement evaluates itself (not those of its nested blocks).
pub fn stmt_exprs(s: &Stmt) -> Vec<&Expr> {
    match s {
        Stmt::Let { init: e, .. }
        | Stmt::Bind { value: e, .. }
        | Stmt::Assign { value: e, .. }
        | Stmt::If { cond: e, .. }
        | Stmt::Reduce { value: e, .. }
        | Stmt::Scan { value: e, .. }
        | Stmt::Return(Some(e))
        | Stmt::LastPart { at: e, .. } => vec![e],
        Stmt::Store { index, value, .. } | Stmt::StoreShared { index, value, .. } => vec![index, value],
        Stmt::AddToBin { bin, value, .. } | Stmt::AtomicAdd { index: bin, value, .. } => vec![bin, value],
        Stmt::For { from, to, step, .. } => vec![from, to, step],
        Stmt::SumMany { values, .. } | Stmt::Call { args: values, .. } => values.iter().collect(),
        Stmt::ArgMax { value, index, .. } => vec![value, index],
        Stmt::LetBins { .. }
        | Stmt::Comment(_)
        | Stmt::Scope(_)
        | Stmt::Break
        | Stmt::Return(None)
        | Stmt::Barrier
        | Stmt::Fence => vec![],
    }
}

/// The blocks nested in a statement.
pub fn stmt_blocks(s: &Stmt) -> Vec<&[Stmt]> {
    match s {
        Stmt::If { then, els, .. } => vec![then, els],
        Stmt::For { body, .. } | Stmt::Scope(body) | Stmt::LastPart { merge: body, .. } => vec![body],
        _ => vec![],
    }
}

/// The helpers `kernel`'s body calls, directly or through other helpers, in the kernel's order
/// (dependencies first); an error where two helpers share a name and differ.
pub fn used_functions(kernel: &Kernel) -> Result<Vec<&Function>, IrError> {
    let calls = |stmts: &[Stmt]| {
        let mut found = Vec::new();
        visit_exprs(stmts, &mut |e| {
            if let Expr::Call(name, _) = e {
                found.push(name.clone());
            }
        });
        found
    };
    let mut queue = calls(&kernel.body);
    let mut seen: Vec<String> = Vec::new();
    while let Some(name) = queue.pop() {
        if seen.contains(&name) {
            continue;
        }
        let mut same = kernel.functions.iter().filter(|f| f.name == name);
        let func = same.next().ok_or_else(|| IrError::ty(kernel, format!("no function `{name}`")))?;
        if same.any(|g| g != func) {
            return Err(IrError::HelperClash { kernel: kernel.name.clone(), name });
        }
        queue.extend(calls(&func.body));
        seen.push(name);
    }
    let mut out: Vec<&Function> = Vec::new();
    for f in &kernel.functions {
        if seen.contains(&f.name) && !out.iter().any(|g| g.name == f.name) {
            out.push(f);
        }
    }
    Ok(out)
}

/// Whether any expression of `kernel` (its body or a helper's) satisfies `pred`.
pub fn any_expr(kernel: &Kernel, pred: impl Fn(&Expr) -> bool) -> bool {
    let mut found = false;
    for body in bodies(kernel).chain(kernel.functions.iter().map(|f| f.body.as_slice())) {
        visit_exprs(body, &mut |e| found |= pred(e));
    }
    found
}

/// Whether `kernel` reads buffer `buf`.
pub fn reads(kernel: &Kernel, buf: &str) -> bool {
    any_expr(kernel, |e| matches!(e, Expr::Load(b, _) | Expr::Settled(b, _) if b == buf))
}

/// Procedure `name` of `kernel`.
pub fn procedure<'k>(kernel: &'k Kernel, name: &str) -> Result<&'k Procedure, IrError> {
    kernel
        .procedures
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| IrError::ty(kernel, format!("no procedure `{name}`")))
}

/// The declaration of buffer `name` of `kernel`.
pub fn buffer<'k>(kernel: &'k Kernel, name: &str) -> Result<&'k BufferDecl, IrError> {
    kernel.buffers.iter().find(|b| b.name == name).ok_or_else(|| IrError::ty(kernel, format!("no buffer `{name}`")))
}
