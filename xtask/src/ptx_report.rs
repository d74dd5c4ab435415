//! `cargo xtask ptx-report`: every kernel through NVRTC and `ptxas -v` for sm_75 and sm_90, with
//! registers, shared memory, spills and the theoretical occupancy on a T4 and an H200 (per-SM
//! limits from the CUDA C Programming Guide's table of compute capabilities 7.5 and 9.0). Fails if
//! a kernel spills on either target, but for the spills of [`KNOWN_SPILLS`]. Each PTX is assembled
//! as the backend hands it to the oldest driver it supports: with the `.version` of
//! [`ptx_isa::OLDEST_ISA`], which ptxas refuses for an instruction that needs a later ISA.

use crate::tuning::{self, Target};
use crate::{cuda_tools, kernels, ptx_isa};
use std::process::Command;

/// Spills that are known and left (`docs/registers.md`): `seeded_logits` on sm_90 stored the
/// batch size once before its loops (12 bytes stored, 16 loaded, at 40 registers, three blocks of
/// 512 an SM); since its reads apply the bitmask ptxas gives it 50 registers, two blocks, and no
/// spill, left allowed until a GPU run says which to bound. The one-read path's parts, since they race a flat
/// min-p row on chip (`filter_min_p.rs`), store row words (its slot, temperature, filters)
/// before their reads and load them again between their loops, at the 48 registers that five
/// blocks an H200 multiprocessor allow (ptxas takes 80 unbound; 64 spill too). The one-read
/// path's merge on sm_90, at the 128 registers of one block of 512, since its top-p cut tries
/// twice from bounds (`filter_top_p::cut_row`): it stores the row record's addresses once a row
/// and loads them at the start of a phase (a try, a pass of the filter body), in no column loop.
/// The top-p cut from f16 logits, at the 64 registers of four blocks an SM, since its race
/// screens (`filter_top_p::cut_part`): it stores one word (its range's upper edge in `z`) once
/// a part before its loop and loads it after, for the weight below the range.
/// The top-p cut's other inputs, 4 to 8 bytes, since the select's chosen bin and the cut's row
/// state reach every invocation through reductions (WGSL's uniformity rule): kept until the
/// filter redesign replaces the cut; a GPU run has yet to show what they cost.
/// Any other spill, on either target, fails the report: a kernel near its
/// registers tips over with a small change (the top-p parts from probabilities spilled 24 bytes
/// on sm_90 in `8009612`, when only sm_75 was checked).
const KNOWN_SPILLS: &[(&str, &str)] = &[
    ("seeded_logits_f32", "sm_90"),
    ("seeded_logits_bf16", "sm_90"),
    ("top_k_parts_logits_f32", "sm_90"),
    ("top_k_parts_logits_f16", "sm_90"),
    ("top_k_parts_logits_bf16", "sm_90"),
    ("top_k_parts_probs", "sm_90"),
    ("top_k_merge_logits_f32", "sm_90"),
    ("top_k_merge_logits_f16", "sm_90"),
    ("top_k_merge_logits_bf16", "sm_90"),
    ("top_k_merge_probs", "sm_90"),
    ("top_p_cut_logits_f16", "sm_75"),
    ("top_p_cut_logits_f16", "sm_90"),
    ("top_p_cut_logits_f32", "sm_75"),
    ("top_p_cut_logits_f32", "sm_90"),
    ("top_p_cut_logits_bf16", "sm_75"),
    ("top_p_cut_logits_bf16", "sm_90"),
    ("top_p_cut_probs", "sm_75"),
    ("top_p_cut_probs", "sm_90"),
];

pub struct Sm {
    pub target: Target,
    pub arch: &'static str,
    virtual_arch: &'static str,
    /// Registers per SM, resident threads, resident blocks, shared memory per SM.
    regs: u32,
    pub threads: u32,
    blocks: u32,
    smem: u32,
}

pub const SMS: [Sm; 2] = [
    Sm {
        target: Target::Sm75,
        arch: "sm_75",
        virtual_arch: "compute_75",
        regs: 65536,
        threads: 1024,
        blocks: 16,
        smem: 64 * 1024,
    },
    Sm {
        target: Target::Sm90,
        arch: "sm_90",
        virtual_arch: "compute_90",
        regs: 65536,
        threads: 2048,
        blocks: 32,
        smem: 228 * 1024,
    },
];

#[derive(Default, Debug)]
pub struct Usage {
    pub registers: u32,
    pub shared: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
}

/// Reads `ptxas -v` output.
pub fn parse(text: &str) -> Usage {
    let mut u = Usage::default();
    let num_before = |line: &str, key: &str| -> Option<u32> {
        let at = line.find(key)?;
        line[..at].split_whitespace().last()?.parse().ok()
    };
    for line in text.lines() {
        if let Some(r) = num_before(line, "registers") {
            u.registers = r;
        }
        if let Some(s) = num_before(line, "bytes smem") {
            u.shared = s;
        }
        if let Some(s) = num_before(line, "bytes spill stores") {
            u.spill_stores = s;
        }
        if let Some(s) = num_before(line, "bytes spill loads") {
            u.spill_loads = s;
        }
    }
    u
}

