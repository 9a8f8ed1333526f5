//! The live threads of a process whose leader has exited: what they hold,
//! through the memory map once (every thread shares it) and each distinct
//! fd table once (a thread may have one of its own; most share one). Read
//! once per thread, a hostile process of 2,000 threads sharing 1,000 fds
//! made every scan 4 million reads (about 4 s).

use super::task::{scan_maps, scan_parts, Held};
use super::{is_gone, open_dir, proc_is_ours};
use crate::proc::nodes::NodeSet;
use crate::proc::scan::task::read_stat;
use rustix::fs::Dir;
use rustix::io::Errno;
use std::cmp::Ordering;
use std::os::fd::OwnedFd;

/// What the live threads of a process whose leader has exited (or is
/// exiting) hold: every distinct fd table's nodes, and the memory map's;
/// an error when no thread could be read.
pub(super) fn scan_live_threads(
    dir: &OwnedFd,
    pid: u32,
    nodes: &NodeSet,
    buf: &mut Vec<u8>,
) -> Result<Held, (&'static str, Errno)> {
    let task_dir = open_dir(dir, "task").map_err(|e| ("task", e))?;
    let dup = task_dir
        .try_clone()
        .map_err(|e| ("task", Errno::from_io_error(&e).unwrap_or(Errno::MFILE)))?;
    let tasks = Dir::new(dup).map_err(|e| ("task", e))?;
    let mut seen = Tables {
        // kcmp names tasks by their TIDs in gpufree's PID namespace: only
        // where this /proc is that namespace's.
        kcmp_usable: open_dir(dir, "..").is_ok_and(|root| proc_is_ours(&root)),
        read: Vec::new(),
    };
    let (mut held, mut map_read, mut failure) = (Held::default(), false, None);
    for entry in tasks {
        let entry = entry.map_err(|e| ("task", e))?;
        let Some(tid) = entry
            .file_name()
            .to_str()
            .ok()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if tid == pid {
            continue;
        }
        match read_thread(&task_dir, tid, nodes, &mut seen, map_read, buf) {
            Ok(Some((thread, map_bytes))) => {
                held.add(thread);
                // An exiting thread's map reads empty: read it through the
                // next.
                map_read |= map_bytes > 0;
            }
            Ok(None) => {}
            Err((_, e)) if is_gone(e) => {} // that thread ended meanwhile
            Err(e) => failure = Some(e),
        }
    }
    match failure {
        Some(e) if held.uses.is_empty() => Err(e),
        _ => Ok(held),
    }
}

/// One thread: its fd table unless one read already is the same, and the
/// memory map unless read already; with the map's bytes. None when there
/// was nothing new to read.
fn read_thread(
    task_dir: &OwnedFd,
    tid: u32,
    nodes: &NodeSet,
    seen: &mut Tables,
    map_read: bool,
    buf: &mut Vec<u8>,
) -> Result<Option<(Held, usize)>, (&'static str, Errno)> {
    let task = open_dir(task_dir, &tid.to_string()).map_err(|e| ("task", e))?;
    let Some(at) = seen.position(tid) else {
        // Its table is one read already.
        if map_read {
            return Ok(None);
        }
        let mut uses = Vec::new();
        let bytes = scan_maps(&task, nodes, &mut uses, buf).map_err(|e| ("maps", e))?;
        return Ok(Some((
            Held {
                uses,
                drm: Vec::new(),
            },
            bytes,
        )));
    };
    let scan = scan_parts(&task, nodes, (!map_read).then_some(&mut *buf))?;
    seen.insert(at, tid, task);
    let bytes = scan.map_bytes;
    Ok(Some((Held::from(scan), bytes)))
}

/// The fd tables read so far, by a thread of each, in kcmp's order of the
/// tables (a hostile process of 2,000 threads, each on a table of its own,
/// costs 2,000 × 11 comparisons, not 2 million).
struct Tables {
    /// Whether kcmp can tell tables apart here; cleared on its first
    /// failure (no CONFIG_KCMP, no ptrace access): each thread is read.
    kcmp_usable: bool,
    /// (TID, its directory) of a thread of each table read.
    read: Vec<(u32, OwnedFd)>,
}

