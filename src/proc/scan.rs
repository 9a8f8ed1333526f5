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

use super::nodes::NodeSet;
use super::parse::{self, Stat, Status};
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, StatxFlags};
use rustix::io::Errno;
use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
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

/// A process read through one /proc directory fd.
#[derive(Debug)]
pub struct Seen {
    /// PID in the scanned /proc.
    pub pid: u32,
    /// The nodes it holds (empty for a process pinned only because NVML
    /// lists it).
    pub uses: Vec<NodeUse>,
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

pub(crate) fn open_dir(at: impl AsFd, name: &str) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        at,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Reads a whole small /proc file through a directory fd.
pub fn read_at(dir: impl AsFd, name: &str) -> rustix::io::Result<Vec<u8>> {
    let fd = rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    let mut buf = Vec::with_capacity(512);
    std::fs::File::from(fd)
        .read_to_end(&mut buf)
        .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?;
    Ok(buf)
}

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

/// Adds (node, how) to the list, merging with an existing entry.
fn note(uses: &mut Vec<NodeUse>, node: usize, fd: bool, mmap: bool) {
    match uses.iter_mut().find(|u| u.node == node) {
        Some(u) => {
            u.fd |= fd;
            u.mmap |= mmap;
        }
        None => uses.push(NodeUse { node, fd, mmap }),
    }
}

/// What one task directory's fds and maps showed.
struct TaskScan {
    fds: usize,
    uses: Vec<NodeUse>,
    /// An fd that could not be examined (not merely closed meanwhile).
    fd_error: Option<Errno>,
}

/// Looks at every fd of a task directory.
fn scan_fds(
    task: &OwnedFd,
    nodes: &NodeSet,
    out: &mut TaskScan,
) -> Result<(), (&'static str, Errno)> {
    let fd_dir = open_dir(task, "fd").map_err(|e| ("fd", e))?;
    let dup = fd_dir.try_clone().map_err(|_| ("fd", Errno::MFILE))?;
    let dir = Dir::new(dup).map_err(|e| ("fd", e))?;
    for entry in dir {
        let entry = entry.map_err(|e| ("fd", e))?;
        let name = entry.file_name();
        if name.to_bytes().first() == Some(&b'.') {
            continue;
        }
        out.fds += 1;
        // statx follows the magic link to the open file itself, without
        // opening it; DONT_SYNC takes cached attributes instead of asking
        // the file's server (FUSE, NFS), which may hang or fail.
        let st = match rustix::fs::statx(
            &fd_dir,
            name,
            AtFlags::STATX_DONT_SYNC,
            StatxFlags::TYPE | StatxFlags::INO,
        ) {
            Ok(st) => st,
            Err(e) if is_gone(e) => continue, // fd closed meanwhile
            Err(e) if is_denied(e) => return Err(("fd", e)),
            Err(e) => {
                out.fd_error.get_or_insert(e);
                continue;
            }
        };
        let mode = u32::from(st.stx_mode);
        let rdev = (FileType::from_raw_mode(mode) == FileType::CharacterDevice)
            .then(|| rustix::fs::makedev(st.stx_rdev_major, st.stx_rdev_minor));
        let dev = rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor);
        if let Some(node) = nodes.match_stat(dev, st.stx_ino, rdev) {
            note(&mut out.uses, node, true, false);
        }
    }
    Ok(())
}

