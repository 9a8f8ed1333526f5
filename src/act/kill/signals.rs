//! One round of signals by identity (pin, hold still, check, signal,
//! grace, SIGKILL), and the holders a rescan adds to the next round.

use super::{Deadlines, Options};
use crate::act::identity::{wait_exited, KillError, Target};
use crate::act::kill::plan::{plan, reason, refusal, Safety, Selectors};
use crate::act::quiesce::quiesce;
use crate::model::{
    Change, Changed, Handled, Left, OwnerKind, PlanEntry, Process, Report, Skipped, Snapshot, With,
};
use crate::proc::scan::Holding;
use crate::snapshot::Collector;
use rustix::process::Signal;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// One round: pin, stop, check, signal, continue, grace, KILL. Returns the
/// targets signalled.
pub(super) fn round(
    c: &Collector,
    snap: &Snapshot,
    entries: &[PlanEntry],
    sig: Signal,
    opts: &Options,
    deadlines: &Deadlines,
    report: &mut Report,
) -> Vec<Target> {
    let pinned = pin(c, snap, entries, report);
    // Quiescence: frozen or stopped, a target can neither exec nor fork
    // while it is checked and signalled.
    let held = quiesce(&pinned, deadlines.act);
    report.frozen_cgroups.extend(held.frozen());
    crate::test_hooks::while_held();
    // Check every target, then signal every one still holding, then
    // release them together: none acts on its signal before all have it.
    let checked = still_holding(c, pinned, deadlines.act, report);
    let signalled = send(checked, sig, report);
    if sig != Signal::KILL {
        // A stopped process acts on its signal only once continued (and one
        // stopped before gpufree came would never act on it).
        for t in &signalled {
            let _ = t.signal(Signal::CONT);
        }
    }
    // Thaw what was frozen, continue what was stopped and not signalled.
    held.release();
    grace(&signalled, sig, opts, deadlines, report);
    signalled
}

/// Pins each entry through the snapshot's directory fd; what is gone, was
/// reused or cannot be pinned goes to the report instead.
fn pin(c: &Collector, snap: &Snapshot, entries: &[PlanEntry], report: &mut Report) -> Vec<Target> {
    let mut pinned = Vec::new();
    for e in entries {
        match Target::pin(&snap.pins, e.pid, e.start_time_ticks) {
            Ok(t) => pinned.push(t),
            Err(KillError::Gone) => {
                if reused(c, e) {
                    report.identity_changed.push(e.pid);
                }
            }
            Err(KillError::IdentityChanged { .. }) => report.identity_changed.push(e.pid),
            Err(err) => report.skipped.push(Skipped {
                pid: e.pid,
                why: Left::Said {
                    text: err.to_string(),
                },
                refused: true,
            }),
        }
    }
    pinned
}

/// The pinned targets that still hold a GPU node, checked again through
/// their pinned fds (each read under `until`); one that let go is reported
/// as changed, one that could not be checked as unchecked.
fn still_holding(
    c: &Collector,
    pinned: Vec<Target>,
    until: Instant,
    report: &mut Report,
) -> Vec<Target> {
    let dirs: Vec<(u32, std::os::fd::OwnedFd)> = pinned
        .iter()
        .filter_map(|t| t.dir().try_clone().ok().map(|d| (t.pid, d)))
        .collect();
    let holding: BTreeMap<u32, Holding> = c.holding(dirs, Some(until)).into_iter().collect();
    let mut checked = Vec::new();
    for t in pinned {
        match recheck(t.pid, holding.get(&t.pid)) {
            Ok(()) => checked.push(t),
            Err(None) => {}
            Err(Some(changed)) => {
                if matches!(holding.get(&t.pid), Some(Holding::No)) {
                    report.changed.push(changed);
                } else {
                    report.unchecked.push(changed);
                }
            }
        }
    }
    checked
}

/// What a second look at a target's holding means: Ok to signal it, Err
/// None when it is gone, else how it changed or why it was not checked.
fn recheck(pid: u32, holding: Option<&Holding>) -> Result<(), Option<Changed>> {
    let changed = |why: Change| Err(Some(Changed { pid, why }));
    match holding {
        Some(Holding::Yes) => Ok(()),
        Some(Holding::Gone) => Err(None),
        // NVML's word alone never suffices: a process gpufree can read
        // that holds no GPU node holds no GPU memory (a listing of its
        // PID is another process's, one that had the PID before).
        Some(Holding::No) => changed(Change::LetGo),
        Some(Holding::Unknown(why)) => changed(Change::Unchecked(Some(why.to_string()))),
        None => changed(Change::Unchecked(None)),
    }
}

/// Sends `sig` to each checked target; returns those it reached (or that
/// were gone already), reporting the rest as refused.
fn send(checked: Vec<Target>, sig: Signal, report: &mut Report) -> Vec<Target> {
    let mut signalled = Vec::new();
    for t in checked {
        match t.signal(sig) {
            Ok(()) | Err(KillError::Gone) => {
                report.targets.push(t.pid);
                signalled.push(t);
            }
            Err(err) => {
                report.skipped.push(Skipped {
                    pid: t.pid,
                    why: Left::Said {
                        text: err.to_string(),
                    },
                    refused: true,
                });
            }
        }
    }
    signalled
}

