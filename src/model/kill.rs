//! What `kill` plans and reports: plain values, shared by the action
//! that makes them and the presenters that show them.

use super::{Held, Holds, Owner, Reason, VerdictState};
use serde::{Deserialize, Serialize};

/// One process the plan will signal.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PlanEntry {
    /// PID.
    pub pid: u32,
    /// Start time seen by the scan: the identity.
    pub start_time_ticks: u64,
    /// Why it is a target (JSON's `cause`; `present::json::PlanDoc`
    /// writes it in words as `reason`).
    #[serde(rename = "cause")]
    pub why: Target,
}

/// Why a process is a kill's target, as values; its words are made in
/// `present/words/target.rs`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Target {
    /// What it holds.
    pub holds: Holds,
    /// How it came in beside what the selectors matched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub with: Option<With>,
    /// The user whose own protected daemon (a display server, an MPS
    /// daemon) this is, a target of that user's own kill.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub users_own: Option<UsersOwn>,
    /// What it is to MPS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mps: Option<MpsPart>,
}

impl Target {
    /// A process that holds `holds` and nothing more to say.
    pub fn holds(holds: Holds) -> Target {
        Target {
            holds,
            with: None,
            users_own: None,
            mps: None,
        }
    }
}

impl Default for Target {
    /// Holds nothing named (a record built before its snapshot).
    fn default() -> Target {
        Target::holds(Holds::Nodes { nodes: Vec::new() })
    }
}

/// How a target came in beside what the selectors matched.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(tag = "how", rename_all = "kebab-case")]
pub enum With {
    /// It holds only shared nodes and started with the memory holders.
    StartedWithHolders,
    /// It holds only shared nodes and `--include-shared` took it.
    IncludeShared,
    /// A signalled target forked it.
    ForkedBy {
        /// The target.
        target: u32,
    },
    /// Forked in a target's process group, session and cgroup, and left
    /// as an orphan.
    OrphanOf {
        /// The target.
        target: u32,
    },
    /// Started again by the target's unit, container, pod or job.
    StartedAgainBy {
        /// The owner's readable name.
        owner: String,
    },
}

/// A person's own protected daemon, a target of their own kill.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct UsersOwn {
    /// The person.
    pub user: String,
    /// An MPS daemon (else a display server).
    pub mps: bool,
}

/// What a process of the plan is to NVIDIA MPS.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(tag = "role", rename_all = "kebab-case")]
pub enum MpsPart {
    /// A client (a target): its memory is freed when it exits.
    Client {
        /// Its GPUs' servers, where each GPU has one.
        servers: Vec<u32>,
    },
    /// A server.
    Server {
        /// Its clients, on every GPU it serves.
        clients: usize,
        /// Its clients this kill does not target.
        spared: Vec<u32>,
        /// It is a target (`--force-protected`), else left running.
        target: bool,
    },
    /// The control daemon, left running.
    Control,
}

/// A process left out, and why.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Skipped {
    /// PID.
    pub pid: u32,
    /// Why it is not signalled (JSON's `cause`; `present::json` writes it
    /// in words as `reason`).
    #[serde(rename = "cause")]
    pub why: Left,
    /// Left out for safety (exit 5 when nothing else was done).
    pub refused: bool,
}

/// Why a process is left out of a kill, as values; its words are made in
/// `present/words/target.rs`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(tag = "left", rename_all = "kebab-case")]
pub enum Left {
    /// PID 1.
    Init,
    /// gpufree itself.
    Itself,
    /// An ancestor of gpufree (its shell or service).
    Ancestor,
    /// A kernel thread.
    KernelThread,
    /// A protected process (driver daemon, display server) without
    /// `--force-protected`.
    Protected {
        /// Its comm.
        comm: String,
    },
    /// Another user's, and gpufree does not run as root.
    NotYours {
        /// Its user's name.
        user: String,
        /// Its UID.
        uid: u32,
        /// The UID gpufree runs for.
        runs_for: u32,
    },
    /// A zombie: its parent must reap it.
    Zombie {
        /// The parent.
        parent: u32,
    },
    /// A `--pid` NVML lists whose process holds no GPU node: not the
    /// memory's owner.
    ListedNotHolder,
    /// A `--pid` that holds nothing.
    NoHolder,
    /// What it is to MPS (a server or control daemon, left running).
    Mps {
        /// Its part.
        part: MpsPart,
    },
    /// The proc root may not be signalled through.
    ProcNotOurs {
        /// Why.
        root: NotOurProc,
    },
    /// Said where it was found (a signal's or a pin's error), already in
    /// words.
    Said {
        /// The words.
        text: String,
    },
}

/// The plan.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Plan {
    /// What will be signalled.
    pub targets: Vec<PlanEntry>,
    /// What matched but will not be.
    pub skipped: Vec<Skipped>,
}

