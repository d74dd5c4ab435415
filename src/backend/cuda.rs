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
//! ([`ptx_isa`](super::ptx_isa)), so NVRTC 13 serves a CUDA 12.0 driver and newer
//! ([`Error::CudaDriverTooOld`] below that).
//!
//! A `sample` call's seeded and filter launches touch none of the rows its plain launch samples,
//! so they run on a second stream of the backend's own, forked from the caller's stream before
//! the plain launch is queued and joined back before the call returns (`SideStream`). A batch
//! of plain rows with one top-p row then lasts about as long as the plain launch or the top-p
//! row's three dependent launches, whichever is longer, not their sum. The side stream is made
//! with the driver's calls, not as a cudarc stream, so cudarc's per-buffer event tracking (on
//! in a context with several cudarc streams) stays as the engine set it.

use super::launch::{queue, Device, Launch, Scratch, Share, Split, Streams};
use super::ptx_isa;
use super::timing::{Clock, LaunchTime};
use crate::backend::job::Visit;
use crate::backend::Output;
use crate::backend::{Backend, Job};
use crate::error::{Error, Result};
use crate::kernels::KernelSource;
use crate::types::Element;
use arrayvec::ArrayVec;
use cudarc::driver::sys::{CUcontext, CUdeviceptr, CUevent, CUevent_flags, CUevent_wait_flags, CUresult, CUstream};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut,
    DeviceSlice, PinnedHostSlice,
};
use cudarc::nvrtc::Ptx;
use libloading::Library;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::{Arc, Mutex, OnceLock};

/// A CUDA device buffer: cudarc's own slice type, so an engine passes what it already has.
pub type CudaBuffer<T> = CudaSlice<T>;

/// A slice that aliases memory owned elsewhere: it never frees it (dropping it hands the
/// pointer back with [`CudaSlice::leak`], which drops only its events).
struct Aliased<T>(ManuallyDrop<CudaSlice<T>>);

impl<T> Aliased<T> {
    /// `len` elements at `ptr`, on `stream`.
    ///
    /// # Safety
    /// The memory must stay allocated while the alias lives, and hold `len` elements of `T`.
    unsafe fn new(stream: &Arc<CudaStream>, ptr: u64, len: usize) -> Self {
        // SAFETY: the caller's contract; ManuallyDrop keeps cudarc from freeing it.
        Aliased(ManuallyDrop::new(unsafe { stream.upgrade_device_ptr(ptr, len) }))
    }
}

impl<T> Drop for Aliased<T> {
    fn drop(&mut self) {
        // SAFETY: taken once, here; the field is never used again.
        let slice = unsafe { ManuallyDrop::take(&mut self.0) };
        slice.leak();
    }
}

/// An engine's device memory read in place, as the buffer type the sampling calls take: a
/// range of its arena, or a candle tensor's storage at an offset, without a copy. It borrows the
/// view it was made from, so the memory outlives it. cudarc's tracking across streams does not
/// see uses through an alias: sample on the stream that writes the memory, or order the streams
/// yourself. Where cudarc tracks events (a context with several streams) making one makes two.
/// It derefs to a shared `CudaSlice` only, through which no safe code moves or writes it.
pub struct CudaAlias<'a, T>(Aliased<T>, PhantomData<&'a T>);

/// As [`CudaAlias`], for memory the sampling calls write (tokens into an engine's buffer):
/// [`Output::aliased`] lends it to one call. It derefs to a shared `CudaSlice` (to read it,
/// download it, or pass it as logits), never to a mutable one: no safe code can move the slice
/// out, where dropping it would free the engine's memory, nor put another in its place, and an
/// `Output`'s fields are private, so the one it lends to cannot hand it on either:
///
/// ```compile_fail,E0596
/// use sampling_kernels::{CudaAliasMut, CudaBuffer};
/// fn steal(alias: &mut CudaAliasMut<'_, u32>, other: CudaBuffer<u32>) -> CudaBuffer<u32> {
///     std::mem::replace(&mut **alias, other)
/// }
/// ```
/// ```compile_fail,E0596
/// use sampling_kernels::CudaAliasMut;
/// fn trade(a: &mut CudaAliasMut<'_, u32>, b: &mut CudaAliasMut<'_, u32>) {
///     std::mem::swap(&mut **a, &mut **b);
/// }
/// ```
/// ```compile_fail,E0616
/// use sampling_kernels::{CudaBackend, CudaBuffer, Output};
/// fn steal(out: Output<'_, CudaBackend>, other: CudaBuffer<u32>) -> CudaBuffer<u32> {
///     std::mem::replace(out.tokens, other)
/// }
/// ```
pub struct CudaAliasMut<'a, T>(Aliased<T>, PhantomData<&'a mut T>);

