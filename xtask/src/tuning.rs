//! Launch shapes per target, in one table. The emitters print the generic value into the
//! shaders; the CUDA kernels take theirs as `-DSK_BLOCK` at NVRTC time, chosen by the device's
//! compute capability, so one `.cu` serves sm_75 and sm_90.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Any wgpu adapter (lavapipe, Vulkan, Metal, DX12).
    Wgpu,
    /// Tesla T4 (Turing): 40 SMs, 1024 resident threads per SM.
    Sm75,
    /// H100/H200 (Hopper): 132 SMs, 2048 resident threads per SM.
    Sm90,
}

/// What one workgroup of a kernel covers, which picks its row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workgroup {
    /// A row, or a share of one that the launch plan sizes by the block: [`Tuning::block`].
    Fitted,
    /// A fixed part of a row (the one-read path's `PART_COLS` columns), whatever the block:
    /// [`Tuning::part_block`]. Such a workgroup reads a few quads a thread between its first
    /// loads and its last stores, so smaller blocks, more of them resident, hide more of that.
    Part,
}

impl Workgroup {
    /// The word the generated CUDA's header gives it (`// workgroup: ...`), which the cost model
    /// reads back.
    pub fn word(self) -> &'static str {
        match self {
            Workgroup::Fitted => "fitted",
            Workgroup::Part => "part",
        }
    }

    pub fn from_word(word: &str) -> Option<Self> {
        [Workgroup::Fitted, Workgroup::Part].into_iter().find(|w| w.word() == word)
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    pub target: Target,
    /// Invocations per workgroup / threads per block (a power of two, a multiple of 32 on CUDA).
    pub block: u32,
    /// The same for [`Workgroup::Part`] kernels.
    pub part_block: u32,
}

impl Tuning {
    pub fn block_for(&self, workgroup: Workgroup) -> u32 {
        match workgroup {
            Workgroup::Fitted => self.block,
            Workgroup::Part => self.part_block,
        }
    }
}

pub const TABLE: [Tuning; 3] = [
    Tuning { target: Target::Wgpu, block: 256, part_block: 256 },
    // 256 threads: four blocks resident per T4 SM when registers allow (see `cargo xtask ptx-report`).
    Tuning { target: Target::Sm75, block: 256, part_block: 256 },
    // Parts of 4096 columns at 256 threads: four blocks of the filters' parts and cut kernels
    // (64 registers) resident instead of two of 512, each thread four quads instead of two. By the
    // cost model, top-p 0.9 at 256 x 151936: 161.4 -> 142.8 µs; top-k 50: 92.8 -> 68.3; at 128
    // threads top-k gains more (58.1) but top-p at batch 1 loses (10.0 -> 13.1).
    Tuning { target: Target::Sm90, block: 512, part_block: 256 },
];

pub fn get(target: Target) -> Tuning {
    *TABLE.iter().find(|t| t.target == target).expect("every target has a row")
}
