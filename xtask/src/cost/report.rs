//! The cost model's tables and CSVs: per kernel (its loops counted), per call at a shape
//! (modelled on both targets), and the calibration against the one H200 run.

use super::hardware::Hardware;
use super::model::{self, Bound, Cache, Kernel};
use super::plan::{self, Call, Era, Shape};
use super::sass::{Counts, PIPES};
use super::Counted;
use crate::ptx_report::SMS;
use crate::tuning;
use std::fmt::Write as _;
use std::path::Path;

/// One call modelled at one shape.
struct Row {
    launches: usize,
    read: f64,
    written: f64,
    /// Instructions per column (all passes) of the launch that costs most, and its kernel.
    per_column: Counts,
    main: String,
    occupancy: f64,
    /// SMs the main launch gives work to.
    busy_sms: u32,
    us: f64,
    bound: Bound,
    /// The same call with L2 flushed before it (the benchmark's cold cells).
    cold_us: f64,
    /// Instructions per column of its parts launch's on-chip work (0 without one).
    onchip: f64,
}

fn modelled(hw: &Hardware, kernels: &[Kernel], call: Call, shape: Shape, era: Era) -> Result<Row, String> {
    let sm = SMS.iter().find(|s| s.target == hw.target).expect("both targets have an SM row");
    // The plan splits rows by the fitted kernels' block; the part kernels' grids do not depend on it.
    let block = tuning::get(hw.target).block;
    let target_groups = hw.sms.value as u32 * (sm.threads / block);
    let stages = 19; // filter_split: the maximum, 16 digit passes, the race, the combine
    let launches = plan::launches(call, shape, era, (target_groups, block, hw.sms.value as u32), stages);
    let find = |name: &str| kernels.iter().find(|k| k.name == name).ok_or(format!("kernel {name} not in the folder"));
    // A launch whose column work is another kernel's loop runs it in its own kernel's blocks,
    // under that kernel's rules for its loops (which are rare, which rows race).
    let runs: Vec<Kernel> = launches
        .iter()
        .map(|l| {
            let own = find(&l.kernel)?;
            let run = match &l.loops_of {
                Some(body) => {
                    let body = find(body)?;
                    Kernel { loops: body.loops.clone(), name: body.name.clone(), ..own.clone() }
                }
                None => own.clone(),
            };
            // Flat rows: the loop that races the kept columns races nearly all of them.
            Ok(if l.flat { run.of_flat_rows() } else { run })
        })
        .collect::<Result<_, String>>()?;
    let pairs: Vec<(plan::Launch, &Kernel)> = launches.iter().cloned().zip(&runs).collect();
    let input = shape.batch as f64 * shape.vocab as f64 * shape.elem as f64;
    let (us, bound, each) = model::call(hw, &pairs, input, Cache::Warm);
    let (cold_us, _, _) = model::call(hw, &pairs, input, Cache::Cold);
    let (main, busy_sms) = pairs
        .iter()
        .zip(&each)
        .max_by(|a, b| a.1.us.total_cmp(&b.1.us))
        .map(|(p, m)| (&p.0, m.busy_sms))
        .expect("a call has a launch");
    let passes: u32 = pairs.iter().filter(|(l, _)| l.kernel == main.kernel).map(|(l, _)| l.passes).sum();
    let onchip =
        pairs.iter().map(|(l, k)| k.onchip_per_column(l.onchip, l.columns as f64 / k.block as f64).total()).sum();
    Ok(Row {
        launches: pairs.len(),
        read: launches.iter().map(|l| l.read).sum(),
        written: launches.iter().map(|l| l.written).sum(),
        per_column: main_kernel(&pairs, &main.kernel).per_column(passes.max(1)),
        main: main.kernel.clone(),
        occupancy: main_kernel(&pairs, &main.kernel).occupancy,
        busy_sms,
        us,
        bound,
        cold_us,
        onchip,
    })
}

fn main_kernel<'a>(pairs: &[(plan::Launch, &'a Kernel)], name: &str) -> &'a Kernel {
    pairs.iter().find(|(l, _)| l.kernel == name).map(|(_, k)| *k).expect("the main launch is among them")
}

fn pipes_header() -> String {
    PIPES.iter().map(|p| p.name()).collect::<Vec<_>>().join(",")
}

fn pipes_csv(c: &Counts) -> String {
    c.by_pipe.iter().map(|v| format!("{v:.2}")).collect::<Vec<_>>().join(",")
}

