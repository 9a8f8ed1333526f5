//! The verdict as values: free, busy or unknown, with why ([`Reason`]) and
//! what it could not see that does not change it ([`Caveat`]). Numbers stay
//! numbers and PIDs stay PIDs; the sentences are made in
//! `present/words/verdict/`, and JSON carries both (SPEC.md's
//! `reasons`/`caveats` in words, `causes`/`caveat_causes` typed).

pub use super::blind::{BlindSpot, MemoryUnknown};
use super::{Holds, Need, NodeRefusal, NotOurProc, Restart, Unavailable};
use serde::{Deserialize, Serialize};

/// Whether GPUs are free: the one answer `wait`, `kill`, `why`, `watch`
/// and the metrics give (SPEC.md). Unknown is never free.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Verdict {
    /// free, busy or unknown.
    pub state: VerdictState,
    /// Why it is busy or unknown (empty when free). JSON's `causes`; its
    /// `reasons` are these in words.
    #[serde(rename = "causes", default)]
    pub reasons: Vec<Reason>,
    /// What gpufree could not see but that does not change the answer
    /// (processes it may not read while NVML accounts for all memory).
    /// JSON's `caveat_causes`; its `caveats` are these in words.
    #[serde(
        rename = "caveat_causes",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub caveats: Vec<Caveat>,
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

/// One reason a verdict is busy or unknown: why, and the GPU it is about
/// where a verdict over several GPUs names one.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Reason {
    /// The GPU (or its selected MIG devices) it is about; None in a GPU's
    /// own verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuName>,
    /// Why.
    pub why: Why,
}

impl Reason {
    /// `why`, about no GPU in particular.
    pub fn new(why: Why) -> Reason {
        Reason { gpu: None, why }
    }

    /// This reason, about `gpu`.
    pub fn on(self, gpu: GpuName) -> Reason {
        Reason {
            gpu: Some(gpu),
            ..self
        }
    }
}

impl From<Why> for Reason {
    fn from(why: Why) -> Reason {
        Reason::new(why)
    }
}

/// A GPU as a verdict names it: `GPU 0`, or `GPU 0:1` for a GPU narrowed
/// to its MIG device 1.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct GpuName {
    /// Its index.
    pub index: u32,
    /// The selected MIG devices, when it is narrowed to them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig: Vec<u32>,
}

/// A process a reason names.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Named {
    /// PID.
    pub pid: u32,
    /// Its comm.
    pub comm: String,
}

impl Named {
    /// `p`, as a reason names it.
    pub fn of(p: &super::Process) -> Named {
        Named {
            pid: p.pid,
            comm: p.comm.clone(),
        }
    }
}

/// A process whose read failed, and the error (as collection said it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Failed {
    /// PID.
    pub pid: u32,
    /// The error.
    pub error: String,
}

