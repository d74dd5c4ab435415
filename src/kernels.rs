//! The generated kernels: their WGSL and CUDA text, and what they bind.

/// One generated kernel: its WGSL and CUDA text and what it binds.
#[derive(Debug)]
pub struct KernelSource {
    /// The entry point (the CUDA function; the WGSL entry point is `main`).
    pub name: &'static str,
    /// The generated WGSL module.
    pub wgsl: &'static str,
    /// The generated CUDA translation unit (compiled with `-DSK_BLOCK=<threads>`).
    pub cuda: &'static str,
    /// Buffer names in binding (argument) order.
    pub buffers: &'static [&'static str],
    /// How many times the kernel reads each element of a row, whatever the data.
    pub passes: u32,
    /// How many launches one call takes: 1, or for a staged kernel one per stage, each with its
    /// stage in its flags.
    pub stages: u32,
    /// Uses float64 (wgpu needs SHADER_F64; Metal has no float64).
    pub needs_f64: bool,
    /// Uses u64 (wgpu needs SHADER_INT64).
    pub needs_int64: bool,
}

/// Every generated kernel.
pub fn all() -> &'static [KernelSource] {
    crate::generated::KERNELS
}

/// The kernel called `name` (every name the crate launches is generated).
pub fn source(name: &str) -> &'static KernelSource {
    crate::generated::KERNELS.iter().find(|k| k.name == name).unwrap_or_else(|| panic!("kernel `{name}` is generated"))
}
