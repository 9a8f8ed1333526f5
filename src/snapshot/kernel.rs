//! The kernel log's Xid reports joined into a snapshot: read once per
//! one-shot collection (a long-running command watches NVML's events
//! instead), each tied to its GPU by PCI address and put on that GPU's
//! evidence; the log itself, read or why not, on the snapshot.

use crate::model::{same_pci, KernelLog, Reading, Snapshot};
use crate::proc::{kmsg, scan};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// Reads the log at `path` by `deadline` (or the read timeout), boot time
/// from `stat` under the proc root, and joins its Xids into `snap`.
pub(super) fn join(
    snap: &mut Snapshot,
    path: &Path,
    proc_fd: &OwnedFd,
    read_timeout: Duration,
    deadline: Option<Instant>,
) {
    let until = Instant::now() + read_timeout;
    let until = deadline.map_or(until, |d| d.min(until));
    let btime = scan::read_at(proc_fd, "stat")
        .ok()
        .and_then(|b| kmsg::parse_btime(&b));
    let mut log = KernelLog {
        path: path.display().to_string(),
        ..KernelLog::default()
    };
    match kmsg::read(path, until) {
        Ok(read) => {
            let mut xids = kmsg::xids(&read, btime);
            for x in &mut xids {
                let gpu = snap
                    .gpus
                    .iter_mut()
                    .find(|g| same_pci(&x.pci, &g.pci_bus_id));
                if let Some(g) = gpu {
                    x.gpu = Some(g.index);
                    g.driver_evidence
                        .get_or_insert_with(Default::default)
                        .xids
                        .push(x.clone());
                }
            }
            log.xids = Reading::Value(xids);
            log.lost = read.lost;
            log.truncated = read.truncated;
        }
        Err(e) => log.xids = Reading::Failed(e.why),
    }
    snap.kernel_log = Some(log);
}
