//! The CUDA backend: the generated `.cu` kernels, compiled at run time by NVRTC for the device's
//! architecture (with `-DSK_BLOCK` from the tuning table) and launched through cudarc.
//!
//! cudarc's linking mode and bindings are the engine's build's choice (see the `cuda` feature):
//! nothing here depends on either. [`CudaBackend::new`] asks whether libcuda and libnvrtc load
//! before any driver call (cudarc loading them dynamically panics otherwise) and returns
//! [`Error::Unavailable`] when they do not. cudarc resolves each driver symbol when it is first
//! called, so a driver older than the bindings works for every call this backend makes; the one
//! entry point that newer bindings rename (`cuEventElapsedTime_v2`, CUDA 12.8, for benchmarks'
//! timing) is called by whichever name the driver has. NVRTC writes PTX of its own release's ISA,
//! which an older driver refuses: the backend writes the driver's ISA in the PTX instead
//! ([`ptx_isa`]), so NVRTC 13 serves a CUDA 12.0 driver and newer
//! ([`Error::CudaDriverTooOld`] below that).
//!
//! A `sample` call's seeded and filter launches touch none of the rows its plain launch samples,
//! so they run on a second stream of the backend's own, forked from the caller's stream before
//! the plain launch is queued and joined back before the call returns (`SideStream`). A batch
//! of plain rows with one top-p row then lasts about as long as the plain launch or the top-p
//! row's three dependent launches, whichever is longer, not their sum. The side stream is made
//! with the driver's calls, not as a cudarc stream, so cudarc's per-buffer event tracking (on
//! in a context with several cudarc streams) stays as the engine set it.

mod alias;
mod driver;
mod side_stream;
mod staging;

use alias::{check_raw, same_context, Aliased};
pub use alias::{CudaAlias, CudaAliasMut};
use driver::{driver_isa, driver_version, elapsed_ms, nvrtc_version, require_nvrtc};
pub use driver::{libraries_present, nvrtc_present};
use side_stream::SideStream;
use staging::{OnStream, Staging};

use super::launch::{queue, Device, Launch, Scratch, Share, Split, Streams};
use super::ptx_isa;
use super::timing::{Clock, LaunchTime};
use crate::backend::job::Visit;
use crate::backend::{Backend, Job};
use crate::error::{Error, Result};
use crate::kernels::KernelSource;
use crate::types::Element;
use arrayvec::ArrayVec;
use cudarc::driver::sys::{CUcontext, CUdeviceptr, CUevent, CUresult, CUstream};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut,
    DeviceSlice, PinnedHostSlice,
};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::marker::PhantomData;
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
    blocks: Blocks,
    /// Workgroups a launch aims at: the blocks the device holds resident at once.
    target_groups: u32,
    /// Multiprocessors: the most parts a merge launch that also does the top-p cut spreads
    /// over (`launch::Split::cut_here_groups`).
    sms: u32,
    /// The scratch of split and staged launches and the split rows' arrival counters (see
    /// [`Scratch`]), the caller's stream's and the side stream's, behind the lock that keeps one
    /// call's launches adjacent on the streams, so no other call's launches land between two
    /// stages.
    scratch: Mutex<[Scratch<CudaSlice<u32>>; 2]>,
    /// The second stream a call's seeded and filter launches run on.
    side: SideStream,
    functions: Mutex<HashMap<&'static str, CudaFunction>>,
    /// Page-locked host memory the per-step writes go through (see [`Staging`]).
    staging: Mutex<Staging<PinnedHostSlice<u8>, CudaEvent>>,
    /// The newest PTX ISA the driver compiles, which the kernels' PTX is lowered to.
    isa: (u32, u32),
}

/// The virtual architecture NVRTC compiles for, and the block sizes of the tuning table (for
/// most kernels, and for those whose workgroup covers a fixed part of a row).
fn target(major: i32) -> (&'static str, Blocks) {
    use crate::generated::{CUDA_BLOCK_SM75, CUDA_BLOCK_SM90, CUDA_PART_BLOCK_SM75, CUDA_PART_BLOCK_SM90};
    let turing = Blocks { fitted: CUDA_BLOCK_SM75, part: CUDA_PART_BLOCK_SM75 };
    match major {
        ..=7 => ("compute_75", turing),
        8 => ("compute_80", turing),
        _ => ("compute_90", Blocks { fitted: CUDA_BLOCK_SM90, part: CUDA_PART_BLOCK_SM90 }),
    }
}

/// The virtual architecture and threads per block `kernel` is built with for a device of
/// compute capability `major`.x, as the backend builds it.
pub fn build_target(kernel: &KernelSource, major: i32) -> (&'static str, u32) {
    let (arch, blocks) = target(major);
    (arch, blocks.of(kernel))
}

