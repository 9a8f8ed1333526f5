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

use crate::model::{
    needs_now, Caveat, Failed, Gpu, GpuName, MemoryUnknown, Named, Reason, Snapshot, Unplaced,
    UnreadableReason, Verdict, VerdictState, Why,
};
use std::collections::{HashMap, HashSet};

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
    if holders_only_driver(g).is_some() {
        caveats.push(Caveat::HoldersOnly {
            driver: g.driver.clone(),
        });
    }
    if g.memory.shared_bytes > 0 {
        caveats.push(Caveat::DrmShared {
            bytes: g.memory.shared_bytes,
        });
    }
    match &memory {
        Some(why) if policy.holders_only => {
            // The user accepts the holders as the answer; what could not be
            // read for lack of permission stays a caveat, named below.
            caveats.push(Caveat::MemoryNotChecked {
                memory: why.clone(),
            });
        }
        Some(why) => unknown.push(Why::MemoryUnknown {
            memory: why.clone(),
        }),
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
        unknown.extend(unplaced.map(|u| Why::UnplacedMigCaps {
            unavailable: u.clone(),
        }));
    }
    let accounted = unknown.is_empty() && memory.is_none();
    caveats.extend(unread(s, accounted));
    // A GPU the driver says needs a reset is never free; where what
    // could not be read already makes it unknown (a lost GPU), it stays so.
    if unknown.is_empty() {
        busy.extend(driver_needs(g));
    }
    finish(busy, unknown, caveats)
}

/// `wait --max-used`: busy above it, unknown where the memory cannot be
/// read, whoever holds it.
fn within(g: &Gpu, max: u64, memory: Option<MemoryUnknown>) -> Verdict {
    let mut busy = Vec::new();
    let mut unknown = Vec::new();
    match memory {
        Some(memory) => unknown.push(Why::MemoryUnknown { memory }),
        None if g.memory.used_bytes > max => busy.push(Why::OverMaxUsed {
            used: g.memory.used_bytes,
            max,
        }),
        None => {}
    }
    if unknown.is_empty() {
        busy.extend(driver_needs(g));
    }
    finish(busy, unknown, Vec::new())
}

/// A GPU the driver says, now, needs a reset or a reboot is never free,
/// whatever holds it or however little memory it uses.
fn driver_needs(g: &Gpu) -> Option<Why> {
    let need = g.driver_evidence.as_ref().and_then(needs_now)?;
    Some(Why::DriverNeeds { need })
}

/// Why `g` is busy for its holders: the live, unprotected ones; and a
/// driver daemon or display server only for GPU memory beyond the idle
/// slack (an MPS server's clients, a desktop's), not for its nodes.
fn holding(s: &Snapshot, g: &Gpu) -> Vec<Why> {
    let mut busy = Vec::new();
    let holders: Vec<Named> = s
        .processes
        .iter()
        .filter(|p| p.is_live() && !p.protected_for_all() && p.touches_gpu(g.index))
        .map(Named::of)
        .collect();
    if !holders.is_empty() {
        busy.push(Why::Holders { holders });
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
            busy.push(Why::Daemon {
                holder: Named::of(p),
                bytes: used,
            });
        }
    }
    busy
}

/// Why `g` is busy for what NVML lists on it: a zombie not yet reaped, a
/// PID of another namespace, a PID that now names another process.
fn listed(s: &Snapshot, g: &Gpu) -> Vec<Why> {
    let v = &s.visibility;
    let mut busy = Vec::new();
    if g.nvml_processes.is_empty() {
        return busy;
    }
    // Each PID's first holder, as a search from the front finds it.
    let mut holders = HashMap::with_capacity(s.processes.len());
    for p in &s.processes {
        holders.entry(p.pid).or_insert(p);
    }
    let not_visible: HashSet<u32> = v.nvml_pids_not_visible.iter().copied().collect();
    let stale: HashSet<u32> = v.nvml_pids_stale.iter().copied().collect();
    for n in &g.nvml_processes {
        let (pid, bytes) = (n.pid, n.used_bytes);
        match holders.get(&n.pid) {
            Some(p) if !p.is_live() && !p.protected_for_all() => busy.push(Why::Zombie {
                pid,
                ppid: p.ppid,
                bytes,
            }),
            Some(_) => {}
            None if not_visible.contains(&pid) => {
                busy.push(Why::OtherNamespace { pid, bytes });
            }
            None if stale.contains(&pid) => busy.push(Why::StalePid { pid, bytes }),
            None => {}
        }
    }
    busy
}

