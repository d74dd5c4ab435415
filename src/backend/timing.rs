//! How long a group of launches took, as the device backends measure it for benchmarks
//! (`WgpuBackend::time_launches`, `CudaBackend::time_launches`).

use std::time::Duration;

/// Which clock measured a [`LaunchTime`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// The device's own: CUDA events, or wgpu timestamp queries written by the compute passes.
    /// It counts the device's work only, not the host's submission or the wait for the result.
    Device,
    /// The host's, from before the first launch to the end of a wait for the device to go idle:
    /// the fallback on devices without timestamp queries. It includes the submission and the
    /// wake-up of the waiting thread, so on a fast device it overstates short launches.
    Wall,
}

/// The time from the start of the first launch to the end of the last, and how it was measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LaunchTime {
    /// The elapsed time.
    pub elapsed: Duration,
    /// The clock that measured it.
    pub clock: Clock,
}
