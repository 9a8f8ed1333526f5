//! `gpufree check`: one verdict for monitors, from a judged snapshot and
//! what the last check remembered (since when memory has been
//! unaccounted) and what its window saw of the holders in D. Pure: the
//! state file is the caller's to read and write, the window the caller's
//! to sample (`snapshot::windows`).

use super::verdict::{blind_spots, unexplained_bytes};
use crate::model::{
    CheckMemory, CheckOutcome, Condition, Gpu, Level, Owner, OwnerKind, Pending, Problem, Process,
    Snapshot, Unavailable, Vendor, VerdictState, Why, Window,
};
use std::collections::BTreeMap;

/// What counts, and from when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckPolicy {
    /// Unaccounted memory below this is no leak (`--leak-min`).
    pub leak_min: u64,
    /// A leak counts once it has lasted this long, in seconds (`--grace`).
    pub grace_secs: u64,
    /// Conditions left out (`--ignore`).
    pub ignore: Vec<Condition>,
    /// An idle holder counts once it holds this much of a GPU
    /// (`--idle-min`).
    pub idle_min: u64,
}

impl Default for CheckPolicy {
    fn default() -> Self {
        CheckPolicy {
            leak_min: 1 << 30,
            grace_secs: 300,
            ignore: Vec::new(),
            idle_min: 1 << 30,
        }
    }
}

/// The check of `s` at `now` (unix seconds), with what the window saw of
/// its holders in D (`windows`, by PID), and what to remember for the next
/// one.
pub fn check(
    s: &Snapshot,
    policy: &CheckPolicy,
    memory: &CheckMemory,
    windows: &BTreeMap<u32, Window>,
    now: u64,
) -> (CheckOutcome, CheckMemory) {
    let mut problems = driver::reset_required(s);
    problems.extend(driver::xids(s));
    problems.extend(nvml(s));
    problems.extend(stuck::stuck(s, windows));
    problems.extend(zombies(s));
    problems.extend(s.gpus.iter().filter_map(|g| leftover(s, Some(g))));
    problems.extend(s.gpus.iter().filter_map(|g| daemons(s, g)));
    problems.extend(leftover(s, None));
    problems.extend(pods(s));
    problems.extend(idle::idle(s, policy.idle_min));
    let (leaks, pending, remembered) = leaks(s, policy, memory, now);
    problems.extend(leaks);
    problems.extend(unknown(s));
    problems.retain(|p| !policy.ignore.contains(&p.condition));
    // Worst first; among equals, in the order of `Condition`.
    problems.sort_by_key(|p| (std::cmp::Reverse(p.level.rank()), p.condition));
    let level = problems.iter().fold(Level::Ok, |l, p| l.max(p.level));
    (
        CheckOutcome {
            level,
            problems,
            pending,
        },
        remembered,
    )
}

fn problem(condition: Condition, level: Level, gpu: Option<u32>) -> Problem {
    Problem {
        condition,
        level,
        gpu,
        processes: Vec::new(),
        bytes: 0,
        seconds: None,
        why: None,
        causes: Vec::new(),
        finding: None,
        xid: None,
    }
}

/// The Kubernetes findings (a gone pod still holding a GPU, a pod's
/// process on another pod's GPU, memory on a GPU allocated to no pod):
/// critical where memory is held, else a warning.
fn pods(s: &Snapshot) -> Vec<Problem> {
    use crate::model::FindingKind as K;
    s.findings
        .iter()
        .filter(|f| {
            matches!(
                f.kind(),
                K::GonePod | K::OtherPodsGpu | K::UnallocatedMemory
            )
        })
        .map(|f| {
            let level = if f.bytes > 0 {
                Level::Critical
            } else {
                Level::Warning
            };
            let mut p = problem(Condition::Pod, level, f.gpus.first().copied());
            p.bytes = f.bytes;
            p.processes = s
                .processes
                .iter()
                .filter(|q| f.pids.contains(&q.pid))
                .map(|q| (q.pid, q.comm.clone()))
                .collect();
            p.finding = Some(f.kind());
            p
        })
        .collect()
}

