//! An engine that owns its wgpu device: its own compute pass writes the logits into its own
//! buffer, and the sampler reads that buffer where it is (no copy). The sampler's launches are
//! recorded into the engine's command encoder after that pass (`Sampler::step_into`), and the
//! engine submits both at once: no submit of the sampler's own, no wait between them.
//!
//! `cargo run --release --example wgpu_engine` (on lavapipe without a GPU:
//! `apt-get install -y mesa-vulkan-drivers`)

use sampling_kernels::{wgpu, Backend, CpuBackend, Logits, Output, RowParams, Sampler, Shape, WgpuBackend, WgpuBuffer};

/// A padded vocabulary, as models have: rows are `STRIDE` apart, only `VOCAB` columns are tokens.
const BATCH: u32 = 4;
const VOCAB: u32 = 1000;
const STRIDE: u32 = 1024;

/// The engine's "model": a hash of (row, column) as logits in [-4, 4). The padding columns get
/// 1e30, which would win every draw if the sampler ever read past the vocabulary.
const FILL_LOGITS: &str = r#"
@group(0) @binding(0) var<storage, read_write> logits: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i >= arrayLength(&logits) { return; }
    let row = i / STRIDE;
    let col = i % STRIDE;
    if col >= VOCAB { logits[i] = 1e30; return; }
    let h = (col * 2654435761u) ^ (row * 40503u + 0x9e3779b9u);
    logits[i] = f32(h >> 24u) / 32.0 - 4.0;
}
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapter = match pollster::block_on(instance.request_adapter(&Default::default())) {
        Ok(adapter) => adapter,
        Err(e) => {
            eprintln!("no wgpu adapter ({e}); install a Vulkan driver, e.g. mesa-vulkan-drivers for lavapipe");
            return Ok(());
        }
    };
    // The features and limits the sampler's kernels use, where the adapter has them.
    let (device, queue) = pollster::block_on(adapter.request_device(&WgpuBackend::device_descriptor(&adapter)))?;

    // The engine's buffer and pass. STORAGE is all the sampler needs; COPY_SRC is for the
    // oracle check below, which downloads the logits.
    let elements = (BATCH * STRIDE) as usize;
    let logits = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("engine logits"),
        size: (elements * size_of::<f32>()) as u64,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let source = FILL_LOGITS.replace("STRIDE", &format!("{STRIDE}u")).replace("VOCAB", &format!("{VOCAB}u"));
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("fill logits"),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("fill logits"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("fill logits"),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[wgpu::BindGroupEntry { binding: 0, resource: logits.as_entire_binding() }],
    });
    // Made once, at start: the backend on the engine's device and queue, a sampler with its row
    // buffers, the token and log-probability buffers (reused every step).
    let backend = WgpuBackend::from_device(device.clone(), queue.clone(), adapter.get_info());
    let mut sampler = Sampler::new(&backend, BATCH as usize)?;
    let mut tokens = backend.zeros::<u32>(BATCH as usize)?;
    let mut logprobs = backend.zeros::<f32>(BATCH as usize)?;

    // One decode step: the engine's pass, then the sampler's launches, in one encoder, one submit.
    let shape = Shape { batch: BATCH as usize, vocab: VOCAB as usize, stride: STRIDE as usize };
    let params =
        [RowParams::new(1.0, 42, 0), RowParams::new(0.7, 7, 3), RowParams::new(1.5, 9, 0), RowParams::greedy()];
    let logits = WgpuBuffer::<f32>::from_raw(logits, elements)?;
    let mut encoder = device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups((elements as u32).div_ceil(64), 1, 1);
    }
    let out = Output::new(&mut tokens).with_logprobs(&mut logprobs);
    sampler.step_into(&mut encoder, shape, Logits::F32(&logits), &params, out)?;
    // The row records were written with `Queue::write_buffer`, which lands at this submit,
    // before the encoder's commands: submit before the sampler's next step.
    queue.submit([encoder.finish()]);
    let (tokens, logprobs) = (backend.download(&tokens)?, backend.download(&logprobs)?);

    // A check for this example only: the CPU oracle on a copy of the same logits. The race's
    // noise is the same on both, so the tokens agree unless two scores tie within float32 rounding.
    let host = backend.download(&logits)?;
    let mut oracle = vec![0u32; shape.batch];
    Sampler::new(&CpuBackend, shape.batch)?.step(shape, Logits::F32(&host), &params, Output::new(&mut oracle))?;

    println!("backend: {}", backend.describe());
    for (r, p) in params.iter().enumerate() {
        println!(
            "row {r}: temperature {:<4} seed {:<3} offset {} -> token {:>3} (log-probability {:.4}; CPU oracle: {})",
            p.temperature,
            p.seed(),
            p.offset(),
            tokens[r],
            logprobs[r],
            oracle[r]
        );
    }
    Ok(())
}
