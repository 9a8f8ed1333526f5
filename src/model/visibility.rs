//! What a snapshot could not see, and how it looked: the processes it
//! could not read and why, the PIDs NVML lists that it could not place,
//! the device directory's refused entries, which walk found the holders,
//! and what was hidden from a caller who may not read it.

use super::{NodeRefusal, ScanReason, ViewFrom};
use serde::{Deserialize, Serialize};

/// What the scan could not see.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
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
    /// How holders were found: the /proc walk or the in-kernel one.
    #[serde(default)]
    pub scan: ScanMethod,
    /// Why that one (and why not the other): JSON's `scan_cause` (an
    /// addition to SPEC.md; absent where no scan was made); its
    /// `scan_reason` is this in one line of words (empty where none).
    #[serde(
        rename = "scan_cause",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub scan_reason: Option<ScanReason>,
    /// Processes the in-kernel walk could not read in full (a memory map
    /// locked by a writer, an fd table that changed under an exiting task,
    /// more fds on GPU nodes than it writes, a leader that exited while its
    /// threads live), read again through /proc; counted by PID and start
    /// time. (A process that started in the tick the walk began is read
    /// through /proc too, and not counted here.)
    #[serde(default)]
    pub scan_reread: u32,
    /// Holders whose mappings the in-kernel walk took from the result it
    /// kept for them at an earlier walk of the same loaded program, their
    /// memory map unchanged since (an addition to SPEC.md).
    #[serde(default)]
    pub scan_kept: u32,
    /// Where the snapshot came from when not from this process's own scan:
    /// root's `gpufree serve` view for a user who is not root (an addition
    /// to SPEC.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view: Option<ViewFrom>,
    /// What was removed of other users' processes (their command lines,
    /// environments, executables) for a caller who may not read them: in
    /// root's view for a user, and in secure mode (an addition to
    /// SPEC.md; absent when nothing was).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<String>,
    /// Entries of the device directory with a GPU node's name that are
    /// not GPU nodes (a link to another file, another driver's device):
    /// never matched, so holders of the real nodes they name may be
    /// unseen (an addition to SPEC.md; absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused_nodes: Vec<RefusedNode>,
}

/// An entry of the device directory whose name says it is a GPU node and
/// that is not one: no process is a holder through it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RefusedNode {
    /// Its path.
    pub path: String,
    /// What it is instead: JSON's `cause` (an addition to SPEC.md); its
    /// `why` is this in words.
    #[serde(rename = "cause")]
    pub why: NodeRefusal,
    /// The GPUs whose holders it may hide (their verdict is then unknown):
    /// the one its name gives (`nvidiaN` by minor number, a DRM node by
    /// its PCI device); every NVIDIA GPU for a shared or capability node,
    /// every AMD GPU for `kfd`, every GPU for a DRM node nothing places.
    pub gpus: Vec<u32>,
}

/// How holders were found.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ScanMethod {
    /// Every process's fd table and maps read through /proc.
    #[default]
    Procfs,
    /// BPF iterators walked every task's files and mappings in the kernel.
    Bpf,
}

impl ScanMethod {
    /// Its name in JSON and in words.
    pub fn name(self) -> &'static str {
        match self {
            ScanMethod::Procfs => "procfs",
            ScanMethod::Bpf => "bpf",
        }
    }
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
