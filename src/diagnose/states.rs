//! Holders in states a kill treats apart: orphans, zombies (and zombie
//! leaders whose threads run), uninterruptible and stopped processes.

use super::{gpus_of, gpus_of_all, unprotected, who};
use crate::diagnose::groups::{Ctx, Group};
use crate::model::Orphan;
use crate::model::{Evidence, Finding, Lookup, Next, Process, Severity, Snapshot};

pub(super) fn orphans(ctx: &Ctx<'_>, out: &mut Vec<Finding>) {
    let s = ctx.s;
    // Orphans with memory outside a unit, container, pod or job are a
    // group of their own (live_holders).
    let grouped = |p: &Process| {
        p.memory_bytes() > 0 && !p.protected_for_all() && matches!(ctx.group(p), Group::Orphans(..))
    };
    // A protected daemon (nvidia-persistenced, MPS's control daemon)
    // detaches from its parent by design: not an orphan to free.
    let orphans: Vec<&Process> = s
        .processes
        .iter()
        .filter(|p| p.orphaned && p.is_live() && !p.protected_for_all() && !grouped(p))
        .collect();
    if orphans.is_empty() {
        return;
    }
    out.push(Finding {
        severity: Severity::Warning,
        pids: orphans.iter().map(|p| p.pid).collect(),
        gpus: gpus_of_all(orphans.iter().copied()),
        bytes: crate::model::saturating_sum(orphans.iter().map(|p| p.memory_bytes())),
        next: Next::Kill(unprotected(&orphans)),
        evidence: Evidence::Orphans(
            orphans
                .iter()
                .map(|p| Orphan {
                    who: who(p),
                    parent: p.ppid,
                    owner: p.owner.described(),
                })
                .collect(),
        ),
    });
}

pub(super) fn zombies(look: &Lookup<'_>, out: &mut Vec<Finding>) {
    for p in look.snapshot().processes.iter().filter(|p| p.state == "Z") {
        let listed = look.listed(p.pid);
        let (severity, next) = if p.threads > 1 {
            (Severity::Error, Next::Kill(vec![p.pid]))
        } else if listed {
            (Severity::Warning, Next::Reap(p.ppid))
        } else {
            (Severity::Info, Next::Reap(p.ppid))
        };
        out.push(Finding {
            severity,
            pids: vec![p.pid],
            gpus: gpus_of(p),
            bytes: p.memory_bytes(),
            next,
            evidence: Evidence::Zombie {
                who: who(p),
                parent: p.ppid,
                threads: p.threads,
                listed,
            },
        });
    }
}

pub(super) fn blocked(s: &Snapshot, out: &mut Vec<Finding>) {
    for p in s.processes.iter() {
        let wchan = p.wchan.clone();
        let (evidence, next) = match p.state.as_str() {
            "D" => (
                Evidence::Uninterruptible { who: who(p), wchan },
                Next::WaitKernel(s.selection_of(&gpus_of(p))),
            ),
            "T" | "t" => (
                Evidence::Stopped { who: who(p), wchan },
                Next::Kill(vec![p.pid]),
            ),
            _ => continue,
        };
        out.push(Finding {
            severity: Severity::Warning,
            pids: vec![p.pid],
            gpus: gpus_of(p),
            bytes: p.memory_bytes(),
            next,
            evidence,
        });
    }
}