/// Float64 arithmetic instructions in the PTX (static count: the four-column loop body is
/// unrolled, so roughly four times the per-column work, plus the row's epilogue).
fn float64_ops(ptx: &str) -> usize {
    let ops = ["add.", "sub.", "mul.", "div.", "fma.", "rcp.", "neg.", "abs.", "min.", "max.", "setp."];
    ptx.lines().map(str::trim).filter(|l| l.contains(".f64") && ops.iter().any(|op| l.starts_with(op))).count()
}

/// Resident blocks per SM and the share of warp slots they fill, limited by registers (allocated
/// per warp in units of 256), threads, blocks and shared memory.
pub fn occupancy(sm: &Sm, block: u32, u: &Usage) -> (u32, f64) {
    let warps = block / 32;
    let regs_per_warp = (u.registers.max(1) * 32).next_multiple_of(256);
    let by_regs = (sm.regs / regs_per_warp) / warps;
    let by_threads = sm.threads / block;
    let by_smem = if u.shared == 0 { sm.blocks } else { sm.smem / u.shared };
    let blocks = by_regs.min(by_threads).min(sm.blocks).min(by_smem);
    (blocks, (blocks * block) as f64 / sm.threads as f64)
}

pub fn run() -> Result<(), String> {
    let tools = cuda_tools::find();
    let ptxas = tools.ptxas().ok_or("ptxas not found: pip install nvidia-cuda-nvcc")?;
    // SAFETY: only tries to dlopen libnvrtc.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err("libnvrtc not found: pip install nvidia-cuda-nvrtc".into());
    }
    let dir = std::env::temp_dir().join("sampling-kernels-ptx");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (major, minor) = ptx_isa::OLDEST_ISA;
    println!("Assembled at PTX ISA {major}.{minor}, the oldest supported driver's.\n");
    println!("| kernel | arch | threads | registers | shared B | spill st/ld B | blocks/SM | occupancy | f64 ops |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut spills = Vec::new();
    // The files `gen` writes, the function files where NVRTC finds the kernels' includes.
    let files = crate::gen::render()?;
    for (path, text) in &files {
        if let Ok(function) = path.strip_prefix("kernels/functions") {
            let path = dir.join("functions").join(function);
            std::fs::create_dir_all(dir.join("functions")).map_err(|e| e.to_string())?;
            std::fs::write(&path, text).map_err(|e| e.to_string())?;
        }
    }
    for k in kernels::all().into_iter().filter(|k| !k.u64_as_words) {
        let path = std::path::PathBuf::from(format!("kernels/{}.cu", k.name));
        let source = &files.iter().find(|(p, _)| *p == path).ok_or(format!("gen wrote no {}", path.display()))?.1;
        for sm in &SMS {
            let block = tuning::get(sm.target).block_for(k.workgroup);
            let opts = cudarc::nvrtc::CompileOptions {
                arch: Some(sm.virtual_arch),
                fmad: Some(false),
                options: vec![format!("-DSK_BLOCK={block}")],
                include_paths: vec![dir.display().to_string()],
                ..Default::default()
            };
            let ptx = cudarc::nvrtc::compile_ptx_with_opts(source, opts).map_err(|e| format!("{}: {e}", k.name))?;
            let path = dir.join(format!("{}_{}.ptx", k.name, sm.arch));
            let src = ptx.to_src();
            let src = ptx_isa::lower_ptx(&src, ptx_isa::OLDEST_ISA).unwrap_or(src);
            std::fs::write(&path, &src).map_err(|e| e.to_string())?;
            let out = Command::new(&ptxas)
                .args(["-arch", sm.arch, "-v", "-o", "/dev/null"])
                .arg(&path)
                .output()
                .map_err(|e| format!("ptxas: {e}"))?;
            if !out.status.success() {
                return Err(format!("ptxas {} {}: {}", k.name, sm.arch, String::from_utf8_lossy(&out.stderr)));
            }
            let usage = parse(&String::from_utf8_lossy(&out.stderr));
            let f64_ops = float64_ops(&src);
            let (blocks, occ) = occupancy(sm, block, &usage);
            println!(
                "| {} | {} | {block} | {} | {} | {}/{} | {blocks} | {:.0}% | {f64_ops} |",
                k.name,
                sm.arch,
                usage.registers,
                usage.shared,
                usage.spill_stores,
                usage.spill_loads,
                occ * 100.0
            );
            let known = KNOWN_SPILLS.iter().any(|&(name, arch)| name == k.name && arch == sm.arch);
            if usage.spill_stores + usage.spill_loads > 0 && !known {
                spills.push(format!("{} ({})", k.name, sm.arch));
            }
        }
    }
    if spills.is_empty() {
        Ok(())
    } else {
        Err(format!("spills in: {}", spills.join(", ")))
    }
}
