//! One snapshot from what the scan pinned and NVML listed: processes with
//! their owners, orphans (`orphans.rs`) and protected daemons, memory
//! accounted per GPU, visibility; and, for `why --pattern`, the other
//! processes of the scan's listing.

use super::drm::{self, DrmGpus, DrmHost};
use super::orphans::mark_orphans;
use super::refused::{gpus_without_nvml, refused_nodes};
use crate::model::Kin;
use crate::model::{
    Brief, DeviceUse, Gpu, GpuMemory, Owner, Pin, Pins, Process, Snapshot, Unreadable,
    UnreadableReason, Via, Visibility,
};
use crate::nvml::NvmlReport;
use crate::proc::nodes::{NodeKind, NodeSet};
use crate::proc::scan::{Details, Limits, Seen, Stuck, Unread};
use crate::proc::{looks_renamed, parse, scan};
use crate::snapshot::config::Config;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// What one snapshot collected, before it is joined into the model.
pub(super) struct Collected {
    pub(super) report: NvmlReport,
    /// What sysfs says of the DRM devices.
    pub(super) drm: DrmHost,
    pub(super) seen: BTreeMap<u32, Seen>,
    pub(super) unreadable: BTreeMap<u32, Unread>,
    pub(super) vanished: Vec<u32>,
    pub(super) scanned: u32,
    /// Every non-holder the scan read: parent, comm, start time.
    pub(super) kin: BTreeMap<u32, Kin>,
}

pub(super) fn assemble(cfg: &Config, proc_fd: &OwnedFd, nodes: &NodeSet, c: Collected) -> Snapshot {
    let Collected {
        report,
        drm: host,
        seen,
        unreadable,
        vanished,
        scanned,
        kin,
    } = c;
    let mut gpus = if report.status.available {
        report.gpus
    } else {
        gpus_without_nvml(nodes)
    };
    let drm_gpus = drm::add_gpus(&mut gpus, &host, nodes);
    let nvml_mem = nvml_memory(&gpus);
    let (seen, stale) = without_stale(seen, &gpus, &nvml_mem);
    let (drm_mem, mut drm_held) = drm::memory(&seen, &unreadable, nodes, &host, &drm_gpus);
    let mut memory = nvml_mem.clone();
    for (pid, m) in drm_mem {
        memory.entry(pid).or_default().extend(m);
    }
    let mut owners = super::owners::Owners::new(&cfg.sys_root);
    let known = (&gpus[..], &drm_gpus, &memory);
    let (mut processes, pins) = processes_of(seen, nodes, known, &mut owners);
    let not_visible = not_visible(&nvml_mem, &pins, &unreadable, &stale);
    for p in &mut processes {
        p.drm_clients = drm_held.clients.remove(&p.pid).unwrap_or_default();
    }
    mark_orphans(proc_fd, &mut processes, &kin);
    account(&mut gpus, &processes);
    drm::account(&mut gpus, &drm_gpus, &drm_held);
    let mut unavailable = report.unavailable;
    unavailable.append(&mut drm_held.unknown);
    let mut visibility = visibility(cfg, scanned, unreadable_of(proc_fd, unreadable), vanished);
    visibility.nvml_pids_not_visible = not_visible;
    visibility.nvml_pids_stale = stale;
    visibility.refused_nodes = refused_nodes(nodes, &gpus, &drm_gpus);
    Snapshot {
        gpus,
        processes,
        findings: Vec::new(),
        visibility,
        nvml: report.status,
        unavailable,
        dev_dir: cfg.dev_dir.display().to_string(),
        others: Vec::new(),
        // 0: unknown (ages are then not shown).
        uptime_ticks: crate::proc::me::uptime_ticks().unwrap_or(0),
        ticks_per_second: rustix::param::clock_ticks_per_second(),
        verdict: Default::default(),
        pins: Pins::new(pins),
        parents: kin,
        // Units, pods, MIG capabilities and the kubelet: joined later.
        ..Snapshot::default()
    }
}

