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
use std::collections::HashSet;

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
    /// The PIDs NVML lists as MPS clients of this GPU, visible here or
    /// not, in PID order.
    pub clients: Vec<u32>,
    /// The clients' memory, as NVML reports it.
    pub client_bytes: u64,
}

impl MpsGpu {
    /// The MPS server that holds this GPU (and its clients' memory),
    /// when exactly one does.
    pub fn server(&self) -> Option<u32> {
        match self.servers[..] {
            [one] => Some(one),
            _ => None,
        }
    }
}

impl Snapshot {
    /// What `p` is to MPS, if anything. Only a protected process (its exe
    /// one only root could have put there) is taken for a daemon. (Once
    /// per holder: [`super::Lookup::mps_role`].)
    pub fn mps_role(&self, p: &Process) -> Option<MpsRole> {
        let client = self
            .gpus
            .iter()
            .flat_map(|g| &g.nvml_processes)
            .any(|n| n.pid == p.pid && n.kind == super::NvmlProcessKind::Mps);
        role(p, client)
    }

    /// The PIDs NVML lists as MPS clients, of any GPU.
    pub fn mps_clients(&self) -> HashSet<u32> {
        self.gpus
            .iter()
            .flat_map(|g| &g.nvml_processes)
            .filter(|n| n.kind == super::NvmlProcessKind::Mps)
            .map(|n| n.pid)
            .collect()
    }

    /// The MPS control daemons among the holders.
    pub fn mps_controls(&self) -> Vec<u32> {
        let clients = self.mps_clients();
        self.processes
            .iter()
            .filter(|p| role(p, clients.contains(&p.pid)) == Some(MpsRole::Control))
            .map(|p| p.pid)
            .collect()
    }

    /// Each GPU with an MPS server or MPS clients, in index order.
    pub fn mps(&self) -> Vec<MpsGpu> {
        let clients = self.mps_clients();
        // The servers once, then each GPU's among them.
        let servers: Vec<&Process> = self
            .processes
            .iter()
            .filter(|p| role(p, clients.contains(&p.pid)) == Some(MpsRole::Server))
            .collect();
        self.gpus
            .iter()
            .filter_map(|g| {
                let servers: Vec<u32> = servers
                    .iter()
                    .filter(|p| p.touches_gpu(g.index))
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
        self.mps().into_iter().find(|m| m.gpu == gpu)?.server()
    }
}

/// What `p` is to MPS, given whether NVML lists it as an MPS client. Only
/// a protected process (its exe one only root could have put there) is
/// taken for a daemon.
pub(super) fn role(p: &Process, client: bool) -> Option<MpsRole> {
    if p.protected {
        match p.program() {
            "nvidia-cuda-mps-control" => return Some(MpsRole::Control),
            "nvidia-cuda-mps-server" => return Some(MpsRole::Server),
            _ => {}
        }
    }
    client.then_some(MpsRole::Client)
}
