//! The CUDA backend: the generated `.cu` kernels, compiled at run time by NVRTC for the device's
//! architecture (with `-DSK_BLOCK` from the tuning table) and launched through cudarc.
//!
//! cudarc loads libcuda and libnvrtc dynamically: [`CudaBackend::new`] asks whether both are
//! present before any driver call (cudarc panics otherwise) and returns
//! [`Error::Unavailable`] when they are not. NVRTC must not be newer than the driver, which
//! refuses PTX from a newer compiler: put the NVRTC that ships with the driver's CUDA first on the
//! library path.

use crate::backend::{Backend, Job};
use crate::error::{Error, Result};
use crate::kernels::KernelSource;
use crate::launch::{scratch_words, Device, Launch, Split};
use crate::timing::{Clock, LaunchTime};
use crate::types::Element;
use arrayvec::ArrayVec;
use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A CUDA device buffer: cudarc's own slice type, so an engine passes what it already has.
pub type CudaBuffer<T> = CudaSlice<T>;

fn cuda_error(message: impl std::fmt::Display) -> Error {
    Error::Device { backend: "cuda", message: message.to_string() }
}

/// Samples with the generated CUDA kernels on one stream.
pub struct CudaBackend {
    stream: Arc<CudaStream>,
    name: String,
    arch: &'static str,
    block: u32,
    /// Workgroups a launch aims at: the blocks the device holds resident at once.
    target_groups: u32,
    /// The scratch of split and staged launches (see `launch::scratch_words`), grown to the
    /// largest job run so far, behind the lock that keeps one call's launches adjacent on the
    /// stream, so no other call's launches land between a split launch and its combine or
    /// between two stages.
    scratch: Mutex<CudaSlice<u32>>,
    functions: Mutex<HashMap<&'static str, CudaFunction>>,
}

/// Whether libnvrtc can be loaded (it only tries to open the library).
pub fn nvrtc_present() -> bool {
    // SAFETY: this only tries to dlopen the library.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Whether the CUDA driver and NVRTC libraries can be loaded (no driver call is made).
pub fn libraries_present() -> bool {
    // SAFETY: this only tries to dlopen the library.
    nvrtc_present() && unsafe { cudarc::driver::sys::is_culib_present() }
}

/// The virtual architecture NVRTC compiles for, and the block size of the tuning table.
fn target(major: i32) -> (&'static str, u32) {
    match major {
        ..=7 => ("compute_75", crate::generated::CUDA_BLOCK_SM75),
        8 => ("compute_80", crate::generated::CUDA_BLOCK_SM75),
        _ => ("compute_90", crate::generated::CUDA_BLOCK_SM90),
    }
}

/// Compiles one generated kernel to PTX for `arch` with `block` threads per block.
pub fn compile(kernel: &KernelSource, arch: &'static str, block: u32) -> Result<cudarc::nvrtc::Ptx> {
    if !nvrtc_present() {
        return Err(Error::Unavailable("libnvrtc not found on the library path".into()));
    }
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(arch),
        // Keep `a * b + c` two roundings, as the IR and the other backends compute it.
        fmad: Some(false),
        options: vec![format!("-DSK_BLOCK={block}")],
        name: Some(format!("{}.cu", kernel.name)),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(kernel.cuda, opts)
        .map_err(|e| cuda_error(format!("NVRTC {}: {e}", kernel.name)))
}

impl CudaBackend {
    /// Device `ordinal` on its default stream.
    pub fn new(ordinal: usize) -> Result<Self> {
        if !libraries_present() {
            return Err(Error::Unavailable("libcuda or libnvrtc not found on the library path".into()));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| Error::Unavailable(format!("CUDA device {ordinal}: {e}")))?;
        Self::from_stream(ctx.default_stream())
    }

    /// Launches on an engine's own stream.
    pub fn from_stream(stream: Arc<CudaStream>) -> Result<Self> {
        let ctx = stream.context();
        let (major, minor) = ctx.compute_capability().map_err(cuda_error)?;
        let (arch, block) = target(major);
        let name = format!("{} (sm_{major}{minor})", ctx.name().map_err(cuda_error)?);
        let sms = ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(cuda_error)?;
        let per_sm = ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)
            .map_err(cuda_error)?;
        let target_groups = (sms.max(1) as u32) * (per_sm.max(block as i32) as u32 / block);
        let scratch = Mutex::new(stream.alloc_zeros(1).map_err(cuda_error)?);
        let functions = Mutex::default();
        Ok(CudaBackend { stream, name, arch, block, target_groups, scratch, functions })
    }

    /// The stream every launch goes to.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Runs `launches` (calls of this backend) and measures them on the device, for benchmarks:
    /// two CUDA events recorded on the stream around them, so the time spans their work on the
    /// device from the start of the first to the end of the last ([`Clock::Device`]; the events'
    /// resolution is about half a microsecond). Returns once the launches are done. Other work
    /// put on the same stream meanwhile (an engine's) is counted too.
    pub fn time_launches<R>(&self, launches: impl FnOnce(&Self) -> Result<R>) -> Result<(R, LaunchTime)> {
        // Events made without flags do not time; the default flags do.
        let timed = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = self.stream.record_event(timed).map_err(cuda_error)?;
        let out = launches(self)?;
        let end = self.stream.record_event(timed).map_err(cuda_error)?;
        // Waits for both events.
        let ms = start.elapsed_ms(&end).map_err(cuda_error)?;
        Ok((out, LaunchTime { elapsed: std::time::Duration::from_secs_f64(ms as f64 * 1e-3), clock: Clock::Device }))
    }

    fn function(&self, kernel: &'static KernelSource) -> Result<CudaFunction> {
        let mut cache = self.functions.lock().map_err(|_| cuda_error("function cache poisoned"))?;
        if let Some(f) = cache.get(kernel.name) {
            return Ok(f.clone());
        }
        let ptx = compile(kernel, self.arch, self.block)?;
        let module = self.stream.context().load_module(ptx).map_err(cuda_error)?;
        let f = module.load_function(kernel.name).map_err(cuda_error)?;
        cache.insert(kernel.name, f.clone());
        Ok(f)
    }
}

