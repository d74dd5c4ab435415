//! What every test binary shares: the backends (each made once a process, reported as not run
//! where absent), a seeded generator, and the report `cargo xtask test` prints its table from.

#![allow(dead_code)]

use std::io::Write;
use std::sync::OnceLock;

/// `CI=true`: a wgpu backend that cannot be made fails the run instead of being skipped.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Appends `backend<TAB>outcome<TAB>test<TAB>device` to the run's report.
pub fn report(backend: &str, outcome: &str, test: &str, device: &str) {
    let path = std::env::var("SK_TEST_REPORT")
        .unwrap_or_else(|_| format!("{}/sampling-kernels-report.tsv", env!("CARGO_TARGET_TMPDIR")));
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = f.write_all(format!("{backend}\t{outcome}\t{test}\t{device}\n").as_bytes());
    }
}

/// Runs `check` on the backend if it exists; otherwise records the test as not run.
pub fn on<B: sampling_kernels::Backend>(backend_name: &str, test: &str, backend: Option<&B>, check: impl FnOnce(&B)) {
    match backend {
        Some(b) => {
            check(b);
            report(backend_name, "ran", test, &b.describe());
        }
        None => {
            eprintln!("{backend_name}: not run ({test}): backend absent");
            report(backend_name, "not-run", test, "absent");
        }
    }
}

pub fn cpu() -> Option<&'static sampling_kernels::CpuBackend> {
    Some(&sampling_kernels::CpuBackend)
}

/// Whether `B` is the CPU backend, the oracle's: a statistical check draws its full count there
/// and, on a device, fewer that it then compares token for token with the CPU backend's (so the
/// device's draws follow the distribution the CPU's are checked against).
#[allow(dead_code)]
pub fn is_reference<B: 'static>() -> bool {
    std::any::TypeId::of::<B>() == std::any::TypeId::of::<sampling_kernels::CpuBackend>()
}

#[cfg(feature = "wgpu")]
pub fn wgpu() -> Option<&'static sampling_kernels::WgpuBackend> {
    static B: OnceLock<Option<sampling_kernels::WgpuBackend>> = OnceLock::new();
    B.get_or_init(|| match sampling_kernels::WgpuBackend::new() {
        // Without Mesa's Vulkan driver wgpu finds llvmpipe through OpenGL, which lacks float64:
        // the tests would run, on the wrong device, and fail where lavapipe passes.
        Ok(b) if in_ci() && b.adapter_info().backend != sampling_kernels::wgpu::Backend::Vulkan => {
            panic!(
                "CI=true requires the wgpu backend on lavapipe (Vulkan), not {}",
                sampling_kernels::Backend::describe(&b)
            )
        }
        Ok(b) => Some(b),
        Err(e) if in_ci() => panic!("CI=true requires the wgpu backend (lavapipe): {e}"),
        Err(e) => {
            eprintln!("wgpu backend absent: {e}");
            None
        }
    })
    .as_ref()
}

#[cfg(feature = "cuda")]
pub fn cuda() -> Option<&'static sampling_kernels::CudaBackend> {
    static B: OnceLock<Option<sampling_kernels::CudaBackend>> = OnceLock::new();
    B.get_or_init(|| match sampling_kernels::CudaBackend::new(0) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("cuda backend absent: {e}");
            None
        }
    })
    .as_ref()
}

/// Whether `b` flushes subnormal floats to zero, as WGSL lets an implementation do and NVIDIA's
/// Vulkan driver does: a row of the smallest subnormal sums to zero there (and to 8 of it
/// elsewhere). Tests compare such a device with the oracle run on [`flushed`] inputs.
pub fn flushes_subnormals<B: sampling_kernels::Backend>(b: &B) -> bool {
    use sampling_kernels::{Diagnostics, Logits, Shape};
    let x = b.upload(&[f32::from_bits(1); 8]).unwrap();
    let mut sum = b.zeros::<f32>(1).unwrap();
    b.read_rows(Shape::dense(1, 8), Logits::F32(&x), &mut sum).unwrap();
    b.download(&sum).unwrap()[0] == 0.0
}

/// `x` as a device that flushes subnormals reads it: each subnormal becomes a zero of its sign.
pub fn flushed(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| if v.is_subnormal() { 0.0f32.copysign(v) } else { v }).collect()
}

/// SplitMix64: a small seeded generator, so every test draws the same inputs each run.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// Roughly normal (sum of uniforms), scaled.
    pub fn normal(&mut self, scale: f64) -> f64 {
        ((0..4).map(|_| self.unit()).sum::<f64>() - 2.0) * 1.7320508 * scale
    }
}

/// Pearson's chi-square of observed counts against expected probabilities.
pub fn chi_square(counts: &[u64], probs: &[f64]) -> f64 {
    let n: u64 = counts.iter().sum();
    counts
        .iter()
        .zip(probs)
        .map(|(&o, &p)| {
            let e = p * n as f64;
            (o as f64 - e).powi(2) / e
        })
        .sum()
}

