//! `gpufree fleet`: every node's GPUs as Prometheus last saw them, as
//! values. `fleet` reads them from Prometheus's HTTP API, `present::fleet`
//! writes them; the JSON of `gpufree fleet --json` is this type.

use serde::{Deserialize, Serialize};

/// The fleet view: the nodes whose GPUs are not free, most memory held
/// first, and the nodes whose data could not be trusted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Fleet {
    /// The Prometheus server asked (its base URL).
    pub prometheus: String,
    /// The label that names a node (`instance` unless told otherwise).
    pub node_label: String,
    /// The label matchers every query carried (`job="gpufree"`).
    pub selector: String,
    /// How many queries were sent (a handful, whatever the fleet's size).
    pub queries: usize,
    /// How far back a holder's time held is looked for, in seconds.
    pub history_seconds: u64,
    /// A node whose data is older than this is stale, in seconds.
    pub max_age_seconds: u64,
    /// Only nodes with a leftover (or an unknown verdict) are listed.
    pub leftovers_only: bool,
    /// Nodes whose gpufree series Prometheus holds and are fresh.
    pub nodes_seen: usize,
    /// Of those, the nodes whose GPUs are all free.
    pub nodes_free: usize,
    /// The nodes with a GPU that is not free, ranked: most memory held
    /// first, then the longest held.
    pub nodes: Vec<FleetNode>,
    /// The nodes whose data is stale or missing: their GPUs may be
    /// anything.
    pub stale: Vec<StaleNode>,
}

/// A node with a GPU that is not free.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetNode {
    /// The node label's value (e.g. `gpu-07:9835`).
    pub node: String,
    /// The host to run gpufree on: the node without a `:port`.
    pub host: String,
    /// `busy` when some GPU is busy, else `unknown`.
    pub state: String,
    /// Memory used on its GPUs that are not free, in bytes.
    pub held_bytes: u64,
    /// The longest any of its holders has held memory, in seconds (at
    /// least this long where `held_before_history`); null without holders.
    pub held_seconds: Option<f64>,
    /// A holder held memory already when the history looked at began.
    pub held_before_history: bool,
    /// Some holder is a leftover (owned by no unit, container, pod or
    /// job).
    pub leftover: bool,
    /// The GPUs that are not free.
    pub gpus: Vec<FleetGpu>,
    /// Every holder of those GPUs' memory, most memory first.
    pub holders: Vec<FleetHolder>,
    /// The command to run for the diagnosis (`ssh HOST gpufree why --gpu
    /// N`); null where the host cannot be written as one shell word.
    pub command: Option<String>,
}

/// A GPU that is not free.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetGpu {
    /// Its index on the node.
    pub gpu: u32,
    /// Its UUID.
    pub uuid: String,
    /// `busy` or `unknown`.
    pub state: String,
    /// Memory in use, where the node reports it.
    pub used_bytes: Option<u64>,
    /// Memory in use that no process on the node accounts for.
    pub unaccounted_bytes: Option<u64>,
}

/// A process holding a GPU's memory, as its node's gpufree labelled it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetHolder {
    /// The GPU it holds.
    pub gpu: u32,
    /// Its PID on the node.
    pub pid: u32,
    /// Its user.
    pub user: String,
    /// Its comm.
    pub comm: String,
    /// What owns it: `systemd-unit`, `container`, `k8s-pod`, `slurm-job`,
    /// `session` or `none`.
    pub owner_kind: String,
    /// The owner's id.
    pub owner: String,
    /// Its parent is gone.
    pub orphaned: bool,
    /// Its comm is not its command's name.
    pub renamed: bool,
    /// Memory it holds on this GPU.
    pub bytes: u64,
    /// How long it has held it, in seconds (from the first sample within
    /// the history, to within a step of the look back); null where
    /// Prometheus did not say.
    pub held_seconds: Option<f64>,
    /// It held it already when the history looked at began: at least
    /// `history_seconds`.
    pub held_before_history: bool,
    /// Owned by no unit, container, pod or job: `gpufree check`'s
    /// leftover.
    pub leftover: bool,
}

/// A node whose data cannot be trusted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StaleNode {
    /// The node label's value.
    pub node: String,
    /// The data's age (since the newest sample, plus the snapshot's age
    /// when it was scraped), where there is data.
    pub age_seconds: Option<f64>,
    /// Why it is stale.
    pub why: String,
}

/// How a fleet view ends, for the exit code: as `check`'s, a node not
/// free outranks a stale one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FleetVerdict {
    /// Every GPU of every node is free, and every node's data is fresh.
    Free,
    /// Some node has a GPU that is not free.
    NotFree,
    /// No node has a GPU known not to be free, but some node's data is
    /// stale, or some GPU's verdict is unknown.
    Unknown,
}

impl Fleet {
    /// The verdict of the whole view.
    pub fn verdict(&self) -> FleetVerdict {
        if self.nodes.iter().any(|n| n.state == "busy") {
            FleetVerdict::NotFree
        } else if !self.nodes.is_empty() || !self.stale.is_empty() {
            FleetVerdict::Unknown
        } else {
            FleetVerdict::Free
        }
    }
}

/// Whether a holder of this owner kind is a leftover, as `gpufree check`
/// counts one from what its metrics carry: its owner is no unit,
/// container, pod or job (`none`, a login `session`).
pub fn is_leftover(owner_kind: &str) -> bool {
    matches!(owner_kind, "none" | "session")
}