impl Device for CudaBackend {
    type Handle<'a> = u64;
    fn handle<'a, T: Element>(buf: &'a CudaSlice<T>) -> u64 {
        let (ptr, _sync) = buf.device_ptr(buf.stream());
        ptr
    }
}

impl crate::backend::Sealed for CudaBackend {}

impl Backend for CudaBackend {
    type Buffer<T: Element> = CudaSlice<T>;

    fn describe(&self) -> String {
        self.name.clone()
    }
    fn upload_unchecked<T: Element>(&self, data: &[T]) -> Result<CudaSlice<T>> {
        self.stream.clone_htod(data).map_err(cuda_error)
    }
    fn zeros<T: Element>(&self, len: usize) -> Result<CudaSlice<T>> {
        self.stream.alloc_zeros(len.max(1)).map_err(cuda_error)
    }
    fn write_unchecked<T: Element>(&self, buf: &mut CudaSlice<T>, data: &[T]) -> Result<()> {
        self.stream.memcpy_htod(data, &mut buf.slice_mut(0..data.len())).map_err(cuda_error)
    }
    fn download<T: Element>(&self, buf: &CudaSlice<T>) -> Result<Vec<T>> {
        self.stream.clone_dtoh(buf).map_err(cuda_error)
    }
    fn len<T: Element>(buf: &CudaSlice<T>) -> usize {
        buf.len()
    }
    fn run(&self, job: Job<'_, Self>) -> Result<()> {
        let mut scratch = self.scratch.lock().map_err(|_| cuda_error("scratch lock poisoned"))?;
        let need = scratch_words(&job, self.target_groups, self.block, true);
        if scratch.len() < need {
            *scratch = self.stream.alloc_zeros(need).map_err(cuda_error)?;
        }
        let partials = <Self as Device>::handle(&*scratch);
        let split = Split { target_groups: self.target_groups, block: self.block, partials, split_filters: true };
        for launch in Launch::plan(&job, &split)? {
            self.launch(launch)?;
        }
        Ok(())
    }
}

impl CudaBackend {
    /// Launches with the driver's `cuLaunchKernel` and the arguments on the stack: cudarc's
    /// launch builder collects them in vectors, allocations a decode loop would make per launch.
    fn launch(&self, launch: Launch<u64>) -> Result<()> {
        let function = self.function(launch.kernel)?;
        // A null pointer for an output the kernel is told (by its flags) not to write.
        let pointers: ArrayVec<u64, { crate::generated::MAX_BUFFERS }> =
            launch.buffers.iter().map(|h| h.unwrap_or(0)).collect();
        let params = launch.params;
        // The driver reads each argument through a pointer to it: the buffers in binding order,
        // then the four u32 parameters, as the generated signature declares them.
        let mut args: ArrayVec<*mut std::ffi::c_void, { crate::generated::MAX_BUFFERS + 4 }> = pointers
            .iter()
            .map(|p| p as *const u64 as *mut std::ffi::c_void)
            .chain(params.iter().map(|p| p as *const u32 as *mut std::ffi::c_void))
            .collect();
        let grid = launch.work.groups(self.block, i32::MAX as u32);
        self.stream.context().bind_to_thread().map_err(cuda_error)?;
        // SAFETY: the arguments match the generated signature and outlive the call (the driver
        // copies them at launch), and every buffer was checked to cover the shape before this
        // job was built.
        unsafe {
            cudarc::driver::result::launch_kernel(
                function.cu_function(),
                (grid, 1, 1),
                (self.block, 1, 1),
                0,
                self.stream.cu_stream(),
                &mut args,
            )
        }
        .map_err(cuda_error)
    }
}
