//! The wgpu backend: the generated WGSL on any adapter wgpu finds (Vulkan, Metal, DX12, and
//! Mesa's lavapipe on a CPU).

use crate::backend::{Backend, Job};
use crate::error::{Error, Result};
use crate::launch::{Device, Launch};
use crate::types::Element;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use wgpu::util::DeviceExt;

/// A wgpu storage buffer of `len` elements of `T`.
#[derive(Debug)]
pub struct WgpuBuffer<T> {
    buffer: wgpu::Buffer,
    len: usize,
    _elem: PhantomData<T>,
}

impl<T: Element> WgpuBuffer<T> {
    /// Wraps an engine's own buffer (created with `STORAGE` usage) holding `len` elements, so
    /// logits written by the engine's compute pass are sampled where they are.
    pub fn from_raw(buffer: wgpu::Buffer, len: usize) -> Result<Self> {
        let need = (len * size_of::<T>()) as u64;
        if buffer.size() < need {
            return Err(Error::BufferTooShort {
                name: "wgpu buffer",
                len: buffer.size() as usize / size_of::<T>(),
                need: len,
            });
        }
        if !buffer.usage().contains(wgpu::BufferUsages::STORAGE) {
            return Err(Error::Device { backend: "wgpu", message: "the buffer lacks STORAGE usage".into() });
        }
        Ok(WgpuBuffer { buffer, len, _elem: PhantomData })
    }
    /// The wrapped wgpu buffer.
    pub fn raw(&self) -> &wgpu::Buffer {
        &self.buffer
    }
}

/// Samples with the generated WGSL on one wgpu device and queue.
pub struct WgpuBackend {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    /// The 16-byte uniform of `batch, vocab, stride, flags`, rewritten before each submit.
    params: wgpu::Buffer,
    /// Bound where a kernel's log-probability output is not asked for.
    unused_output: wgpu::Buffer,
    pipelines: Mutex<HashMap<&'static str, Arc<wgpu::ComputePipeline>>>,
    /// Held from the parameter write to the submit, so concurrent calls cannot swap parameters.
    submit: Mutex<()>,
}

const USAGE: wgpu::BufferUsages =
    wgpu::BufferUsages::STORAGE.union(wgpu::BufferUsages::COPY_SRC).union(wgpu::BufferUsages::COPY_DST);

