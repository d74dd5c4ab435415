//! Page-locked host memory the per-step writes go through.

use super::{cuda_error, CUdeviceptr};
use crate::error::Result;
use arrayvec::ArrayVec;
use cudarc::driver::{CudaEvent, CudaStream, PinnedHostSlice};
use std::sync::Arc;

/// Slots of page-locked host memory the per-step writes are copied through. A copy from pageable
/// memory makes the driver synchronize the stream first (CUDA's "API synchronization behavior"),
/// so a decode step's row records would wait for everything queued before them, the engine's
/// forward pass included. From page-locked memory the copy is queued and the host goes on; a
/// slot is reused once the copy that last used it has run, [`STAGING_SLOTS`] writes later.
/// Generic over the driver's calls ([`Pinning`]) so a test can record their order.
pub(super) struct Staging<H, E: CopyEvent> {
    slots: ArrayVec<Slot<H, E>, STAGING_SLOTS>,
    next: usize,
}

impl<H, E: CopyEvent> Default for Staging<H, E> {
    fn default() -> Self {
        Staging { slots: ArrayVec::new(), next: 0 }
    }
}

/// Writes a ring of this many slots covers: a `Sampler::step` makes three.
const STAGING_SLOTS: usize = 8;

/// One slot: its memory, how many bytes that is, and an event recorded after the copy that
/// last read it.
struct Slot<H, E> {
    host: H,
    bytes: usize,
    copied: E,
}

/// An event a staging copy records after it.
pub(super) trait CopyEvent {
    /// Waits on the host until the copy that last recorded this event has run.
    fn wait(&self) -> Result<()>;
}

/// The driver's calls staging makes: cudarc's on the backend's stream ([`OnStream`]), or a
/// test's recorder.
pub(super) trait Pinning {
    /// Page-locked host memory, freed when dropped.
    type Host;
    /// The event a copy records.
    type Event: CopyEvent;
    /// `bytes` of page-locked memory.
    fn alloc(&self, bytes: usize) -> Result<Self::Host>;
    /// A new event, not yet recorded.
    fn event(&self) -> Result<Self::Event>;
    /// Fills the start of `host` with `bytes`, queues its copy to device address `dst`, and
    /// records `event` after it.
    fn copy(&self, host: &mut Self::Host, bytes: &[u8], dst: CUdeviceptr, event: &Self::Event) -> Result<()>;
}

impl<H, E: CopyEvent> Staging<H, E> {
    /// Queues a copy of `bytes` to device address `dst` through the next slot.
    pub(super) fn write<P: Pinning<Host = H, Event = E>>(
        &mut self,
        pin: &P,
        dst: CUdeviceptr,
        bytes: &[u8],
    ) -> Result<()> {
        let at = self.next;
        // A slot holds the largest write so far: it grows only while a sampler warms up.
        let size = bytes.len().max(4096).next_power_of_two();
        match self.slots.get_mut(at) {
            Some(slot) => {
                // The copy that last read this slot must have run before its memory is
                // overwritten, or freed as the slot grows.
                slot.copied.wait()?;
                if slot.bytes < bytes.len() {
                    slot.host = pin.alloc(size)?;
                    slot.bytes = size;
                }
            }
            // A new slot's event has recorded nothing: there is nothing to wait for. `next`
            // moves on only past a slot that exists, so the new one is at `at`.
            None => self.slots.push(Slot { host: pin.alloc(size)?, bytes: size, copied: pin.event()? }),
        }
        let slot = &mut self.slots[at];
        pin.copy(&mut slot.host, bytes, dst, &slot.copied)?;
        self.next = (at + 1) % STAGING_SLOTS;
        Ok(())
    }
}

impl<H, E: CopyEvent> Drop for Staging<H, E> {
    /// The memory is freed (as the slots drop, after this) only once the copies that read it
    /// have run: the stream may still hold them when the backend is dropped.
    fn drop(&mut self) {
        for slot in &self.slots {
            // Errors are dropped: the context may already be tearing down.
            let _ = slot.copied.wait();
        }
    }
}

impl CopyEvent for CudaEvent {
    fn wait(&self) -> Result<()> {
        self.synchronize().map_err(cuda_error)
    }
}

/// Staging's calls on the backend's stream.
pub(super) struct OnStream<'s>(pub(super) &'s Arc<CudaStream>);

