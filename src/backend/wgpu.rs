//! The wgpu backend: the generated WGSL on any adapter wgpu finds (Vulkan, Metal, DX12, and
//! Mesa's lavapipe on a CPU).

use super::launch::{Device, Launch, Scratch, Share, Split, MAX_LAUNCHES, PORTABLE_FILTERS};
use super::timing::{Clock, LaunchTime};
use crate::backend::{Backend, Job};
use crate::error::{Error, Result};
use crate::kernels::{KernelId, KernelSource};
use crate::types::Element;
use arrayvec::ArrayVec;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wgpu::util::DeviceExt;

/// A wgpu storage buffer of `len` elements of `T`, starting `offset` bytes into a
/// `wgpu::Buffer` (0 for the buffers this crate makes).
#[derive(Debug)]
pub struct WgpuBuffer<T> {
    buffer: wgpu::Buffer,
    offset: u64,
    len: usize,
    _elem: PhantomData<T>,
}

/// The offsets an engine's buffer may be sampled at: WebGPU caps every adapter's
/// `min_storage_buffer_offset_alignment` at 256 bytes, so a multiple of 256 binds everywhere.
pub const OFFSET_ALIGNMENT: u64 = 256;

impl<T: Element> WgpuBuffer<T> {
    /// Wraps an engine's own buffer (created with `STORAGE` usage) holding `len` elements, so
    /// logits written by the engine's compute pass are sampled where they are.
    pub fn from_raw(buffer: wgpu::Buffer, len: usize) -> Result<Self> {
        Self::from_raw_at(buffer, 0, len)
    }

    /// Wraps `len` elements of an engine's buffer starting `offset` bytes in (a multiple of
    /// [`OFFSET_ALIGNMENT`]), so rows inside an engine's arena are sampled, or written, in place.
    pub fn from_raw_at(buffer: wgpu::Buffer, offset: u64, len: usize) -> Result<Self> {
        if !offset.is_multiple_of(OFFSET_ALIGNMENT) {
            return Err(Error::Shape(format!("buffer offset {offset} is not a multiple of {OFFSET_ALIGNMENT} bytes")));
        }
        // The binding covers whole words (`padded_bytes`), so those must lie inside the buffer.
        let room = buffer.size().saturating_sub(offset);
        if room < padded_bytes::<T>(len) {
            return Err(Error::BufferTooShort { name: "wgpu buffer", len: room as usize / size_of::<T>(), need: len });
        }
        if !buffer.usage().contains(wgpu::BufferUsages::STORAGE) {
            return Err(Error::Device { backend: "wgpu", message: "the buffer lacks STORAGE usage".into() });
        }
        Ok(WgpuBuffer { buffer, offset, len, _elem: PhantomData })
    }
    /// The wrapped wgpu buffer.
    pub fn raw(&self) -> &wgpu::Buffer {
        &self.buffer
    }
}

/// Bytes from one launch's parameters to the next in the parameter buffer: the largest uniform
/// offset alignment WebGPU allows, so every adapter takes it.
const PARAMS_STRIDE: usize = 256;

/// The kernel a seeded row with a filter takes (the one-read path's merge, which runs the
/// filter kernel's body and declares the most workgroup memory): a device that cannot run it
/// samples filtered rows with the portable filter kernel, and refuses seeded ones.
const FILTERED_SEEDED: KernelId = KernelId::TopKMergeLogitsF32;

/// The device feature `kernel` needs and `device` lacks, if any, or the limit to raise where it
/// declares more workgroup memory or storage buffers than the device gives.
fn missing_feature(device: &wgpu::Device, kernel: &KernelSource) -> Option<&'static str> {
    let needs = [
        (kernel.needs_f64, wgpu::Features::SHADER_F64, "SHADER_F64"),
        (kernel.needs_int64, wgpu::Features::SHADER_INT64, "SHADER_INT64"),
    ];
    let feature = needs.into_iter().find(|&(needed, feature, _)| needed && !device.features().contains(feature));
    let limits = device.limits();
    let memory = kernel.workgroup_bytes > limits.max_compute_workgroup_storage_size;
    let buffers = kernel.bindings.len() > limits.max_storage_buffers_per_shader_stage as usize;
    feature.map(|n| n.2).or(memory.then_some(WORKGROUP_LIMIT)).or(buffers.then_some(BUFFER_LIMIT))
}

