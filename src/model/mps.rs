//! NVIDIA MPS as a snapshot shows it: the control daemon
//! (`nvidia-cuda-mps-control`), the server it starts per user
//! (`nvidia-cuda-mps-server`), which creates the one GPU context and holds
//! the memory its clients allocate, and the clients, which NVML lists with
//! `nvmlDeviceGetMPSComputeRunningProcesses`. A client's memory is freed
//! when the client exits; the server's exit ends every client's CUDA
//! context (they fail and lose their GPU state), and `quit` to the control
//! daemon waits for the clients before it stops the servers.

use super::{Process, Snapshot};
use serde::Serialize;

/// What a process is to MPS.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MpsRole {
    /// `nvidia-cuda-mps-control`: starts the servers, takes `quit`.
    Control,
    /// `nvidia-cuda-mps-server`: holds its clients' GPU memory.
    Server,
    /// A process NVML lists as an MPS client.
    Client,
}

/// MPS on one GPU.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct MpsGpu {
    /// GPU index.
    pub gpu: u32,
    /// The servers holding this GPU (one per user at a time).
    pub servers: Vec<u32>,
    /// The PIDs NVML lists as MPS clients of this GPU, visible here or not.
    pub clients: Vec<u32>,
    /// The clients' memory, as NVML reports it.
    pub client_bytes: u64,
}

impl Snapshot {
    /// What `p` is to MPS, if anything. Only a protected process (its exe
    /// one only root could have put there) is taken for a daemon.
    pub fn mps_role(&self, p: &Process) -> Option<MpsRole> {
        if p.protected {
            match p.program() {
                "nvidia-cuda-mps-control" => return Some(MpsRole::Control),
                "nvidia-cuda-mps-server" => return Some(MpsRole::Server),
                _ => {}
            }
        }
        self.gpus
            .iter()
            .flat_map(|g| &g.nvml_processes)
            .any(|n| n.pid == p.pid && n.kind == super::NvmlProcessKind::Mps)
            .then_some(MpsRole::Client)
    }

    /// The MPS control daemons among the holders.
    pub fn mps_controls(&self) -> Vec<u32> {
        self.processes
            .iter()
            .filter(|p| self.mps_role(p) == Some(MpsRole::Control))
            .map(|p| p.pid)
            .collect()
    }

    /// Each GPU with an MPS server or MPS clients, in index order.
    pub fn mps(&self) -> Vec<MpsGpu> {
        self.gpus
            .iter()
            .filter_map(|g| {
                let servers: Vec<u32> = self
                    .processes
                    .iter()
                    .filter(|p| p.touches_gpu(g.index))
                    .filter(|p| self.mps_role(p) == Some(MpsRole::Server))
                    .map(|p| p.pid)
                    .collect();
                let listed = || {
                    g.nvml_processes
                        .iter()
                        .filter(|n| n.kind == super::NvmlProcessKind::Mps)
                };
                let mut clients: Vec<u32> = listed().map(|n| n.pid).collect();
                clients.sort_unstable();
                clients.dedup();
                let client_bytes = super::saturating_sum(listed().filter_map(|n| n.used_bytes));
                (!servers.is_empty() || !clients.is_empty()).then_some(MpsGpu {
                    gpu: g.index,
                    servers,
                    clients,
                    client_bytes,
                })
            })
            .collect()
    }

    /// The MPS server that holds GPU `gpu` (and its clients' memory there),
    /// when exactly one does.
    pub fn mps_server_of(&self, gpu: u32) -> Option<u32> {
        match self.mps().into_iter().find(|m| m.gpu == gpu)?.servers[..] {
            [one] => Some(one),
            _ => None,
        }
    }
}
