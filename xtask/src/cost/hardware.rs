//! The figures the model uses, one table per target, each with where it comes from. Copied into
//! the code (the model reads no file outside the repository), so a change of figure is a change
//! of this file.

use super::sass::Pipe;
use crate::tuning::Target;

/// One figure and its source.
#[derive(Clone, Copy)]
pub struct Figure {
    pub value: f64,
    pub source: &'static str,
}

const fn fig(value: f64, source: &'static str) -> Figure {
    Figure { value, source }
}

/// Where the per-pipe throughputs come from.
const GUIDE: &str = "CUDA C++ Programming Guide, arithmetic instructions: results per clock per SM";
/// Which pipe runs integer multiplies: the FMA pipe, beside FP32, not the ALU that runs the other
/// integer instructions (from sm_70 on; NVIDIA's developer forums, "INT32 and FP64 can be used
/// concurrently in the Volta architecture" for GV100, and "Separate CUDA core pipeline for FP16
/// and FP32" for GA100 and GH100, where the FMA-heavy half of the pipe takes IMAD). So an IMAD
/// takes an FP32 lane's slot, at most half of them on sm_90 (the heavy half), and no ALU slot.
pub const IMAD_SOURCE: &str =
    "CUDA C++ Programming Guide (64 integer multiply-adds per clock per SM) and NVIDIA's developer \
    forums (the FMA pipe runs IMAD, beside FP32, from sm_70 on; on sm_90 its heavy half)";

/// The project's copy of vendor figures (`shared/reference/HARDWARE.md` beside the repository).
const HW: &str = "HARDWARE.md (vendor figures)";

pub struct Hardware {
    pub name: &'static str,
    pub target: Target,
    pub sms: Figure,
    /// SM clock under load, GHz.
    pub clock_ghz: Figure,
    /// What a streaming read reaches from DRAM, GB/s.
    pub dram_gbps: Figure,
    /// What a read of data already in L2 reaches, GB/s.
    pub l2_gbps: Figure,
    /// L2 bytes.
    pub l2_bytes: Figure,
    /// Cycles from issuing a global load to its use when it hits in L2, and when it goes to DRAM.
    pub l2_latency: Figure,
    pub dram_latency: Figure,
    /// Microseconds from one launch to the next in a stream (the cost a launch adds).
    pub launch_us: Figure,
    /// Microseconds a call of one launch costs beyond its work: the launch, the first block's
    /// start and the last block's end as CUDA events see them.
    pub first_launch_us: Figure,
    /// Clocks between a warp's dependent instructions: a warp's own work in an iteration is a
    /// chain (a column's arithmetic behind its load and branch), issued one per this many clocks.
    pub dependent_issue: Figure,
    /// Warp instructions the SM's schedulers issue per clock (4 schedulers, one each).
    pub issue_per_clock: Figure,
    /// Lanes per SM per clock, by pipe (in [`Pipe`] order; `Other` issues at the scheduler's rate).
    pub lanes: [Figure; 12],
}

impl Hardware {
    pub fn lanes(&self, p: Pipe) -> f64 {
        self.lanes[p as usize].value
    }
}

/// Lanes per SM per clock by pipe: the Programming Guide's table, where the targets differ in
/// FP32 and FP64 only; the rest are the same on sm_75 and sm_90. An IMAD also takes an FP32
/// lane (`model.rs`, `issue_cycles`).
const fn lanes(fp32: f64, fp64: f64) -> [Figure; 12] {
    [
        fig(fp32, GUIDE),
        fig(64.0, GUIDE), // INT32 add, compare, shift, logic
        fig(64.0, IMAD_SOURCE),
        fig(16.0, GUIDE), // MUFU
        fig(fp64, GUIDE),
        fig(16.0, GUIDE), // conversions
        fig(32.0, "assumption: L1 returns one 128-byte wavefront per clock (32 lanes of 4 bytes); see model.rs"),
        fig(32.0, "assumption: as loads"),
        fig(32.0, "shared memory: 32 banks of 4 bytes per clock"),
        fig(32.0, GUIDE), // shuffles
        fig(16.0, "assumption: barriers at half the shuffle rate"),
        fig(128.0, "scheduler issue rate (4 x 32 lanes)"),
    ]
}

pub const T4: Hardware = Hardware {
    name: "T4",
    target: Target::Sm75,
    sms: fig(40.0, HW),
    clock_ghz: fig(1.59, HW),
    dram_gbps: fig(320.0 * 0.85, "320 GB/s GDDR6 (HARDWARE.md) x 0.85, the share of nominal a streaming read reaches on the H200 (3.89 / 4.8 TB/s, RRZE gpu-benches); assumed alike"),
    l2_gbps: fig(320.0 * 0.85 * 2.0, "assumption: twice DRAM (no T4 L2 figure in HARDWARE.md)"),
    l2_bytes: fig(4.0e6, HW),
    l2_latency: fig(200.0, "assumption, not checked against a source: about 200 clocks"),
    dram_latency: fig(450.0, "assumption, not checked against a source: about 450 clocks"),
    launch_us: fig(2.5, "H200 figure (RRZE gpu-benches gpu-small-kernels, in a stream), assumed alike"),
    first_launch_us: fig(5.0, "as the H200's"),
    dependent_issue: fig(4.0, "assumption: 4 clocks, the dependent-issue latency of FP32/INT32 reported for Volta and Turing by microbenchmarks (Jia et al. 2018, 2019), taken for Hopper too"),
    issue_per_clock: fig(4.0, HW),
    lanes: lanes(64.0, 2.0),
};

pub const H200: Hardware = Hardware {
    name: "H200",
    target: Target::Sm90,
    sms: fig(132.0, HW),
    clock_ghz: fig(1.98, "HARDWARE.md (read on the lent machine)"),
    dram_gbps: fig(3890.0, "HARDWARE.md: a streaming read reaches about 3.89 TB/s (RRZE gpu-benches); 4.8 TB/s nominal"),
    l2_gbps: fig(7000.0, "assumption: under twice the streaming DRAM read"),
    l2_bytes: fig(50.0e6, HW),
    l2_latency: fig(270.0, "assumption, not checked against a source: about 270 clocks (an H100-class L2 hit)"),
    dram_latency: fig(700.0, "assumption, not checked against a source: about 700 clocks (HBM)"),
    launch_us: fig(2.5, "HARDWARE.md: a small kernel every 2.5 us in a plain stream (RRZE gpu-benches)"),
    first_launch_us: fig(5.0, "assumption: the launch (2.5 us) plus the events' start and end around a call and the grid's ramp, about as much again"),
    dependent_issue: fig(4.0, "assumption: 4 clocks, the dependent-issue latency of FP32/INT32 reported for Volta and Turing by microbenchmarks (Jia et al. 2018, 2019), taken for Hopper too"),
    issue_per_clock: fig(4.0, HW),
    lanes: lanes(128.0, 64.0),
};

pub const TARGETS: [&Hardware; 2] = [&T4, &H200];
