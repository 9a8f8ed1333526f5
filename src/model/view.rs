//! A snapshot as a user who is not root may see it: root's `gpufree
//! serve` answers them on its local socket with what `ps` and
//! `nvidia-smi` already show of other users' processes (PID, user, comm,
//! memory, owner, flags) and without what only root may read (their
//! command lines, environments and executables). The snapshot is judged
//! again after [`Snapshot::hide_from`], so no finding carries what was
//! removed.

use super::Snapshot;
use serde::{Deserialize, Serialize};

/// Where a snapshot came from: root's serve, for a user.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ViewFrom {
    /// The socket root's `gpufree serve --view-socket` answered on.
    pub socket: String,
    /// The user it answered (from the socket's peer credentials).
    pub uid: u32,
    /// What was removed of other users' processes.
    pub hidden: Vec<String>,
}

impl ViewFrom {
    /// The view of `socket` for `uid`, saying what [`Snapshot::hide_from`]
    /// removed (nothing for root).
    pub fn new(socket: String, uid: u32) -> ViewFrom {
        ViewFrom {
            socket,
            uid,
            hidden: if uid == 0 {
                Vec::new()
            } else {
                HIDDEN.iter().map(|s| (*s).to_string()).collect()
            },
        }
    }
}

/// What [`Snapshot::hide_from`] removes, in [`ViewFrom::hidden`]'s words.
const HIDDEN: [&str; 4] = [
    "other users' command lines",
    "other users' environments",
    "other users' executables",
    "launchers' command lines",
];

impl Snapshot {
    /// Removes what `uid` may not read of other users' processes: their
    /// command lines, environments and executable paths; and every
    /// launcher's command line (a parent holding nothing is kept without
    /// its owner's id). Root (uid 0) sees everything. The verdicts and
    /// findings are the caller's to make again.
    pub fn hide_from(&mut self, uid: u32) {
        if uid == 0 {
            return;
        }
        for p in self.processes.iter_mut().filter(|p| p.uid != uid) {
            p.cmdline.clear();
            p.exe = None;
            p.environment.clear();
        }
        for kin in self.parents.values_mut() {
            kin.cmdline.clear();
        }
        self.others.clear();
        self.findings.clear();
    }
}
