//! The words of a verdict: each [`Reason`], [`Caveat`] and [`BlindSpot`]
//! as the sentence `why`, `status`, `wait`, `kill`, `check`, `watch` and
//! the JSON documents print (SPEC.md's `verdict.reasons`/`caveats`).

use super::unavailable::{failure, what, why as failed};
use crate::model::{
    mig_label, BlindSpot, Caveat, Failed, GpuName, Holds, MemoryUnknown, Named, Reason, Restart,
    Selection, Why,
};
use crate::units::mib;

/// How many PIDs a sentence names before "and N more".
const NAMED: usize = 6;

/// `a, b, c`, or the first six and how many more.
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

/// `1 process`, `N processes`.
fn processes(n: usize) -> String {
    if n == 1 {
        "1 process".to_string()
    } else {
        format!("{n} processes")
    }
}

fn label(p: &Named) -> String {
    format!("PID {} ({})", p.pid, p.comm)
}

fn pids(pids: &[u32]) -> String {
    pid_list(&pids.iter().map(u32::to_string).collect::<Vec<_>>())
}

/// `GPU 0`, `GPU 0:1, 0:2`.
pub fn gpu_name(g: &GpuName) -> String {
    if g.mig.is_empty() {
        format!("GPU {}", g.index)
    } else {
        let names: Vec<String> = g.mig.iter().map(|&m| mig_label(g.index, m)).collect();
        format!("GPU {}", names.join(", "))
    }
}

/// One reason in words, its GPU first where it names one.
pub fn reason(r: &Reason) -> String {
    match &r.gpu {
        Some(g) => format!("{}: {}", gpu_name(g), why(&r.why)),
        None => why(&r.why),
    }
}

/// Reasons in words, one each.
pub fn reasons(rs: &[Reason]) -> Vec<String> {
    rs.iter().map(reason).collect()
}

/// Reasons in words, joined by `; ` (one line).
pub fn reasons_line(rs: &[Reason]) -> String {
    reasons(rs).join("; ")
}

/// Caveats in words, one each.
pub fn caveats(cs: &[Caveat]) -> Vec<String> {
    cs.iter().map(caveat).collect()
}

/// The bytes NVML lists for a PID: a size, or just `memory`.
fn listed(bytes: Option<u64>) -> String {
    bytes.map_or("memory".into(), mib)
}

/// Memory no process accounts for while part of the view is missing, in
/// NVML's words, or DRM's for a GPU its DRM clients and the KFD tell.
fn unaccounted(bytes: u64, blind: &[BlindSpot]) -> String {
    let drm = |b: &BlindSpot| matches!(b, BlindSpot::KfdVram { .. } | BlindSpot::DrmMemory { .. });
    let nvml = |b: &BlindSpot| matches!(b, BlindSpot::ProcessList { .. });
    let whose = if blind.iter().any(drm) && !blind.iter().any(nvml) {
        "no DRM client or KFD process gpufree read accounts for"
    } else {
        "NVML attributes to no process gpufree can see"
    };
    format!(
        "{} used that {whose}, and {}",
        mib(bytes),
        blind_spots(blind)
    )
}

/// One reason's sentence, without its GPU.
pub fn why(w: &Why) -> String {
    match w {
        Why::Holders { holders: h } => holders(h),
        Why::Daemon { holder, bytes } => format!(
            "driver daemon or display server {} holds {} on it",
            label(holder),
            mib(*bytes)
        ),
        Why::Zombie { .. } | Why::OtherNamespace { .. } | Why::StalePid { .. } => listed_pid(w),
        Why::DriverHeld { bytes, reported } => format!(
            "{} used that no process holds: {}",
            mib(*bytes),
            if *reported {
                "the driver has not released it, and reports a fault on this GPU"
            } else {
                "the driver's, inferred (not reported by the driver)"
            }
        ),
        Why::Unaccounted { bytes, blind } => unaccounted(*bytes, blind),
        Why::DriverNeeds { need } => super::fault::driver_needs(*need).into(),
        Why::Unreadable { processes: failed } => unreadable(failed),
        Why::RefusedNode { path, what } => format!(
            "{path} is not a GPU node ({what}): holders of the real node may be unseen"
        ),
        Why::UnplacedMigCaps { unavailable: u } => {
            format!("{}: {}; any of them may be on it", what(u), failed(u))
        }
        Why::Calls { calls } => calls
            .iter()
            .map(|u| format!("{}: {}", what(u), failed(u)))
            .collect::<Vec<_>>()
            .join("; "),
        Why::MemoryUnknown { memory } => memory_unknown(memory),
        Why::OverMaxUsed { used, max } => format!(
            "{} used, more than the {} allowed",
            mib(*used),
            mib(*max)
        ),
        Why::NoGpu => "no GPU to look at".into(),
        Why::PartlyUnaccounted { bytes, blind } => {
            format!("{} unaccounted, and {}", mib(*bytes), blind_spots(blind))
        }
        Why::MemoryOver { .. }
        | Why::ReleaseUnproven { .. }
        | Why::StillHolds { .. }
        | Why::Restarted { .. } => release(w),
        Why::Unchecked { pid, why } => format!("PID {pid} {why}; it was not signalled"),
        Why::ChangedListed { pid } => format!(
            "PID {pid} changed before the signal (it exec'd or let go) and was not signalled, but NVML still lists it with memory"
        ),
        Why::ZombieStillListed { pid, ppid } => format!(
            "zombie PID {pid} is still listed by NVML with its memory: its parent PID {ppid} must reap it"
        ),
        Why::NoFinalSnapshot { error } => format!("no final snapshot: {error}"),
        Why::NotWaited => "not waited for (--no-wait)".into(),
        Why::ProcNotOurs { root } => super::target::not_ours(*root).into(),
        Why::Said { text } => text.clone(),
    }
}

