//! Finding NVRTC, ptxas, nvcc and cuobjdump without a CUDA install: the `nvidia-cuda-nvrtc`,
//! `nvidia-cuda-nvcc` and `nvidia-cuda-cuobjdump` wheels, `CUDA_HOME`, or `/usr/local/cuda`.

use std::path::PathBuf;
use std::process::Command;

/// Folders holding libnvrtc and ptxas, in the order they are searched.
pub struct Tools {
    pub lib_dirs: Vec<PathBuf>,
    pub bin_dirs: Vec<PathBuf>,
}

fn wheel_root() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args(["-c", "import nvidia, os; print(os.pathsep.join(nvidia.__path__))"])
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    text.trim().split(':').map(PathBuf::from).find(|p| p.exists())
}

pub fn find() -> Tools {
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Some(w) = wheel_root() {
        for v in ["cu13", "cuda_nvrtc", "cuda_nvcc"] {
            roots.push(w.join(v));
        }
    }
    if let Ok(home) = std::env::var("CUDA_HOME") {
        roots.push(PathBuf::from(home));
    }
    roots.push(PathBuf::from("/usr/local/cuda"));
    let keep = |sub: &str| roots.iter().map(|r| r.join(sub)).filter(|p| p.exists()).collect::<Vec<_>>();
    Tools { lib_dirs: [keep("lib"), keep("lib64")].concat(), bin_dirs: keep("bin") }
}

impl Tools {
    /// `LD_LIBRARY_PATH` with the NVRTC folders in front.
    pub fn library_path(&self) -> String {
        let mut parts: Vec<String> = self.lib_dirs.iter().map(|p| p.display().to_string()).collect();
        if let Ok(old) = std::env::var("LD_LIBRARY_PATH") {
            parts.push(old);
        }
        parts.join(":")
    }
    pub fn ptxas(&self) -> Option<PathBuf> {
        self.bin("ptxas")
    }
    /// The first `name` in the tool folders.
    pub fn bin(&self, name: &str) -> Option<PathBuf> {
        self.bin_dirs.iter().map(|d| d.join(name)).find(|p| p.exists())
    }
}

/// Runs this xtask again with NVRTC on the library path (the loader reads it only at start-up).
/// Returns `None` when it already is, so the caller goes on.
pub fn reexec_with_nvrtc() -> Option<std::process::ExitCode> {
    if std::env::var_os("SK_XTASK_REEXEC").is_some() {
        return None;
    }
    let tools = find();
    let status = Command::new(std::env::current_exe().ok()?)
        .args(std::env::args().skip(1))
        .env("LD_LIBRARY_PATH", tools.library_path())
        .env("SK_XTASK_REEXEC", "1")
        .status()
        .ok()?;
    Some(if status.success() { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::FAILURE })
}
