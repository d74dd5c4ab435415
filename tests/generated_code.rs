//! The generated kernels compile for every target: naga parses and validates each WGSL file,
//! and NVRTC compiles each CUDA file for sm_75 (T4) and sm_90 (H100/H200). NVRTC needs only
//! libnvrtc, no GPU; without it the CUDA check is reported as not run (and fails under CI=true,
//! where `.ci/run` installs it).

mod common;

use sampling_kernels::kernels::KernelSource;

fn kernels() -> &'static [KernelSource] {
    sampling_kernels::kernels::all()
}

/// Every WGSL file validates; those that say they need neither float64 nor 64-bit integers
/// (what a featureless device runs) validate without either capability (with the unpacking of
/// f16 pairs, which wgpu gives every device but downlevel GL ones).
#[test]
fn every_wgsl_file_validates_with_naga() {
    use naga::valid::Capabilities;
    for k in kernels() {
        let module =
            naga::front::wgsl::parse_str(k.wgsl).unwrap_or_else(|e| panic!("{}: {}", k.name, e.emit_to_string(k.wgsl)));
        let bare = !k.needs_f64 && !k.needs_int64;
        let capabilities = if bare { Capabilities::SHADER_FLOAT16_IN_FLOAT32 } else { Capabilities::all() };
        let mut validator = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), capabilities);
        validator.validate(&module).unwrap_or_else(|e| panic!("{} (capabilities {capabilities:?}): {e:?}", k.name));
    }
    assert!(kernels().iter().any(|k| k.name.starts_with("filter_portable") && !k.needs_int64));
    common::report("naga", "ran", "every_wgsl_file_validates_with_naga", "naga 30");
}

/// Every kernel binds at most one storage buffer past WebGPU's default per stage, and those a
/// default-limits device needs for plain and filtered rows (`sample_*`, the portable filter
/// kernels) fit the default: the three that bind the bitmask beside the most outputs (the seeded
/// kernel from logits, the one-read merge, the split filters) are a typed error on such a device
/// (`wgpu_eight_storage_buffers_device_says_which_limit_to_raise`).
#[cfg(feature = "wgpu")]
#[test]
fn every_kernel_fits_the_default_storage_buffer_limit() {
    let most = sampling_kernels::wgpu::Limits::default().max_storage_buffers_per_shader_stage as usize;
    for k in kernels() {
        let needed = k.name.starts_with("sample_") || k.name.starts_with("filter_portable");
        let limit = if needed { most } else { most + 1 };
        assert!(k.bindings.len() <= limit, "{}: {} storage buffers, over {limit}", k.name, k.bindings.len());
    }
}

#[cfg(feature = "cuda")]
#[test]
fn every_cuda_file_compiles_with_nvrtc_for_sm75_and_sm90() {
    use sampling_kernels::backend::cuda::{build_target, compile, nvrtc_present, Optimisation};
    if !nvrtc_present() {
        assert!(!common::in_ci(), "CI=true requires libnvrtc (the nvidia-cuda-nvrtc wheel on LD_LIBRARY_PATH)");
        common::report("nvrtc", "not-run", "every_cuda_file_compiles", "absent");
        return;
    }
    // Each kernel as the backend builds it for a T4 and for an H200 (other blocks compile too,
    // but twice the blocks doubled this test's time). NVRTC's fast level: the full optimiser
    // took this test 114-165 s on two cores, about 15 s without; `cargo xtask ptx-report`
    // compiles every kernel fully.
    for k in kernels().iter().filter(|k| k.cuda.is_some()) {
        for (arch, block) in [build_target(k, 7), build_target(k, 9)] {
            let ptx =
                compile(k, arch, block, Optimisation::Check).unwrap_or_else(|e| panic!("{} for {arch}: {e}", k.name));
            assert!(ptx.to_src().contains(k.name), "{}: the PTX lacks its entry point", k.name);
        }
    }
    common::report("nvrtc", "ran", "every_cuda_file_compiles", "NVRTC");
}