/// What a kernel that binds more storage buffers than the device allows lacks: the limit to
/// request. WebGPU's default is 8; the seeded kernel from logits, the one-read path's merge and
/// the split filters bind 9, the portable filter kernels 8.
const BUFFER_LIMIT: &str = "a max_storage_buffers_per_shader_stage of 9 (request the adapter's limits, \
    as WgpuBackend::device_descriptor does)";
const _: () = assert!(crate::generated::MAX_BUFFERS == 9, "BUFFER_LIMIT names the most buffers a kernel binds");

/// What a kernel that declares more workgroup memory than the device gives lacks (the feature
/// its `Error::Unsupported` names): the limit to request.
const WORKGROUP_LIMIT: &str = "a max_compute_workgroup_storage_size of 32768 bytes (request the adapter's limits, \
     as WgpuBackend::device_descriptor does)";

/// Workgroups a launch aims at on a discrete or integrated GPU: about what one holds resident
/// (an H200's 132 multiprocessors take 8 workgroups of 256 each).
const GPU_TARGET_GROUPS: u32 = 1024;
/// On a CPU adapter (lavapipe): few, since each workgroup costs there even when it has little to
/// do; batches of up to 8 rows still take the split path the GPUs take, so it is tested.
const CPU_TARGET_GROUPS: u32 = 16;

/// The most workgroups of a one-read merge launch that also does the top-p cut
/// (`launch::Split::cut_here_groups`): wgpu reports no adapter's multiprocessors, so about a
/// small discrete GPU's. On a CPU adapter the same, so its tests run both plans: a row of up to
/// 64 parts (262,144 columns) alone takes two launches, a batch of long rows three.
const CUT_HERE_GROUPS: u32 = 64;

/// A launch's buffers in binding order (`None`: the unused output), what its bind group is made
/// of besides the kernel and its parameter slot.
type BoundBuffers = ArrayVec<Option<(wgpu::Buffer, u64, u64)>, { crate::generated::MAX_BUFFERS }>;

/// Bind groups kept per kernel and parameter slot: an engine that alternates between a few
/// logits buffers still finds its own; one that makes a new buffer per call keeps at most this
/// many of its old ones alive.
const BIND_GROUPS_KEPT: usize = 4;

/// The bind groups kept for one kernel and parameter slot, with their buffers, oldest first.
type KeptBindGroups = ArrayVec<(BoundBuffers, wgpu::BindGroup), BIND_GROUPS_KEPT>;

/// The parameters of a call's launches, in order: what picks its parameter block.
type LaunchParams = ArrayVec<[u32; 4], MAX_LAUNCHES>;

/// Parameter blocks kept: a decode loop cycles through a few shapes (batch sizes, row-list
/// lengths), each of whose blocks is made once and copied from step after step.
const PARAM_BLOCKS_KEPT: usize = 16;

