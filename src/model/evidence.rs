//! What a finding found, as typed facts: one [`Evidence`] variant per
//! family of findings, and the next command as a [`Next`]. The words a
//! person reads are made from these by `present::words`; nothing here is
//! text for a person.

use super::{
    BlindSpot, Caveat, DeviceUse, Next, NodeRefusal, UnitRestart, Unreadable, VerdictState,
};

/// A process as a finding names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Who {
    /// PID.
    pub pid: u32,
    /// Its comm.
    pub comm: String,
    /// The program it runs ([`super::Process::program`]).
    pub program: String,
    /// Its command line, joined by spaces.
    pub cmdline: String,
    /// What it is in a framework's process tree.
    pub role: Option<super::Role>,
    /// Its PID in its own (innermost) PID namespace, when that differs.
    pub container_pid: Option<u32>,
    /// Why it is not protected though it runs (or is named like) a
    /// protected program ([`super::Process::not_protected`]).
    pub not_protected: Option<super::NotProtected>,
    /// The user whose own kills alone leave it out: a display server or
    /// MPS daemon that person runs ([`super::Protection::User`]).
    pub protected_for: Option<String>,
}

/// A holder and its GPU memory: (GPU, bytes when known) per GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// The holder.
    pub who: Who,
    /// Its memory per GPU.
    pub memory: Vec<(u32, Option<u64>)>,
    /// In a group of a dead parent, the top of its tree (the process
    /// whose parent died) when that is not the holder itself: its own
    /// parent is alive.
    pub top: Option<u32>,
}

/// A process of a launch group that holds no counted GPU memory (a
/// launcher, a resource tracker holding a device node), which the
/// group's next stops with its holders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alongside {
    /// The process.
    pub who: Who,
    /// The GPU device nodes it holds.
    pub devices: Vec<DeviceUse>,
    /// As [`Holding::top`].
    pub top: Option<u32>,
}

/// What a launch group is named by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupName {
    /// A unit, container, pod or job, by its name.
    Owner(String),
    /// A process that starts the holders: a holder at the top of their
    /// tree, or a parent that holds nothing (comm None when unknown).
    Launcher {
        /// Its PID.
        pid: u32,
        /// Its comm.
        comm: Option<String>,
        /// What it is (torchrun's elastic agent).
        role: Option<super::Role>,
    },
    /// A single holder, its own group.
    Process {
        /// Its PID.
        pid: u32,
        /// Its comm.
        comm: String,
    },
    /// A tree whose top is not in the snapshot.
    Pid(u32),
    /// Holders whose parent died: the process they were reparented to.
    DeadParent {
        /// The reaper's PID.
        reaper: u32,
        /// Its comm, when known.
        comm: Option<String>,
    },
}

/// What starts a group again when its processes die.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restarter {
    /// A systemd unit's `Restart=` (or files that could not be read).
    Unit {
        /// The unit.
        unit: String,
        /// Its restart policy, as its files say.
        policy: UnitRestart,
    },
    /// A pod whose name no kubelet log directory gives.
    UnnamedPod {
        /// Its UID.
        uid: String,
    },
    /// A pod whose controller its name does not tell.
    Pod {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Its UID.
        uid: String,
    },
    /// A pod named like a Deployment's.
    Deployment {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Its UID.
        uid: String,
        /// The Deployment, from the name's shape.
        deployment: String,
    },
    /// A torchrun agent with restarts left.
    Torchrun {
        /// The agent's PID.
        agent: u32,
        /// Restarts made.
        used: u64,
        /// Restarts allowed.
        max: u64,
    },
}

/// A launch group holding memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchGroup {
    /// What started it.
    pub name: GroupName,
    /// Its holders with memory.
    pub holders: Vec<Holding>,
    /// Its other processes, which its next stops too.
    pub also: Vec<Alongside>,
    /// The launcher above sibling trees, which holds no GPU itself.
    pub launcher: Option<u32>,
    /// What starts it again, if anything.
    pub restarter: Option<Restarter>,
}

