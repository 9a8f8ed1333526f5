//! `gpufree fleet`: every node's GPUs as Prometheus last saw them, as
//! values. `fleet` reads them from Prometheus's HTTP API, `present::fleet`
//! writes them; the JSON of `gpufree fleet --json` is this type.

use super::{OwnerKind, VerdictState};
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
    pub state: VerdictState,
    /// Memory used on its GPUs that are not free, in bytes.
    pub held_bytes: u64,
    /// The longest any of its holders has held memory, in seconds (where
    /// `held_before_history`, it held already when the history began, to
    /// within its first step); null without holders.
    pub held_seconds: Option<f64>,
    /// A holder held memory already when the history looked at began.
    pub held_before_history: bool,
    /// Some holder is a leftover (owned by no unit, container, pod or
    /// job).
    pub leftover: bool,
    /// The GPUs that are not free.
    pub gpus: Vec<FleetGpu>,
    /// Every holder of those GPUs' memory, most memory first. (The
    /// command to run there is `present::next`'s, from `host` and `gpus`.)
    pub holders: Vec<FleetHolder>,
}

/// A GPU that is not free.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetGpu {
    /// Its index on the node.
    pub gpu: u32,
    /// Its UUID.
    pub uuid: String,
    /// `busy` or `unknown`.
    pub state: VerdictState,
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
    /// `session` or `none` (also for a label value gpufree does not
    /// write).
    pub owner_kind: OwnerKind,
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
    /// It held it already when the history looked at began, as far as the
    /// look back's first step can tell: at least `history_seconds` less
    /// one coarse step (`fleet::steps`).
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
    /// The data's age (since the snapshot was taken; from an older
    /// exporter, since the newest sample plus the snapshot's age when it
    /// was scraped), where there is data; negative for data taken in the
    /// future.
    pub age_seconds: Option<f64>,
    /// Why it is stale (`present::fleet` words it).
    pub reason: StaleReason,
}

/// A series in Prometheus's answer with more labels than the fleet view
/// reads (the most, `0`): the answer is refused. Its words are made in
/// `present/words/front.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LabelsOver(pub usize);

/// Why a node's data cannot be trusted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StaleReason {
    /// Its target is down (`up` is 0).
    #[default]
    Down,
    /// Its target is up but exports no `gpufree_nvml_up`.
    NoSeries,
    /// Its newest data is older than `max_age_seconds` (or its age is not
    /// a number).
    Old,
    /// Its data's age is below minus [`CLOCK_SKEW_SECONDS`]: taken in the
    /// future (a clock ahead, or timestamps made up).
    Future,
    /// A series of it names a GPU or a PID by a label that is not a plain
    /// integer (a relabel, another exporter): what it says of that GPU
    /// cannot be placed.
    BadLabel,
}

/// How far ahead of Prometheus's clock a node's may be before its data
/// counts as taken in the future.
pub const CLOCK_SKEW_SECONDS: f64 = 10.0;

/// The look back's two steps for `history` seconds: a coarse one over
/// the whole history (24 steps: 15m for 6h) and a fine one over the
/// coarse step's span, for a holder younger than the last coarse step
/// (5 steps: 3m for 6h); a holder younger than the last fine step has
/// held for less than one. A holder's time held is right to within the
/// step that saw its first sample; the cost is 29 steps of every holder's
/// series, whatever the history (each step costs Prometheus about as much
/// as an instant query of them).
pub fn look_back_steps(history: u64) -> (u64, u64) {
    let coarse = (history / 24).max(1);
    (coarse, (coarse / 5).max(1))
}

impl Fleet {
    /// The verdict of the whole view, as `check`'s (a node not free
    /// outranks a stale one): busy where some node has a GPU that is
    /// busy; unknown where a node is stale or a GPU's verdict unknown;
    /// else free.
    pub fn verdict(&self) -> VerdictState {
        if self.nodes.iter().any(|n| n.state == VerdictState::Busy) {
            VerdictState::Busy
        } else if !self.nodes.is_empty() || !self.stale.is_empty() {
            VerdictState::Unknown
        } else {
            VerdictState::Free
        }
    }
}
