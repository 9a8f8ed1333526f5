//! The words of findings about what could not be seen or accounted
//! for: a partial view, PIDs NVML lists elsewhere, unaccounted memory
//! with its reset plan, and free GPUs.

use crate::model::{
    Basis, Cause, Evidence, Finding, Next, UnreadableReason, Unseen, VerdictState, Who,
};
use crate::present::next::{count, gpus_phrase, next_line, who};
use crate::units::{gib, mib};

/// PIDs NVML lists that this /proc does not have, or whose process here
/// holds no device node.
pub(super) fn listed_elsewhere(f: &Finding) -> String {
    let pids = count(f.pids.len(), "PID", "PIDs");
    let bytes = gib(f.bytes);
    if matches!(f.evidence, Evidence::OutsideNamespace) {
        format!(
            "NVML lists {pids} with {bytes} that this /proc does not have: processes of another PID namespace (the host, or a container on an older driver); run gpufree on the host, or in a container given the host's PID namespace ({HOST_PID}), to see and free them"
        )
    } else {
        format!(
            "NVML lists {pids} with {bytes} whose process here holds no GPU device node: not that process's memory (it was never signalled for it), but kept by a process that had the PID before (reused since) or one that inherited its GPU files"
        )
    }
}

/// What a process gpufree may not read keeps from it, and what lets it
/// read them.
pub(super) const UNREADABLE: &str = "reading their fd tables and maps (/proc/PID/fd, /proc/PID/maps) needs root, or CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH: run gpufree with sudo";

/// How a container is given the host's PID namespace, so that its /proc
/// has the processes NVML lists.
pub(super) const HOST_PID: &str =
    "docker run --pid=host, podman run --pid=host, Kubernetes hostPID: true";

/// What could not be seen, and what that leaves of the verdict; `as_root`:
/// gpufree is not root, and root would see more.
pub(super) fn partial_view(verdict: VerdictState, unseen: &[Unseen], as_root: bool) -> String {
    let why: Vec<String> = unseen.iter().map(|u| unseen_words(u, as_root)).collect();
    let why = why.join("; ");
    match verdict {
        VerdictState::Unknown => format!(
            "partial view: {why}; gpufree cannot call these GPUs free or speak of a driver leak"
        ),
        VerdictState::Free => format!("not everything could be read: {why}; NVML accounts for all used memory, so this does not change the verdict"),
        VerdictState::Busy => format!("not everything could be read: {why}"),
    }
}

fn unseen_words(u: &Unseen, as_root: bool) -> String {
    match u {
        Unseen::Unreadable { first, total }
            if as_root
                && first
                    .iter()
                    .all(|u| u.reason == UnreadableReason::Permission) =>
        {
            let each: Vec<String> = first.iter().map(|u| u.pid.to_string()).collect();
            format!(
                "{} could not be read (permission denied: PID {}{}): {UNREADABLE}",
                count(*total, "process", "processes"),
                each.join(", "),
                if *total > 6 { ", ..." } else { "" }
            )
        }
        Unseen::Unreadable { first, total } => {
            let each: Vec<String> = first
                .iter()
                .map(|u| format!("PID {}: {}", u.pid, u.why))
                .collect();
            format!(
                "{} could not be read ({}{})",
                count(*total, "process", "processes"),
                each.join("; "),
                if *total > 6 { "; ..." } else { "" }
            )
        }
        Unseen::Hidepid => {
            "/proc is mounted with hidepid: other users' processes are invisible".into()
        }
        Unseen::Nvml(error) => format!("NVML is unavailable ({})", error.as_deref().unwrap_or("?")),
        Unseen::RefusedNode { path, why } => {
            format!("{path} is not a GPU node ({why}), so its holders are not seen")
        }
        Unseen::Call(u) => {
            let gpu = u.gpu.map(|g| format!("GPU {g} ")).unwrap_or_default();
            format!(
                "{gpu}{}: {}",
                super::unavailable::what(u),
                super::unavailable::why(u)
            )
        }
    }
}