/// Listed by NVML, but not a process of this /proc (or not one that
/// could be pinned): another PID namespace's.
fn not_visible(
    nvml_mem: &NvmlMemory,
    pins: &BTreeMap<u32, Pin>,
    unreadable: &BTreeMap<u32, Unread>,
    stale: &[u32],
) -> Vec<u32> {
    let stale: HashSet<u32> = stale.iter().copied().collect();
    nvml_mem
        .keys()
        .copied()
        .filter(|pid| {
            !pins.contains_key(pid) && !unreadable.contains_key(pid) && !stale.contains(pid)
        })
        .collect()
}

/// PID → (GPU → bytes) from NVML (None: listed without a size).
type NvmlMemory = BTreeMap<u32, BTreeMap<u32, Option<u64>>>;

/// Each process's memory per GPU, as [`Gpu::listed`] reads the lists.
fn nvml_memory(gpus: &[Gpu]) -> NvmlMemory {
    let mut nvml_mem = NvmlMemory::new();
    for g in gpus {
        for (pid, bytes) in g.listed() {
            nvml_mem.entry(pid).or_default().insert(g.index, bytes);
        }
    }
    nvml_mem
}

/// Drops the pinned processes that hold nothing, and returns with the rest
/// the PIDs NVML lists among those: stale listings.
///
/// A live process gpufree could read whole that holds no GPU node cannot
/// hold GPU memory: a CUDA context lives in the device files. When NVML
/// lists its PID anyway (outside MPS), the memory is another process's:
/// one that had this PID before (reused since), or one that inherited its
/// GPU files. It is never attributed to this process.
fn without_stale(
    seen: BTreeMap<u32, Seen>,
    gpus: &[Gpu],
    nvml_mem: &NvmlMemory,
) -> (BTreeMap<u32, Seen>, Vec<u32>) {
    let mps: BTreeSet<u32> = gpus
        .iter()
        .flat_map(|g| g.nvml_processes.iter())
        .filter(|p| p.kind == crate::model::NvmlProcessKind::Mps)
        .map(|p| p.pid)
        .collect();
    let mut stale = Vec::new();
    let seen = seen
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
    (seen, stale)
}

/// The holders as model processes (their devices and NVML memory), and
/// their pins.
fn processes_of(
    seen: BTreeMap<u32, Seen>,
    nodes: &NodeSet,
    (gpus, drm_gpus, memory): (&[Gpu], &DrmGpus, &NvmlMemory),
    owners: &mut super::owners::Owners,
) -> (Vec<Process>, BTreeMap<u32, Pin>) {
    let index_of_minor: HashMap<u32, u32> = gpus
        .iter()
        .filter_map(|g| g.minor_number.map(|m| (m, g.index)))
        .collect();
    let mut users = UserNames::default();
    let mut processes = Vec::new();
    let mut pins = BTreeMap::new();
    for (pid, s) in seen {
        let devices = device_uses(&s.uses, nodes, &index_of_minor, drm_gpus);
        let gpu_memory = memory
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
        let owned = owners.of(&s.details.cgroup);
        processes.push(process_from(
            pid, s.details, devices, gpu_memory, &mut users, owned,
        ));
    }
    (processes, pins)
}

/// Each GPU's memory split into what its visible processes account for and
/// the rest.
fn account(gpus: &mut [Gpu], processes: &[Process]) {
    let visible: HashSet<u32> = processes.iter().map(|q| q.pid).collect();
    for g in gpus {
        set_accounting(g, |pid| visible.contains(&pid));
    }
}

/// A GPU's memory accounted to the listed processes that `visible` says
/// gpufree sees, and the rest unaccounted.
pub(super) fn set_accounting(g: &mut Gpu, visible: impl Fn(u32) -> bool) {
    let accounted = g.listed_bytes(&visible);
    g.memory.accounted_bytes = accounted;
    g.memory.unaccounted_bytes = g.memory.used_bytes.saturating_sub(accounted);
    g.account_mig(&visible);
}