/// Reads maps in large chunks and notes mapped nodes.
fn scan_maps(
    task: &OwnedFd,
    nodes: &NodeSet,
    uses: &mut Vec<NodeUse>,
    buf: &mut Vec<u8>,
) -> rustix::io::Result<()> {
    let fd = rustix::fs::openat(
        task,
        "maps",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    if buf.len() < MAPS_CHUNK {
        buf.resize(MAPS_CHUNK, 0); // once per thread: never re-zeroed
    }
    let mut filled = 0;
    loop {
        if filled == buf.len() {
            buf.resize(buf.len() * 2, 0); // one line longer than a chunk
        }
        let n = rustix::io::read(&fd, &mut buf[filled..])?;
        let end = filled + n;
        let complete = if n == 0 {
            end
        } else {
            buf[..end]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |p| p + 1)
        };
        for line in buf[..complete].split(|&b| b == b'\n') {
            let Some(inode) = parse::maps_line_inode(line) else {
                continue;
            };
            if !nodes.maps_candidate(inode, line) {
                continue;
            }
            if let Some(e) = parse::parse_maps_line(line) {
                if let Some(node) = nodes.match_maps(e.major, e.minor, e.inode, e.path) {
                    note(uses, node, false, true);
                }
            }
        }
        if n == 0 {
            return Ok(());
        }
        buf.copy_within(complete..end, 0);
        filled = end - complete;
    }
}

/// fd table and maps of one task directory.
fn scan_task(
    task: &OwnedFd,
    nodes: &NodeSet,
    buf: &mut Vec<u8>,
) -> Result<TaskScan, (&'static str, Errno)> {
    let mut out = TaskScan {
        fds: 0,
        uses: Vec::new(),
        fd_error: None,
    };
    scan_fds(task, nodes, &mut out)?;
    scan_maps(task, nodes, &mut out.uses, buf).map_err(|e| ("maps", e))?;
    Ok(out)
}

/// Whether a pinned process holds a node now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// It holds at least one node.
    Yes,
    /// It holds none.
    No,
    /// It has been reaped.
    Gone,
    /// Its fds or maps could not be read.
    Unknown(Unread),
}

/// Whether a process holds any of `nodes` now, read through its pinned
/// directory fd (the check right before a signal).
pub fn holding_now(dir: &OwnedFd, nodes: &NodeSet) -> Holding {
    let outcome = |o: Outcome| match o {
        Outcome::Unreadable(why) => Holding::Unknown(why),
        _ => Holding::Gone,
    };
    let stat = match read_stat(dir) {
        Ok(s) => s,
        Err(e) => return outcome(classify("stat", e)),
    };
    let mut buf = Vec::new();
    match task_uses(dir, &stat, nodes, &mut buf) {
        Ok(uses) if uses.is_empty() => Holding::No,
        Ok(_) => Holding::Yes,
        Err((what, e)) => outcome(classify(what, e)),
    }
}

fn read_stat(dir: &OwnedFd) -> rustix::io::Result<Stat> {
    let bytes = read_at(dir, "stat")?;
    // An unparsable stat is not a process we can know.
    parse::parse_stat(&bytes).map_err(|_| Errno::INVAL)
}

/// The nodes a process holds, through a live thread when its leader has
/// exited (a dead leader shows an empty fd table and maps).
fn task_uses(
    dir: &OwnedFd,
    stat: &Stat,
    nodes: &NodeSet,
    buf: &mut Vec<u8>,
) -> Result<Vec<NodeUse>, (&'static str, Errno)> {
    let scan = scan_task(dir, nodes, buf)?;
    let mut uses = scan.uses;
    if scan.fds == 0 && uses.is_empty() && stat.state == 'Z' && stat.threads > 1 {
        uses = scan_live_thread(dir, stat.pid, nodes, buf)?;
    }
    if uses.is_empty() {
        if let Some(e) = scan.fd_error {
            return Err(("an fd", e));
        }
    }
    uses.sort_by_key(|u| u.node);
    Ok(uses)
}

