//! Idle holders (issue 29): live holders with GPU memory that the driver,
//! asked for every utilisation sample in the window, shows no SM,
//! memory, encoder or decoder use; named with their framework shape, and
//! a kill of exactly them (never the busy holders beside them). Where the
//! driver could not say (NOT_SUPPORTED, a failure), no holder is idle,
//! and that is said once.

use super::shapes::idle_shape;
use super::who;
use crate::model::{
    saturating_sum, Activity, Evidence, Finding, IdleHolder, IdleHolders, IdleUnknown, Lookup,
    Next, Process, Reading, Severity,
};

/// The holders a finding about idleness may name, with what they did
/// (`model::judged_activity`).
fn candidates<'a>(look: &'a Lookup<'a>) -> impl Iterator<Item = (&'a Process, Activity)> {
    look.snapshot()
        .processes
        .iter()
        .filter_map(move |p| look.judged_activity(p).map(|a| (p, a)))
}

/// The `idle-holders` finding: one for all idle holders.
pub(super) fn idle(look: &Lookup<'_>, out: &mut Vec<Finding>) {
    let s = look.snapshot();
    let idle: Vec<&Process> = candidates(look)
        .filter(|(_, a)| *a == Activity::Idle)
        .map(|(p, _)| p)
        .collect();
    if idle.is_empty() {
        return;
    }
    let gpus = super::gpus_of_all(idle.iter().copied());
    let busy = candidates(look)
        .filter(|(p, a)| *a == Activity::Busy && p.gpu_memory.iter().any(|m| gpus.contains(&m.gpu)))
        .count();
    let holders: Vec<IdleHolder> = idle
        .iter()
        .map(|p| IdleHolder {
            who: who(p),
            shape: idle_shape(p),
            memory: p.gpu_memory.iter().map(|m| (m.gpu, m.used_bytes)).collect(),
            since_unix_ms: p.idle_since_unix_ms,
        })
        .collect();
    let bytes = saturating_sum(
        idle.iter()
            .flat_map(|p| p.gpu_memory.iter().filter_map(|m| m.used_bytes)),
    );
    let window_ms = s
        .gpus
        .iter()
        .filter(|g| gpus.contains(&g.index))
        .filter_map(|g| g.driver_evidence.as_ref()?.utilization_window)
        .map(|w| w.window_ms)
        .max()
        .unwrap_or(0);
    out.push(Finding {
        severity: Severity::Warning,
        pids: idle.iter().map(|p| p.pid).collect(),
        gpus,
        bytes,
        next: Next::Kill(idle.iter().map(|p| p.pid).collect()),
        evidence: Evidence::Idle(Box::new(IdleHolders {
            holders,
            busy,
            window_ms,
        })),
    });
}

/// The `idle-unknown` finding: the GPUs with live holders whose
/// utilisation the driver did not give, one finding per answer.
pub(super) fn unknown(look: &Lookup<'_>, out: &mut Vec<Finding>) {
    let s = look.snapshot();
    let mut by_answer: Vec<IdleUnknown> = Vec::new();
    for g in &s.gpus {
        let Some(e) = &g.driver_evidence else {
            continue;
        };
        let here = |p: &Process| p.gpu_memory.iter().any(|m| m.gpu == g.index);
        let reading = match &e.process_utilization {
            // Answered, yet a holder here is neither busy nor idle: the
            // driver kept no sample of it while the GPU ran (or said not
            // whether it ran), or it is an MPS client.
            Reading::Value(_) => {
                if !candidates(look).any(|(p, a)| a == Activity::Unknown && here(p)) {
                    continue;
                }
                Reading::Value(())
            }
            Reading::NotSupported => Reading::NotSupported,
            Reading::Failed(why) => Reading::Failed(why.clone()),
        };
        if !candidates(look).any(|(p, _)| here(p)) {
            continue;
        }
        match by_answer.iter_mut().find(|u| u.reading == reading) {
            Some(u) => u.gpus.push(g.index),
            None => by_answer.push(IdleUnknown {
                gpus: vec![g.index],
                reading,
            }),
        }
    }
    for u in by_answer {
        out.push(Finding {
            severity: Severity::Info,
            pids: Vec::new(),
            gpus: u.gpus.clone(),
            bytes: 0,
            next: Next::Nothing,
            evidence: Evidence::IdleUnknown(Box::new(u)),
        });
    }
}
