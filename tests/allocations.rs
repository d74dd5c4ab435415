//! Host allocations per decode step of `Sampler::step`, counted by a global allocator: that the
//! crate makes none of its own, and that none is kept (the bytes held after 1,000 steps are the
//! bytes held before).
//!
//! Engines want no allocation per step once warmed up. This crate's launch path formats no name
//! and collects bindings and arguments in fixed-capacity arrays; wgpu's bind groups are cached.
//! On CUDA a step must allocate nothing. wgpu itself allocates inside the command encoder, the
//! queue's writes and `submit`, so on wgpu a step may allocate what the same wgpu calls do
//! alone, measured beside it: the step's own launches (three here: the plain, seeded and filter
//! kernels) recorded with a trivial kernel after a copy of their parameters (from a block the
//! backend keeps per parameter set), and three writes (row records, two row lists).

#[macro_use]
mod common;

use sampling_kernels::{Backend, Logits, Output, RowParams, Sampler, Shape};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static HELD: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator, counting on the way.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        HELD.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        HELD.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Launches a step of [`steps_allocate_nothing_of_their_own`] makes on every backend: the plain
/// kernel, the seeded kernel over its one row (not split at this size), then the filter path's
/// three over the top-p row (the parts, the merge and the top-p cut).
const LAUNCHES: usize = 5;

/// What a backend's own API allocates for one step, which the step may allocate too.
pub trait Floor: Backend {
    fn floor(&self) -> usize;
}

#[cfg(feature = "cuda")]
impl Floor for sampling_kernels::CudaBackend {
    fn floor(&self) -> usize {
        0
    }
}

/// The allocations of 1,000 steps' worth of bare wgpu calls, per step: an error scope, a
/// command encoder with [`LAUNCHES`] compute passes of a trivial kernel (pipeline, bind group,
/// dispatch) after a buffer copy, three queue writes, `finish` and `submit`, inside two nested
/// error scopes (the submit's and the recording's); measured as the steps are (after 100
/// to warm up, no wait between them), on a device of the same adapter.
#[cfg(feature = "wgpu")]
impl Floor for sampling_kernels::WgpuBackend {
    fn floor(&self) -> usize {
        let instance = ::wgpu::Instance::new(::wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let options = ::wgpu::RequestAdapterOptions {
            power_preference: ::wgpu::PowerPreference::HighPerformance,
            ..Default::default()
        };
        let adapter = pollster::block_on(instance.request_adapter(&options)).unwrap();
        let (device, queue) = pollster::block_on(adapter.request_device(&Default::default())).unwrap();
        let wgsl = "@group(0) @binding(0) var<storage, read_write> x: array<u32>;
            @compute @workgroup_size(1) fn main() { x[0] = x[0] + 1u; }";
        let module = device.create_shader_module(::wgpu::ShaderModuleDescriptor {
            label: None,
            source: ::wgpu::ShaderSource::Wgsl(wgsl.into()),
        });
        let pipeline = device.create_compute_pipeline(&::wgpu::ComputePipelineDescriptor {
            label: None,
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let buffer = device.create_buffer(&::wgpu::BufferDescriptor {
            label: None,
            size: 1024,
            usage: ::wgpu::BufferUsages::STORAGE | ::wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let group = device.create_bind_group(&::wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[::wgpu::BindGroupEntry { binding: 0, resource: buffer.as_entire_binding() }],
        });
        let data = [0u8; 1024];
        let block = device.create_buffer(&::wgpu::BufferDescriptor {
            label: None,
            size: 528,
            usage: ::wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let mut start = 0;
        for n in 0..1100 {
            if n == 100 {
                start = ALLOCATIONS.load(Ordering::SeqCst);
            }
            let scope = device.push_error_scope(::wgpu::ErrorFilter::Validation);
            let mut encoder = device.create_command_encoder(&Default::default());
            let recording = device.push_error_scope(::wgpu::ErrorFilter::Validation);
            assert!(pollster::block_on(recording.pop()).is_none());
            encoder.copy_buffer_to_buffer(&block, 0, &buffer, 0, 528);
            for _ in 0..LAUNCHES {
                let mut pass = encoder.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, &group, &[]);
                pass.dispatch_workgroups(1, 1, 1);
            }
            for bytes in [192, 4, 4] {
                queue.write_buffer(&buffer, 0, &data[..bytes]);
            }
            queue.submit([encoder.finish()]);
            assert!(pollster::block_on(scope.pop()).is_none());
        }
        let per_step = (ALLOCATIONS.load(Ordering::SeqCst) - start) / 1000;
        device.poll(::wgpu::PollType::wait_indefinitely()).unwrap();
        per_step
    }
}

/// 2,000 steps of a batch with a plain, a greedy, a top-p and a seeded row, after 100 to warm up,
/// in two windows of 1,000: allocations are counted over the first, and the memory held must not
/// grow by 64 KiB in both. A leak grows in every window; a pool that a driver's queue depth
/// grows once (seen on NVIDIA's Vulkan driver: 91 KB in one run, 70 bytes in another) does not.
pub fn steps_allocate_nothing_of_their_own<B: Floor>(b: &B) {
    let shape = Shape::dense(4, 512);
    let logits: Vec<f32> = (0..shape.elements()).map(|i| (i % 17) as f32 / 4.0).collect();
    let x = b.upload(&logits).unwrap();
    let mut sampler = Sampler::new(b, 4).unwrap();
    let mut tokens = b.zeros::<u32>(4).unwrap();
    let mut rows = [
        RowParams::new(0.8, 1, 0),
        RowParams::greedy(),
        RowParams::new(0.8, 2, 0).with_top_p(0.9),
        RowParams::seeded(0.7, 3, 0),
    ];
    // (allocations, bytes held) after 100, 1,100 and 2,100 steps, each after a wait for the device.
    let mut marks = Vec::with_capacity(3);
    for n in 0..=2100u64 {
        if n % 1000 == 100 {
            b.download(&tokens).unwrap();
            marks.push((ALLOCATIONS.load(Ordering::SeqCst), HELD.load(Ordering::SeqCst)));
        }
        if n == 2100 {
            break;
        }
        for r in rows.iter_mut() {
            *r = r.with_offset(n);
        }
        sampler.step(shape, Logits::F32(&x), &rows, Output::new(&mut tokens)).unwrap();
    }
    let per_step = (marks[1].0 - marks[0].0) / 1000;
    let grown = [marks[1].1 - marks[0].1, marks[2].1 - marks[1].1];
    let floor = b.floor();
    eprintln!(
        "{}: {per_step} allocations a step, the backend's own calls {floor}; {grown:?} bytes more held after each 1,000 steps",
        b.describe()
    );
    assert!(per_step <= floor, "{per_step} allocations a step, where the backend's own calls make {floor}");
    assert!(grown.iter().any(|&g| g < 64 << 10), "{grown:?} bytes more held after each 1,000 steps");
}

device_suites!(steps_allocate_nothing_of_their_own);