/// Chi-square of homogeneity between two histograms over the same cells.
pub fn chi_square_two_sample(a: &[u64], b: &[u64]) -> f64 {
    let (na, nb) = (a.iter().sum::<u64>() as f64, b.iter().sum::<u64>() as f64);
    a.iter()
        .zip(b)
        .filter(|(x, y)| **x + **y > 0)
        .map(|(&x, &y)| {
            let total = (x + y) as f64;
            let (ea, eb) = (total * na / (na + nb), total * nb / (na + nb));
            (x as f64 - ea).powi(2) / ea + (y as f64 - eb).powi(2) / eb
        })
        .sum()
}

/// The total-variation limit of a statistical check over `draws` draws: 0.01 at 100,000, and
/// growing as `1 / sqrt(draws)` below, as the statistic's expected value does.
#[allow(dead_code)]
pub fn tv_limit(draws: usize) -> f64 {
    0.01 * (100_000.0 / draws as f64).sqrt()
}

/// Total-variation distance between observed frequencies and probabilities.
pub fn total_variation(counts: &[u64], probs: &[f64]) -> f64 {
    let n: u64 = counts.iter().sum();
    0.5 * counts.iter().zip(probs).map(|(&o, &p)| (o as f64 / n as f64 - p).abs()).sum::<f64>()
}

/// One `#[test]` per check in a module named for the backend, each run through [`on`] with the
/// backend `$make` returns (the same checks for every backend, as CubeCL generates them).
#[allow(unused_macros)]
macro_rules! suite {
    ($backend:ident, $make:path, $($check:ident),* $(,)?) => {
        mod $backend {
            $(
                #[test]
                fn $check() {
                    crate::common::on(stringify!($backend), stringify!($check), $make(), crate::$check);
                }
            )*
        }
    };
}

/// The checks on the device backends (wgpu, CUDA), each where its feature is built.
#[allow(unused_macros)]
macro_rules! device_suites {
    ($($check:ident),* $(,)?) => {
        #[cfg(feature = "wgpu")]
        suite!(wgpu, crate::common::wgpu, $($check),*);
        #[cfg(feature = "cuda")]
        suite!(cuda, crate::common::cuda, $($check),*);
    };
}

/// The same checks on every backend, the CPU included.
#[allow(unused_macros)]
macro_rules! every_suite {
    ($($check:ident),* $(,)?) => {
        suite!(cpu, crate::common::cpu, $($check),*);
        device_suites!($($check),*);
    };
}

/// The folder of the golden vectors: `tests/data`, or `SK_GOLDEN_DIR` where the repository is
/// not at hand (the GPU bundle carries the files).
pub fn golden_dir() -> std::path::PathBuf {
    std::env::var_os("SK_GOLDEN_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data"))
}

/// The values of an `.npy` of dtype `descr` (`<f8`, `<f4`) in C order (what numpy's `save`
/// writes), as one little-endian chunk each.
pub fn npy<'a>(file: &'a [u8], descr: &str) -> std::slice::ChunksExact<'a, u8> {
    assert_eq!(&file[..6], b"\x93NUMPY", "not an .npy file");
    let (len_at, len_bytes) = if file[6] == 1 { (8, 2) } else { (8, 4) };
    let header_len = file[len_at..len_at + len_bytes].iter().rev().fold(0usize, |n, &b| n << 8 | b as usize);
    let start = len_at + len_bytes + header_len;
    let header = std::str::from_utf8(&file[len_at + len_bytes..start]).unwrap();
    assert!(header.contains(&format!("'descr': '{descr}'")) && header.contains("'fortran_order': False"), "{header}");
    file[start..].chunks_exact(if descr.ends_with('8') { 8 } else { 4 })
}

/// A wgpu backend on a device of its own, made as an engine would make it, from the descriptor
/// `describe` gives for the default adapter; with the device and queue, for the engine's own
/// buffers. Where wgpu is present.
#[cfg(feature = "wgpu")]
pub fn engine_wgpu(
    describe: impl FnOnce(&sampling_kernels::wgpu::Adapter) -> sampling_kernels::wgpu::DeviceDescriptor<'static>,
) -> Option<(sampling_kernels::WgpuBackend, sampling_kernels::wgpu::Device, sampling_kernels::wgpu::Queue)> {
    use sampling_kernels::wgpu;
    wgpu().map(|_| {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapter = pollster::block_on(instance.request_adapter(&Default::default())).unwrap();
        let (device, queue) = pollster::block_on(adapter.request_device(&describe(&adapter))).unwrap();
        (sampling_kernels::WgpuBackend::from_device(device.clone(), queue.clone(), adapter.get_info()), device, queue)
    })
}

/// A wgpu backend on a device of its own, made with no features and default limits (what a
/// Metal device, or an engine's default device, offers), where wgpu is present.
#[cfg(feature = "wgpu")]
pub fn featureless_wgpu() -> Option<sampling_kernels::WgpuBackend> {
    engine_wgpu(|_| Default::default()).map(|(backend, device, _)| {
        assert!(device.features().is_empty());
        backend
    })
}