/// Samples with the generated WGSL on one wgpu device and queue.
pub struct WgpuBackend {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    /// The uniforms `batch, vocab, stride, flags` of a call's launches, one per
    /// [`PARAMS_STRIDE`] bytes, which every bind group binds: each call copies its parameter
    /// block here in its own command encoder, before its passes (see [`WgpuBackend::record`]).
    params: wgpu::Buffer,
    /// Immutable copies of recent calls' parameters, laid out as in `params`, the most recent
    /// last. Copied inside the encoder, never written with `Queue::write_buffer` (which lands at
    /// the next submit): so calls recorded into an engine's encoders before its submit, and calls
    /// that submit meanwhile, each read their own parameters.
    param_blocks: Mutex<ArrayVec<(LaunchParams, wgpu::Buffer), PARAM_BLOCKS_KEPT>>,
    /// Bound where a kernel's log-probability output is not asked for.
    unused_output: wgpu::Buffer,
    pipelines: Mutex<HashMap<&'static str, Arc<wgpu::ComputePipeline>>>,
    /// The driver's cache of compiled pipelines, where the device has PIPELINE_CACHE: an engine
    /// saves [`WgpuBackend::pipeline_cache_data`] and hands it back at the next start.
    pipeline_cache: Option<wgpu::PipelineCache>,
    /// The bind groups of recent launches by kernel and parameter slot, the most recent last,
    /// so a decode loop that samples the same buffers step after step makes none (wgpu
    /// allocates for each). A bind group keeps its buffers alive, so only a few are kept.
    bind_groups: Mutex<HashMap<(&'static str, usize), KeptBindGroups>>,
    /// Where the device has TIMESTAMP_QUERY: what [`WgpuBackend::time_launches`] writes to.
    timestamps: Option<Timestamps>,
    /// Inside [`WgpuBackend::time_launches`], how many launches it has timed so far.
    timing: Mutex<Option<u32>>,
    /// Workgroups a launch aims at (see `launch::parts`): about what a discrete GPU holds
    /// resident; on a CPU adapter (lavapipe) few, as each workgroup there has a fixed cost.
    target_groups: u32,
    /// The scratch of split and staged launches and the split rows' arrival counters (see
    /// [`Scratch`]). A call records all its launches into one encoder at once, so they stay
    /// adjacent on the queue and no other call's launches land between two stages.
    scratch: Mutex<Scratch<wgpu::Buffer>>,
    /// Whether filtered rows are split over workgroups (a launch per stage): on GPUs; not on a
    /// CPU adapter, where a launch costs about half a millisecond (lavapipe).
    split_filters: bool,
    /// Whether the device cannot run the filter kernels (no float64 or 64-bit integers, or less
    /// workgroup memory than they declare; see [`FILTERED_SEEDED`]): `Sampler::step` then
    /// samples filtered rows with the portable filter kernel (see `launch::Split::portable`);
    /// or [`WgpuBackend::with_portable_filters`] asked for it.
    portable: bool,
}

/// Two timestamp queries and the buffers that bring them to the host. The first timed launch
/// writes the start of its pass to query 0 and every timed launch the end of its pass to query 1
/// (wgpu resets a pass's queries before writing them), so the two span all the timed launches
/// without a limit on their number.
struct Timestamps {
    set: wgpu::QuerySet,
    /// QUERY_RESOLVE: the two ticks, resolved.
    resolved: wgpu::Buffer,
    /// MAP_READ: their copy for the host.
    readback: wgpu::Buffer,
    /// Nanoseconds per tick.
    period_ns: f64,
}

impl Timestamps {
    fn new(device: &wgpu::Device, queue: &wgpu::Queue) -> Self {
        let buffer = |label, usage| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: 16,
                usage,
                mapped_at_creation: false,
            })
        };
        Timestamps {
            set: device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("sampling-kernels timestamps"),
                ty: wgpu::QueryType::Timestamp,
                count: 2,
            }),
            resolved: buffer(
                "sampling-kernels timestamps resolved",
                wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            ),
            readback: buffer(
                "sampling-kernels timestamps readback",
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            ),
            period_ns: queue.get_timestamp_period() as f64,
        }
    }
}

const USAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_SRC).union(wgpu::BufferUsages::COPY_DST);

fn device_error(message: impl std::fmt::Display) -> Error {
    Error::Device { backend: "wgpu", message: message.to_string() }
}

/// A buffer of the scratch of split and staged launches (`name`: `scratch` or `counters`),
/// `words` u32 that only the kernels use; wgpu zeroes a new buffer, which the counters need.
fn scratch_buffer(device: &wgpu::Device, name: &str, words: usize) -> wgpu::Buffer {
    device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(&format!("sampling-kernels {name}")),
        size: (words.max(1) * 4) as u64,
        usage: wgpu::BufferUsages::STORAGE,
        mapped_at_creation: false,
    })
}

/// A buffer as a launch binds it: the buffer, the byte offset its elements start at, and the
/// bytes they span. The binding covers those bytes only, not the rest of an engine's buffer,
/// which could pass the device's `max_storage_buffer_binding_size` or alias another binding.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bound<'a> {
    buffer: &'a wgpu::Buffer,
    offset: u64,
    size: u64,
}

impl<'a> Bound<'a> {
    /// All of `buffer`.
    fn whole(buffer: &'a wgpu::Buffer) -> Self {
        Bound { buffer, offset: 0, size: buffer.size() }
    }
}

/// A pipeline cache from `data` (or empty), where the device has PIPELINE_CACHE.
///
/// # Safety
/// As [`wgpu::Device::create_pipeline_cache`]: `data` was saved from such a cache by this wgpu.
unsafe fn pipeline_cache(device: &wgpu::Device, data: Option<&[u8]>) -> Option<wgpu::PipelineCache> {
    let desc = wgpu::PipelineCacheDescriptor { label: Some("sampling-kernels"), data, fallback: true };
    // SAFETY: the caller's contract.
    device.features().contains(wgpu::Features::PIPELINE_CACHE).then(|| unsafe { device.create_pipeline_cache(&desc) })
}

/// Byte size of `len` elements, rounded up to the 4 bytes wgpu copies and binds in.
fn padded_bytes<T>(len: usize) -> u64 {
    ((len * size_of::<T>()).max(4) as u64).next_multiple_of(4)
}

