//! The model: one [`Snapshot`] of GPUs, processes, holders and findings.
//!
//! Every presenter (table, JSON, later TUI and metrics) and the diagnosis read
//! a `Snapshot`; none of them touches /proc or NVML. Field names follow the
//! JSON contract of SPEC.md (`gpufree status --json`); fields beyond it are
//! additions, never renames.

mod kill;

pub use kill::{Changed, Plan, PlanEntry, Report, Skipped};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// Everything gpufree knows about the host's GPUs at one moment.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Snapshot {
    /// The GPUs, selected by `--gpu`.
    pub gpus: Vec<Gpu>,
    /// Every process that holds GPU memory or a GPU device node.
    pub processes: Vec<Process>,
    /// The diagnosis, most important first.
    pub findings: Vec<Finding>,
    /// What could not be seen.
    pub visibility: Visibility,
    /// The NVML library: where it came from, or why it is unavailable.
    pub nvml: NvmlStatus,
    /// Calls that failed, each with the reason: never silently missing data.
    pub unavailable: Vec<Unavailable>,
    /// The device directory that was scanned.
    pub dev_dir: String,
    /// Clock ticks since boot when the snapshot was taken (with
    /// `ticks_per_second`, the age of a process from its start time).
    pub uptime_ticks: u64,
    /// Clock ticks per second (`sysconf(_SC_CLK_TCK)`).
    pub ticks_per_second: u64,
    /// Every other process, briefly: only collected for `why --pattern`,
    /// to tell which non-holders a `pkill` pattern would also hit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub others: Vec<Brief>,
    /// The verdict over the selected GPUs: free only if every one is free.
    #[serde(default)]
    pub verdict: Verdict,
    /// Handles on the processes as the scan saw them, for acting on them
    /// by identity (never serialized: a snapshot read back from JSON pins
    /// nothing, so nothing can be signalled from it).
    #[serde(skip)]
    pub pins: Pins,
    /// Every process the scan read that holds nothing (holders carry
    /// theirs), by PID: enough to tell a holder's launcher, and a process
    /// a supervisor started again before it opened a GPU.
    #[serde(skip)]
    pub parents: std::collections::BTreeMap<u32, Kin>,
    /// `Restart=` of the system units that own holders, from their unit
    /// files, by unit name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub units: BTreeMap<String, UnitRestart>,
    /// The namespace and name of the pods that own holders, by pod UID.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pods: BTreeMap<String, PodName>,
}

/// A systemd unit's restart policy, as its files say.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct UnitRestart {
    /// `Restart=`: no, always, on-failure, on-abnormal, on-abort,
    /// on-watchdog, on-success.
    pub restart: String,
    /// `RestartSec=`, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_sec: Option<String>,
    /// The files it was read from, in order.
    pub source: String,
    /// Unit files or drop-ins that exist but could not be read (each with
    /// why): the policy may differ from what the others say.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
}

/// A Kubernetes pod's namespace and name, as the kubelet recorded them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PodName {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// A process that holds nothing, as the scan saw it: its place in the tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kin {
    /// Parent PID.
    pub ppid: u32,
    /// Kernel thread name.
    pub comm: String,
    /// Start time in clock ticks since boot.
    pub start_time_ticks: u64,
    /// Its argv, read only for the parents of holders (a launcher is
    /// known by its command line: `python3 -m deepspeed.launcher...`).
    pub cmdline: Vec<String>,
}

impl Snapshot {
    /// The parent of `pid` as the scan saw it.
    pub fn parent_of(&self, pid: u32) -> Option<u32> {
        self.processes
            .iter()
            .find(|p| p.pid == pid)
            .map(|p| p.ppid)
            .or_else(|| self.parents.get(&pid).map(|k| k.ppid))
    }

    /// The comm of `pid` as the scan saw it, holder or not.
    pub fn comm_of(&self, pid: u32) -> Option<&str> {
        self.processes
            .iter()
            .find(|p| p.pid == pid)
            .map(|p| p.comm.as_str())
            .or_else(|| self.parents.get(&pid).map(|k| k.comm.as_str()))
    }