fn holders(holders: &[Named]) -> String {
    let named: Vec<String> = holders.iter().map(label).collect();
    format!(
        "{} {} it: {}",
        processes(named.len()),
        if named.len() == 1 { "holds" } else { "hold" },
        pid_list(&named)
    )
}

/// A PID NVML lists: a zombie, another namespace's, a stale one.
fn listed_pid(w: &Why) -> String {
    match w {
        Why::Zombie { pid, ppid, bytes } => format!(
            "zombie PID {pid} is still listed by NVML with {}: its parent PID {ppid} must reap it",
            listed(*bytes)
        ),
        Why::OtherNamespace { pid, bytes } => format!(
            "NVML lists PID {pid} with {}, which this /proc does not have (another PID namespace)",
            listed(*bytes)
        ),
        Why::StalePid { pid, bytes } => format!(
            "NVML lists PID {pid} with {}, but that PID here names a process that holds no GPU device node: the memory is kept by a process that had this PID before, or one that inherited its GPU files",
            listed(*bytes)
        ),
        other => why(other),
    }
}

/// The release's memory: over what the targets left, or unreadable.
fn release(w: &Why) -> String {
    match w {
        Why::MemoryOver {
            used,
            limit,
            listed,
        } => {
            let still = if listed.is_empty() {
                String::new()
            } else {
                format!(", NVML still lists {listed:?}")
            };
            format!(
                "{} used (expected at most {}){still}",
                mib(*used),
                mib(*limit)
            )
        }
        Why::ReleaseUnproven {
            gpu,
            reported,
            error,
        } => format!(
            "the release cannot be proven: GPU {gpu}: {}{}; --holders-only accepts the holders alone",
            if *reported {
                "its memory could not be read"
            } else {
                "NVML did not report it"
            },
            error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default()
        ),
        Why::StillHolds {
            holder,
            holds: h,
            asleep,
            wchan,
        } => {
            let asleep = if *asleep {
                format!(
                    ", in uninterruptible sleep{}: SIGKILL acts when that kernel wait ends (usually seconds); one that lasts minutes is a hung driver call, which only a reset ends (`gpufree why` prints the plan)",
                    wchan.as_deref().map(|w| format!(" in {w}")).unwrap_or_default()
                )
            } else {
                String::new()
            };
            format!("{} still holds {}{asleep}", label(holder), holds(h))
        }
        Why::Restarted {
            holder,
            holds: h,
            how,
        } => restarted(holder, h, how),
        other => why(other),
    }
}

/// What a process holds: `1,024 MiB on GPU 0, n/a on GPU 1`, or its
/// nodes, `nvidia0, nvidiactl`.
pub fn holds(h: &Holds) -> String {
    match h {
        Holds::Memory { on } => on
            .iter()
            .map(|m| format!("{} on GPU {}", m.bytes.map_or("n/a".into(), mib), m.gpu))
            .collect::<Vec<_>>()
            .join(", "),
        Holds::Nodes { nodes } => nodes.join(", "),
    }
}

