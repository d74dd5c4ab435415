//! The WGSL lowering of the IR's u64 for devices without `SHADER_INT64` (Metal before Apple7,
//! the default device of an engine that asks for no features): a u64 is a `vec2<u32>`, low word
//! first, and each operation WGSL cannot do component-wise (`&`, `|`, `^`, `~`, `select` it
//! can) is a helper below. A GPU's own u64 arithmetic is two 32-bit instructions an add, so the
//! emulated kernels do the same work where it counts.
//!
//! Helpers are written into a module only where its text calls them (with what they call), so
//! a kernel without u64 gets none.

use crate::ir::{BinOp, IrError, Kernel, Lit, MathFn, Ty};

/// The spelling of an emulated u64.
pub const TYPE: &str = "vec2<u32>";

/// A u64 literal as a `vec2<u32>`.
pub fn lit(v: u64) -> String {
    format!("vec2<u32>({}u, {}u)", v as u32, (v >> 32) as u32)
}

/// `a op b` for u64 operands (`b` a u32 for shifts): `Ok(None)` where WGSL's own operator works
/// on the two words (the bitwise ones), an error for what no kernel needs (a remainder).
pub fn bin(op: BinOp, a: &str, b: &str) -> Result<Option<String>, &'static str> {
    let call = |f: &str| Ok(Some(format!("{f}({a}, {b})")));
    match op {
        BinOp::Add => call("sk_add64"),
        BinOp::Sub => call("sk_sub64"),
        BinOp::Mul => call("sk_mul64"),
        BinOp::Div => call("sk_div64"),
        BinOp::Shl => call("sk_shl64"),
        BinOp::Shr => call("sk_shr64"),
        BinOp::Lt => call("sk_lt64"),
        BinOp::Gt => Ok(Some(format!("sk_lt64({b}, {a})"))),
        BinOp::Le => Ok(Some(format!("!sk_lt64({b}, {a})"))),
        BinOp::Ge => Ok(Some(format!("!sk_lt64({a}, {b})"))),
        BinOp::Eq => Ok(Some(format!("all({a} == {b})"))),
        BinOp::Ne => Ok(Some(format!("any({a} != {b})"))),
        BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor => Ok(None),
        BinOp::Rem | BinOp::And | BinOp::Or => Err("a u64 remainder or logical operator held as words"),
    }
}

/// `min`/`max` of two u64.
pub fn math(m: MathFn, args: &[String]) -> Option<String> {
    match (m, args) {
        (MathFn::Min, [a, b]) => Some(format!("select({b}, {a}, sk_lt64({a}, {b}))")),
        (MathFn::Max, [a, b]) => Some(format!("select({a}, {b}, sk_lt64({a}, {b}))")),
        _ => None,
    }
}

/// A cast to or from u64 of `x` (of type `from`): only between u32 and u64, the casts the
/// kernels make (a float reaches u64 through u32).
pub fn cast(kernel: &Kernel, to: Ty, from: Ty, x: &str) -> Result<String, IrError> {
    match (to, from) {
        (Ty::U64, Ty::U64) => Ok(x.to_string()),
        (Ty::U64, Ty::U32) => Ok(format!("vec2<u32>({x}, 0u)")),
        (Ty::U32, Ty::U64) => Ok(format!("({x}).x")),
        _ => Err(IrError::target(kernel, format!("a cast from {from:?} to {to:?} without 64-bit integers"))),
    }
}

/// Whether the lowering can write `lit` (a u64 literal goes through [`lit`]).
pub fn is_u64(l: &Lit) -> Option<u64> {
    match l {
        Lit::U64(v) => Some(*v),
        _ => None,
    }
}

