//! The one error type of the crate: every failure says what was wrong, never a panic.

/// What went wrong in a call. Messages name the argument, the value and the rule it broke.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum Error {
    /// The batch shape cannot be launched (empty, stride below vocabulary, too large to index).
    #[error("bad shape: {0}")]
    Shape(String),
    /// A buffer is shorter than the shape needs.
    #[error("buffer `{name}` holds {len} elements but the call needs {need}")]
    BufferTooShort { name: &'static str, len: usize, need: usize },
    /// The backend cannot be used on this machine (no adapter, no driver, no NVRTC).
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// A row's parameter breaks its rule.
    #[error("row {row}: {field} = {value}: {rule}")]
    Param { row: usize, field: &'static str, value: String, rule: &'static str },
    /// The device lacks a feature the kernel needs (float64 on Metal, say); nothing was launched.
    #[error("{backend} cannot run `{kernel}`: the device lacks {feature}")]
    Unsupported { backend: &'static str, kernel: &'static str, feature: &'static str },
    /// The device, driver or compiler reported an error.
    #[error("{backend}: {message}")]
    Device { backend: &'static str, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
