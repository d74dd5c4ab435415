//! The per-row sampler: a batch mixing greedy, Philox-race, filtered and seeded rows, and rows
//! the one-read filter path does not take, gets for each row exactly the token its own path
//! gives alone, on every backend, whether the backend splits the filtered rows over workgroups
//! or not.

#[macro_use]
mod common;

use common::Rng;
use sampling_kernels::sglang::SamplingParams;
use sampling_kernels::{Backend, Error, FilterOrder, Input, Logits, Output, RowMode, RowParams, Sampler, Shape};

/// Row `r` is greedy, plain, seeded, top-p, seeded with top-p and top-k, top-k-and-min-p (top-k
/// first), or top-k first above the one-read path's top-k with top-p, by `r % 7` (and every mix
/// of them in smaller batches).
fn mixed_rows(rng: &mut Rng, batch: usize, step: u64) -> Vec<RowParams> {
    (0..batch)
        .map(|r| match r % 7 {
            0 => RowParams::greedy(),
            1 => RowParams::new(0.9, rng.next_u64(), step),
            2 => RowParams::seeded(1.1, rng.next_u64(), step),
            3 => RowParams::new(0.9, rng.next_u64(), step).with_top_p(0.8),
            4 => RowParams::seeded(0.8, rng.next_u64(), step).with_top_p(0.9).with_top_k(30),
            5 => RowParams::new(1.2, rng.next_u64(), step)
                .with_top_k(40)
                .with_top_p(0.9)
                .with_min_p(0.01)
                .with_order(FilterOrder::TopKFirst),
            // Off the one-read path (top-k first above its top-k, with top-p): the filter
            // kernels' own plan over its own list.
            _ => RowParams::new(1.0, rng.next_u64(), step)
                .with_top_k(300)
                .with_top_p(0.9)
                .with_order(FilterOrder::TopKFirst),
        })
        .collect()
}

/// The filter kernel on every row.
fn filtered<B: Backend>(
    b: &B,
    shape: Shape,
    logits: Logits<'_, B>,
    rows: &B::Buffer<RowParams>,
    out: Output<'_, B>,
) -> sampling_kernels::Result<()> {
    b.sample_filtered(shape, Input::Logits(logits), rows, out)
}

/// Tokens and log-probabilities of one call on the whole batch.
fn call<B: Backend>(
    b: &B,
    shape: Shape,
    x: &B::Buffer<f32>,
    rows: &[RowParams],
    launch: fn(&B, Shape, Logits<'_, B>, &B::Buffer<RowParams>, Output<'_, B>) -> sampling_kernels::Result<()>,
) -> (Vec<u32>, Vec<f32>) {
    let r = b.upload(rows).unwrap();
    let (mut t, mut lp) = (b.zeros::<u32>(shape.batch).unwrap(), b.zeros::<f32>(shape.batch).unwrap());
    launch(b, shape, Logits::F32(x), &r, Output::new(&mut t).with_logprobs(&mut lp)).unwrap();
    (b.download(&t).unwrap(), b.download(&lp).unwrap())
}

pub fn mixed_batch_matches_each_path<B: Backend>(b: &B) {
    let mut rng = Rng::new(8);
    let shape = Shape { batch: 30, vocab: 3001, stride: 3008 };
    let logits: Vec<f32> = (0..shape.elements()).map(|_| rng.normal(2.5) as f32).collect();
    let x = b.upload(&logits).unwrap();
    let rows = mixed_rows(&mut rng, shape.batch, 4);
    let (mixed, mixed_lp) = call(b, shape, &x, &rows, B::sample);
    let (raced, raced_lp) = call(b, shape, &x, &rows, B::race_from_logits);
    let (seeded, seeded_lp) = call(b, shape, &x, &rows, B::seeded_from_logits);
    let (kept, kept_lp) = call(b, shape, &x, &rows, filtered);
    for (r, p) in rows.iter().enumerate() {
        let (want, want_lp) = match p.mode() {
            _ if p.has_filters() => (kept[r], kept_lp[r]),
            RowMode::Seeded => (seeded[r], seeded_lp[r]),
            RowMode::Race => (raced[r], raced_lp[r]),
            other => panic!("row mode {other:?} has no path in this test"),
        };
        // The token exactly; the log-probability within a few ulp, since a Vulkan driver may
        // fuse `a * b + c` differently in two kernels (NVIDIA's does).
        assert_eq!(mixed[r], want, "row {r} ({:?})", p);
        let close = mixed_lp[r] == want_lp || (mixed_lp[r] - want_lp).abs() <= 1e-6 * want_lp.abs();
        assert!(close, "row {r} ({:?}): log-probability {} vs {want_lp}", p, mixed_lp[r]);
    }
}