impl Tables {
    /// Where the table of thread `tid` goes among those read; None when it
    /// is one of them, or `tid` has ended. A thread read that has ended
    /// since leaves the list (its table's holdings are noted; the next
    /// thread on it is read and takes its place): a process whose threads
    /// come and go does not turn kcmp off.
    fn position(&mut self, tid: u32) -> Option<usize> {
        while self.kcmp_usable {
            match self.search(tid) {
                Search::At(at) => return Some(at),
                Search::Read => return None,
                Search::ReaderGone(i) => {
                    self.read.remove(i);
                }
                Search::Failed => self.kcmp_usable = false,
            }
        }
        Some(self.read.len())
    }

    /// One binary search for the table of `tid` among those read.
    fn search(&self, tid: u32) -> Search {
        let (mut lo, mut hi) = (0, self.read.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let (reader, reader_dir) = &self.read[mid];
            // `reader` is still the thread read while its directory reads:
            // its TID names no other task since.
            let reader_alive = || read_stat(reader_dir).is_ok();
            match kcmp_files(tid, *reader) {
                Ok(Ordering::Equal) if reader_alive() => return Search::Read,
                Ok(Ordering::Equal) => return Search::ReaderGone(mid),
                Ok(Ordering::Less) => hi = mid,
                Ok(Ordering::Greater) => lo = mid + 1,
                Err(Errno::SRCH) if !reader_alive() => return Search::ReaderGone(mid),
                // `tid` has ended (or its TID names a task on a table
                // read): nothing more of it to read.
                Err(Errno::SRCH) => return Search::Read,
                Err(_) => return Search::Failed,
            }
        }
        Search::At(lo)
    }

    /// Notes the table of thread `tid`, read through `dir`, at `at` (the
    /// place [`Tables::position`] just gave it).
    fn insert(&mut self, at: usize, tid: u32, dir: OwnedFd) {
        self.read.insert(at, (tid, dir));
    }
}

/// What one search among the tables read found.
enum Search {
    /// The table is not among them; it goes at this place.
    At(usize),
    /// It is one read (or its thread has ended).
    Read,
    /// The thread read at this place has ended.
    ReaderGone(usize),
    /// kcmp cannot say here.
    Failed,
}

/// kcmp(2) with KCMP_FILES: how the fd table of task `a` orders against
/// `b`'s (TIDs in gpufree's PID namespace; Equal: one table, the order of
/// others is the kernel's, stable while they live), or kcmp's error (SRCH:
/// a task gone; NOSYS: a kernel without CONFIG_KCMP; PERM: no ptrace
/// access). Written by hand: neither rustix nor nix wraps kcmp.
#[allow(unsafe_code)]
fn kcmp_files(a: u32, b: u32) -> Result<Ordering, Errno> {
    const KCMP_FILES: libc::c_int = 2;
    let a = libc::pid_t::try_from(a).map_err(|_| Errno::SRCH)?;
    let b = libc::pid_t::try_from(b).map_err(|_| Errno::SRCH)?;
    let none: libc::c_ulong = 0;
    // SAFETY: KCMP_FILES takes two TIDs and no pointer (its last two
    // arguments are unused): the call reads and writes no memory of ours.
    let r = unsafe { libc::syscall(libc::SYS_kcmp, a, b, KCMP_FILES, none, none) };
    match r {
        0 => Ok(Ordering::Equal),
        1 => Ok(Ordering::Less),
        2 => Ok(Ordering::Greater),
        -1 => Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::INVAL)),
        _ => Err(Errno::INVAL),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kcmp_tells_a_shared_fd_table_from_another() {
        let me = std::process::id();
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(rustix::thread::gettid().as_raw_nonzero().get() as u32)
                .unwrap();
            let _ = done_rx.recv();
        });
        let tid = rx.recv().unwrap();
        // A thread shares its process's table; another process (init) has
        // its own (or kcmp is not allowed to say: never "the same").
        let same = kcmp_files(me, tid);
        let other = kcmp_files(me, 1);
        done_tx.send(()).unwrap();
        t.join().unwrap();
        match same {
            Ok(s) => assert_eq!(s, Ordering::Equal),
            Err(e) => eprintln!("skipped: kcmp unavailable here: {e}"),
        }
        assert_ne!(other, Ok(Ordering::Equal));
        assert_eq!(kcmp_files(me, i32::MAX as u32), Err(Errno::SRCH));
    }
}
