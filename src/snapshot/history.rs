//! What a long-running command (watch, serve, wait) remembers between
//! its collections: NVML's Xid events since it started (`kernel.rs`),
//! and since when each holder has been idle, so that a holder idle for
//! hours says so. One-shot commands remember nothing.

use super::{kernel, Config};
use crate::model::{window_start_ms, Activity, Lookup, Snapshot};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::Mutex;

/// A long-running command's memory.
pub(super) struct History {
    events: Mutex<kernel::Events>,
    /// Each holder idle at the last collection, by PID and start time (a
    /// reused PID is another process), and since when; and when the last
    /// collection was.
    idle: Mutex<Idle>,
}

/// Holders found idle, and when the last collection was (ms since the
/// epoch).
#[derive(Default)]
struct Idle {
    since: BTreeMap<(u32, u64), u64>,
    last_ms: Option<u64>,
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

    /// Idle since the first collection that found it idle, where every
    /// one since has, each asking the driver back to the one before (no
    /// gap left unasked: else it starts again now); a holder found busy,
    /// unknown or gone is forgotten.
    fn mark_idle(&self, snap: &mut Snapshot) {
        let now_ms = crate::units::unix_now_ms();
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let mut now = BTreeMap::new();
        let look = Lookup::new(snap);
        for p in &snap.processes {
            if look.judged_activity(p) != Some(Activity::Idle) {
                continue;
            }
            let key = (p.pid, p.start_time_ticks);
            let unbroken = matches!(
                (window_start_ms(snap, p), idle.last_ms),
                (Some(start), Some(last)) if start <= last
            );
            let kept = idle.since.get(&key).copied().filter(|_| unbroken);
            now.insert(key, kept.unwrap_or(now_ms));
        }
        for p in &mut snap.processes {
            p.idle_since_unix_ms = now.get(&(p.pid, p.start_time_ticks)).copied();
        }
        idle.since = now;
        idle.last_ms = Some(now_ms);
    }
}