/// The token row `row` of `logits` gets from its own path alone, as a batch of one: greedy and
/// Philox rows from [`Backend::race_from_logits`], seeded rows from
/// [`Backend::seeded_from_logits`], rows with a filter from [`Backend::sample_filtered`].
fn alone<B: Backend>(b: &B, logits: &[f32], row: RowParams) -> u32 {
    let shape = Shape::dense(1, logits.len());
    let (x, rows) = (b.upload(logits).unwrap(), b.upload(&[row]).unwrap());
    let mut t = b.zeros::<u32>(1).unwrap();
    let out = Output::new(&mut t);
    if row.is_sampled() && row.has_filters() {
        b.sample_filtered(shape, Input::Logits(Logits::F32(&x)), &rows, out).unwrap();
    } else if row.mode() == RowMode::Seeded {
        b.seeded_from_logits(shape, Logits::F32(&x), &rows, out).unwrap();
    } else {
        b.race_from_logits(shape, Logits::F32(&x), &rows, out).unwrap();
    }
    b.download(&t).unwrap()[0]
}

/// The step API: one row buffer for 100 steps of a changing mix; each row of each step gets the
/// token its own path gives it alone (so the oracle is not the per-row sampler itself, on any
/// backend).
pub fn sampler_steps<B: Backend>(b: &B) {
    let mut rng = Rng::new(12);
    let shape = Shape::dense(9, 700);
    let logits: Vec<f32> = (0..shape.elements()).map(|_| rng.normal(2.0) as f32).collect();
    let x = b.upload(&logits).unwrap();
    let mut sampler = Sampler::new(b, 16).unwrap();
    let mut t = b.zeros::<u32>(shape.batch).unwrap();
    for step in 0..100 {
        let mut rows = mixed_rows(&mut rng, shape.batch, step);
        rows.rotate_left(step as usize % 7);
        sampler.step(shape, Logits::F32(&x), &rows, Output::new(&mut t)).unwrap();
        let want: Vec<u32> = (0..shape.batch).map(|r| alone(b, &logits[r * 700..(r + 1) * 700], rows[r])).collect();
        assert_eq!(b.download(&t).unwrap(), want, "step {step}");
    }
    let err = sampler.step(shape, Logits::F32(&x), &[RowParams::greedy()], Output::new(&mut t));
    assert!(matches!(err, Err(Error::Shape(_))), "{err:?}");
}

/// An engine keeps the backend and its sampler in one struct: the sampler shares the backend
/// through an `Arc`, and samples as one that borrows it.
#[test]
fn sampler_shares_its_backend() {
    use sampling_kernels::CpuBackend;
    use std::sync::Arc;
    struct Engine {
        backend: Arc<CpuBackend>,
        sampler: Sampler<Arc<CpuBackend>>,
    }
    let backend = Arc::new(CpuBackend);
    let mut engine = Engine { sampler: Sampler::new(Arc::clone(&backend), 4).unwrap(), backend };
    let mut rng = Rng::new(5);
    let shape = Shape::dense(4, 300);
    let logits: Vec<f32> = (0..shape.elements()).map(|_| rng.normal(2.0) as f32).collect();
    let rows = mixed_rows(&mut rng, shape.batch, 3);
    let x = engine.backend.upload(&logits).unwrap();
    let mut t = engine.backend.zeros::<u32>(shape.batch).unwrap();
    engine.sampler.step(shape, Logits::F32(&x), &rows, Output::new(&mut t)).unwrap();
    let want: Vec<u32> =
        (0..shape.batch).map(|r| alone(&*engine.backend, &logits[r * 300..(r + 1) * 300], rows[r])).collect();
    assert_eq!(t, want);
}