/// A holder whose parent died.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    /// The holder.
    pub who: Who,
    /// Its parent now.
    pub parent: u32,
    /// Its owner's name (empty when none).
    pub owner: String,
}

/// A holder that renamed itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renamed {
    /// PID.
    pub pid: u32,
    /// Its comm now.
    pub comm: String,
    /// Its command line now, joined.
    pub cmdline: String,
    /// Its executable, when readable.
    pub exe: Option<String>,
    /// What it changed; None where that cannot be told (its executable or
    /// command line is not shown: another user's process in serve's view).
    pub changed: Option<super::Rename>,
    /// The program's name as it was started (`python3`), a user's
    /// pattern; None when unknown.
    pub started_as: Option<String>,
    /// Whether `pkill NAME` (comm) still hits it, for that name.
    pub pkill: bool,
    /// Whether `pkill -f NAME` and `ps aux | grep NAME` (both read the
    /// command line) still hit it, for that name.
    pub pkill_f: bool,
}

/// A holder a `pkill -f` pattern misses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Miss {
    /// PID.
    pub pid: u32,
    /// Its comm.
    pub comm: String,
    /// It renamed itself.
    pub renamed: bool,
    /// Its command line (renamed), else what `pkill -f` sees of it.
    pub seen: String,
}

/// What `pkill -f PATTERN` would and would not match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternHits {
    /// The pattern as typed.
    pub pattern: String,
    /// How many live holders there are.
    pub holders: usize,
    /// The holders it hits: PID and comm.
    pub hits: Vec<(u32, String)>,
    /// The holders it misses.
    pub misses: Vec<Miss>,
    /// How many holders plain `pkill` (comm) hits.
    pub comm_hits: usize,
    /// Other processes it hits: PID, comm, what `pkill -f` sees.
    pub collateral: Vec<(u32, String, String)>,
}

/// Something the snapshot could not see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unseen {
    /// Processes that could not be read: the first six, and how many.
    Unreadable {
        /// The first six.
        first: Vec<Unreadable>,
        /// How many in all.
        total: usize,
    },
    /// /proc hides other users' processes.
    Hidepid,
    /// NVML did not load or answer: its error.
    Nvml(Option<String>),
    /// An entry of the device directory with a GPU node's name that is
    /// not a GPU node: holders of the real node may be unseen.
    RefusedNode {
        /// Its path.
        path: String,
        /// What it is instead.
        why: NodeRefusal,
    },
    /// A call that failed.
    Call(super::Unavailable),
}

/// Why memory no visible process accounts for is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// Only processes that open the nodes without mapping them.
    Monitors {
        /// Those processes.
        openers: Vec<Who>,
        /// What must stop before a reset.
        reset: Vec<(Who, Next)>,
        /// Whether the driver reported a fault, or the reset is inferred.
        basis: super::Basis,
    },
    /// Holders of the GPU's nodes that may own the contexts.
    Holders(Vec<Who>),
    /// gpufree runs in a nested PID namespace.
    NestedNamespace,
    /// Not root, and part of the view is missing (the verdict's words).
    Partial(Vec<BlindSpot>),
    /// Root, and still processes could not be read.
    DriverHeld {
        /// The first six processes even root could not read.
        unreadable: Vec<Unreadable>,
        /// How many could not be read in all.
        total: usize,
        /// The verdict's blind spots, when no process is named.
        blind: Vec<BlindSpot>,
        /// What must stop before a reset.
        reset: Vec<(Who, Next)>,
        /// Whether the driver reported a fault, or the reset is inferred.
        basis: super::Basis,
    },
    /// A GPU found through DRM whose holders' clients were all read: the
    /// rest is its driver's (or the kernel's, or another namespace's).
    DrmDriver {
        /// Its kernel driver, when known.
        driver: Option<String>,
    },
    /// A complete view and no holder: the driver's leak.
    DriverLeak {
        /// What must stop before a reset.
        reset: Vec<(Who, Next)>,
        /// Whether the driver reported a fault, or the reset is inferred.
        basis: super::Basis,
    },
}

