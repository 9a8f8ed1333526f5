//! What a device reports now: `state::view_device` over the live `/proc`,
//! with the moments processes were first seen gone kept beside the state
//! file.

use crate::state::{gone_log_path, pid_alive, view_device, Device, DeviceView, GoneLog};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// What the device reports now, recording first-gone moments beside the state.
pub(crate) fn view(dev: &Device, state_path: &Path) -> DeviceView {
    let log_path = gone_log_path(state_path);
    let mut log = GoneLog::load(&log_path);
    let mut changed = false;
    let proc_root = Path::new("/proc");
    let v = view_device(
        dev,
        now_ms(),
        &|pid, start| pid_alive(proc_root, pid, start),
        &mut log,
        &mut changed,
    );
    if changed {
        log.store(&log_path);
    }
    v
}
