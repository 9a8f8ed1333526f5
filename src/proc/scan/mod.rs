//! The holder scan: every process with an open fd on, or a mapping of, a GPU
//! device node, found through /proc directory fds with one `statx` per fd
//! and maps read in 256 KiB reads, in parallel over processes.
//!
//! One process, one directory fd: `/proc/N` is opened once, and everything
//! gpufree knows of the process — its start time before and after its fds
//! and maps, its details, and later the identity check before a signal — is
//! read through that fd. A `/proc/N` directory fd stays bound to the process
//! it was opened on: once that process is reaped, reads through it fail with
//! ESRCH, even if the number N has meanwhile been given to another process.
//! So a record can never mix two processes.
//!
//! It never opens a device node or an fd link (that would run the driver's
//! open), never asks a file system for fresh attributes (`AT_STATX_DONT_SYNC`:
//! a FUSE or NFS server that hangs or answers EIO cannot stall or blind the
//! scan), never counts itself, treats a process that exits mid-scan as gone,
//! and counts the processes it may not read, or could not read in time,
//! with the reason, instead of calling them clean. Every per-process read
//! runs on a worker thread under a deadline: a read that blocks (maps of a
//! process stuck in D state, a hung network file system) is reported as
//! timed out and its thread left behind.

mod chosen;
mod details;
mod from_bpf;
mod jobs;
mod method;
mod read;
mod task;
mod threads;

pub use chosen::{holding_many, pin, titles, waits};
pub use details::{read_details, Details};
pub use jobs::Stuck;
use jobs::{reserve_fds, run_jobs, worker_count};
pub use method::{ScanChoice, Scanned, WalkChooser, CROSSOVER_FILES, CROSSOVER_FILES_CACHED};
pub(crate) use read::open_dir;
pub use read::{read_at, read_one_at, start_time_now, still_pinned};
use task::scan_process;
pub use task::{holding_now, Holding};

use super::nodes::NodeSet;
use super::parse;
use rustix::fs::{Dir, Mode, OFlags};
use rustix::io::Errno;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How one process holds one node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeUse {
    /// Index into [`NodeSet::nodes`].
    pub node: usize,
    /// Through an open fd.
    pub fd: bool,
    /// Through a mapping.
    pub mmap: bool,
}

/// One fd of a process on a DRM node (`dri/card*`, `dri/renderD*`), with
/// what its fdinfo says of the DRM client behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrmFd {
    /// Index into [`NodeSet::nodes`].
    pub node: usize,
    /// The fd number.
    pub fd: u32,
    /// Its fdinfo in the drm-usage-stats format; None where the fdinfo
    /// could not be read or the driver writes no such keys (a kernel
    /// before 5.19 for amdgpu): the client's memory is then unknown.
    pub info: Option<crate::proc::drm::Fdinfo>,
}

/// A process read through one /proc directory fd.
#[derive(Debug)]
pub struct Seen {
    /// PID in the scanned /proc.
    pub pid: u32,
    /// The nodes it holds (empty for a process pinned only because NVML
    /// lists it).
    pub uses: Vec<NodeUse>,
    /// Its fds on DRM nodes, each with its client's fdinfo.
    pub drm: Vec<DrmFd>,
    /// What gpufree shows of it, read through `dir`.
    pub details: Details,
    /// Its `/proc/PID` directory fd: the pinned identity.
    pub dir: OwnedFd,
    /// Its fd table and maps were read (so `uses` is the whole truth).
    pub fds_read: bool,
}

/// Why a process could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unread {
    /// EACCES/EPERM: not root, or a process even root may not read (an
    /// outer sandbox's init).
    Permission,
    /// A read did not finish within the read timeout.
    TimedOut(Duration),
    /// Not read at all: the command's deadline came first.
    NotReached,
    /// Not read again: an earlier read of it is still stuck in the kernel.
    StillStuck,
    /// A read failed with another error (EIO, EMFILE...).
    Failed {
        /// Which file or step.
        what: &'static str,
        /// The error.
        errno: Errno,
    },
}

impl std::fmt::Display for Unread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unread::Permission => f.write_str("permission denied"),
            Unread::TimedOut(d) => write!(f, "a read timed out after {:.1} s", d.as_secs_f64()),
            Unread::NotReached => f.write_str("not read before the deadline"),
            Unread::StillStuck => f.write_str("an earlier read of it is still stuck"),
            Unread::Failed { what, errno } => write!(f, "reading {what} failed: {errno}"),
        }
    }
}