impl Pinning for OnStream<'_> {
    type Host = PinnedHostSlice<u8>;
    type Event = CudaEvent;
    fn alloc(&self, bytes: usize) -> Result<PinnedHostSlice<u8>> {
        // SAFETY: `copy` writes the memory before any copy reads it.
        unsafe { self.0.context().alloc_pinned::<u8>(bytes) }.map_err(cuda_error)
    }
    fn event(&self) -> Result<CudaEvent> {
        self.0.context().new_event(None).map_err(cuda_error)
    }
    fn copy(&self, host: &mut PinnedHostSlice<u8>, bytes: &[u8], dst: CUdeviceptr, event: &CudaEvent) -> Result<()> {
        let host = host.as_mut_slice().map_err(cuda_error)?;
        let host = host.get_mut(..bytes.len()).ok_or_else(|| cuda_error("a staging slot shorter than its write"))?;
        host.copy_from_slice(bytes);
        // SAFETY: `dst` covers `bytes` (the caller checked the write's length against the
        // buffer) and the source is page-locked memory that stays untouched until `event`.
        unsafe { cudarc::driver::result::memcpy_htod_async(dst, host, self.0.cu_stream()) }.map_err(cuda_error)?;
        event.record(self.0).map_err(cuda_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::{HashMap, HashSet};

    /// Staging's driver calls as a test sees them, in order.
    #[derive(Clone, Copy, Debug)]
    enum Call {
        Alloc { host: usize },
        Free { host: usize },
        Wait { event: usize },
        Copy { host: usize, event: usize },
    }

    /// Records staging's calls; hosts and events are numbered as they are made.
    #[derive(Default)]
    struct Recorder {
        log: RefCell<Vec<Call>>,
        made: RefCell<usize>,
    }

    impl Recorder {
        fn make(&self) -> usize {
            let mut made = self.made.borrow_mut();
            *made += 1;
            *made
        }
    }

    struct Host<'r>(usize, &'r Recorder);
    impl Drop for Host<'_> {
        fn drop(&mut self) {
            self.1.log.borrow_mut().push(Call::Free { host: self.0 });
        }
    }

    struct Event<'r>(usize, &'r Recorder);
    impl CopyEvent for Event<'_> {
        fn wait(&self) -> Result<()> {
            self.1.log.borrow_mut().push(Call::Wait { event: self.0 });
            Ok(())
        }
    }

    impl<'r> Pinning for &'r Recorder {
        type Host = Host<'r>;
        type Event = Event<'r>;
        fn alloc(&self, _bytes: usize) -> Result<Host<'r>> {
            let host = self.make();
            self.log.borrow_mut().push(Call::Alloc { host });
            Ok(Host(host, self))
        }
        fn event(&self) -> Result<Event<'r>> {
            Ok(Event(self.make(), self))
        }
        fn copy(&self, host: &mut Host<'r>, _: &[u8], _: CUdeviceptr, event: &Event<'r>) -> Result<()> {
            self.log.borrow_mut().push(Call::Copy { host: host.0, event: event.0 });
            Ok(())
        }
    }

    /// Replays a log against the two rules of page-locked staging: host memory is refilled or
    /// freed only after a wait on the event of the copy that last read it, and no wait is on an
    /// event no copy recorded (it would wait for nothing).
    fn check_staging(log: &[Call]) -> std::result::Result<(), String> {
        let mut recorded = HashSet::new();
        // Each host whose copy may still be queued, with that copy's event.
        let mut pending = HashMap::new();
        for (at, call) in log.iter().enumerate() {
            match *call {
                Call::Alloc { .. } => {}
                Call::Wait { event } if !recorded.contains(&event) => {
                    return Err(format!("call {at}: waits on event {event}, which no copy recorded"));
                }
                Call::Wait { event } => pending.retain(|_, e| *e != event),
                Call::Copy { host, .. } | Call::Free { host } if pending.contains_key(&host) => {
                    return Err(format!("call {at}: {call:?} while host {host}'s last copy may be queued"));
                }
                Call::Copy { host, event } => {
                    recorded.insert(event);
                    pending.insert(host, event);
                }
                Call::Free { .. } => {}
            }
        }
        Ok(())
    }

    /// The staging ring through its first round, a write larger than any before (its slot
    /// grows, freeing the old memory), a second round, and the backend's drop: each host is
    /// refilled or freed only after its last copy has run, and no wait is on an unrecorded
    /// event. Staging as it was (the grown slot's memory freed at once, then a wait on the new
    /// slot's unrecorded event) breaks both.
    #[test]
    fn staging_waits_on_a_slots_copy_before_reusing_or_freeing_it() {
        let recorder = Recorder::default();
        let mut staging = Staging::default();
        let sizes = [[100; STAGING_SLOTS], [10_000, 100, 100, 100, 100, 100, 100, 100]];
        for (round, bytes) in sizes.iter().flatten().enumerate() {
            staging.write(&&recorder, 0x1000, &vec![0u8; *bytes]).unwrap();
            check_staging(&recorder.log.borrow()).unwrap_or_else(|e| panic!("write {round}: {e}"));
        }
        drop(staging);
        let log = recorder.log.into_inner();
        check_staging(&log).unwrap_or_else(|e| panic!("after the drop: {e}"));
        // The test means something only if a slot grew; every host is freed in the end.
        let hosts = |alloc: bool| -> Vec<usize> {
            let host = |c: &Call| match *c {
                Call::Alloc { host } if alloc => Some(host),
                Call::Free { host } if !alloc => Some(host),
                _ => None,
            };
            let mut hosts: Vec<_> = log.iter().filter_map(host).collect();
            hosts.sort_unstable();
            hosts
        };
        assert_eq!(hosts(true).len(), STAGING_SLOTS + 1, "{log:?}");
        assert_eq!(hosts(true), hosts(false), "{log:?}");
    }
}
