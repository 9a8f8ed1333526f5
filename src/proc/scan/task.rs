//! One process examined: its fd table and maps matched against the GPU
//! nodes, every live thread's when the leader is a zombie, its identity
//! read before and after.

use super::{
    classify, is_denied, is_gone, open_dir, read_at, read_one_at, DrmFd, NodeUse, Outcome, Seen,
    Unread, MAPS_CHUNK,
};
use crate::proc::nodes::{NodeKind, NodeSet};
use crate::proc::parse::{self, Stat};
use crate::proc::scan::details::read_details;
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, StatxFlags};
use rustix::io::Errno;
use std::os::fd::OwnedFd;

/// Adds (node, how) to the list, merging with an existing entry.
pub(super) fn note(uses: &mut Vec<NodeUse>, node: usize, fd: bool, mmap: bool) {
    match uses.iter_mut().find(|u| u.node == node) {
        Some(u) => {
            u.fd |= fd;
            u.mmap |= mmap;
        }
        None => uses.push(NodeUse { node, fd, mmap }),
    }
}

/// What one task directory's fds and maps showed.
pub(super) struct TaskScan {
    fds: usize,
    /// Bytes of its maps (0: no memory map, or not read).
    pub(super) map_bytes: usize,
    pub(super) uses: Vec<NodeUse>,
    pub(super) drm: Vec<DrmFd>,
    /// An fd that could not be examined (not merely closed meanwhile).
    fd_error: Option<Errno>,
}

/// Looks at every fd of a task directory.
pub(super) fn scan_fds(
    task: &OwnedFd,
    nodes: &NodeSet,
    out: &mut TaskScan,
) -> Result<(), (&'static str, Errno)> {
    let fd_dir = open_dir(task, "fd").map_err(|e| ("fd", e))?;
    let dup = fd_dir
        .try_clone()
        .map_err(|e| ("fd", Errno::from_io_error(&e).unwrap_or(Errno::MFILE)))?;
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
            if matches!(
                nodes.nodes[node].kind,
                NodeKind::DriCard | NodeKind::DriRender
            ) {
                out.drm.push(drm_fd(task, node, name));
            }
        }
    }
    Ok(())
}

/// An fd on a DRM node with its client's fdinfo, read through the task's
/// directory fd (on the scan's worker, under its deadline: a driver's
/// fdinfo takes locks).
fn drm_fd(task: &OwnedFd, node: usize, name: &std::ffi::CStr) -> DrmFd {
    let fd = name
        .to_str()
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(u32::MAX);
    let info = drm_info(task, &format!("fdinfo/{fd}"));
    DrmFd { node, fd, info }
}

/// A DRM fd's fdinfo at `path` under a /proc directory, when readable and
/// in the drm-usage-stats format.
pub(super) fn drm_info(dir: &OwnedFd, path: &str) -> Option<crate::proc::drm::Fdinfo> {
    read_at(dir, path)
        .ok()
        .and_then(|bytes| crate::proc::drm::parse_fdinfo(&bytes))
}

/// What the scan keeps of a process it read that holds nothing: its
/// parent, comm and start time (its argv is read later, only for parents
/// of holders).
pub(super) fn clean_kin(stat: Stat) -> crate::model::Kin {
    crate::model::Kin {
        ppid: stat.ppid,
        comm: stat.comm,
        start_time_ticks: stat.start_time,
        cmdline: Vec::new(),
    }
}

/// Reads maps in large chunks and notes mapped nodes; the bytes read.
pub(super) fn scan_maps(
    task: &OwnedFd,
    nodes: &NodeSet,
    uses: &mut Vec<NodeUse>,
    buf: &mut Vec<u8>,
) -> rustix::io::Result<usize> {
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
    let mut bytes = 0;
    loop {
        if filled == buf.len() {
            buf.resize(buf.len() * 2, 0); // one line longer than a chunk
        }
        let n = rustix::io::read(&fd, &mut buf[filled..])?;
        let end = filled + n;
        bytes += n;
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
            return Ok(bytes);
        }
        buf.copy_within(complete..end, 0);
        filled = end - complete;
    }
}

/// fd table and maps of one task directory.
pub(super) fn scan_task(
    task: &OwnedFd,
    nodes: &NodeSet,
    buf: &mut Vec<u8>,
) -> Result<TaskScan, (&'static str, Errno)> {
    scan_parts(task, nodes, Some(buf))
}

