//! A snapshot's handles on the processes it saw: each one's `/proc/PID`
//! directory fd and start time, which act reads through before a signal.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// One process pinned by the scan: its start time and its `/proc/PID`
/// directory fd, which stays bound to that process (reads through it fail
/// once it has been reaped, whatever now has its PID).
#[derive(Debug)]
pub struct Pin {
    /// Start time read through `dir`.
    pub start_time_ticks: u64,
    /// The `/proc/PID` directory fd.
    pub dir: OwnedFd,
}

/// The pinned processes of a snapshot, by PID (shared by its clones).
#[derive(Debug, Clone, Default)]
pub struct Pins(Arc<BTreeMap<u32, Pin>>);

impl Pins {
    /// Pins from a map of PID to pin.
    pub fn new(pins: BTreeMap<u32, Pin>) -> Pins {
        Pins(Arc::new(pins))
    }

    /// The directory fd of `pid` if it was pinned with this start time.
    pub fn get(&self, pid: u32, start_time_ticks: u64) -> Option<&OwnedFd> {
        self.0
            .get(&pid)
            .filter(|p| p.start_time_ticks == start_time_ticks)
            .map(|p| &p.dir)
    }

    /// Every pin.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Pin)> {
        self.0.iter().map(|(pid, p)| (*pid, p))
    }
}

impl PartialEq for Pins {
    /// Two snapshots pin the same thing when they pin the same identities.
    fn eq(&self, other: &Pins) -> bool {
        self.0.len() == other.0.len()
            && self
                .iter()
                .zip(other.iter())
                .all(|(a, b)| a.0 == b.0 && a.1.start_time_ticks == b.1.start_time_ticks)
    }
}