    /// Whether `pid` is `root` or descends from it (a bounded walk up the
    /// parents; a PID it cannot place is no descendant).
    pub fn descends_from(&self, pid: u32, root: u32) -> bool {
        let mut at = pid;
        for _ in 0..4096 {
            if at == root {
                return true;
            }
            match self.parent_of(at) {
                Some(up) if up != 0 && up != at => at = up,
                _ => return false,
            }
        }
        false
    }
}

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

/// Whether GPUs are free: the one answer `wait`, `kill`, `why`, `watch`
/// and the metrics give (SPEC.md). Unknown is never free.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Verdict {
    /// free, busy or unknown.
    pub state: VerdictState,
    /// Why it is busy or unknown, one sentence each (empty when free).
    pub reasons: Vec<String>,
    /// What gpufree could not see but that does not change the answer
    /// (processes it may not read while NVML accounts for all memory).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub caveats: Vec<String>,
}

/// The three verdicts.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum VerdictState {
    /// Nothing holds the GPU and its memory is at the idle baseline.
    Free,
    /// Something holds it (or its memory is used), and gpufree says what.
    Busy,
    /// What gpufree could not see could change the answer.
    #[default]
    Unknown,
}

impl VerdictState {
    /// The SPEC.md spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictState::Free => "free",
            VerdictState::Busy => "busy",
            VerdictState::Unknown => "unknown",
        }
    }
}

/// A process that holds nothing, as `pkill` sees it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Brief {
    /// PID.
    pub pid: u32,
    /// Kernel thread name.
    pub comm: String,
    /// argv now.
    pub cmdline: Vec<String>,
}

/// One GPU as NVML (or, without NVML, its device node) describes it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Gpu {
    /// NVML index (without NVML: the minor number of `/dev/nvidiaN`).
    pub index: u32,
    /// `GPU-...`; empty when unknown.
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// `00000000:01:00.0` form; empty when unknown.
    pub pci_bus_id: String,
    /// N of `/dev/nvidiaN`, which ties the device node to this GPU.
    pub minor_number: Option<u32>,
    /// Memory as NVML reports it, split by attribution.
    pub memory: Memory,
    /// The processes NVML lists on this GPU, visible here or not.
    pub nvml_processes: Vec<NvmlProcess>,
    /// Whether this GPU is free.
    #[serde(default)]
    pub verdict: Verdict,
}

/// Memory of one GPU, in bytes.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Memory {
    /// Framebuffer size.
    pub total_bytes: u64,
    /// In use, as NVML reports it.
    pub used_bytes: u64,
    /// Used by processes visible in this /proc.
    pub accounted_bytes: u64,
    /// `used - accounted`: held by nobody visible here.
    pub unaccounted_bytes: u64,
    /// Reserved by the driver (memory_info v2), outside `used`.
    pub reserved_bytes: u64,
    /// False when NVML could not report memory for this GPU.
    pub known: bool,
}

/// A process listed by NVML on one GPU.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct NvmlProcess {
    /// PID as NVML reports it.
    pub pid: u32,
    /// Memory used; None when NVML says "not available".
    pub used_bytes: Option<u64>,
    /// Which NVML list reported it.
    pub kind: NvmlProcessKind,
}

/// The NVML process list a process came from.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum NvmlProcessKind {
    /// Compute (CUDA) context.
    Compute,
    /// Graphics context.
    Graphics,
    /// MPS client.
    Mps,
}

