//! The verdict, defined once: is a GPU free, busy, or is that unknown?
//! `wait`, `kill`, `why`, `watch`, `status` and the metrics all read it
//! from here (SPEC.md, "Exit codes").
//!
//! - **busy**: a live, unprotected process holds the GPU's node or memory;
//!   NVML lists a process on it (a zombie, or a PID of another namespace);
//!   or its memory is used above the idle baseline with nobody to account
//!   for it while gpufree saw everything (a leak in the driver).
//! - **unknown**: what gpufree could not see could change the answer: no
//!   NVML or a GPU whose memory NVML could not report (lost, hung), a
//!   process whose read failed or timed out, or memory above the baseline
//!   that NVML attributes to no visible process while some processes could
//!   not be read (not root, hidepid, an unlisted process list) or the
//!   KFD's VRAM could not be placed on a GPU; an entry of the device
//!   directory named as one of its nodes that is not a GPU node (its
//!   holders are matched by nothing); and for a MIG device, holders of
//!   capability nodes that nothing places (any of them may be on it).
//! - **free**: neither. Processes gpufree may not read are named as caveats
//!   even then: NVML accounts for all the memory, so they cannot change it.

use crate::model::{Gpu, Process, Snapshot, Unplaced, UnreadableReason, Verdict, VerdictState};
use crate::units::mib;

/// Unaccounted memory up to this much, with no holder, counts as the GPU's
/// idle baseline (driver reservations), not as a leak.
pub const IDLE_SLACK_BYTES: u64 = 512 << 20;

/// What "free" means for a command.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Policy {
    /// `wait --max-used SIZE`: free means at most this much used, whoever
    /// holds it.
    pub max_used: Option<u64>,
    /// `--holders-only`: the user accepts a verdict from the device-node
    /// holders alone where NVML cannot report memory.
    pub holders_only: bool,
}

/// How many PIDs a sentence names before "and N more".
const NAMED: usize = 6;

fn pid_list(pids: &[String]) -> String {
    if pids.len() <= NAMED {
        pids.join(", ")
    } else {
        format!(
            "{} and {} more",
            pids[..NAMED].join(", "),
            pids.len() - NAMED
        )
    }
}

fn label(p: &Process) -> String {
    format!("PID {} ({})", p.pid, p.comm)
}

/// The verdict for one GPU of `s`.
pub fn gpu(s: &Snapshot, g: &Gpu, policy: &Policy) -> Verdict {
    let memory = memory_unknown(s, g);
    if let Some(max) = policy.max_used {
        return within(g, max, memory);
    }
    let mut busy = holding(s, g);
    busy.extend(listed(s, g));
    let mut unknown = Vec::new();
    let mut caveats = Vec::new();
    if let Some(driver) = holders_only_driver(g) {
        caveats.push(format!(
            "{driver} publishes no used memory: free means that no process holds the GPU"
        ));
    }
    match &memory {
        Some(why) if policy.holders_only => {
            // The user accepts the holders as the answer; what could not be
            // read for lack of permission stays a caveat, named below.
            caveats.push(format!("memory not checked (--holders-only): {why}"));
        }
        Some(why) => unknown.push(why.clone()),
        None => match unexplained(s, g) {
            Some((VerdictState::Busy, why)) => busy.push(why),
            Some((_, why)) => unknown.push(why),
            None => {}
        },
    }
    unknown.extend(failed(s));
    unknown.extend(refused(s, g));
    if g.mig_only {
        // A holder of a capability nothing places may be on this device.
        let unplaced = s
            .unavailable
            .iter()
            .filter(|u| u.unplaced == Some(Unplaced::MigCaps));
        unknown
            .extend(unplaced.map(|u| format!("{}: {}; any of them may be on it", u.what, u.why)));
    }
    let accounted = unknown.is_empty() && memory.is_none();
    caveats.extend(unread(s, accounted));
    finish(busy, unknown, caveats)
}

/// `1 process`, `N processes`.
fn processes(n: usize) -> String {
    if n == 1 {
        "1 process".to_string()
    } else {
        format!("{n} processes")
    }
}

/// `wait --max-used`: busy above it, unknown where the memory cannot be
/// read, whoever holds it.
fn within(g: &Gpu, max: u64, memory: Option<String>) -> Verdict {
    let mut busy = Vec::new();
    let mut unknown = Vec::new();
    match memory {
        Some(why) => unknown.push(why),
        None if g.memory.used_bytes > max => busy.push(format!(
            "{} used, more than the {} allowed",
            mib(g.memory.used_bytes),
            mib(max)
        )),
        None => {}
    }
    finish(busy, unknown, Vec::new())
}

