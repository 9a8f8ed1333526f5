//! What the kubelet allocated: each pod container's devices, and the
//! devices the node may allocate (the kubelet's pod-resources API).

use super::PodName;
use serde::{Deserialize, Serialize};

/// One device allocated to one container of one pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The container's name.
    pub container: String,
    /// The resource (`nvidia.com/gpu`, `nvidia.com/mig-1g.18gb`).
    pub resource: String,
    /// The device id (a GPU or MIG UUID for NVIDIA's device plugin).
    pub device_id: String,
}

/// The kubelet's view, or why there is none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubeletView {
    /// The socket read.
    pub socket: String,
    /// Every pod the kubelet runs.
    #[serde(default)]
    pub pods: Vec<PodName>,
    /// Every device allocated to a running pod.
    #[serde(default)]
    pub allocations: Vec<Allocation>,
    /// Every device id the kubelet may allocate.
    #[serde(default)]
    pub allocatable: Vec<String>,
    /// Why the kubelet could not be read (JSON's `cause`; its `error` in
    /// words).
    #[serde(default, rename = "cause", skip_serializing_if = "Option::is_none")]
    pub error: Option<KubeletDown>,
}

/// Why the kubelet could not be read (its words are present's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KubeletDown {
    /// The runtime the client runs on could not be made.
    Runtime {
        /// The system's error.
        error: String,
    },
    /// No answer within the read timeout.
    Timeout {
        /// The timeout.
        within: std::time::Duration,
    },
    /// The socket could not be connected to.
    Connect {
        /// The client's error.
        error: String,
    },
    /// A call failed.
    Call {
        /// The call's gRPC path.
        path: String,
        /// The client's error or the kubelet's status message.
        error: String,
    },
}

impl KubeletView {
    /// The pods (namespace, name) the device `id` is allocated to.
    pub fn pods_of(&self, id: &str) -> Vec<(&str, &str)> {
        let mut pods: Vec<(&str, &str)> = self
            .allocations
            .iter()
            .filter(|a| a.device_id.eq_ignore_ascii_case(id))
            .map(|a| (a.namespace.as_str(), a.pod.as_str()))
            .collect();
        pods.sort_unstable();
        pods.dedup();
        pods
    }

    /// Whether the kubelet may allocate `g` (or one of its MIG devices).
    pub fn manages(&self, g: &super::Gpu) -> bool {
        device_ids(g)
            .iter()
            .any(|id| self.allocatable.iter().any(|a| a.eq_ignore_ascii_case(id)))
    }

    /// The pods `g` (or one of its MIG devices) is allocated to.
    pub fn allocated_to(&self, g: &super::Gpu) -> Vec<PodName> {
        let mut pods: Vec<PodName> = device_ids(g)
            .iter()
            .flat_map(|id| self.pods_of(id))
            .map(|(namespace, name)| PodName {
                namespace: namespace.into(),
                name: name.into(),
            })
            .collect();
        pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        pods.dedup();
        pods
    }

    /// Whether the kubelet runs the pod `namespace/name`.
    pub fn runs(&self, namespace: &str, name: &str) -> bool {
        self.pods
            .iter()
            .any(|p| p.namespace == namespace && p.name == name)
    }
}

/// The ids a device plugin allocates `g` by: its UUID and its MIG
/// devices'.
fn device_ids(g: &super::Gpu) -> Vec<&str> {
    std::iter::once(g.uuid.as_str())
        .chain(g.mig_devices.iter().map(|m| m.uuid.as_str()))
        .filter(|u| !u.is_empty())
        .collect()
}

/// What the kubelet's allocations say of a holder or a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocationIssue {
    /// Memory is used on a GPU the kubelet manages but allocated to no pod.
    Unallocated {
        /// The GPU's UUID.
        uuid: String,
        /// The processes holding its memory.
        holders: Vec<super::Who>,
    },
    /// A process of one pod holds a GPU allocated to other pods.
    OtherPod {
        /// The holder.
        who: super::Who,
        /// Its pod.
        pod: PodName,
        /// The pods the GPU is allocated to.
        allocated_to: Vec<PodName>,
    },
    /// Processes of a pod the kubelet no longer runs still hold a GPU.
    GonePod {
        /// The pod's UID (from the holders' cgroup).
        uid: String,
        /// Its namespace and name, where still known.
        pod: Option<PodName>,
        /// The holders.
        holders: Vec<super::Who>,
    },
}
