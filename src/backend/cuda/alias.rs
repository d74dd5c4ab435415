//! Engine memory lent to the backend in place: views of cudarc slices and raw device pointers,
//! never freed, moved or swapped by the crate or by safe code holding the alias.

use super::{CUcontext, CUdeviceptr, CudaBackend};
use crate::backend::Output;
use crate::error::{Error, Result};
use cudarc::driver::{CudaSlice, CudaStream};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::Arc;

/// A slice that aliases memory owned elsewhere: it never frees it (dropping it hands the
/// pointer back with [`CudaSlice::leak`], which drops only its events).
pub(super) struct Aliased<T>(ManuallyDrop<CudaSlice<T>>);

impl<T> Aliased<T> {
    /// `len` elements at `ptr`, on `stream`.
    ///
    /// # Safety
    /// The memory must stay allocated while the alias lives, and hold `len` elements of `T`.
    pub(super) unsafe fn new(stream: &Arc<CudaStream>, ptr: u64, len: usize) -> Self {
        // SAFETY: the caller's contract; ManuallyDrop keeps cudarc from freeing it.
        Aliased(ManuallyDrop::new(unsafe { stream.upgrade_device_ptr(ptr, len) }))
    }
}

impl<T> Drop for Aliased<T> {
    fn drop(&mut self) {
        // SAFETY: taken once, here; the field is never used again.
        let slice = unsafe { ManuallyDrop::take(&mut self.0) };
        slice.leak();
    }
}

/// An engine's device memory read in place, as the buffer type the sampling calls take: a
/// range of its arena, or a candle tensor's storage at an offset, without a copy. It borrows the
/// view it was made from, so the memory outlives it. cudarc's tracking across streams does not
/// see uses through an alias: sample on the stream that writes the memory, or order the streams
/// yourself. Where cudarc tracks events (a context with several streams) making one makes two.
/// It derefs to a shared `CudaSlice` only, through which no safe code moves or writes it.
pub struct CudaAlias<'a, T>(pub(super) Aliased<T>, pub(super) PhantomData<&'a T>);

/// As [`CudaAlias`], for memory the sampling calls write (tokens into an engine's buffer):
/// [`Output::aliased`] lends it to one call. It derefs to a shared `CudaSlice` (to read it,
/// download it, or pass it as logits), never to a mutable one: no safe code can move the slice
/// out, where dropping it would free the engine's memory, nor put another in its place, and an
/// `Output`'s fields are private, so the one it lends to cannot hand it on either:
///
/// ```compile_fail,E0596
/// use sampling_kernels::{CudaAliasMut, CudaBuffer};
/// fn steal(alias: &mut CudaAliasMut<'_, u32>, other: CudaBuffer<u32>) -> CudaBuffer<u32> {
///     std::mem::replace(&mut **alias, other)
/// }
/// ```
/// ```compile_fail,E0596
/// use sampling_kernels::CudaAliasMut;
/// fn trade(a: &mut CudaAliasMut<'_, u32>, b: &mut CudaAliasMut<'_, u32>) {
///     std::mem::swap(&mut **a, &mut **b);
/// }
/// ```
/// ```compile_fail,E0616
/// use sampling_kernels::{CudaBackend, CudaBuffer, Output};
/// fn steal(out: Output<'_, CudaBackend>, other: CudaBuffer<u32>) -> CudaBuffer<u32> {
///     std::mem::replace(out.tokens, other)
/// }
/// ```
pub struct CudaAliasMut<'a, T>(pub(super) Aliased<T>, pub(super) PhantomData<&'a mut T>);

impl<T> Deref for CudaAlias<'_, T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.0 .0
    }
}

impl<T> Deref for CudaAliasMut<'_, T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.0 .0
    }
}

impl<T> CudaAliasMut<'_, T> {
    /// The slice, for the crate's calls only: a `&mut CudaSlice` in safe hands could be swapped
    /// out and dropped, freeing the engine's memory.
    fn lend(&mut self) -> &mut CudaSlice<T> {
        &mut self.0 .0
    }
}

