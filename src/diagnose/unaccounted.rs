//! What could not be seen, PIDs of other namespaces and stale listings,
//! and memory no visible process accounts for: the holders first, then
//! driver-held memory with its caveats and the reset plan.

use super::{verdict, who};
use crate::diagnose::daemons::stop_command;
use crate::diagnose::verdict::IDLE_SLACK_BYTES;
use crate::model::{Basis, Cause, Caveat, Selection, UnreadableReason, Unseen};
use crate::model::{Evidence, Finding, Next, Process, Severity, Snapshot, VerdictState, Who};

/// Reports what could not be seen: a warning when it leaves the verdict
/// open, a note when NVML accounts for the memory all the same; less what
/// the free verdict's own caveats (`said`) already say, so a caveat is
/// printed once.
pub(super) fn partial_view(
    s: &Snapshot,
    state: VerdictState,
    said: &[Caveat],
    out: &mut Vec<Finding>,
) {
    let permission_only = s
        .visibility
        .unreadable
        .iter()
        .all(|u| u.reason == UnreadableReason::Permission);
    let unseen: Vec<Unseen> = unseen(s)
        .into_iter()
        .filter(|u| match u {
            Unseen::Unreadable { .. } => {
                !(permission_only
                    && said
                        .iter()
                        .any(|c| matches!(c, Caveat::PermissionDenied { .. })))
            }
            Unseen::Hidepid => !said.iter().any(|c| matches!(c, Caveat::Hidepid { .. })),
            _ => true,
        })
        .collect();
    if unseen.is_empty() {
        return;
    }
    let v = &s.visibility;
    out.push(Finding {
        severity: if state == VerdictState::Unknown {
            Severity::Warning
        } else {
            Severity::Info
        },
        pids: v.unreadable_pids.iter().take(32).copied().collect(),
        gpus: Vec::new(),
        bytes: 0,
        next: if v.root {
            Next::SeeVisibility
        } else {
            Next::AsRoot
        },
        evidence: Evidence::PartialView {
            verdict: state,
            unseen,
        },
    });
}

/// What the snapshot could not see: unreadable processes (the first six
/// with why), hidepid, NVML, refused device nodes, failed calls.
fn unseen(s: &Snapshot) -> Vec<Unseen> {
    let v = &s.visibility;
    let mut why = Vec::new();
    if !v.unreadable.is_empty() {
        why.push(Unseen::Unreadable {
            first: v.unreadable.iter().take(6).cloned().collect(),
            total: v.unreadable.len(),
        });
    }
    if v.hidepid && !v.root {
        why.push(Unseen::Hidepid);
    }
    if s.misses_nvml() {
        why.push(Unseen::Nvml(s.nvml.error.as_ref().map(ToString::to_string)));
    }
    for r in &v.refused_nodes {
        why.push(Unseen::RefusedNode {
            path: r.path.clone(),
            why: r.why.clone(),
        });
    }
    for u in &s.unavailable {
        why.push(Unseen::Call(u.clone()));
    }
    why
}

/// The memory NVML lists for `pids`, and the GPUs it is on.
pub(super) fn listed_memory(s: &Snapshot, pids: &[u32]) -> (u64, Vec<u32>) {
    let mut bytes = 0;
    let mut gpus = Vec::new();
    let pids: std::collections::HashSet<u32> = pids.iter().copied().collect();
    for g in &s.gpus {
        for p in g.nvml_processes.iter().filter(|p| pids.contains(&p.pid)) {
            bytes = p.used_bytes.unwrap_or(0).saturating_add(bytes);
            gpus.push(g.index);
        }
    }
    gpus.sort_unstable();
    gpus.dedup();
    (bytes, gpus)
}

pub(super) fn outside_namespace(s: &Snapshot, out: &mut Vec<Finding>) {
    let hidden = &s.visibility.nvml_pids_not_visible;
    if hidden.is_empty() {
        return;
    }
    let (bytes, gpus) = listed_memory(s, hidden);
    out.push(Finding {
        severity: Severity::Error,
        pids: hidden.clone(),
        gpus,
        bytes,
        next: Next::OnHost,
        evidence: Evidence::OutsideNamespace,
    });
}

pub(super) fn stale_pids(s: &Snapshot, out: &mut Vec<Finding>) {
    let stale = &s.visibility.nvml_pids_stale;
    if stale.is_empty() {
        return;
    }
    let (bytes, gpus) = listed_memory(s, stale);
    out.push(Finding {
        severity: Severity::Error,
        pids: stale.clone(),
        gpus: gpus.clone(),
        bytes,
        next: Next::Why(s.selection_of(&gpus)),
        evidence: Evidence::StaleNvmlPid,
    });
}

/// What must stop before `nvidia-smi --gpu-reset -i GPU` can work, in the
/// order to stop it: every process holding a node of that GPU or a shared
/// NVIDIA node (work first, then monitors such as a gpufree `serve` or
/// `watch`, DCGM and its exporter, then the fabric manager, the
/// persistence daemon last), each with how to stop it. Printed for the
/// operator; gpufree never resets a GPU.
pub(super) fn reset_plan(s: &Snapshot, gpu: u32) -> Vec<(Who, Next)> {
    let rank = |p: &Process| -> u8 {
        match p.program() {
            "nvidia-persistenced" => 5,
            "nv-fabricmanager" => 4,
            "nv-hostengine" | "dcgm-exporter" => 3,
            "gpufree" => 2,
            _ if p.protected => 1,
            _ => 0,
        }
    };
    let mut blockers: Vec<&Process> = s
        .processes
        .iter()
        .filter(|p| {
            p.is_live() && (p.touches_gpu(gpu) || p.devices.iter().any(|d| d.gpu.is_none()))
        })
        .collect();
    blockers.sort_by_key(|p| (rank(p), p.pid));
    blockers
        .iter()
        .map(|p| {
            let how = if p.protected {
                stop_command(p)
            } else {
                Next::Kill(vec![p.pid])
            };
            (who(p), how)
        })
        .collect()
}