fn named(ps: &[&Process]) -> Vec<(u32, String)> {
    ps.iter().map(|p| (p.pid, p.comm.clone())).collect()
}

/// NVML missing or failing, and NVIDIA GPUs whose memory cannot be read.
fn nvml(s: &Snapshot) -> Vec<Problem> {
    let mut out = Vec::new();
    if s.misses_nvml() {
        let mut p = problem(Condition::Nvml, Level::Critical, None);
        p.why = Some(
            s.nvml
                .error
                .clone()
                .unwrap_or_else(|| "NVML unavailable".into()),
        );
        out.push(p);
    }
    for g in s
        .gpus
        .iter()
        .filter(|g| g.vendor == Vendor::Nvidia && !g.memory.known)
    {
        if s.misses_nvml() {
            break;
        }
        let mut p = problem(Condition::Nvml, Level::Critical, Some(g.index));
        let calls: Vec<Unavailable> = s
            .unavailable
            .iter()
            .filter(|u| u.gpu == Some(g.index))
            .cloned()
            .collect();
        if calls.is_empty() {
            p.why = Some("memory not reported".into());
        } else {
            p.causes = vec![Why::Calls { calls }.into()];
        }
        out.push(p);
    }
    out
}

/// Zombie holders: a warning.
fn zombies(s: &Snapshot) -> Vec<Problem> {
    let ps: Vec<&Process> = s.processes.iter().filter(|p| p.state == "Z").collect();
    if ps.is_empty() {
        return Vec::new();
    }
    let mut p = problem(Condition::Zombie, Level::Warning, None);
    p.bytes = crate::model::saturating_sum(ps.iter().map(|p| p.memory_bytes()));
    p.processes = named(&ps);
    vec![p]
}

/// Live holders that belong to no job, unit, container or pod, of GPU `g`
/// (or, for `None`, those holding shared nodes only): critical when they
/// hold its memory. A user's process that only claims a pod, job or
/// container (named inside the user's delegated cgroup) belongs to none.
fn leftover(s: &Snapshot, g: Option<&Gpu>) -> Option<Problem> {
    let loose = |p: &&Process| p.is_live() && !p.protected_for_all() && unowned(&p.owner);
    let ps: Vec<&Process> = s
        .processes
        .iter()
        .filter(loose)
        .filter(|p| match g {
            Some(g) => p.touches_gpu(g.index),
            None => p.gpu_memory.is_empty() && p.devices.iter().all(|d| d.gpu.is_none()),
        })
        .collect();
    if ps.is_empty() {
        return None;
    }
    let index = g.map(|g| g.index);
    let bytes: u64 = crate::model::saturating_sum(ps.iter().flat_map(|p| {
        p.gpu_memory
            .iter()
            .filter(move |m| Some(m.gpu) == index)
            .filter_map(|m| m.used_bytes)
    }));
    let level = if bytes > 0 {
        Level::Critical
    } else {
        Level::Warning
    };
    let mut p = problem(Condition::Leftover, level, index);
    p.bytes = bytes;
    p.processes = named(&ps);
    Some(p)
}

/// Protected daemons holding more of GPU `g`'s memory than the idle slack
/// (critical): a real one holds a few MiB; whatever holds more under a
/// daemon's name is no longer the daemon a kill must spare (its memory
/// already makes the GPU busy; here it makes the node unhealthy).
fn daemons(s: &Snapshot, g: &Gpu) -> Option<Problem> {
    let on_g = |p: &Process| {
        crate::model::saturating_sum(
            p.gpu_memory
                .iter()
                .filter(|m| m.gpu == g.index)
                .filter_map(|m| m.used_bytes),
        )
    };
    let ps: Vec<&Process> = s
        .processes
        .iter()
        .filter(|p| p.is_live() && p.protected_for_all() && on_g(p) > super::IDLE_SLACK_BYTES)
        .collect();
    if ps.is_empty() {
        return None;
    }
    let mut p = problem(Condition::Daemon, Level::Critical, Some(g.index));
    p.bytes = crate::model::saturating_sum(ps.iter().map(|p| on_g(p)));
    p.processes = named(&ps);
    Some(p)
}