fn scan_process(proc_fd: &OwnedFd, pid: u32, nodes: &NodeSet, buf: &mut Vec<u8>) -> Outcome {
    let dir = match open_dir(proc_fd, &pid.to_string()) {
        Ok(d) => d,
        Err(e) => return classify("the /proc directory", e),
    };
    // The identity before the fds and maps...
    let before = match read_stat(&dir) {
        Ok(s) => s,
        Err(e) => return classify("stat", e),
    };
    let uses = match task_uses(&dir, &before, nodes, buf) {
        Ok(u) => u,
        Err((what, e)) => return classify(what, e),
    };
    if uses.is_empty() {
        return Outcome::Clean(crate::model::Kin {
            ppid: before.ppid,
            comm: before.comm,
            start_time_ticks: before.start_time,
            cmdline: Vec::new(),
        });
    }
    crate::pause::after_holder_scan(pid);
    // ... and after them, with the details, through the same fd.
    match read_details(&dir) {
        Ok(details) if details.stat.start_time == before.start_time => {
            Outcome::Holds(Box::new(Seen {
                pid,
                uses,
                details,
                dir,
                fds_read: true,
            }))
        }
        Ok(_) => Outcome::Vanished,
        Err(e) if is_gone(e) => Outcome::Vanished,
        Err(e) => classify("details", e),
    }
}