/// A process that was no target and holds what a target held, with what
/// stops its supervisor.
fn restarted(p: &Named, h: &Holds, how: &Restart) -> String {
    let (who, holds) = (label(p), holds(h));
    let by_parent = |parent: u32, free: &Selection| {
        format!(
            "stop PID {parent} first, then free the GPU: `gpufree kill {}`",
            free.args().join(" ")
        )
    };
    match how {
        Restart::Child { parent } => format!(
            "{who}, a child of target {parent}, still holds {holds}; it was not a target (free the GPU with --gpu, or name it)"
        ),
        Restart::ByParent {
            target,
            parent,
            parent_comm,
            free,
        } => format!(
            "{who} holds {holds}: target {target}'s parent, PID {parent} ({}), started it again during the kill; a supervisor restarts what dies: {}",
            parent_comm.as_deref().unwrap_or("?"),
            by_parent(*parent, free)
        ),
        Restart::ByUnit {
            target,
            unit,
            stop,
            parent,
            free,
        } => format!(
            "{who} holds {holds}: target {target}'s unit {unit} started it again during the kill; a supervisor restarts what dies: {}",
            stop.as_ref()
                .map_or_else(|| by_parent(*parent, free), |cmd| format!("`{cmd}`"))
        ),
        Restart::Beside { target } => {
            format!("{who}, started during the kill beside target {target}, holds {holds}")
        }
    }
}

fn unreadable(failed: &[Failed]) -> String {
    let each: Vec<String> = failed
        .iter()
        .map(|u| format!("PID {}: {}", u.pid, u.error))
        .collect();
    format!(
        "{} could not be read, so what {} hold is unknown: {}",
        processes(each.len()),
        if each.len() == 1 {
            "it may"
        } else {
            "they may"
        },
        pid_list(&each)
    )
}

/// Why a GPU's memory cannot be read, in words.
pub fn memory_unknown(m: &MemoryUnknown) -> String {
    match m {
        MemoryUnknown::Sysfs { pci_bus_id } => format!(
            "its memory could not be read from sysfs (mem_info_vram_total and \
             mem_info_vram_used of {pci_bus_id})"
        ),
        MemoryUnknown::NoNvml { error } => format!(
            "NVML is unavailable, so its memory cannot be read ({})",
            error.as_deref().unwrap_or("unknown error")
        ),
        MemoryUnknown::Nvml { failure: f } => format!(
            "its memory could not be read: {}",
            f.as_ref()
                .map_or_else(|| "NVML did not report it".into(), failure)
        ),
    }
}

/// What is missing from the view, joined by `; `.
pub fn blind_spots(blind: &[BlindSpot]) -> String {
    blind.iter().map(blind_spot).collect::<Vec<_>>().join("; ")
}

/// One missing part of the view in words.
pub fn blind_spot(b: &BlindSpot) -> String {
    match b {
        BlindSpot::ProcessList { unavailable: u } => {
            format!("NVML's {} list is unavailable ({})", what(u), failed(u))
        }
        BlindSpot::KfdVram { unavailable: u } | BlindSpot::DrmMemory { unavailable: u } => {
            format!("{}: {}", what(u), failed(u))
        }
        BlindSpot::Unreadable { pids: p } => {
            format!("{} could not be read (PID {})", processes(p.len()), pids(p))
        }
        BlindSpot::Hidepid => HIDEPID.into(),
    }
}

const HIDEPID: &str = "/proc is mounted with hidepid: other users' processes are hidden";
const ACCOUNTED: &str = "; NVML accounts for the memory";

/// One caveat in words.
pub fn caveat(c: &Caveat) -> String {
    match c {
        Caveat::DrmShared { bytes } => format!(
            "its DRM clients share {} of buffers with other clients (drm-shared-*), and each sharer's memory counts them: the sum per process may count shared buffers more than once",
            crate::units::mib(*bytes)
        ),
        Caveat::HoldersOnly { driver } => format!(
            "{} publishes no used memory: free means that no process holds the GPU",
            driver.as_deref().unwrap_or("its driver")
        ),
        Caveat::MemoryNotChecked { memory } => format!(
            "memory not checked (--holders-only): {}",
            memory_unknown(memory)
        ),
        Caveat::PermissionDenied {
            pids: p,
            root,
            accounted,
        } => format!(
            "{} could not be read (permission denied: PID {}){}{}",
            processes(p.len()),
            pids(p),
            if *root {
                String::new()
            } else {
                format!("; {}", super::unseen::UNREADABLE)
            },
            if *accounted { ACCOUNTED } else { "" }
        ),
        Caveat::Hidepid { accounted } => {
            format!("{HIDEPID}{}", if *accounted { ACCOUNTED } else { "" })
        }
    }
}

#[cfg(test)]
mod tests;
