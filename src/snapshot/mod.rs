//! Takes one [`Snapshot`]: device nodes, the holder scan, NVML, process
//! details and owners, joined into the model; and narrows it to the GPUs a
//! user selected with `--gpu`.
//!
//! The order makes every record one process: the scan pins each holder
//! (its `/proc/PID` directory fd and start time) and reads it only through
//! that fd; NVML is read after the pins; PIDs NVML lists that the scan did
//! not pin are pinned and NVML read again; and every pin is checked alive
//! after the last NVML read. A pinned process alive after NVML listed its
//! PID is the process NVML meant (a PID names one process until it is
//! reaped, and the driver does not report a process that is not there), so
//! memory is never attributed to whoever got a PID later.

mod assemble;
mod bundle;
mod config;
mod drm;
mod fold;
mod history;
mod kernel;
mod launchers;
mod mig;
mod orphans;
mod owners;
mod refused;
mod select;
mod window;

use assemble::{assemble, others, Collected};
pub use config::{Config, DEFAULT_IDLE_WINDOW, DEFAULT_READ_TIMEOUT};
pub use fold::fold_memory;
use launchers::{launchers, restarters};
pub use select::{narrow, resolve, GpuSelector};
pub use window::windows;

use crate::model::Snapshot;
use crate::nvml::{self, NvmlReport};
use crate::proc::nodes::{Majors, NodeSet};
use crate::proc::parse;
use crate::proc::scan::{self, Limits, ScanError, Seen, Stuck, Unread};
use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why no snapshot could be taken.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Neither an NVML library nor any GPU device node (nor an entry
    /// refused as one, which the snapshot must show): nothing to report.
    #[error("no GPU here: {nvml}, and no GPU device nodes in {dev_dir}")]
    NoGpu {
        /// Why NVML is unavailable.
        nvml: String,
        /// The device directory that had no nodes.
        dev_dir: String,
    },
    /// The device directory could not be listed.
    #[error("--dev-dir: {0}")]
    DevDir(crate::model::DevDirUnlisted),
    /// /proc could not be read.
    #[error(transparent)]
    Scan(#[from] ScanError),
}

/// Collects every GPU and every holder once (no verdicts, no findings:
/// `crate::pipeline::take_judged` adds them).
pub fn collect(cfg: &Config) -> Result<Snapshot, SnapshotError> {
    Collector::new(cfg.clone(), None)?.collect_until(None)
}

/// Raises the soft limit of open files to the hard one: a snapshot keeps
/// one directory fd per holder, and running out (EMFILE) would leave
/// processes unread.
pub fn raise_fd_limit() {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    if limit.current < limit.maximum {
        let _ = rustix::process::setrlimit(
            rustix::process::Resource::Nofile,
            rustix::process::Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        );
    }
}

/// Collects repeatedly with one NVML session and one open proc root: every
/// command's one way to the host (a whole collection, an NVML-only reading,
/// a pinned process's fds now, the start time at a PID).
pub struct Collector {
    cfg: Config,
    nodes: Arc<NodeSet>,
    proc_fd: Arc<OwnedFd>,
    /// The NVML session, or why there is none (retried now and then when
    /// the library failed without hanging: a driver loaded after boot).
    nvml: std::sync::Mutex<(nvml::Session, Instant)>,
    stuck: Stuck,
    /// Stack reads of processes in D still stuck in the kernel (apart
    /// from `stuck`: a stack that hangs must not cost a process its state).
    stacks: Stuck,
    /// Which walk finds the holders, and the in-kernel one once loaded.
    walks: scan::WalkChooser,
    /// What a long-running command remembers between collections.
    history: Option<history::History>,
}

/// How often a failed NVML open is tried again (by `watch` and `serve`).
const NVML_RETRY: Duration = Duration::from_secs(30);

impl Collector {
    /// Opens the proc root, discovers the device nodes and starts NVML
    /// (its initialisation goes on while the first scan runs); fails only
    /// when there is neither a library nor a node, refused or not (then it waits for NVML
    /// at most the read timeout, or until `deadline`), or no /proc.
    pub fn new(cfg: Config, deadline: Option<Instant>) -> Result<Collector, SnapshotError> {
        raise_fd_limit();
        let proc_fd = scan::open_proc(&cfg.proc_root)?;
        // A character device is a GPU node only with the major its
        // driver registered: the kernel's table under the proc root.
        let majors = Majors::read(&proc_fd, &cfg.proc_root);
        let nodes = NodeSet::discover(&cfg.dev_dir, &majors).map_err(SnapshotError::DevDir)?;
        let session = nvml::Session::start(cfg.nvml_lib.as_deref(), cfg.idle_window);
        // Refused entries are no GPU, but their GPUs' verdicts must say
        // that holders may be unseen: a snapshot shows them.
        if nodes.is_empty() && nodes.refused.is_empty() {
            if let Err(status) = session.ready(remaining(cfg.read_timeout, deadline)) {
                return Err(SnapshotError::NoGpu {
                    nvml: status.error.map(|e| e.to_string()).unwrap_or_default(),
                    dev_dir: cfg.dev_dir.display().to_string(),
                });
            }
        }
        let walks = scan::WalkChooser::new(cfg.scan, cfg.long_lived, cfg.bpf_cache.clone())
            .taking_pins(cfg.bpf_pin.clone());
        if cfg.long_lived {
            walks.preload(&proc_fd, &nodes);
        }
        Ok(Collector {
            walks,
            history: history::History::start(&cfg),
            nodes: Arc::new(nodes),
            proc_fd: Arc::new(proc_fd),
            nvml: std::sync::Mutex::new((session, Instant::now())),
            stuck: Stuck::default(),
            stacks: Stuck::default(),
            cfg,
        })
    }

    /// NVML only: the GPUs' memory and process lists now (cheap; no scan).
    pub fn nvml(&self) -> NvmlReport {
        self.nvml_until(None)
    }

    /// NVML only, waiting for the driver until `deadline` at most.
    pub fn nvml_until(&self, deadline: Option<Instant>) -> NvmlReport {
        let wait = remaining(self.cfg.read_timeout, deadline);
        let mut guard = self.nvml.lock().unwrap_or_else(|p| p.into_inner());
        let (session, started) = &mut *guard;
        // A library that failed (not hung) is tried again now and then: a
        // driver loaded after `watch` or `serve` started.
        if session.failed() && started.elapsed() >= NVML_RETRY {
            *session = nvml::Session::start(self.cfg.nvml_lib.as_deref(), self.cfg.idle_window);
            *started = Instant::now();
        }
        session.read(wait, wait < self.cfg.read_timeout)
    }

    /// The GPUs' memory now, without a scan: NVML's reading, and sysfs's
    /// for the GPUs found through DRM (AMD, Intel), by the indexes a
    /// collection gives them.
    pub fn memory_until(&self, deadline: Option<Instant>) -> NvmlReport {
        let mut report = self.nvml_until(deadline);
        drm::memory_now(&mut report, &self.cfg.sys_root, &self.nodes);
        report
    }

    /// Whether NVML may answer: false once its initialisation failed.
    pub fn has_nvml(&self) -> bool {
        !self
            .nvml
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .failed()
    }

    /// The device nodes.
    pub fn nodes(&self) -> &NodeSet {
        &self.nodes
    }

    /// One collection: the holder scan (each holder pinned), NVML after
    /// the pins, details, owners, launchers and restart policies, its reads
    /// ending by `deadline` (what is not read by then is reported as timed
    /// out). It judges nothing: verdicts
    /// and findings are the diagnosis's (`crate::pipeline::judged`).
    pub fn collect_until(&self, deadline: Option<Instant>) -> Result<Snapshot, SnapshotError> {
        let limits = Limits {
            read_timeout: self.cfg.read_timeout,
            deadline,
        };
        let scan::Scanned {
            result: scanned,
            method,
            reason,
        } = self.walks.scan(
            &self.proc_fd,
            &self.cfg.proc_root,
            &self.nodes,
            limits,
            &self.stuck,
        )?;
        let (reread, kept) = (scanned.reread, scanned.kept);
        let mut pinned = Pinned {
            seen: scanned.holders.into_iter().map(|h| (h.pid, h)).collect(),
            unreadable: scanned.unreadable.into_iter().collect(),
            vanished: scanned.vanished,
        };
        let report = self.nvml_after_pins(&mut pinned, limits);
        // Every pin alive after the last NVML read is the process it names.
        let Pinned {
            mut seen,
            unreadable,
            mut vanished,
        } = pinned;
        let pins: Vec<_> = seen.values().map(|s| &s.dir).collect();
        let mut alive = scan::still_pinned(&pins).into_iter();
        seen.retain(|pid, _| {
            let kept = alive.next().unwrap_or(false);
            (!kept).then(|| vanished.push(*pid));
            kept
        });
        let collected = Collected {
            report,
            drm: drm::DrmHost::read(&self.cfg.sys_root),
            seen,
            unreadable,
            vanished,
            scanned: scanned.scanned,
            kin: scanned.parents.into_iter().collect(),
        };
        let mut snap = assemble(&self.cfg, &self.proc_fd, &self.nodes, collected);
        snap.visibility.scan = method;
        snap.visibility.scan_reason = Some(reason);
        snap.visibility.scan_reread = reread;
        snap.visibility.scan_kept = kept;
        self.join_context(&mut snap, scanned.listed, limits);
        if let Some(uid) = self.cfg.hide_from {
            snap.hide_from(uid);
        }
        Ok(snap)
    }

    /// What a snapshot learns around its holders: MIG capabilities,
    /// launchers, restart policies, the kubelet's allocations, the kernel
    /// log's Xids (one-shot commands) or NVML's Xid events (long-running
    /// ones), and (for `why --pattern`) every other process among `listed`.
    fn join_context(&self, snap: &mut Snapshot, listed: Vec<u32>, limits: Limits) {
        let mig_minors = self.cfg.mig_minors.as_deref();
        mig::map_caps(&self.proc_fd, mig_minors, &self.nodes, snap);
        launchers(&self.proc_fd, snap);
        restarters(&self.cfg, snap);
        // A node without Kubernetes has no socket: nothing to join.
        if std::fs::symlink_metadata(&self.cfg.kubelet_socket).is_ok() {
            snap.kubelet = Some(crate::kubelet::read(
                &self.cfg.kubelet_socket,
                self.cfg.read_timeout,
            ));
        }
        kernel::join(snap, &self.cfg, &self.proc_fd, limits.deadline);
        if let Some(history) = &self.history {
            history.join(snap, &self.proc_fd);
        }
        if self.cfg.others {
            let (fd, stuck) = (&self.proc_fd, &self.stuck);
            snap.others = others(fd, listed, &snap.processes, limits, stuck);
        }
    }

    /// NVML, read after the pins; what it lists that the scan did not pin
    /// is pinned and NVML read again, until every listed PID was pinned
    /// before the read (three rounds at most; no second reading when it
    /// pinned nothing new). Returns the last reading.
    fn nvml_after_pins(&self, pinned: &mut Pinned, limits: Limits) -> NvmlReport {
        let me = std::process::id();
        let mut report = self.nvml_until(limits.deadline);
        // Tried and not pinned: absent from this /proc, or unreadable.
        let mut tried: BTreeSet<u32> = BTreeSet::new();
        for _ in 0..3 {
            let extra: Vec<u32> = listed_pids(&report)
                .into_iter()
                .filter(|p| *p != me && !pinned.seen.contains_key(p) && !tried.contains(p))
                .collect();
            if extra.is_empty() {
                break;
            }
            let (more, unread) = scan::pin(
                &self.proc_fd,
                &self.nodes,
                extra.clone(),
                limits,
                &self.stuck,
            );
            tried.extend(extra);
            pinned.unreadable.extend(unread);
            // Nothing new pinned (PIDs of another namespace, or unreadable):
            // the last reading already came after every pin.
            if more.is_empty() {
                break;
            }
            pinned.seen.extend(more.into_iter().map(|s| (s.pid, s)));
            report = self.nvml_until(limits.deadline);
        }
        report
    }

    /// Whether each pinned process (its `/proc/PID` fd) holds a GPU node
    /// now, each read ending by the read timeout or `deadline`.
    pub fn holding(
        &self,
        dirs: Vec<(u32, OwnedFd)>,
        deadline: Option<Instant>,
    ) -> Vec<(u32, scan::Holding)> {
        let limits = Limits {
            read_timeout: self.cfg.read_timeout,
            deadline,
        };
        scan::holding_many(dirs, &self.nodes, limits, &self.stuck)
    }

    /// One sample of each pinned process (its `/proc/PID` fd): its state
    /// and, in D, where the kernel says it waits (`stack` where readable,
    /// else `wchan`), each read ending by the read timeout or `deadline`
    /// ([`scan::waits`]).
    pub fn waits(
        &self,
        dirs: Vec<(u32, OwnedFd)>,
        deadline: Option<Instant>,
    ) -> Vec<(u32, crate::model::Sampled)> {
        let limits = Limits {
            read_timeout: self.cfg.read_timeout,
            deadline,
        };
        scan::waits(dirs, limits, &self.stuck, &self.stacks)
    }

    /// The start time of whatever process has the number `pid` now (None:
    /// no such process, or unreadable), read through the proc root's fd.
    pub fn start_time_of(&self, pid: u32) -> Option<u64> {
        let stat = scan::read_at(&*self.proc_fd, &format!("{pid}/stat")).ok()?;
        parse::parse_stat(&stat).ok().map(|s| s.start_time)
    }

    /// Whether the proc root is this process's own PID namespace's: its
    /// `self` names this process, by one PID only
    /// ([`scan::proc_is_ours`]). A /proc of another namespace (a parent's,
    /// mounted before an `unshare --pid` without `--mount-proc`) lists PIDs
    /// that mean other processes here, where signals are resolved: nothing
    /// may be signalled by them. False when `self` cannot be read.
    pub fn proc_is_ours(&self) -> bool {
        scan::proc_is_ours(&self.proc_fd)
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }
}

/// The processes a collection pinned so far, those it could not read, and
/// those that were gone.
struct Pinned {
    seen: BTreeMap<u32, Seen>,
    unreadable: BTreeMap<u32, Unread>,
    vanished: Vec<u32>,
}

/// The time left for a read: the read timeout, or less before `deadline`.
pub fn remaining(read_timeout: Duration, deadline: Option<Instant>) -> Duration {
    match deadline {
        Some(d) => read_timeout.min(d.saturating_duration_since(Instant::now())),
        None => read_timeout,
    }
}

/// Every PID NVML lists, on any GPU.
fn listed_pids(report: &NvmlReport) -> BTreeSet<u32> {
    report
        .gpus
        .iter()
        .flat_map(|g| g.nvml_processes.iter().map(|p| p.pid))
        .collect()
}

#[cfg(test)]
mod tests;