/// A sampling call gives the same rows on one device whether the filtered rows are split over
/// workgroups (the staged filter kernel after the plain launches, as on GPUs) or not (one
/// workgroup each, as on a CPU adapter), through [`Backend::sample`] and [`Sampler::step`]
/// (which lists the filtered rows). Small batches of long rows, so the plain rows are split too
/// and the filter launches follow a split launch and its combine in the same submission.
pub fn split_and_whole_rows_agree<B: Backend>(split: &B, whole: &B) {
    let mut rng = Rng::new(31);
    let mut rows_seen = 0;
    for shape in [Shape::dense(2, 151_936), Shape::dense(7, 40_000)] {
        let logits: Vec<f32> = (0..shape.elements()).map(|_| rng.normal(3.0) as f32).collect();
        let mut rows = mixed_rows(&mut rng, shape.batch, 5);
        rows.reverse();
        let run = |b: &B, stepped: bool| {
            let (x, r) = (b.upload(&logits).unwrap(), b.upload(&rows).unwrap());
            let (mut t, mut lp) = (b.zeros::<u32>(shape.batch).unwrap(), b.zeros::<f32>(shape.batch).unwrap());
            let mut st = b.zeros::<u32>(shape.batch).unwrap();
            let out = Output::new(&mut t).with_logprobs(&mut lp).with_status(&mut st);
            if stepped {
                Sampler::new(b, shape.batch).unwrap().step(shape, Logits::F32(&x), &rows, out).unwrap();
            } else {
                b.sample(shape, Logits::F32(&x), &r, out).unwrap();
            }
            (b.download(&t).unwrap(), b.download(&lp).unwrap(), b.download(&st).unwrap())
        };
        for stepped in [false, true] {
            let (s, w) = (run(split, stepped), run(whole, stepped));
            for r in 0..shape.batch {
                let what = format!("row {r} of {shape:?} ({}), {:?}", if stepped { "step" } else { "sample" }, rows[r]);
                assert_eq!((s.0[r], s.2[r]), (w.0[r], w.2[r]), "token and status, {what}");
                let close = s.1[r] == w.1[r] || (s.1[r] - w.1[r]).abs() <= 1e-6 * w.1[r].abs();
                assert!(close, "log-probability {} vs {}, {what}", s.1[r], w.1[r]);
                rows_seen += 1;
            }
        }
    }
    eprintln!("{}: {rows_seen} rows equal split and whole", split.describe());
}

#[cfg(feature = "wgpu")]
#[test]
fn wgpu_split_and_whole_rows_agree() {
    // Two backends of their own: one splits filtered rows (as GPUs do), one does not.
    let made = crate::common::wgpu().map(|_| {
        let make = |split| sampling_kernels::WgpuBackend::new().unwrap().with_split_filters(split);
        (make(true), make(false))
    });
    crate::common::on("wgpu", "split_and_whole_rows_agree", made.as_ref().map(|(s, _)| s), |s| {
        split_and_whole_rows_agree(s, &made.as_ref().unwrap().1)
    });
}