/// Why `g` is busy for its holders: the live, unprotected ones; and a
/// driver daemon or display server only for GPU memory beyond the idle
/// slack (an MPS server's clients, a desktop's), not for its nodes.
fn holding(s: &Snapshot, g: &Gpu) -> Vec<String> {
    let mut busy = Vec::new();
    let holders: Vec<String> = s
        .processes
        .iter()
        .filter(|p| p.is_live() && !p.protected_for_all() && p.touches_gpu(g.index))
        .map(label)
        .collect();
    if !holders.is_empty() {
        busy.push(format!(
            "{} {} it: {}",
            processes(holders.len()),
            if holders.len() == 1 { "holds" } else { "hold" },
            pid_list(&holders)
        ));
    }
    for p in s
        .processes
        .iter()
        .filter(|p| p.is_live() && p.protected_for_all())
    {
        let used = crate::model::saturating_sum(
            p.gpu_memory
                .iter()
                .filter(|m| m.gpu == g.index)
                .filter_map(|m| m.used_bytes),
        );
        if used > IDLE_SLACK_BYTES {
            busy.push(format!(
                "driver daemon or display server {} holds {} on it",
                label(p),
                mib(used)
            ));
        }
    }
    busy
}

/// Why `g` is busy for what NVML lists on it: a zombie not yet reaped, a
/// PID of another namespace, a PID that now names another process.
fn listed(s: &Snapshot, g: &Gpu) -> Vec<String> {
    let v = &s.visibility;
    let mut busy = Vec::new();
    for n in &g.nvml_processes {
        let bytes = n.used_bytes.map_or("memory".into(), mib);
        match s.processes.iter().find(|p| p.pid == n.pid) {
            Some(p) if !p.is_live() && !p.protected_for_all() => busy.push(format!(
                "zombie PID {} is still listed by NVML with {bytes}: its parent PID {} must reap it",
                p.pid, p.ppid
            )),
            Some(_) => {}
            None if v.nvml_pids_not_visible.contains(&n.pid) => busy.push(format!(
                "NVML lists PID {} with {bytes}, which this /proc does not have (another PID namespace)",
                n.pid
            )),
            None if v.nvml_pids_stale.contains(&n.pid) => busy.push(format!(
                "NVML lists PID {} with {bytes}, but that PID here names a process that holds no GPU device node: the memory is kept by a process that had this PID before, or one that inherited its GPU files",
                n.pid
            )),
            None => {}
        }
    }
    busy
}

/// Memory above the idle slack that no process accounts for: busy (the
/// driver's) when the view is complete, else unknown, with what is missing.
fn unexplained(s: &Snapshot, g: &Gpu) -> Option<(VerdictState, String)> {
    let unexplained = unexplained_bytes(s, g);
    if unexplained <= IDLE_SLACK_BYTES {
        return None;
    }
    let blind = blind_spots(s, g.index);
    Some(if blind.is_empty() {
        (
            VerdictState::Busy,
            format!(
                "{} used that no process holds: the driver has not released it",
                mib(unexplained)
            ),
        )
    } else {
        (
            VerdictState::Unknown,
            format!(
                "{} used that NVML attributes to no process gpufree can see, and {}",
                mib(unexplained),
                blind.join("; ")
            ),
        )
    })
}

/// Processes whose read failed or timed out: what they hold is unknown.
fn failed(s: &Snapshot) -> Option<String> {
    let failed: Vec<String> = s
        .visibility
        .unreadable
        .iter()
        .filter(|u| u.reason != UnreadableReason::Permission)
        .map(|u| format!("PID {}: {}", u.pid, u.why))
        .collect();
    (!failed.is_empty()).then(|| {
        format!(
            "{} could not be read, so what {} hold is unknown: {}",
            processes(failed.len()),
            if failed.len() == 1 {
                "it may"
            } else {
                "they may"
            },
            pid_list(&failed)
        )
    })
}

