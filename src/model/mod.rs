//! The model: one [`Snapshot`] of GPUs, processes, holders and findings.
//!
//! Every presenter (table, JSON, later TUI and metrics) and the diagnosis read
//! a `Snapshot`; none of them touches /proc or NVML. Field names follow the
//! JSON contract of SPEC.md (`gpufree status --json`); fields beyond it are
//! additions, never renames.

mod audit;
mod blind;
mod bundle;
mod check;
mod driver;
mod evidence;
mod fault;
mod finding;
mod fleet;
mod from;
mod gpu;
mod idle;
mod k8s;
mod kill;
mod lookup;
mod mig;
mod mps;
mod next;
mod nodes;
mod nvml;
mod patch;
mod pin;
mod prepare;
mod process;
mod readback;
mod record;
mod redact;
mod redact_doc;
mod redact_unit;
mod release;
mod rename;
mod restart;
mod role;
mod scan;
mod selector;
mod timeline;
mod unavailable;
mod usage;
mod verdict;
mod view;
mod visibility;
mod xid;

pub use audit::{
    AuditError, AuditRecord, AuditTarget, AuditUnread, Invoker, InvokerSeen, KillOutcome,
    KillResult, KillSeen, OutcomeSeen, Sink, TargetOutcome, TargetSeen,
};
pub use bundle::{
    limits as bundle_limits, Bundle, Content, Cut, LeftItem, LeftOut, LeftWhy, Member, VersionFile,
    MANIFEST,
};
pub use check::{
    CheckMemory, CheckOutcome, Condition, Level, Pending, Problem, Sample, Sampled, Stuck, Wait,
    Window, STUCK_SAMPLE_MS, STUCK_WINDOW_MS,
};
pub use driver::{
    same_pci, DriverEvidence, FaultCode, FaultReturn, GpuUtil, KernelLog, ProcessUtil, Reading,
    RecoveryAction, Remap, XidEvent, XidPid, XidReport,
};
pub use evidence::{
    Alongside, Cause, Evidence, GroupName, Holding, LaunchGroup, Miss, MpsServed, Orphan,
    PatternHits, Renamed, Restarter, Unseen, Who,
};
pub use fault::{needs_now, signs, AppFault, Basis, DriverFault, Heard, LogHeard, Need, Sign};
pub use finding::{Finding, FindingKind, Severity};
pub use fleet::{
    look_back_steps, Fleet, FleetGpu, FleetHolder, FleetNode, LabelsOver, StaleNode, StaleReason,
    CLOCK_SKEW_SECONDS,
};
pub use from::{FromBad, FromFile, ReplayBad, ReplayWhy, FROM_MAX_BYTES, SNAPSHOT_VERSION};
pub use gpu::{Gpu, Memory, MigDevice, NvmlProcess, NvmlProcessKind, Vendor};
pub use idle::{
    activity, judged_activity, process_activity, sm_percent, window_start_ms, Activity, IdleHolder,
    IdleHolders, IdleShape, IdleUnknown, UtilCall, UtilWindow,
};
pub use k8s::{Allocation, AllocationIssue, KubeletDown, KubeletView};
pub use kill::{
    Change, Changed, Handled, Left, MpsPart, NotOurProc, Plan, PlanEntry, Report, Skipped, Target,
    UsersOwn, WatchFailed, With,
};
pub use lookup::{Lookup, DESCENT_STEPS};
pub use mig::{mig_label, MigCap, MigListings, Selection};
pub use mps::{MpsGpu, MpsRole};
pub use next::Next;
pub use nodes::{
    DevDirUnlisted, FileKind, LinkEnd, LinkTarget, MajorsUnread, NodeRefusal, Wanted, WrongDevice,
};
pub use nvml::{NvmlDown, Step, XidDown};
pub use patch::{apply as apply_patch, diff as diff_json, Misfit, Patch};
pub use pin::{Pin, Pins};
pub use prepare::{KeptFile, NothingToKeep, PrepareFailure, Prepared, WalkPin};
pub use process::{
    saturating_sum, Claim, DeviceUse, DrmClient, GpuMemory, Kin, NotProtected, Owner, OwnerKind,
    Process, Protection, Via,
};
pub use record::{
    events, rfc3339_ms, rfc3339_of_ms, At, Delta, Entry, Event, Line, RecordBad, RecordEnd,
    RECORD_VERSION,
};
pub use redact::{redact_json, Keep};
pub use redact_doc::{redact_document, redact_patch};
pub use redact_unit::redact_unit;
pub use release::{Held, Holds, OnGpu, Restart};
pub use rename::{base, names_program, rename_of, started_as, Rename};
pub use restart::{BusFailure, RestartSource, UnitUnread};
pub use role::Role;
pub use scan::{
    BpfPart, BpfStep, BpfUnavailable, CacheNote, CacheRefusal, IteratorsWhy, LinkFailure,
    Relocation, ScanPick, ScanReason, WalkHow,
};
pub use selector::{BadSelector, GpuMiss, Here, UnitMiss, UnitOwner};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
pub use timeline::{index, is_recording, state_at, Moment, Replay, ReplayStep};
pub use unavailable::{Call, Failure, MigCall, Unavailable, Unplaced};
pub use usage::{BadValue, Conflict, Floor, UnitFileWhy};
pub use verdict::{
    BlindSpot, Caveat, Failed, GpuName, MemoryUnknown, Named, Reason, Verdict, VerdictState, Why,
};
pub use view::{
    seen_by_another, ViewAnswer, ViewCommand, ViewError, ViewErrorKind, ViewFrom, ViewRequest,
    VIEW_VERSION,
};
pub use visibility::{RefusedNode, ScanMethod, Unreadable, UnreadableReason, Visibility};
pub use xid::{Fault, Xid, XidAction, CATALOG as XID_CATALOG};

