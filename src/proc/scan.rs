//! The holder scan: every process with an open fd on, or a mapping of, a GPU
//! device node, found through /proc directory fds with one `fstatat` per fd
//! and maps read in 256 KiB reads, in parallel over processes.
//!
//! It never opens a device node or an fd link (that would run the driver's
//! open), never counts itself, treats a process that exits mid-scan as gone,
//! and counts the processes it may not read instead of calling them clean.

use super::nodes::NodeSet;
use super::parse::{self, Stat, Status};
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

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

/// One holder found by the scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// PID in the scanned /proc.
    pub pid: u32,
    /// The nodes it holds, by node index.
    pub uses: Vec<NodeUse>,
}

/// The result of a scan.
#[derive(Debug, Clone, Default)]
pub struct ScanResult {
    /// Holders, by PID.
    pub holders: Vec<Holder>,
    /// Processes whose fd table and maps were examined.
    pub scanned: u32,
    /// Processes that could not be read (EACCES/EPERM), by PID.
    pub unreadable: Vec<u32>,
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

enum Outcome {
    Gone,
    Unreadable,
    Clean,
    Holds(Vec<NodeUse>),
}

const MAPS_CHUNK: usize = 256 * 1024;

fn open_dir(at: impl AsFd, name: &str) -> rustix::io::Result<OwnedFd> {
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

/// Looks at every fd of a task directory; Ok(count of fds seen).
fn scan_fds(task: &OwnedFd, nodes: &NodeSet, uses: &mut Vec<NodeUse>) -> rustix::io::Result<usize> {
    let fd_dir = open_dir(task, "fd")?;
    let mut seen = 0;
    let dir = Dir::new(fd_dir.try_clone().map_err(|_| Errno::MFILE)?)?;
    for entry in dir {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_bytes().first() == Some(&b'.') {
            continue;
        }
        seen += 1;
        // stat follows the magic link to the open file itself, without
        // opening it.
        let st = match rustix::fs::statat(&fd_dir, name, AtFlags::empty()) {
            Ok(st) => st,
            Err(e) if is_gone(e) => continue, // fd closed meanwhile
            Err(e) => return Err(e),
        };
        let rdev = (FileType::from_raw_mode(st.st_mode) == FileType::CharacterDevice)
            .then_some(st.st_rdev);
        if let Some(node) = nodes.match_stat(st.st_dev, st.st_ino, rdev) {
            note(uses, node, true, false);
        }
    }
    Ok(seen)
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
) -> rustix::io::Result<(usize, Vec<NodeUse>)> {
    let mut uses = Vec::new();
    let fds = scan_fds(task, nodes, &mut uses)?;
    scan_maps(task, nodes, &mut uses, buf)?;
    Ok((fds, uses))
}

fn scan_process(proc_fd: &OwnedFd, pid: u32, nodes: &NodeSet, buf: &mut Vec<u8>) -> Outcome {
    let classify = |e: Errno| {
        if is_gone(e) {
            Outcome::Gone
        } else if is_denied(e) {
            Outcome::Unreadable
        } else {
            Outcome::Gone // a vanished process can surface as odd errnos (e.g. EINVAL)
        }
    };
    let dir = match open_dir(proc_fd, &pid.to_string()) {
        Ok(d) => d,
        Err(e) => return classify(e),
    };
    let (fds, mut uses) = match scan_task(&dir, nodes, buf) {
        Ok(r) => r,
        Err(e) => return classify(e),
    };
    // A thread-group leader that exited while other threads live shows an
    // empty fd table and maps: look through a live thread instead.
    if fds == 0 && uses.is_empty() {
        if let Ok(stat) = read_at(&dir, "stat").map(|b| parse::parse_stat(&b)) {
            if stat.is_ok_and(|s| s.state == 'Z' && s.threads > 1) {
                uses = scan_live_thread(&dir, pid, nodes, buf);
            }
        }
    }
    if uses.is_empty() {
        Outcome::Clean
    } else {
        uses.sort_by_key(|u| u.node);
        Outcome::Holds(uses)
    }
}

fn scan_live_thread(dir: &OwnedFd, pid: u32, nodes: &NodeSet, buf: &mut Vec<u8>) -> Vec<NodeUse> {
    let Ok(task_dir) = open_dir(dir, "task") else {
        return Vec::new();
    };
    let Ok(dup) = task_dir.try_clone() else {
        return Vec::new();
    };
    let Ok(mut tasks) = Dir::new(dup) else {
        return Vec::new();
    };
    while let Some(Ok(entry)) = tasks.next() {
        let name = entry.file_name().to_string_lossy();
        if name.starts_with('.') || name == pid.to_string() {
            continue;
        }
        if let Ok(task) = open_dir(&task_dir, &name) {
            if let Ok((_, uses)) = scan_task(&task, nodes, buf) {
                if !uses.is_empty() {
                    return uses;
                }
            }
        }
    }
    Vec::new()
}

/// Lists the numeric entries of the proc root.
pub fn list_pids(proc_fd: &OwnedFd) -> rustix::io::Result<Vec<u32>> {
    let dir = Dir::new(proc_fd.try_clone().map_err(|_| Errno::MFILE)?)?;
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

/// Scans every process of `proc_root` (except this one) for holders of `nodes`.
pub fn scan(proc_root: &Path, nodes: &NodeSet) -> Result<ScanResult, ScanError> {
    let proc_fd = open_proc(proc_root)?;
    let pids = list_pids(&proc_fd).map_err(|e| ScanError::ProcRoot {
        path: proc_root.to_path_buf(),
        source: e.into(),
    })?;
    let me = rustix::process::getpid().as_raw_nonzero().get() as u32;
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8)
        .min(pids.len().div_ceil(64).max(1));
    let next = AtomicUsize::new(0);
    let result = Mutex::new(ScanResult::default());
    let work = || {
        let mut local = ScanResult::default();
        let mut buf = Vec::with_capacity(MAPS_CHUNK);
        const CHUNK: usize = 16;
        loop {
            let start = next.fetch_add(CHUNK, Ordering::Relaxed);
            if start >= pids.len() {
                break;
            }
            for &pid in &pids[start..(start + CHUNK).min(pids.len())] {
                if pid == me {
                    continue;
                }
                match scan_process(&proc_fd, pid, nodes, &mut buf) {
                    Outcome::Gone => {}
                    Outcome::Unreadable => {
                        local.scanned += 1;
                        local.unreadable.push(pid);
                    }
                    Outcome::Clean => local.scanned += 1,
                    Outcome::Holds(uses) => {
                        local.scanned += 1;
                        local.holders.push(Holder { pid, uses });
                    }
                }
            }
        }
        let mut all = result.lock().unwrap_or_else(|p| p.into_inner());
        all.scanned += local.scanned;
        all.unreadable.extend(local.unreadable);
        all.holders.extend(local.holders);
    };
    std::thread::scope(|s| {
        for _ in 1..threads {
            s.spawn(work);
        }
        work();
    });
    let mut result = result.into_inner().unwrap_or_else(|p| p.into_inner());
    result.holders.sort_by_key(|h| h.pid);
    result.unreadable.sort_unstable();
    Ok(result)
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
    /// Raw /proc/PID/cgroup.
    pub cgroup: Vec<u8>,
    /// /proc/PID/wchan when the process waits (not R), if readable and not "0".
    pub wchan: Option<String>,
}

/// Reads a process's details; None when it is gone (or its stat is unusable).
pub fn read_details(proc_fd: &OwnedFd, pid: u32) -> Option<Details> {
    let dir = open_dir(proc_fd, &pid.to_string()).ok()?;
    let mut stat = parse::parse_stat(&read_at(&dir, "stat").ok()?).ok()?;
    if stat.state == 'Z' {
        // A dead leader no longer counts itself in num_threads; its live
        // threads still show in task/. Count the tasks, leader included.
        if let Some(n) = open_dir(&dir, "task")
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
    let status = read_at(&dir, "status")
        .ok()
        .and_then(|b| parse::parse_status(&b).ok())
        .unwrap_or_default();
    let cmdline = read_at(&dir, "cmdline")
        .map(|b| parse::parse_cmdline(&b))
        .unwrap_or_default();
    let exe = rustix::fs::readlinkat(&dir, "exe", Vec::new())
        .ok()
        .map(|c| parse::escape_bytes(c.as_bytes()));
    let cgroup = read_at(&dir, "cgroup").unwrap_or_default();
    let wchan = (stat.state != 'R')
        .then(|| read_at(&dir, "wchan").ok())
        .flatten()
        .map(|w| parse::escape_bytes(w.trim_ascii()))
        .filter(|w| !w.is_empty() && w != "0");
    Some(Details {
        wchan,
        stat,
        status,
        cmdline,
        exe,
        cgroup,
    })
}

/// Whether `pid` exists in /proc and is neither a zombie nor dead.
pub fn alive(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|b| parse::parse_stat(&b).ok())
        .is_some_and(|s| !matches!(s.state, 'Z' | 'X' | 'x'))
}
