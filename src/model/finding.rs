//! A finding of the diagnosis: how bad it is, what it is about, and its
//! typed evidence (its kind follows from that); the words a person reads
//! are made from it by `present::words`.

use super::evidence::{Evidence, GroupName};
use super::Cause;
use super::Next;
use serde::{Deserialize, Serialize};

/// One finding of the diagnosis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// How bad.
    pub severity: Severity,
    /// The processes it is about.
    pub pids: Vec<u32>,
    /// The GPUs it is about.
    pub gpus: Vec<u32>,
    /// Bytes of GPU memory this finding explains (for ordering).
    pub bytes: u64,
    /// The exact next command.
    pub next: Next,
    /// What was found.
    pub evidence: Evidence,
}

impl Finding {
    /// Machine-readable kind, e.g. `live-holders`, `renamed-holders`.
    pub fn kind(&self) -> FindingKind {
        self.evidence.kind()
    }
}

impl Evidence {
    /// The kind of finding this evidence makes.
    pub fn kind(&self) -> FindingKind {
        match self {
            Evidence::Group(g) if matches!(g.name, GroupName::DeadParent { .. }) => {
                FindingKind::Orphans
            }
            Evidence::Group(_) => FindingKind::LiveHolders,
            Evidence::Orphans(_) => FindingKind::Orphans,
            Evidence::Renamed { .. } => FindingKind::RenamedHolders,
            Evidence::Pattern(_) => FindingKind::Pattern,
            Evidence::DeviceHolders { .. } => FindingKind::DeviceHolders,
            Evidence::Zombie { .. } => FindingKind::Zombies,
            Evidence::Uninterruptible { .. } => FindingKind::Uninterruptible,
            Evidence::Stopped { .. } => FindingKind::Stopped,
            Evidence::Protected(_) => FindingKind::ProtectedHolders,
            Evidence::PartialView { .. } => FindingKind::PartialView,
            Evidence::OutsideNamespace => FindingKind::OutsideNamespace,
            Evidence::StaleNvmlPid => FindingKind::StaleNvmlPid,
            Evidence::Unaccounted { cause, .. } => match cause {
                Cause::DriverHeld { .. } => FindingKind::DriverHeldMemory,
                Cause::DriverLeak { .. } => FindingKind::DriverLeak,
                _ => FindingKind::UnaccountedMemory,
            },
            Evidence::Mps(_) => FindingKind::Mps,
            Evidence::Allocation(a) => match a {
                super::AllocationIssue::Unallocated { .. } => FindingKind::UnallocatedMemory,
                super::AllocationIssue::OtherPod { .. } => FindingKind::OtherPodsGpu,
                super::AllocationIssue::GonePod { .. } => FindingKind::GonePod,
            },
            Evidence::Free(_) => FindingKind::Free,
            Evidence::DriverFault(_) => FindingKind::DriverFault,
            Evidence::AppFault(_) => FindingKind::ApplicationFault,
            Evidence::Heard(h) if h.answered() => FindingKind::NoDriverFault,
            Evidence::Heard(_) => FindingKind::DriverUnheard,
            Evidence::Idle(_) => FindingKind::IdleHolders,
            Evidence::IdleUnknown(_) => FindingKind::IdleUnknown,
        }
    }
}