/// A device made with no features and default limits (Metal has no float64; an engine's default
/// device has 16 KiB of workgroup memory) samples greedy, Philox and filtered rows through
/// [`Sampler::step`], the CPU's tokens: the filtered rows (every filter, both orders, the
/// one-read path's kinds and the off-path one) take the portable filter kernel (u64 as two
/// words, no float64, an 8 KiB list). A seeded row there is a typed error naming the row and the
/// feature, before anything is launched. `sample_filtered`, whose rows the host cannot see,
/// still needs the features and names the first it lacks.
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_featureless_device_samples_plain_and_filtered_rows() {
    let made = crate::common::featureless_wgpu();
    crate::common::on("wgpu", "featureless_device_samples_plain_and_filtered_rows", made.as_ref(), |b| {
        let mut rng = Rng::new(40);
        let shape = Shape::dense(9, 5000);
        let logits: Vec<f32> = (0..shape.elements()).map(|_| rng.normal(2.0) as f32).collect();
        let rows: Vec<RowParams> = (0..shape.batch as u64)
            .map(|r| {
                let sampled = RowParams::new(0.8, rng.next_u64(), r);
                match r {
                    0 => RowParams::greedy(),
                    1 => sampled,
                    2 => sampled.with_top_k(20).with_top_p(0.95),
                    3 => sampled.with_top_p(0.9),
                    4 => sampled.with_min_p(0.05),
                    5 => sampled.with_top_k(300).with_top_p(0.9).with_order(FilterOrder::TopKFirst),
                    6 => sampled.with_top_k(1000),
                    7 => RowParams::greedy().with_top_k(5),
                    _ => sampled.with_top_k(40).with_min_p(0.1).with_order(FilterOrder::TopKFirst),
                }
            })
            .collect();
        let (want, _) =
            call(&sampling_kernels::CpuBackend, shape, &logits, &rows, sampling_kernels::CpuBackend::sample);
        let x = b.upload(&logits).unwrap();
        let mut t = b.zeros::<u32>(shape.batch).unwrap();
        let mut sampler = Sampler::new(b, shape.batch).unwrap();
        sampler.step(shape, Logits::F32(&x), &rows, Output::new(&mut t)).unwrap();
        assert_eq!(b.download(&t).unwrap(), want);
        // Random filters (either order) on rows with ties and -inf blocks, 48 rows more.
        for _ in 0..3 {
            let shape = Shape::dense(16, 3000);
            let logits: Vec<f32> = (0..shape.elements())
                .map(|j| match rng.below(20) {
                    0 => f32::NEG_INFINITY,
                    1..=4 => (j % 7) as f32 * 0.5,
                    _ => rng.normal(2.5) as f32,
                })
                .collect();
            let rows: Vec<RowParams> = (0..shape.batch)
                .map(|r| {
                    let row = RowParams::new(0.5 + rng.unit() as f32, rng.next_u64(), r as u64);
                    let row = if rng.below(2) == 0 { row.with_top_k(1 + rng.below(2500) as u32) } else { row };
                    let row = if rng.below(2) == 0 { row.with_top_p(0.05 + 0.9 * rng.unit() as f32) } else { row };
                    let row = if rng.below(3) == 0 { row.with_min_p(0.2 * rng.unit() as f32) } else { row };
                    let order = if rng.below(2) == 0 { FilterOrder::Joint } else { FilterOrder::TopKFirst };
                    row.with_order(order)
                })
                .collect();
            let (want, _) =
                call(&sampling_kernels::CpuBackend, shape, &logits, &rows, sampling_kernels::CpuBackend::sample);
            let x = b.upload(&logits).unwrap();
            let mut t = b.zeros::<u32>(shape.batch).unwrap();
            Sampler::new(b, shape.batch).unwrap().step(shape, Logits::F32(&x), &rows, Output::new(&mut t)).unwrap();
            assert_eq!(b.download(&t).unwrap(), want, "{rows:?}");
        }
        let mut seeded = rows.clone();
        seeded[4] = RowParams::seeded(0.8, 3, 1).with_top_p(0.9);
        let err = sampler.step(shape, Logits::F32(&x), &seeded, Output::new(&mut t)).unwrap_err();
        assert!(matches!(err, Error::UnsupportedRow { row: 4, feature: "SHADER_F64" }), "{err}");
        let r = b.upload(&rows).unwrap();
        let err = b.sample_filtered(shape, Input::Logits(Logits::F32(&x)), &r, Output::new(&mut t)).unwrap_err();
        assert!(matches!(err, Error::Unsupported { feature: "SHADER_INT64", .. }), "{err}");
    });
}