/// A process that holds GPU memory or a GPU device node.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Process {
    /// PID in the namespace of the scanned /proc.
    pub pid: u32,
    /// Parent PID.
    pub ppid: u32,
    /// Process group (a forked child keeps its parent's).
    #[serde(default)]
    pub pgid: u32,
    /// Session (a forked child keeps its parent's).
    #[serde(default)]
    pub sid: u32,
    /// Kernel thread name (15 bytes at most), as `pkill` sees it.
    pub comm: String,
    /// argv as the process shows it now (`pkill -f` sees it joined by spaces);
    /// invalid UTF-8 bytes are written `\xNN`.
    pub cmdline: Vec<String>,
    /// The executable; None when unreadable.
    pub exe: Option<String>,
    /// Real UID.
    pub uid: u32,
    /// User name, or the UID as text when it has none.
    pub user: String,
    /// State letter of /proc/PID/stat (R, S, D, Z, T, t, I...).
    pub state: String,
    /// Start time in clock ticks since boot (stat field 22): the identity.
    pub start_time_ticks: u64,
    /// Number of threads.
    pub threads: u32,
    /// PIDs in each nested PID namespace, this /proc's first.
    pub nspid: Vec<u32>,
    /// comm/cmdline no longer look like the executable (setproctitle).
    pub renamed: bool,
    /// Its parent is init or a subreaper while it holds a GPU.
    pub orphaned: bool,
    /// GPU memory NVML attributes to it.
    pub gpu_memory: Vec<GpuMemory>,
    /// GPU device nodes it holds.
    pub devices: Vec<DeviceUse>,
    /// Who started it: unit, container, pod, job, session.
    pub owner: Owner,
    /// The cgroup path the owner was read from.
    pub cgroup: String,
    /// Where the kernel has it waiting (/proc/PID/wchan), when readable and
    /// it is not running.
    pub wchan: Option<String>,
    /// A driver daemon or display server (nvidia-persistenced, nv-hostengine,
    /// MPS, Xorg...) that is never part of a kill by default.
    pub protected: bool,
    /// The variables of its environment that tell who restarts it
    /// (`TORCHELASTIC_*`), when
    /// readable.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
}

/// The sum of byte counts, at most u64::MAX: the sizes come from NVML
/// (any u64), and an overflow would panic a debug build.
pub fn saturating_sum(bytes: impl IntoIterator<Item = u64>) -> u64 {
    bytes.into_iter().fold(0, u64::saturating_add)
}

impl Snapshot {
    /// Seconds since `p` started, when the snapshot knows the uptime.
    pub fn age_seconds(&self, p: &Process) -> Option<u64> {
        (self.ticks_per_second > 0 && self.uptime_ticks >= p.start_time_ticks)
            .then(|| (self.uptime_ticks - p.start_time_ticks) / self.ticks_per_second)
    }
}

impl Process {
    /// Alive for the GPU's purposes: not a zombie, or a zombie leader whose
    /// other threads still run (and still hold what the process holds).
    pub fn is_live(&self) -> bool {
        self.state != "Z" || self.threads > 1
    }

    /// Total GPU memory attributed to this process.
    pub fn memory_bytes(&self) -> u64 {
        saturating_sum(self.gpu_memory.iter().filter_map(|m| m.used_bytes))
    }

    /// The command line as `pkill -f` matches it: argv joined by spaces.
    pub fn cmdline_joined(&self) -> String {
        self.cmdline.join(" ")
    }

    /// Whether this process holds anything on GPU `index`.
    pub fn touches_gpu(&self, index: u32) -> bool {
        self.gpu_memory.iter().any(|m| m.gpu == index)
            || self.devices.iter().any(|d| d.gpu == Some(index))
    }
}

/// GPU memory of one process on one GPU.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct GpuMemory {
    /// GPU index.
    pub gpu: u32,
    /// Bytes; None when NVML says "not available".
    pub used_bytes: Option<u64>,
}

/// One device node a process holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeviceUse {
    /// The node's path under the device directory.
    pub path: String,
    /// GPU index; None for shared control nodes (nvidiactl, nvidia-uvm...).
    pub gpu: Option<u32>,
    /// How: an open fd, a mapping, or both (fuser's `m`).
    pub via: Vec<Via>,
}

/// How a process holds a device node.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// An open file descriptor.
    Fd,
    /// A memory mapping.
    Mmap,
}

/// The thing that started a process, read from its cgroup.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Owner {
    /// What kind of owner.
    pub kind: OwnerKind,
    /// Unit name, container id, pod UID, job id or session.
    pub id: String,
    /// A readable name: `vllm.service`, `docker 3f2a1b…`, `slurm job 3385`.
    pub name: String,
}

impl Owner {
    /// The unit's name when this is a system unit (systemd's own, stopped
    /// with `systemctl stop`); a user's unit is named "X.service (user N)",
    /// so its id and name differ.
    pub fn system_unit(&self) -> Option<&str> {
        (self.kind == OwnerKind::SystemdUnit && self.id == self.name).then_some(self.id.as_str())
    }
}

