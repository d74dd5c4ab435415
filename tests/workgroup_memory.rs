//! Every WGSL kernel declares at most the workgroup memory `WgpuBackend::WORKGROUP_STORAGE`
//! tells an engine to request (naga's layout of each file's workgroup variables), and the
//! largest needs more than wgpu's default limit, as its documentation says; a kernel that needs
//! no device feature fits that default.

mod common;

#[cfg(feature = "wgpu")]
#[test]
fn every_kernel_fits_the_stated_workgroup_memory() {
    use sampling_kernels::WgpuBackend;
    let mut largest = (0, "");
    for k in sampling_kernels::kernels::all() {
        let module = naga::front::wgsl::parse_str(k.wgsl).unwrap_or_else(|e| panic!("{}: {e}", k.name));
        let mut layouter = naga::proc::Layouter::default();
        layouter.update(module.to_ctx()).unwrap();
        let bytes: u32 = module
            .global_variables
            .iter()
            .filter(|(_, v)| v.space == naga::AddressSpace::WorkGroup)
            .map(|(_, v)| layouter[v.ty].size)
            .sum();
        assert_eq!(k.workgroup_bytes, bytes, "{}: the manifest's workgroup bytes against naga's layout", k.name);
        assert!(bytes <= WgpuBackend::WORKGROUP_STORAGE, "{} declares {bytes} bytes of workgroup memory", k.name);
        // What a featureless device runs fits its default limits too.
        let default = sampling_kernels::wgpu::Limits::default().max_compute_workgroup_storage_size;
        let bare = !k.needs_f64 && !k.needs_int64;
        assert!(
            !bare || bytes <= default,
            "{} needs no feature but declares {bytes} bytes of workgroup memory",
            k.name
        );
        largest = largest.max((bytes, k.name));
    }
    let default = sampling_kernels::wgpu::Limits::default().max_compute_workgroup_storage_size;
    assert!(largest.0 > default, "the largest kernel, {}, fits wgpu's default {default} bytes", largest.1);
    eprintln!("largest workgroup memory: {} bytes ({})", largest.0, largest.1);
    common::report("naga", "ran", "every_kernel_fits_the_stated_workgroup_memory", "naga 30");
}