/// The grace period after `sig` (none after KILL), then SIGKILL for the
/// survivors and a short wait for it to land.
fn grace(
    signalled: &[Target],
    sig: Signal,
    opts: &Options,
    deadlines: &Deadlines,
    report: &mut Report,
) {
    let refs: Vec<&Target> = signalled.iter().collect();
    let running = if sig == Signal::KILL {
        (0..refs.len()).collect()
    } else {
        wait_exited(&refs, opts.grace.min(deadlines.left()))
    };
    if running.is_empty() {
        return;
    }
    for &i in &running {
        if refs[i].signal(Signal::KILL).is_ok() {
            report.killed_hard.push(refs[i].pid);
        }
    }
    // SIGKILL takes a moment to land; the verdict's reserve pays for it.
    let _ = wait_exited(
        &running.iter().map(|&i| refs[i]).collect::<Vec<_>>(),
        Duration::from_secs(5).min(deadlines.end.saturating_duration_since(Instant::now())),
    );
}

/// Whether the PID of a target that is gone now names another process.
pub(super) fn reused(c: &Collector, e: &PlanEntry) -> bool {
    c.start_time_of(e.pid)
        .is_some_and(|start| start != e.start_time_ticks)
}

/// The holders of `snap` that join the next round: they match the
/// selectors, or they were forked by a signalled target (its child, or an
/// orphan of its process group, session and cgroup) or started by its
/// unit, container, pod or job, after the first signal.
pub(super) fn joiners(
    snap: &Snapshot,
    sel: &Selectors,
    safety: &Safety,
    handled: &BTreeSet<(u32, u64)>,
    signalled: &[Process],
    first_tick: u64,
) -> Vec<PlanEntry> {
    let mut out: BTreeMap<u32, PlanEntry> = BTreeMap::new();
    for e in plan(snap, sel, safety).targets {
        if !handled.contains(&(e.pid, e.start_time_ticks)) {
            out.insert(e.pid, e);
        }
    }
    for p in &snap.processes {
        if handled.contains(&(p.pid, p.start_time_ticks))
            || out.contains_key(&p.pid)
            || p.start_time_ticks < first_tick
            || refusal(p, safety).is_some()
        {
            continue;
        }
        let why = signalled.iter().find_map(|t| {
            if p.ppid == t.pid && p.start_time_ticks >= t.start_time_ticks {
                Some(With::ForkedBy { target: t.pid })
            } else if p.orphaned
                && p.uid == t.uid
                && p.pgid == t.pgid
                && p.sid == t.sid
                && p.cgroup == t.cgroup
            {
                Some(With::OrphanOf { target: t.pid })
            } else if (sel.gpus.is_some() || sel.unit.is_some())
                && matches!(
                    t.owner.kind,
                    OwnerKind::SystemdUnit
                        | OwnerKind::Container
                        | OwnerKind::K8sPod
                        | OwnerKind::SlurmJob
                )
                && p.owner == t.owner
            {
                Some(With::StartedAgainBy {
                    owner: t.owner.name.clone(),
                })
            } else {
                None
            }
        });
        if let Some(with) = why {
            out.insert(
                p.pid,
                PlanEntry {
                    pid: p.pid,
                    start_time_ticks: p.start_time_ticks,
                    why: crate::model::Target {
                        with: Some(with),
                        ..reason(p)
                    },
                },
            );
        }
    }
    out.into_values().collect()
}

/// The signals one round sent: its number, its first signal, and the
/// targets that needed SIGKILL after the grace period.
pub(super) struct Sent {
    pub(super) round: u32,
    pub(super) first: Signal,
    pub(super) hard: Vec<u32>,
}

/// The round's entries as its snapshot saw them, with the signals each
/// was sent (none for those not signalled: gone, changed, refused).
pub(super) fn as_handled(
    snap: &Snapshot,
    entries: &[PlanEntry],
    done: &[Target],
    sent: &Sent,
) -> Vec<Handled> {
    entries
        .iter()
        .map(|e| {
            let mut signals = Vec::new();
            if done.iter().any(|t| t.pid == e.pid) {
                signals.push(signal_name(sent.first).to_string());
                if sent.first != Signal::KILL && sent.hard.contains(&e.pid) {
                    signals.push(signal_name(Signal::KILL).to_string());
                }
            }
            let p = snap
                .processes
                .iter()
                .find(|p| p.pid == e.pid && p.start_time_ticks == e.start_time_ticks);
            Handled {
                pid: e.pid,
                start_time_ticks: e.start_time_ticks,
                why: e.why.clone(),
                round: sent.round,
                comm: p.map(|p| p.comm.clone()).unwrap_or_default(),
                cmdline: p.map(|p| p.cmdline.clone()).unwrap_or_default(),
                exe: p.and_then(|p| p.exe.clone()),
                uid: p.map(|p| p.uid),
                user: p.map(|p| p.user.clone()).unwrap_or_default(),
                owner: p.map(|p| p.owner.clone()).unwrap_or_default(),
                signals,
            }
        })
        .collect()
}

/// A signal's name without `SIG` (`TERM`, `KILL`), as `--signal` takes it.
pub fn signal_name(sig: Signal) -> &'static str {
    match sig {
        Signal::TERM => "TERM",
        Signal::INT => "INT",
        Signal::HUP => "HUP",
        Signal::QUIT => "QUIT",
        Signal::USR1 => "USR1",
        Signal::USR2 => "USR2",
        Signal::KILL => "KILL",
        Signal::CONT => "CONT",
        Signal::STOP => "STOP",
        _ => "other",
    }
}
