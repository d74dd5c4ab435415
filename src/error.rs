//! The one error type of the crate: every failure says what was wrong, never a panic.

/// What went wrong in a call. Messages name the argument, the value and the rule it broke.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// The batch shape cannot be launched (empty, stride below vocabulary, too large to index).
    #[error("bad shape: {0}")]
    Shape(String),
    /// A buffer is shorter than the shape needs.
    #[error("buffer `{name}` holds {len} elements but the call needs {need}")]
    BufferTooShort {
        /// Which argument.
        name: &'static str,
        /// Elements it holds.
        len: usize,
        /// Elements the call needs.
        need: usize,
    },
    /// The backend cannot be used on this machine (no adapter, no driver, no NVRTC).
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// A row's parameter breaks its rule.
    #[error("row {row}: {field} = {value}: {rule}")]
    Param {
        /// The row's index in the batch.
        row: usize,
        /// The parameter.
        field: &'static str,
        /// Its value, as given.
        value: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// The device lacks a feature the kernel needs (float64 on Metal, say); nothing was launched.
    #[error("{backend} cannot run `{kernel}`: the device lacks {feature}")]
    Unsupported {
        /// The backend ("wgpu").
        backend: &'static str,
        /// The kernel asked for.
        kernel: &'static str,
        /// The missing device feature (SHADER_F64, SHADER_INT64).
        feature: &'static str,
    },
    /// A row asks for a sampler the device cannot run (SGLang's seeded sampler on a device
    /// without float64): [`crate::Sampler::step`] says so before it launches anything.
    #[error("row {row} is seeded, and SGLang's seeded sampler needs {feature}, which the device lacks")]
    UnsupportedRow {
        /// The row's index in the batch.
        row: usize,
        /// The missing device feature.
        feature: &'static str,
    },
    /// A call carries a logits stage ([`crate::LogitsStage`]) that this backend's
    /// kernels do not apply yet (the CPU backend does); nothing was launched, so no stage input
    /// is ever ignored.
    #[error("this backend's kernels do not apply the logits stage's {feature} yet; nothing was launched")]
    UnsupportedStage {
        /// The first stage input the call gives ("logit bias", "repetition penalty", ...).
        feature: &'static str,
    },
    /// A call asks for log-probabilities ([`crate::LogprobsRequest`]), which this backend's
    /// kernels do not compute yet (the CPU backend does); nothing was launched, so no token is
    /// sampled without the values asked for.
    #[error("this backend's kernels do not compute log-probabilities ({mode}) yet; nothing was launched")]
    UnsupportedLogprobs {
        /// The mode asked for (`raw_logprobs`, ...).
        mode: &'static str,
    },
    /// A log-probability request breaks a rule of the whole call (a row's own counts and ids
    /// are [`Error::Param`]s).
    #[error("log-probabilities: {field} = {value}: {rule}")]
    Logprobs {
        /// The parameter.
        field: &'static str,
        /// Its value, as given.
        value: usize,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// The CUDA driver is older than CUDA 12.0 (driver 525), the oldest whose PTX ISA the
    /// kernels are built and checked for; nothing was compiled.
    #[error("the CUDA {driver} driver is older than CUDA 12.0 (driver 525), the oldest the kernels support")]
    CudaDriverTooOld {
        /// The driver's CUDA version, as `major.minor`.
        driver: String,
    },
    /// A launch and its generated kernel disagree on a buffer: `cargo xtask gen` changed what a
    /// kernel binds and the host's launch plan was not changed with it (a build defect).
    #[error("kernel `{kernel}`, binding `{binding}`: {problem}")]
    Binding {
        /// The kernel launched.
        kernel: &'static str,
        /// The buffer's name in the kernel's IR.
        binding: &'static str,
        /// How they disagree.
        problem: &'static str,
    },
    /// Memory or a stream lent to the CUDA backend (an alias's view, a raw stream) belongs to
    /// another CUDA context than the backend's, where its address names nothing, or another
    /// allocation; nothing was lent.
    #[error("{what} belongs to another CUDA context than the backend's")]
    OtherContext {
        /// What was lent.
        what: &'static str,
    },
    /// A raw device address lent to the CUDA backend cannot hold the elements it is said to:
    /// nothing was lent.
    #[error("device address {address:#x}: {problem}")]
    RawMemory {
        /// The address given.
        address: u64,
        /// What is wrong with it (null, misaligned, its length runs past the address space).
        problem: &'static str,
    },
    /// The device, driver or compiler reported an error.
    #[error("{backend}: {message}")]
    Device {
        /// The backend ("wgpu", "cuda").
        backend: &'static str,
        /// What the device, driver or compiler said.
        message: String,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
