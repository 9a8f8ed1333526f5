//! What the driver's own evidence says a GPU needs, as findings read it
//! (issue 29): the signs that a reset or a reboot is needed ([`Sign`],
//! from a [`DriverEvidence`]), an application's fault ([`AppFault`]),
//! and what was heard when nothing was reported ([`Heard`]). Typed facts
//! only: `present::words` makes the sentences.

use super::{DriverEvidence, FaultCode, Next, Reading, RecoveryAction, Who, Xid, XidAction};
use super::{FaultReturn, KernelLog, XidReport};
use serde::{Deserialize, Serialize};

/// What a driver fault needs before the GPU's memory comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Need {
    /// A GPU reset (`nvidia-smi --gpu-reset`).
    Reset,
    /// A reboot of the node: the GPU cannot be reset from here.
    Reboot,
}

/// One piece of the driver's evidence that a GPU needs a reset or a reboot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sign {
    /// NVML's recovery action (`NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`).
    Recovery(RecoveryAction),
    /// An NVML call answered RESET_REQUIRED or GPU_IS_LOST.
    Returned(FaultReturn),
    /// A row remap waits for the next reset.
    RemapPending,
    /// A row remap failed.
    RemapFailure,
    /// Retired pages wait for the next reset.
    PagesPending,
    /// An Xid whose catalog action is a reset or a reboot.
    Xid(XidReport),
}

impl Sign {
    /// What this sign alone needs.
    pub fn need(&self) -> Need {
        match self {
            Sign::Recovery(RecoveryAction::NodeReboot) => Need::Reboot,
            Sign::Returned(r) if lost(r.code) => Need::Reboot,
            Sign::Xid(x) if Xid::lookup(x.xid).action == XidAction::RebootNode => Need::Reboot,
            _ => Need::Reset,
        }
    }
}

/// Whether an NVML return says the GPU fell off the bus (read through
/// this one helper, so the return's type may change under it).
fn lost(code: FaultCode) -> bool {
    matches!(code, FaultCode::GpuIsLost)
}

/// The signs in `e` that its GPU needs a reset or a reboot, in the order
/// NVIDIA's guidance reads them: the recovery action, the calls' returns,
/// the row remapper, retired pages, then the Xids whose catalog action is
/// a reset or a reboot.
pub fn signs(e: &DriverEvidence) -> Vec<Sign> {
    let mut out = Vec::new();
    if let Some(a) = e.recovery_action.value() {
        if !matches!(a, RecoveryAction::None | RecoveryAction::DrainP2p) {
            out.push(Sign::Recovery(*a));
        }
    }
    out.extend(e.fault_returns.iter().cloned().map(Sign::Returned));
    if let Some(r) = e.remapped_rows.value() {
        if r.failure {
            out.push(Sign::RemapFailure);
        }
        if r.pending {
            out.push(Sign::RemapPending);
        }
    }
    if e.retired_pages_pending.value() == Some(&true) {
        out.push(Sign::PagesPending);
    }
    let needs = |x: &&XidReport| {
        matches!(
            Xid::lookup(x.xid).action,
            XidAction::ResetGpu | XidAction::RebootNode
        )
    };
    out.extend(e.xids.iter().filter(needs).cloned().map(Sign::Xid));
    out
}

/// What the driver says, now, that the GPU needs before any job can use
/// it: its recovery action, a call's RESET_REQUIRED or GPU_IS_LOST, a
/// failed row remap. Not a pending remap or retired page (the GPU works
/// until its next reset) nor an Xid (a report of the past, which a reset
/// since may have answered): those are the findings', not the verdict's.
pub fn needs_now(e: &DriverEvidence) -> Option<Need> {
    let now: Vec<Sign> = signs(e)
        .into_iter()
        .filter(|s| {
            matches!(
                s,
                Sign::Recovery(_) | Sign::Returned(_) | Sign::RemapFailure
            )
        })
        .collect();
    Need::of(&now)
}

impl Need {
    /// What `signs` need together: a reboot where any needs one.
    pub fn of(signs: &[Sign]) -> Option<Need> {
        signs.iter().map(Sign::need).max()
    }
}

/// A GPU the driver says needs a reset or a reboot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverFault {
    /// The GPU.
    pub gpu: u32,
    /// What it needs.
    pub need: Need,
    /// The driver's evidence of it.
    pub signs: Vec<Sign>,
    /// What holds the GPU: for a reset, what must stop first, each with
    /// how; for a reboot, the holders that will not release it before.
    pub blockers: Vec<(Who, Next)>,
}

/// An Xid the catalog puts on the application, with the process the
/// kernel named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppFault {
    /// The GPU.
    pub gpu: u32,
    /// The report.
    pub xid: XidReport,
    /// The live process of that PID that started before the report (a
    /// later one only reuses the number).
    pub who: Option<Who>,
    /// Whether that process still holds the GPU.
    pub holds: bool,
    /// No live process of that PID was seen, but a process of it could
    /// not be read: whether it still runs is unknown.
    pub unread: bool,
}

/// How far the kernel log was read for Xids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogHeard {
    /// Read to its end: every Xid since boot still in the ring.
    Whole,
    /// Read, but records were lost or the read stopped early.
    Part,
    /// Not read by this command (`GPUFREE_KMSG=off`, a long-running one).
    NotRead,
    /// The read failed, with the system's error; `denied`: the log
    /// refused it (it needs CAP_SYSLOG).
    Failed {
        /// The system's error.
        error: String,
        /// Refused for want of CAP_SYSLOG.
        denied: bool,
    },
}

impl LogHeard {
    /// How the snapshot's kernel log was read.
    pub fn of(log: Option<&KernelLog>) -> LogHeard {
        let Some(log) = log else {
            return LogHeard::NotRead;
        };
        match (&log.xids, log.lost > 0 || log.truncated) {
            (Reading::Value(_), false) => LogHeard::Whole,
            (Reading::Value(_), true) => LogHeard::Part,
            (Reading::Failed(why), _) => LogHeard::Failed {
                error: why.clone(),
                denied: log.denied,
            },
            (Reading::NotSupported, _) => LogHeard::NotRead,
        }
    }
}

/// What was heard from the driver about GPUs whose memory is held and
/// for which it reported no fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heard {
    /// The GPUs.
    pub gpus: Vec<u32>,
    /// The kernel log's Xids.
    pub log: LogHeard,
    /// NVML's recovery action as answered (the same on each GPU, else
    /// one finding per answer).
    pub recovery: Reading<RecoveryAction>,
}

impl Heard {
    /// Whether anything that would have told of a fault answered: the
    /// whole kernel log, or the recovery action.
    pub fn answered(&self) -> bool {
        self.log == LogHeard::Whole || self.recovery.value().is_some()
    }
}

/// Whether a reset gpufree prints is backed by the driver's evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Basis {
    /// Reported: the driver's signs.
    Reported(Vec<Sign>),
    /// Inferred from what no process accounts for: nothing reported.
    Inferred,
}

impl Basis {
    /// The basis of a reset of a GPU with this evidence.
    pub fn of(e: Option<&DriverEvidence>) -> Basis {
        let signs = e.map(signs).unwrap_or_default();
        if signs.is_empty() {
            Basis::Inferred
        } else {
            Basis::Reported(signs)
        }
    }
}