impl<T> Deref for CudaAlias<'_, T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.0 .0
    }
}

impl<T> Deref for CudaAliasMut<'_, T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.0 .0
    }
}

impl<T> CudaAliasMut<'_, T> {
    /// The slice, for the crate's calls only: a `&mut CudaSlice` in safe hands could be swapped
    /// out and dropped, freeing the engine's memory.
    fn lend(&mut self) -> &mut CudaSlice<T> {
        &mut self.0 .0
    }
}

/// Outputs written into an engine's memory in place, through aliases
/// ([`CudaBackend::alias_mut`], [`CudaBackend::alias_raw`]).
///
/// ```
/// use sampling_kernels::{Backend, CudaAliasMut, CudaBackend, CudaBuffer, Logits, Output, RowParams, Shape};
/// fn step(
///     sampler: &CudaBackend,
///     logits: &CudaBuffer<f32>,
///     rows: &CudaBuffer<RowParams>,
///     tokens: &mut CudaAliasMut<'_, u32>,
///     logprobs: &mut CudaAliasMut<'_, f32>,
/// ) -> sampling_kernels::Result<()> {
///     let out = Output::aliased(tokens).with_aliased_logprobs(logprobs);
///     sampler.race_from_logits(Shape::dense(1, 4), Logits::F32(logits), rows, out)
/// }
/// ```
impl<'a> Output<'a, CudaBackend> {
    /// Tokens into an engine's memory.
    pub fn aliased(tokens: &'a mut CudaAliasMut<'_, u32>) -> Self {
        Output::new(tokens.lend())
    }
    /// Also each token's log-probability, into an engine's memory.
    pub fn with_aliased_logprobs(self, logprobs: &'a mut CudaAliasMut<'_, f32>) -> Self {
        self.with_logprobs(logprobs.lend())
    }
    /// Also each row's status, into an engine's memory.
    pub fn with_aliased_status(self, status: &'a mut CudaAliasMut<'_, u32>) -> Self {
        self.with_status(status.lend())
    }
}

/// Refuses memory or a stream (`what`) of context `theirs` for a backend of context `ours`: in
/// another context a device address names nothing, or another allocation.
fn same_context(what: &'static str, theirs: CUcontext, ours: CUcontext) -> Result<()> {
    if theirs == ours {
        return Ok(());
    }
    Err(Error::OtherContext { what })
}

/// Refuses a raw device address that cannot hold `len` elements of `T`: null, not aligned to
/// `T`, or a length whose bytes overflow the address space.
fn check_raw<T>(ptr: CUdeviceptr, len: usize) -> Result<()> {
    let problem = if ptr == 0 {
        "null"
    } else if !ptr.is_multiple_of(std::mem::align_of::<T>() as u64) {
        "not aligned to its element type"
    } else if len.checked_mul(std::mem::size_of::<T>()).and_then(|b| ptr.checked_add(b as u64)).is_none() {
        "its length runs past the end of the address space"
    } else {
        return Ok(());
    };
    Err(Error::RawMemory { address: ptr, problem })
}

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

/// Whether libnvrtc can be loaded (it only tries to open the library).
pub fn nvrtc_present() -> bool {
    library(&["nvrtc"]).is_some()
}

/// [`Error::Unavailable`] unless libnvrtc can be loaded: cudarc panics on a call into a
/// library it cannot load.
fn require_nvrtc() -> Result<()> {
    if nvrtc_present() {
        return Ok(());
    }
    Err(Error::Unavailable("libnvrtc not found on the library path".into()))
}

/// Whether the CUDA driver and NVRTC libraries can be loaded (no driver call is made).
pub fn libraries_present() -> bool {
    nvrtc_present() && driver_library().is_some()
}

/// The driver library, opened once (see [`library`]).
fn driver_library() -> Option<&'static Library> {
    static DRIVER: OnceLock<Option<Library>> = OnceLock::new();
    DRIVER.get_or_init(|| library(&["cuda", "nvcuda"])).as_ref()
}