/// Why a GPU is busy or unknown: one variant per sentence.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Why {
    /// Live, unprotected processes hold it.
    Holders {
        /// Who, in the snapshot's order.
        holders: Vec<Named>,
    },
    /// A driver daemon or display server holds memory beyond the idle slack.
    Daemon {
        /// Who.
        holder: Named,
        /// Its memory on the GPU.
        bytes: u64,
    },
    /// NVML still lists a zombie: its parent must reap it.
    Zombie {
        /// The zombie.
        pid: u32,
        /// Its parent.
        ppid: u32,
        /// What NVML lists for it, when it says.
        bytes: Option<u64>,
    },
    /// NVML lists a PID this /proc does not have (another PID namespace).
    OtherNamespace {
        /// The PID.
        pid: u32,
        /// What NVML lists for it, when it says.
        bytes: Option<u64>,
    },
    /// NVML lists a PID that here names a process holding no GPU node.
    StalePid {
        /// The PID.
        pid: u32,
        /// What NVML lists for it, when it says.
        bytes: Option<u64>,
    },
    /// Memory no process holds while gpufree saw everything: the driver's.
    DriverHeld {
        /// The memory no process accounts for.
        bytes: u64,
        /// The driver reports a fault on the GPU (else the driver's
        /// holding it is inferred).
        #[serde(default)]
        reported: bool,
    },
    /// The driver says, now, that the GPU needs a reset or a reboot (its
    /// recovery action, a call's RESET_REQUIRED or GPU_IS_LOST, a failed
    /// row remap): no job can use it before, whatever holds it.
    DriverNeeds {
        /// What it needs.
        need: Need,
    },
    /// Memory NVML attributes to no visible process while part of the view
    /// is missing.
    Unaccounted {
        /// The memory no visible process accounts for.
        bytes: u64,
        /// What is missing.
        blind: Vec<BlindSpot>,
    },
    /// Processes whose read failed or timed out (not for permission).
    Unreadable {
        /// Each, with its error.
        processes: Vec<Failed>,
    },
    /// An entry of the device directory named as this GPU's node that is
    /// not a GPU node.
    RefusedNode {
        /// Its path.
        path: String,
        /// What it is instead.
        what: NodeRefusal,
    },
    /// MIG capability nodes that nothing places: any holder may be on this
    /// MIG device.
    UnplacedMigCaps {
        /// The capability nodes that could not be placed, and why.
        unavailable: Unavailable,
    },
    /// `check`: calls that failed on a GPU whose memory NVML did not report.
    Calls {
        /// Each call, with why.
        calls: Vec<Unavailable>,
    },
    /// The GPU's memory cannot be read.
    MemoryUnknown {
        /// Why.
        memory: MemoryUnknown,
    },
    /// `wait --max-used`: more memory used than allowed.
    OverMaxUsed {
        /// Bytes used.
        used: u64,
        /// Bytes allowed.
        max: u64,
    },
    /// No GPU to look at.
    NoGpu,
    /// `check`: memory partly unaccounted while part of the view is missing.
    PartlyUnaccounted {
        /// The memory no visible process accounts for.
        bytes: u64,
        /// What is missing.
        blind: Vec<BlindSpot>,
    },
    /// `kill`'s release: more memory used on the GPU than the targets left
    /// behind, or NVML still lists a watched PID.
    MemoryOver {
        /// Bytes used now.
        used: u64,
        /// The most that counts as released.
        limit: u64,
        /// Watched PIDs NVML still lists on it.
        listed: Vec<u32>,
    },
    /// `kill`'s release: the GPU's memory cannot be read, so the release
    /// cannot be proven.
    ReleaseUnproven {
        /// The GPU.
        gpu: u32,
        /// NVML reported the GPU (but not its memory).
        reported: bool,
        /// NVML's error, when it is unavailable (as collection said it).
        error: Option<String>,
    },
    /// `kill`: a target could not be checked again right before its
    /// signal, so it was not signalled.
    Unchecked {
        /// The target.
        pid: u32,
        /// What failed (as the check said it).
        why: String,
    },
    /// `kill`: a target changed before its signal (exec'd or let go) and
    /// was not signalled, but NVML still lists it.
    ChangedListed {
        /// The target.
        pid: u32,
    },
    /// `kill`: a watched zombie NVML still lists with its memory.
    ZombieStillListed {
        /// The zombie.
        pid: u32,
        /// Its parent.
        ppid: u32,
    },
    /// `kill`: a target still holds what it held.
    StillHolds {
        /// The target.
        holder: Named,
        /// What it holds.
        holds: Holds,
        /// It is in uninterruptible sleep.
        asleep: bool,
        /// Where it waits in the kernel, when it sleeps there and the
        /// kernel says.
        wchan: Option<String>,
    },
    /// `kill`: a process that was no target holds what a target held.
    Restarted {
        /// The process.
        holder: Named,
        /// What it holds.
        holds: Holds,
        /// How it came to.
        how: Restart,
    },
    /// `kill`: the end snapshot could not be taken.
    NoFinalSnapshot {
        /// Why (the snapshot's error, as collection said it).
        error: String,
    },
    /// `kill --no-wait`: the release was not waited for.
    NotWaited,
    /// `kill`: nothing signalled, since the proc root may not be
    /// signalled through.
    ProcNotOurs {
        /// Why.
        root: NotOurProc,
    },
    /// A sentence made before it was typed: nothing makes one now (every
    /// kill reason is a variant above); kept so SPEC.md's `said` reads
    /// back.
    Said {
        /// The sentence.
        text: String,
    },
}

/// What gpufree could not see that does not change a verdict, or what a
/// verdict rests on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Caveat {
    /// DRM clients on the GPU say this much of their memory is shared with
    /// other clients (`drm-shared-*`): each sharer's memory counts it, so
    /// the memory accounted to processes may count it more than once.
    DrmShared {
        /// The sum of the clients' shared memory.
        bytes: u64,
    },
    /// A DRM driver that publishes no used memory: free rests on holders.
    HoldersOnly {
        /// The driver, when known.
        driver: Option<String>,
    },
    /// `--holders-only`: the memory was not checked.
    MemoryNotChecked {
        /// Why it could not be.
        memory: MemoryUnknown,
    },
    /// Processes gpufree may not read.
    PermissionDenied {
        /// Their PIDs.
        pids: Vec<u32>,
        /// gpufree runs as root (else: run as root to read them).
        root: bool,
        /// NVML accounts for all the memory all the same.
        accounted: bool,
    },
    /// /proc hides other users' processes.
    Hidepid {
        /// NVML accounts for all the memory all the same.
        accounted: bool,
    },
}
