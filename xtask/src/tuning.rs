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

#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    pub target: Target,
    /// Invocations per workgroup / threads per block (a power of two, a multiple of 32 on CUDA).
    pub block: u32,
}

pub const TABLE: [Tuning; 3] = [
    Tuning { target: Target::Wgpu, block: 256 },
    // 256 threads: four blocks resident per T4 SM when registers allow (see `cargo xtask ptx-report`).
    Tuning { target: Target::Sm75, block: 256 },
    Tuning { target: Target::Sm90, block: 512 },
];

pub fn get(target: Target) -> Tuning {
    *TABLE.iter().find(|t| t.target == target).expect("every target has a row")
}