/// The typed facts of a finding; its kind follows from the variant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evidence {
    /// What the kubelet's allocations say of a holder or a GPU.
    Allocation(super::AllocationIssue),
    /// A launch group holds memory (`orphans` when its parent died).
    Group(Box<LaunchGroup>),
    /// Holders whose parent died, outside a group with memory.
    Orphans(Vec<Orphan>),
    /// Holders that renamed themselves, one finding per kind of change:
    /// their comm only, or their command line (with or without comm).
    Renamed {
        /// What they changed: [`super::Rename::Comm`], or
        /// [`super::Rename::Cmdline`] for a command line rewritten (with
        /// or without comm: each holder's own is its `changed`); None for
        /// holders whose change cannot be told.
        how: Option<super::Rename>,
        /// The holders.
        holders: Vec<Renamed>,
    },
    /// What `pkill -f PATTERN` would hit and miss.
    Pattern(Box<PatternHits>),
    /// Processes holding device nodes without memory.
    DeviceHolders {
        /// Started with the memory holders (else on their own).
        with_memory_holders: bool,
        /// Each with its nodes.
        holders: Vec<(Who, Vec<DeviceUse>)>,
    },
    /// A zombie.
    Zombie {
        /// The zombie.
        who: Who,
        /// Its parent, which must reap it.
        parent: u32,
        /// Its threads (more than one: a leader whose threads run).
        threads: u32,
        /// NVML still lists it.
        listed: bool,
    },
    /// A holder in uninterruptible sleep.
    Uninterruptible {
        /// The holder.
        who: Who,
        /// Where the kernel has it waiting.
        wchan: Option<String>,
    },
    /// A stopped holder.
    Stopped {
        /// The holder.
        who: Who,
        /// Where the kernel has it waiting.
        wchan: Option<String>,
    },
    /// Driver daemons or display servers, each with how to stop it.
    Protected(Vec<(Who, Next)>),
    /// What could not be seen, and the verdict it leaves.
    PartialView {
        /// The verdict over the GPUs.
        verdict: VerdictState,
        /// What could not be seen.
        unseen: Vec<Unseen>,
    },
    /// PIDs NVML lists that this /proc does not have.
    OutsideNamespace,
    /// PIDs NVML lists whose process here holds no device node.
    StaleNvmlPid,
    /// Memory on `gpu` no visible process accounts for.
    Unaccounted {
        /// The GPU.
        gpu: u32,
        /// Why.
        cause: Cause,
    },
    /// A GPU under NVIDIA MPS: its server holds its clients' memory.
    Mps(Box<MpsServed>),
    /// The GPUs are free, with the verdict's caveats.
    Free(Vec<Caveat>),
    /// The driver says a GPU needs a reset or a reboot.
    DriverFault(Box<super::DriverFault>),
    /// An Xid the catalog puts on the application, with its process.
    AppFault(Box<super::AppFault>),
    /// Memory is held and the driver reported no fault (or could not be
    /// heard): what was asked and how it answered.
    Heard(Box<super::Heard>),
    /// Live holders with memory and no GPU activity over the window.
    Idle(Box<super::IdleHolders>),
    /// Holders whose activity the driver did not give: none is idle.
    IdleUnknown(Box<super::IdleUnknown>),
}

/// One GPU under MPS: who holds what, and in which order to stop them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpsServed {
    /// The GPU.
    pub gpu: u32,
    /// The `nvidia-cuda-mps-server`s seen holding it, with their own
    /// memory there.
    pub servers: Vec<(Who, Option<u64>)>,
    /// The clients seen here, with their memory on the GPU.
    pub clients: Vec<(Who, Option<u64>)>,
    /// Clients NVML lists that this /proc does not show.
    pub unseen_clients: Vec<u32>,
    /// All the clients' memory, as NVML reports it.
    pub client_bytes: u64,
    /// The `nvidia-cuda-mps-control` daemons seen.
    pub controls: Vec<Who>,
}
