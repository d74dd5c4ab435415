//! The backend's second stream, on which a call's seeded and filter launches run.

use super::cuda_error;
use crate::error::Result;
use cudarc::driver::sys::{CUevent, CUevent_flags, CUevent_wait_flags, CUstream};
use cudarc::driver::CudaContext;
use std::sync::Arc;

/// The backend's second stream (see the module's doc) and the two events that order it: `forked`
/// on the caller's stream before a call's first launch, which the side stream waits for,
/// and `joined` on the side stream after its last, which the caller's stream waits for. Made
/// once, with the backend: a call records and waits, and creates nothing.
pub(super) struct SideStream {
    ctx: Arc<CudaContext>,
    pub(super) stream: CUstream,
    forked: CUevent,
    joined: CUevent,
}

// SAFETY: the handles are the driver's, usable from any thread that has bound their context,
// as every use here does first; the backend uses them only while it holds its scratch lock.
unsafe impl Send for SideStream {}
unsafe impl Sync for SideStream {}

impl SideStream {
    /// A non-blocking stream at the context's greatest priority: the side stream's launches are
    /// short and depend on each other, so their few blocks go ahead of the plain launch's
    /// waiting ones.
    pub(super) fn new(ctx: &Arc<CudaContext>) -> Result<Self> {
        use cudarc::driver::result::{event, stream};
        ctx.bind_to_thread().map_err(cuda_error)?;
        let (_least, greatest) = stream::get_priority_range().map_err(cuda_error)?;
        let untimed = CUevent_flags::CU_EVENT_DISABLE_TIMING;
        let (forked, joined) =
            (event::create(untimed).map_err(cuda_error)?, event::create(untimed).map_err(cuda_error)?);
        let stream = stream::create_with_priority(stream::StreamKind::NonBlocking, greatest).map_err(cuda_error)?;
        Ok(SideStream { ctx: ctx.clone(), stream, forked, joined })
    }

    /// The side stream waits for what `main` has queued so far.
    pub(super) fn fork(&self, main: CUstream) -> Result<()> {
        Self::order(self.forked, main, self.stream)
    }

    /// `main` waits for what the side stream has queued so far.
    pub(super) fn join(&self, main: CUstream) -> Result<()> {
        Self::order(self.joined, self.stream, main)
    }

    /// `after` waits for what `before` has queued so far, through `event`.
    fn order(event: CUevent, before: CUstream, after: CUstream) -> Result<()> {
        use cudarc::driver::result::{event as ev, stream};
        // SAFETY: the event and both streams are live (the side stream's and events until the
        // backend drops, the caller's for as long as the backend holds it) and belong to the
        // context bound by the caller.
        unsafe {
            ev::record(event, before).map_err(cuda_error)?;
            stream::wait_event(after, event, CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT).map_err(cuda_error)
        }
    }
}

impl Drop for SideStream {
    fn drop(&mut self) {
        use cudarc::driver::result::{event, stream};
        // Errors are dropped: the context may already be tearing down.
        let _ = self.ctx.bind_to_thread();
        // SAFETY: made in `new`, destroyed once, here; the driver frees the stream once the work
        // queued on it is done.
        unsafe {
            let _ = event::destroy(self.forked);
            let _ = event::destroy(self.joined);
            let _ = stream::destroy(self.stream);
        }
    }
}
