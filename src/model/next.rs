//! The next command of a finding: what an operator runs (printed, never
//! run by gpufree), as a value; `present::next` writes it as a shell line.

use super::Selection;

/// The exact next command of a finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// None.
    Nothing,
    /// `gpufree kill --pid ...`.
    Kill(Vec<u32>),
    /// `gpufree kill --tree PID`.
    KillTree(u32),
    /// `gpufree kill --unit UNIT` (only for a name that prints safely).
    KillUnit(String),
    /// `gpufree kill --match PATTERN` (only for one that prints safely).
    KillMatch(String),
    /// `gpufree kill --force-protected --pid PID`.
    KillProtected(u32),
    /// `systemctl stop UNIT && gpufree wait --gpu ...`.
    StopUnit {
        /// The unit (printable).
        unit: String,
        /// The GPUs (or MIG devices) to wait for.
        gpus: Selection,
    },
    /// `systemctl stop SERVICE` for a driver daemon.
    StopService(&'static str),
    /// `echo quit | nvidia-cuda-mps-control`.
    QuitMps,
    /// The kubectl lookup of a pod and its controller by UID.
    FindPod(String),
    /// The kubectl lookup of a pod's owner.
    PodOwner {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// `kubectl scale deployment --replicas 0 && gpufree wait ...`.
    ScaleDeployment {
        /// Its namespace.
        namespace: String,
        /// The Deployment.
        deployment: String,
        /// The GPUs (or MIG devices) to wait for.
        gpus: Selection,
    },
    /// `kill -s TERM AGENT && gpufree wait ...`.
    StopAgent {
        /// The agent.
        pid: u32,
        /// The GPUs (or MIG devices) to wait for.
        gpus: Selection,
    },
    /// `kill -s CHLD PARENT`: ask the parent to reap its zombie.
    Reap(u32),
    /// `gpufree wait --gpu ... --timeout 300s`: a kernel wait ends.
    WaitKernel(Selection),
    /// `gpufree why --json`, to read visibility and unavailable.
    SeeVisibility,
    /// `sudo gpufree why`.
    AsRoot,
    /// `gpufree why` on the host's PID namespace.
    OnHost,
    /// `gpufree why --gpu ...`.
    Why(Selection),
    /// `nvidia-smi --gpu-reset -i GPU` (printed, never run).
    Reset(u32),
    /// `systemctl reboot`: the driver says only a reboot brings the GPU
    /// back (printed, never run).
    Reboot,
}