/// The hardware table, each figure with its source.
pub fn hardware(counted: &[Counted]) {
    println!("Hardware figures (modelled targets)");
    println!("| figure | target | value | source |");
    println!("|---|---|---|---|");
    for c in counted {
        let hw = c.hw;
        let rows = [
            ("SMs", hw.sms),
            ("SM clock, GHz", hw.clock_ghz),
            ("DRAM streaming read, GB/s", hw.dram_gbps),
            ("L2 read, GB/s", hw.l2_gbps),
            ("L2 bytes", hw.l2_bytes),
            ("L2 hit latency, clocks", hw.l2_latency),
            ("DRAM latency, clocks", hw.dram_latency),
            ("launch interval, µs", hw.launch_us),
            ("a call's first launch, µs", hw.first_launch_us),
            ("dependent issue, clocks", hw.dependent_issue),
            ("warp instructions issued per clock", hw.issue_per_clock),
        ];
        let lanes = PIPES.iter().map(|&p| (p.name(), hw.lanes[p as usize]));
        for (name, f) in rows.into_iter().chain(lanes) {
            println!("| {name} | {} | {} | {} |", hw.name, f.value, f.source);
        }
    }
}

/// The loops of every kernel: per column, by pipe, on its common path and off it.
pub fn kernels(counted: &[Counted]) {
    println!("Kernels: streaming loops counted from SASS, per column (per thread), by pipe");
    println!(
        "| kernel | target | registers | shared B | blocks/SM | occupancy | loops (costliest) | per column, costliest loop ({}) | round trips per column | off the common path, per column | rate (kept share) |",
        pipes_header()
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for c in counted {
        for k in &c.kernels {
            let hot = k.per_column(1);
            let rare = k
                .loops
                .iter()
                .map(|l| l.rare().scaled(1.0 / (l.common.load_bytes / k.elem).max(1.0)).total())
                .fold(0.0, f64::max);
            let range = k.hot_loop().map_or(String::new(), |l| format!(" ({:#x}-{:#x})", l.start, l.end));
            let kept = k.loops.iter().any(|l| l.kept.is_some()).then(|| model::kept_share(&k.name).0);
            let rate = kept.map_or(format!("{}", model::rare_rate(&k.name).0), |share| {
                format!("{} ({share})", model::rare_rate(&k.name).0)
            });
            println!(
                "| {} | {} | {} | {} | {} | {:.0}% | {}{range} | {:.1} ({}) | {:.2} | {rare:.1} | {rate} |",
                k.name,
                c.hw.name,
                k.registers,
                k.shared,
                k.resident,
                k.occupancy * 100.0,
                k.loops.len(),
                hot.total(),
                pipes_csv(&hot),
                hot.round_trips,
            );
        }
    }
}

/// The grid of the kernels benchmark's full run (`benches/kernels.rs`), so that a GPU run finds
/// a modelled figure beside each measured cell; the table printed keeps the issue's shapes.
const BATCHES: [u32; 5] = [1, 8, 32, 64, 256];
const VOCABS: [u32; 3] = [32768, 128256, 151936];
const PRINTED: ([u32; 3], u32) = ([1, 32, 256], 151936);

/// Every call at 1, 32 and 256 x 151936, f32 and bf16, on both targets: printed and written.
pub fn calls(counted: &[Counted], csv: &Path) -> Result<(), String> {
    let mut out = format!(
        "call,dtype,batch,vocab,target,launches,bytes_read,bytes_written,main_kernel,{},occupancy,busy_sms,modelled_us,bound,modelled_cold_us,onchip_per_col\n",
        PIPES.iter().map(|p| format!("per_col_{}", p.name())).collect::<Vec<_>>().join(",")
    );
    println!("\nCalls, modelled (not measured): the launches of today's host plan");
    println!("| call | shape | target | launches | MB moved | instr/column, all passes (main kernel) | occupancy | SMs busy | modelled µs, warm | cold | bound by (warm) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for call in Call::all() {
        for &(dtype, elem) in call.dtypes() {
            let cells = VOCABS.iter().flat_map(|&vocab| BATCHES.map(|batch| (batch, vocab)));
            for ((batch, vocab), c) in cells.flat_map(|cell| counted.iter().map(move |c| (cell, c))) {
                let shape = Shape { batch, vocab, elem, dtype };
                let r = modelled(c.hw, &c.kernels, call, shape, Era::Current)?;
                if PRINTED.0.contains(&batch) && PRINTED.1 == vocab {
                    println!(
                        "| {} | {batch} x {vocab} {dtype} | {} | {} | {:.1} | {:.1} ({}) | {:.0}% | {} | {:.1} | {:.1} | {} |",
                        call.name(),
                        c.hw.name,
                        r.launches,
                        (r.read + r.written) / 1e6,
                        r.per_column.total(),
                        r.main,
                        r.occupancy * 100.0,
                        r.busy_sms,
                        r.us,
                        r.cold_us,
                        r.bound.name()
                    );
                }
                writeln!(
                    out,
                    "{},{dtype},{batch},{vocab},{},{},{:.0},{:.0},{},{},{:.3},{},{:.2},{},{:.2},{:.1}",
                    call.name(),
                    c.hw.name,
                    r.launches,
                    r.read,
                    r.written,
                    r.main,
                    pipes_csv(&r.per_column),
                    r.occupancy,
                    r.busy_sms,
                    r.us,
                    r.bound.name(),
                    r.cold_us,
                    r.onchip
                )
                .expect("writing to a string");
            }
        }
    }
    std::fs::write(csv, out).map_err(|e| format!("{}: {e}", csv.display()))?;
    println!("\nwrote {}", csv.display());
    Ok(())
}

/// The columns of a measured cell the calibration reads from the benchmark's CSV (by name: the
/// others are left out).
#[derive(serde::Deserialize)]
struct Measured {
    kernel: String,
    dtype: String,
    rows: String,
    batch: u32,
    vocab: u32,
    median_us: f64,
}

/// Modelled beside measured for every cell of the H200 run, with the launch plan of f09f138.
pub fn calibration(hw: &Hardware, kernels: &[Kernel], measured: &Path, csv: &Path) -> Result<(), String> {
    let mut reader = csv::Reader::from_path(measured).map_err(|e| format!("{}: {e}", measured.display()))?;
    let mut out = String::from("call,dtype,rows,batch,vocab,measured_us,modelled_us,error,bound\n");
    let mut errors = Vec::new();
    let mut by_call: Vec<(String, Vec<f64>)> = Vec::new();
    for cell in reader.deserialize() {
        let Measured { kernel, dtype: measured_dtype, rows, batch, vocab, median_us } =
            cell.map_err(|e| format!("{}: {e}", measured.display()))?;
        let Some(call) = Call::from_name(&kernel) else { continue };
        let elem = if measured_dtype == "bf16" { 2 } else { 4 };
        let dtype = if elem == 2 { "bf16" } else { "f32" };
        let r = modelled(hw, kernels, call, Shape { batch, vocab, elem, dtype }, Era::F09f138)?;
        let error = r.us / median_us - 1.0;
        errors.push(error.abs());
        match by_call.iter_mut().find(|(n, _)| n == call.name()) {
            Some((_, v)) => v.push(error),
            None => by_call.push((call.name().to_string(), vec![error])),
        }
        writeln!(
            out,
            "{},{},{},{batch},{vocab},{median_us:.3},{:.3},{error:.4},{}",
            call.name(),
            measured_dtype,
            rows,
            r.us,
            r.bound.name()
        )
        .expect("writing to a string");
    }
    std::fs::write(csv, out).map_err(|e| format!("{}: {e}", csv.display()))?;
    errors.sort_by(f64::total_cmp);
    let median = errors.get(errors.len() / 2).copied().unwrap_or(f64::NAN);
    let worst = errors.last().copied().unwrap_or(f64::NAN);
    println!("\nCalibration against the 2026-11-30 H200 run ({} cells; modelled / measured - 1)", errors.len());
    println!("| call | cells | median error | worst error |");
    println!("|---|---|---|---|");
    for (name, mut v) in by_call {
        v.sort_by(|a, b| a.abs().total_cmp(&b.abs()));
        println!(
            "| {name} | {} | {:+.0}% | {:+.0}% |",
            v.len(),
            v[v.len() / 2] * 100.0,
            v.last().copied().unwrap_or(0.0) * 100.0
        );
    }
    println!("\nmedian |error| {:.1}%, worst {:.1}%; wrote {}", median * 100.0, worst * 100.0, csv.display());
    Ok(())
}