/// The nodes held through the first live thread of a process whose leader
/// has exited; an error when no thread could be read.
fn scan_live_thread(
    dir: &OwnedFd,
    pid: u32,
    nodes: &NodeSet,
    buf: &mut Vec<u8>,
) -> Result<Vec<NodeUse>, (&'static str, Errno)> {
    let task_dir = open_dir(dir, "task").map_err(|e| ("task", e))?;
    let dup = task_dir.try_clone().map_err(|_| ("task", Errno::MFILE))?;
    let tasks = Dir::new(dup).map_err(|e| ("task", e))?;
    let mut failure = None;
    for entry in tasks {
        let entry = entry.map_err(|e| ("task", e))?;
        let name = entry.file_name().to_string_lossy();
        if name.starts_with('.') || name == pid.to_string() {
            continue;
        }
        match open_dir(&task_dir, &name)
            .map_err(|e| ("task", e))
            .and_then(|task| scan_task(&task, nodes, buf))
        {
            Ok(scan) if !scan.uses.is_empty() => return Ok(scan.uses),
            Ok(_) => {}
            Err((_, e)) if is_gone(e) => {} // that thread ended meanwhile
            Err(e) => failure = Some(e),
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(Vec::new()),
    }
}

/// Lists the numeric entries of the proc root (through a fresh open of it:
/// a duplicated fd would share, and exhaust, the directory offset).
pub fn list_pids(proc_fd: &OwnedFd) -> rustix::io::Result<Vec<u32>> {
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

/// One process's reads, run on a worker thread with a reusable buffer.
type Job<T> = Arc<dyn Fn(u32, &mut Vec<u8>) -> T + Send + Sync>;

/// PIDs whose reads are stuck in the kernel (a thread still waits on one),
/// kept across scans: a process that hangs every read costs one thread,
/// not one per scan of a `watch` or `serve` that runs for days. Until that
/// thread returns, the PID is reported as timed out without a new read.
#[derive(Debug, Clone, Default)]
pub struct Stuck(Arc<Mutex<std::collections::BTreeSet<u32>>>);

impl Stuck {
    fn set(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<u32>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Runs `job` on every PID over worker threads, each PID's job under
/// `limits`. A job that does not return in time is reported as
/// `Err(TimedOut)`; its thread is left behind (it holds only shared
/// references), and a fresh worker takes over the queue. PIDs not started
/// by the deadline are `Err(NotReached)`.
fn run_jobs<T: Send + 'static>(
    pids: Vec<u32>,
    threads: usize,
    limits: Limits,
    stuck: &Stuck,
    job: Job<T>,
) -> Vec<(u32, Result<T, Unread>)> {
    let mut done: BTreeMap<u32, Result<T, Unread>> = BTreeMap::new();
    let pids: Vec<u32> = {
        let still = stuck.set();
        pids.into_iter()
            .filter(|pid| {
                let hung = still.contains(pid);
                if hung {
                    done.insert(*pid, Err(Unread::StillStuck));
                }
                !hung
            })
            .collect()
    };
    struct Queue {
        pids: Vec<u32>,
        next: AtomicUsize,
        /// Per worker: the PID it works on and since when. A worker and the
        /// caller change a slot and the stuck set only under this lock.
        busy: Mutex<Vec<Option<(u32, Instant)>>>,
    }
    let queue = Arc::new(Queue {
        pids,
        next: AtomicUsize::new(0),
        busy: Mutex::new(Vec::new()),
    });
    fn lock(q: &Queue) -> std::sync::MutexGuard<'_, Vec<Option<(u32, Instant)>>> {
        q.busy.lock().unwrap_or_else(|p| p.into_inner())
    }
    let (tx, rx) = mpsc::channel::<(u32, T)>();
    // Starts a worker; false when the system refuses a thread (EAGAIN).
    let spawn = |queue: &Arc<Queue>, tx: &mpsc::Sender<(u32, T)>| -> bool {
        let slot = {
            let mut busy = lock(queue);
            busy.push(None);
            busy.len() - 1
        };
        let (queue, tx, job, stuck) = (
            Arc::clone(queue),
            tx.clone(),
            Arc::clone(&job),
            stuck.clone(),
        );
        std::thread::Builder::new()
            .name("gpufree-scan".into())
            .spawn(move || {
                let mut buf = Vec::with_capacity(MAPS_CHUNK);
                loop {
                    let i = queue.next.fetch_add(1, Ordering::Relaxed);
                    let Some(&pid) = queue.pids.get(i) else { break };
                    lock(&queue)[slot] = Some((pid, Instant::now()));
                    let r = job(pid, &mut buf);
                    {
                        let mut busy = lock(&queue);
                        // A slot the caller emptied was reported stuck.
                        if busy[slot].take().is_none() {
                            stuck.set().remove(&pid);
                        }
                    }
                    if tx.send((pid, r)).is_err() {
                        break; // the caller has given up on us
                    }
                }
            })
            .is_ok()
    };
    let mut working = (0..threads.max(1)).filter(|_| spawn(&queue, &tx)).count();
    let total = done.len() + queue.pids.len();
    let tick = Duration::from_millis(20).min(limits.read_timeout);
    while done.len() < total {
        let now = Instant::now();
        let past_deadline = limits.deadline.is_some_and(|d| now >= d);
        if past_deadline || working == 0 {
            // Stop the queue. Results already sent count; a read in hand
            // past the read timeout is stuck; the rest was not read.
            queue.next.store(queue.pids.len(), Ordering::Relaxed);
            for (pid, r) in rx.try_iter() {
                done.entry(pid).or_insert(Ok(r));
            }
            let mut busy = lock(&queue);
            for (pid, since) in busy.iter_mut().filter_map(|s| s.take()) {
                if since.elapsed() >= limits.read_timeout {
                    stuck.set().insert(pid);
                    done.entry(pid)
                        .or_insert(Err(Unread::TimedOut(since.elapsed())));
                }
            }
            drop(busy);
            let left = if working == 0 {
                Unread::Failed {
                    what: "a worker thread",
                    errno: Errno::AGAIN,
                }
            } else {
                Unread::NotReached
            };
            for &pid in &queue.pids {
                done.entry(pid).or_insert(Err(left));
            }
            break;
        }
        match rx.recv_timeout(tick) {
            Ok((pid, r)) => {
                done.entry(pid).or_insert(Ok(r));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let hung: Vec<u32> = {
                    let mut busy = lock(&queue);
                    busy.iter_mut()
                        .filter_map(|s| match *s {
                            Some((pid, since)) if since.elapsed() >= limits.read_timeout => {
                                // Reported once; the thread stays stuck.
                                *s = None;
                                stuck.set().insert(pid);
                                Some(pid)
                            }
                            _ => None,
                        })
                        .collect()
                };
                for pid in hung {
                    done.entry(pid)
                        .or_insert(Err(Unread::TimedOut(limits.read_timeout)));
                    working -= 1;
                    if spawn(&queue, &tx) {
                        working += 1;
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    done.into_iter().collect()
}

fn worker_count(n: usize) -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8)
        .min(n.div_ceil(64).max(1))
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
    let me: Option<u32> = rustix::fs::readlinkat(proc_fd.as_fd(), "self", Vec::new())
        .ok()
        .and_then(|l| l.to_str().ok().and_then(|s| s.parse().ok()));
    let pids: Vec<u32> = list_pids(proc_fd)
        .map_err(|e| ScanError::ProcRoot {
            path: proc_root.to_path_buf(),
            source: e.into(),
        })?
        .into_iter()
        .filter(|&p| Some(p) != me)
        .collect();
    let threads = worker_count(pids.len());
    let (proc_fd, nodes) = (Arc::clone(proc_fd), Arc::clone(nodes));
    let job = Arc::new(move |pid, buf: &mut Vec<u8>| scan_process(&proc_fd, pid, &nodes, buf));
    let mut result = ScanResult::default();
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

/// Pins processes that the scan did not find holding a node (NVML lists
/// them): opens each `/proc/PID` once and reads its details, fds and maps
/// through it (whether it holds a node now, where that can be read). Gone
/// PIDs are left out; unreadable ones are returned with why.
pub fn pin(
    proc_fd: &Arc<OwnedFd>,
    nodes: &Arc<NodeSet>,
    pids: Vec<u32>,
    limits: Limits,
    stuck: &Stuck,
) -> (Vec<Seen>, Vec<(u32, Unread)>) {
    let (proc_fd, nodes) = (Arc::clone(proc_fd), Arc::clone(nodes));
    let job = Arc::new(move |pid: u32, buf: &mut Vec<u8>| {
        let dir = open_dir(&*proc_fd, &pid.to_string())?;
        let details = read_details(&dir)?;
        let (uses, fds_read) = match task_uses(&dir, &details.stat, &nodes, buf) {
            Ok(uses) => (uses, true),
            Err(_) => (Vec::new(), false),
        };
        Ok::<_, Errno>(Seen {
            pid,
            uses,
            details,
            dir,
            fds_read,
        })
    });
    let threads = pids.len().clamp(1, 4);
    let mut seen = Vec::new();
    let mut unread = Vec::new();
    for (pid, r) in run_jobs(pids, threads, limits, stuck, job) {
        match r {
            Ok(Ok(s)) => seen.push(s),
            Ok(Err(e)) => {
                if let Outcome::Unreadable(why) = classify("details", e) {
                    unread.push((pid, why));
                }
            }
            Err(why) => unread.push((pid, why)),
        }
    }
    (seen, unread)
}

/// Whether each pinned process holds a node now, read through its
/// directory fd on worker threads under `limits`: a read that hangs (a
/// target in D state) is Unknown, never a wait without end.
pub fn holding_many(
    dirs: Vec<(u32, OwnedFd)>,
    nodes: &Arc<NodeSet>,
    limits: Limits,
    stuck: &Stuck,
) -> Vec<(u32, Holding)> {
    let pids: Vec<u32> = dirs.iter().map(|(pid, _)| *pid).collect();
    let dirs: Arc<BTreeMap<u32, OwnedFd>> = Arc::new(dirs.into_iter().collect());
    let nodes = Arc::clone(nodes);
    let job = Arc::new(move |pid: u32, _: &mut Vec<u8>| match dirs.get(&pid) {
        Some(dir) => holding_now(dir, &nodes),
        None => Holding::Gone,
    });
    let threads = pids.len().clamp(1, 4);
    run_jobs(pids, threads, limits, stuck, job)
        .into_iter()
        .map(|(pid, r)| (pid, r.unwrap_or_else(Holding::Unknown)))
        .collect()
}

/// Each process's comm and command line (what `pkill` matches), each read
/// under `limits`: a process whose command line cannot be read in time
/// (its memory map locked in D state) is left out.
pub fn titles(
    proc_fd: &Arc<OwnedFd>,
    pids: Vec<u32>,
    limits: Limits,
    stuck: &Stuck,
) -> Vec<(u32, String, Vec<String>)> {
    let proc_fd = Arc::clone(proc_fd);
    let job = Arc::new(move |pid: u32, _: &mut Vec<u8>| {
        let dir = open_dir(&*proc_fd, &pid.to_string()).ok()?;
        let stat = read_stat(&dir).ok()?;
        let cmdline = read_at(&dir, "cmdline")
            .map(|b| parse::parse_cmdline(&b))
            .unwrap_or_default();
        Some((stat.comm, cmdline))
    });
    let threads = worker_count(pids.len());
    run_jobs(pids, threads, limits, stuck, job)
        .into_iter()
        .filter_map(|(pid, r)| r.ok().flatten().map(|(comm, cmd)| (pid, comm, cmd)))
        .collect()
}

/// The start time read through a pinned directory fd now; Err once the
/// process has been reaped (ESRCH).
pub fn start_time_now(dir: &OwnedFd) -> rustix::io::Result<(u64, char)> {
    read_stat(dir).map(|s| (s.start_time, s.state))
}

/// What gpufree shows of a process, read through its /proc directory fd.
#[derive(Debug, Clone)]
pub struct Details {
    /// /proc/PID/stat.
    pub stat: Stat,
    /// /proc/PID/status (default when unreadable).
    pub status: Status,
    /// argv now.
    pub cmdline: Vec<String>,
    /// The executable; None when unreadable (permission, kernel thread).
    pub exe: Option<String>,
    /// Whether the executable is a file only root could have put there:
    /// owned by root, writable by nobody else, in a directory owned by root
    /// and writable by nobody else (seen through the process's own root).
    /// A daemon's name is believed only from such a file.
    pub exe_trusted: bool,
    /// Raw /proc/PID/cgroup.
    pub cgroup: Vec<u8>,
    /// /proc/PID/wchan when the process waits (not R), if readable and not "0".
    pub wchan: Option<String>,
    /// The variables of /proc/PID/environ that tell who restarts it
    /// ([`parse::SUPERVISION_ENV`]), when readable.
    pub environment: std::collections::BTreeMap<String, String>,
}

/// Reads a process's details through its directory fd; Err(ESRCH/ENOENT)
/// when it is gone.
pub fn read_details(dir: &OwnedFd) -> rustix::io::Result<Details> {
    let mut stat = read_stat(dir)?;
    if stat.state == 'Z' {
        // A dead leader no longer counts itself in num_threads; its live
        // threads still show in task/. Count the tasks, leader included.
        if let Some(n) = open_dir(dir, "task")
            .ok()
            .and_then(|t| Dir::new(t).ok())
            .map(|d| {
                d.flatten()
                    .filter(|e| !e.file_name().to_bytes().starts_with(b"."))
                    .count()
            })
        {
            stat.threads = n as u32;
        }
    }
    // Without a readable status, the owner of the /proc directory is the
    // process's effective UID: never "root" by default.
    let status = read_at(dir, "status")
        .ok()
        .and_then(|b| parse::parse_status(&b).ok())
        .unwrap_or_else(|| Status {
            uid: rustix::fs::fstat(dir).map_or(u32::MAX, |st| st.st_uid),
            nspid: Vec::new(),
        });
    let cmdline = read_at(dir, "cmdline")
        .map(|b| parse::parse_cmdline(&b))
        .unwrap_or_default();
    let exe_raw = rustix::fs::readlinkat(dir, "exe", Vec::new()).ok();
    let exe_trusted = exe_raw
        .as_ref()
        .is_some_and(|raw| exe_is_trusted(dir, raw.as_bytes()));
    let exe = exe_raw.map(|c| parse::escape_bytes(c.as_bytes()));
    let cgroup = read_at(dir, "cgroup").unwrap_or_default();
    let wchan = (stat.state != 'R')
        .then(|| read_at(dir, "wchan").ok())
        .flatten()
        .map(|w| parse::escape_bytes(w.trim_ascii()))
        .filter(|w| !w.is_empty() && w != "0");
    let environment = read_at(dir, "environ")
        .map(|b| parse::supervision_env(&b))
        .unwrap_or_default();
    Ok(Details {
        environment,
        wchan,
        stat,
        status,
        cmdline,
        exe,
        exe_trusted,
        cgroup,
    })
}

/// Whether `st` is owned by root and writable by no one else.
fn root_only(st: &rustix::fs::Stat) -> bool {
    st.st_uid == 0 && st.st_mode & 0o022 == 0
}

/// See [`Details::exe_trusted`]. The file is the one the process runs
/// (through the `exe` link, so a path replaced since does not count); its
/// directory is looked up under the process's `root` link.
fn exe_is_trusted(dir: &OwnedFd, path: &[u8]) -> bool {
    use rustix::fs::{statat, AtFlags};
    let Ok(file) = statat(dir, "exe", AtFlags::empty()) else {
        return false;
    };
    let Some(slash) = path.iter().rposition(|b| *b == b'/') else {
        return false;
    };
    let mut parent = b"root".to_vec();
    parent.extend_from_slice(if slash == 0 { b"/" } else { &path[..slash] });
    let Ok(parent) = std::ffi::CString::new(parent) else {
        return false;
    };
    root_only(&file)
        && statat(dir, parent.as_c_str(), AtFlags::empty()).is_ok_and(|d| root_only(&d))
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
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// A job over PIDs 1..=4 where PID 2's read blocks until `gate` opens;
    /// counts the reads of PID 2.
    fn blocking_job(gate: Arc<Mutex<bool>>, reads: Arc<AtomicU32>) -> Job<u32> {
        Arc::new(move |pid, _: &mut Vec<u8>| {
            if pid == 2 {
                reads.fetch_add(1, Ordering::Relaxed);
                while !*gate.lock().unwrap() {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            pid * 10
        })
    }

    #[test]
    fn a_read_that_hangs_times_out_and_costs_one_thread_across_scans() {
        let gate = Arc::new(Mutex::new(false));
        let reads = Arc::new(AtomicU32::new(0));
        let stuck = Stuck::default();
        let limits = Limits {
            read_timeout: Duration::from_millis(100),
            deadline: None,
        };
        let run = || {
            run_jobs(
                vec![1, 2, 3, 4],
                2,
                limits,
                &stuck,
                blocking_job(Arc::clone(&gate), Arc::clone(&reads)),
            )
        };
        let first = run();
        assert_eq!(first.len(), 4);
        assert!(matches!(first[1], (2, Err(Unread::TimedOut(_)))));
        assert!(first
            .iter()
            .filter(|r| r.0 != 2)
            .all(|r| r.1 == Ok(r.0 * 10)));
        // The next scan does not read PID 2 again while its read hangs.
        let second = run();
        assert_eq!(second[1], (2, Err(Unread::StillStuck)));
        assert_eq!(
            reads.load(Ordering::Relaxed),
            1,
            "one stuck thread, not two"
        );
        // Once the read returns, PID 2 is read again.
        *gate.lock().unwrap() = true;
        for _ in 0..200 {
            if !stuck.set().contains(&2) {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let third = run();
        assert_eq!(third[1], (2, Ok(20)));
        assert_eq!(reads.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn what_the_deadline_leaves_unread_is_said_so() {
        let gate = Arc::new(Mutex::new(false));
        let reads = Arc::new(AtomicU32::new(0));
        let limits = Limits {
            read_timeout: Duration::from_secs(10),
            deadline: Some(Instant::now() + Duration::from_millis(100)),
        };
        let r = run_jobs(
            vec![1, 2, 3, 4],
            1,
            limits,
            &Stuck::default(),
            blocking_job(Arc::clone(&gate), reads),
        );
        *gate.lock().unwrap() = true;
        assert_eq!(r[0], (1, Ok(10)));
        // In hand at the deadline, but not past the read timeout: not read
        // (and not taken for stuck).
        assert_eq!(r[1], (2, Err(Unread::NotReached)));
        assert_eq!(r[2], (3, Err(Unread::NotReached)));
        assert_eq!(r[3], (4, Err(Unread::NotReached)));
    }
}
