//! What the installed CUDA offers, asked without assuming cudarc's linking mode or bindings:
//! whether its libraries load, the driver's and NVRTC's versions, and the driver's own entry
//! points where bindings and driver may disagree.

use super::{cuda_error, ptx_isa, CUevent, CUresult};
use crate::error::{Error, Result};
use cudarc::driver::CudaEvent;
use libloading::Library;
use std::sync::OnceLock;

/// Whether libnvrtc can be loaded (it only tries to open the library).
pub fn nvrtc_present() -> bool {
    library(&["nvrtc"]).is_some()
}

/// [`Error::Unavailable`] unless libnvrtc can be loaded: cudarc panics on a call into a
/// library it cannot load.
pub(super) fn require_nvrtc() -> Result<()> {
    if nvrtc_present() {
        return Ok(());
    }
    Err(Error::Unavailable("libnvrtc not found on the library path".into()))
}

/// Whether the CUDA driver and NVRTC libraries can be loaded (no driver call is made).
pub fn libraries_present() -> bool {
    nvrtc_present() && driver_library().is_some()
}

/// The driver library, opened once (see [`library`]).
fn driver_library() -> Option<&'static Library> {
    static DRIVER: OnceLock<Option<Library>> = OnceLock::new();
    DRIVER.get_or_init(|| library(&["cuda", "nvcuda"])).as_ref()
}

/// The first of `libs` that opens under a name cudarc's own loader also tries, so that a library
/// found here is one cudarc loads. cudarc's list (`get_lib_name_candidates`) exists only where it
/// loads dynamically; where it links instead, the linked libraries' names are among these.
fn library(libs: &[&str]) -> Option<Library> {
    use std::env::consts::{DLL_PREFIX as P, DLL_SUFFIX as S};
    let version = cudarc::driver::sys::CUDA_VERSION;
    let (major, minor) = (version / 1000, version % 1000 / 10);
    let names = libs.iter().flat_map(|lib| {
        [format!("{P}{lib}{S}"), format!("{P}{lib}64_{major}{minor}_0{S}"), format!("{P}{lib}64_{major}0_0{S}")]
            .into_iter()
            .chain([major.to_string(), "12".into(), "11".into(), "1".into()].map(|v| format!("{P}{lib}{S}.{v}")))
    });
    // SAFETY: opening the CUDA libraries runs no initialiser with preconditions.
    names.into_iter().find_map(|name| unsafe { Library::new(name) }.ok())
}

/// A CUDA version as the driver reports it (`1000 * major + 10 * minor`), as `major.minor`.
fn show_version(version: i32) -> String {
    format!("{}.{}", version / 1000, version % 1000 / 10)
}

/// The newest PTX ISA the driver of CUDA `driver` compiles, or [`Error::CudaDriverTooOld`].
pub(super) fn driver_isa(driver: i32) -> Result<(u32, u32)> {
    ptx_isa::driver_isa(driver).ok_or_else(|| Error::CudaDriverTooOld { driver: show_version(driver) })
}

/// The CUDA version of the loaded driver.
pub(super) fn driver_version() -> Result<i32> {
    let mut version = 0;
    // SAFETY: writes one int; the library was found present before any driver call.
    unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) }.result().map_err(cuda_error)?;
    Ok(version)
}

/// `cuEventElapsedTime` between two recorded events, once `end` is done, through the entry point
/// the driver has: bindings of CUDA 12.8 and later call `cuEventElapsedTime_v2`, which older
/// drivers lack (cudarc would panic on the missing symbol).
pub(super) fn elapsed_ms(start: &CudaEvent, end: &CudaEvent) -> Result<f32> {
    type Elapsed = unsafe extern "C" fn(*mut f32, CUevent, CUevent) -> CUresult;
    end.synchronize().map_err(cuda_error)?;
    let lib = driver_library().ok_or_else(|| Error::Unavailable("libcuda not found on the library path".into()))?;
    // SAFETY: both names have this signature in every CUDA release that has them.
    let elapsed =
        unsafe { lib.get::<Elapsed>(b"cuEventElapsedTime_v2\0").or_else(|_| lib.get(b"cuEventElapsedTime\0")) }
            .map(|f| *f)
            .map_err(|e| cuda_error(format!("cuEventElapsedTime: {e}")))?;
    let mut ms = 0.0;
    // SAFETY: two events of one context, both recorded, the later one complete.
    unsafe { elapsed(&mut ms, start.cu_event(), end.cu_event()) }.result().map_err(cuda_error)?;
    Ok(ms)
}

/// The version of the loaded NVRTC.
pub(super) fn nvrtc_version() -> Result<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: writes two ints; the caller checked that the library is present.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }.result().map_err(cuda_error)?;
    Ok((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver older than the oldest ISA is refused by name; the fleets' drivers are not.
    #[test]
    fn drivers_before_cuda_12_are_refused() {
        assert_eq!(driver_isa(11080), Err(Error::CudaDriverTooOld { driver: "11.8".into() }));
        assert_eq!(driver_isa(12020), Ok((8, 2)));
        assert_eq!(show_version(13010), "13.1");
    }
}