/// What a finding is about. JSON and the metrics' `kind` label spell it
/// as [`FindingKind::as_str`] does.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// Live processes of one launch group hold GPU memory.
    LiveHolders,
    /// Holders whose parent died, or that hold only a node as orphans.
    Orphans,
    /// Holders that renamed themselves (setproctitle).
    RenamedHolders,
    /// What `pkill -f PATTERN` would hit and miss (`why --pattern`).
    Pattern,
    /// Processes holding device nodes without GPU memory.
    DeviceHolders,
    /// A zombie NVML still lists.
    Zombies,
    /// A holder in uninterruptible sleep (a kernel wait).
    Uninterruptible,
    /// A stopped holder.
    Stopped,
    /// Driver daemons or display servers holding a GPU.
    ProtectedHolders,
    /// What could not be seen.
    PartialView,
    /// PIDs NVML lists that this /proc does not have.
    OutsideNamespace,
    /// PIDs NVML lists whose process here holds no GPU device node.
    StaleNvmlPid,
    /// Memory no visible process accounts for, with who may hold it.
    UnaccountedMemory,
    /// Memory the driver holds, unless an unreadable process does.
    DriverHeldMemory,
    /// Memory the driver has not released, with a complete view.
    DriverLeak,
    /// The GPUs are free.
    Free,
    /// A GPU under NVIDIA MPS: its server holds its clients' memory.
    Mps,
    /// Memory used on a GPU the kubelet allocated to no pod.
    UnallocatedMemory,
    /// A process of one pod holds a GPU allocated to another.
    OtherPodsGpu,
    /// Processes of a pod the kubelet no longer runs hold a GPU.
    GonePod,
    /// The driver says a GPU needs a reset or a reboot.
    DriverFault,
    /// An Xid the application caused, with its process.
    ApplicationFault,
    /// Memory is held and the driver reported no fault since boot.
    NoDriverFault,
    /// Memory is held and the driver's fault reports could not be read.
    DriverUnheard,
    /// Live holders with memory and no GPU activity over the window.
    IdleHolders,
    /// Whether holders are idle is unknown: the driver did not give
    /// their utilisation.
    IdleUnknown,
}

impl FindingKind {
    /// Every kind, in the order above.
    pub const ALL: [FindingKind; 26] = [
        FindingKind::LiveHolders,
        FindingKind::Orphans,
        FindingKind::RenamedHolders,
        FindingKind::Pattern,
        FindingKind::DeviceHolders,
        FindingKind::Zombies,
        FindingKind::Uninterruptible,
        FindingKind::Stopped,
        FindingKind::ProtectedHolders,
        FindingKind::PartialView,
        FindingKind::OutsideNamespace,
        FindingKind::StaleNvmlPid,
        FindingKind::UnaccountedMemory,
        FindingKind::DriverHeldMemory,
        FindingKind::DriverLeak,
        FindingKind::Free,
        FindingKind::Mps,
        FindingKind::UnallocatedMemory,
        FindingKind::OtherPodsGpu,
        FindingKind::GonePod,
        FindingKind::DriverFault,
        FindingKind::ApplicationFault,
        FindingKind::NoDriverFault,
        FindingKind::DriverUnheard,
        FindingKind::IdleHolders,
        FindingKind::IdleUnknown,
    ];

    /// The spelling of JSON's `kind` and of the metrics' `kind` label.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::LiveHolders => "live-holders",
            FindingKind::Orphans => "orphans",
            FindingKind::RenamedHolders => "renamed-holders",
            FindingKind::Pattern => "pattern",
            FindingKind::DeviceHolders => "device-holders",
            FindingKind::Zombies => "zombies",
            FindingKind::Uninterruptible => "uninterruptible",
            FindingKind::Stopped => "stopped",
            FindingKind::ProtectedHolders => "protected-holders",
            FindingKind::PartialView => "partial-view",
            FindingKind::OutsideNamespace => "outside-namespace",
            FindingKind::StaleNvmlPid => "stale-nvml-pid",
            FindingKind::UnaccountedMemory => "unaccounted-memory",
            FindingKind::DriverHeldMemory => "driver-held-memory",
            FindingKind::DriverLeak => "driver-leak",
            FindingKind::Free => "free",
            FindingKind::Mps => "mps",
            FindingKind::UnallocatedMemory => "unallocated-memory",
            FindingKind::OtherPodsGpu => "other-pods-gpu",
            FindingKind::GonePod => "gone-pod",
            FindingKind::DriverFault => "driver-fault",
            FindingKind::ApplicationFault => "application-fault",
            FindingKind::NoDriverFault => "no-driver-fault",
            FindingKind::DriverUnheard => "driver-unheard",
            FindingKind::IdleHolders => "idle-holders",
            FindingKind::IdleUnknown => "idle-unknown",
        }
    }
}

impl std::fmt::Display for FindingKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_spelled_the_same_in_json_and_in_words() {
        for k in FindingKind::ALL {
            let json = serde_json::to_string(&k).expect("a kind serializes");
            assert_eq!(json, format!("\"{}\"", k.as_str()));
            let back: FindingKind = serde_json::from_str(&json).expect("and reads back");
            assert_eq!(back, k);
        }
    }
}
