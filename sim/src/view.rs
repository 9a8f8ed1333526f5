//! What a device or one of its MIG devices reports now:
//! `state::view_target` over the live `/proc`,
//! with the moments processes were first seen gone kept beside the state
//! file.

use crate::state::{gone_log_path, pid_alive, view_target, Device, GoneLog, Target, TargetView};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// What `target` of the device reports now (a MIG device of it, or the
/// whole GPU: in MIG mode the aggregate of its instances); None for a MIG
/// device that does not exist.
pub(crate) fn report(dev: &Device, target: Target, state_path: &Path) -> Option<TargetView> {
    let log_path = gone_log_path(state_path);
    let mut log = GoneLog::load(&log_path);
    let mut changed = false;
    let proc_root = Path::new("/proc");
    let v = view_target(
        dev,
        target,
        now_ms(),
        &|pid, start| pid_alive(proc_root, pid, start),
        &mut log,
        &mut changed,
    );
    if changed {
        // The log is as readable as the state: 0600 where the state's
        // mode cannot be read.
        let mode = std::fs::metadata(state_path).map_or(0o600, |m| m.permissions().mode());
        log.store(&log_path, mode);
    }
    v
}
