//! Signalling a process by identity, never by a bare number.
//!
//! The scan pinned each process: its `/proc/PID` directory fd, opened once,
//! and its start time read through it ([`crate::model::Pins`]). To signal
//! it, we take that directory fd (never `/proc/PID` opened again by number),
//! read the start time through it, `pidfd_open(pid)`, and read it through
//! the directory fd once more: a directory fd stops answering once its
//! process is reaped, and a PID is freed only at reaping, so a live answer
//! after the pidfd exists proves the pidfd is the scanned process. The
//! signal goes through the pidfd. If `pidfd_open` is refused (ENOSYS, or
//! EPERM under old seccomp profiles), `pidfd_send_signal` on the /proc
//! directory fd itself (Linux 5.1+); last resort, a start-time-verified
//! `kill()`.

use super::monitor::{self, Tick, Watch};
use crate::model::{Pins, Snapshot};
use crate::proc::scan::start_time_now;
use rustix::event::{poll, PollFd, PollFlags};
use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags, Signal};
use std::ops::ControlFlow;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// Why a process could not be signalled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KillError {
    /// It exited (and may have been reaped) before the signal.
    #[error("gone before it was signalled")]
    Gone,
    /// The PID now belongs to another process (PID reuse).
    #[error("identity changed: the PID now belongs to a process started at tick {found}, not {expected}")]
    IdentityChanged {
        /// Start time seen by the scan.
        expected: u64,
        /// Start time found now.
        found: u64,
    },
    /// The snapshot did not pin this identity: nothing to act through.
    #[error("not pinned by the scan: never signalled by number")]
    NotPinned,
    /// Not allowed (another user's process, not root).
    #[error("permission denied: owned by another user (run as root)")]
    Permission,
    /// Another error from the kernel.
    #[error("{0}")]
    Os(Errno),
    /// Its pinned /proc directory fd could not be duplicated (out of file
    /// descriptors).
    #[error("dup of its /proc directory fd: {0}")]
    DupPin(Errno),
}

fn os(e: Errno) -> KillError {
    match e {
        Errno::SRCH | Errno::NOENT => KillError::Gone,
        Errno::PERM | Errno::ACCESS => KillError::Permission,
        e => KillError::Os(e),
    }
}

/// How the signal is delivered.
#[derive(Debug)]
enum Handle {
    Pidfd(OwnedFd),
    /// `pidfd_send_signal` on the /proc directory fd, else `kill()` after
    /// a start-time check (no pidfd support at all).
    ProcDir,
}

/// A process to signal, pinned to the identity the scan saw.
#[derive(Debug)]
pub struct Target {
    /// PID.
    pub pid: u32,
    /// Start time the scan saw (stat field 22).
    pub start_time: u64,
    dir: OwnedFd,
    handle: Handle,
}

fn check(dir: &OwnedFd, start_time: u64) -> Result<char, KillError> {
    let (found, state) = start_time_now(dir).map_err(os)?;
    if found != start_time {
        return Err(KillError::IdentityChanged {
            expected: start_time,
            found,
        });
    }
    Ok(state)
}

impl Target {
    /// Pins `pid` through the directory fd the snapshot's scan opened for
    /// it, checking it is still the process that started at `start_time`.
    pub fn pin(pins: &Pins, pid: u32, start_time: u64) -> Result<Target, KillError> {
        let dir = pins
            .get(pid, start_time)
            .ok_or(KillError::NotPinned)?
            .try_clone()
            // A dup fails only with an errno (EMFILE, ENFILE).
            .map_err(|e| KillError::DupPin(Errno::from_io_error(&e).unwrap_or(Errno::IO)))?;
        check(&dir, start_time)?;
        let raw = Pid::from_raw(pid as i32).ok_or(KillError::Gone)?;
        let handle = match rustix::process::pidfd_open(raw, PidfdFlags::empty()) {
            Ok(fd) => Handle::Pidfd(fd),
            // No pidfd_open: the /proc directory fd works as a pidfd for
            // pidfd_send_signal since 5.1; `signal` falls back to a verified
            // kill() where even that is refused.
            Err(Errno::NOSYS | Errno::PERM) => Handle::ProcDir,
            Err(e) => return Err(os(e)),
        };
        // The PID cannot have been reused while the process the directory
        // names is unreaped: a live answer now pins the pidfd too.
        check(&dir, start_time)?;
        Ok(Target {
            pid,
            start_time,
            dir,
            handle,
        })
    }