/// Each helper: its name, the helpers it calls, its WGSL.
const HELPERS: [(&str, &[&str], &str); 8] = [
    (
        "sk_lt64",
        &[],
        "fn sk_lt64(a: vec2<u32>, b: vec2<u32>) -> bool {\n    return a.y < b.y || (a.y == b.y && a.x < b.x);\n}",
    ),
    (
        "sk_add64",
        &[],
        "fn sk_add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {\n    let lo = a.x + b.x;\n    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));\n}",
    ),
    (
        "sk_sub64",
        &[],
        "fn sk_sub64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {\n    return vec2<u32>(a.x - b.x, a.y - b.y - select(0u, 1u, a.x < b.x));\n}",
    ),
    (
        "sk_mul64",
        &["sk_mulhi"],
        "fn sk_mul64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {\n    return vec2<u32>(a.x * b.x, sk_mulhi(a.x, b.x) + a.x * b.y + a.y * b.x);\n}",
    ),
    (
        "sk_shl64",
        &[],
        "fn sk_shl64(a: vec2<u32>, n: u32) -> vec2<u32> {\n    if (n == 0u) {\n        return a;\n    }\n    if (n >= 64u) {\n        return vec2<u32>(0u, 0u);\n    }\n    if (n >= 32u) {\n        return vec2<u32>(0u, a.x << (n - 32u));\n    }\n    return vec2<u32>(a.x << n, (a.y << n) | (a.x >> (32u - n)));\n}",
    ),
    (
        "sk_shr64",
        &[],
        "fn sk_shr64(a: vec2<u32>, n: u32) -> vec2<u32> {\n    if (n == 0u) {\n        return a;\n    }\n    if (n >= 64u) {\n        return vec2<u32>(0u, 0u);\n    }\n    if (n >= 32u) {\n        return vec2<u32>(a.y >> (n - 32u), 0u);\n    }\n    return vec2<u32>((a.x >> n) | (a.y << (32u - n)), a.y >> n);\n}",
    ),
    // Long division, a bit a step (the kernels divide a few times a row, never in a loop over
    // columns). A zero divisor gives all ones, as no kernel divides by zero.
    (
        "sk_div64",
        &["sk_lt64", "sk_sub64", "sk_shl64"],
        "fn sk_div64(n: vec2<u32>, d: vec2<u32>) -> vec2<u32> {\n    var q = vec2<u32>(0u, 0u);\n    var r = vec2<u32>(0u, 0u);\n    for (var i: u32 = 64u; i > 0u; i = i - 1u) {\n        let bit = i - 1u;\n        let word = select(n.x, n.y, bit >= 32u);\n        r = sk_shl64(r, 1u) | vec2<u32>((word >> (bit & 31u)) & 1u, 0u);\n        if (!sk_lt64(r, d)) {\n            r = sk_sub64(r, d);\n            q = q | sk_shl64(vec2<u32>(1u, 0u), bit);\n        }\n    }\n    return q;\n}",
    ),
    (
        "sk_mulhi",
        &[],
        "fn sk_mulhi(a: u32, b: u32) -> u32 {\n    let ll = (a & 0xffffu) * (b & 0xffffu);\n    let lh = (a & 0xffffu) * (b >> 16u);\n    let hl = (a >> 16u) * (b & 0xffffu);\n    let hh = (a >> 16u) * (b >> 16u);\n    let mid = (ll >> 16u) + (lh & 0xffffu) + (hl & 0xffffu);\n    return hh + (lh >> 16u) + (hl >> 16u) + (mid >> 16u);\n}",
    ),
];

/// The helpers `text` calls, with those they call, in [`HELPERS`]' order, as WGSL.
pub fn helpers_for(text: &str) -> Vec<&'static str> {
    let mut used: Vec<&str> = HELPERS.iter().map(|h| h.0).filter(|n| text.contains(&format!("{n}("))).collect();
    loop {
        let more: Vec<&str> = HELPERS
            .iter()
            .filter(|h| used.contains(&h.0))
            .flat_map(|h| h.1.iter().copied())
            .filter(|d| !used.contains(d))
            .collect();
        if more.is_empty() {
            break;
        }
        used.extend(more);
    }
    HELPERS.iter().filter(|h| used.contains(&h.0)).map(|h| h.2).collect()
}

#[cfg(test)]
mod tests {
    use super::helpers_for;

    #[test]
    fn helpers_come_with_what_they_call() {
        let got = helpers_for("x = sk_div64(a, b);").join("\n");
        for name in ["fn sk_div64", "fn sk_lt64", "fn sk_sub64", "fn sk_shl64"] {
            assert!(got.contains(name), "{name} missing");
        }
        assert!(!got.contains("fn sk_mul64") && !got.contains("fn sk_mulhi"));
        assert!(helpers_for("no calls").is_empty());
    }
}