/// Memory on `gpu` that no visible process accounts for.
pub(super) fn unaccounted(gpu: u32, bytes: u64, cause: &Cause) -> (String, Vec<String>) {
    let head = format!("GPU {gpu}: {} used", mib(bytes));
    let nobody = "that no visible process accounts for";
    match cause {
        Cause::Monitors { openers, reset, basis } => {
            let mut details: Vec<String> = openers.iter().map(who).collect();
            details.push(super::fault::basis(gpu, basis));
            details.extend(reset_plan(gpu, reset));
            (format!(
                "{head} {nobody}; {} its device nodes open without mapping them, as NVML monitors do (a CUDA context maps them): the driver likely holds the memory ({})",
                count(openers.len(), "process holds", "processes hold"),
                said(basis)
            ), details)
        }
        Cause::Holders(holders) => (
            format!(
                "{head} {nobody}; {} its device nodes and may own the contexts",
                count(holders.len(), "process holds", "processes hold")
            ),
            holders.iter().map(who).collect(),
        ),
        Cause::NestedNamespace => (format!("{head} {nobody}; gpufree runs in a nested PID namespace (a container without the host's PID namespace): new drivers hide other namespaces' processes but count their memory; run gpufree on the host, or give its container the host's PID namespace ({HOST_PID})"), Vec::new()),
        Cause::Partial(blind) => (
            format!("{head} {nobody}; the view is partial: {}", super::verdict::blind_spots(blind)),
            Vec::new(),
        ),
        Cause::DriverHeld { unreadable, total, blind, reset, basis } => {
            let mut plan: Vec<String> = unreadable
                .iter()
                .map(|u| {
                    let comm = u.comm.as_deref().map(|c| format!(" ({c})")).unwrap_or_default();
                    format!("caveat: PID {}{comm} could not be read ({}), even as root; it may hold the memory", u.pid, u.why)
                })
                .collect();
            if *total > 6 {
                plan.push(format!("caveat: and {} more processes could not be read", total - 6));
            }
            if plan.is_empty() {
                plan.push(format!("caveat: {}", super::verdict::blind_spots(blind)));
            }
            plan.push(super::fault::basis(gpu, basis));
            plan.extend(reset_plan(gpu, reset));
            (format!("{head} with no process listed by NVML and no readable holder of any GPU device node: memory the driver holds, unless a process even root cannot read holds it ({})", said(basis)), plan)
        }
        Cause::DrmDriver { driver } => (
            format!(
                "{head} {nobody}: every DRM client and every process the KFD lists were read, so the {} driver, the kernel (display buffers, firmware) or another PID namespace's processes hold it; gpufree prints no reset for this vendor",
                driver.as_deref().unwrap_or("GPU's")
            ),
            Vec::new(),
        ),
        Cause::DriverLeak { reset, basis } => {
            let mut plan = vec![super::fault::basis(gpu, basis)];
            plan.extend(reset_plan(gpu, reset));
            (format!("{head} with no process listed by NVML and no holder of any GPU device node: memory the driver has not released ({})", said(basis)), plan)
        }
    }
}

/// Whether the driver's memory is what it reported or what gpufree
/// infers: said in the message, the evidence in the details.
fn said(basis: &Basis) -> &'static str {
    match basis {
        Basis::Reported(_) => "reported: the driver says this GPU needs a reset",
        Basis::Inferred => "inferred, not reported by the driver",
    }
}

/// What must stop before `nvidia-smi --gpu-reset -i GPU` can work, in
/// order, then the reset itself: printed for the operator, never run.
pub(super) fn reset_plan(gpu: u32, blockers: &[(Who, Next)]) -> Vec<String> {
    let mut plan = vec![
        "printed for the operator, never run by gpufree; a reset needs root, no process using any GPU of the board, and on NVLink systems all GPUs of the fabric reset together".to_string(),
    ];
    if blockers.is_empty() {
        plan.push("blockers: none holds a GPU device node now".into());
    }
    for (i, (w, how)) in blockers.iter().enumerate() {
        plan.push(format!("{}. stop {}: `{}`", i + 1, who(w), next_line(how)));
    }
    plan.push(format!(
        "{}. reset: `nvidia-smi --gpu-reset -i {gpu}`",
        blockers.len() + 1
    ));
    plan
}

/// The GPUs are free, with the verdict's caveats.
pub(super) fn free(gpus: &[u32], caveats: &[crate::model::Caveat]) -> String {
    if caveats.is_empty() {
        format!(
            "{} free: no process holds memory or a device node, used memory at the idle baseline",
            gpus_phrase(gpus)
        )
    } else if !caveats.iter().any(|c| {
        matches!(
            c,
            crate::model::Caveat::PermissionDenied { .. } | crate::model::Caveat::Hidepid { .. }
        )
    }) {
        // Every process was read (a DRM driver that publishes no use, a
        // check of holders only): no NVML words, no unread processes.
        format!(
            "{} free: no process holds memory or a device node ({})",
            gpus_phrase(gpus),
            super::verdict::caveats(caveats).join("; ")
        )
    } else {
        format!("{} free: NVML shows no process with memory and the memory at the idle baseline; processes gpufree could not read may still hold device nodes ({})", gpus_phrase(gpus), super::verdict::caveats(caveats).join("; "))
    }
}
