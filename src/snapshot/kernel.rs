//! The kernel log's Xid reports joined into a snapshot: read once per
//! one-shot collection (a long-running command watches NVML's events
//! instead), each tied to its GPU by PCI address and put on that GPU's
//! evidence; the log itself, read or why not, on the snapshot. For a
//! caller shown only root's view of their own processes (secure mode),
//! each Xid keeps its number, GPU and time but not the process or text it
//! names: the kernel log is root's to read (`dmesg_restrict`).

use super::Config;
use crate::model::{same_pci, KernelLog, Reading, Snapshot, XidEvent, XidPid, XidReport};
use crate::nvml::XidWatcher;
use crate::proc::{kmsg, scan};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::Mutex;
use std::time::Instant;

/// A long-running command's Xid events from NVML's event API: every one
/// delivered since it started (the newest [`MAX_EVENTS`] of each GPU),
/// kept because a fault that needs a reset stays true after its event.
pub(super) struct Events {
    watcher: XidWatcher,
    seen: Vec<XidEvent>,
}

/// Events kept per GPU by a long-running command: a GPU that reported
/// more is past needing them all to be named.
const MAX_EVENTS: usize = 1024;

impl Events {
    /// Starts watching where `cfg` is a long-running command's (watch,
    /// serve, wait): one-shot commands read the kernel log instead.
    pub(super) fn start(cfg: &Config) -> Option<Mutex<Events>> {
        cfg.long_lived.then(|| {
            Mutex::new(Events {
                watcher: XidWatcher::start(cfg.nvml_lib.as_deref()),
                seen: Vec::new(),
            })
        })
    }
}

/// For a long-running command, puts every Xid event NVML delivered since
/// it started on its GPU's evidence, as a report: its number, GPU and
/// time (NVML's event names no process, so none is blamed). Waits for
/// nothing: the events already delivered.
pub(super) fn join_events(snap: &mut Snapshot, events: &Mutex<Events>, proc_fd: &OwnedFd) {
    let mut ev = events.lock().unwrap_or_else(|p| p.into_inner());
    let delivered = ev.watcher.events(Instant::now());
    ev.seen.extend(delivered);
    // The newest of each GPU: a flood on one never pushes out another's.
    let mut per_gpu: BTreeMap<u32, usize> = BTreeMap::new();
    let mut kept: Vec<XidEvent> = Vec::new();
    for e in ev.seen.iter().rev() {
        let n = per_gpu.entry(e.gpu).or_insert(0);
        if *n < MAX_EVENTS {
            *n += 1;
            kept.push(*e);
        }
    }
    kept.reverse();
    ev.seen = kept;
    if ev.seen.is_empty() {
        return;
    }
    let btime_us = boot_time(proc_fd).map(|s| s.saturating_mul(1_000_000));
    for e in &ev.seen {
        let Some(g) = snap.gpus.iter_mut().find(|g| g.index == e.gpu) else {
            continue;
        };
        let report = XidReport {
            // NVML's "unknown" Xid (999) where the event gave no number.
            xid: e.xid.and_then(|x| u32::try_from(x).ok()).unwrap_or(999),
            pci: g.pci_bus_id.clone(),
            gpu: Some(g.index),
            since_boot_us: btime_us.map_or(0, |b| (e.at_unix_ms * 1000).saturating_sub(b)),
            at_unix_ms: Some(e.at_unix_ms),
            ..XidReport::default()
        };
        g.driver_evidence
            .get_or_insert_with(Default::default)
            .xids
            .push(report);
    }
}

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
    let btime = boot_time(proc_fd);
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
                x.pid_now = x.pid.map(|pid| pid_now(snap, x, pid));
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
        Err(e) => {
            log.xids = Reading::Failed(e.why);
            log.denied = e.denied;
        }
    }
    snap.kernel_log = Some(log);
}

/// The boot time (`btime` of `stat` under the proc root), seconds since
/// the epoch.
fn boot_time(proc_fd: &OwnedFd) -> Option<u64> {
    scan::read_at(proc_fd, "stat")
        .ok()
        .and_then(|b| kmsg::parse_btime(&b))
}

/// What `pid`, named by Xid `x`, is now among `snap`'s holders: the
/// process the Xid names only if it started before the Xid by more than a
/// clock tick (start times are in ticks, the log in microseconds).
fn pid_now(snap: &Snapshot, x: &XidReport, pid: u32) -> XidPid {
    let Some(p) = snap.processes.iter().find(|p| p.pid == pid) else {
        return XidPid::NotHolding;
    };
    if x.may_name(p.start_time_ticks, snap.ticks_per_second) {
        XidPid::Holder
    } else {
        XidPid::Reused
    }
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

    /// Xid 31 of the fixture names PID 4242 at 7,200.4 s after boot: a
    /// holder with that PID that started at 100 s is the process it
    /// names; one that started at 7,300 s has the PID reused.
    #[test]
    fn an_xid_names_a_holder_only_if_it_started_before_the_xid() {
        let with = |start_s: u64| {
            let proc_fd = OwnedFd::from(std::fs::File::open("/proc").expect("/proc"));
            let mut snap = Snapshot {
                ticks_per_second: 100,
                processes: vec![crate::model::Process {
                    pid: 4242,
                    start_time_ticks: start_s * 100,
                    ..Default::default()
                }],
                ..Snapshot::default()
            };
            join(&mut snap, &fixture(), &proc_fd, None);
            let log = snap.kernel_log.expect("read");
            let all = log.xids.value().expect("readable").clone();
            all.iter().map(|x| (x.xid, x.pid_now)).collect::<Vec<_>>()
        };
        let none = None;
        assert_eq!(
            with(100),
            [(48, none), (31, Some(XidPid::Holder)), (79, none)]
        );
        assert_eq!(with(7_300)[1], (31, Some(XidPid::Reused)));
        let nobody = Snapshot::default();
        let report = XidReport {
            xid: 31,
            pci: String::new(),
            gpu: None,
            gpu_instance: None,
            pid: Some(4242),
            pid_now: None,
            comm: None,
            text: String::new(),
            since_boot_us: 1,
            at_unix_ms: None,
        };
        assert_eq!(pid_now(&nobody, &report, 4242), XidPid::NotHolding);
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
