//! Softmax, greedy argmax and the two exponential races, each for f32, f16 and bf16 inputs.
//!
//! Layout shared by every kernel (and by the host code in `src/`):
//! - the input is `batch` rows of `vocab` values, row `r` starting at `r * stride`;
//! - `rows` holds `ROW_WORDS` u32 per row: temperature (f32 bits), top_k, top_p (f32 bits),
//!   min_p (f32 bits), seed lo, seed hi, offset lo, offset hi;
//! - params are `batch, vocab, stride, flags`; flag bit 0 asks for log-probabilities;
//! - one workgroup per row (rows past the grid are taken in a grid-stride loop), each invocation
//!   taking four consecutive columns per step so one Philox block serves four columns.

use super::math::{self, is_nan};
use super::philox;
use crate::ir::*;

pub const ROW_WORDS: u32 = 8;
pub const PARAMS: [&str; 4] = ["batch", "vocab", "stride", "flags"];
pub const FLAG_LOGPROBS: u32 = 1;
/// Temperatures below this are greedy (SGLang's `_SAMPLING_EPS`).
pub const GREEDY_EPS: f32 = 1e-6;
const NONE: u32 = u32::MAX;

/// Element formats of an input row.
#[derive(Clone, Copy, Debug)]
pub enum Dtype {
    F32,
    F16,
    Bf16,
}

impl Dtype {
    pub const ALL: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::Bf16];
    pub fn suffix(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
        }
    }
    pub(super) fn storage(self) -> Storage {
        match self {
            Dtype::F32 => Storage::F32,
            Dtype::F16 => Storage::F16,
            Dtype::Bf16 => Storage::Bf16,
        }
    }
}

pub(super) fn buffer(name: &str, storage: Storage, writable: bool) -> BufferDecl {
    BufferDecl { name: name.to_string(), storage, writable }
}

pub(super) fn kernel(
    name: String,
    doc: &str,
    passes: u32,
    buffers: Vec<BufferDecl>,
    functions: Vec<Function>,
    body: Block,
) -> Kernel {
    Kernel {
        name,
        doc: doc.to_string(),
        passes,
        buffers,
        params: PARAMS.iter().map(|p| p.to_string()).collect(),
        shared: vec![],
        functions,
        body: body.stmts,
    }
}

/// The row loop: one workgroup per row, grid-stride over rows.
pub(super) fn for_each_row(b: &mut Block, body: impl FnOnce(&mut Block)) {
    b.for_("row", builtin(Builtin::GroupId), param("batch"), builtin(Builtin::NumGroups), |b, row| {
        b.let_("base", Ty::U32, row * param("stride"));
        body(b);
    });
}

/// Visits this invocation's columns in increasing order, four consecutive ones per step:
/// `per_quad` runs once per step (with `c0`, the first column), then `per_col` for each of the
/// four columns inside the row, with the column and its place (0..4) in the quad.
pub(super) fn for_each_column(
    b: &mut Block,
    per_quad: impl Fn(&mut Block, Expr),
    per_col: impl Fn(&mut Block, Expr, u8),
) {
    let first = builtin(Builtin::LocalId) * u(4);
    let step = builtin(Builtin::BlockSize) * u(4);
    b.for_("c0", first, param("vocab"), step, |b, c0| {
        per_quad(b, c0.clone());
        for j in 0..4u8 {
            b.scope(|b| {
                let col = b.let_("col", Ty::U32, c0.clone() + u(j as u32));
                b.if_(col.clone().lt(param("vocab")), |b| per_col(b, col, j));
            });
        }
    });
}

pub(super) fn row_word(k: u32) -> Expr {
    load("rows", var("row") * u(ROW_WORDS) + u(k))
}

