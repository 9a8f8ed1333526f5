//! What keeps a kill's release from counting, as values: what a process
//! still holds ([`Holds`]), what started one again ([`Restart`]) and why a
//! GPU's memory does not count as back ([`Held`]). The sentences are made
//! in `present/words/verdict/` and `present/words/target.rs`.

use super::{Process, Selection};
use serde::{Deserialize, Serialize};

/// What a process holds: its GPU memory where it has some, else the
/// device nodes it has open or mapped.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "by", rename_all = "kebab-case")]
pub enum Holds {
    /// Memory per GPU, in the process's order (None: NVML gave no size).
    Memory {
        /// Each GPU and its bytes.
        on: Vec<OnGpu>,
    },
    /// The device nodes' names (`nvidia0`).
    Nodes {
        /// Each node's file name.
        nodes: Vec<String>,
    },
}

impl Holds {
    /// What `p` holds: its memory per GPU, else its device nodes' names.
    pub fn of(p: &Process) -> Holds {
        if p.memory_bytes() > 0 {
            let on = p.gpu_memory.iter().map(|m| OnGpu {
                gpu: m.gpu,
                bytes: m.used_bytes,
            });
            Holds::Memory { on: on.collect() }
        } else {
            let nodes = p.devices.iter().map(|d| {
                let name = d.path.rsplit('/').next().unwrap_or(&d.path);
                name.to_string()
            });
            Holds::Nodes {
                nodes: nodes.collect(),
            }
        }
    }
}

/// A process's memory on one GPU.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct OnGpu {
    /// The GPU.
    pub gpu: u32,
    /// Bytes, when NVML says.
    pub bytes: Option<u64>,
}

/// How a process that was no target came to hold what a target held.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "how", rename_all = "kebab-case")]
pub enum Restart {
    /// A child the target had before the kill.
    Child {
        /// The target, its parent.
        parent: u32,
    },
    /// Started during the kill by the target's parent: a supervisor.
    ByParent {
        /// The target.
        target: u32,
        /// The parent.
        parent: u32,
        /// The parent's comm, when the snapshot has it.
        parent_comm: Option<String>,
        /// What to free once the parent is stopped.
        free: Selection,
    },
    /// Started during the kill by the target's system unit.
    ByUnit {
        /// The target.
        target: u32,
        /// The unit.
        unit: String,
        /// The command that stops it and waits for the GPUs, when its name
        /// can be pasted safely.
        stop: Option<String>,
        /// The restarted process's parent (stopped first where `stop` is
        /// None).
        parent: u32,
        /// What to free once the parent is stopped.
        free: Selection,
    },
    /// Started during the kill beside the target: its fork, or a process
    /// of its unit, pod, container, or user and cgroup.
    Beside {
        /// The target.
        target: u32,
    },
}

/// Why a GPU's memory does not count as back (yet): what the release
/// wait shows as it waits, what the end verdict sorts into busy and
/// unknown, and what the report lists.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "held", rename_all = "kebab-case")]
pub enum Held {
    /// NVML did not report the GPU: whether it is back is unknown.
    NotReported {
        /// The GPU.
        gpu: u32,
    },
    /// NVML reported the GPU but not its memory: unknown too.
    Unreadable {
        /// The GPU.
        gpu: u32,
    },
    /// More memory is used than the targets left behind, or NVML still
    /// lists one of the watched PIDs.
    Over {
        /// The GPU.
        gpu: u32,
        /// Bytes used now.
        used: u64,
        /// The most that counts as released (the expected baseline plus
        /// slack).
        limit: u64,
        /// Watched PIDs NVML still lists on it.
        listed: Vec<u32>,
    },
}