/// Entries of the device directory named as this GPU's nodes that are
/// not GPU nodes (a link to /dev/null, another driver's device): a holder
/// of the real node is matched by nothing, so it may be unseen, and a
/// GPU without holders is not free but unknown. This holds under
/// `--holders-only` too: the holders themselves are what may be unseen.
fn refused(s: &Snapshot, g: &Gpu) -> Vec<String> {
    s.visibility
        .refused_nodes
        .iter()
        .filter(|r| r.gpus.contains(&g.index))
        .map(|r| {
            format!(
                "{} is not a GPU node ({}): holders of the real node may be unseen",
                r.path, r.why
            )
        })
        .collect()
}

/// What gpufree may not read (permission, hidepid), as caveats; whether
/// NVML accounts for the memory all the same is said with them.
fn unread(s: &Snapshot, accounted: bool) -> Vec<String> {
    let v = &s.visibility;
    let accounted = if accounted {
        "; NVML accounts for the memory"
    } else {
        ""
    };
    let denied: Vec<String> = v
        .unreadable
        .iter()
        .filter(|u| u.reason == UnreadableReason::Permission)
        .map(|u| u.pid.to_string())
        .collect();
    let mut caveats = Vec::new();
    if !denied.is_empty() {
        caveats.push(format!(
            "{} could not be read (permission denied: PID {}){}{accounted}",
            processes(denied.len()),
            pid_list(&denied),
            if v.root {
                ""
            } else {
                "; run as root to read them"
            }
        ));
    }
    if v.hidepid && !v.root {
        caveats.push(format!(
            "/proc is mounted with hidepid: other users' processes are hidden{accounted}"
        ));
    }
    caveats
}

/// The verdict from its reasons: busy if any says busy, else unknown if any
/// says unknown, else free.
pub fn finish(busy: Vec<String>, unknown: Vec<String>, caveats: Vec<String>) -> Verdict {
    let state = if !busy.is_empty() {
        VerdictState::Busy
    } else if !unknown.is_empty() {
        VerdictState::Unknown
    } else {
        VerdictState::Free
    };
    Verdict {
        state,
        reasons: busy.into_iter().chain(unknown).collect(),
        caveats,
    }
}

/// The verdict over every GPU of `s`: busy if one is busy, else unknown if
/// one is unknown, else free. Reasons name their GPU.
pub fn overall(s: &Snapshot, policy: &Policy) -> Verdict {
    let each: Vec<(String, Verdict)> = s
        .gpus
        .iter()
        .map(|g| (gpu_name(s, g), gpu(s, g, policy)))
        .collect();
    combine(&each)
}

/// `GPU 0`, or `GPU 0:1` for a GPU narrowed to its MIG device 1: how the
/// reasons name it.
fn gpu_name(s: &Snapshot, g: &Gpu) -> String {
    format!("GPU {}", s.selection_of(&[g.index]).names().join(", "))
}

fn combine(each: &[(String, Verdict)]) -> Verdict {
    if each.is_empty() {
        return Verdict {
            state: VerdictState::Unknown,
            reasons: vec!["no GPU to look at".into()],
            caveats: Vec::new(),
        };
    }
    let mut all = Verdict {
        state: VerdictState::Free,
        ..Verdict::default()
    };
    for (name, v) in each {
        all.state = match (all.state, v.state) {
            (VerdictState::Busy, _) | (_, VerdictState::Busy) => VerdictState::Busy,
            (VerdictState::Unknown, _) | (_, VerdictState::Unknown) => VerdictState::Unknown,
            _ => VerdictState::Free,
        };
        all.reasons
            .extend(v.reasons.iter().map(|r| format!("{name}: {r}")));
        for c in &v.caveats {
            if !all.caveats.contains(c) {
                all.caveats.push(c.clone());
            }
        }
    }
    all
}

/// Sets every GPU's verdict and the snapshot's, with the default policy.
pub fn apply(s: &mut Snapshot) {
    let policy = Policy::default();
    let each: Vec<(String, Verdict)> = s
        .gpus
        .iter()
        .map(|g| (gpu_name(s, g), gpu(s, g, &policy)))
        .collect();
    s.verdict = combine(&each);
    let mig = mig_verdicts(s, &policy);
    for (g, (_, v)) in s.gpus.iter_mut().zip(each) {
        g.verdict = v;
        for m in &mut g.mig_devices {
            if let Some((.., v)) = mig.iter().find(|(i, j, _)| *i == g.index && *j == m.index) {
                m.verdict = v.clone();
            }
        }
    }
}

mod memory;
mod mig;

use mig::mig_verdicts;

use memory::memory_unknown;
pub use memory::{blind_spots, holders_only_driver, unexplained_bytes};

#[cfg(test)]
mod tests;
