//! What a process is in the common frameworks' process trees (vLLM,
//! SGLang, Ray, torchrun, DeepSpeed, accelerate, MPI, Slurm, multiprocessing,
//! DataLoader, Jupyter), from its title and command line.

use crate::model::{IdleShape, Process, Role};

/// Well-known helper processes, named for the operator.
pub(super) fn role(p: &Process) -> Option<Role> {
    shape(&p.comm, &p.cmdline_joined())
}

/// What a process is in the common frameworks' process trees, by its comm
/// (what a title sets) and command line.
pub(super) fn shape(comm: &str, cmd: &str) -> Option<Role> {
    let has = |s: &str| cmd.contains(s);
    let starts = |s: &str| comm.starts_with(s) || cmd.starts_with(s);
    Some(if has("multiprocessing.resource_tracker") {
        Role::ResourceTracker
    } else if has("torch/utils/data") || comm.starts_with("pt_data_worker") {
        Role::DataLoaderWorker
    } else if has("multiprocessing.forkserver") || has("from multiprocessing.spawn") {
        Role::SpawnChild
    } else if starts("VLLM::Worker") {
        Role::VllmWorker
    } else if starts("VLLM::EngineCor") {
        // (comm keeps 15 bytes: "VLLM::EngineCore" loses its last letter)
        Role::VllmEngineCore
    } else if has("vllm.entrypoints") || cmd.starts_with("vllm serve") || has("bin/vllm serve") {
        Role::VllmApiServer
    } else if has("sglang.launch_server") {
        Role::SglangServer
    } else if starts("sglang::") {
        Role::SglangProcess
    } else if starts("ray::") {
        Role::RayWorker
    } else if comm == "raylet" || has("/raylet") {
        Role::RayRaylet
    } else if comm == "torchrun" || has("torch.distributed.run") || has("bin/torchrun") {
        Role::TorchrunAgent
    } else if comm == "deepspeed" || has("deepspeed.launcher") {
        Role::DeepspeedLauncher
    } else if has("accelerate launch") || has("accelerate/commands/launch") {
        Role::AccelerateLauncher
    } else if matches!(
        comm,
        "mpirun" | "mpiexec" | "orterun" | "prterun" | "hydra_pmi_proxy"
    ) {
        Role::MpiLauncher
    } else if comm == "srun" {
        Role::SlurmStep
    } else if has("ipykernel_launcher") || has("ipykernel") {
        Role::JupyterKernel
    } else {
        return None;
    })
}

/// What an idle holder is, where a framework's shape says: a Jupyter
/// kernel, a Ray worker the raylet keeps idle, a notebook server.
pub(super) fn idle_shape(p: &Process) -> Option<IdleShape> {
    let cmd = p.cmdline_joined();
    let has = |s: &str| cmd.contains(s);
    Some(if has("ipykernel_launcher") || has("ipykernel") {
        IdleShape::JupyterKernel
    } else if p.comm.starts_with("ray::IDLE") || cmd.starts_with("ray::IDLE") {
        IdleShape::RayIdleWorker
    } else if ["jupyter-lab", "jupyter-notebook", "jupyter-server"].contains(&p.comm.as_str())
        || has("jupyter-lab")
        || has("jupyter-notebook")
        || has("jupyter_server")
        || has("notebook.notebookapp")
        || has("jupyter lab")
        || has("jupyter notebook")
    {
        IdleShape::NotebookServer
    } else {
        return None;
    })
}