/// Threads per block on this device: most kernels', and the fixed-part kernels'.
#[derive(Clone, Copy, Debug)]
struct Blocks {
    fitted: u32,
    part: u32,
}

impl Blocks {
    fn of(self, kernel: &KernelSource) -> u32 {
        if kernel.fixed_part {
            self.part
        } else {
            self.fitted
        }
    }
}

/// How much NVRTC optimises a build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Optimisation {
    /// What the backend launches.
    Full,
    /// NVRTC's `--Ofast-compile=max` where NVRTC has it (12.8 and newer), else [`Full`](Self::Full):
    /// the same parsing and checks and a valid PTX module, in about a sixth of the time (the
    /// merge kernel 5.1 s -> 0.8 s). For asking whether a file compiles, never for launching.
    Check,
}

/// Compiles one generated kernel to PTX for `arch` with `block` threads per block.
pub fn compile(
    kernel: &KernelSource,
    arch: &'static str,
    block: u32,
    optimisation: Optimisation,
) -> Result<cudarc::nvrtc::Ptx> {
    require_nvrtc()?;
    let mut options = vec![format!("-DSK_BLOCK={block}")];
    if optimisation == Optimisation::Check && nvrtc_version()? >= (12, 8) {
        options.push("--Ofast-compile=max".into());
    }
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(arch),
        // Keep `a * b + c` two roundings, as the IR and the other backends compute it.
        fmad: Some(false),
        options,
        name: Some(format!("{}.cu", kernel.name)),
        ..Default::default()
    };
    let source = kernel.cuda_unit().ok_or(Error::Unsupported {
        backend: "cuda",
        kernel: kernel.name,
        feature: "a CUDA build",
    })?;
    cudarc::nvrtc::compile_ptx_with_opts(source, opts).map_err(|e| cuda_error(format!("NVRTC {}: {e}", kernel.name)))
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
        require_nvrtc()?;
        let isa = driver_isa(driver_version()?)?;
        let ctx = stream.context();
        let (major, minor) = ctx.compute_capability().map_err(cuda_error)?;
        let (arch, blocks) = target(major);
        let block = blocks.fitted;
        let name = format!("{} (sm_{major}{minor})", ctx.name().map_err(cuda_error)?);
        let sms = ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(cuda_error)?;
        let per_sm = ctx
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)
            .map_err(cuda_error)?;
        let sms = sms.max(1) as u32;
        let target_groups = sms * (per_sm.max(block as i32) as u32 / block);
        let scratch = || -> Result<_> {
            Ok(Scratch {
                partials: stream.alloc_zeros(1).map_err(cuda_error)?,
                counters: stream.alloc_zeros(1).map_err(cuda_error)?,
            })
        };
        let scratch = Mutex::new([scratch()?, scratch()?]);
        let side = SideStream::new(ctx)?;
        let functions = Mutex::default();
        let staging = Mutex::default();
        Ok(CudaBackend { stream, name, arch, blocks, target_groups, sms, scratch, side, functions, staging, isa })
    }

    /// Launches on a stream an engine holds as the driver's handle (burn and CubeCL keep theirs
    /// so), in `ctx` (for a device's primary context, which those engines use,
    /// `CudaContext::new(ordinal)`). A stream of another context is refused
    /// ([`Error::OtherContext`]).
    ///
    /// # Safety
    /// `stream` is a live stream (or 0, the context's legacy default stream) and stays live as
    /// long as the backend does: the backend never destroys it. Work the engine queues on it is
    /// ordered with the backend's calls by the stream itself; work on the engine's other
    /// streams is the engine's to order.
    pub unsafe fn from_raw_stream(ctx: &Arc<CudaContext>, stream: CUstream) -> Result<Self> {
        ctx.bind_to_thread().map_err(cuda_error)?;
        let mut owner: CUcontext = std::ptr::null_mut();
        // SAFETY: writes one handle; the caller vouches for the stream.
        unsafe { cudarc::driver::sys::cuStreamGetCtx(stream, &mut owner) }.result().map_err(cuda_error)?;
        same_context("the stream", owner, ctx.cu_ctx())?;
        // SAFETY: the caller's contract, and the stream was checked to be `ctx`'s.
        Self::from_stream(unsafe { ctx.wrap_borrowed_stream(stream) })
    }

    /// `view` (for example `slice.slice(offset..offset + len)`) as a buffer the sampling calls
    /// read, in place. A view of another CUDA context's memory is refused
    /// ([`Error::OtherContext`]); two contexts that are the device's primary one are the same.
    pub fn alias<'a, T>(&self, view: &'a CudaView<'_, T>) -> Result<CudaAlias<'a, T>> {
        self.own_context(view.stream())?;
        let (ptr, _read) = view.device_ptr(&self.stream);
        // SAFETY: `view` borrows its slice for 'a, so the memory stays allocated and holds
        // `view.len()` elements while the alias lives; it is this context's.
        Ok(CudaAlias(unsafe { Aliased::new(&self.stream, ptr, view.len()) }, PhantomData))
    }

    /// `view` (for example `slice.slice_mut(offset..offset + len)`) as a buffer the sampling
    /// calls write, in place (through [`Output::aliased`](crate::Output::aliased)), or read. Refused as in
    /// [`CudaBackend::alias`].
    pub fn alias_mut<'a, T>(&self, view: &'a mut CudaViewMut<'_, T>) -> Result<CudaAliasMut<'a, T>> {
        self.own_context(view.stream())?;
        let len = view.len();
        let (ptr, _written) = view.device_ptr_mut(&self.stream);
        // SAFETY: as in `alias`, and the borrow is exclusive.
        Ok(CudaAliasMut(unsafe { Aliased::new(&self.stream, ptr, len) }, PhantomData))
    }

    /// `len` elements of `T` at device address `ptr`, memory an engine holds as a raw pointer
    /// (burn's and CubeCL's), as a buffer the sampling calls write (through
    /// [`Output::aliased`](crate::Output::aliased)) or read, in place. The crate never frees it: dropping the alias
    /// leaves the memory as it was. A null address, one not aligned to `T`, or a length past
    /// the end of the address space is refused ([`Error::RawMemory`]).
    ///
    /// # Safety
    /// For as long as the alias lives (`'a`, which the caller picks):
    /// - `ptr .. ptr + len * size_of::<T>()` is device memory allocated in (or mapped into) this
    ///   backend's CUDA context, and stays allocated: the engine frees it only after the alias
    ///   is dropped and the calls that used it have run (the backend's stream orders them);
    /// - nothing else writes it, or reads what a call writes through it, unless ordered after
    ///   the backend's stream (the engine's work on the same stream is);
    /// - any `T` bit pattern it holds is one the calls may read (the crate's element types are
    ///   plain numbers; row records are validated only by [`Backend::write`] and
    ///   [`Backend::upload`], so records written there by other means must be valid).
    pub unsafe fn alias_raw<'a, T>(&self, ptr: CUdeviceptr, len: usize) -> Result<CudaAliasMut<'a, T>> {
        check_raw::<T>(ptr, len)?;
        // SAFETY: the caller's contract.
        Ok(CudaAliasMut(unsafe { Aliased::new(&self.stream, ptr, len) }, PhantomData))
    }

    /// Refuses memory whose stream (`stream`) is of another context than the backend's.
    fn own_context(&self, stream: &Arc<CudaStream>) -> Result<()> {
        same_context("the view's memory", stream.context().cu_ctx(), self.stream.context().cu_ctx())
    }

    /// The stream every call is ordered on: a call's launches are queued on it, or on the
    /// backend's side stream between a fork from it and a join back to it.
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
        let ms = elapsed_ms(&start, &end)?;
        Ok((out, LaunchTime { elapsed: std::time::Duration::from_secs_f64(ms as f64 * 1e-3), clock: Clock::Device }))
    }

    fn function(&self, kernel: &'static KernelSource) -> Result<CudaFunction> {
        let mut cache = self.functions.lock().map_err(|_| cuda_error("function cache poisoned"))?;
        if let Some(f) = cache.get(kernel.name) {
            return Ok(f.clone());
        }
        let ptx = compile(kernel, self.arch, self.blocks.of(kernel), Optimisation::Full)?;
        let ptx = match ptx_isa::lower_ptx(&ptx.to_src(), self.isa) {
            Some(lowered) => Ptx::from_src(lowered),
            None => ptx,
        };
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
    unsafe fn write_unchecked<T: Element>(&self, buf: &mut CudaSlice<T>, data: &[T]) -> Result<()> {
        let mut staging = self.staging.lock().map_err(|_| cuda_error("staging lock poisoned"))?;
        let (dst, _written) = buf.device_ptr_mut(&self.stream);
        staging.write(&OnStream(&self.stream), dst, bytemuck::cast_slice(data))
    }
    fn download<T: Element>(&self, buf: &CudaSlice<T>) -> Result<Vec<T>> {
        self.stream.clone_dtoh(buf).map_err(cuda_error)
    }
    fn len<T: Element>(buf: &CudaSlice<T>) -> usize {
        buf.len()
    }
    fn reads_stage(&self) -> bool {
        true
    }
    /// Compiles and loads every kernel with NVRTC for this device.
    fn warm_up(&self) -> Result<usize> {
        let built = crate::kernels::all().iter().filter(|k| k.cuda.is_some());
        built.map(|k| self.function(k)).try_fold(0, |n, f| f.map(|_| n + 1))
    }
    fn run(&self, mut job: Job<'_, Self>) -> Result<()> {
        // cudarc's tracking across streams: this stream first waits for the work other streams
        // have queued on the job's buffers, and after the launches each buffer records this
        // stream's use, so work another stream queues later waits for these kernels.
        job.visit(&mut Track(&self.stream));
        self.launch_job(&job)?;
        job.visit(&mut Track(&self.stream));
        Ok(())
    }
}