/// The first of `libs` that opens under a name cudarc's own loader also tries, so that a library
/// found here is one cudarc loads. cudarc's list (`get_lib_name_candidates`) exists only where it
/// loads dynamically; where it links instead, the linked libraries' names are among these.
fn library(libs: &[&str]) -> Option<Library> {
    use std::env::consts::{DLL_PREFIX as P, DLL_SUFFIX as S};
    let version = cudarc::driver::sys::CUDA_VERSION;
    let (major, minor) = (version / 1000, version % 1000 / 10);
    let names = libs.iter().flat_map(|lib| {
        [format!("{P}{lib}{S}"), format!("{P}{lib}64_{major}{minor}_0{S}"), format!("{P}{lib}64_{major}0_0{S}")]
            .into_iter()
            .chain([major.to_string(), "12".into(), "11".into(), "1".into()].map(|v| format!("{P}{lib}{S}.{v}")))
    });
    // SAFETY: opening the CUDA libraries runs no initialiser with preconditions.
    names.into_iter().find_map(|name| unsafe { Library::new(name) }.ok())
}

/// A CUDA version as the driver reports it (`1000 * major + 10 * minor`), as `major.minor`.
fn show_version(version: i32) -> String {
    format!("{}.{}", version / 1000, version % 1000 / 10)
}

/// The newest PTX ISA the driver of CUDA `driver` compiles, or [`Error::CudaDriverTooOld`].
fn driver_isa(driver: i32) -> Result<(u32, u32)> {
    ptx_isa::driver_isa(driver).ok_or_else(|| Error::CudaDriverTooOld { driver: show_version(driver) })
}

/// The CUDA version of the loaded driver.
fn driver_version() -> Result<i32> {
    let mut version = 0;
    // SAFETY: writes one int; the library was found present before any driver call.
    unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) }.result().map_err(cuda_error)?;
    Ok(version)
}

/// `cuEventElapsedTime` between two recorded events, once `end` is done, through the entry point
/// the driver has: bindings of CUDA 12.8 and later call `cuEventElapsedTime_v2`, which older
/// drivers lack (cudarc would panic on the missing symbol).
fn elapsed_ms(start: &CudaEvent, end: &CudaEvent) -> Result<f32> {
    type Elapsed = unsafe extern "C" fn(*mut f32, CUevent, CUevent) -> CUresult;
    end.synchronize().map_err(cuda_error)?;
    let lib = driver_library().ok_or_else(|| Error::Unavailable("libcuda not found on the library path".into()))?;
    // SAFETY: both names have this signature in every CUDA release that has them.
    let elapsed =
        unsafe { lib.get::<Elapsed>(b"cuEventElapsedTime_v2\0").or_else(|_| lib.get(b"cuEventElapsedTime\0")) }
            .map(|f| *f)
            .map_err(|e| cuda_error(format!("cuEventElapsedTime: {e}")))?;
    let mut ms = 0.0;
    // SAFETY: two events of one context, both recorded, the later one complete.
    unsafe { elapsed(&mut ms, start.cu_event(), end.cu_event()) }.result().map_err(cuda_error)?;
    Ok(ms)
}

/// The version of the loaded NVRTC.
fn nvrtc_version() -> Result<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: writes two ints; the caller checked that the library is present.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }.result().map_err(cuda_error)?;
    Ok((major, minor))
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
    /// calls write, in place (through [`Output::aliased`]), or read. Refused as in
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
    /// [`Output::aliased`]) or read, in place. The crate never frees it: dropping the alias
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

/// Slots of page-locked host memory the per-step writes are copied through. A copy from pageable
/// memory makes the driver synchronize the stream first (CUDA's "API synchronization behavior"),
/// so a decode step's row records would wait for everything queued before them, the engine's
/// forward pass included. From page-locked memory the copy is queued and the host goes on; a
/// slot is reused once the copy that last used it has run, [`STAGING_SLOTS`] writes later.
/// Generic over the driver's calls ([`Pinning`]) so a test can record their order.
struct Staging<H, E: CopyEvent> {
    slots: ArrayVec<Slot<H, E>, STAGING_SLOTS>,
    next: usize,
}

impl<H, E: CopyEvent> Default for Staging<H, E> {
    fn default() -> Self {
        Staging { slots: ArrayVec::new(), next: 0 }
    }
}

/// Writes a ring of this many slots covers: a `Sampler::step` makes three.
const STAGING_SLOTS: usize = 8;

/// One slot: its memory, how many bytes that is, and an event recorded after the copy that
/// last read it.
struct Slot<H, E> {
    host: H,
    bytes: usize,
    copied: E,
}

/// An event a staging copy records after it.
trait CopyEvent {
    /// Waits on the host until the copy that last recorded this event has run.
    fn wait(&self) -> Result<()>;
}