/// A device with every feature but wgpu's default 16 KiB of workgroup memory: `Sampler::step`
/// samples filtered rows with the portable kernel, and `sample_filtered` (the one-read path's
/// kernels declare about 26 KB) gets `Error::Unsupported` naming the limit to raise.
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_default_limits_device_says_which_limit_to_raise() {
    use sampling_kernels::WgpuBackend;
    let made = crate::common::engine_wgpu(|adapter| sampling_kernels::wgpu::DeviceDescriptor {
        required_features: adapter.features() & WgpuBackend::FEATURES,
        ..Default::default()
    });
    crate::common::on("wgpu", "default_limits_device_says_which_limit_to_raise", made.as_ref().map(|m| &m.0), |b| {
        let shape = Shape::dense(2, 5000);
        let mut rng = Rng::new(41);
        let logits: Vec<f32> = (0..shape.elements()).map(|_| rng.normal(2.0) as f32).collect();
        let rows = [RowParams::new(0.8, 1, 2).with_top_p(0.9), RowParams::seeded(0.8, 3, 4).with_top_k(30)];
        let (want, _) =
            call(&sampling_kernels::CpuBackend, shape, &logits, &rows, sampling_kernels::CpuBackend::sample);
        let x = b.upload(&logits).unwrap();
        let mut t = b.zeros::<u32>(shape.batch).unwrap();
        let err = b
            .sample_filtered(shape, Input::Logits(Logits::F32(&x)), &b.upload(&rows).unwrap(), Output::new(&mut t))
            .unwrap_err();
        let named =
            matches!(err, Error::Unsupported { feature, .. } if feature.contains("max_compute_workgroup_storage_size"));
        assert!(named, "{err}");
        // The seeded row with a filter would need the full filter kernels: refused, naming it
        // and the limit; the Philox row alone takes the portable kernel.
        let mut sampler = Sampler::new(b, shape.batch).unwrap();
        let err = sampler.step(shape, Logits::F32(&x), &rows, Output::new(&mut t)).unwrap_err();
        let named = matches!(err, Error::UnsupportedRow { row: 1, feature } if feature.contains("workgroup_storage"));
        assert!(named, "{err}");
        let one = Shape::dense(1, 5000);
        sampler.step(one, Logits::F32(&x), &rows[..1], Output::new(&mut t)).unwrap();
        assert_eq!(b.download(&t).unwrap()[0], want[0]);
    });
}

/// A device with every feature and the adapter's limits but WebGPU's default 8 storage buffers a
/// stage: the seeded kernel from logits (9) is refused by name, not a validation error, and
/// filtered rows take the portable kernel (8), with the CPU's tokens.
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_eight_storage_buffers_device_says_which_limit_to_raise() {
    use sampling_kernels::WgpuBackend;
    let made = crate::common::engine_wgpu(|adapter| {
        let mut d = WgpuBackend::device_descriptor(adapter);
        d.required_limits.max_storage_buffers_per_shader_stage = 8;
        d
    });
    crate::common::on(
        "wgpu",
        "eight_storage_buffers_device_says_which_limit_to_raise",
        made.as_ref().map(|m| &m.0),
        |b| {
            let shape = Shape::dense(3, 5000);
            let mut rng = Rng::new(42);
            let logits: Vec<f32> = (0..shape.elements()).map(|_| rng.normal(2.0) as f32).collect();
            let rows =
                [RowParams::new(0.8, 1, 2).with_top_p(0.9), RowParams::new(0.7, 5, 6), RowParams::seeded(0.8, 3, 4)];
            let (want, _) =
                call(&sampling_kernels::CpuBackend, shape, &logits, &rows, sampling_kernels::CpuBackend::sample);
            let x = b.upload(&logits).unwrap();
            let mut t = b.zeros::<u32>(shape.batch).unwrap();
            let mut sampler = Sampler::new(b, shape.batch).unwrap();
            let err = sampler.step(shape, Logits::F32(&x), &rows, Output::new(&mut t)).unwrap_err();
            let named = matches!(err, Error::UnsupportedRow { row: 2, feature } if feature.contains("storage_buffers"));
            assert!(named, "{err}");
            let two = Shape::dense(2, 5000);
            sampler.step(two, Logits::F32(&x), &rows[..2], Output::new(&mut t)).unwrap();
            assert_eq!(b.download(&t).unwrap()[..2], want[..2]);
        },
    );
}

/// `warm_up` builds the pipeline of every kernel the device runs: where it has float64 and
/// 64-bit integers, all of them but the three portable filter kernels (WGSL only, for devices
/// without them); those that need neither on a featureless device (counted from the kernel
/// table, not by the backend); sampling then gives the CPU's tokens.
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_warm_up_builds_what_the_device_runs() {
    use sampling_kernels::{kernels, wgpu};
    let bare = crate::common::featureless_wgpu();
    crate::common::on("wgpu", "warm_up_builds_what_the_device_runs", bare.as_ref(), |bare| {
        let full = crate::common::wgpu().unwrap();
        let plain = kernels::all().iter().filter(|k| !k.needs_f64 && !k.needs_int64).count();
        assert!(plain < kernels::all().len());
        assert_eq!(bare.warm_up().unwrap(), plain);
        let f = full.device().features();
        if f.contains(wgpu::Features::SHADER_F64 | wgpu::Features::SHADER_INT64) {
            let wgsl_only = kernels::all().iter().filter(|k| k.cuda.is_none()).count();
            assert_eq!(wgsl_only, 3);
            assert_eq!(full.warm_up().unwrap(), kernels::all().len() - wgsl_only);
        }
        if f.contains(wgpu::Features::PIPELINE_CACHE) {
            assert!(full.pipeline_cache_data().is_some_and(|d| !d.is_empty()));
        }
        sampler_steps(full);
    });
}

