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

use crate::diagnose::verdict;
use crate::model::{
    Brief, DeviceUse, Gpu, GpuMemory, Memory, Owner, OwnerKind, Pin, Pins, Process, Snapshot,
    Unreadable, UnreadableReason, Via, Visibility,
};
use crate::nvml::{self, NvmlReport};
use crate::proc::nodes::{NodeKind, NodeSet};
use crate::proc::scan::{self, Details, Limits, ScanError, Seen, Stuck, Unread};
use crate::proc::{is_protected, looks_renamed, owner, parse};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where to look.
#[derive(Debug, Clone)]
pub struct Config {
    /// The proc root (default `/proc`).
    pub proc_root: PathBuf,
    /// The device directory (default `/dev`).
    pub dev_dir: PathBuf,
    /// The NVML library; None for the system's.
    pub nvml_lib: Option<PathBuf>,
    /// Also collect every other process briefly (for `why --pattern`).
    pub others: bool,
    /// How long any one read (a process's fds and maps, an NVML call) may
    /// take before it counts as timed out (`GPUFREE_READ_TIMEOUT`).
    pub read_timeout: Duration,
    /// Where system unit files are read (`GPUFREE_UNIT_PATH`, else
    /// systemd's own list).
    pub unit_dirs: Vec<PathBuf>,
    /// Where the kubelet keeps one log directory per pod
    /// (`GPUFREE_POD_LOG_DIR`, else `/var/log/pods`).
    pub pod_log_dir: PathBuf,
    /// The D-Bus address where systemd answers (`GPUFREE_SYSTEMD_BUS`;
    /// else the system bus where systemd runs); None: unit files only.
    pub systemd_bus: Option<String>,
}

/// The read timeout when none is given.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(5);

impl Default for Config {
    fn default() -> Self {
        Config {
            proc_root: PathBuf::from("/proc"),
            dev_dir: PathBuf::from("/dev"),
            nvml_lib: None,
            others: false,
            read_timeout: DEFAULT_READ_TIMEOUT,
            unit_dirs: crate::proc::restart::unit_dirs(std::env::var_os("GPUFREE_UNIT_PATH")),
            pod_log_dir: std::env::var_os("GPUFREE_POD_LOG_DIR").map_or_else(
                || PathBuf::from(crate::proc::restart::POD_LOG_DIR),
                PathBuf::from,
            ),
            systemd_bus: std::env::var("GPUFREE_SYSTEMD_BUS")
                .ok()
                .or_else(crate::proc::restart::systemd_bus),
        }
    }
}

/// Why no snapshot could be taken.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Neither an NVML library nor any GPU device node: nothing to report.
    #[error("no GPU here: {nvml}, and no GPU device nodes in {dev_dir}")]
    NoGpu {
        /// Why NVML is unavailable.
        nvml: String,
        /// The device directory that had no nodes.
        dev_dir: String,
    },
    /// The device directory could not be listed.
    #[error("--dev-dir: {0}")]
    DevDir(std::io::Error),
    /// /proc could not be read.
    #[error(transparent)]
    Scan(#[from] ScanError),
}

