//! Host allocations per decode step of `Sampler::step`, counted by a global allocator.

#[macro_use]
mod common;

use sampling_kernels::{Backend, Logits, Output, RowParams, Sampler, Shape};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

pub fn steps_allocate_nothing<B: Backend>(b: &B) {
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
    for step in 0..1100u64 {
        if step == 100 {
            ALLOCATIONS.store(0, Ordering::SeqCst);
        }
        for r in rows.iter_mut() {
            *r = r.with_offset(step);
        }
        sampler.step(shape, Logits::F32(&x), &rows, Output::new(&mut tokens)).unwrap();
    }
    let n = ALLOCATIONS.load(Ordering::SeqCst);
    eprintln!("{}: {n} allocations in 1000 steps", b.describe());
}

device_suites!(steps_allocate_nothing);