/// A call's launches on the caller's stream (`main`) and the backend's side stream.
struct OnStreams<'b> {
    backend: &'b CudaBackend,
    main: CUstream,
}

impl Streams<u64> for OnStreams<'_> {
    fn fork(&mut self) -> Result<()> {
        self.backend.side.fork(self.main)
    }
    fn join(&mut self) -> Result<()> {
        self.backend.side.join(self.main)
    }
    fn launch(&mut self, launch: Launch<u64>) -> Result<()> {
        let stream = if launch.side { self.backend.side.stream } else { self.main };
        self.backend.launch(launch, stream)
    }
}

/// Takes cudarc's guard of each buffer a job uses on the stream and drops it at once. Before
/// the launches, taking it makes the stream wait for other streams' writes (and, for what the
/// job writes, their reads); after them, dropping it records this stream's use.
struct Track<'s>(&'s CudaStream);

impl Visit<CudaBackend> for Track<'_> {
    fn read<T: Element>(&mut self, buf: &CudaSlice<T>) {
        drop(buf.device_ptr(self.0));
    }
    fn write<T: Element>(&mut self, buf: &mut CudaSlice<T>) {
        drop(buf.device_ptr_mut(self.0));
    }
}

impl CudaBackend {
    /// The job's launches, in order on the caller's stream, those marked `side` in order on
    /// the side stream (forked before the call's first launch, joined after its last: see
    /// [`queue`]), each stream's with its own scratch.
    fn launch_job(&self, job: &Job<'_, Self>) -> Result<()> {
        let mut scratch = self.scratch.lock().map_err(|_| cuda_error("scratch lock poisoned"))?;
        let zeros = |_: &str, words| self.stream.alloc_zeros(words).map_err(cuda_error);
        let (target_groups, block) = (self.target_groups, self.blocks.fitted);
        let [first, rest] = &mut *scratch;
        // Only `sample` has launches for the side stream.
        let sample = matches!(job, Job::Sample { .. });
        let share = if sample { Share::First } else { Share::All };
        first.fit(job, target_groups, block, true, share, CudaSlice::len, zeros)?;
        if sample {
            rest.fit(job, target_groups, block, true, Share::Rest, CudaSlice::len, zeros)?;
        }
        let handles = |s: &Scratch<CudaSlice<u32>>| Scratch {
            partials: <Self as Device>::handle(&s.partials),
            counters: <Self as Device>::handle(&s.counters),
        };
        let caller = handles(first);
        let split = Split {
            target_groups,
            block,
            partials: caller.partials,
            counters: caller.counters,
            split_filters: true,
            portable: false,
            side: Some(handles(rest)),
            cut_here_groups: self.sms,
            // The part that arrives last merges, in the same launch.
            merge_dispatch: false,
        };
        self.stream.context().bind_to_thread().map_err(cuda_error)?;
        queue(Launch::plan(job, &split)?, &mut OnStreams { backend: self, main: self.stream.cu_stream() })
    }

    /// Launches on `stream` with the driver's `cuLaunchKernel` and the arguments on the stack:
    /// cudarc's launch builder collects them in vectors, allocations a decode loop would make
    /// per launch.
    fn launch(&self, launch: Launch<u64>, stream: CUstream) -> Result<()> {
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
        let block = self.blocks.of(launch.kernel);
        let grid = launch.work.groups(block, i32::MAX as u32);
        // SAFETY: the arguments match the generated signature and outlive the call (the driver
        // copies them at launch), and every buffer was checked to cover the shape before this
        // job was built.
        unsafe {
            cudarc::driver::result::launch_kernel(
                function.cu_function(),
                (grid, 1, 1),
                (block, 1, 1),
                0,
                stream,
                &mut args,
            )
        }
        .map_err(cuda_error)
    }
}