/// Memory above the idle slack that no process accounts for: busy (the
/// driver's) when the view is complete, else unknown, with what is missing.
fn unexplained(s: &Snapshot, g: &Gpu) -> Option<(VerdictState, Why)> {
    let bytes = unexplained_bytes(s, g);
    if bytes <= IDLE_SLACK_BYTES {
        return None;
    }
    let blind = blind_spots(s, g.index);
    Some(if blind.is_empty() {
        let reported = g
            .driver_evidence
            .as_ref()
            .is_some_and(|e| !crate::model::signs(e).is_empty());
        (VerdictState::Busy, Why::DriverHeld { bytes, reported })
    } else {
        (VerdictState::Unknown, Why::Unaccounted { bytes, blind })
    })
}

/// Processes whose read failed or timed out: what they hold is unknown.
fn failed(s: &Snapshot) -> Option<Why> {
    let processes: Vec<Failed> = s
        .visibility
        .unreadable
        .iter()
        .filter(|u| u.reason != UnreadableReason::Permission)
        .map(|u| Failed {
            pid: u.pid,
            error: u.why.clone(),
        })
        .collect();
    (!processes.is_empty()).then_some(Why::Unreadable { processes })
}

/// Entries of the device directory named as this GPU's nodes that are
/// not GPU nodes (a link to /dev/null, another driver's device): a holder
/// of the real node is matched by nothing, so it may be unseen, and a
/// GPU without holders is not free but unknown. This holds under
/// `--holders-only` too: the holders themselves are what may be unseen.
fn refused(s: &Snapshot, g: &Gpu) -> Vec<Why> {
    s.visibility
        .refused_nodes
        .iter()
        .filter(|r| r.gpus.contains(&g.index))
        .map(|r| Why::RefusedNode {
            path: r.path.clone(),
            what: r.why.clone(),
        })
        .collect()
}

/// What gpufree may not read (permission, hidepid), as caveats; whether
/// NVML accounts for the memory all the same is said with them.
fn unread(s: &Snapshot, accounted: bool) -> Vec<Caveat> {
    let v = &s.visibility;
    let pids: Vec<u32> = v
        .unreadable
        .iter()
        .filter(|u| u.reason == UnreadableReason::Permission)
        .map(|u| u.pid)
        .collect();
    let mut caveats = Vec::new();
    if !pids.is_empty() {
        caveats.push(Caveat::PermissionDenied {
            pids,
            root: v.root,
            accounted,
        });
    }
    if v.hidepid && !v.root {
        caveats.push(Caveat::Hidepid { accounted });
    }
    caveats
}

/// The verdict from its reasons: busy if any says busy, else unknown if any
/// says unknown, else free.
pub fn finish<R: Into<Reason>>(busy: Vec<R>, unknown: Vec<R>, caveats: Vec<Caveat>) -> Verdict {
    let state = if !busy.is_empty() {
        VerdictState::Busy
    } else if !unknown.is_empty() {
        VerdictState::Unknown
    } else {
        VerdictState::Free
    };
    Verdict {
        state,
        reasons: busy.into_iter().chain(unknown).map(Into::into).collect(),
        caveats,
    }
}

/// The verdict over every GPU of `s`: busy if one is busy, else unknown if
/// one is unknown, else free. Reasons name their GPU.
pub fn overall(s: &Snapshot, policy: &Policy) -> Verdict {
    let each: Vec<(GpuName, Verdict)> = s
        .gpus
        .iter()
        .map(|g| (gpu_name(s, g), gpu(s, g, policy)))
        .collect();
    combine(&each)
}

/// GPU 0, or GPU 0:1 for a GPU narrowed to its MIG device 1: how the
/// reasons name it.
fn gpu_name(s: &Snapshot, g: &Gpu) -> GpuName {
    GpuName {
        index: g.index,
        mig: s
            .selection_of(&[g.index])
            .mig
            .get(&g.index)
            .map(|m| m.iter().copied().collect())
            .unwrap_or_default(),
    }
}

fn combine(each: &[(GpuName, Verdict)]) -> Verdict {
    if each.is_empty() {
        return Verdict {
            state: VerdictState::Unknown,
            reasons: vec![Why::NoGpu.into()],
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
            .extend(v.reasons.iter().map(|r| r.clone().on(name.clone())));
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
    let each: Vec<(GpuName, Verdict)> = s
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