/// Declares `temp` (the row's temperature, 1 for greedy rows) and `noisy` (not greedy).
pub(super) fn row_temperature(b: &mut Block) {
    let t = b.let_("t_raw", Ty::F32, row_word(0).bitcast(Ty::F32));
    b.let_("noisy", Ty::Bool, t.clone().ge(f(GREEDY_EPS)));
    b.let_("temp", Ty::F32, select(var("noisy"), t, f(1.0)));
}

/// The input value at `col`, NaN read as -inf so it is never chosen.
fn load_clean(col: Expr) -> Expr {
    let x = load("x", var("base") + col);
    select(is_nan(x.clone()), f(f32::NEG_INFINITY), x)
}

/// What the argmax kernels race on.
#[derive(Clone, Copy, PartialEq)]
enum Race {
    /// `l` for every row.
    Greedy,
    /// `l / T + Gumbel` (greedy rows: `l`).
    Logits,
    /// `p / Exponential` (greedy rows: `p`).
    Probs,
}

/// The argmax family: greedy, the race from logits and the race from probabilities. One read of
/// the row; with `FLAG_LOGPROBS`, the chosen token's log-probability from the same read.
fn argmax_kernel(race: Race, dtype: Dtype) -> Kernel {
    let (name, doc) = match race {
        Race::Greedy => ("greedy", "argmax of the logits, lowest index on ties; log-softmax at T = 1 on request"),
        Race::Logits => ("race_logits", "argmax of l/T + Gumbel noise from Philox (fused: no probabilities written)"),
        Race::Probs => ("race_probs", "argmax of p / Exponential noise from Philox (SGLang v0.5.20's rule)"),
    };
    let mut b = Block::new();
    let mut buffers = vec![buffer("x", dtype.storage(), false)];
    if race != Race::Greedy {
        buffers.push(buffer("rows", Storage::U32, false));
    }
    buffers.push(buffer("tokens", Storage::U32, true));
    buffers.push(buffer("logprobs", Storage::F32, true));
    let want_lp = (param("flags") & u(FLAG_LOGPROBS)).ne_(u(0));
    // Online log-sum-exp is only needed from logits; from probabilities the log-probability is
    // log p of the winner.
    let online_lse = race != Race::Probs;

    for_each_row(&mut b, |b| {
        if race == Race::Greedy {
            b.let_("noisy", Ty::Bool, boolean(false));
            b.let_("temp", Ty::F32, f(1.0));
        } else {
            row_temperature(b);
        }
        b.let_("best", Ty::F32, f(f32::NEG_INFINITY));
        b.let_("best_i", Ty::U32, u(NONE));
        b.let_("m", Ty::F32, f(f32::NEG_INFINITY));
        b.let_("s", Ty::F32, f(0.0));
        b.let_("w", Ty::U32x4, u32x4(u(0), u(0), u(0), u(0)));
        for_each_column(
            b,
            |b, c0| {
                if race != Race::Greedy {
                    b.if_(var("noisy"), |b| {
                        let block = philox::block_for(c0, row_word(4), row_word(5), row_word(6), row_word(7));
                        b.set("w", block);
                    });
                }
            },
            |b, col, j| {
                let x = b.let_("xv", Ty::F32, load_clean(col.clone()));
                // Scaled logit (the log-softmax's argument; greedy rows have T = 1) and race score.
                let scaled = if race == Race::Probs { x.clone() } else { x.clone() / var("temp") };
                let sv = b.let_("sv", Ty::F32, scaled);
                let score = b.let_("score", Ty::F32, sv.clone());
                if race == Race::Probs {
                    // Probabilities: negative values are as invalid as NaN.
                    b.if_(x.clone().lt(f(0.0)), |b| b.set("score", f(f32::NEG_INFINITY)));
                    b.if_(var("noisy").and(x.clone().ge(f(0.0))), |b| {
                        b.set("score", x.clone() / call(philox::EXPONENTIAL, vec![var("w").comp(j)]));
                    });
                } else if race == Race::Logits {
                    b.if_(var("noisy"), |b| {
                        b.set("score", sv.clone() + call(philox::GUMBEL, vec![var("w").comp(j)]));
                    });
                }
                b.if_(score.clone().gt(var("best")).or(var("best_i").eq_(u(NONE))), |b| {
                    b.set("best", score);
                    b.set("best_i", col);
                });
                if online_lse {
                    b.if_(want_lp.clone(), |b| {
                        b.if_else(
                            sv.clone().gt(var("m")),
                            |b| {
                                let rescale = call(math::EXP, vec![var("m") - sv.clone()]);
                                b.set("s", var("s") * rescale + f(1.0));
                                b.set("m", sv.clone());
                            },
                            |b| {
                                b.if_(sv.clone().gt(f(f32::NEG_INFINITY)), |b| {
                                    b.set("s", var("s") + call(math::EXP, vec![sv.clone() - var("m")]));
                                })
                            },
                        );
                    });
                }
            },
        );
        let (_, tok) = b.argmax(var("best"), var("best_i"), "win", "tok");
        b.if_(want_lp.clone(), |b| {
            if online_lse {
                let mx = b.reduce(ReduceOp::Max, Ty::F32, var("m"), "row_max");
                let mine = select(
                    var("m").eq_(f(f32::NEG_INFINITY)),
                    f(0.0),
                    var("s") * call(math::EXP, vec![var("m") - mx.clone()]),
                );
                let total = b.reduce(ReduceOp::Sum, Ty::F32, mine, "row_sum");
                b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| {
                    let xt = load_clean(tok.clone());
                    b.store("logprobs", var("row"), xt / var("temp") - mx - call(math::LOG, vec![total]));
                });
            } else {
                b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| {
                    let pt = b.let_("pt", Ty::F32, load_clean(tok.clone()));
                    let lp = select(pt.clone().gt(f(0.0)), call(math::LOG, vec![pt]), f(f32::NEG_INFINITY));
                    b.store("logprobs", var("row"), lp);
                });
            }
        });
        b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| b.store("tokens", var("row"), tok));
    });

    let mut functions = vec![math::exp()];
    functions.extend(philox::noise_functions());
    let name = match race {
        Race::Probs => name.to_string(),
        _ => format!("{name}_{}", dtype.suffix()),
    };
    kernel(name, doc, 1, buffers, functions, b)
}