/// The fd table of one task directory, and its maps with a buffer for them.
pub(super) fn scan_parts(
    task: &OwnedFd,
    nodes: &NodeSet,
    maps_buf: Option<&mut Vec<u8>>,
) -> Result<TaskScan, (&'static str, Errno)> {
    let mut out = TaskScan {
        fds: 0,
        map_bytes: 0,
        uses: Vec::new(),
        drm: Vec::new(),
        fd_error: None,
    };
    scan_fds(task, nodes, &mut out)?;
    if let Some(buf) = maps_buf {
        out.map_bytes = scan_maps(task, nodes, &mut out.uses, buf).map_err(|e| ("maps", e))?;
    }
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
        Ok(held) if held.uses.is_empty() => Holding::No,
        Ok(_) => Holding::Yes,
        Err((what, e)) => outcome(classify(what, e)),
    }
}

pub(super) fn read_stat(dir: &OwnedFd) -> rustix::io::Result<Stat> {
    let bytes = read_one_at(dir, "stat")?;
    // An unparsable stat is not a process we can know.
    parse::parse_stat(&bytes).map_err(|_| Errno::INVAL)
}

/// What a process holds: its nodes, and its fds on DRM nodes.
#[derive(Default)]
pub(super) struct Held {
    pub(super) uses: Vec<NodeUse>,
    pub(super) drm: Vec<DrmFd>,
}

impl Held {
    /// Adds what `more` holds.
    pub(super) fn add(&mut self, more: Held) {
        for u in more.uses {
            note(&mut self.uses, u.node, u.fd, u.mmap);
        }
        self.drm.extend(more.drm);
    }
}

impl From<TaskScan> for Held {
    fn from(scan: TaskScan) -> Held {
        Held {
            uses: scan.uses,
            drm: scan.drm,
        }
    }
}

/// The nodes a process holds, through a live thread when its leader has
/// exited (a dead leader shows an empty fd table and maps).
pub(super) fn task_uses(
    dir: &OwnedFd,
    stat: &Stat,
    nodes: &NodeSet,
    buf: &mut Vec<u8>,
) -> Result<Held, (&'static str, Errno)> {
    let (fd_error, threads, mut held) = match scan_task(dir, nodes, buf) {
        // A leader without an fd table or a memory map (it has exited, or
        // is exiting: its map goes first, then its table, before it is a
        // zombie) while threads live on: they hold what the process holds.
        Ok(scan) => {
            let threads = stat.threads > 1 && (scan.fds == 0 || scan.map_bytes == 0);
            (scan.fd_error, threads, Held::from(scan))
        }
        // A zombie leader's fd directory is root's (mode 0500) while its
        // live threads' are their owner's: read the threads.
        Err((_, e)) if is_denied(e) && stat.threads > 1 && stat.state == 'Z' => {
            (None, true, Held::default())
        }
        Err(e) => return Err(e),
    };
    if threads {
        match super::threads::scan_live_threads(dir, stat.pid, nodes, buf) {
            Ok(more) => held.add(more),
            Err(e) if held.uses.is_empty() => return Err(e),
            Err(_) => {} // what the leader's own reads found holds it
        }
    }
    if held.uses.is_empty() {
        if let Some(e) = fd_error {
            return Err(("an fd", e));
        }
    }
    held.uses.sort_by_key(|u| u.node);
    Ok(held)
}

/// An error of a read in a process's directory, as [`classify`] says,
/// except that a `stat` or `maps` missing (ENOENT, ESRCH) while the
/// process's entry is still in the proc root is a read that failed, not a
/// process gone: it is counted unreadable, never skipped.
fn classify_in(proc_fd: &OwnedFd, pid: u32, what: &'static str, e: Errno) -> Outcome {
    let there = || rustix::fs::statat(proc_fd, pid.to_string(), AtFlags::SYMLINK_NOFOLLOW).is_ok();
    if is_gone(e) && matches!(what, "stat" | "maps") && there() {
        Outcome::Unreadable(Unread::Failed { what, errno: e })
    } else {
        classify(what, e)
    }
}

pub(super) fn scan_process(
    proc_fd: &OwnedFd,
    pid: u32,
    nodes: &NodeSet,
    buf: &mut Vec<u8>,
) -> Outcome {
    let dir = match open_dir(proc_fd, &pid.to_string()) {
        Ok(d) => d,
        Err(e) => return classify("the /proc directory", e),
    };
    // The identity before the fds and maps...
    let before = match read_stat(&dir) {
        Ok(s) => s,
        Err(e) => return classify_in(proc_fd, pid, "stat", e),
    };
    let Held { uses, drm } = match task_uses(&dir, &before, nodes, buf) {
        Ok(u) => u,
        Err((what, e)) => return classify_in(proc_fd, pid, what, e),
    };
    if uses.is_empty() {
        return Outcome::Clean(clean_kin(before));
    }
    crate::test_hooks::after_holder_scan(pid);
    // ... and after them, with the details, through the same fd.
    match read_details(&dir) {
        Ok(details) if details.stat.start_time == before.start_time => {
            Outcome::Holds(Box::new(Seen {
                pid,
                uses,
                drm,
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