/// An engine's logits and tokens live inside its own arenas, at offsets: `Sampler::step` reads
/// and writes them there, with the CPU oracle's tokens, and an offset wgpu cannot bind or a
/// range past the buffer is a typed error.
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_samples_an_engines_buffers_in_place() {
    use sampling_kernels::backend::wgpu::OFFSET_ALIGNMENT;
    use sampling_kernels::{wgpu, WgpuBuffer};
    // The device an engine makes for the kernels (the adapter's features and limits).
    let made = crate::common::engine_wgpu(sampling_kernels::WgpuBackend::device_descriptor);
    let backend = made.as_ref().map(|(b, _, _)| b);
    crate::common::on("wgpu", "samples_an_engines_buffers_in_place", backend, |b| {
        let (_, device, queue) = made.as_ref().unwrap();
        let mut rng = Rng::new(41);
        let shape = Shape { batch: 6, vocab: 3000, stride: 3008 };
        let logits: Vec<f32> = (0..shape.elements()).map(|_| rng.normal(2.0) as f32).collect();
        let rows = mixed_rows(&mut rng, shape.batch, 2);
        let cpu = sampling_kernels::CpuBackend;
        let mut want = vec![0u32; shape.batch];
        Sampler::new(&cpu, shape.batch)
            .unwrap()
            .step(shape, Logits::F32(&logits), &rows, Output::new(&mut want))
            .unwrap();
        // The arena: other data (NaN, which a read of it would turn into a wrong token) before
        // and after the logits.
        let at = 3 * OFFSET_ALIGNMENT;
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        let arena = |bytes: u64| {
            device.create_buffer(&wgpu::BufferDescriptor { label: None, size: bytes, usage, mapped_at_creation: false })
        };
        let logit_arena = arena(at + 4 * shape.elements() as u64 + 4096);
        queue.write_buffer(&logit_arena, 0, bytemuck::cast_slice(&vec![f32::NAN; logit_arena.size() as usize / 4]));
        queue.write_buffer(&logit_arena, at, bytemuck::cast_slice(&logits));
        let token_arena = arena(at + 1024);
        queue.write_buffer(&token_arena, 0, bytemuck::cast_slice(&vec![u32::MAX; token_arena.size() as usize / 4]));
        let x = WgpuBuffer::<f32>::from_raw_at(logit_arena.clone(), at, shape.elements()).unwrap();
        let mut t = WgpuBuffer::<u32>::from_raw_at(token_arena.clone(), at, shape.batch).unwrap();
        Sampler::new(b, shape.batch).unwrap().step(shape, Logits::F32(&x), &rows, Output::new(&mut t)).unwrap();
        assert_eq!(b.download(&t).unwrap(), want);
        // The words around the tokens are the engine's, untouched.
        let whole = WgpuBuffer::<u32>::from_raw(token_arena.clone(), token_arena.size() as usize / 4).unwrap();
        let words = b.download(&whole).unwrap();
        let first = at as usize / 4;
        assert!(words[..first].iter().chain(&words[first + shape.batch..]).all(|&w| w == u32::MAX));
        let err = WgpuBuffer::<f32>::from_raw_at(logit_arena.clone(), at + 4, 8).unwrap_err();
        assert!(matches!(err, Error::Shape(_)), "{err}");
        let err = WgpuBuffer::<u32>::from_raw_at(token_arena, at, 1024).unwrap_err();
        assert!(matches!(err, Error::BufferTooShort { .. }), "{err}");
    });
}