/// Kinds of owner (SPEC.md).
#[derive(
    Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash,
)]
pub enum OwnerKind {
    /// A systemd service or scope that is not a session.
    #[serde(rename = "systemd-unit")]
    SystemdUnit,
    /// Docker, containerd, CRI-O, podman, LXC/LXD/Incus.
    #[serde(rename = "container")]
    Container,
    /// A Kubernetes pod.
    #[serde(rename = "k8s-pod")]
    K8sPod,
    /// A Slurm job.
    #[serde(rename = "slurm-job")]
    SlurmJob,
    /// A login session or a user's app scope.
    #[serde(rename = "session")]
    Session,
    /// Nothing recognisable.
    #[default]
    #[serde(rename = "none")]
    None,
}

impl OwnerKind {
    /// The SPEC.md spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OwnerKind::SystemdUnit => "systemd-unit",
            OwnerKind::Container => "container",
            OwnerKind::K8sPod => "k8s-pod",
            OwnerKind::SlurmJob => "slurm-job",
            OwnerKind::Session => "session",
            OwnerKind::None => "none",
        }
    }
}

/// One finding of the diagnosis.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Finding {
    /// Machine-readable kind, e.g. `live-holders`, `renamed-holders`.
    pub kind: String,
    /// How bad.
    pub severity: Severity,
    /// One or two sentences for a person.
    pub message: String,
    /// The processes it is about.
    pub pids: Vec<u32>,
    /// The GPUs it is about.
    pub gpus: Vec<u32>,
    /// The exact next command.
    pub next: String,
    /// Evidence, one line each (processes, states, commands).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// Bytes of GPU memory this finding explains (for ordering).
    pub bytes: u64,
}

/// Severity of a finding.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// For context.
    Info,
    /// Worth acting on.
    Warning,
    /// Why the GPU is not free.
    Error,
}

/// What the scan could not see.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Visibility {
    /// Processes whose fd table and maps were examined.
    pub processes_scanned: u32,
    /// Processes whose fd table or maps could not be read (permission, a
    /// read that failed or timed out).
    pub processes_unreadable: u32,
    /// The unreadable PIDs.
    pub unreadable_pids: Vec<u32>,
    /// Each unreadable process with why.
    #[serde(default)]
    pub unreadable: Vec<Unreadable>,
    /// Holders dropped because they were gone when their identity was read
    /// again (their PID may already name another process).
    #[serde(default)]
    pub vanished_pids: Vec<u32>,
    /// PIDs NVML lists with memory that this /proc does not have.
    pub nvml_pids_not_visible: Vec<u32>,
    /// PIDs NVML lists with memory whose process here holds no GPU device
    /// node (its fds were read): the memory is another process's, one that
    /// had this PID before or inherited its GPU files. Never attributed.
    #[serde(default)]
    pub nvml_pids_stale: Vec<u32>,
    /// /proc is mounted with hidepid: other users' processes are hidden.
    pub hidepid: bool,
    /// The scan ran as root.
    pub root: bool,
    /// gpufree runs in a nested PID namespace (a container): NVML on new
    /// drivers hides other namespaces' processes but counts their memory.
    pub nested_pid_namespace: bool,
}

/// A process gpufree could not read, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Unreadable {
    /// PID.
    pub pid: u32,
    /// Its comm, when even that could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// `permission` (not root, or a process even root may not read),
    /// `timeout` or `error`.
    pub reason: UnreadableReason,
    /// The error in words.
    pub why: String,
}

/// Why a process could not be read.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum UnreadableReason {
    /// EACCES/EPERM.
    Permission,
    /// A read did not finish in time.
    Timeout,
    /// Another error (EIO, EMFILE...).
    Error,
}

/// The NVML library's state.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NvmlStatus {
    /// NVML initialised and answered.
    pub available: bool,
    /// The library that was loaded (or tried).
    pub library: String,
    /// Driver version, when known.
    pub driver_version: Option<String>,
    /// Why NVML is unavailable, when it is.
    pub error: Option<String>,
}

/// A call that failed, with why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Unavailable {
    /// What could not be read, e.g. `memory_info`, `compute processes`.
    pub what: String,
    /// The GPU, when the call was per GPU.
    pub gpu: Option<u32>,
    /// Why, e.g. "NOT_SUPPORTED", "missing symbol nvmlX_v3 (driver too old)".
    pub why: String,
}
