//! Softmax, greedy argmax and the two exponential races, each for f32, f16 and bf16 inputs.
//!
//! Layout shared by every kernel (and by the host code in `src/`):
//! - the input is `batch` rows of `vocab` values, row `r` starting at `r * stride`;
//! - `rows` holds `ROW_WORDS` u32 per row (see [`word`]): temperature (f32 bits), the row's
//!   mode, the filters' four words and two reserved, seed lo, seed hi, offset lo, offset hi;
//! - params are `batch, vocab, stride, flags`; flag bit 0 asks for log-probabilities;
//! - one workgroup per row (rows past the grid are taken in a grid-stride loop), each invocation
//!   taking four consecutive columns per step so one Philox block serves four columns.

use super::math::{self, is_nan};
use super::philox;
use crate::ir::*;

/// The per-row record, in u32 words (`RowParams` on the host; `src/generated.rs` exports these so
/// the host layout is checked against them at compile time).
pub const ROW_WORDS: u32 = 12;
/// Word indices in the row record.
pub mod word {
    pub const TEMPERATURE: u32 = 0;
    /// How the unified `sample_*` kernels treat the row ([`super::MODE_SEEDED`] or the race).
    pub const MODE: u32 = 1;
    /// The filters (see `filters.rs`): top-k count, top-p and min-p (f32 bits), their order.
    pub const TOP_K: u32 = 2;
    pub const TOP_P: u32 = 3;
    pub const MIN_P: u32 = 4;
    pub const ORDER: u32 = 5;
    pub const SEED_LO: u32 = 8;
    pub const SEED_HI: u32 = 9;
    pub const OFFSET_LO: u32 = 10;
    pub const OFFSET_HI: u32 = 11;
}
/// Row mode of SGLang's seeded float64 race; any other value is the Philox race (greedy below
/// [`GREEDY_EPS`]).
pub const MODE_SEEDED: u32 = 1;
pub const PARAMS: [&str; 4] = ["batch", "vocab", "stride", "flags"];
pub const FLAG_LOGPROBS: u32 = 1;
/// Flag bit 1 asks for a status per row: 1 if a token with a valid value was chosen, 0 if the
/// row had none (all NaN or -inf; then the token is 0, inside the vocabulary).
pub const FLAG_STATUS: u32 = 2;
/// Flag bit 2 asks the filter kernels for the number of passes each row took.
pub const FLAG_PASSES: u32 = 4;
/// Flag bit 3: the filter kernels take only the rows with a filter (the per-row sampler's second
/// launch); flag bit 4: the plain sampler leaves those rows to them (its first launch).
pub const FLAG_FILTERED_ONLY: u32 = 8;
pub const FLAG_SKIP_FILTERED: u32 = 16;
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

/// The Philox block of the four columns from `c0`, keyed by the row's seed and offset.
pub(super) fn philox_block(c0: Expr) -> Expr {
    let w = |k| row_word(k);
    philox::block_for(c0, w(word::SEED_LO), w(word::SEED_HI), w(word::OFFSET_LO), w(word::OFFSET_HI))
}

pub(super) fn row_word(k: u32) -> Expr {
    load("rows", var("row") * u(ROW_WORDS) + u(k))
}

/// Declares `temp` (the row's temperature, 1 for greedy rows) and `noisy` (not greedy).
pub(super) fn row_temperature(b: &mut Block) {
    let t = b.let_("t_raw", Ty::F32, row_word(word::TEMPERATURE).bitcast(Ty::F32));
    b.let_("noisy", Ty::Bool, t.clone().ge(f(GREEDY_EPS)));
    b.let_("temp", Ty::F32, select(var("noisy"), t, f(1.0)));
}

/// The input value at `col`, NaN read as -inf so it is never chosen.
pub(super) fn load_clean(col: Expr) -> Expr {
    let x = load("x", var("base") + col);
    select(is_nan(x.clone()), f(f32::NEG_INFINITY), x)
}

/// What the argmax kernels race on.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Race {
    /// `l` for every row.
    Greedy,
    /// `l / T + Gumbel` (greedy rows: `l`).
    Logits,
    /// `p / Exponential` (greedy rows: `p`).
    Probs,
}