/// Takes a snapshot of every GPU and every holder.
pub fn take(cfg: &Config) -> Result<Snapshot, SnapshotError> {
    Collector::new(cfg.clone(), None)?.snapshot()
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

/// Takes snapshots repeatedly with one NVML session (for `wait`, `kill`).
pub struct Collector {
    cfg: Config,
    nodes: Arc<NodeSet>,
    proc_fd: Arc<OwnedFd>,
    /// The NVML session, or why there is none (retried now and then when
    /// the library failed without hanging: a driver loaded after boot).
    nvml: std::sync::Mutex<(nvml::Session, Instant)>,
    stuck: Stuck,
}

/// How often a failed NVML open is tried again (by `watch` and `serve`).
const NVML_RETRY: Duration = Duration::from_secs(30);

impl Collector {
    /// Discovers the device nodes, opens the proc root and starts NVML
    /// (its initialisation goes on while the first scan runs); fails only
    /// when there is neither a library nor a node (then it waits for NVML
    /// at most the read timeout, or until `deadline`), or no /proc.
    pub fn new(cfg: Config, deadline: Option<Instant>) -> Result<Collector, SnapshotError> {
        raise_fd_limit();
        let nodes = NodeSet::discover(&cfg.dev_dir).map_err(SnapshotError::DevDir)?;
        let proc_fd = scan::open_proc(&cfg.proc_root)?;
        let session = nvml::Session::start(cfg.nvml_lib.as_deref());
        if nodes.is_empty() {
            if let Err(status) = session.ready(remaining(cfg.read_timeout, deadline)) {
                return Err(SnapshotError::NoGpu {
                    nvml: status.error.unwrap_or_default(),
                    dev_dir: cfg.dev_dir.display().to_string(),
                });
            }
        }
        Ok(Collector {
            cfg,
            nodes: Arc::new(nodes),
            proc_fd: Arc::new(proc_fd),
            nvml: std::sync::Mutex::new((session, Instant::now())),
            stuck: Stuck::default(),
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
            *session = nvml::Session::start(self.cfg.nvml_lib.as_deref());
            *started = Instant::now();
        }
        session.read(wait, wait < self.cfg.read_timeout)
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

    /// A full snapshot: NVML, the holder scan, details, findings.
    pub fn snapshot(&self) -> Result<Snapshot, SnapshotError> {
        self.snapshot_until(None)
    }

    /// A full snapshot whose reads end by `deadline` (what is not read by
    /// then is reported as timed out).
    pub fn snapshot_until(&self, deadline: Option<Instant>) -> Result<Snapshot, SnapshotError> {
        let limits = Limits {
            read_timeout: self.cfg.read_timeout,
            deadline,
        };
        let scanned = scan::scan(
            &self.proc_fd,
            &self.cfg.proc_root,
            &self.nodes,
            limits,
            &self.stuck,
        )?;
        let mut seen: BTreeMap<u32, Seen> =
            scanned.holders.into_iter().map(|h| (h.pid, h)).collect();
        let mut unreadable: BTreeMap<u32, Unread> = scanned.unreadable.into_iter().collect();
        let mut vanished = scanned.vanished;
        let me = std::process::id();
        // NVML after the pins; pin what it lists that the scan did not, and
        // read it again, until every listed PID was pinned before the read.
        let mut report = self.nvml_until(deadline);
        // Tried and not pinned: absent from this /proc, or unreadable.
        let mut tried: BTreeSet<u32> = BTreeSet::new();
        for _ in 0..3 {
            let extra: Vec<u32> = listed_pids(&report)
                .into_iter()
                .filter(|p| *p != me && !seen.contains_key(p) && !tried.contains(p))
                .collect();
            if extra.is_empty() {
                break;
            }
            let (pinned, unread) = scan::pin(
                &self.proc_fd,
                &self.nodes,
                extra.clone(),
                limits,
                &self.stuck,
            );
            tried.extend(extra);
            seen.extend(pinned.into_iter().map(|s| (s.pid, s)));
            unreadable.extend(unread);
            report = self.nvml_until(deadline);
        }
        // Every pin alive after the last NVML read is the process it names.
        seen.retain(|pid, s| match scan::start_time_now(&s.dir) {
            Ok((start, _)) if start == s.details.stat.start_time => true,
            _ => {
                vanished.push(*pid);
                false
            }
        });
        let collected = Collected {
            report,
            seen,
            unreadable,
            vanished,
            scanned: scanned.scanned,
        };
        let mut snap = assemble(&self.cfg, &self.proc_fd, &self.nodes, collected);
        snap.parents = scanned.parents.into_iter().collect();
        launchers(&self.proc_fd, &mut snap);
        restarters(&self.cfg, &mut snap);
        judge(&mut snap);
        if self.cfg.others {
            snap.others = others(&self.proc_fd, &snap.processes, limits, &self.stuck);
        }
        Ok(snap)
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

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }
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

/// What one snapshot collected, before it is joined into the model.
struct Collected {
    report: NvmlReport,
    seen: BTreeMap<u32, Seen>,
    unreadable: BTreeMap<u32, Unread>,
    vanished: Vec<u32>,
    scanned: u32,
}

fn gpus_without_nvml(nodes: &NodeSet) -> Vec<Gpu> {
    nodes
        .nodes
        .iter()
        .filter_map(|n| match n.kind {
            NodeKind::NvidiaGpu(minor) => Some(Gpu {
                index: minor,
                name: "unknown (NVML unavailable)".into(),
                minor_number: Some(minor),
                ..Gpu::default()
            }),
            _ => None,
        })
        .collect()
}

fn assemble(cfg: &Config, proc_fd: &OwnedFd, nodes: &NodeSet, c: Collected) -> Snapshot {
    let Collected {
        report,
        seen,
        unreadable,
        mut vanished,
        scanned,
    } = c;
    let mut gpus = if report.status.available {
        report.gpus
    } else {
        gpus_without_nvml(nodes)
    };
    let index_of_minor: HashMap<u32, u32> = gpus
        .iter()
        .filter_map(|g| g.minor_number.map(|m| (m, g.index)))
        .collect();

    // PID -> (GPU -> bytes) from NVML, summed over the lists.
    let mut nvml_mem: BTreeMap<u32, BTreeMap<u32, Option<u64>>> = BTreeMap::new();
    for g in &gpus {
        for p in &g.nvml_processes {
            let slot = nvml_mem
                .entry(p.pid)
                .or_default()
                .entry(g.index)
                .or_insert(Some(0));
            *slot = match (*slot, p.used_bytes) {
                (Some(a), Some(b)) => Some(a.saturating_add(b)),
                _ => None,
            };
        }
    }

    // A live process gpufree could read whole that holds no GPU node cannot
    // hold GPU memory: a CUDA context lives in the device files. When NVML
    // lists its PID anyway (outside MPS), the memory is another process's:
    // one that had this PID before (reused since), or one that inherited
    // its GPU files. It is never attributed to this process.
    let mps: BTreeSet<u32> = gpus
        .iter()
        .flat_map(|g| g.nvml_processes.iter())
        .filter(|p| p.kind == crate::model::NvmlProcessKind::Mps)
        .map(|p| p.pid)
        .collect();
    let mut stale = Vec::new();
    let seen: BTreeMap<u32, Seen> = seen
        .into_iter()
        .filter(|(pid, s)| {
            // A zombie keeps its PID until reaped: a listing of it is its own
            // memory, still being released.
            let zombie = s.details.stat.state == 'Z';
            let holds_nothing = s.uses.is_empty() && s.fds_read && !mps.contains(pid) && !zombie;
            if holds_nothing && nvml_mem.contains_key(pid) {
                stale.push(*pid);
            }
            !holds_nothing
        })
        .collect();
    let mut users = UserNames::default();
    let mut processes = Vec::new();
    let mut pins = BTreeMap::new();
    for (pid, s) in seen {
        let devices = device_uses(&s.uses, nodes, &index_of_minor);
        let gpu_memory = nvml_mem
            .get(&pid)
            .map(|m| {
                m.iter()
                    .map(|(&gpu, &used_bytes)| GpuMemory { gpu, used_bytes })
                    .collect()
            })
            .unwrap_or_default();
        pins.insert(
            pid,
            Pin {
                start_time_ticks: s.details.stat.start_time,
                dir: s.dir,
            },
        );
        processes.push(process_from(
            pid, s.details, devices, gpu_memory, &mut users,
        ));
    }
    // Listed by NVML, but not a process of this /proc (or not one that
    // could be pinned): another PID namespace's.
    let not_visible: Vec<u32> = nvml_mem
        .keys()
        .copied()
        .filter(|pid| {
            !pins.contains_key(pid) && !unreadable.contains_key(pid) && !stale.contains(pid)
        })
        .collect();
    mark_orphans(proc_fd, &mut processes);

    for g in &mut gpus {
        let accounted: u64 = g
            .nvml_processes
            .iter()
            .filter(|p| processes.iter().any(|q| q.pid == p.pid))
            .filter_map(|p| p.used_bytes)
            .fold(0, u64::saturating_add);
        g.memory.accounted_bytes = accounted;
        g.memory.unaccounted_bytes = g.memory.used_bytes.saturating_sub(accounted);
    }

    let mountinfo = std::fs::read("/proc/self/mountinfo").unwrap_or_default();
    let root_path = cfg.proc_root.to_string_lossy();
    vanished.sort_unstable();
    vanished.dedup();
    let unreadable: Vec<Unreadable> = unreadable
        .into_iter()
        .map(|(pid, why)| Unreadable {
            pid,
            comm: scan::read_at(proc_fd, &format!("{pid}/comm"))
                .ok()
                .map(|c| parse::escape_bytes(c.trim_ascii_end())),
            reason: match why {
                Unread::Permission => UnreadableReason::Permission,
                Unread::TimedOut(_) | Unread::NotReached | Unread::StillStuck => {
                    UnreadableReason::Timeout
                }
                Unread::Failed { .. } => UnreadableReason::Error,
            },
            why: why.to_string(),
        })
        .collect();
    let visibility = Visibility {
        processes_scanned: scanned,
        processes_unreadable: unreadable.len() as u32,
        unreadable_pids: unreadable.iter().map(|u| u.pid).collect(),
        unreadable,
        vanished_pids: vanished,
        nvml_pids_not_visible: not_visible,
        nvml_pids_stale: stale,
        hidepid: parse::mountinfo_hidepid(&mountinfo, root_path.as_bytes()),
        root: rustix::process::geteuid().is_root(),
        nested_pid_namespace: std::fs::read("/proc/self/status")
            .ok()
            .and_then(|b| parse::parse_status(&b).ok())
            .is_some_and(|st| st.nspid.len() > 1),
    };
    let mut snapshot = Snapshot {
        gpus,
        processes,
        findings: Vec::new(),
        visibility,
        nvml: report.status,
        unavailable: report.unavailable,
        dev_dir: cfg.dev_dir.display().to_string(),
        others: Vec::new(),
        uptime_ticks: 0,
        ticks_per_second: rustix::param::clock_ticks_per_second(),
        verdict: Default::default(),
        pins: Pins::new(pins),
        parents: BTreeMap::new(),
        units: BTreeMap::new(),
        pods: BTreeMap::new(),
    };
    if let Some(up) = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|u| u.split_whitespace().next()?.parse::<f64>().ok())
    {
        snapshot.uptime_ticks = (up * snapshot.ticks_per_second as f64) as u64;
    }
    snapshot
}

/// Reads the command lines of the holders' parents that hold nothing
/// (their launchers), each only while it is still the process the scan saw.
fn launchers(proc_fd: &OwnedFd, snap: &mut Snapshot) {
    let ppids: BTreeSet<u32> = snap.processes.iter().map(|p| p.ppid).collect();
    for ppid in ppids {
        let Some(kin) = snap.parents.get_mut(&ppid) else {
            continue;
        };
        let Ok(dir) = scan::open_dir(proc_fd, &ppid.to_string()) else {
            continue;
        };
        let cmdline = scan::read_at(&dir, "cmdline").map(|b| parse::parse_cmdline(&b));
        if let (Ok(cmdline), Ok((start, _))) = (cmdline, scan::start_time_now(&dir)) {
            if start == kin.start_time_ticks {
                kin.cmdline = cmdline;
            }
        }
    }
}

/// Reads what may restart the holders: their system units' restart
/// policy (systemd over D-Bus where it runs, one connection for all; the
/// unit files otherwise, or for a unit systemd has not loaded) and their
/// pods' names (one directory listing).
fn restarters(cfg: &Config, snap: &mut Snapshot) {
    let mut units = BTreeSet::new();
    let mut pods = BTreeSet::new();
    for p in &snap.processes {
        if p.owner.kind == OwnerKind::K8sPod {
            pods.insert(p.owner.id.as_str());
        }
        units.extend(p.owner.system_unit());
    }
    let units: Vec<&str> = units.into_iter().collect();
    let (mut from_bus, bus_error) = match cfg.systemd_bus.as_deref().filter(|_| !units.is_empty()) {
        Some(address) => {
            match crate::proc::restart::systemd_restarts(address, &units, cfg.read_timeout) {
                Ok(found) => (found, None),
                Err(e) => (
                    BTreeMap::new(),
                    Some(format!("systemd over D-Bus ({address}): {e}")),
                ),
            }
        }
        None => (BTreeMap::new(), None),
    };
    let mut known = BTreeMap::new();
    for unit in units {
        let restart = from_bus.remove(unit).or_else(|| {
            let mut r = crate::proc::restart::unit_restart(&cfg.unit_dirs, unit)?;
            r.unreadable.extend(bus_error.clone());
            Some(r)
        });
        if let Some(r) = restart {
            known.insert(unit.to_string(), r);
        }
    }
    snap.units = known;
    if !pods.is_empty() {
        snap.pods = crate::proc::restart::pod_names(&cfg.pod_log_dir, &pods);
    }
}

/// Sets the verdicts and the findings from what the snapshot holds now.
fn judge(s: &mut Snapshot) {
    verdict::apply(s);
    s.findings = crate::diagnose::diagnose(s);
}

/// Every process that is not a holder (nor gpufree), as pkill sees it.
fn others(
    proc_fd: &Arc<OwnedFd>,
    holders: &[Process],
    limits: Limits,
    stuck: &Stuck,
) -> Vec<Brief> {
    let me = std::process::id();
    let Ok(pids) = scan::list_pids(proc_fd) else {
        return Vec::new();
    };
    let pids = pids
        .into_iter()
        .filter(|pid| *pid != me && !holders.iter().any(|h| h.pid == *pid))
        .collect();
    scan::titles(proc_fd, pids, limits, stuck)
        .into_iter()
        .map(|(pid, comm, cmdline)| Brief { pid, comm, cmdline })
        .collect()
}

fn device_uses(
    uses: &[scan::NodeUse],
    nodes: &NodeSet,
    index_of_minor: &HashMap<u32, u32>,
) -> Vec<DeviceUse> {
    uses.iter()
        .map(|u| {
            let node = &nodes.nodes[u.node];
            let gpu = match node.kind {
                NodeKind::NvidiaGpu(minor) => Some(*index_of_minor.get(&minor).unwrap_or(&minor)),
                _ => None,
            };
            let mut via = Vec::new();
            if u.fd {
                via.push(Via::Fd);
            }
            if u.mmap {
                via.push(Via::Mmap);
            }
            DeviceUse {
                path: node.path.display().to_string(),
                gpu,
                via,
            }
        })
        .collect()
}

/// User names by UID, looked up once each.
#[derive(Default)]
struct UserNames(HashMap<u32, String>);

impl UserNames {
    fn name(&mut self, uid: u32) -> String {
        self.0
            .entry(uid)
            .or_insert_with(|| {
                uzers::get_user_by_uid(uid)
                    .map(|u| u.name().to_string_lossy().into_owned())
                    .unwrap_or_else(|| uid.to_string())
            })
            .clone()
    }
}

fn process_from(
    pid: u32,
    d: Details,
    devices: Vec<DeviceUse>,
    gpu_memory: Vec<GpuMemory>,
    users: &mut UserNames,
) -> Process {
    let (cgroup, owner) = owner::parse_cgroup(&d.cgroup);
    let renamed = looks_renamed(&d.stat.comm, &d.cmdline, d.exe.as_deref());
    let protected = is_protected(&d.stat.comm, d.exe.as_deref(), d.exe_trusted, d.status.uid);
    Process {
        protected,
        wchan: d.wchan,
        pid,
        ppid: d.stat.ppid,
        pgid: d.stat.pgid,
        sid: d.stat.sid,
        renamed,
        orphaned: false,
        comm: d.stat.comm,
        cmdline: d.cmdline,
        exe: d.exe,
        uid: d.status.uid,
        user: users.name(d.status.uid),
        state: d.stat.state.to_string(),
        start_time_ticks: d.stat.start_time,
        threads: d.stat.threads,
        nspid: d.status.nspid,
        gpu_memory,
        devices,
        owner,
        cgroup,
        environment: d.environment,
    }
}

/// Marks holders whose parent is init or a user manager (a subreaper) as
/// orphaned, except the main process of a unit or container: the earliest
/// process of its cgroup whose parent is that reaper.
fn mark_orphans(proc_fd: &OwnedFd, processes: &mut [Process]) {
    let parent_is_reaper = |p: &Process| {
        p.ppid == 1
            || (p.ppid > 1
                && scan::read_at(proc_fd, &format!("{}/comm", p.ppid))
                    .is_ok_and(|c| c.trim_ascii_end() == b"systemd"))
    };
    let candidates: Vec<usize> = (0..processes.len())
        .filter(|&i| parent_is_reaper(&processes[i]))
        .collect();
    if candidates.is_empty() {
        return;
    }
    let needs_main = candidates
        .iter()
        .any(|&i| has_main_process(&processes[i].owner));
    // The reaper's other children, with their cgroups and start times.
    let siblings: Vec<(u32, String, u64)> = if needs_main {
        reaper_children(
            proc_fd,
            &candidates.iter().map(|&i| processes[i].ppid).collect(),
        )
    } else {
        Vec::new()
    };
    for i in candidates {
        let p = &processes[i];
        let is_main = has_main_process(&p.owner)
            && !siblings.iter().any(|(ppid, cg, start)| {
                *ppid == p.ppid && *cg == p.cgroup && *start < p.start_time_ticks
            });
        processes[i].orphaned = !is_main;
    }
}

fn has_main_process(owner: &Owner) -> bool {
    matches!(
        owner.kind,
        OwnerKind::SystemdUnit | OwnerKind::Container | OwnerKind::K8sPod | OwnerKind::SlurmJob
    )
}

/// (ppid, cgroup path, start time) of every process whose parent is one of `reapers`.
fn reaper_children(proc_fd: &OwnedFd, reapers: &BTreeSet<u32>) -> Vec<(u32, String, u64)> {
    let Ok(pids) = scan::list_pids(proc_fd) else {
        return Vec::new();
    };
    pids.into_iter()
        .filter_map(|pid| {
            let stat =
                parse::parse_stat(&scan::read_at(proc_fd, &format!("{pid}/stat")).ok()?).ok()?;
            if !reapers.contains(&stat.ppid) {
                return None;
            }
            let cg = scan::read_at(proc_fd, &format!("{pid}/cgroup")).ok()?;
            Some((
                stat.ppid,
                owner::cgroup_path(&cg).unwrap_or_default(),
                stat.start_time,
            ))
        })
        .collect()
}

/// Folds a fresh NVML reading into `snap` without rescanning /proc: GPU
/// memory and process lists, the memory of known processes, accounting and
/// findings. Returns false (and changes nothing) when NVML now lists a PID
/// the snapshot does not know or no longer lists one it knew, or when NVML's
/// own state changed: then a full snapshot is needed.
pub fn refresh_memory(snap: &mut Snapshot, report: &NvmlReport) -> bool {
    // NVML failing now (hung, lost), or a GPU it no longer reports, is a
    // change only a full snapshot can describe.
    if report.status.available != snap.nvml.available {
        return false;
    }
    if !report.status.available {
        return true; // still no NVML: nothing to fold in
    }
    if snap.gpus.iter().any(|g| {
        !report
            .gpus
            .iter()
            .any(|f| f.index == g.index && f.memory.known == g.memory.known)
    }) {
        return false;
    }
    let pids = |gpus: &[Gpu]| -> BTreeSet<(u32, u32)> {
        gpus.iter()
            .flat_map(|g| g.nvml_processes.iter().map(move |p| (g.index, p.pid)))
            .collect()
    };
    let fresh: Vec<&Gpu> = report
        .gpus
        .iter()
        .filter(|g| snap.gpus.iter().any(|s| s.index == g.index))
        .collect();
    let fresh_owned: Vec<Gpu> = fresh.iter().map(|g| (*g).clone()).collect();
    if pids(&fresh_owned) != pids(&snap.gpus) {
        return false;
    }
    for g in &mut snap.gpus {
        let Some(f) = fresh.iter().find(|f| f.index == g.index) else {
            continue;
        };
        let accounted_before = g.memory.accounted_bytes;
        let visible: BTreeSet<u32> = g
            .nvml_processes
            .iter()
            .map(|p| p.pid)
            .filter(|pid| !snap.visibility.nvml_pids_not_visible.contains(pid))
            .collect();
        g.memory = Memory {
            accounted_bytes: accounted_before,
            ..f.memory
        };
        g.nvml_processes = f.nvml_processes.clone();
        let accounted: u64 = g
            .nvml_processes
            .iter()
            .filter(|p| visible.contains(&p.pid))
            .filter_map(|p| p.used_bytes)
            .fold(0, u64::saturating_add);
        g.memory.accounted_bytes = accounted;
        g.memory.unaccounted_bytes = g.memory.used_bytes.saturating_sub(accounted);
        for p in &mut snap.processes {
            for m in p.gpu_memory.iter_mut().filter(|m| m.gpu == g.index) {
                m.used_bytes = g
                    .nvml_processes
                    .iter()
                    .filter(|n| n.pid == p.pid)
                    .map(|n| n.used_bytes)
                    .next()
                    .flatten();
            }
        }
    }
    judge(snap);
    true
}

/// One `--gpu` selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuSelector {
    /// Every GPU.
    All,
    /// An NVML index.
    Index(u32),
    /// A UUID or a prefix of one (`GPU-7f3a`).
    Uuid(String),
    /// A PCI bus id in any common spelling (`01:00.0`, `0000:01:00.0`).
    PciBusId(String),
}

impl std::str::FromStr for GpuSelector {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("empty GPU selector".into());
        }
        if s.eq_ignore_ascii_case("all") {
            Ok(GpuSelector::All)
        } else if let Ok(i) = s.parse() {
            Ok(GpuSelector::Index(i))
        } else if s.contains(':') {
            normalize_pci(s)
                .map(GpuSelector::PciBusId)
                .ok_or_else(|| format!("'{s}' is not a PCI bus id (like 0000:01:00.0)"))
        } else if s.len() >= 4
            && (s.starts_with("GPU-")
                || s.starts_with("MIG-")
                || s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'))
        {
            Ok(GpuSelector::Uuid(s.to_string()))
        } else {
            Err(format!(
                "'{s}' is not a GPU index, UUID, PCI bus id or 'all'"
            ))
        }
    }
}

/// `domain:bus:device.function` as numbers, from any common spelling.
fn normalize_pci(s: &str) -> Option<String> {
    let parts: Vec<&str> = s.split([':', '.']).collect();
    let nums: Option<Vec<u32>> = parts
        .iter()
        .map(|p| u32::from_str_radix(p, 16).ok())
        .collect();
    let nums = nums?;
    let (domain, bus, dev, func) = match nums.as_slice() {
        [b, d, f] => (0, *b, *d, *f),
        [dom, b, d, f] => (*dom, *b, *d, *f),
        _ => return None,
    };
    Some(format!("{domain:08x}:{bus:02x}:{dev:02x}.{func:x}"))
}

impl GpuSelector {
    fn matches(&self, g: &Gpu) -> bool {
        match self {
            GpuSelector::All => true,
            GpuSelector::Index(i) => g.index == *i,
            GpuSelector::Uuid(u) => {
                let want = u.to_ascii_lowercase();
                let have = g.uuid.to_ascii_lowercase();
                !have.is_empty()
                    && (have.starts_with(&want)
                        || have.trim_start_matches("gpu-").starts_with(&want))
            }
            GpuSelector::PciBusId(p) => normalize_pci(&g.pci_bus_id).is_some_and(|q| q == *p),
        }
    }
}

/// Resolves selectors to GPU indexes; an empty list means all. A selector
/// that names no GPU (or a UUID prefix that names several) is an error.
pub fn resolve(gpus: &[Gpu], selectors: &[GpuSelector]) -> Result<Vec<u32>, String> {
    if selectors.is_empty() || selectors.contains(&GpuSelector::All) {
        return Ok(gpus.iter().map(|g| g.index).collect());
    }
    let mut out = BTreeSet::new();
    for s in selectors {
        let hits: Vec<u32> = gpus
            .iter()
            .filter(|g| s.matches(g))
            .map(|g| g.index)
            .collect();
        match hits.as_slice() {
            [] => {
                let have: Vec<String> = gpus.iter().map(|g| g.index.to_string()).collect();
                return Err(format!(
                    "--gpu {}: no such GPU (GPUs here: {})",
                    describe_selector(s),
                    if have.is_empty() {
                        "none".into()
                    } else {
                        have.join(", ")
                    }
                ));
            }
            [_, _, ..] if matches!(s, GpuSelector::Uuid(_)) => {
                return Err(format!(
                    "--gpu {}: UUID prefix matches several GPUs",
                    describe_selector(s)
                ));
            }
            _ => out.extend(hits),
        }
    }
    Ok(out.into_iter().collect())
}

fn describe_selector(s: &GpuSelector) -> String {
    match s {
        GpuSelector::All => "all".into(),
        GpuSelector::Index(i) => i.to_string(),
        GpuSelector::Uuid(u) | GpuSelector::PciBusId(u) => u.clone(),
    }
}

/// Keeps only the selected GPUs and the processes that touch them (and
/// those that hold only shared nodes, which belong to every GPU), then
/// re-runs the diagnosis on what is left.
pub fn select(mut snap: Snapshot, indexes: &[u32]) -> Snapshot {
    if indexes.len() == snap.gpus.len() {
        return snap;
    }
    snap.gpus.retain(|g| indexes.contains(&g.index));
    snap.processes.retain(|p| {
        indexes.iter().any(|&i| p.touches_gpu(i))
            || (p.gpu_memory.is_empty() && p.devices.iter().all(|d| d.gpu.is_none()))
    });
    for p in &mut snap.processes {
        p.gpu_memory.retain(|m| indexes.contains(&m.gpu));
    }
    judge(&mut snap);
    snap
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, uuid: &str, bus: &str) -> Gpu {
        Gpu {
            index,
            uuid: uuid.into(),
            pci_bus_id: bus.into(),
            ..Gpu::default()
        }
    }

    #[test]
    fn refresh_memory_folds_nvml_into_the_snapshot_until_the_process_set_changes() {
        use crate::model::{GpuMemory, NvmlProcess, NvmlProcessKind, Process};
        let nvml = |pid: u32, used: u64| NvmlProcess {
            pid,
            used_bytes: Some(used),
            kind: NvmlProcessKind::Compute,
        };
        let mut g = gpu(0, "GPU-0", "00000000:01:00.0");
        g.memory = Memory {
            total_bytes: 1000,
            used_bytes: 100,
            accounted_bytes: 100,
            known: true,
            ..Memory::default()
        };
        g.nvml_processes = vec![nvml(5, 100)];
        let up = crate::model::NvmlStatus {
            available: true,
            ..crate::model::NvmlStatus::default()
        };
        let mut snap = Snapshot {
            gpus: vec![g.clone()],
            processes: vec![Process {
                pid: 5,
                state: "S".into(),
                gpu_memory: vec![GpuMemory {
                    gpu: 0,
                    used_bytes: Some(100),
                }],
                ..Process::default()
            }],
            nvml: up.clone(),
            ..Snapshot::default()
        };
        let mut later = g.clone();
        later.memory.used_bytes = 300;
        later.nvml_processes = vec![nvml(5, 250)];
        let report = NvmlReport {
            gpus: vec![later.clone()],
            status: up.clone(),
            ..NvmlReport::default()
        };
        assert!(refresh_memory(&mut snap, &report));
        assert_eq!(snap.gpus[0].memory.used_bytes, 300);
        assert_eq!(snap.gpus[0].memory.accounted_bytes, 250);
        assert_eq!(snap.gpus[0].memory.unaccounted_bytes, 50);
        assert_eq!(snap.processes[0].gpu_memory[0].used_bytes, Some(250));
        later.nvml_processes.push(nvml(6, 10));
        let before = snap.clone();
        assert!(
            !refresh_memory(
                &mut snap,
                &NvmlReport {
                    gpus: vec![later.clone()],
                    status: up.clone(),
                    ..NvmlReport::default()
                }
            ),
            "a new PID needs a full snapshot"
        );
        assert_eq!(snap, before);
        let hung = NvmlReport {
            status: crate::model::NvmlStatus {
                available: false,
                error: Some("NVML did not answer within 5.0 s".into()),
                ..up.clone()
            },
            ..NvmlReport::default()
        };
        assert!(
            !refresh_memory(&mut snap, &hung),
            "NVML failing now needs a full snapshot, not the old memory"
        );
    }

    #[test]
    fn selectors_parse_and_resolve() {
        let gpus = [
            gpu(0, "GPU-7f3a0000-aaaa", "00000000:01:00.0"),
            gpu(1, "GPU-7f3b0000-bbbb", "00000000:C1:00.0"),
        ];
        let r = |s: &[&str]| {
            let sels: Vec<GpuSelector> = s.iter().map(|x| x.parse().unwrap()).collect();
            resolve(&gpus, &sels)
        };
        assert_eq!(r(&[]).unwrap(), vec![0, 1]);
        assert_eq!(r(&["all"]).unwrap(), vec![0, 1]);
        assert_eq!(r(&["1"]).unwrap(), vec![1]);
        assert_eq!(r(&["GPU-7f3b"]).unwrap(), vec![1]);
        assert_eq!(r(&["7f3a"]).unwrap(), vec![0]);
        assert_eq!(r(&["c1:00.0"]).unwrap(), vec![1]);
        assert_eq!(r(&["0000:01:00.0", "1"]).unwrap(), vec![0, 1]);
        assert!(r(&["GPU-7f3"]).unwrap_err().contains("several"));
        assert!(r(&["5"]).unwrap_err().contains("--gpu 5: no such GPU"));
        assert!("".parse::<GpuSelector>().is_err());
        assert!("zz:1".parse::<GpuSelector>().is_err());
        assert!("lots".parse::<GpuSelector>().is_err());
    }
}