    /// Pins every live process of a snapshot (a zombie leader whose
    /// threads run counts) that is still the process the snapshot saw; the
    /// rest are left out.
    pub fn pin_all(snap: &Snapshot) -> Vec<Target> {
        snap.processes
            .iter()
            .filter(|p| p.is_live())
            .filter_map(|p| Target::pin(&snap.pins, p.pid, p.start_time_ticks).ok())
            .collect()
    }

    /// The pinned `/proc/PID` directory fd.
    pub fn dir(&self) -> &OwnedFd {
        &self.dir
    }

    /// Sends `sig` to exactly the pinned process. Once the kill was
    /// interrupted, nothing but SIGCONT is sent: this thread waits for the
    /// interrupt handler, which lets the targets go and ends the process
    /// (an interrupted kill signals nothing more).
    pub fn signal(&self, sig: Signal) -> Result<(), KillError> {
        while sig != Signal::CONT && super::quiesce::interrupted() {
            std::thread::park();
        }
        match &self.handle {
            Handle::Pidfd(fd) => rustix::process::pidfd_send_signal(fd, sig).map_err(os),
            Handle::ProcDir => match rustix::process::pidfd_send_signal(&self.dir, sig) {
                Err(Errno::BADF | Errno::INVAL | Errno::NOSYS) => self.verified_kill(sig),
                r => r.map_err(os),
            },
        }
    }

    /// The last resort: `kill()` right after checking the start time
    /// through the directory fd (the window is one syscall wide).
    fn verified_kill(&self, sig: Signal) -> Result<(), KillError> {
        check(&self.dir, self.start_time)?;
        let raw = Pid::from_raw(self.pid as i32).ok_or(KillError::Gone)?;
        rustix::process::kill_process(raw, sig).map_err(os)
    }

    /// Whether the whole thread group has exited (a zombie counts: it holds
    /// nothing any more).
    pub fn exited(&self) -> bool {
        match &self.handle {
            Handle::Pidfd(fd) => {
                let mut fds = [PollFd::new(fd, PollFlags::IN)];
                poll(
                    &mut fds,
                    Some(&rustix::event::Timespec {
                        tv_sec: 0,
                        tv_nsec: 0,
                    }),
                )
                .is_ok_and(|n| n > 0)
            }
            _ => match start_time_now(&self.dir) {
                Ok((_, state)) => state == 'Z' || state == 'X',
                Err(_) => true,
            },
        }
    }

    /// The state letter now ('?' once gone).
    pub fn state(&self) -> char {
        start_time_now(&self.dir).map_or('?', |(_, s)| s)
    }

    /// The pidfd, for polling several targets at once.
    pub fn pidfd(&self) -> Option<&OwnedFd> {
        match &self.handle {
            Handle::Pidfd(fd) => Some(fd),
            _ => None,
        }
    }
}

/// The pidfds of `targets` (those that have one): what a monitor's nap
/// wakes on when one of them exits.
pub fn pidfds(targets: &[Target]) -> Vec<BorrowedFd<'_>> {
    targets
        .iter()
        .filter_map(Target::pidfd)
        .map(AsFd::as_fd)
        .collect()
}

/// Waits until every target has exited or `timeout` passes, waking as soon
/// as a pidfd reports an exit. Returns the indexes of those still running.
pub fn wait_exited(targets: &[&Target], timeout: Duration) -> Vec<usize> {
    let mut exits = Exits {
        targets,
        running: Vec::new(),
        deadline: Instant::now() + timeout,
    };
    // However it ends, `running` is what the last look saw.
    let _ = monitor::run(&mut exits, Duration::from_millis(100));
    exits.running
}

/// The watch of [`wait_exited`]: the targets still running.
struct Exits<'a> {
    targets: &'a [&'a Target],
    running: Vec<usize>,
    deadline: Instant,
}

impl Watch for Exits<'_> {
    type Out = ();

    fn look(&mut self, _: Tick) -> ControlFlow<()> {
        self.running = (0..self.targets.len())
            .filter(|&i| !self.targets[i].exited())
            .collect();
        if self.running.is_empty() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }

    fn deadline(&self) -> Option<Instant> {
        Some(self.deadline)
    }

    fn wake_on(&self) -> Vec<BorrowedFd<'_>> {
        self.running
            .iter()
            .filter_map(|&i| self.targets[i].pidfd())
            .map(AsFd::as_fd)
            .collect()
    }
}