/// Whether `owner` is no job, unit, container or pod: none, a session or a
/// user manager's apps, or a user's unit whose cgroup claims one (a user
/// names `user@UID.service/app.slice/docker-<id>.scope` as they please).
fn unowned(owner: &Owner) -> bool {
    owner.kind.is_unowned()
        || (owner.kind == OwnerKind::SystemdUnit
            && owner.claims.is_some()
            && owner.system_unit().is_none())
}

/// Memory no process accounts for, above the threshold (where gpufree saw
/// everything that could account for it): a problem once it has lasted
/// the grace period, pending before; and what to remember.
fn leaks(
    s: &Snapshot,
    policy: &CheckPolicy,
    memory: &CheckMemory,
    now: u64,
) -> (Vec<Problem>, Vec<Pending>, CheckMemory) {
    let mut problems = Vec::new();
    let mut pending = Vec::new();
    // What this check does not look at (a GPU outside its `--gpu`) is
    // remembered as it was: a narrower check never restarts another GPU's
    // grace period.
    let looked: Vec<String> = s.gpus.iter().map(state_key).collect();
    let mut remembered = CheckMemory::default();
    remembered.unaccounted_since.extend(
        memory
            .unaccounted_since
            .iter()
            .filter(|(k, _)| !looked.contains(k))
            .map(|(k, v)| (k.clone(), *v)),
    );
    for g in &s.gpus {
        let bytes = unexplained_bytes(s, g);
        if !g.memory.known || bytes < policy.leak_min || !blind_spots(s, g.index).is_empty() {
            continue;
        }
        let key = state_key(g);
        let since = memory
            .unaccounted_since
            .get(&key)
            .copied()
            .unwrap_or(now)
            .min(now);
        remembered.unaccounted_since.insert(key, since);
        let seconds = now - since;
        if seconds >= policy.grace_secs {
            let mut p = problem(Condition::Leak, Level::Critical, Some(g.index));
            p.bytes = bytes;
            p.seconds = Some(seconds);
            problems.push(p);
        } else {
            pending.push(Pending {
                gpu: g.index,
                bytes,
                seconds,
            });
        }
    }
    (problems, pending, remembered)
}

/// The key of GPU `g` in the check's state: its UUID, else its index.
fn state_key(g: &Gpu) -> String {
    if g.uuid.is_empty() {
        format!("index:{}", g.index)
    } else {
        g.uuid.clone()
    }
}

/// GPUs whose verdict is unknown; and busy ones whose memory is partly
/// unaccounted while gpufree could not see everything (what it could not
/// see may be worse than what it found: a warning never hides it).
fn unknown(s: &Snapshot) -> Vec<Problem> {
    s.gpus
        .iter()
        .filter_map(|g| {
            let blind = blind_spots(s, g.index);
            let causes = match g.verdict.state {
                VerdictState::Unknown => g.verdict.reasons.clone(),
                VerdictState::Busy
                    if !blind.is_empty() && unexplained_bytes(s, g) > super::IDLE_SLACK_BYTES =>
                {
                    vec![Why::PartlyUnaccounted {
                        bytes: unexplained_bytes(s, g),
                        blind,
                    }
                    .into()]
                }
                _ => return None,
            };
            let mut p = problem(Condition::Unknown, Level::Unknown, Some(g.index));
            p.causes = causes;
            Some(p)
        })
        .collect()
}

mod driver;
mod idle;
mod stuck;

#[cfg(test)]
use stuck::stuck_one;

#[cfg(test)]
mod tests;