/// The processes the scan could not read, with their comm where it can
/// still be read and why.
fn unreadable_of(proc_fd: &OwnedFd, unreadable: BTreeMap<u32, Unread>) -> Vec<Unreadable> {
    unreadable
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
        .collect()
}

/// What the scan saw and could not see (NVML's unseen PIDs are the
/// caller's).
fn visibility(
    cfg: &Config,
    scanned: u32,
    unreadable: Vec<Unreadable>,
    mut vanished: Vec<u32>,
) -> Visibility {
    let mountinfo = std::fs::read("/proc/self/mountinfo").unwrap_or_default();
    let root_path = cfg.proc_root.to_string_lossy();
    vanished.sort_unstable();
    vanished.dedup();
    Visibility {
        processes_scanned: scanned,
        processes_unreadable: unreadable.len() as u32,
        unreadable_pids: unreadable.iter().map(|u| u.pid).collect(),
        unreadable,
        vanished_pids: vanished,
        hidepid: parse::mountinfo_hidepid(&mountinfo, root_path.as_bytes()),
        root: rustix::process::geteuid().is_root(),
        nested_pid_namespace: std::fs::read("/proc/self/status")
            .ok()
            .and_then(|b| parse::parse_status(&b).ok())
            .is_some_and(|st| st.nspid.len() > 1),
        ..Visibility::default()
    }
}

/// Every process that is not a holder (nor gpufree), as pkill sees it.
pub(super) fn others(
    proc_fd: &Arc<OwnedFd>,
    listed: Vec<u32>,
    holders: &[Process],
    limits: Limits,
    stuck: &Stuck,
) -> Vec<Brief> {
    let me = std::process::id();
    let holders: HashSet<u32> = holders.iter().map(|h| h.pid).collect();
    let pids = listed
        .into_iter()
        .filter(|pid| *pid != me && !holders.contains(pid))
        .collect();
    scan::titles(proc_fd, pids, limits, stuck)
        .into_iter()
        .map(|(pid, comm, cmdline)| Brief { pid, comm, cmdline })
        .collect()
}

pub(super) fn device_uses(
    uses: &[scan::NodeUse],
    nodes: &NodeSet,
    index_of_minor: &HashMap<u32, u32>,
    drm_gpus: &DrmGpus,
) -> Vec<DeviceUse> {
    uses.iter()
        .map(|u| {
            let node = &nodes.nodes[u.node];
            let gpu = match node.kind {
                NodeKind::NvidiaGpu(minor) => Some(*index_of_minor.get(&minor).unwrap_or(&minor)),
                NodeKind::DriCard | NodeKind::DriRender => drm_gpus.of_node(&node.rel),
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
pub(super) struct UserNames(HashMap<u32, String>);

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

pub(super) fn process_from(
    pid: u32,
    d: Details,
    devices: Vec<DeviceUse>,
    gpu_memory: Vec<GpuMemory>,
    users: &mut UserNames,
    (cgroup, owner): (String, Owner),
) -> Process {
    // A daemon is started by the system, never inside a person's login
    // session or user manager: there, its program is that person's code.
    let (protection, not_protected) = match d.protection {
        Some(crate::model::Protection::System)
            if owner.kind == crate::model::OwnerKind::Session =>
        {
            (None, Some(crate::model::NotProtected::InASession))
        }
        p => (p, d.not_protected),
    };
    let renamed = looks_renamed(&d.stat.comm, &d.cmdline, d.exe.as_deref());
    Process {
        protected: protection.is_some(),
        idle_since_unix_ms: None,
        unselected_activity: None,
        protection,
        not_protected,
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
        drm_clients: Vec::new(),
        owner,
        cgroup,
        environment: d.environment,
    }
}