/// Softmax of `l / T` per row into `probs` (same stride as the input). Three reads: the maximum,
/// a compensated sum of exponentials, then the normalized write.
/// The scaled input `x / T` at `col` (NaN read as -inf).
pub(super) fn scaled(col: Expr) -> Expr {
    load_clean(col) / var("temp")
}

/// The row's softmax statistics in two reads: the maximum of `x / T`, then `1 / sum exp(x/T - max)`
/// with a compensated (Kahan) sum per invocation. Returns (max, 1 / sum).
pub(super) fn softmax_stats(b: &mut Block) -> (Expr, Expr) {
    b.let_("m", Ty::F32, f(f32::NEG_INFINITY));
    for_each_column(b, |_, _| {}, |b, col, _| b.set("m", var("m").max(scaled(col))));
    let mx = b.reduce(ReduceOp::Max, Ty::F32, var("m"), "row_max");
    b.let_("s", Ty::F32, f(0.0));
    b.let_("comp", Ty::F32, f(0.0));
    for_each_column(
        b,
        |_, _| {},
        |b, col, _| {
            let y = b.let_("y", Ty::F32, call(math::EXP, vec![scaled(col) - mx.clone()]) - var("comp"));
            let t = b.let_("t", Ty::F32, var("s") + y.clone());
            b.set("comp", (t.clone() - var("s")) - y);
            b.set("s", t);
        },
    );
    let total = b.reduce(ReduceOp::Sum, Ty::F32, var("s") - var("comp"), "row_sum");
    let inv = b.let_("inv", Ty::F32, f(1.0) / total);
    (mx, inv)
}

