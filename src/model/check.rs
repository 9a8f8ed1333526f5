//! `gpufree check`: one verdict for monitors (node-problem-detector,
//! Nagios, Slurm's health check), as values; `diagnose::check` decides it
//! and `present::check` writes it in each consumer's format.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a check counts as a problem (each can be left out with
/// `--ignore`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Condition {
    /// The driver says a GPU needs a reset or a reboot (its recovery
    /// action, a fault return, the row remapper, retired pages, an Xid
    /// the catalog answers with one): critical.
    ResetRequired,
    /// Xids in the kernel log, by the catalog's action: critical for a
    /// reset or a reboot, a warning for the rest, none for those NVIDIA
    /// says to ignore.
    Xid,
    /// NVML missing or failing, or a GPU whose memory cannot be read (lost,
    /// hung).
    Nvml,
    /// A holder in uninterruptible sleep (D) in every sample of check's
    /// window, in a GPU driver (or where the kernel does not say): only
    /// the driver ends it (critical). In D for part of the window, or
    /// waiting elsewhere (a vfork child, a network file system): a
    /// warning.
    Stuck,
    /// Memory no process accounts for, above the threshold for longer than
    /// the grace period.
    Leak,
    /// Holders that belong to no job, unit, container or pod (none, or a
    /// login session).
    Leftover,
    /// Idle holders (memory, and no GPU activity over the window) that
    /// hold at least `--idle-min` of a GPU: a warning.
    Idle,
    /// On Kubernetes: a pod the kubelet no longer runs still holds a GPU,
    /// a pod's process holds another pod's GPU, or memory is used on a
    /// GPU allocated to no pod.
    Pod,
    /// A zombie holder, or one NVML still lists.
    Zombie,
    /// A protected daemon (nvidia-persistenced, DCGM...) holds more of a
    /// GPU's memory than its idle slack: no kill takes it by default, and
    /// no real daemon holds that much (critical).
    Daemon,
    /// A GPU whose verdict is unknown: part of the state could not be seen.
    Unknown,
}

impl Condition {
    /// Its spelling in flags and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::ResetRequired => "reset-required",
            Condition::Xid => "xid",
            Condition::Nvml => "nvml",
            Condition::Stuck => "stuck",
            Condition::Leak => "leak",
            Condition::Leftover => "leftover",
            Condition::Idle => "idle",
            Condition::Pod => "pod",
            Condition::Zombie => "zombie",
            Condition::Daemon => "daemon",
            Condition::Unknown => "unknown",
        }
    }

    /// Every condition.
    pub const ALL: [Condition; 11] = [
        Condition::ResetRequired,
        Condition::Xid,
        Condition::Nvml,
        Condition::Stuck,
        Condition::Leak,
        Condition::Leftover,
        Condition::Idle,
        Condition::Pod,
        Condition::Zombie,
        Condition::Daemon,
        Condition::Unknown,
    ];
}

/// How bad, in the Nagios plugin API's terms (its exit codes 0..3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Nothing wrong.
    #[default]
    Ok,
    /// Worth a look: leftover holders of device nodes only, zombies.
    Warning,
    /// The next job will not get the GPU: held memory, a leak past its
    /// grace, a stuck holder, NVML down.
    Critical,
    /// What could not be seen could change the answer.
    Unknown,
}

impl Level {
    /// The Nagios word.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "OK",
            Level::Warning => "WARNING",
            Level::Critical => "CRITICAL",
            Level::Unknown => "UNKNOWN",
        }
    }

    /// How it ranks: a critical problem outranks what could not be seen,
    /// which outranks a warning (what could not be seen may be critical).
    pub fn rank(self) -> u8 {
        match self {
            Level::Ok => 0,
            Level::Warning => 1,
            Level::Unknown => 2,
            Level::Critical => 3,
        }
    }

    /// The worse of two.
    pub fn max(self, other: Level) -> Level {
        if other.rank() > self.rank() {
            other
        } else {
            self
        }
    }
}

/// One problem a check found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// What it is.
    pub condition: Condition,
    /// How bad.
    pub level: Level,
    /// The GPU, where it is one GPU's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    /// The processes, each with its comm.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<(u32, String)>,
    /// The memory it concerns.
    pub bytes: u64,
    /// For a leak: how long it has lasted, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds: Option<u64>,
    /// Why it is unknown or what failed, in words (NVML's error, the
    /// verdict's reasons).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// Why it is unknown, typed (the verdict's reasons): `why` is these
    /// in words where it has none of its own.
    #[serde(skip)]
    pub causes: Vec<super::Reason>,
    /// The finding of the diagnosis it comes from, where it is one (the
    /// Kubernetes findings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finding: Option<super::FindingKind>,
    /// For `xid`: the Xid number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xid: Option<u32>,
}

/// A leak still within its grace period: not yet a problem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pending {
    /// The GPU.
    pub gpu: u32,
    /// Unaccounted bytes now.
    pub bytes: u64,
    /// Seconds it has lasted.
    pub seconds: u64,
}

/// What a check concluded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CheckOutcome {
    /// The worst level found.
    pub level: Level,
    /// The problems, worst first.
    pub problems: Vec<Problem>,
    /// Leaks within their grace period.
    pub pending: Vec<Pending>,
}

/// What a check remembers between runs: since when each GPU's memory has
/// been unaccounted above the threshold (unix seconds), by GPU UUID (or
/// `index:N` where NVML gave none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckMemory {
    /// GPU → first seen above the threshold.
    #[serde(default)]
    pub unaccounted_since: BTreeMap<String, u64>,
}

/// How long `check` watches a holder it saw in uninterruptible sleep (D)
/// before it calls it stuck: its first and last samples at least this far
/// apart, every sample in D.
pub const STUCK_WINDOW_MS: u64 = 1000;

/// How often `check` samples a holder in D within [`STUCK_WINDOW_MS`].
pub const STUCK_SAMPLE_MS: u64 = 200;

/// Where the kernel says a task in D waits: `/proc/PID/stack` (each frame
/// with its module, root only) or else `/proc/PID/wchan` (a symbol).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wait {
    /// In a GPU driver: the frame (or wchan symbol) that says so, and its
    /// module where the stack names one.
    Driver {
        /// The function.
        symbol: String,
        /// Its module (`nvidia_uvm`), where the stack names one.
        module: Option<String>,
    },
    /// Elsewhere: a file system (`rpc_wait_bit_killable`,
    /// `request_wait_answer`), a page, a vfork child (`kernel_clone`).
    Elsewhere {
        /// The function.
        symbol: String,
        /// Its module, where the stack names one.
        module: Option<String>,
    },
    /// The kernel does not say (no stack readable, wchan `0` or
    /// unreadable).
    Unsaid,
}

/// What one sample read of a holder through its pinned directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sampled {
    /// Its state (`stat`'s third field) and, in D, where it waits
    /// ([`Wait::Unsaid`] for any other state).
    State {
        /// The state letter.
        state: char,
        /// Where it waits.
        wait: Wait,
    },
    /// Exited (its pinned directory answers no more).
    Gone,
    /// Its state could not be read (timed out, failed).
    Unread,
}

/// One sample: when (milliseconds after the window's first) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// Milliseconds after the first sample.
    pub at_ms: u64,
    /// What it read.
    pub seen: Sampled,
}

/// What `check`'s window saw of one holder that its snapshot found in D.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Window {
    /// The samples, first to last.
    pub samples: Vec<Sample>,
}