fn device_error(message: impl std::fmt::Display) -> Error {
    Error::Device { backend: "wgpu", message: message.to_string() }
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
        // Float64 and u64 for the seeded sampler, where the adapter has them.
        let wide = wgpu::Features::SHADER_F64 | wgpu::Features::SHADER_INT64;
        let desc = wgpu::DeviceDescriptor {
            label: Some("sampling-kernels"),
            required_features: adapter.features() & wide,
            required_limits: adapter.limits(),
            ..Default::default()
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&desc))
            .map_err(|e| Error::Unavailable(format!("wgpu device: {e}")))?;
        Ok(Self::from_device(device, queue, adapter.get_info()))
    }

    /// Uses an engine's own device and queue.
    pub fn from_device(device: wgpu::Device, queue: wgpu::Queue, info: wgpu::AdapterInfo) -> Self {
        let uniform = |label, usage| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: 16,
                usage,
                mapped_at_creation: false,
            })
        };
        let params = uniform("sampling-kernels params", wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST);
        let unused_output = uniform("sampling-kernels unused output", wgpu::BufferUsages::STORAGE);
        WgpuBackend {
            device,
            queue,
            info,
            params,
            unused_output,
            pipelines: Mutex::default(),
            submit: Mutex::default(),
        }
    }

    /// The adapter this backend runs on.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }

    fn pipeline(&self, launch: &Launch<&wgpu::Buffer>) -> Result<Arc<wgpu::ComputePipeline>> {
        let mut cache = self.pipelines.lock().map_err(|_| device_error("pipeline cache poisoned"))?;
        if let Some(p) = cache.get(launch.kernel.name) {
            return Ok(p.clone());
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(launch.kernel.name),
            source: wgpu::ShaderSource::Wgsl(launch.kernel.wgsl.into()),
        });
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(launch.kernel.name),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(device_error(format!("kernel {}: {e}", launch.kernel.name)));
        }
        let pipeline = Arc::new(pipeline);
        cache.insert(launch.kernel.name, pipeline.clone());
        Ok(pipeline)
    }

    fn dispatch(&self, launch: Launch<&wgpu::Buffer>) -> Result<()> {
        if launch.kernel.needs_64bit {
            let features = self.device.features();
            for (feature, name) in
                [(wgpu::Features::SHADER_F64, "SHADER_F64"), (wgpu::Features::SHADER_INT64, "SHADER_INT64")]
            {
                if !features.contains(feature) {
                    return Err(Error::Unsupported { backend: "wgpu", kernel: launch.kernel.name, feature: name });
                }
            }
        }
        let pipeline = self.pipeline(&launch)?;
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let layout = pipeline.get_bind_group_layout(0);
        let mut entries: Vec<wgpu::BindGroupEntry> = launch
            .buffers
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.unwrap_or(&self.unused_output).as_entire_binding(),
            })
            .collect();
        entries.push(wgpu::BindGroupEntry { binding: entries.len() as u32, resource: self.params.as_entire_binding() });
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(launch.kernel.name),
            layout: &layout,
            entries: &entries,
        });
        let max_groups = self.device.limits().max_compute_workgroups_per_dimension;
        let groups = launch.work.groups(crate::generated::WGPU_BLOCK, max_groups);
        let mut encoder = self.device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(groups, 1, 1);
        }
        let _order = self.submit.lock().map_err(|_| device_error("submit lock poisoned"))?;
        self.queue.write_buffer(&self.params, 0, bytemuck::cast_slice(&launch.params));
        self.queue.submit([encoder.finish()]);
        match pollster::block_on(scope.pop()) {
            Some(e) => Err(device_error(format!("kernel {}: {e}", launch.kernel.name))),
            None => Ok(()),
        }
    }
}

impl Device for WgpuBackend {
    type Handle<'a> = &'a wgpu::Buffer;
    fn handle<'a, T: Element>(buf: &'a WgpuBuffer<T>) -> &'a wgpu::Buffer {
        &buf.buffer
    }
}

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
        Ok(WgpuBuffer { buffer, len: data.len(), _elem: PhantomData })
    }
    fn zeros<T: Element>(&self, len: usize) -> Result<WgpuBuffer<T>> {
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("sampling-kernels buffer"),
            size: padded_bytes::<T>(len),
            usage: USAGE,
            mapped_at_creation: false,
        });
        Ok(WgpuBuffer { buffer, len, _elem: PhantomData })
    }
    fn write_unchecked<T: Element>(&self, buf: &mut WgpuBuffer<T>, data: &[T]) -> Result<()> {
        let mut bytes = bytemuck::cast_slice::<T, u8>(data).to_vec();
        bytes.resize(bytes.len().next_multiple_of(4), 0);
        self.queue.write_buffer(&buf.buffer, 0, &bytes);
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
        encoder.copy_buffer_to_buffer(&buf.buffer, 0, &staging, 0, size);
        self.queue.submit([encoder.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(device_error)?;
        rx.recv().map_err(device_error)?.map_err(device_error)?;
        let view = staging.get_mapped_range(..).map_err(device_error)?;
        let out = bytemuck::pod_collect_to_vec::<u8, T>(&view[..buf.len * size_of::<T>()]);
        drop(view);
        staging.unmap();
        Ok(out)
    }
    fn len<T: Element>(buf: &WgpuBuffer<T>) -> usize {
        buf.len
    }
    fn run(&self, job: Job<'_, Self>) -> Result<()> {
        self.dispatch(Launch::from_job(&job))
    }
}
