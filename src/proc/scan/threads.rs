//! The live threads of a process whose leader has exited: what they hold,
//! through the memory map once (every thread shares it) and each fd table
//! once (a thread may have one of its own; most share one). Read once per
//! thread, a hostile process of 2,000 threads sharing 1,000 fds made every
//! scan 4 million reads (about 4 s).

use super::task::{scan_parts, Held};
use super::*;

/// The nodes held through the first live thread of a process whose leader
/// has exited that holds any; an error when no thread could be read.
pub(super) fn scan_live_threads(
    dir: &OwnedFd,
    pid: u32,
    nodes: &NodeSet,
    buf: &mut Vec<u8>,
) -> Result<Held, (&'static str, Errno)> {
    let task_dir = open_dir(dir, "task").map_err(|e| ("task", e))?;
    let dup = task_dir.try_clone().map_err(|_| ("task", Errno::MFILE))?;
    let tasks = Dir::new(dup).map_err(|e| ("task", e))?;
    // kcmp names tasks by their TIDs in gpufree's PID namespace: only
    // where this /proc is that namespace's.
    let ours = open_dir(dir, "..").is_ok_and(|root| proc_is_ours(&root));
    let mut read: Vec<(u32, OwnedFd)> = Vec::new();
    let mut maps_read = false;
    let mut failure = None;
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
        let task = match open_dir(&task_dir, &tid.to_string()) {
            Ok(t) => t,
            Err(e) if is_gone(e) => continue, // that thread ended meanwhile
            Err(e) => {
                failure = Some(("task", e));
                continue;
            }
        };
        if ours
            && read
                .iter()
                .any(|(rep, rep_dir)| same_table(*rep, rep_dir, tid))
        {
            continue;
        }
        match scan_parts(&task, nodes, (!maps_read).then_some(&mut *buf)) {
            Ok(scan) if !scan.uses.is_empty() => {
                return Ok(Held {
                    uses: scan.uses,
                    drm: scan.drm,
                })
            }
            Ok(scan) => {
                // An exiting thread's map reads empty: read it again
                // through the next.
                maps_read |= scan.maps > 0;
                read.push((tid, task));
            }
            Err((_, e)) if is_gone(e) => {}
            Err(e) => failure = Some(e),
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(Held::default()),
    }
}

/// Whether thread `tid` has the fd table of thread `rep`, read through
/// `rep_dir`: kcmp says so, and `rep` is still the thread read (its
/// directory still reads: its TID names no other task since).
fn same_table(rep: u32, rep_dir: &OwnedFd, tid: u32) -> bool {
    kcmp_files(rep, tid) == Some(true) && read_stat(rep_dir).is_ok()
}

/// kcmp(2) with KCMP_FILES: whether tasks `a` and `b` (TIDs in gpufree's
/// PID namespace) have one fd table; None where kcmp cannot say (a kernel
/// without CONFIG_KCMP, no ptrace access to either, a task gone). Written
/// by hand: neither rustix nor nix wraps kcmp.
#[allow(unsafe_code)]
fn kcmp_files(a: u32, b: u32) -> Option<bool> {
    const KCMP_FILES: libc::c_int = 2;
    let (a, b) = (
        libc::pid_t::try_from(a).ok()?,
        libc::pid_t::try_from(b).ok()?,
    );
    let none: libc::c_ulong = 0;
    // SAFETY: KCMP_FILES takes two TIDs and no pointer (its last two
    // arguments are unused): the call reads and writes no memory of ours.
    let r = unsafe { libc::syscall(libc::SYS_kcmp, a, b, KCMP_FILES, none, none) };
    match r {
        0 => Some(true),
        1..=3 => Some(false),
        _ => None,
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
            Some(s) => assert!(s),
            None => eprintln!("skipped: kcmp unavailable here"),
        }
        assert_ne!(other, Some(true));
    }
}