/// The driver's calls staging makes: cudarc's on the backend's stream ([`OnStream`]), or a
/// test's recorder.
trait Pinning {
    /// Page-locked host memory, freed when dropped.
    type Host;
    /// The event a copy records.
    type Event: CopyEvent;
    /// `bytes` of page-locked memory.
    fn alloc(&self, bytes: usize) -> Result<Self::Host>;
    /// A new event, not yet recorded.
    fn event(&self) -> Result<Self::Event>;
    /// Fills the start of `host` with `bytes`, queues its copy to device address `dst`, and
    /// records `event` after it.
    fn copy(&self, host: &mut Self::Host, bytes: &[u8], dst: CUdeviceptr, event: &Self::Event) -> Result<()>;
}

impl<H, E: CopyEvent> Staging<H, E> {
    /// Queues a copy of `bytes` to device address `dst` through the next slot.
    fn write<P: Pinning<Host = H, Event = E>>(&mut self, pin: &P, dst: CUdeviceptr, bytes: &[u8]) -> Result<()> {
        let at = self.next;
        // A slot holds the largest write so far: it grows only while a sampler warms up.
        let size = bytes.len().max(4096).next_power_of_two();
        match self.slots.get_mut(at) {
            Some(slot) => {
                // The copy that last read this slot must have run before its memory is
                // overwritten, or freed as the slot grows.
                slot.copied.wait()?;
                if slot.bytes < bytes.len() {
                    slot.host = pin.alloc(size)?;
                    slot.bytes = size;
                }
            }
            // A new slot's event has recorded nothing: there is nothing to wait for. `next`
            // moves on only past a slot that exists, so the new one is at `at`.
            None => self.slots.push(Slot { host: pin.alloc(size)?, bytes: size, copied: pin.event()? }),
        }
        let slot = &mut self.slots[at];
        pin.copy(&mut slot.host, bytes, dst, &slot.copied)?;
        self.next = (at + 1) % STAGING_SLOTS;
        Ok(())
    }
}

impl<H, E: CopyEvent> Drop for Staging<H, E> {
    /// The memory is freed (as the slots drop, after this) only once the copies that read it
    /// have run: the stream may still hold them when the backend is dropped.
    fn drop(&mut self) {
        for slot in &self.slots {
            // Errors are dropped: the context may already be tearing down.
            let _ = slot.copied.wait();
        }
    }
}

impl CopyEvent for CudaEvent {
    fn wait(&self) -> Result<()> {
        self.synchronize().map_err(cuda_error)
    }
}

/// Staging's calls on the backend's stream.
struct OnStream<'s>(&'s Arc<CudaStream>);

impl Pinning for OnStream<'_> {
    type Host = PinnedHostSlice<u8>;
    type Event = CudaEvent;
    fn alloc(&self, bytes: usize) -> Result<PinnedHostSlice<u8>> {
        // SAFETY: `copy` writes the memory before any copy reads it.
        unsafe { self.0.context().alloc_pinned::<u8>(bytes) }.map_err(cuda_error)
    }
    fn event(&self) -> Result<CudaEvent> {
        self.0.context().new_event(None).map_err(cuda_error)
    }
    fn copy(&self, host: &mut PinnedHostSlice<u8>, bytes: &[u8], dst: CUdeviceptr, event: &CudaEvent) -> Result<()> {
        let host = host.as_mut_slice().map_err(cuda_error)?;
        let host = host.get_mut(..bytes.len()).ok_or_else(|| cuda_error("a staging slot shorter than its write"))?;
        host.copy_from_slice(bytes);
        // SAFETY: `dst` covers `bytes` (the caller checked the write's length against the
        // buffer) and the source is page-locked memory that stays untouched until `event`.
        unsafe { cudarc::driver::result::memcpy_htod_async(dst, host, self.0.cu_stream()) }.map_err(cuda_error)?;
        event.record(self.0).map_err(cuda_error)
    }
}

/// The backend's second stream (see the module's doc) and the two events that order it: `forked`
/// on the caller's stream before a call's first launch, which the side stream waits for,
/// and `joined` on the side stream after its last, which the caller's stream waits for. Made
/// once, with the backend: a call records and waits, and creates nothing.
struct SideStream {
    ctx: Arc<CudaContext>,
    stream: CUstream,
    forked: CUevent,
    joined: CUevent,
}

// SAFETY: the handles are the driver's, usable from any thread that has bound their context,
// as every use here does first; the backend uses them only while it holds its scratch lock.
unsafe impl Send for SideStream {}
unsafe impl Sync for SideStream {}

