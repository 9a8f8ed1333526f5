//! The hooks of a build without the `test-hooks` feature (a release
//! build): each does nothing and reads nothing, with the signature of its
//! twin in `on.rs`.

/// The scan has read `pid`'s fds and maps and found a holder: nothing.
#[inline(always)]
pub fn after_holder_scan(_pid: u32) {}

/// A kill was confirmed: nothing.
#[inline(always)]
pub fn before_signals() {}

/// A kill holds its targets still: nothing.
#[inline(always)]
pub fn while_held() {}

/// The in-kernel walk's programs are never refused on purpose.
#[inline(always)]
pub fn break_verifier() -> bool {
    false
}

/// The in-kernel walk chooses its programs itself.
#[inline(always)]
pub fn iterator_walk() -> bool {
    false
}

/// The per-process walk reports what it read.
#[inline(always)]
pub fn report_unread() -> bool {
    false
}

/// No log of the processes a walk read again.
#[inline(always)]
pub fn walk_reread(_pids: impl Iterator<Item = u32>) {}

/// `--scan auto` counts the kernel's open files.
#[inline(always)]
pub fn open_files() -> Option<u64> {
    None
}

/// A walk's reader reads at once.
#[inline(always)]
pub fn slow_walk() {}

/// No copy of the snapshot document is written.
#[inline(always)]
pub fn snapshot_copy() -> Option<std::path::PathBuf> {
    None
}

/// Only the kernel registers GPU drivers' majors.
#[inline(always)]
pub fn gpu_majors() -> Vec<(String, u32)> {
    Vec::new()
}