/// Outputs written into an engine's memory in place, through aliases
/// ([`CudaBackend::alias_mut`], [`CudaBackend::alias_raw`]).
///
/// ```
/// use sampling_kernels::{Backend, CudaAliasMut, CudaBackend, CudaBuffer, Logits, Output, RowParams, Shape};
/// fn step(
///     sampler: &CudaBackend,
///     logits: &CudaBuffer<f32>,
///     rows: &CudaBuffer<RowParams>,
///     tokens: &mut CudaAliasMut<'_, u32>,
///     logprobs: &mut CudaAliasMut<'_, f32>,
/// ) -> sampling_kernels::Result<()> {
///     let out = Output::aliased(tokens).with_aliased_logprobs(logprobs);
///     sampler.race_from_logits(Shape::dense(1, 4), Logits::F32(logits), rows, out)
/// }
/// ```
impl<'a> Output<'a, CudaBackend> {
    /// Tokens into an engine's memory.
    pub fn aliased(tokens: &'a mut CudaAliasMut<'_, u32>) -> Self {
        Output::new(tokens.lend())
    }
    /// Also each token's log-probability, into an engine's memory.
    pub fn with_aliased_logprobs(self, logprobs: &'a mut CudaAliasMut<'_, f32>) -> Self {
        self.with_logprobs(logprobs.lend())
    }
    /// Also each row's status, into an engine's memory.
    pub fn with_aliased_status(self, status: &'a mut CudaAliasMut<'_, u32>) -> Self {
        self.with_status(status.lend())
    }
}

/// Refuses memory or a stream (`what`) of context `theirs` for a backend of context `ours`: in
/// another context a device address names nothing, or another allocation.
pub(super) fn same_context(what: &'static str, theirs: CUcontext, ours: CUcontext) -> Result<()> {
    if theirs == ours {
        return Ok(());
    }
    Err(Error::OtherContext { what })
}

/// Refuses a raw device address that cannot hold `len` elements of `T`: null, not aligned to
/// `T`, or a length whose bytes overflow the address space.
pub(super) fn check_raw<T>(ptr: CUdeviceptr, len: usize) -> Result<()> {
    let problem = if ptr == 0 {
        "null"
    } else if !ptr.is_multiple_of(std::mem::align_of::<T>() as u64) {
        "not aligned to its element type"
    } else if len.checked_mul(std::mem::size_of::<T>()).and_then(|b| ptr.checked_add(b as u64)).is_none() {
        "its length runs past the end of the address space"
    } else {
        return Ok(());
    };
    Err(Error::RawMemory { address: ptr, problem })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lent memory and streams of another context are refused by their context's handle, with
    /// the typed error (the handles here are stand-ins: only their identity is compared).
    #[test]
    fn another_contexts_memory_is_refused() {
        let (ours, theirs) = (0x10 as CUcontext, 0x20 as CUcontext);
        assert_eq!(same_context("the view's memory", ours, ours), Ok(()));
        assert_eq!(
            same_context("the view's memory", theirs, ours),
            Err(Error::OtherContext { what: "the view's memory" })
        );
        assert!(matches!(same_context("the stream", std::ptr::null_mut(), ours), Err(Error::OtherContext { .. })));
    }

    /// A raw address must be able to hold its elements: not null, aligned to the element type,
    /// its length within the address space.
    #[test]
    fn raw_addresses_are_checked() {
        assert_eq!(check_raw::<f32>(0x7f00_0000_0100, 151_936), Ok(()));
        assert_eq!(check_raw::<f64>(0x7f00_0000_0108, 1), Ok(()));
        let problem = |r: Result<()>| match r {
            Err(Error::RawMemory { problem, .. }) => problem,
            other => panic!("{other:?}"),
        };
        assert_eq!(problem(check_raw::<u32>(0, 4)), "null");
        assert_eq!(problem(check_raw::<u32>(0x1002, 4)), "not aligned to its element type");
        assert_eq!(problem(check_raw::<f64>(0x1004, 4)), "not aligned to its element type");
        assert!(problem(check_raw::<u32>(u64::MAX - 7, 4)).contains("address space"));
        assert!(problem(check_raw::<u64>(0x1000, usize::MAX / 4)).contains("address space"));
    }
}