impl WgpuBackend {
    /// The best adapter wgpu finds (high-performance first), on a device of its own.
    pub fn new() -> Result<Self> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let options = wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            ..Default::default()
        };
        let adapter = pollster::block_on(instance.request_adapter(&options))
            .map_err(|e| Error::Unavailable(format!("no wgpu adapter: {e}")))?;
        let desc = Self::device_descriptor(&adapter);
        let (device, queue) = pollster::block_on(adapter.request_device(&desc))
            .map_err(|e| Error::Unavailable(format!("wgpu device: {e}")))?;
        Ok(Self::from_device(device, queue, adapter.get_info()))
    }

    /// The features every kernel of this crate can use: float64 and 64-bit integers (the seeded
    /// sampler, and the filter kernels' exact masses) and timestamps (for
    /// [`WgpuBackend::time_launches`]), and a pipeline cache ([`Backend::warm_up`]). A device
    /// without them (or with wgpu's default 16 KiB of workgroup memory) still samples greedy,
    /// Philox and filtered rows through `Sampler::step`, the filtered ones with a portable filter
    /// kernel (u64 as two words, no float64, an 8 KiB list); `Sampler::step` refuses a seeded row
    /// there with [`Error::UnsupportedRow`], and a call whose kernel needs a missing feature
    /// gets [`Error::Unsupported`] naming it.
    pub const FEATURES: wgpu::Features = wgpu::Features::SHADER_F64
        .union(wgpu::Features::SHADER_INT64)
        .union(wgpu::Features::TIMESTAMP_QUERY)
        .union(wgpu::Features::PIPELINE_CACHE);

    /// The workgroup memory the filter kernels declare at most, in bytes: above wgpu's default
    /// limit of 16 KiB, so a device for them asks for it (every desktop GPU and Apple GPU has
    /// 32 KiB or more). A kernel that declares more than the device gives is refused with
    /// [`Error::Unsupported`] naming the limit; the portable filter kernel fits 16 KiB.
    pub const WORKGROUP_STORAGE: u32 = 32 * 1024;

    /// A descriptor for a device that runs every kernel `adapter` can: [`Self::FEATURES`] where
    /// the adapter has them, and the adapter's own limits (which cover
    /// [`Self::WORKGROUP_STORAGE`] where it has that much). An engine that makes its own device
    /// can request the same.
    pub fn device_descriptor(adapter: &wgpu::Adapter) -> wgpu::DeviceDescriptor<'static> {
        wgpu::DeviceDescriptor {
            label: Some("sampling-kernels"),
            required_features: adapter.features() & Self::FEATURES,
            required_limits: adapter.limits(),
            ..Default::default()
        }
    }

    /// Uses an engine's own device and queue ([`WgpuBackend::time_launches`] uses timestamp
    /// queries if the device was created with TIMESTAMP_QUERY).
    pub fn from_device(device: wgpu::Device, queue: wgpu::Queue, info: wgpu::AdapterInfo) -> Self {
        let uniform = |label, usage| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: 16,
                usage,
                mapped_at_creation: false,
            })
        };
        let params = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("sampling-kernels params"),
            size: (MAX_LAUNCHES * PARAMS_STRIDE) as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let unused_output = uniform("sampling-kernels unused output", wgpu::BufferUsages::STORAGE);
        let timestamps =
            device.features().contains(wgpu::Features::TIMESTAMP_QUERY).then(|| Timestamps::new(&device, &queue));
        let target_groups =
            if info.device_type == wgpu::DeviceType::Cpu { CPU_TARGET_GROUPS } else { GPU_TARGET_GROUPS };
        let scratch = Mutex::new(Scratch {
            partials: scratch_buffer(&device, "scratch", 1),
            counters: scratch_buffer(&device, "counters", 1),
        });
        let split_filters = info.device_type != wgpu::DeviceType::Cpu;
        let portable = missing_feature(&device, FILTERED_SEEDED.source()).is_some();
        // SAFETY: a cache made without data vouches for nothing.
        let pipeline_cache = unsafe { pipeline_cache(&device, None) };
        WgpuBackend {
            device,
            queue,
            info,
            params,
            unused_output,
            pipelines: Mutex::default(),
            pipeline_cache,
            bind_groups: Mutex::default(),
            param_blocks: Mutex::default(),
            timestamps,
            timing: Mutex::default(),
            target_groups,
            scratch,
            split_filters,
            portable,
        }
    }

    /// Splits (or not) filtered rows over workgroups where the batch leaves the device idle, at
    /// the cost of a launch per stage (19). The default is to split on GPUs and not on a CPU
    /// adapter; the tests turn it on on lavapipe to check the split path.
    pub fn with_split_filters(mut self, split: bool) -> Self {
        self.split_filters = split;
        self
    }

    /// Samples the filtered rows of [`crate::Sampler::step`] with the portable filter kernel
    /// (u64 as two words, no float64, an 8 KiB list), as on a device without float64, 64-bit
    /// integers or 32 KiB of workgroup memory, where it is the only filter path. The tokens are
    /// the same; for tests and comparisons. Seeded rows with a filter are then refused
    /// ([`crate::Error::UnsupportedRow`]), as there.
    pub fn with_portable_filters(mut self, portable: bool) -> Self {
        self.portable = portable || missing_feature(&self.device, FILTERED_SEEDED.source()).is_some();
        self
    }

    /// The adapter this backend runs on.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }

    /// Runs `launches` (calls of this backend) and measures them, for benchmarks: with the
    /// device's timestamp queries, from the start of the first launch's compute pass to the end
    /// of the last one's ([`Clock::Device`]); on a device without TIMESTAMP_QUERY, by the wall
    /// clock up to a wait for the device to go idle ([`Clock::Wall`]). Either way it returns
    /// once the launches are done. Launches from other threads on this backend meanwhile are
    /// timed too; calls do not nest (a nested one is an error).
    pub fn time_launches<R>(&self, launches: impl FnOnce(&Self) -> Result<R>) -> Result<(R, LaunchTime)> {
        let Some(ts) = &self.timestamps else {
            let start = Instant::now();
            let out = launches(self)?;
            self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(device_error)?;
            return Ok((out, LaunchTime { elapsed: start.elapsed(), clock: Clock::Wall }));
        };
        {
            let mut timing = self.timing.lock().map_err(|_| device_error("timing lock poisoned"))?;
            if timing.is_some() {
                return Err(device_error("time_launches does not nest"));
            }
            *timing = Some(0);
        }
        let out = launches(self);
        let timed = self.timing.lock().map_err(|_| device_error("timing lock poisoned"))?.take();
        let out = out?;
        if timed.unwrap_or(0) == 0 {
            return Ok((out, LaunchTime { elapsed: Duration::ZERO, clock: Clock::Device }));
        }
        let mut encoder = self.device.create_command_encoder(&Default::default());
        encoder.resolve_query_set(&ts.set, 0..2, &ts.resolved, 0);
        encoder.copy_buffer_to_buffer(&ts.resolved, 0, &ts.readback, 0, 16);
        self.queue.submit([encoder.finish()]);
        let ticks = self.map_read::<u64>(&ts.readback, 2)?;
        let ns = ticks[1].saturating_sub(ticks[0]) as f64 * ts.period_ns;
        Ok((out, LaunchTime { elapsed: Duration::from_secs_f64(ns * 1e-9), clock: Clock::Device }))
    }

    /// Inside [`WgpuBackend::time_launches`] with timestamps, how many launches it timed before
    /// these `launches`, which it counts (see [`Timestamps`]); `None` outside it or without
    /// timestamps. An engine's encoder (`engine`) is refused there: its passes would run after
    /// `time_launches` reads the clock.
    fn timed_before(&self, launches: u32, engine: bool) -> Result<Option<u32>> {
        if self.timestamps.is_none() {
            return Ok(None);
        }
        let mut timing = self.timing.lock().map_err(|_| device_error("timing lock poisoned"))?;
        let Some(timed) = timing.as_mut() else { return Ok(None) };
        if engine {
            return Err(device_error(
                "time_launches times calls that submit, not ones recorded into an engine's encoder",
            ));
        }
        let before = *timed;
        *timed += launches;
        Ok(Some(before))
    }

    /// Maps `staging` (MAP_READ, its copy already submitted), waits for it, and returns its first
    /// `len` elements.
    fn map_read<T: bytemuck::Pod>(&self, staging: &wgpu::Buffer, len: usize) -> Result<Vec<T>> {
        let (tx, rx) = std::sync::mpsc::channel();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(device_error)?;
        rx.recv().map_err(device_error)?.map_err(device_error)?;
        let view = staging.get_mapped_range(..).map_err(device_error)?;
        let out = bytemuck::pod_collect_to_vec::<u8, T>(&view[..len * size_of::<T>()]);
        drop(view);
        staging.unmap();
        Ok(out)
    }

    fn pipeline(&self, kernel: &'static KernelSource) -> Result<Arc<wgpu::ComputePipeline>> {
        let mut cache = self.pipelines.lock().map_err(|_| device_error("pipeline cache poisoned"))?;
        if let Some(p) = cache.get(kernel.name) {
            return Ok(p.clone());
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(kernel.name),
            source: wgpu::ShaderSource::Wgsl(kernel.wgsl.into()),
        });
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(kernel.name),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: self.pipeline_cache.as_ref(),
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(device_error(format!("kernel {}: {e}", kernel.name)));
        }
        let pipeline = Arc::new(pipeline);
        cache.insert(kernel.name, pipeline.clone());
        Ok(pipeline)
    }

    /// What this device lacks to build `kernel` (a feature, or the workgroup memory limit to
    /// raise), if anything.
    pub fn missing_feature(&self, kernel: &KernelSource) -> Option<&'static str> {
        missing_feature(&self.device, kernel)
    }

    /// The device this backend launches on.
    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    /// The queue this backend submits to, where an engine submits the encoders it records steps
    /// into ([`crate::Sampler::step_into`]).
    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// The pipeline cache's data, for an engine to save and pass to
    /// [`WgpuBackend::with_pipeline_cache_data`] at its next start (`None` without one).
    pub fn pipeline_cache_data(&self) -> Option<Vec<u8>> {
        self.pipeline_cache.as_ref().and_then(|c| c.get_data())
    }

    /// Starts the pipeline cache from `data` saved by [`WgpuBackend::pipeline_cache_data`]
    /// (data that does not fit this adapter and driver is dropped for an empty cache).
    ///
    /// # Safety
    /// wgpu's contract for [`wgpu::Device::create_pipeline_cache`]: `data` must be what
    /// `pipeline_cache_data` returned, unmodified, with this version of wgpu.
    pub unsafe fn with_pipeline_cache_data(mut self, data: &[u8]) -> Self {
        // SAFETY: the caller vouches for `data` as above.
        self.pipeline_cache = unsafe { pipeline_cache(&self.device, Some(data)) };
        self
    }

    /// The bind group of `launch` with its parameters at byte `slot` of the parameter buffer:
    /// from the cache, or made and kept.
    fn bind_group(
        &self,
        launch: &Launch<Bound<'_>>,
        pipeline: &wgpu::ComputePipeline,
        slot: usize,
    ) -> Result<wgpu::BindGroup> {
        let buffers: BoundBuffers =
            launch.buffers.iter().map(|b| b.map(|b| (b.buffer.clone(), b.offset, b.size))).collect();
        let mut cache = self.bind_groups.lock().map_err(|_| device_error("bind group cache poisoned"))?;
        let kept = cache.entry((launch.kernel.name, slot)).or_default();
        if let Some((_, group)) = kept.iter().find(|(bound, _)| *bound == buffers) {
            return Ok(group.clone());
        }
        // A kept group's sizes were checked when it was made.
        let limit = self.device.limits().max_storage_buffer_binding_size;
        for (b, name) in launch.buffers.iter().zip(launch.kernel.bindings) {
            if let Some(b) = b.filter(|b| b.size > limit) {
                return Err(Error::Shape(format!(
                    "kernel `{}` binds {} bytes as `{}`, over the device's max_storage_buffer_binding_size ({limit})",
                    launch.kernel.name,
                    b.size,
                    name.name()
                )));
            }
        }
        let mut entries: ArrayVec<wgpu::BindGroupEntry, { crate::generated::MAX_BUFFERS + 1 }> = launch
            .buffers
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: match b {
                    Some(b) => wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: b.buffer,
                        offset: b.offset,
                        size: wgpu::BufferSize::new(b.size),
                    }),
                    None => self.unused_output.as_entire_binding(),
                },
            })
            .collect();
        let own = wgpu::BufferBinding { buffer: &self.params, offset: slot as u64, size: wgpu::BufferSize::new(16) };
        entries
            .push(wgpu::BindGroupEntry { binding: entries.len() as u32, resource: wgpu::BindingResource::Buffer(own) });
        let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(launch.kernel.name),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        if kept.is_full() {
            kept.remove(0);
        }
        kept.push((buffers, group.clone()));
        Ok(group)
    }

    /// The parameter block of launches with parameters `key`: from those kept, or made (and
    /// kept, dropping the oldest).
    fn param_block(&self, key: &LaunchParams) -> Result<wgpu::Buffer> {
        let mut kept = self.param_blocks.lock().map_err(|_| device_error("parameter blocks poisoned"))?;
        if let Some((_, block)) = kept.iter().find(|(k, _)| k == key) {
            return Ok(block.clone());
        }
        let mut bytes = [0u8; MAX_LAUNCHES * PARAMS_STRIDE];
        for (i, params) in key.iter().enumerate() {
            bytes[i * PARAMS_STRIDE..i * PARAMS_STRIDE + 16].copy_from_slice(bytemuck::cast_slice(params));
        }
        let block = self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("sampling-kernels parameter block"),
            contents: &bytes[..(key.len().max(1) - 1) * PARAMS_STRIDE + 16],
            usage: wgpu::BufferUsages::COPY_SRC,
        });
        if kept.is_full() {
            kept.remove(0);
        }
        kept.push((key.clone(), block.clone()));
        Ok(block)
    }

    /// Records a validated job's launches (see `launch::Plan`) into `encoder`: a copy of the
    /// call's parameter block into the parameter buffer, then each launch in its own pass with
    /// its own slot of it. Submits nothing; `engine` says the encoder is an engine's, which
    /// `time_launches` cannot time (its passes run after the clock is read).
    ///
    /// Everything that can fail (a missing feature, a pipeline, a bind group) is done before the
    /// first command is recorded, so an error leaves an engine's encoder as it was: a split
    /// launch recorded without the launch that clears its counters would corrupt later calls.
    /// What wgpu validates as commands are recorded (nothing these checked launches should
    /// fail) it reports where it reports an encoder's errors: at `finish` and `submit`.
    /// A launch whose kernel needs a feature the device lacks is refused, unless it visits no
    /// row (a step without seeded or filtered rows on a device without float64): that one is
    /// left out, so such a device still samples the rows it can.
    pub(crate) fn record(&self, encoder: &mut wgpu::CommandEncoder, job: Job<'_, Self>, engine: bool) -> Result<()> {
        let (target_groups, block, split_filters) =
            (self.target_groups, crate::generated::WGPU_BLOCK, self.split_filters);
        // Held while recording, so a call that grows the scratch cannot come between.
        let mut scratch = self.scratch.lock().map_err(|_| device_error("scratch lock poisoned"))?;
        let (len, zeros) = (
            |b: &wgpu::Buffer| b.size() as usize / 4,
            |name: &str, words| Ok(scratch_buffer(&self.device, name, words)),
        );
        scratch.fit(&job, target_groups, block, split_filters, Share::All, len, zeros)?;
        let (partials, counters) = (Bound::whole(&scratch.partials), Bound::whole(&scratch.counters));
        let split = Split {
            target_groups,
            block,
            partials,
            counters,
            split_filters,
            portable: self.portable,
            side: None,
            cut_here_groups: CUT_HERE_GROUPS,
            // WGSL merges a split row in a dispatch of its own.
            merge_dispatch: true,
        };
        let plan = Launch::plan(&job, &split)?;
        let mut launches: ArrayVec<(&Launch<Bound<'_>>, Arc<wgpu::ComputePipeline>), MAX_LAUNCHES> = ArrayVec::new();
        for launch in &plan {
            if let Some(feature) = self.missing_feature(launch.kernel) {
                if launch.visits_no_row() {
                    continue;
                }
                return Err(Error::Unsupported { backend: "wgpu", kernel: launch.kernel.name, feature });
            }
            launches.push((launch, self.pipeline(launch.kernel)?));
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let params = self.param_block(&launches.iter().map(|(launch, _)| launch.params).collect())?;
        let mut groups: ArrayVec<wgpu::BindGroup, MAX_LAUNCHES> = ArrayVec::new();
        for (i, (launch, pipeline)) in launches.iter().enumerate() {
            groups.push(self.bind_group(launch, pipeline, i * PARAMS_STRIDE)?);
        }
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(device_error(format!("kernel {}: {e}", plan[0].kernel.name)));
        }
        let timed = self.timed_before(launches.len() as u32, engine)?;
        let max_groups = self.device.limits().max_compute_workgroups_per_dimension;
        encoder.copy_buffer_to_buffer(&params, 0, &self.params, 0, params.size());
        for (i, ((launch, pipeline), group)) in launches.iter().zip(&groups).enumerate() {
            let timestamp_writes = match (timed, &self.timestamps) {
                (Some(before), Some(ts)) => Some(wgpu::ComputePassTimestampWrites {
                    query_set: &ts.set,
                    beginning_of_pass_write_index: (before + i as u32 == 0).then_some(0),
                    end_of_pass_write_index: Some(1),
                }),
                _ => None,
            };
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes });
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, group, &[]);
            pass.dispatch_workgroups(launch.work.groups(crate::generated::WGPU_BLOCK, max_groups), 1, 1);
        }
        Ok(())
    }
}

