//! Reading the in-kernel walks: each on a thread of its own, within the
//! read timeout or the command's deadline, whole or not at all.

use crate::proc::bpf::{self, Unavailable};
use crate::proc::scan::Limits;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Instant;

/// The walks' bytes, or why they were abandoned (with the count of their
/// readers still blocked).
pub(super) enum Walked {
    /// Every walk read to its end: their records.
    Done(Vec<u8>),
    /// Given up: why, with the count of its readers still reading.
    Abandoned(Arc<AtomicUsize>, Unavailable),
}

/// Reads the walks, each on a thread of its own (the walkers of the
/// per-process walk share its work; the file walk and the mapping walk of
/// the iterator walk cost about the same), then the walks read after them,
/// all within the read timeout, or until the command's deadline:
/// `task_vma` takes each task's memory map lock, which a task stuck in the
/// kernel may hold. Records are used only once every walk has been read
/// to its end: a walker of the per-process walk leaves a part another has
/// claimed, and only the other's whole output holds it.
pub(super) fn read_in_time(files: bpf::Started, limits: Limits) -> Walked {
    let timeout = Instant::now() + limits.read_timeout;
    let until = match limits.deadline {
        Some(d) if d < timeout => (d, Unavailable::DeadlineFirst),
        _ => (timeout, Unavailable::TimedOut(limits.read_timeout)),
    };
    let mut records = Vec::new();
    for stage in [files.beside, files.after] {
        match read_together(stage, &until) {
            Ok(bytes) => records.extend(bytes),
            Err(abandoned) => return abandoned,
        }
    }
    Walked::Done(records)
}

/// Reads `files` at once, each on a thread of its own, until `until.0`:
/// their bytes in the order of the files, or the walk abandoned (on
/// `until.1` when the time runs out).
fn read_together(
    files: Vec<std::fs::File>,
    until: &(Instant, Unavailable),
) -> Result<Vec<u8>, Walked> {
    let readers = Arc::new(AtomicUsize::new(files.len()));
    let (tx, rx) = mpsc::channel();
    let count = files.len();
    for (i, f) in files.into_iter().enumerate() {
        let (tx, left) = (tx.clone(), Arc::clone(&readers));
        let spawned = std::thread::Builder::new()
            .name("gpufree-bpf-walk".into())
            .spawn(move || {
                let reading = Reading(left);
                crate::test_hooks::slow_walk();
                let out = bpf::read_walk(f);
                drop(reading); // before the send: the next walk may start
                let _ = tx.send((i, out));
            });
        if let Err(e) = spawned {
            readers.fetch_sub(1, Ordering::Relaxed);
            return Err(Walked::Abandoned(readers, Unavailable::Read(e.to_string())));
        }
    }
    drop(tx);
    let mut walks = BTreeMap::new();
    while walks.len() < count {
        match rx.recv_timeout(until.0.saturating_duration_since(Instant::now())) {
            Ok((i, Ok(bytes))) => {
                walks.insert(i, bytes);
            }
            // The other walkers still walk, and claim parts of the next
            // walk with its number once it starts: the programs are busy
            // until they end.
            Ok((_, Err(e))) => {
                return Err(Walked::Abandoned(readers, Unavailable::Read(e.to_string())))
            }
            // A reader ended without its bytes (it panicked): never a walk
            // taken as whole.
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let why = Unavailable::ReaderEnded;
                return Err(Walked::Abandoned(readers, why));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(Walked::Abandoned(readers, until.1.clone()))
            }
        }
    }
    Ok(walks.into_values().flatten().collect())
}

/// A reader still reading, counted in its walk's readers until it ends,
/// even by a panic (else the programs would stay busy for good).
struct Reading(Arc<AtomicUsize>);

impl Drop for Reading {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
