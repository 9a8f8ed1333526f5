//! The words of a framework role: `[vLLM worker]` after a holder,
//! `launcher 4100 (python3) [torchrun elastic agent]` for a group.

use crate::model::Role;

/// What `r` is called, for the operator.
pub fn role(r: Role) -> &'static str {
    match r {
        Role::ResourceTracker => "multiprocessing resource tracker",
        Role::DataLoaderWorker => "DataLoader worker",
        Role::SpawnChild => "multiprocessing spawn child",
        Role::VllmWorker => "vLLM worker",
        Role::VllmEngineCore => "vLLM engine core",
        Role::VllmApiServer => "vLLM API server",
        Role::SglangServer => "SGLang server",
        Role::SglangProcess => "SGLang process",
        Role::RayWorker => "Ray worker",
        Role::RayRaylet => "Ray raylet",
        Role::TorchrunAgent => "torchrun elastic agent",
        Role::DeepspeedLauncher => "DeepSpeed launcher",
        Role::AccelerateLauncher => "accelerate launcher",
        Role::MpiLauncher => "MPI launcher",
        Role::SlurmStep => "Slurm step launcher",
        Role::JupyterKernel => "Jupyter kernel",
    }
}