/// Everything gpufree knows about the host's GPUs at one moment. JSON
/// writes it as `present::json::SnapshotDoc` (the findings in words);
/// it reads back without its findings (judging it again makes them) and
/// without pins (nothing can be signalled from a file: `--from`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct Snapshot {
    /// The GPUs, selected by `--gpu`.
    pub gpus: Vec<Gpu>,
    /// Every process that holds GPU memory or a GPU device node.
    pub processes: Vec<Process>,
    /// The diagnosis, most important first (in JSON, in its words:
    /// `present::json` writes them).
    #[serde(skip)]
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
    #[serde(default)]
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
    /// a supervisor started again before it opened a GPU. JSON has the
    /// holders' ancestors among them ([`Snapshot::ancestry`]), all the
    /// diagnosis reads, so a document read back is judged as it was.
    #[serde(default)]
    pub parents: std::collections::BTreeMap<u32, Kin>,
    /// `Restart=` of the system units that own holders, from their unit
    /// files, by unit name.
    #[serde(default)]
    pub units: BTreeMap<String, UnitRestart>,
    /// The namespace and name of the pods that own holders, by pod UID.
    #[serde(default)]
    pub pods: BTreeMap<String, PodName>,
    /// MIG capability nodes (by path under the device directory) and what
    /// each opens, from the driver's `mig-minors` table.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mig_caps: BTreeMap<String, MigCap>,
    /// What the kubelet allocated, on a Kubernetes node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletView>,
    /// The kernel log's Xid reports, read once by a one-shot collection
    /// (None: not read, e.g. `GPUFREE_KMSG=off` or a long-running command).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_log: Option<KernelLog>,
    /// When the collection began, in milliseconds since the Unix epoch
    /// (None: a snapshot made otherwise, or a document that did not say).
    #[serde(default)]
    pub taken_unix_ms: Option<u64>,
    /// The host it was taken on (its node name).
    #[serde(default)]
    pub host: Option<String>,
    /// Where a snapshot read back from a file came from (never read from
    /// JSON: a file's own marker is not its contents).
    #[serde(skip)]
    pub from_file: Option<FromFile>,
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
    /// Where it was read (the files, in order, or systemd): JSON's `from`
    /// (an addition); its `source` is this in words.
    #[serde(rename = "from", default)]
    pub source: RestartSource,
    /// Unit files or drop-ins that exist but could not be read (each with
    /// why): the policy may differ from what the others say. JSON's
    /// `unreadable_causes` (an addition); its `unreadable` is these in
    /// words.
    #[serde(
        rename = "unreadable_causes",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub unreadable: Vec<UnitUnread>,
}

impl UnitRestart {
    /// Whether systemd starts the unit again when its process dies (any
    /// `Restart=` but `no`).
    pub fn restarts(&self) -> bool {
        self.restart != "no"
    }
}

/// A Kubernetes pod's namespace and name, as the kubelet recorded them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PodName {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl Snapshot {
    /// NVML is unavailable where it is needed: on a host with an NVIDIA GPU
    /// (or no GPU found at all). A host whose GPUs all came through DRM
    /// (AMD, Intel) misses nothing without it.
    pub fn misses_nvml(&self) -> bool {
        !self.nvml.available
            && (self.gpus.is_empty() || self.gpus.iter().any(|g| g.vendor == Vendor::Nvidia))
    }

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

    /// The processes that hold nothing above the holders, each holder's
    /// line up to where the scan saw no parent: every entry of
    /// [`Snapshot::parents`] the diagnosis reads (a launcher, a dead
    /// parent's reaper, a torchrun agent, a tree's descent).
    pub fn ancestry(&self) -> BTreeMap<u32, &Kin> {
        let mut line = BTreeMap::new();
        for p in &self.processes {
            let mut at = p.ppid;
            // Bounded as `descends_from` is: a loop never runs forever.
            for _ in 0..DESCENT_STEPS {
                let Some(kin) = self.parents.get(&at) else {
                    break;
                };
                if line.insert(at, kin).is_some() || kin.ppid == at {
                    break;
                }
                at = kin.ppid;
            }
        }
        line
    }

    /// Whether `pid` is `root` or descends from it (a bounded walk up the
    /// parents; a PID it cannot place is no descendant).
    pub fn descends_from(&self, pid: u32, root: u32) -> bool {
        let mut at = pid;
        for _ in 0..DESCENT_STEPS {
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

/// The NVML library's state.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NvmlStatus {
    /// NVML initialised and answered.
    pub available: bool,
    /// The library that was loaded (or tried).
    pub library: String,
    /// Driver version, when known.
    pub driver_version: Option<String>,
    /// Why NVML is unavailable, when it is (JSON's `cause`; its `error`
    /// in words).
    #[serde(default, rename = "cause")]
    pub error: Option<NvmlDown>,
}
