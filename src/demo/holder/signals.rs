//! What a holder does with signals and children: restart children as a
//! supervisor does, fork on SIGTERM, ignore it, or end its main thread.

use super::{spawn, ChildSpec, Spawned};
use std::path::PathBuf;

/// Restarts each child in `running` when it exits, `left` times in all,
/// from a thread of its own per child.
pub(super) fn supervise(
    exe: PathBuf,
    specs: Vec<ChildSpec>,
    running: Vec<Spawned>,
    left: u32,
    delay: std::time::Duration,
) {
    let left = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(left));
    for (spec, mut s) in specs.into_iter().zip(running) {
        let (exe, left) = (exe.clone(), std::sync::Arc::clone(&left));
        std::thread::spawn(move || loop {
            let _ = s.child.wait();
            let take = left.fetch_update(
                std::sync::atomic::Ordering::SeqCst,
                std::sync::atomic::Ordering::SeqCst,
                |n| n.checked_sub(1),
            );
            if take.is_err() {
                return;
            }
            std::thread::sleep(delay);
            match spawn(&exe, &spec) {
                Ok(next) => s = next,
                Err(_) => return,
            }
        });
    }
}

/// Starts with no signal blocked: a mask inherited from the starter (one
/// that blocks SIGTERM for `sigwait`) would make this holder deaf to TERM.
#[allow(unsafe_code)]
pub(super) fn unblock_signals() {
    // SAFETY: plain libc calls on a local, zero-initialised sigset_t, made
    // before any other thread exists.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

/// Blocks SIGTERM in every thread and lets one thread take it with
/// `sigwait`: then it starts `child`, and exits the process unless `stay`
/// (then it waits for the next SIGTERM).
#[allow(unsafe_code)]
pub(super) fn on_term(child: ChildSpec, stay: bool) -> std::io::Result<()> {
    // SAFETY: plain libc calls on a local, zero-initialised sigset_t; the
    // mask is set before any other thread exists, so all inherit it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    std::thread::spawn(move || loop {
        // SAFETY: as above; sigwait only reads the set and writes `sig`.
        let mut sig = 0;
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigwait(&set, &mut sig);
        }
        if let Ok(exe) = std::env::current_exe() {
            if let Ok(s) = spawn(&exe, &child) {
                std::mem::forget(s); // it must outlive us
            }
        }
        if !stay {
            std::process::exit(0);
        }
    });
    Ok(())
}

#[allow(unsafe_code)]
pub(super) fn end_main_thread() -> ! {
    // SAFETY: the raw exit syscall (not exit_group) ends only the calling
    // thread, without unwinding (pthread_exit's forced unwind would abort
    // in Rust's main); the process lives on in the parked thread, and
    // nothing of this thread's stack is used again.
    unsafe {
        libc::syscall(libc::SYS_exit, 0);
    }
    unreachable!("SYS_exit returned")
}

#[allow(unsafe_code)]
pub(super) fn ignore_sigterm() {
    // SAFETY: SIG_IGN installs no handler code; async-signal safety is moot.
    unsafe {
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
    }
}

/// Catches SIGUSR1 with a handler that does nothing, without
/// `SA_RESTART`: a signal then ends a read's interruptible wait (a FUSE
/// request moves on to its killable wait, in D) instead of ending this
/// process.
#[allow(unsafe_code)]
pub(super) fn catch_usr1() {
    extern "C" fn nothing(_: libc::c_int) {}
    // SAFETY: the handler does nothing, so it is async-signal safe; the
    // sigaction is a local, zero-initialised value the call only reads.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = nothing as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(libc::SIGUSR1, &act, std::ptr::null_mut());
    }
}

/// Starts a child this process waits for as a vfork parent does
/// (`CLONE_VFORK`: the parent sleeps in D, in `kernel_clone`, until the
/// child execs or exits), and the child only pauses. Unlike `vfork` it
/// shares no memory (no `CLONE_VM`): the child runs on its own copy, so
/// nothing it does can touch this process's stack. The child dies with
/// this process (`PR_SET_PDEATHSIG`) and after 10 minutes at the latest.
#[allow(unsafe_code)]
pub(super) fn vfork_pause() {
    let parent = i64::from(std::process::id());
    // SAFETY: a raw clone with no new stack and no shared memory is a
    // fork: the child returns here on a copy of this process (one thread
    // at this point) and makes only raw system calls with values on its
    // own stack (prctl, getppid, ppoll) before `_exit`, never returning
    // into Rust code; the parent is suspended until the child is gone.
    unsafe {
        let flags = (libc::CLONE_VFORK | libc::SIGCHLD) as libc::c_ulong;
        let pid = libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize);
        if pid == 0 {
            let kill = libc::SIGKILL as libc::c_ulong;
            libc::syscall(libc::SYS_prctl, libc::PR_SET_PDEATHSIG, kill, 0, 0, 0);
            if libc::syscall(libc::SYS_getppid) == parent {
                let at_most = libc::timespec {
                    tv_sec: 600,
                    tv_nsec: 0,
                };
                let no_fds: *mut libc::pollfd = std::ptr::null_mut();
                let no_mask: *const libc::sigset_t = std::ptr::null();
                libc::syscall(libc::SYS_ppoll, no_fds, 0, &at_most, no_mask, 0);
            }
            libc::_exit(0);
        }
    }
}
