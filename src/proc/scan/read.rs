//! Reading a process through its pinned `/proc/N` directory fd: a small
//! file whole, and whether the pin still names the process it was read
//! with.

use super::jobs::worker_count;
use super::task::read_stat;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use std::os::fd::{AsFd, OwnedFd};

pub(crate) fn open_dir(at: impl AsFd, name: &str) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        at,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Reads a whole small /proc file through a directory fd: one `openat`,
/// reads until end of file, one `close`. Not `std::fs`'s `read_to_end`,
/// which adds a `statx` and an `lseek` per file that a /proc file's size
/// (always 0) cannot use: three files in four per holder are these.
pub fn read_at(dir: impl AsFd, name: &str) -> rustix::io::Result<Vec<u8>> {
    read_until(dir, name, End::Empty)
}

/// As [`read_at`], for a file the kernel writes whole to any read large
/// enough (a process's `stat`, `status`, `cgroup`, `wchan`: one record
/// made at once; `cmdline` and `environ`: copied until the buffer or the
/// text ends): a read shorter than asked is its end, so no read is spent
/// on learning it (one in three of a holder's reads). Never for a file of
/// many records (`maps`), whose reads may stop short of a full buffer.
pub fn read_one_at(dir: impl AsFd, name: &str) -> rustix::io::Result<Vec<u8>> {
    read_until(dir, name, End::Short)
}

/// What says a file read has reached its end.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    /// A read of nothing.
    Empty,
    /// A read shorter than asked.
    Short,
}

/// `name` in `dir` read whole, its end known by `end`.
fn read_until(dir: impl AsFd, name: &str, end: End) -> rustix::io::Result<Vec<u8>> {
    thread_local! {
        /// Each thread's room to read into; what is returned is a copy
        /// of exactly the file's length (thousands of holders each keep
        /// several of these).
        static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; 4096]);
    }
    let fd = rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    SCRATCH.with_borrow_mut(|buf| {
        let mut len = 0;
        loop {
            if len == buf.len() {
                buf.resize(buf.len() * 2, 0);
            }
            let asked = buf.len() - len;
            match rustix::io::read(&fd, &mut buf[len..]) {
                Ok(0) => break,
                Ok(n) => {
                    len += n;
                    if end == End::Short && n < asked {
                        break;
                    }
                }
                Err(Errno::INTR) => {}
                Err(e) => return Err(e),
            }
        }
        let out = buf[..len].to_vec();
        // A huge file (an environment of megabytes) does not keep its room.
        if buf.len() > 64 * 1024 {
            *buf = vec![0; 4096];
        }
        Ok(out)
    })
}

/// The start time read through a pinned directory fd now; Err once the
/// process has been reaped (ESRCH).
pub fn start_time_now(dir: &OwnedFd) -> rustix::io::Result<(u64, char)> {
    read_stat(dir).map(|s| (s.start_time, s.state))
}

/// Whether the process a directory fd pins is still there: one `statat`
/// of its `stat` entry. The kernel looks the pinned task up before any
/// permission check and answers ESRCH once it is reaped; anything else
/// (EPERM or ENOENT from a hidepid mount for a process that made itself
/// undumpable since, EACCES) is a process still there, kept with what was
/// read of it: a holder must not leave the list by hiding. The pin holds
/// the kernel's PID object, never its number, so a successor at the
/// number is never seen through it and the process there is the one read
/// with it (its start time cannot change); a zombie is still there, as it
/// was when the pins were checked by reading `stat`, which thousands of
/// holders made thousands of formatted files the answer does not need.
fn pinned_alive(dir: &OwnedFd) -> bool {
    !matches!(
        rustix::fs::statat(dir, "stat", rustix::fs::AtFlags::empty()),
        Err(Errno::SRCH)
    )
}

/// Of each pinned process (its directory fd), whether it is still there
/// (one `statat` through each pin). The probes are spread over the
/// scan's worker count.
pub fn still_pinned(pins: &[&OwnedFd]) -> Vec<bool> {
    let alive = |dir: &&OwnedFd| pinned_alive(dir);
    let threads = worker_count(pins.len());
    if threads <= 1 {
        return pins.iter().map(alive).collect();
    }
    let chunk = pins.len().div_ceil(threads);
    std::thread::scope(|scope| {
        // A part no thread could be started for (EAGAIN: a pids limit, a
        // user at their `ulimit -u`) is checked here, on this thread.
        let parts: Vec<_> = pins
            .chunks(chunk)
            .map(|part| {
                let spawned = std::thread::Builder::new()
                    .spawn_scoped(scope, move || part.iter().map(alive).collect::<Vec<bool>>());
                (part, spawned.ok())
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|(part, handle)| match handle {
                // A part whose thread panicked is not known to be alive.
                Some(h) => h.join().unwrap_or_else(|_| vec![false; part.len()]),
                None => part.iter().map(alive).collect(),
            })
            .collect()
    })
}
