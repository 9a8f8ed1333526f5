//! The driver's own evidence as findings (issue 29): a GPU the driver
//! says needs a reset or a reboot (first, even while holders exist), an
//! application's fault with the process the kernel named, and, where
//! memory is held and the driver reported nothing, what was asked and
//! how it answered, so that "a reset is not the fix" is said only from
//! what was heard.

use super::unaccounted::reset_plan;
use super::{who, IDLE_SLACK_BYTES};
use crate::model::{
    signs, AppFault, DriverFault, Evidence, Fault, Finding, Gpu, Heard, LogHeard, Need, Next,
    Severity, Snapshot, Xid, XidReport,
};

/// A finding per GPU the driver says needs a reset or a reboot: for a
/// reset, what must stop first; for a reboot, the holders that will not
/// release it before, with no kill.
pub(super) fn faults(s: &Snapshot, out: &mut Vec<Finding>) {
    for g in &s.gpus {
        let signs = g.driver_evidence.as_ref().map(signs);
        let Some(signs) = signs.filter(|v| !v.is_empty()) else {
            continue;
        };
        let need = Need::of(&signs).unwrap_or(Need::Reset);
        let (next, blockers) = match need {
            Need::Reset => (Next::Reset(g.index), reset_plan(s, g.index)),
            Need::Reboot => (Next::Reboot, stranded(s, g.index)),
        };
        out.push(Finding {
            severity: Severity::Error,
            pids: blockers.iter().map(|(w, _)| w.pid).collect(),
            gpus: vec![g.index],
            bytes: g.memory.used_bytes,
            next,
            evidence: Evidence::DriverFault(Box::new(DriverFault {
                gpu: g.index,
                need,
                signs,
                blockers,
            })),
        });
    }
}

/// The live holders of GPU `gpu`: on a GPU only a reboot brings back,
/// none can release it, so none is told to stop.
fn stranded(s: &Snapshot, gpu: u32) -> Vec<(crate::model::Who, Next)> {
    s.processes
        .iter()
        .filter(|p| p.is_live() && p.touches_gpu(gpu))
        .map(|p| (who(p), Next::Nothing))
        .collect()
}

/// Each process the kernel named in an Xid the catalog puts on the
/// application (the latest report per process and Xid), and whether it
/// still holds the GPU.
pub(super) fn app_faults(s: &Snapshot, out: &mut Vec<Finding>) {
    for g in &s.gpus {
        let Some(e) = &g.driver_evidence else {
            continue;
        };
        let mut seen: Vec<(u32, u32)> = Vec::new();
        for x in e.xids.iter().rev() {
            let Some(pid) = x.pid else { continue };
            if Xid::lookup(x.xid).fault != Fault::Application || seen.contains(&(pid, x.xid)) {
                continue;
            }
            seen.push((pid, x.xid));
            out.push(app_fault(s, g, x, pid));
        }
    }
}

fn app_fault(s: &Snapshot, g: &Gpu, x: &XidReport, pid: u32) -> Finding {
    // Collection's own judgement of the PID (`pid_now`) where it made
    // one; the start times here otherwise.
    let reused = x.pid_now == Some(crate::model::XidPid::Reused);
    let p = s.processes.iter().find(|p| {
        p.pid == pid && p.is_live() && !reused && x.may_name(p.start_time_ticks, s.ticks_per_second)
    });
    let holds = p.is_some_and(|p| p.touches_gpu(g.index));
    let bytes = p.map_or(0, |p| {
        crate::model::saturating_sum(
            p.gpu_memory
                .iter()
                .filter(|m| m.gpu == g.index)
                .filter_map(|m| m.used_bytes),
        )
    });
    let next = match p {
        Some(p) if holds && !p.protected_for_all() => Next::Kill(vec![p.pid]),
        _ => Next::Nothing,
    };
    Finding {
        severity: if holds {
            Severity::Warning
        } else {
            Severity::Info
        },
        pids: p.map(|p| vec![p.pid]).unwrap_or_default(),
        gpus: vec![g.index],
        bytes,
        next,
        evidence: Evidence::AppFault(Box::new(AppFault {
            gpu: g.index,
            xid: x.clone(),
            who: p.map(who),
            holds,
            unread: p.is_none() && unread(s, pid),
        })),
    }
}

/// Whether a process of `pid` could not be read.
fn unread(s: &Snapshot, pid: u32) -> bool {
    let v = &s.visibility;
    v.unreadable_pids.contains(&pid) || v.unreadable.iter().any(|u| u.pid == pid)
}

/// Where memory is held and the driver reported no fault that needs a
/// reset, what was asked and how it answered: one finding per answer
/// (usually one for all such GPUs). Nothing is said where nothing was
/// asked (the kernel log not read, no NVML answer).
pub(super) fn heard(s: &Snapshot, out: &mut Vec<Finding>) {
    let log = LogHeard::of(s.kernel_log.as_ref());
    let mut by_answer: Vec<Heard> = Vec::new();
    for g in s.gpus.iter().filter(|g| held(g)) {
        let Some(e) = &g.driver_evidence else {
            continue;
        };
        if !signs(e).is_empty() {
            continue;
        }
        let recovery = e.recovery_action.clone();
        if log == LogHeard::NotRead && recovery.value().is_none() {
            continue;
        }
        match by_answer.iter_mut().find(|h| h.recovery == recovery) {
            Some(h) => h.gpus.push(g.index),
            None => by_answer.push(Heard {
                gpus: vec![g.index],
                log: log.clone(),
                recovery,
            }),
        }
    }
    for h in by_answer {
        out.push(Finding {
            severity: Severity::Info,
            pids: Vec::new(),
            gpus: h.gpus.clone(),
            bytes: 0,
            next: Next::Nothing,
            evidence: Evidence::Heard(Box::new(h)),
        });
    }
}

/// An NVIDIA GPU with memory used beyond the idle slack.
fn held(g: &Gpu) -> bool {
    g.memory.known && g.memory.used_bytes > IDLE_SLACK_BYTES
}

/// On a GPU only a reboot brings back, no process can release its
/// memory: a finding about such GPUs alone that says to kill, stop or
/// reset says to reboot instead.
pub(super) fn no_kill_on_lost(out: &mut [Finding]) {
    let lost: Vec<u32> = out
        .iter()
        .filter_map(|f| match &f.evidence {
            Evidence::DriverFault(d) if d.need == Need::Reboot => Some(d.gpu),
            _ => None,
        })
        .collect();
    if lost.is_empty() {
        return;
    }
    for f in out.iter_mut() {
        let only_lost = !f.gpus.is_empty() && f.gpus.iter().all(|g| lost.contains(g));
        let kills = matches!(
            f.next,
            Next::Kill(_)
                | Next::KillTree(_)
                | Next::KillUnit(_)
                | Next::KillMatch(_)
                | Next::KillProtected(_)
                | Next::StopUnit { .. }
                | Next::StopAgent { .. }
                | Next::ScaleDeployment { .. }
                | Next::Reset(_)
                | Next::WaitKernel(_)
        );
        if only_lost && kills {
            f.next = Next::Reboot;
        }
    }
}