/// The result of a scan.
#[derive(Debug, Default)]
pub struct ScanResult {
    /// Holders, by PID.
    pub holders: Vec<Seen>,
    /// Processes whose fd table and maps were examined.
    pub scanned: u32,
    /// Processes that could not be read, with why, by PID.
    pub unreadable: Vec<(u32, Unread)>,
    /// Holders dropped because the process was gone by the time its
    /// identity was read again (its PID may already name another process).
    pub vanished: Vec<u32>,
    /// Every process read that holds nothing (holders carry theirs): the
    /// process tree as this one pass saw it.
    pub parents: Vec<(u32, crate::model::Kin)>,
    /// Every PID of the walk (this process left out): what a later pass
    /// over every process reads, without walking the directory again.
    pub listed: Vec<u32>,
    /// Processes the in-kernel walk could not read in full, read again
    /// through /proc.
    pub reread: u32,
    /// Holders whose mappings the in-kernel walk took from the result it
    /// kept at an earlier walk (their memory map unchanged since).
    pub kept: u32,
}

/// Errors of the scan as a whole (per-process trouble is never one).
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    /// The proc root could not be opened or listed.
    #[error("cannot read {path}: {source}")]
    ProcRoot {
        /// The proc root.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The proc root lists no process at all: not a proc file system (an
    /// empty mount point, a namespace whose processes are all gone).
    /// Nothing seen is not nothing held.
    #[error("{}: lists no process: not a proc file system", .path.display())]
    NoProcesses {
        /// The proc root.
        path: PathBuf,
    },
}

/// How long reads may take.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// One process's reads (fd table, maps, details) may take this long.
    pub read_timeout: Duration,
    /// Nothing is read after this moment: what is left is reported as timed out.
    pub deadline: Option<Instant>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            read_timeout: Duration::from_secs(5),
            deadline: None,
        }
    }
}

enum Outcome {
    Gone,
    Vanished,
    Unreadable(Unread),
    /// Read, and holds nothing; its parent and comm.
    Clean(crate::model::Kin),
    Holds(Box<Seen>),
}

const MAPS_CHUNK: usize = 256 * 1024;

fn is_gone(e: Errno) -> bool {
    e == Errno::NOENT || e == Errno::SRCH
}

fn is_denied(e: Errno) -> bool {
    e == Errno::ACCESS || e == Errno::PERM
}

/// An error of one read, classified: gone, no permission, or a failure
/// that leaves the process unseen.
fn classify(what: &'static str, e: Errno) -> Outcome {
    if is_gone(e) {
        Outcome::Gone
    } else if is_denied(e) {
        Outcome::Unreadable(Unread::Permission)
    } else {
        Outcome::Unreadable(Unread::Failed { what, errno: e })
    }
}

/// Full walks of a proc directory (listings of every PID in it) by this
/// process so far: see [`walks`].
static WALKS: AtomicUsize = AtomicUsize::new(0);

/// How many times this process has walked every process: a proc
/// directory listed, or the kernel's walk (`from_bpf.rs`). A holder scan does
/// once, and so does any other pass over every process. Tests read it to prove that a command collects once.
pub fn walks() -> usize {
    WALKS.load(Ordering::Relaxed)
}

/// Lists the numeric entries of the proc root (through a fresh open of it:
/// a duplicated fd would share, and exhaust, the directory offset).
pub fn list_pids(proc_fd: &OwnedFd) -> rustix::io::Result<Vec<u32>> {
    WALKS.fetch_add(1, Ordering::Relaxed);
    let dir = Dir::new(open_dir(proc_fd, ".")?)?;
    let mut pids = Vec::with_capacity(1024);
    for entry in dir {
        if let Ok(pid) = std::str::from_utf8(entry?.file_name().to_bytes())
            .unwrap_or("")
            .parse::<u32>()
        {
            pids.push(pid);
        }
    }
    pids.sort_unstable();
    Ok(pids)
}

/// This process as the proc root numbers it: its `self` link (a host's
/// /proc mounted in a container names it by its host PID; a fake tree has
/// none). The proc root is this process's own namespace's when that is
/// this process's PID.
pub fn self_pid(proc_fd: &OwnedFd) -> Option<u32> {
    rustix::fs::readlinkat(proc_fd, "self", Vec::new())
        .ok()
        .and_then(|l| l.to_str().ok()?.parse().ok())
}

