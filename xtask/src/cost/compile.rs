//! A generated `.cu` to SASS with nvcc and cuobjdump, as the CUDA backend builds it (no fused
//! multiply-add, `-DSK_BLOCK` from the tuning table, by the kernel's workgroup), with ptxas'
//! register and shared-memory report. Results are cached under `target/cost/` by a hash of the
//! source and the flags.

use crate::cuda_tools::Tools;
use crate::ptx_report::{self, Sm, Usage};
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The tools, found once.
pub struct Compiler {
    nvcc: PathBuf,
    cuobjdump: PathBuf,
    cache: PathBuf,
}

/// One kernel compiled for one target.
pub struct Compiled {
    pub sass: String,
    pub usage: Usage,
}

impl Compiler {
    pub fn new(tools: &Tools, cache: PathBuf) -> Result<Self, String> {
        let need = |name: &str, wheel: &str| tools.bin(name).ok_or(format!("{name} not found: pip install {wheel}"));
        let nvcc = need("nvcc", "\"nvidia-cuda-nvcc==13.*\"")?;
        let cuobjdump = need("cuobjdump", "\"nvidia-cuda-cuobjdump==13.*\"")?;
        // cuobjdump -sass runs nvdisasm from beside it, a wheel of its own.
        need("nvdisasm", "\"nvidia-cuda-nvdisasm==13.*\"")?;
        std::fs::create_dir_all(&cache).map_err(|e| format!("{}: {e}", cache.display()))?;
        Ok(Compiler { nvcc, cuobjdump, cache })
    }

    /// `source` (the `.cu` file) for `sm` with `block` threads per block.
    pub fn compile(&self, source: &Path, sm: &Sm, block: u32) -> Result<Compiled, String> {
        let flags = ["-cubin", &format!("-arch={}", sm.arch), "-fmad=false", &format!("-DSK_BLOCK={block}"), "-w"];
        let text = std::fs::read_to_string(source).map_err(|e| format!("{}: {e}", source.display()))?;
        let mut h = DefaultHasher::new();
        (&text, &flags).hash(&mut h);
        // The function files beside it, which it includes, are part of what it compiles.
        let functions = source.with_file_name("functions");
        let mut included: Vec<PathBuf> =
            std::fs::read_dir(&functions).into_iter().flatten().flatten().map(|e| e.path()).collect();
        included.sort();
        for path in included {
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?.hash(&mut h);
        }
        let stem =
            format!("{}-{}-{:016x}", source.file_stem().and_then(|s| s.to_str()).unwrap_or("k"), sm.arch, h.finish());
        let (sass_path, ptxas_path) =
            (self.cache.join(format!("{stem}.sass")), self.cache.join(format!("{stem}.ptxas")));
        if let (Ok(sass), Ok(report)) = (std::fs::read_to_string(&sass_path), std::fs::read_to_string(&ptxas_path)) {
            return Ok(Compiled { sass, usage: ptx_report::parse(&report) });
        }
        let cubin = self.cache.join(format!("{stem}.cubin"));
        let out = Command::new(&self.nvcc)
            .args(flags)
            .args(["-Xptxas", "-v", "-o"])
            .arg(&cubin)
            .arg(source)
            .output()
            .map_err(|e| format!("nvcc: {e}"))?;
        let report = String::from_utf8_lossy(&out.stderr).to_string();
        if !out.status.success() {
            return Err(format!("nvcc {} {}: {report}", source.display(), sm.arch));
        }
        let dump =
            Command::new(&self.cuobjdump).arg("-sass").arg(&cubin).output().map_err(|e| format!("cuobjdump: {e}"))?;
        if !dump.status.success() {
            return Err(format!("cuobjdump {}: {}", cubin.display(), String::from_utf8_lossy(&dump.stderr)));
        }
        let sass = String::from_utf8_lossy(&dump.stdout).to_string();
        std::fs::write(&sass_path, &sass)
            .and_then(|_| std::fs::write(&ptxas_path, &report))
            .map_err(|e| e.to_string())?;
        let _ = std::fs::remove_file(&cubin);
        Ok(Compiled { sass, usage: ptx_report::parse(&report) })
    }
}
