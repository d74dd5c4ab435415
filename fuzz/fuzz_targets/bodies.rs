//! What each fuzz target does with its bytes, shared with `tests/fuzz_corpus.rs`, which replays
//! the kept corpus on stable Rust as regression tests.

use sampling_kernels::sglang::{
    path_for_batch, GenerationConfig, Request, SamplingDefaults, SamplingParams, ServerDefaults, Simulation, TraceStep,
};
use sampling_kernels::{Backend, CpuBackend, Input, Logits, Output, RowParams, Shape};

/// Parameter parsing and validation: any bytes as a request's sampling fields, and as a batch of
/// row records; records that validate are sampled (filters included) on a small fixed row.
pub fn params(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(params) = serde_json::from_str::<SamplingParams>(text) {
            let _ = params.normalize();
        }
    }
    let rows: Vec<RowParams> = data.chunks_exact(size_of::<RowParams>()).map(bytemuck::pod_read_unaligned).collect();
    if let (Ok(uploaded), false) = (CpuBackend.upload(&rows), rows.is_empty()) {
        let shape = Shape::dense(rows.len(), 8);
        let logits: Vec<f32> = (0..shape.elements()).map(|i| (i % 5) as f32 - 2.0).collect();
        let mut tokens = vec![0u32; rows.len()];
        let logits = Input::Logits(Logits::F32(&logits));
        CpuBackend.sample_filtered(shape, logits, &uploaded, Output::new(&mut tokens)).expect("valid rows sample");
        assert!(tokens.iter().all(|&t| t < 8), "a token outside the vocabulary");
    }
}

/// The audit tool's inputs: three lines as a request, a trace step and a generation_config,
/// then the effective parameters, the routing and a one-step simulation.
pub fn audit_inputs(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut lines = text.splitn(3, '\n');
    let (first, second, third) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""), lines.next().unwrap_or(""));
    let generation_config = serde_json::from_str::<GenerationConfig>(third).ok();
    let defaults = ServerDefaults { sampling_defaults: SamplingDefaults::Model, generation_config, preferred: None };
    let Ok(request) = serde_json::from_str::<Request>(first) else { return };
    let Ok(params) = defaults.effective(request.endpoint, &request.params).normalize() else { return };
    let _ = path_for_batch(&[params], false);
    if let Ok(step) = serde_json::from_str::<TraceStep>(second) {
        let requests = std::iter::once((request.id.clone(), params)).collect();
        let _ = Simulation::run(&requests, &[step], false);
    }
}