/// CUDA merges a split row in the parts' own launch: each part stores its record, fences
/// (`membar.gl`, or a `.gpu` fence) and counts itself in with a global atomic add; the part that
/// completes the count fences again, then reads the others' records with volatile loads (from L2,
/// never a stale L1 line). Checked on the PTX NVRTC writes, so neither the emitter nor the
/// optimiser can drop the order unseen.
#[cfg(feature = "cuda")]
#[test]
fn split_rows_fence_before_the_count_and_load_volatile_after() {
    use sampling_kernels::backend::cuda::{build_target, compile, nvrtc_present, Optimisation};
    if !nvrtc_present() {
        assert!(!common::in_ci(), "CI=true requires libnvrtc (the nvidia-cuda-nvrtc wheel on LD_LIBRARY_PATH)");
        common::report("nvrtc", "not-run", "split_rows_fence", "absent");
        return;
    }
    let fence = |l: &str| l.starts_with("membar.gl") || (l.starts_with("fence.") && l.contains(".gpu"));
    let merging: Vec<&KernelSource> = kernels().iter().filter(|k| k.merges && k.cuda.is_some()).collect();
    assert!(merging.len() >= 10, "{} kernels merge split rows", merging.len());
    for k in merging {
        let (arch, block) = build_target(k, 9);
        let ptx = compile(k, arch, block, Optimisation::Full).unwrap_or_else(|e| panic!("{}: {e}", k.name)).to_src();
        let lines: Vec<&str> = ptx.lines().map(str::trim).collect();
        let counts: Vec<usize> = (0..lines.len()).filter(|&i| lines[i].starts_with("atom.global.add")).collect();
        assert!(!counts.is_empty(), "{}: no count", k.name);
        for &i in &counts {
            let stored = lines[..i].iter().rposition(|l| l.starts_with("st.global"));
            let fenced = lines[..i].iter().rposition(|l| fence(l));
            assert!(
                fenced > stored && fenced.is_some(),
                "{}: the count at PTX line {i} has no fence after the record's stores",
                k.name
            );
            let after = &lines[i..];
            let refenced =
                after.iter().position(|l| fence(l)).unwrap_or_else(|| panic!("{}: no fence after the count", k.name));
            assert!(
                after[refenced..].iter().any(|l| l.starts_with("ld.volatile.global") || l.starts_with("ld.global.cg")),
                "{}: the merge reads no record with a volatile load",
                k.name
            );
        }
    }
    common::report("nvrtc", "ran", "split_rows_fence", "NVRTC");
}

/// Read from the tree, not from the writer: a file hand-added to `kernels/` or `shaders/`, or one
/// gen no longer writes, lacks the header or names no kernel of the manifest; a function file
/// no kernel takes is one gen no longer writes.
#[test]
fn generated_files_carry_the_do_not_edit_header() {
    let files = generated_files();
    let mut kernel_files = 0;
    for (path, text) in &files {
        let first = text.lines().next().unwrap_or_default();
        assert!(first.starts_with("// GENERATED by `cargo xtask gen`"), "{path} starts with {first:?}");
        assert!(text.lines().take(3).any(|l| l.contains("DO NOT EDIT")), "{path}: no DO NOT EDIT line");
        let file = std::path::Path::new(path);
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        let function = file.parent().is_some_and(|p| p.ends_with("functions"));
        if !function {
            kernel_files += 1;
            assert!(kernels().iter().any(|k| k.name == stem), "{path}: no kernel of the manifest is named {stem}");
        } else if path.ends_with(".cuh") {
            let include = format!("#include \"functions/{stem}.cuh\"");
            assert!(
                kernels().iter().any(|k| k.cuda.is_some_and(|c| c.contains(&include))),
                "{path}: no kernel includes it"
            );
        } else {
            assert!(kernels().iter().any(|k| k.wgsl.contains(text.as_str())), "{path}: no kernel takes it");
        }
    }
    let expected = kernels().iter().map(|k| 1 + usize::from(k.cuda.is_some())).sum::<usize>();
    assert_eq!(kernel_files, expected, "a .wgsl file for each kernel, a .cu for each with CUDA, and nothing else");
}

/// Every file `cargo xtask gen` writes to kernels/ and shaders/ and their `functions/`, read
/// from the tree (not from the manifest, so a stale file left behind is read too).
fn generated_files() -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["kernels", "shaders", "kernels/functions", "shaders/functions"] {
        for entry in std::fs::read_dir(root.join(dir)).expect("the folder is there") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() && path.ends_with("functions") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("a text file");
            files.push((path.display().to_string(), text));
        }
    }
    assert!(files.len() > kernels().len(), "{} files for {} kernels", files.len(), kernels().len());
    files
}

/// A person reads a generated file whole: none is over 800 lines (a long kernel is its phases,
/// each a procedure in a file of its own; `xtask/src/outline.rs`).
#[test]
fn every_generated_file_is_under_800_lines() {
    for (path, text) in generated_files() {
        assert!(text.lines().count() < 800, "{path}: {} lines", text.lines().count());
    }
}

#[test]
fn no_generated_file_branches_on_a_literal() {
    for (path, text) in generated_files() {
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            for literal in ["if (false)", "if (true)", "if false", "if true", "(false) ?", "(true) ?"] {
                assert!(!code.contains(literal), "{path}:{}: {code}", n + 1);
            }
        }
    }
}

/// The name a line defines, if it opens a helper: `fn sk_exp(` in WGSL, `... sk_exp(` after
/// `__device__` in CUDA.
fn defined_helper(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("fn ").or_else(|| line.strip_prefix("__device__ __forceinline__ "))?;
    let name = rest[..rest.find('(')?].split_whitespace().last()?;
    (name != "main").then_some(name)
}

