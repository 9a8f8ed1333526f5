//! What a long-running command (watch, serve, wait) remembers between
//! its collections: NVML's Xid events since it started (`kernel.rs`),
//! and since when each holder has been idle, so that a holder idle for
//! hours says so. One-shot commands remember nothing.

use super::{kernel, Config};
use crate::model::{judged_activity, window_start_ms, Activity, Snapshot};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::Mutex;

/// A long-running command's memory.
pub(super) struct History {
    events: Mutex<kernel::Events>,
    /// Each holder idle at the last collection, by PID and start time (a
    /// reused PID is another process), and since when.
    idle: Mutex<BTreeMap<(u32, u64), u64>>,
}

impl History {
    /// Where `cfg` is a long-running command's.
    pub(super) fn start(cfg: &Config) -> Option<History> {
        Some(History {
            events: kernel::Events::start(cfg)?,
            idle: Mutex::default(),
        })
    }

    /// Puts what it remembers on `snap`: the Xid events, and each idle
    /// holder's `idle_since_unix_ms`.
    pub(super) fn join(&self, snap: &mut Snapshot, proc_fd: &OwnedFd) {
        kernel::join_events(snap, &self.events, proc_fd);
        self.mark_idle(snap);
    }

    /// Idle since the window of the first collection that found it idle,
    /// where every one since has too; a holder found busy, unknown or gone
    /// is forgotten.
    fn mark_idle(&self, snap: &mut Snapshot) {
        let mut since = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let mut now = BTreeMap::new();
        for p in &snap.processes {
            if judged_activity(snap, p) != Some(Activity::Idle) {
                continue;
            }
            let key = (p.pid, p.start_time_ticks);
            let at = since
                .get(&key)
                .copied()
                .or_else(|| window_start_ms(snap, p));
            if let Some(at) = at {
                now.insert(key, at);
            }
        }
        for p in &mut snap.processes {
            p.idle_since_unix_ms = now.get(&(p.pid, p.start_time_ticks)).copied();
        }
        *since = now;
    }
}