/// Softmax of `l / T` per row into `probs` (same stride as the input). Three reads: the maximum,
/// a compensated sum of exponentials, then the normalized write.
fn softmax_kernel(dtype: Dtype) -> Kernel {
    let mut b = Block::new();
    for_each_row(&mut b, |b| {
        row_temperature(b);
        let (mx, inv) = softmax_stats(b);
        for_each_column(
            b,
            |_, _| {},
            |b, col, _| {
                let p = call(math::EXP, vec![scaled(col.clone()) - mx.clone()]) * inv.clone();
                b.store("probs", var("base") + col, p);
            },
        );
    });
    let buffers = vec![
        buffer("x", dtype.storage(), false),
        buffer("rows", Storage::U32, false),
        buffer("probs", Storage::F32, true),
    ];
    let doc = "softmax of l/T per row (greedy rows at T = 1), written with the input's stride";
    kernel(format!("softmax_{}", dtype.suffix()), doc, 3, buffers, vec![math::exp()], b)
}

/// A grid-stride loop over `batch` independent items (for the per-item diagnostic kernels).
pub(super) fn for_each_item(b: &mut Block, body: impl FnOnce(&mut Block, Expr)) {
    let first = builtin(Builtin::GroupId) * builtin(Builtin::BlockSize) + builtin(Builtin::LocalId);
    let step = builtin(Builtin::NumGroups) * builtin(Builtin::BlockSize);
    b.for_("item", first, param("batch"), step, body);
}

/// Diagnostic: Philox4x32-10 on `batch` (counter, key) items of six words, four words out each.
/// It lets the tests check Random123's known answers on every backend.
fn philox_kernel() -> Kernel {
    let mut b = Block::new();
    for_each_item(&mut b, |b, item| {
        let word = |k: u32| load("input", item.clone() * u(6) + u(k));
        let ctr = u32x4(word(0), word(1), word(2), word(3));
        let out = b.let_("out", Ty::U32x4, call(philox::PHILOX, vec![ctr, word(4), word(5)]));
        for k in 0..4u8 {
            b.store("output", item.clone() * u(4) + u(k as u32), out.clone().comp(k));
        }
    });
    let buffers = vec![buffer("input", Storage::U32, false), buffer("output", Storage::U32, true)];
    kernel(
        "philox4x32_10".into(),
        "Philox4x32-10 blocks, for known-answer tests",
        0,
        buffers,
        vec![philox::philox()],
        b,
    )
}

/// Diagnostic: the Gumbel noise each row's race adds, written densely (`vocab` per row).
fn noise_kernel() -> Kernel {
    let mut b = Block::new();
    for_each_row(&mut b, |b| {
        b.let_("w", Ty::U32x4, u32x4(u(0), u(0), u(0), u(0)));
        for_each_column(
            b,
            |b, c0| b.set("w", philox::block_for(c0, row_word(4), row_word(5), row_word(6), row_word(7))),
            |b, col, j| {
                b.store("noise", var("row") * param("vocab") + col, call(philox::GUMBEL, vec![var("w").comp(j)]));
            },
        );
    });
    let buffers = vec![buffer("rows", Storage::U32, false), buffer("noise", Storage::F32, true)];
    kernel(
        "gumbel_noise".into(),
        "the race's Gumbel noise per row and column, for tests",
        0,
        buffers,
        philox::noise_functions(),
        b,
    )
}

/// Every kernel of this family.
pub fn all() -> Vec<Kernel> {
    let mut out = Vec::new();
    for d in Dtype::ALL {
        out.push(softmax_kernel(d));
    }
    for d in Dtype::ALL {
        out.push(argmax_kernel(Race::Greedy, d));
    }
    for d in Dtype::ALL {
        out.push(argmax_kernel(Race::Logits, d));
    }
    out.push(argmax_kernel(Race::Probs, Dtype::F32));
    out.push(philox_kernel());
    out.push(noise_kernel());
    out
}