impl SideStream {
    /// A non-blocking stream at the context's greatest priority: the side stream's launches are
    /// short and depend on each other, so their few blocks go ahead of the plain launch's
    /// waiting ones.
    fn new(ctx: &Arc<CudaContext>) -> Result<Self> {
        use cudarc::driver::result::{event, stream};
        ctx.bind_to_thread().map_err(cuda_error)?;
        let (_least, greatest) = stream::get_priority_range().map_err(cuda_error)?;
        let untimed = CUevent_flags::CU_EVENT_DISABLE_TIMING;
        let (forked, joined) =
            (event::create(untimed).map_err(cuda_error)?, event::create(untimed).map_err(cuda_error)?);
        let stream = stream::create_with_priority(stream::StreamKind::NonBlocking, greatest).map_err(cuda_error)?;
        Ok(SideStream { ctx: ctx.clone(), stream, forked, joined })
    }

    /// The side stream waits for what `main` has queued so far.
    fn fork(&self, main: CUstream) -> Result<()> {
        Self::order(self.forked, main, self.stream)
    }

    /// `main` waits for what the side stream has queued so far.
    fn join(&self, main: CUstream) -> Result<()> {
        Self::order(self.joined, self.stream, main)
    }

    /// `after` waits for what `before` has queued so far, through `event`.
    fn order(event: CUevent, before: CUstream, after: CUstream) -> Result<()> {
        use cudarc::driver::result::{event as ev, stream};
        // SAFETY: the event and both streams are live (the side stream's and events until the
        // backend drops, the caller's for as long as the backend holds it) and belong to the
        // context bound by the caller.
        unsafe {
            ev::record(event, before).map_err(cuda_error)?;
            stream::wait_event(after, event, CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT).map_err(cuda_error)
        }
    }
}

impl Drop for SideStream {
    fn drop(&mut self) {
        use cudarc::driver::result::{event, stream};
        // Errors are dropped: the context may already be tearing down.
        let _ = self.ctx.bind_to_thread();
        // SAFETY: made in `new`, destroyed once, here; the driver frees the stream once the work
        // queued on it is done.
        unsafe {
            let _ = event::destroy(self.forked);
            let _ = event::destroy(self.joined);
            let _ = stream::destroy(self.stream);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::{HashMap, HashSet};

    /// Staging's driver calls as a test sees them, in order.
    #[derive(Clone, Copy, Debug)]
    enum Call {
        Alloc { host: usize },
        Free { host: usize },
        Wait { event: usize },
        Copy { host: usize, event: usize },
    }

    /// Records staging's calls; hosts and events are numbered as they are made.
    #[derive(Default)]
    struct Recorder {
        log: RefCell<Vec<Call>>,
        made: RefCell<usize>,
    }

    impl Recorder {
        fn make(&self) -> usize {
            let mut made = self.made.borrow_mut();
            *made += 1;
            *made
        }
    }

    struct Host<'r>(usize, &'r Recorder);
    impl Drop for Host<'_> {
        fn drop(&mut self) {
            self.1.log.borrow_mut().push(Call::Free { host: self.0 });
        }
    }

