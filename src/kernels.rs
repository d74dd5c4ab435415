//! The generated kernels: their WGSL and CUDA text, and what they bind.

pub use crate::generated::{Binding, KernelId};

/// One generated kernel: its WGSL and CUDA text and what it binds.
#[derive(Debug)]
pub struct KernelSource {
    /// Which kernel this is (its index in [`all`]).
    pub id: KernelId,
    /// The entry point (the CUDA function; the WGSL entry point is `main`).
    pub name: &'static str,
    /// The generated WGSL module.
    pub wgsl: &'static str,
    /// The generated CUDA translation unit (compiled with `-DSK_BLOCK=<threads>`); none for a
    /// kernel only wgpu runs (the portable filter kernels: every CUDA device has float64 and
    /// 64-bit integers).
    pub cuda: Option<&'static str>,
    /// Its storage buffers in binding (argument) order.
    pub bindings: &'static [Binding],
    /// How many times the kernel reads each element of a row, whatever the data.
    pub passes: u32,
    /// How many launches one call takes: 1, or for a staged kernel one per stage, each with its
    /// stage in its flags.
    pub stages: u32,
    /// It splits rows, and its WGSL merges a split row's parts in a second dispatch, the same
    /// launch again with `FLAG_MERGE` (`xtask/src/last_part.rs`): WGSL orders no plain data
    /// between workgroups of one dispatch. CUDA merges in the parts' launch.
    pub merges: bool,
    /// Its workgroup covers a fixed part of a row (the one-read path's parts), however many
    /// threads it has: CUDA builds and launches it with `CUDA_PART_BLOCK_*` threads, not
    /// `CUDA_BLOCK_*` (the same on wgpu).
    pub fixed_part: bool,
    /// Uses float64 (wgpu needs SHADER_F64; Metal has no float64).
    pub needs_f64: bool,
    /// Uses u64 (wgpu needs SHADER_INT64).
    pub needs_int64: bool,
    /// The workgroup memory its WGSL declares, in bytes: what the device's
    /// `max_compute_workgroup_storage_size` must cover for wgpu to build it.
    pub workgroup_bytes: u32,
}

impl KernelSource {
    /// The CUDA translation unit NVRTC compiles: [`KernelSource::cuda`] with each function file
    /// it includes (`#include "functions/sk_exp.cuh"`, written once for every kernel in
    /// `kernels/functions/`) in place of its include line. Built once per compiled kernel.
    pub fn cuda_unit(&self) -> Option<String> {
        let text = self.cuda?;
        let mut unit = String::with_capacity(text.len() * 2);
        for line in text.lines() {
            let included = line
                .strip_prefix("#include \"")
                .and_then(|l| l.strip_suffix('"'))
                .and_then(|path| crate::generated::CUDA_FUNCTIONS.iter().find(|(p, _)| *p == path));
            match included {
                Some((_, function)) => unit.push_str(function),
                None => {
                    unit.push_str(line);
                    unit.push('\n');
                }
            }
        }
        Some(unit)
    }

    /// The binding slot (argument index) of `binding`, if the kernel binds it.
    pub fn slot(&self, binding: Binding) -> Option<usize> {
        self.bindings.iter().position(|b| *b == binding)
    }
}

impl KernelId {
    /// The generated source of this kernel.
    pub fn source(self) -> &'static KernelSource {
        &crate::generated::KERNELS[self as usize]
    }
}

/// Every generated kernel, in [`KernelId`] order.
pub fn all() -> &'static [KernelSource] {
    crate::generated::KERNELS
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `KernelId::source` indexes the table: each entry must sit at its id's index, and the
    /// binding names must be the buffers the generated code declares, in its order: the CUDA
    /// arguments, and the WGSL `@binding(i)` of slot `i`.
    #[test]
    fn each_id_finds_its_own_kernel_and_its_bindings_are_declared_in_order() {
        for (i, k) in all().iter().enumerate() {
            assert_eq!(k.id as usize, i, "{}", k.name);
            assert_eq!(k.id.source().name, k.name);
            let mut after = 0;
            for (slot, b) in k.bindings.iter().enumerate() {
                if let Some(cuda) = k.cuda {
                    let at = cuda.find(&format!("* __restrict__ {},", b.name()));
                    assert!(at.is_some_and(|at| at > after), "{}: `{}` out of place in the CUDA", k.name, b.name());
                    after = at.unwrap_or(0);
                }
                let wgsl = format!("@binding({slot}) var<storage, ");
                let line = k.wgsl.lines().find(|l| l.contains(&wgsl)).unwrap_or("");
                assert!(line.contains(&format!("> {}: array<", b.name())), "{}: `{}` in the WGSL", k.name, b.name());
            }
        }
    }
}
