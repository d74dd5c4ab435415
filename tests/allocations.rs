//! Host allocations per decode step of `Sampler::step`, counted by a global allocator: how many,
//! and that none is kept (the bytes held after 1,000 steps are the bytes held before).
//!
//! Engines want no allocation per step once warmed up. This crate's launch path formats no name,
//! but collects each launch's bindings in two small `Vec`s, and wgpu allocates inside
//! `create_bind_group`, the command encoder and `submit`: the test bounds the count (a
//! regression guard) and prints it, and fails on any growth of the bytes held.

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

/// Allocations one step may make: wgpu's own, about 84 a launch on lavapipe (two launches a step).
const PER_STEP_BUDGET: usize = 256;

/// 2,000 steps of a batch with a plain, a greedy, a top-p and a seeded row, after 100 to warm up,
/// in two windows of 1,000: allocations are counted over the first, and the memory held must not
/// grow by 64 KiB in both. A leak grows in every window; a pool that a driver's queue depth
/// grows once (seen on NVIDIA's Vulkan driver: 91 KB in one run, 70 bytes in another) does not.
pub fn steps_allocate_within_budget<B: Backend>(b: &B) {
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
    eprintln!("{}: {per_step} allocations a step; {grown:?} bytes more held after each 1,000 steps", b.describe());
    assert!(per_step <= PER_STEP_BUDGET, "{per_step} allocations a step");
    assert!(grown.iter().any(|&g| g < 64 << 10), "{grown:?} bytes more held after each 1,000 steps");
}

device_suites!(steps_allocate_within_budget);