/// Memory no visible process accounts for, per GPU above the idle slack:
/// who may hold it, why gpufree cannot tell, or the driver's, with the
/// reset plan.
pub(super) fn unaccounted(s: &Snapshot, out: &mut Vec<Finding>) {
    for g in &s.gpus {
        let m = &g.memory;
        if !m.known || m.unaccounted_bytes <= IDLE_SLACK_BYTES {
            continue;
        }
        let unexplained = verdict::unexplained_bytes(s, g);
        if unexplained <= IDLE_SLACK_BYTES {
            continue;
        }
        let holders = possible_holders(s, g.index);
        let (severity, mut next, cause) = explain(s, g.index, &holders);
        if g.mig_mode == Some(true) && matches!(next, Next::Reset(_)) {
            // A reset takes every MIG instance of the GPU with it, other
            // tenants' included: never the next command for one; look at
            // the whole GPU first (the cause still says what a reset needs).
            next = Next::Why(Selection::whole(vec![g.index]));
        }
        out.push(Finding {
            severity,
            pids: holders.iter().map(|p| p.pid).collect(),
            gpus: vec![g.index],
            bytes: unexplained,
            next,
            evidence: Evidence::Unaccounted {
                gpu: g.index,
                cause,
            },
        });
    }
}

/// Whether the driver backs a reset of GPU `gpu` with evidence, or the
/// reset is inferred from memory nobody accounts for.
fn basis(s: &Snapshot, gpu: u32) -> Basis {
    let g = s.gpus.iter().find(|g| g.index == gpu);
    Basis::of(g.and_then(|g| g.driver_evidence.as_ref()))
}

/// Live processes that hold GPU `gpu`'s node or only shared nodes. A
/// driver daemon holds nodes, not contexts: it blocks a reset (the plan
/// names it) but explains no memory.
fn possible_holders(s: &Snapshot, gpu: u32) -> Vec<&Process> {
    s.processes
        .iter()
        .filter(|p| {
            p.is_live()
                && !p.protected_for_all()
                && (p.touches_gpu(gpu)
                    || (p.gpu_memory.is_empty() && p.devices.iter().all(|d| d.gpu.is_none())))
        })
        .collect()
}

/// The explanation that fits the memory on GPU `gpu`, most likely first:
/// holders that may own the contexts, a nested namespace, a partial view,
/// then the driver; with its severity and next command.
fn explain(s: &Snapshot, gpu: u32, holders: &[&Process]) -> (Severity, Next, Cause) {
    // A CUDA context maps the device; an NVML monitor (gpufree serve,
    // nvidia-smi -l, nvtop) only opens the nodes.
    let (mapping, openers): (Vec<&Process>, Vec<&Process>) = holders.iter().partition(|p| {
        p.devices
            .iter()
            .any(|d| d.via.contains(&crate::model::Via::Mmap))
    });
    let blind = verdict::blind_spots(s, gpu);
    let warn = |next, cause| (Severity::Warning, next, cause);
    let drm = s
        .gpus
        .iter()
        .find(|g| g.index == gpu)
        .filter(|g| g.vendor != crate::model::Vendor::Nvidia);
    if let Some(g) = drm {
        // Its holders' memory was read from their clients: what is left
        // is not theirs, unless some process could not be read.
        return if !blind.is_empty() {
            warn(Next::SeeVisibility, Cause::Partial(blind))
        } else {
            let driver = g.driver.clone();
            warn(
                Next::Why(s.selection_of(&[gpu])),
                Cause::DrmDriver { driver },
            )
        };
    }
    if !openers.is_empty() && mapping.is_empty() {
        let openers = openers.iter().map(|p| who(p)).collect();
        let (reset, basis) = (reset_plan(s, gpu), basis(s, gpu));
        let cause = Cause::Monitors {
            openers,
            reset,
            basis,
        };
        warn(Next::Reset(gpu), cause)
    } else if !holders.is_empty() {
        // They come first: they may own contexts NVML lists under no PID
        // gpufree can see.
        let targets = holders.iter().map(|p| p.pid).collect();
        warn(
            Next::Kill(targets),
            Cause::Holders(holders.iter().map(|p| who(p)).collect()),
        )
    } else if s.visibility.nested_pid_namespace {
        // gpufree runs in a container: the memory may be another
        // namespace's.
        warn(Next::OnHost, Cause::NestedNamespace)
    } else if !blind.is_empty() && !s.visibility.root {
        warn(Next::AsRoot, Cause::Partial(blind))
    } else if !blind.is_empty() {
        // Root, and still some process cannot be read (an outer
        // sandbox's init): the driver's memory is the likely answer, with
        // those processes named as what could prove it wrong.
        let unreadable = &s.visibility.unreadable;
        let cause = Cause::DriverHeld {
            unreadable: unreadable.iter().take(6).cloned().collect(),
            total: unreadable.len(),
            blind,
            reset: reset_plan(s, gpu),
            basis: basis(s, gpu),
        };
        warn(Next::Reset(gpu), cause)
    } else {
        let (reset, basis) = (reset_plan(s, gpu), basis(s, gpu));
        let cause = Cause::DriverLeak { reset, basis };
        (Severity::Error, Next::Reset(gpu), cause)
    }
}