/// Whether the proc root is this process's own PID namespace's: its `self`
/// is this process, and names it by one PID only. A /proc of an ancestor
/// namespace (mounted before an `unshare --pid` without `--mount-proc`)
/// lists this process's PIDs in both namespaces (`NSpid`), and its `self`
/// may equal this process's PID here by coincidence, or by a steered
/// `ns_last_pid`; its PIDs name other processes here.
///
/// A proc root must also be a proc file system (`fstatfs`): a directory of
/// files a user made, whose `self` links to gpufree's PID, names nothing.
pub fn proc_is_ours(proc_fd: &OwnedFd) -> bool {
    is_procfs(proc_fd) && self_is_ours(proc_fd)
}

/// Whether the proc root's `self` names this process by one PID only (a
/// proc file system's or not: [`proc_is_ours`] asks both).
fn self_is_ours(proc_fd: &OwnedFd) -> bool {
    self_pid(proc_fd) == Some(std::process::id())
        && read_at(proc_fd, "self/status")
            .ok()
            .and_then(|b| parse::parse_status(&b).ok())
            .is_some_and(|s| s.nspid.len() <= 1)
}

/// Whether `fd` is on a proc file system (its magic, from `fstatfs`).
pub fn is_procfs(fd: &OwnedFd) -> bool {
    rustix::fs::fstatfs(fd).is_ok_and(|s| s.f_type == libc::PROC_SUPER_MAGIC)
}

/// Opens the proc root as a directory fd.
pub fn open_proc(proc_root: &Path) -> Result<OwnedFd, ScanError> {
    rustix::fs::open(
        proc_root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| ScanError::ProcRoot {
        path: proc_root.to_path_buf(),
        source: e.into(),
    })
}

/// Scans every process of the proc root (except this one) for holders of
/// `nodes`.
pub fn scan(
    proc_fd: &Arc<OwnedFd>,
    proc_root: &Path,
    nodes: &Arc<NodeSet>,
    limits: Limits,
    stuck: &Stuck,
) -> Result<ScanResult, ScanError> {
    // This process, as the proc root numbers it: its "self" link (a host's
    // /proc mounted in a container names it by its host PID; a fake tree
    // has none, and then no PID of it is skipped).
    let me = self_pid(proc_fd);
    let listed = list_pids(proc_fd).map_err(|e| ScanError::ProcRoot {
        path: proc_root.to_path_buf(),
        source: e.into(),
    })?;
    if listed.is_empty() {
        return Err(ScanError::NoProcesses {
            path: proc_root.to_path_buf(),
        });
    }
    let pids: Vec<u32> = listed.into_iter().filter(|&p| Some(p) != me).collect();
    let threads = worker_count(pids.len());
    // A holder found keeps its directory fd; any process may be one.
    reserve_fds(pids.len());
    let (proc_fd, nodes) = (Arc::clone(proc_fd), Arc::clone(nodes));
    let job = Arc::new(move |pid, buf: &mut Vec<u8>| scan_process(&proc_fd, pid, &nodes, buf));
    let mut result = ScanResult {
        listed: pids.clone(),
        ..ScanResult::default()
    };
    for (pid, outcome) in run_jobs(pids, threads, limits, stuck, job) {
        match outcome {
            Ok(Outcome::Gone) => {}
            Ok(Outcome::Vanished) => result.vanished.push(pid),
            Ok(Outcome::Unreadable(why)) => {
                result.scanned += 1;
                result.unreadable.push((pid, why));
            }
            Err(why) => {
                result.scanned += 1;
                result.unreadable.push((pid, why));
            }
            Ok(Outcome::Clean(kin)) => {
                result.scanned += 1;
                result.parents.push((pid, kin));
            }
            Ok(Outcome::Holds(seen)) => {
                result.scanned += 1;
                result.holders.push(*seen);
            }
        }
    }
    Ok(result)
}

/// Whether `pid` exists in /proc and is neither a zombie nor dead (for the
/// demo's and the tests' own bookkeeping of the processes they started).
pub fn alive(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|b| parse::parse_stat(&b).ok())
        .is_some_and(|s| !matches!(s.state, 'Z' | 'X' | 'x'))
}

#[cfg(test)]
mod tests;
