//! A process as collection saw it: its identity, what it holds, who
//! started it; and the pins that act on it by identity.

use super::Snapshot;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A process that holds nothing, as the scan saw it: its place in the tree.
/// JSON's `parents` (an addition) has the holders' ancestors' ones.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
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
    /// The DRM clients it holds (AMD, Intel and other DRM GPUs). A client
    /// shared by fork, dup or SCM_RIGHTS is counted in `gpu_memory` of the
    /// first (lowest) PID that shares it, never twice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drm_clients: Vec<DrmClient>,
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
    /// Since when a long-running command (watch, serve, wait) has found
    /// it idle at every collection, milliseconds since the epoch: the
    /// start of the window of the first that did (an addition). None in a
    /// one-shot command, or while it is not idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_since_unix_ms: Option<u64>,
    /// What it did on the GPUs `--gpu` left out (`snapshot::narrow`): a
    /// holder busy there is not idle here (an addition: `busy`, `idle`,
    /// `unknown`; absent without `--gpu` or memory elsewhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unselected_activity: Option<super::Activity>,
    /// How far its protection reaches, when it is protected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protection: Option<Protection>,
    /// Why a process that runs (or, unread, is named like) a protected
    /// program is not protected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_protected: Option<NotProtected>,
    /// The variables of its environment that tell who restarts it
    /// (`TORCHELASTIC_*`), when
    /// readable.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
}

/// How far a protected process's protection reaches (SPEC.md `protection`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Protection {
    /// A driver daemon or display server run by a system account (below
    /// UID 1000, which no person's code runs as): no kill includes it
    /// without `--force-protected`.
    System,
    /// A display server or MPS daemon run by a person's account: that
    /// person's own kills leave it out; root's kill of its GPU includes it,
    /// since the person's code could be running in it.
    User,
}

/// Why a process that runs a protected program (or, where its executable
/// cannot be read, is named like one) is not protected: SPEC.md
/// `not_protected`, its `reason` one of these in kebab case.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum NotProtected {
    /// Its executable is not a file only root could have placed (a
    /// user's copy named like the daemon).
    UntrustedExe,
    /// A system daemon's program run by a person's account: that person's
    /// code, not the daemon.
    PersonsAccount,
    /// Its environment loads code before the program's own:
    /// `LD_PRELOAD` or `LD_AUDIT`, with its value.
    Preload {
        /// The variable.
        variable: String,
        /// Its value (escaped, cut to 256 characters).
        value: String,
    },
    /// It maps executable code from a file outside the system's library
    /// directories (or from a memfd).
    ForeignCode {
        /// The mapped file's path, as its memory map names it.
        path: String,
    },
    /// Run by a person's account in a user namespace other than
    /// gpufree's, where it could mount its own library directories.
    UserNamespace,
    /// A system daemon's program run in a person's login session or user
    /// manager (its cgroup says so): that person's code, whatever account
    /// it runs as.
    InASession,
    /// Run by a person's account, and what shows that it runs only the
    /// program's own code could not be read.
    Unverified {
        /// What could not be read: `executable`, `environment`, `memory
        /// map` or `user namespace`.
        unread: String,
    },
}

impl Process {
    /// Protected from every kill and in every verdict: a system daemon. A
    /// display server or MPS daemon run by a person is protected only in
    /// that person's own kills; for everyone else, and for whether a GPU
    /// is free, it is a holder like any other.
    pub fn protected_for_all(&self) -> bool {
        self.protected && self.protection != Some(Protection::User)
    }
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

    /// Whether every GPU memory it has was read: false when some of it is
    /// unknown (a DRM client whose fdinfo says no memory, an NVML listing
    /// without a size), so it may hold memory however little is known.
    pub fn memory_known(&self) -> bool {
        self.gpu_memory.iter().all(|m| m.used_bytes.is_some())
    }

    /// The command line as `pkill -f` matches it: argv joined by spaces.
    pub fn cmdline_joined(&self) -> String {
        self.cmdline.join(" ")
    }

    /// The program it runs: its exe's file name, else argv\[0\]'s, else
    /// comm (comm is cut at 15 bytes, where `nvidia-cuda-mps-control` and
    /// `nvidia-cuda-mps-server` read the same).
    pub fn program(&self) -> &str {
        let path = self
            .exe
            .as_deref()
            .filter(|e| !e.is_empty())
            .or(self.cmdline.first().map(String::as_str))
            .filter(|p| !p.is_empty())
            .unwrap_or(&self.comm);
        path.rsplit('/').next().unwrap_or(path)
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

/// One DRM client (an open of a DRM device) a process holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DrmClient {
    /// GPU index.
    pub gpu: u32,
    /// `drm-driver`.
    pub driver: String,
    /// `drm-client-id`.
    pub client_id: u64,
    /// Its device memory (VRAM) in bytes.
    pub device_bytes: u64,
    /// Its fdinfo says no memory at all: `device_bytes` is unknown, not 0
    /// (an addition to SPEC.md; absent when false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub memory_unknown: bool,
    /// The other processes that hold it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_with: Vec<u32>,
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
    /// What the cgroup path names below the owner's delegation point (a
    /// user's `user@UID.service`, a container's own cgroup), where only
    /// that user or container, never root's managers, made the names: a
    /// pod, Slurm job or container that is *claimed*, not the owner. None
    /// where nothing below claims one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims: Option<Claim>,
}

/// A pod, Slurm job or container that a delegated cgroup's names claim
/// (SPEC.md: `owner.claims`). Never the owner: its process is not
/// grouped, selected or stopped as that pod, job or container.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Claim {
    /// What kind of owner the names claim.
    pub kind: OwnerKind,
    /// The claimed container id, pod UID or job id.
    pub id: String,
    /// Its readable name, as an owner's (`docker 3f2a1b4c5d6e`).
    pub name: String,
}

impl Owner {
    /// The owner as people read it: its name, then what its delegated
    /// cgroup claims (`apps of uid 65534, claims docker 3f2a1b4c5d6e`).
    /// Raw text from a cgroup path: escape it where it is printed.
    pub fn described(&self) -> String {
        match &self.claims {
            Some(c) if self.name.is_empty() => format!("claims {}", c.name),
            Some(c) => format!("{}, claims {}", self.name, c.name),
            None => self.name.clone(),
        }
    }

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

    /// The kind of its SPEC.md spelling (a metric's `owner_kind` label);
    /// `None` for any other text.
    pub fn from_label(s: &str) -> OwnerKind {
        use serde::de::value::{Error, StrDeserializer};
        OwnerKind::deserialize(StrDeserializer::<Error>::new(s)).unwrap_or_default()
    }

    /// Owned by no job, unit, container or pod: `check`'s leftover, `fleet`'s.
    pub fn is_unowned(self) -> bool {
        matches!(self, OwnerKind::None | OwnerKind::Session)
    }
}