impl Device for WgpuBackend {
    type Handle<'a> = Bound<'a>;
    fn handle<'a, T: Element>(buf: &'a WgpuBuffer<T>) -> Bound<'a> {
        Bound { buffer: &buf.buffer, offset: buf.offset, size: padded_bytes::<T>(buf.len) }
    }
}

impl crate::backend::Sealed for WgpuBackend {}

impl Backend for WgpuBackend {
    type Buffer<T: Element> = WgpuBuffer<T>;

    fn describe(&self) -> String {
        format!("{} ({:?}, {:?})", self.info.name, self.info.backend, self.info.device_type)
    }
    fn upload_unchecked<T: Element>(&self, data: &[T]) -> Result<WgpuBuffer<T>> {
        let mut bytes = bytemuck::cast_slice::<T, u8>(data).to_vec();
        bytes.resize(padded_bytes::<T>(data.len()) as usize, 0);
        let buffer = self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("sampling-kernels upload"),
            contents: &bytes,
            usage: USAGE,
        });
        Ok(WgpuBuffer { buffer, offset: 0, len: data.len(), _elem: PhantomData })
    }
    fn zeros<T: Element>(&self, len: usize) -> Result<WgpuBuffer<T>> {
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("sampling-kernels buffer"),
            size: padded_bytes::<T>(len),
            usage: USAGE,
            mapped_at_creation: false,
        });
        Ok(WgpuBuffer { buffer, offset: 0, len, _elem: PhantomData })
    }
    unsafe fn write_unchecked<T: Element>(&self, buf: &mut WgpuBuffer<T>, data: &[T]) -> Result<()> {
        // wgpu writes whole words: only a write of an odd number of 16-bit values is copied
        // (and padded), so the per-step writes of row records and row lists allocate nothing here.
        let bytes = bytemuck::cast_slice::<T, u8>(data);
        if bytes.len().is_multiple_of(4) {
            self.queue.write_buffer(&buf.buffer, buf.offset, bytes);
        } else {
            let mut padded = bytes.to_vec();
            padded.resize(bytes.len().next_multiple_of(4), 0);
            self.queue.write_buffer(&buf.buffer, buf.offset, &padded);
        }
        Ok(())
    }
    fn download<T: Element>(&self, buf: &WgpuBuffer<T>) -> Result<Vec<T>> {
        // An engine's own buffer may lack COPY_SRC; wgpu would report that by panicking.
        if !buf.buffer.usage().contains(wgpu::BufferUsages::COPY_SRC) {
            return Err(device_error("download needs a buffer with COPY_SRC usage"));
        }
        let size = padded_bytes::<T>(buf.len);
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("sampling-kernels download"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = self.device.create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(&buf.buffer, buf.offset, &staging, 0, size);
        self.queue.submit([encoder.finish()]);
        self.map_read(&staging, buf.len)
    }
    fn len<T: Element>(buf: &WgpuBuffer<T>) -> usize {
        buf.len
    }
    fn reads_stage(&self) -> bool {
        true
    }
    fn missing_for_seeded(&self, filtered: bool) -> Option<&'static str> {
        let kernel = if filtered { FILTERED_SEEDED } else { KernelId::SeededLogitsF32 };
        let forced = (filtered && self.portable).then_some("the full filter kernels (with_portable_filters)");
        self.missing_feature(kernel.source()).or(forced)
    }
    /// Builds the pipeline of every kernel this device can run; with a pipeline cache, the
    /// driver's compiled code comes from it where an earlier start saved it.
    fn warm_up(&self) -> Result<usize> {
        // A device that runs the full filter kernels never launches the portable ones.
        let used = |k: &&KernelSource| self.portable || !PORTABLE_FILTERS.contains(&k.id);
        let runnable = crate::kernels::all().iter().filter(used).filter(|k| self.missing_feature(k).is_none());
        runnable.map(|k| self.pipeline(k)).try_fold(0, |n, p| p.map(|_| n + 1))
    }
    /// Records the job into an encoder of its own (see [`WgpuBackend::record`]) and submits it.
    fn run(&self, job: Job<'_, Self>) -> Result<()> {
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let mut encoder = self.device.create_command_encoder(&Default::default());
        self.record(&mut encoder, job, false)?;
        self.queue.submit([encoder.finish()]);
        match pollster::block_on(scope.pop()) {
            Some(e) => Err(device_error(e)),
            None => Ok(()),
        }
    }
}
