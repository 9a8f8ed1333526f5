//! What a process is in a common framework's process tree, as a value:
//! the diagnosis compares roles, `present::words` names them.

use serde::Serialize;

/// A well-known process of a framework (vLLM, SGLang, Ray, torchrun,
/// DeepSpeed, accelerate, MPI, Slurm, multiprocessing, DataLoader,
/// Jupyter), recognised by its title and command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// `multiprocessing.resource_tracker`.
    ResourceTracker,
    /// A PyTorch DataLoader worker.
    DataLoaderWorker,
    /// A child started by multiprocessing's spawn or forkserver.
    SpawnChild,
    /// A vLLM worker (`VLLM::Worker…`).
    VllmWorker,
    /// vLLM's engine core (`VLLM::EngineCore`).
    VllmEngineCore,
    /// vLLM's API server (`vllm serve`, `vllm.entrypoints`).
    VllmApiServer,
    /// SGLang's server (`sglang.launch_server`).
    SglangServer,
    /// Another SGLang process (`sglang::…`).
    SglangProcess,
    /// A Ray worker (`ray::…`, busy or idle).
    RayWorker,
    /// Ray's per-node daemon, the raylet.
    RayRaylet,
    /// torchrun's elastic agent, which restarts its ranks.
    TorchrunAgent,
    /// DeepSpeed's launcher.
    DeepspeedLauncher,
    /// Hugging Face accelerate's launcher.
    AccelerateLauncher,
    /// An MPI launcher (`mpirun`, `mpiexec`, `orterun`, `prterun`, Hydra).
    MpiLauncher,
    /// Slurm's step launcher, `srun`.
    SlurmStep,
    /// A Jupyter (IPython) kernel.
    JupyterKernel,
}
