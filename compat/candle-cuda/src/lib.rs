//! Nothing to run: this crate exists to be built (see its Cargo.toml). It names a type of each
//! crate so that both are compiled, not only resolved.

pub use candle_core::CudaDevice;
pub use sampling_kernels::CudaBackend;
