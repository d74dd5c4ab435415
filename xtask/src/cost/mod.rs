//! `cargo xtask cost`: a cost model of the generated CUDA kernels on a T4 (sm_75) and an H200
//! (sm_90), built from their SASS, so kernel changes can be judged without a GPU. Every figure
//! it prints is modelled, never measured.
//!
//! - `cargo xtask cost`: compile every `kernels/*.cu` for both targets, count the streaming loops,
//!   print the kernel and call tables, write `bench-results/model/cost.csv`.
//! - `--kernels DIR`: the kernels of another folder (an older commit's, extracted with `git archive`).
//! - `--calibrate`: model the calls of the 2026-11-30 H200 run (`bench-results/h200/cuda.csv`)
//!   with the launch plan of f09f138, the commit it measured, beside the measured figures; writes
//!   `bench-results/model/calibration-h200.csv`. Use it with that commit's kernels.
//! - `--check`: fail when a kernel cannot be compiled or parsed, or has no streaming loop; write nothing.

mod compile;
mod hardware;
mod model;
mod plan;
mod report;
mod sass;

use crate::cuda_tools;
use crate::ptx_report::{self, SMS};
use crate::tuning::{self, Workgroup};
use hardware::Hardware;
use model::{Kernel, OnChipWork};
use std::path::{Path, PathBuf};

/// Bytes of one column of what a kernel's streaming loops read, from its name.
fn element_bytes(name: &str) -> f64 {
    if name.ends_with("_f64") {
        8.0
    } else if name.ends_with("_bf16") || name.ends_with("_f16") {
        2.0
    } else {
        4.0
    }
}

/// The value of the kernel header's line `// {key}: value`.
fn header(source: &str, key: &str) -> Option<String> {
    let prefix = format!("// {key}: ");
    source.lines().take(8).find_map(|l| Some(l.strip_prefix(&prefix)?.trim().to_string()))
}

/// The kernel header's `passes over each row: N`.
fn header_passes(source: &str) -> Option<u32> {
    header(source, "passes over each row")?.parse().ok()
}

/// The kernel header's `workgroup: ...`; a fitted one where an older kernel has no such line.
fn header_workgroup(source: &str) -> Workgroup {
    header(source, "workgroup").and_then(|w| Workgroup::from_word(&w)).unwrap_or(Workgroup::Fitted)
}

/// Every kernel of `dir` compiled and counted for `hw`.
struct Counted {
    hw: &'static Hardware,
    kernels: Vec<Kernel>,
}

fn count_all(dir: &Path, compiler: &compile::Compiler, check: &mut Vec<String>) -> Result<Vec<Counted>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cu"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("no .cu kernels in {}", dir.display()));
    }
    let sources: Vec<String> = files.iter().map(|f| std::fs::read_to_string(f).unwrap_or_default()).collect();
    let workgroups: Vec<Workgroup> = sources.iter().map(|s| header_workgroup(s)).collect();
    let mut out = Vec::new();
    for hw in hardware::TARGETS {
        let sm = SMS.iter().find(|s| s.target == hw.target).expect("both targets have an SM row");
        let tuning = tuning::get(hw.target);
        // Each kernel with its block; two compilers at once: the machines this runs on have two cores.
        let work: Vec<(&PathBuf, u32)> =
            files.iter().zip(&workgroups).map(|(f, &w)| (f, tuning.block_for(w))).collect();
        let jobs: Vec<Result<compile::Compiled, String>> = std::thread::scope(|s| {
            let chunks: Vec<&[(&PathBuf, u32)]> = work.chunks(work.len().div_ceil(2)).collect();
            let handles: Vec<_> = chunks
                .into_iter()
                .map(|c| {
                    s.spawn(move || c.iter().map(|&(f, block)| compiler.compile(f, sm, block)).collect::<Vec<_>>())
                })
                .collect();
            handles.into_iter().flat_map(|h| h.join().expect("compile thread")).collect()
        });
        let mut kernels = Vec::new();
        for ((&(file, block), job), source) in work.iter().zip(jobs).zip(&sources) {
            let name = file.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
            let compiled = match job {
                Ok(c) => c,
                Err(e) => {
                    check.push(e);
                    continue;
                }
            };
            let functions = sass::parse(&compiled.sass);
            let Some(f) = functions.iter().find(|f| f.name == name) else {
                check.push(format!("{name} {}: no function `{name}` in its SASS", sm.arch));
                continue;
            };
            let loops = f.streaming_loops();
            let passes = header_passes(source).unwrap_or(0);
            if passes > 0 && loops.is_empty() {
                check
                    .push(format!("{name} {}: no streaming loop found (a backward branch over global loads)", sm.arch));
            }
            let rule = model::rare_loops(&name).filter(|&(read, _, _)| passes as usize <= read);
            if let Some((_, least, _)) = rule.filter(|&(_, least, _)| loops.len() < least) {
                check.push(format!(
                    "{name} {}: {} streaming loops, where the model's rare-loop rule expects at least {least}",
                    sm.arch,
                    loops.len()
                ));
            }
            let onchip = f.onchip_loops();
            if model::select_rule(&name).is_some() {
                if !model::after_read(&loops, &onchip, OnChipWork::Select).iter().any(|l| l.pass.is_some()) {
                    check.push(format!(
                        "{name} {}: no select round found after its read (a key loop over workgroup memory inside a \
                         loop with a barrier)",
                        sm.arch
                    ));
                }
                if model::after_read(&loops, &onchip, OnChipWork::Histogram).is_empty() {
                    check.push(format!("{name} {}: no histogram loop found after a top-p part's read", sm.arch));
                }
                if model::after_read(&loops, &onchip, OnChipWork::Race).is_empty() {
                    check.push(format!("{name} {}: no race loop found after a min-p part's read", sm.arch));
                }
            }
            let (resident, occupancy) = ptx_report::occupancy(sm, block, &compiled.usage);
            kernels.push(Kernel {
                elem: element_bytes(&name),
                onchip,
                name,
                loops,
                registers: compiled.usage.registers,
                shared: compiled.usage.shared,
                block,
                resident,
                occupancy,
            });
        }
        out.push(Counted { hw, kernels });
    }
    Ok(out)
}

pub fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1));
    let dir = value("--kernels").map_or(root.join("kernels"), PathBuf::from);
    let check = args.iter().any(|a| a == "--check");
    let calibrate = args.iter().any(|a| a == "--calibrate");
    let compiler = compile::Compiler::new(&cuda_tools::find(), root.join("target").join("cost"))?;
    let mut problems = Vec::new();
    let counted = count_all(&dir, &compiler, &mut problems)?;
    if !problems.is_empty() {
        return Err(format!("cost model: {} problem(s):\n{}", problems.len(), problems.join("\n")));
    }
    if check {
        let n: usize = counted.iter().map(|c| c.kernels.len()).sum();
        println!(
            "cost --check: {n} kernel builds parsed, every row kernel's streaming loop, every select's round, histogram and race found"
        );
        return Ok(());
    }
    let out = root.join("bench-results").join("model");
    std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    report::hardware(&counted);
    report::kernels(&counted);
    if calibrate {
        let measured = root.join("bench-results").join("h200").join("cuda.csv");
        let h200 = counted.iter().find(|c| c.hw.name == "H200").expect("H200 is a target");
        report::calibration(h200.hw, &h200.kernels, &measured, &out.join("calibration-h200.csv"))
    } else {
        report::calls(&counted, &out.join("cost.csv"))
    }
}