/// Per translation unit (a WGSL module with the functions put before it, a CUDA file with its
/// includes in place): each helper defined once, and only where something calls it.
#[test]
fn each_helper_is_defined_once_per_unit_and_only_where_called() {
    for k in kernels() {
        for text in [Some(k.wgsl.to_string()), k.cuda_unit()].into_iter().flatten() {
            let helpers: Vec<&str> = text.lines().filter_map(defined_helper).collect();
            for name in &helpers {
                assert_eq!(helpers.iter().filter(|h| *h == name).count(), 1, "{}: `{name}` defined twice", k.name);
                let calls = text.matches(&format!("{name}(")).count() + text.matches(&format!("{name}<")).count();
                assert!(calls > 1, "{}: `{name}` is defined but never called", k.name);
            }
            assert!(!text.contains("#include"), "{}: an include left in the unit", k.name);
        }
    }
}

#[test]
fn generated_code_names_the_rust_builder_of_its_parts() {
    for k in kernels() {
        for text in [Some(k.wgsl), k.cuda].into_iter().flatten() {
            assert!(text.contains("// built by kernels::"), "{}", k.name);
        }
    }
}

/// Every kernel builds in the Vulkan driver and launches: a workgroup over an empty batch (zero
/// parameters) writes none of its buffers. naga's validation above checks the WGSL; this checks
/// what the driver makes of it. Lavapipe compiles a kernel with LLVM at its first launch (the
/// merge kernels take 30 s each on two cores) and keeps it in Mesa's shader cache, so these two
/// halves of the list run first (`.config/nextest.toml`) and the tests after them find every
/// kernel compiled, where two tests would otherwise compile the same one side by side.
#[cfg(feature = "wgpu")]
mod wgpu {
    use super::{common, kernels};
    use sampling_kernels::wgpu;

    #[test]
    fn even_kernels_launch_on_an_empty_batch() {
        launch_each_on_an_empty_batch(0, "even_kernels_launch_on_an_empty_batch");
    }

    #[test]
    fn odd_kernels_launch_on_an_empty_batch() {
        launch_each_on_an_empty_batch(1, "odd_kernels_launch_on_an_empty_batch");
    }

    fn launch_each_on_an_empty_batch(half: usize, test: &str) {
        let Some((backend, device, queue)) = common::engine_wgpu(sampling_kernels::WgpuBackend::device_descriptor)
        else {
            common::report("wgpu", "not-run", test, "absent");
            return;
        };
        let runs = |k: &&sampling_kernels::kernels::KernelSource| backend.missing_feature(k).is_none();
        let mine: Vec<_> = kernels().iter().skip(half).step_by(2).filter(runs).collect();
        assert!(mine.len() >= kernels().len() / 2 - 4, "lavapipe runs nearly every kernel: {} of half", mine.len());
        for k in mine {
            let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
            let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(k.name),
                source: wgpu::ShaderSource::Wgsl(k.wgsl.into()),
            });
            let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(k.name),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
            const BYTES: u64 = 4096;
            let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
            let buffer = |usage| {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: None,
                    size: BYTES,
                    usage,
                    mapped_at_creation: false,
                })
            };
            let storage: Vec<_> = k.bindings.iter().map(|_| buffer(usage)).collect();
            // The parameters follow the storage buffers; all zero, the batch is empty.
            let params = buffer(wgpu::BufferUsages::UNIFORM);
            let entries: Vec<_> = storage
                .iter()
                .chain([&params])
                .enumerate()
                .map(|(slot, b)| wgpu::BindGroupEntry { binding: slot as u32, resource: b.as_entire_binding() })
                .collect();
            let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipeline.get_bind_group_layout(0),
                entries: &entries,
            });
            let readbacks: Vec<_> =
                storage.iter().map(|_| buffer(wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ)).collect();
            let mut encoder = device.create_command_encoder(&Default::default());
            {
                let mut pass = encoder.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, &group, &[]);
                pass.dispatch_workgroups(1, 1, 1);
            }
            for (from, to) in storage.iter().zip(&readbacks) {
                encoder.copy_buffer_to_buffer(from, 0, to, 0, BYTES);
            }
            queue.submit([encoder.finish()]);
            if let Some(e) = pollster::block_on(scope.pop()) {
                panic!("{}: {e}", k.name);
            }
            for (binding, to) in k.bindings.iter().zip(&readbacks) {
                to.slice(..).map_async(wgpu::MapMode::Read, |r| r.expect("maps"));
                device.poll(wgpu::PollType::wait_indefinitely()).expect("the launch ends");
                let written = to.get_mapped_range(..).expect("mapped").iter().any(|&b| b != 0);
                assert!(!written, "{}: an empty batch wrote `{}`", k.name, binding.name());
            }
        }
        common::report("wgpu", "ran", test, &sampling_kernels::Backend::describe(&backend));
    }
}
