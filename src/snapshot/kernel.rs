//! The kernel log's Xid reports joined into a snapshot: read once per
//! one-shot collection (a long-running command watches NVML's events
//! instead), each tied to its GPU by PCI address and put on that GPU's
//! evidence; the log itself, read or why not, on the snapshot. For a
//! caller shown only root's view of their own processes (secure mode),
//! each Xid keeps its number, GPU and time but not the process or text it
//! names: the kernel log is root's to read (`dmesg_restrict`).

use super::Config;
use crate::model::{same_pci, KernelLog, Reading, Snapshot};
use crate::proc::{kmsg, scan};
use std::os::fd::OwnedFd;
use std::time::Instant;

/// For a one-shot command, reads the log `cfg` names by `deadline` (or
/// the read timeout), boot time from `stat` under the proc root, and
/// joins its Xids into `snap`.
pub(super) fn join(
    snap: &mut Snapshot,
    cfg: &Config,
    proc_fd: &OwnedFd,
    deadline: Option<Instant>,
) {
    let Some(path) = cfg.kmsg.as_deref().filter(|_| !cfg.long_lived) else {
        return;
    };
    let hide = cfg.hide_from.is_some();
    let until = Instant::now() + cfg.read_timeout;
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
                if hide {
                    (x.pid, x.comm, x.text) = (None, None, String::new());
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Gpu;
    use std::path::PathBuf;

    fn joined(cfg: &Config) -> Snapshot {
        let proc_fd = OwnedFd::from(std::fs::File::open("/proc").expect("/proc"));
        let mut snap = Snapshot {
            gpus: vec![Gpu {
                index: 1,
                pci_bus_id: "00000000:19:00.0".into(),
                ..Gpu::default()
            }],
            ..Snapshot::default()
        };
        join(&mut snap, cfg, &proc_fd, None);
        snap
    }

    fn fixture() -> Config {
        Config {
            kmsg: Some(PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/fixtures/kmsg/two-gpus.kmsg"
            ))),
            ..Config::default()
        }
    }

    #[test]
    fn xids_land_on_their_gpu_and_a_hidden_caller_sees_no_process() {
        let snap = joined(&fixture());
        let on_gpu = &snap.gpus[0]
            .driver_evidence
            .as_ref()
            .expect("evidence")
            .xids;
        assert_eq!(on_gpu.iter().map(|x| x.xid).collect::<Vec<_>>(), [48]);
        let log = snap.kernel_log.expect("read");
        let all = log.xids.value().expect("readable");
        assert_eq!(all.len(), 3);
        assert_eq!((all[1].pid, all[1].gpu), (Some(4242), None));
        let hidden = joined(&Config {
            hide_from: Some(1000),
            ..fixture()
        });
        let all = hidden.kernel_log.expect("read").xids;
        let all = all.value().expect("readable");
        assert!(all
            .iter()
            .all(|x| x.pid.is_none() && x.comm.is_none() && x.text.is_empty()));
        assert_eq!(all[1].xid, 31, "the number and time stay");
    }

    #[test]
    fn long_lived_or_off_reads_nothing_and_unreadable_says_why() {
        let off = joined(&Config {
            kmsg: None,
            ..Config::default()
        });
        assert!(off.kernel_log.is_none());
        let live = joined(&Config {
            long_lived: true,
            ..fixture()
        });
        assert!(
            live.kernel_log.is_none(),
            "long-running commands watch NVML's events"
        );
        let gone = joined(&Config {
            kmsg: Some(PathBuf::from("/nonexistent/kmsg")),
            ..Config::default()
        });
        let log = gone.kernel_log.expect("tried");
        assert!(
            matches!(log.xids, Reading::Failed(_)),
            "never an empty list"
        );
        assert!(gone.gpus[0].driver_evidence.is_none());
    }
}
