//! The hooks of a build with the `test-hooks` feature (the test suite's):
//! each reads its variable, never in secure mode.
//!
//! A pause point makes gpufree stop itself (SIGSTOP) at one named moment,
//! so that a test harness (its parent, waiting with `WUNTRACED`) can change
//! the world exactly there — exit a holder and hand its PID to an innocent
//! process, make a target exec — and then continue it with SIGCONT. It
//! changes nothing gpufree reads or decides: the code after the pause sees
//! the real system, as it would after any slow moment.

use std::sync::OnceLock;

/// A test variable's value; none where the caller may not steer gpufree
/// (secure mode: setuid, file capabilities), whatever the environment
/// says. The hooks fail closed: the privilege is asked here, not told.
fn var(name: &str) -> Option<String> {
    if crate::proc::me::Privilege::of_process().secure.is_some() {
        return None;
    }
    std::env::var(name).ok()
}

/// The variable that names the pause point.
pub const PAUSE_ENV: &str = "GPUFREE_TEST_PAUSE";

fn wanted() -> Option<&'static str> {
    static WANTED: OnceLock<Option<String>> = OnceLock::new();
    WANTED
        .get_or_init(|| var(PAUSE_ENV).filter(|v| !v.is_empty()))
        .as_deref()
}

fn stop_here() {
    // The whole thread group stops; the harness continues it.
    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::STOP);
}

/// The scan has read `pid`'s fds and maps and found a holder.
pub fn after_holder_scan(pid: u32) {
    if let Some(w) = wanted() {
        if w.strip_prefix("scan:").and_then(|p| p.parse().ok()) == Some(pid) {
            stop_here();
        }
    }
}

/// A kill was confirmed; nothing is pinned or signalled yet.
pub fn before_signals() {
    if wanted() == Some("signal") {
        stop_here();
    }
}

/// A kill holds its targets still (frozen or stopped), before the check.
/// Once continued, it gives a signal the harness sent meanwhile (Ctrl-C)
/// time to reach the interrupt handler before anything is signalled.
pub fn while_held() {
    if wanted() == Some("held") {
        stop_here();
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

/// The variable that makes the kernel's verifier refuse the in-kernel
/// walk's programs (`1`): its fallback is tested with a real refusal.
pub const BREAK_VERIFIER_ENV: &str = "GPUFREE_TEST_BPF_BREAK_VERIFIER";

/// Whether the in-kernel walk's programs are to be refused (tests only).
pub fn break_verifier() -> bool {
    is_one(BREAK_VERIFIER_ENV)
}

/// Whether the test variable `var` is set to 1.
fn is_one(var: &str) -> bool {
    self::var(var).is_some_and(|v| v == "1")
}

/// The variable that makes the in-kernel walk use its iterator programs
/// even where the kernel takes the per-process ones (tests only: both sets
/// are tested on one kernel).
pub const ITERATOR_WALK_ENV: &str = "GPUFREE_TEST_BPF_ITERATOR_WALK";

/// Whether the in-kernel walk is to use its iterator programs (tests only).
pub fn iterator_walk() -> bool {
    is_one(ITERATOR_WALK_ENV)
}

/// The variable that makes the per-process in-kernel walk report every
/// process unread, as it reports one whose memory map's lock was taken
/// (tests only: the read of such a process through /proc is tested).
pub const REPORT_UNREAD_ENV: &str = "GPUFREE_TEST_BPF_REPORT_UNREAD";

/// Whether the per-process walk is to report every process unread (tests
/// only).
pub fn report_unread() -> bool {
    is_one(REPORT_UNREAD_ENV)
}

/// The variable that names a file where each in-kernel walk appends the
/// PIDs of the processes it had read again through /proc, a line each: a
/// test tells a holder the kernel's walk found from one the /proc walk
/// found for it.
pub const REREAD_LOG_ENV: &str = "GPUFREE_TEST_BPF_REREAD_LOG";

/// Appends `pids`, read again through /proc, to [`REREAD_LOG_ENV`]'s file
/// (tests only; a failed write leaves the test without its log). An
/// iterator, so that a build without the hooks never collects them.
pub fn walk_reread(pids: impl Iterator<Item = u32>) {
    use std::io::Write;
    let Some(path) = var(REREAD_LOG_ENV).filter(|v| !v.is_empty()) else {
        return;
    };
    let lines: String = pids.map(|p| format!("{p}\n")).collect();
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(lines.as_bytes()));
}

/// The variable that gives `--scan auto` this count of the host's open
/// files instead of the kernel's (`fs/file-nr`): its thresholds are tested
/// without opening that many files on the machine.
pub const OPEN_FILES_ENV: &str = "GPUFREE_TEST_OPEN_FILES";

/// The count of open files the tests give auto, if any (tests only).
pub fn open_files() -> Option<u64> {
    var(OPEN_FILES_ENV)?.parse().ok()
}

/// The variable that holds each in-kernel walk's reader this many
/// milliseconds before it reads, as a task whose memory map lock is stuck
/// would hold it: the walk's timeout and fallback are tested without such
/// a task.
pub const SLOW_WALK_ENV: &str = "GPUFREE_TEST_BPF_SLOW_WALK_MS";

/// On a walk's reader thread: waits as [`SLOW_WALK_ENV`] says (tests only).
pub fn slow_walk() {
    static SLOW: OnceLock<Option<u64>> = OnceLock::new();
    let ms = SLOW.get_or_init(|| var(SLOW_WALK_ENV)?.parse().ok());
    if let Some(ms) = ms {
        std::thread::sleep(std::time::Duration::from_millis(*ms));
    }
}

/// The variable that names a file where `status`, `why` and `check` also
/// write the snapshot document (`status --json`'s) of the collection they
/// show: `--from` is tested against the live command of one collection.
pub const SNAPSHOT_COPY_ENV: &str = "GPUFREE_TEST_SNAPSHOT_COPY";

/// Where to write a copy of the snapshot document, if anywhere (tests
/// only).
pub fn snapshot_copy() -> Option<std::path::PathBuf> {
    var(SNAPSHOT_COPY_ENV)
        .filter(|v| !v.is_empty())
        .map(Into::into)
}

/// The variable that registers majors for GPU drivers as if the kernel had
/// (tests only): `name=major` pairs separated by commas, e.g.
/// `nvidia-frontend=1`, so that a test's node made with another device's
/// number (a container's own node of the same device) is taken for a GPU
/// node.
pub const GPU_MAJORS_ENV: &str = "GPUFREE_TEST_GPU_MAJORS";

/// The (driver name, major) pairs the tests register, if any (tests
/// only); a pair that does not parse is left out.
pub fn gpu_majors() -> Vec<(String, u32)> {
    let Some(v) = var(GPU_MAJORS_ENV) else {
        return Vec::new();
    };
    v.split(',')
        .filter_map(|pair| {
            let (name, major) = pair.trim().split_once('=')?;
            Some((name.trim().to_string(), major.trim().parse().ok()?))
        })
        .filter(|(name, _)| !name.is_empty())
        .collect()
}