/// A binding covers the buffer's elements, not the rest of an engine's buffer, and one larger
/// than the device's `max_storage_buffer_binding_size` is a typed error naming that limit, not a
/// wgpu validation failure: on a device asking for a 64 KiB limit, 2 rows of 5000 logits (40 KB)
/// give the CPU's tokens, and 4 rows (80 KB) the error.
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_bindings_stay_within_the_device_limit() {
    use sampling_kernels::wgpu;
    const LIMIT: u64 = 1 << 16;
    let made = crate::common::engine_wgpu(|adapter| wgpu::DeviceDescriptor {
        required_limits: wgpu::Limits { max_storage_buffer_binding_size: LIMIT, ..adapter.limits() },
        ..Default::default()
    })
    .map(|(backend, device, _)| {
        assert_eq!(device.limits().max_storage_buffer_binding_size, LIMIT);
        backend
    });
    crate::common::on("wgpu", "bindings_stay_within_the_device_limit", made.as_ref(), |b| {
        let mut rng = Rng::new(42);
        for batch in [2, 4] {
            let shape = Shape::dense(batch, 5000);
            let logits: Vec<f32> = (0..shape.elements()).map(|_| rng.normal(2.0) as f32).collect();
            let rows: Vec<RowParams> = (0..batch as u64).map(|r| RowParams::new(0.8, rng.next_u64(), r)).collect();
            let (want, _) =
                call(&sampling_kernels::CpuBackend, shape, &logits, &rows, sampling_kernels::CpuBackend::sample);
            let x = b.upload(&logits).unwrap();
            let mut t = b.zeros::<u32>(batch).unwrap();
            let got = Sampler::new(b, batch).unwrap().step(shape, Logits::F32(&x), &rows, Output::new(&mut t));
            if 4 * shape.elements() as u64 <= LIMIT {
                got.unwrap();
                assert_eq!(b.download(&t).unwrap(), want);
            } else {
                let err = got.unwrap_err();
                assert!(matches!(&err, Error::Shape(m) if m.contains("max_storage_buffer_binding_size")), "{err}");
            }
        }
    });
}