/// Writes a sampling kernel's per-row results from invocation 0: the token, and on request its
/// log-probability and its status (`valid`: the row had a value to sample).
pub(super) fn write_results(b: &mut Block, tok: Expr, valid: Expr, logprob: impl FnOnce(&mut Block) -> Expr) {
    let flag = |bit: u32| (param("flags") & u(bit)).ne_(u(0));
    b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| {
        b.store("tokens", var("row"), select(valid.clone(), tok, u(0)));
        b.if_(flag(FLAG_STATUS), |b| b.store("status", var("row"), select(valid.clone(), u(1), u(0))));
    });
    // The log-probability may need collectives, so every invocation takes this (uniform) branch.
    b.if_(flag(FLAG_LOGPROBS), |b| {
        let lp = logprob(b);
        b.if_(builtin(Builtin::LocalId).eq_(u(0)), |b| {
            b.store("logprobs", var("row"), select(valid, lp, f(f32::NEG_INFINITY)));
        });
    });
}

/// The outputs every sampling kernel binds after its inputs.
pub(super) fn output_buffers() -> [BufferDecl; 3] {
    [buffer("tokens", Storage::U32, true), buffer("logprobs", Storage::F32, true), buffer("status", Storage::U32, true)]
}

/// One row of the argmax family (see [`argmax_kernel`]), inside the row loop.
pub(super) fn race_row(b: &mut Block, race: Race) {
    let want_lp = (param("flags") & u(FLAG_LOGPROBS)).ne_(u(0));
    let inf = f(f32::INFINITY);
    let from_logits = race != Race::Probs;
    if race == Race::Greedy {
        b.let_("noisy", Ty::Bool, boolean(false));
        b.let_("temp", Ty::F32, f(1.0));
    } else {
        row_temperature(b);
    }
    b.let_("best", Ty::F32, f(f32::NEG_INFINITY));
    b.let_("best_i", Ty::U32, u(NONE));
    // The top class (+inf scaled values): its own race, on the noise alone.
    b.let_("top", Ty::F32, f(f32::NEG_INFINITY));
    b.let_("top_i", Ty::U32, u(NONE));
    b.let_("top_n", Ty::U32, u(0));
    b.let_("m", Ty::F32, f(f32::NEG_INFINITY));
    b.let_("s", Ty::F32, f(0.0));
    b.let_("w", Ty::U32x4, u32x4(u(0), u(0), u(0), u(0)));
    for_each_column(
        b,
        |b, c0| {
            if race != Race::Greedy {
                b.if_(var("noisy"), |b| {
                    let block = philox_block(c0);
                    b.set("w", block);
                });
            }
        },
        |b, col, j| {
            let x = b.let_("xv", Ty::F32, load_clean(col.clone()));
            let sv = b.let_("sv", Ty::F32, if from_logits { x.clone() / var("temp") } else { x.clone() });
            let score = b.let_("score", Ty::F32, sv.clone());
            let keep = |b: &mut Block, best: &str, best_i: &str, value: Expr| {
                b.if_(value.clone().gt(var(best)).or(var(best_i).eq_(u(NONE))), |b| {
                    b.set(best, value);
                    b.set(best_i, col.clone());
                });
            };
            if race == Race::Probs {
                // Probabilities: negative and infinite values are as invalid as NaN.
                let valid = x.clone().ge(f(0.0)).and(x.clone().lt(inf.clone()));
                b.if_else(
                    valid,
                    |b| {
                        b.if_(var("noisy"), |b| {
                            b.set("score", x.clone() / call(philox::EXPONENTIAL, vec![var("w").comp(j)]));
                        })
                    },
                    |b| b.set("score", f(f32::NEG_INFINITY)),
                );
                keep(b, "best", "best_i", score);
                return;
            }
            let noise = call(philox::GUMBEL, vec![var("w").comp(j)]);
            let noise = if race == Race::Logits { select(var("noisy"), noise, f(0.0)) } else { f(0.0) };
            b.if_else(
                sv.clone().eq_(inf.clone()),
                |b| {
                    b.set("top_n", var("top_n") + u(1));
                    keep(b, "top", "top_i", noise.clone());
                },
                |b| {
                    b.if_(var("noisy"), |b| b.set("score", sv.clone() + noise.clone()));
                    keep(b, "best", "best_i", score.clone());
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
                },
            );
        },
    );
    let (win, tok) = b.argmax(var("best"), var("best_i"), "win", "tok");
    if race == Race::Probs {
        let valid = b.let_("valid", Ty::Bool, win.gt(f(0.0)));
        write_results(b, tok.clone(), valid, |b| {
            let pt = b.let_("pt", Ty::F32, load_clean(tok.clone()));
            select(pt.clone().gt(f(0.0)), call(math::LOG, vec![pt]), f(f32::NEG_INFINITY))
        });
        return;
    }
    let tops = b.reduce(ReduceOp::Sum, Ty::U32, var("top_n"), "tops");
    let valid = b.let_("valid", Ty::Bool, tops.clone().gt(u(0)).or(win.gt(f(f32::NEG_INFINITY))));
    b.if_(tops.clone().gt(u(0)), |b| {
        let (_, top_tok) = b.argmax(var("top"), var("top_i"), "top_win", "top_tok");
        b.set("tok", top_tok);
    });
    write_results(b, tok.clone(), valid, |b| {
        // Top class: uniform over its columns. Else log-softmax from the online sums.
        let mx = b.reduce(ReduceOp::Max, Ty::F32, var("m"), "row_max");
        let mine =
            select(var("m").eq_(f(f32::NEG_INFINITY)), f(0.0), var("s") * call(math::EXP, vec![var("m") - mx.clone()]));
        let total = b.reduce(ReduceOp::Sum, Ty::F32, mine, "row_sum");
        let finite = load_clean(tok.clone()) / var("temp") - mx - call(math::LOG, vec![total]);
        select(tops.clone().gt(u(0)), -call(math::LOG, vec![tops.clone().cast(Ty::F32)]), finite)
    });
}