    struct Event<'r>(usize, &'r Recorder);
    impl CopyEvent for Event<'_> {
        fn wait(&self) -> Result<()> {
            self.1.log.borrow_mut().push(Call::Wait { event: self.0 });
            Ok(())
        }
    }

    impl<'r> Pinning for &'r Recorder {
        type Host = Host<'r>;
        type Event = Event<'r>;
        fn alloc(&self, _bytes: usize) -> Result<Host<'r>> {
            let host = self.make();
            self.log.borrow_mut().push(Call::Alloc { host });
            Ok(Host(host, self))
        }
        fn event(&self) -> Result<Event<'r>> {
            Ok(Event(self.make(), self))
        }
        fn copy(&self, host: &mut Host<'r>, _: &[u8], _: CUdeviceptr, event: &Event<'r>) -> Result<()> {
            self.log.borrow_mut().push(Call::Copy { host: host.0, event: event.0 });
            Ok(())
        }
    }

    /// Replays a log against the two rules of page-locked staging: host memory is refilled or
    /// freed only after a wait on the event of the copy that last read it, and no wait is on an
    /// event no copy recorded (it would wait for nothing).
    fn check_staging(log: &[Call]) -> std::result::Result<(), String> {
        let mut recorded = HashSet::new();
        // Each host whose copy may still be queued, with that copy's event.
        let mut pending = HashMap::new();
        for (at, call) in log.iter().enumerate() {
            match *call {
                Call::Alloc { .. } => {}
                Call::Wait { event } if !recorded.contains(&event) => {
                    return Err(format!("call {at}: waits on event {event}, which no copy recorded"));
                }
                Call::Wait { event } => pending.retain(|_, e| *e != event),
                Call::Copy { host, .. } | Call::Free { host } if pending.contains_key(&host) => {
                    return Err(format!("call {at}: {call:?} while host {host}'s last copy may be queued"));
                }
                Call::Copy { host, event } => {
                    recorded.insert(event);
                    pending.insert(host, event);
                }
                Call::Free { .. } => {}
            }
        }
        Ok(())
    }

    /// The staging ring through its first round, a write larger than any before (its slot
    /// grows, freeing the old memory), a second round, and the backend's drop: each host is
    /// refilled or freed only after its last copy has run, and no wait is on an unrecorded
    /// event. Staging as it was (the grown slot's memory freed at once, then a wait on the new
    /// slot's unrecorded event) breaks both.
    #[test]
    fn staging_waits_on_a_slots_copy_before_reusing_or_freeing_it() {
        let recorder = Recorder::default();
        let mut staging = Staging::default();
        let sizes = [[100; STAGING_SLOTS], [10_000, 100, 100, 100, 100, 100, 100, 100]];
        for (round, bytes) in sizes.iter().flatten().enumerate() {
            staging.write(&&recorder, 0x1000, &vec![0u8; *bytes]).unwrap();
            check_staging(&recorder.log.borrow()).unwrap_or_else(|e| panic!("write {round}: {e}"));
        }
        drop(staging);
        let log = recorder.log.into_inner();
        check_staging(&log).unwrap_or_else(|e| panic!("after the drop: {e}"));
        // The test means something only if a slot grew; every host is freed in the end.
        let hosts = |alloc: bool| -> Vec<usize> {
            let host = |c: &Call| match *c {
                Call::Alloc { host } if alloc => Some(host),
                Call::Free { host } if !alloc => Some(host),
                _ => None,
            };
            let mut hosts: Vec<_> = log.iter().filter_map(host).collect();
            hosts.sort_unstable();
            hosts
        };
        assert_eq!(hosts(true).len(), STAGING_SLOTS + 1, "{log:?}");
        assert_eq!(hosts(true), hosts(false), "{log:?}");
    }

    /// Lent memory and streams of another context are refused by their context's handle, with
    /// the typed error (the handles here are stand-ins: only their identity is compared).
    #[test]
    fn another_contexts_memory_is_refused() {
        let (ours, theirs) = (0x10 as CUcontext, 0x20 as CUcontext);
        assert_eq!(same_context("the view's memory", ours, ours), Ok(()));
        assert_eq!(
            same_context("the view's memory", theirs, ours),
            Err(Error::OtherContext { what: "the view's memory" })
        );
        assert!(matches!(same_context("the stream", std::ptr::null_mut(), ours), Err(Error::OtherContext { .. })));
    }

    /// A raw address must be able to hold its elements: not null, aligned to the element type,
    /// its length within the address space.
    #[test]
    fn raw_addresses_are_checked() {
        assert_eq!(check_raw::<f32>(0x7f00_0000_0100, 151_936), Ok(()));
        assert_eq!(check_raw::<f64>(0x7f00_0000_0108, 1), Ok(()));
        let problem = |r: Result<()>| match r {
            Err(Error::RawMemory { problem, .. }) => problem,
            other => panic!("{other:?}"),
        };
        assert_eq!(problem(check_raw::<u32>(0, 4)), "null");
        assert_eq!(problem(check_raw::<u32>(0x1002, 4)), "not aligned to its element type");
        assert_eq!(problem(check_raw::<f64>(0x1004, 4)), "not aligned to its element type");
        assert!(problem(check_raw::<u32>(u64::MAX - 7, 4)).contains("address space"));
        assert!(problem(check_raw::<u64>(0x1000, usize::MAX / 4)).contains("address space"));
    }

    /// A driver older than the oldest ISA is refused by name; the fleets' drivers are not.
    #[test]
    fn drivers_before_cuda_12_are_refused() {
        assert_eq!(driver_isa(11080), Err(Error::CudaDriverTooOld { driver: "11.8".into() }));
        assert_eq!(driver_isa(12020), Ok((8, 2)));
        assert_eq!(show_version(13010), "13.1");
    }
}