/// An engine records its own work, then sampling steps, into one command encoder and submits it
/// once (`Sampler::step_into`). Each row gets exactly what the same step gives when it submits
/// itself (token, status and log-probability: the same launches on the same device), and the
/// CPU oracle's token. The engine's work is a copy of the logits into the buffer the sampler
/// reads, which holds their negation before it, so a step that ran before the engine's work
/// gives other tokens (checked). Two steps of different shapes, with greedy, Philox, seeded and
/// filtered rows, recorded into the same encoder, each read their own launch parameters.
#[cfg(feature = "wgpu")]
fn step_into_an_engines_encoder(b: &sampling_kernels::WgpuBackend) {
    use sampling_kernels::{WgpuBackend, WgpuBuffer};
    let (device, queue) = (b.device(), b.queue());
    let mut rng = Rng::new(54);
    let steps: Vec<(Shape, Vec<f32>, Vec<RowParams>)> =
        [Shape { batch: 14, vocab: 3001, stride: 3008 }, Shape::dense(9, 700)]
            .into_iter()
            .map(|shape| {
                let logits: Vec<f32> = (0..shape.elements()).map(|_| rng.normal(2.5) as f32).collect();
                (shape, logits, mixed_rows(&mut rng, shape.batch, 6))
            })
            .collect();
    // A step's outputs: tokens, statuses, log-probabilities.
    let outputs =
        |batch| (b.zeros::<u32>(batch).unwrap(), b.zeros::<u32>(batch).unwrap(), b.zeros::<f32>(batch).unwrap());
    type Buffers = (WgpuBuffer<u32>, WgpuBuffer<u32>, WgpuBuffer<f32>);
    fn out(o: &mut Buffers) -> Output<'_, WgpuBackend> {
        Output::new(&mut o.0).with_status(&mut o.1).with_logprobs(&mut o.2)
    }
    let download = |o: &Buffers| (b.download(&o.0).unwrap(), b.download(&o.1).unwrap(), b.download(&o.2).unwrap());
    // Each step submitted on its own, from the logits and from their negation.
    let submitted = |logits: &[f32], shape: Shape, rows: &[RowParams]| {
        let (x, mut o) = (b.upload(logits).unwrap(), outputs(shape.batch));
        Sampler::new(b, shape.batch).unwrap().step(shape, Logits::F32(&x), rows, out(&mut o)).unwrap();
        download(&o)
    };
    let want: Vec<_> = steps.iter().map(|(shape, logits, rows)| submitted(logits, *shape, rows)).collect();
    let cpu = sampling_kernels::CpuBackend;
    for ((shape, logits, rows), want) in steps.iter().zip(&want) {
        let mut oracle = vec![0u32; shape.batch];
        Sampler::new(&cpu, shape.batch)
            .unwrap()
            .step(*shape, Logits::F32(logits), rows, Output::new(&mut oracle))
            .unwrap();
        assert_eq!(want.0, oracle, "submitted step of {shape:?} against the CPU oracle");
        let negated: Vec<f32> = logits.iter().map(|l| -l).collect();
        assert_ne!(
            submitted(&negated, *shape, rows).0,
            want.0,
            "the logits before the engine's copy give other tokens"
        );
    }
    // The engine's encoder: per step, its copy of the logits, then the step.
    let mut encoder = device.create_command_encoder(&Default::default());
    let mut recorded = Vec::new();
    for (shape, logits, rows) in &steps {
        let negated: Vec<f32> = logits.iter().map(|l| -l).collect();
        let (model, x) = (b.upload(logits).unwrap(), b.upload(&negated).unwrap());
        encoder.copy_buffer_to_buffer(model.raw(), 0, x.raw(), 0, None);
        let (mut sampler, mut o) = (Sampler::new(b, shape.batch).unwrap(), outputs(shape.batch));
        sampler.step_into(&mut encoder, *shape, Logits::F32(&x), rows, out(&mut o)).unwrap();
        recorded.push(o);
    }
    queue.submit([encoder.finish()]);
    for (((shape, _, rows), want), o) in steps.iter().zip(&want).zip(&recorded) {
        let got = download(o);
        for (r, row) in rows.iter().enumerate() {
            let (g, w) = ((got.0[r], got.1[r], got.2[r].to_bits()), (want.0[r], want.1[r], want.2[r].to_bits()));
            assert_eq!(g, w, "row {r} of {shape:?} ({row:?}): (token, status, log-probability bits)");
        }
    }
}

#[cfg(feature = "wgpu")]
#[test]
fn wgpu_step_into_an_engines_encoder() {
    crate::common::on("wgpu", "step_into_an_engines_encoder", crate::common::wgpu(), step_into_an_engines_encoder);
}

suite!(cpu, crate::common::cpu, sampler_steps);
device_suites!(mixed_batch_matches_each_path, sampler_steps);

/// SGLang-normalized requests become row records: greedy, seeded under deterministic inference
/// (seed 42 by default), the Philox race otherwise, each with the request's filters (joint).
#[test]
fn requests_become_rows() {
    let row = |body: &str, deterministic| {
        let params: SamplingParams = serde_json::from_str(body).unwrap();
        RowParams::from_request(&params.normalize().unwrap(), 7, deterministic)
    };
    let greedy = row(r#"{"temperature": 0}"#, false).unwrap();
    assert!(!greedy.is_sampled());
    let plain = row(r#"{"temperature": 0.7, "seed": 5}"#, false).unwrap();
    assert_eq!((plain.mode(), plain.seed(), plain.offset()), (RowMode::Race, 5, 7));
    let seeded = row(r#"{"temperature": 0.7}"#, true).unwrap();
    assert_eq!((seeded.mode(), seeded.seed()), (RowMode::Seeded, 42));
    let filtered = row(r#"{"temperature": 0.7, "top_p": 0.9, "top_k": 20, "min_p": 0.1}"#, false).unwrap();
    let f = filtered.filters();
    assert_eq!((f.top_k, f.top_p as f32, f.min_p as f32), (Some(20), 0.9, 0.1));
    assert_eq!(row(r#"{"top_k": -1}"#, false).unwrap().filters().top_k, None);
    let seeded_filtered = row(r#"{"temperature": 0.7, "top_p": 0.9}"#, true).unwrap();
    assert_eq!((seeded_filtered.mode(), seeded_filtered.filters().top_p as f32), (RowMode::Seeded, 0.9));
}
