//! `check`'s second look at the holders its snapshot saw in
//! uninterruptible sleep (D): each sampled again through the directory fd
//! the scan pinned, every [`STUCK_SAMPLE_MS`] until [`STUCK_WINDOW_MS`]
//! after the first sample. No holder in D, no sample and no wait.

use super::Collector;
use crate::model::{Sample, Snapshot, Window, STUCK_SAMPLE_MS, STUCK_WINDOW_MS};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

/// What the window saw of each holder of `snap` in D, by PID (those
/// `snap` pinned; one without a pin has no window): the first sample at
/// once, then one every [`STUCK_SAMPLE_MS`], the last at least
/// [`STUCK_WINDOW_MS`] after the first. Empty, at once, where no holder
/// is in D.
pub fn windows(c: &Collector, snap: &Snapshot) -> BTreeMap<u32, Window> {
    let pinned: Vec<(u32, OwnedFd)> = snap
        .processes
        .iter()
        .filter(|p| p.state == "D")
        .filter_map(|p| {
            let dir = snap.pins.get(p.pid, p.start_time_ticks)?;
            Some((p.pid, dir.try_clone().ok()?))
        })
        .collect();
    let mut windows: BTreeMap<u32, Window> = pinned
        .iter()
        .map(|(pid, _)| (*pid, Window::default()))
        .collect();
    if pinned.is_empty() {
        return windows;
    }
    let every = Duration::from_millis(STUCK_SAMPLE_MS);
    let span = Duration::from_millis(STUCK_WINDOW_MS);
    let start = Instant::now();
    for round in 1u32.. {
        let at = start.elapsed();
        let dirs = pinned
            .iter()
            .filter_map(|(pid, d)| Some((*pid, d.try_clone().ok()?)))
            .collect();
        let at_ms = u64::try_from(at.as_millis()).unwrap_or(u64::MAX);
        for (pid, seen) in c.waits(dirs, None) {
            if let Some(w) = windows.get_mut(&pid) {
                w.samples.push(Sample { at_ms, seen });
            }
        }
        if at >= span {
            break;
        }
        std::thread::sleep((every * round).saturating_sub(start.elapsed()));
    }
    windows
}
