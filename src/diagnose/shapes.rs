//! What a process is in the common frameworks' process trees (vLLM,
//! SGLang, Ray, torchrun, DeepSpeed, accelerate, MPI, Slurm, multiprocessing,
//! DataLoader, Jupyter), from its title and command line.

use crate::model::Process;

/// Well-known helper processes, named for the operator.
pub(super) fn role(p: &Process) -> Option<&'static str> {
    shape(&p.comm, &p.cmdline_joined())
}

/// What a process is in the common frameworks' process trees, by its comm
/// (what a title sets) and command line.
pub(super) fn shape(comm: &str, cmd: &str) -> Option<&'static str> {
    let has = |s: &str| cmd.contains(s);
    let starts = |s: &str| comm.starts_with(s) || cmd.starts_with(s);
    Some(if has("multiprocessing.resource_tracker") {
        "multiprocessing resource tracker"
    } else if has("torch/utils/data") || comm.starts_with("pt_data_worker") {
        "DataLoader worker"
    } else if has("multiprocessing.forkserver") || has("from multiprocessing.spawn") {
        "multiprocessing spawn child"
    } else if starts("VLLM::Worker") {
        "vLLM worker"
    } else if starts("VLLM::EngineCor") {
        // (comm keeps 15 bytes: "VLLM::EngineCore" loses its last letter)
        "vLLM engine core"
    } else if has("vllm.entrypoints") || cmd.starts_with("vllm serve") || has("bin/vllm serve") {
        "vLLM API server"
    } else if has("sglang.launch_server") {
        "SGLang server"
    } else if starts("sglang::") {
        "SGLang process"
    } else if starts("ray::") {
        "Ray worker"
    } else if comm == "raylet" || has("/raylet") {
        "Ray raylet"
    } else if comm == "torchrun" || has("torch.distributed.run") || has("bin/torchrun") {
        "torchrun elastic agent"
    } else if comm == "deepspeed" || has("deepspeed.launcher") {
        "DeepSpeed launcher"
    } else if has("accelerate launch") || has("accelerate/commands/launch") {
        "accelerate launcher"
    } else if matches!(
        comm,
        "mpirun" | "mpiexec" | "orterun" | "prterun" | "hydra_pmi_proxy"
    ) {
        "MPI launcher"
    } else if comm == "srun" {
        "Slurm step launcher"
    } else if has("ipykernel_launcher") || has("ipykernel") {
        "Jupyter kernel"
    } else {
        return None;
    })
}