/// A target that was not signalled because it had changed.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Changed {
    /// PID.
    pub pid: u32,
    /// What changed; in JSON, its sentence.
    pub why: Change,
}

/// How a target changed right before its signal, or that this could not
/// be checked. Serialized as its sentence, made (as its `Display`) in
/// `present/words/front.rs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// It holds no GPU device node now: it exec'd another program or let
    /// go.
    LetGo,
    /// It could not be checked again: why the read failed (the scan's
    /// words), where known.
    Unchecked(Option<String>),
}

/// Why a collector's proc root may not be signalled through.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum NotOurProc {
    /// A proc root other than `/proc` (`--proc-root`, `GPUFREE_PROC_ROOT`).
    OtherRoot,
    /// `/proc` is not this PID namespace's proc file system (another
    /// namespace's, or no proc file system at all).
    Foreign,
}

/// The watch for restarts stopped early: a snapshot failed, with its
/// error (the snapshot's own words). Serialized as its sentence, made in
/// `present/words/front.rs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchFailed {
    /// The snapshot's error.
    pub error: String,
}

/// What happened (SPEC.md's `kill` object, with additions).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Every PID signalled.
    pub targets: Vec<u32>,
    /// Targets still running at the end.
    pub survivors: Vec<u32>,
    /// The memory is proven back: the verdict is free.
    pub released: bool,
    /// free (released), busy (not released) or unknown (it could not be
    /// proven either way).
    pub verdict: VerdictState,
    /// Why not released, or why that is unknown (JSON's `causes`; the
    /// `reasons` of `kill --json` are these in words).
    #[serde(rename = "causes")]
    pub reasons: Vec<Reason>,
    /// From the first signal to the release.
    pub seconds_to_release: f64,
    /// When the kill began (ms since the Unix epoch): its checks and
    /// first signals. The audit record's `started`.
    #[serde(skip)]
    pub started_unix_ms: Option<u64>,
    /// From the moment every signalled target had exited to the release
    /// (the driver's teardown), or to the end when not released; None when
    /// a target never exited.
    pub seconds_after_exit: Option<f64>,
    /// How long the release was watched for a supervisor's restart.
    pub seconds_watched_for_restarts: f64,
    /// Why that watch stopped early (a snapshot failed): no restart was
    /// seen, but none can be ruled out. In JSON, its words.
    pub restart_watch_error: Option<WatchFailed>,
    /// Targets that needed SIGKILL.
    pub killed_hard: Vec<u32>,
    /// Targets whose PID now names another process: not signalled.
    pub identity_changed: Vec<u32>,
    /// Targets that no longer held a GPU (exec'd or let go) when checked
    /// right before the signal: not signalled.
    pub changed: Vec<Changed>,
    /// Targets that could not be checked again right before the signal (a
    /// read failed or timed out): not signalled, and the release unknown.
    pub unchecked: Vec<Changed>,
    /// Survivors in uninterruptible sleep: waiting for the kernel.
    pub waiting_for_kernel: Vec<u32>,
    /// Left out, with why (`present`'s `ReportDoc` writes them, each
    /// with its reason in words).
    #[serde(skip)]
    pub skipped: Vec<Skipped>,
    /// Processes found by a rescan (matched, forked or restarted
    /// meanwhile) and handled in the same run.
    pub found_by_rescan: Vec<u32>,
    /// What still holds the GPUs when not released (`present`'s
    /// `ReportDoc` writes them in words as `still_holding`, typed as
    /// `still_holding_causes`).
    #[serde(skip)]
    pub still_holding: Vec<Held>,
    /// Rounds of signals (1 unless the rescans found more).
    pub rounds: u32,
    /// Cgroups frozen while their processes (all targets) were checked and
    /// signalled; other targets were stopped with SIGSTOP.
    pub frozen_cgroups: Vec<String>,
    /// Every target the rounds handled, signalled or not, with who it was
    /// and the signals it was sent: what the audit record names. Not part
    /// of `kill --json`.
    #[serde(skip)]
    pub handled: Vec<Handled>,
}

/// A target one round of signals handled (planned, or found by a
/// rescan), as that round's snapshot saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Handled {
    /// PID.
    pub pid: u32,
    /// Start time: the identity.
    pub start_time_ticks: u64,
    /// Why it was a target.
    pub why: Target,
    /// The round (from 1).
    pub round: u32,
    /// comm; empty when the snapshot no longer had the process.
    pub comm: String,
    /// argv.
    pub cmdline: Vec<String>,
    /// The executable, when readable.
    pub exe: Option<String>,
    /// Real UID; None when the snapshot no longer had the process.
    pub uid: Option<u32>,
    /// User name.
    pub user: String,
    /// Who started it.
    pub owner: Owner,
    /// The signals sent to end it (`TERM`, `KILL`), in order; empty when
    /// it was not signalled.
    pub signals: Vec<String>,
}
