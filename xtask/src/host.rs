//! Rust for the host from IR that decides something about a row from its record alone: the
//! kernels' own rule, lowered once more, so the host's row lists follow it without a copy
//! written by hand (`src/generated.rs`, [`crate::kernels::filter_top_k::route`]).
//!
//! Only what such a rule needs is lowered: declarations, comments, the record's words (`rows`),
//! parameters, and arithmetic, comparisons, casts and selects on scalars. Anything else is an
//! error naming the statement, found when `gen` runs.

use crate::ir::{BinOp, Expr, Kernel, Lit, MathFn, Scope, Stmt, Ty, UnOp};

/// A Rust function `name(rows: &[u32; ROW_WORDS], params...) -> [bool; N]` that runs the
/// kernel's body on a record and returns the booleans `returns` names, in order; `row` is the
/// record's place, 0.
pub fn function(kernel: &Kernel, name: &str, returns: &[&str]) -> Result<String, String> {
    let mut scope = Scope::new(kernel, &[], None);
    scope.push();
    let params: Vec<String> = kernel.params.iter().map(|p| format!(", {p}: u32")).collect();
    let mut out = format!("/// {}\n", kernel.doc.replace('\n', "\n/// "));
    out += &format!(
        "#[allow(unused_variables, unused_parens, clippy::all)]\npub(crate) fn {name}(rows: &[u32; ROW_WORDS]{}) -> [bool; {}] {{\n",
        params.concat(),
        returns.len()
    );
    for s in &kernel.body {
        out += &format!("    {}\n", stmt(&mut scope, s)?);
    }
    for r in returns {
        if scope.lookup(r)? != Ty::Bool {
            return Err(format!("`{r}` is not a bool"));
        }
    }
    out += &format!("    [{}]\n}}\n", returns.join(", "));
    Ok(out)
}

fn stmt(scope: &mut Scope, s: &Stmt) -> Result<String, String> {
    match s {
        Stmt::Comment(c) => Ok(format!("// {c}")),
        Stmt::Let { name, ty, init: value } | Stmt::Bind { name, ty, value } => {
            let v = expr(scope, value)?;
            scope.declare(name, *ty);
            Ok(format!("let {name}: {} = {v};", rust_ty(*ty)?))
        }
        other => Err(format!("the host lowering has no {other:?}")),
    }
}

fn rust_ty(t: Ty) -> Result<&'static str, String> {
    match t {
        Ty::Bool => Ok("bool"),
        Ty::U32 => Ok("u32"),
        Ty::I32 => Ok("i32"),
        Ty::U64 => Ok("u64"),
        Ty::F32 => Ok("f32"),
        Ty::F64 => Ok("f64"),
        Ty::U32x4 => Err("the host lowering has no U32x4".into()),
    }
}

fn expr(scope: &Scope, e: &Expr) -> Result<String, String> {
    let sub = |e: &Expr| expr(scope, e);
    Ok(match e {
        Expr::Lit(l) => lit(*l),
        Expr::Var(n) | Expr::Param(n) => {
            scope.ty_of(e)?;
            n.clone()
        }
        Expr::Load(buf, index) if buf == "rows" => format!("rows[({}) as usize]", sub(index)?),
        Expr::Bin(op, a, b) => {
            let float = matches!(scope.ty_of(a)?, Ty::F32 | Ty::F64);
            let symbol = match op {
                // Wrapping, as every target's integers are.
                BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Shl | BinOp::Shr if !float => {
                    let method = match op {
                        BinOp::Add => "wrapping_add",
                        BinOp::Sub => "wrapping_sub",
                        BinOp::Mul => "wrapping_mul",
                        BinOp::Shl => "wrapping_shl",
                        _ => "wrapping_shr",
                    };
                    return Ok(format!("({}).{method}({})", sub(a)?, sub(b)?));
                }
                BinOp::And => "&&",
                BinOp::Or => "||",
                op => op.symbol(),
            };
            format!("({} {symbol} {})", sub(a)?, sub(b)?)
        }
        Expr::Un(op, a) => {
            let symbol = match op {
                UnOp::Neg => "-",
                UnOp::Not | UnOp::BitNot => "!",
            };
            format!("({symbol}{})", sub(a)?)
        }
        Expr::Cast(t, a) => format!("(({}) as {})", sub(a)?, rust_ty(*t)?),
        Expr::Bitcast(t, a) => match (scope.ty_of(a)?, *t) {
            (Ty::U32, Ty::F32) | (Ty::U64, Ty::F64) => format!("{}::from_bits({})", rust_ty(*t)?, sub(a)?),
            (Ty::F32 | Ty::F64, _) => format!("({}).to_bits() as {}", sub(a)?, rust_ty(*t)?),
            (_, t) => format!("(({}) as {})", sub(a)?, rust_ty(t)?),
        },
        Expr::Select(c, a, b) => format!("(if {} {{ {} }} else {{ {} }})", sub(c)?, sub(a)?, sub(b)?),
        Expr::Math(MathFn::Min | MathFn::Max, args) if args.len() == 2 => {
            let method = if matches!(e, Expr::Math(MathFn::Min, _)) { "min" } else { "max" };
            format!("({}).{method}({})", sub(&args[0])?, sub(&args[1])?)
        }
        other => return Err(format!("the host lowering has no {other:?}")),
    })
}

fn lit(l: Lit) -> String {
    match l {
        Lit::Bool(b) => b.to_string(),
        Lit::U32(v) => format!("{v}u32"),
        Lit::I32(v) => format!("({v}i32)"),
        Lit::U64(v) => format!("{v}u64"),
        Lit::F32(v) if v.is_finite() => format!("({v:?}f32)"),
        Lit::F32(v) => format!("f32::from_bits({:#x})", v.to_bits()),
        Lit::F64(v) if v.is_finite() => format!("({v:?}f64)"),
        Lit::F64(v) => format!("f64::from_bits({:#x})", v.to_bits()),
    }
}