/// The argmax family: greedy, the race from logits and the race from probabilities. One read of
/// the row; with `FLAG_LOGPROBS`, the chosen token's log-probability from the same read.
///
/// Columns whose scaled value `z = x / T` is +inf form the row's top class: when there are any,
/// the race is among them alone on the noise (greedy: the lowest index), as the softmax's limit
/// puts all the probability there, uniformly. From probabilities, +inf is invalid like NaN.
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
    buffers.extend(output_buffers());
    for_each_row(&mut b, |b| race_row(b, race));

    let mut functions = vec![math::exp()];
    functions.extend(philox::noise_functions());
    let name = match race {
        Race::Probs => name.to_string(),
        _ => format!("{name}_{}", dtype.suffix()),
    };
    kernel(name, doc, 1, buffers, functions, b)
}

/// The scaled input `z = x / T` at `col` (NaN read as -inf; +inf, or an overflow of the
/// division, stays +inf: such columns share the row's whole probability).
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
            let y = b.let_("y", Ty::F32, softmax_weight(scaled(col), mx.clone()) - var("comp"));
            let t = b.let_("t", Ty::F32, var("s") + y.clone());
            b.set("comp", (t.clone() - var("s")) - y);
            b.set("s", t);
        },
    );
    let total = b.reduce(ReduceOp::Sum, Ty::F32, var("s") - var("comp"), "row_sum");
    // A row with no valid value (all -inf) has weight 0 everywhere and probabilities 0.
    let inv = b.let_("inv", Ty::F32, select(total.clone().gt(f(0.0)), f(1.0) / total, f(0.0)));
    (mx, inv)
}

/// The unnormalized softmax weight of `z` in a row whose maximum is `mx`: `exp(z - mx)`, except
/// that when the maximum is +inf every +inf column weighs 1 and every other 0 (the limit of the
/// softmax), and when it is -inf (no valid value) everything weighs 0.
pub(super) fn softmax_weight(z: Expr, mx: Expr) -> Expr {
    let inf = f(f32::INFINITY);
    let finite = select(mx.clone().eq_(f(f32::NEG_INFINITY)), f(0.0), call(math::EXP, vec![z.clone() - mx.clone()]));
    select(mx.eq_(inf.clone()), select(z.eq_(inf), f(1.0), f(0.0)), finite)
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
                let p = softmax_weight(scaled(col.clone()), mx.clone()) * inv.clone();
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
            |b, c0| b.set("w", philox_block(c0)),
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
