//! What could not be seen, PIDs of other namespaces and stale listings,
//! and memory no visible process accounts for: the holders first, then
//! driver-held memory with its caveats and the reset plan.

use super::*;

/// Reports what could not be seen: a warning when it leaves the verdict
/// open, a note when NVML accounts for the memory all the same.
pub(super) fn partial_view(s: &Snapshot, state: VerdictState, out: &mut Vec<Finding>) {
    let why = unseen(s);
    if why.is_empty() {
        return;
    }
    let v = &s.visibility;
    let next = if v.root {
        "gpufree why --json  # see visibility and unavailable".into()
    } else {
        "sudo gpufree why".into()
    };
    let why = why.join("; ");
    let (severity, message) = match state {
        VerdictState::Unknown => (
            Severity::Warning,
            format!("partial view: {why}; gpufree cannot call these GPUs free or speak of a driver leak"),
        ),
        VerdictState::Free => (
            Severity::Info,
            format!("not everything could be read: {why}; NVML accounts for all used memory, so this does not change the verdict"),
        ),
        VerdictState::Busy => (
            Severity::Info,
            format!("not everything could be read: {why}"),
        ),
    };
    let f = finding(
        FindingKind::PartialView,
        severity,
        message,
        v.unreadable_pids.iter().take(32).copied().collect(),
        Vec::new(),
        next,
    );
    out.push(f);
}

/// What the snapshot could not see, one phrase each: unreadable
/// processes (the first six with why), hidepid, NVML, failed calls.
fn unseen(s: &Snapshot) -> Vec<String> {
    let v = &s.visibility;
    let mut why = Vec::new();
    if !v.unreadable.is_empty() {
        let each: Vec<String> = v
            .unreadable
            .iter()
            .take(6)
            .map(|u| format!("PID {}: {}", u.pid, u.why))
            .collect();
        why.push(format!(
            "{} could not be read ({}{})",
            count(v.unreadable.len(), "process", "processes"),
            each.join("; "),
            if v.unreadable.len() > 6 { "; ..." } else { "" }
        ));
    }
    if v.hidepid && !v.root {
        why.push("/proc is mounted with hidepid: other users' processes are invisible".into());
    }
    if !s.nvml.available {
        why.push(format!(
            "NVML is unavailable ({})",
            s.nvml.error.as_deref().unwrap_or("?")
        ));
    }
    for u in &s.unavailable {
        let gpu = u.gpu.map(|g| format!("GPU {g} ")).unwrap_or_default();
        why.push(format!("{gpu}{}: {}", u.what, u.why));
    }
    why
}

/// The memory NVML lists for `pids`, and the GPUs it is on.
pub(super) fn listed_memory(s: &Snapshot, pids: &[u32]) -> (u64, Vec<u32>) {
    let mut bytes = 0;
    let mut gpus = Vec::new();
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
    let f = finding(
        FindingKind::OutsideNamespace,
        Severity::Error,
        format!(
            "NVML lists {} with {} that this /proc does not have: processes of another PID namespace (the host, or a container on an older driver); run gpufree on the host (or with hostPID) to see and free them",
            count(hidden.len(), "PID", "PIDs"),
            gib(bytes)
        ),
        hidden.clone(),
        gpus,
        "nsenter --target 1 --pid --mount -- gpufree why".into(),
    );
    out.push(with(f, Vec::new(), bytes));
}

pub(super) fn stale_pids(s: &Snapshot, out: &mut Vec<Finding>) {
    let stale = &s.visibility.nvml_pids_stale;
    if stale.is_empty() {
        return;
    }
    let (bytes, gpus) = listed_memory(s, stale);
    let f = finding(
        FindingKind::StaleNvmlPid,
        Severity::Error,
        format!(
            "NVML lists {} with {} whose process here holds no GPU device node: not that process's memory (it was never signalled for it), but kept by a process that had the PID before (reused since) or one that inherited its GPU files",
            count(stale.len(), "PID", "PIDs"),
            gib(bytes)
        ),
        stale.clone(),
        gpus.clone(),
        fixed_command(&[vec!["why".to_string()], gpu_args(&gpus)].concat()),
    );
    out.push(with(f, Vec::new(), bytes));
}

/// What must stop before `nvidia-smi --gpu-reset -i GPU` can work, in the
/// order to stop it: every process holding a node of that GPU or a shared
/// NVIDIA node (work first, then monitors such as a gpufree `serve` or
/// `watch`, DCGM and its exporter, then the fabric manager, the
/// persistence daemon last), then the reset itself. Printed for the
/// operator; gpufree never resets a GPU.
pub(super) fn reset_plan(s: &Snapshot, gpu: u32) -> Vec<String> {
    let rank = |p: &Process| -> u8 {
        match program(p) {
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
    let mut plan = vec![
        "printed for the operator, never run by gpufree; a reset needs root, no process using any GPU of the board, and on NVLink systems all GPUs of the fabric reset together".to_string(),
    ];
    if blockers.is_empty() {
        plan.push("blockers: none holds a GPU device node now".into());
    }
    for (i, p) in blockers.iter().enumerate() {
        let how = if p.protected {
            stop_command(p)
        } else {
            kill_command(&[p.pid])
        };
        plan.push(format!("{}. stop {}: `{how}`", i + 1, who(p)));
    }
    plan.push(format!(
        "{}. reset: `nvidia-smi --gpu-reset -i {gpu}`",
        blockers.len() + 1
    ));
    plan
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
        let e = explain(s, g.index, unexplained, &holders);
        let f = finding(
            e.kind,
            e.severity,
            e.message,
            holders.iter().map(|p| p.pid).collect(),
            vec![g.index],
            e.next,
        );
        out.push(with(f, e.details, unexplained));
    }
}

/// What a finding on unaccounted memory says, before its PIDs and GPU.
struct Explanation {
    kind: FindingKind,
    severity: Severity,
    message: String,
    next: String,
    details: Vec<String>,
}

/// Live processes that hold GPU `gpu`'s node or only shared nodes. A
/// driver daemon holds nodes, not contexts: it blocks a reset (the plan
/// names it) but explains no memory.
fn possible_holders(s: &Snapshot, gpu: u32) -> Vec<&Process> {
    s.processes
        .iter()
        .filter(|p| {
            p.is_live()
                && !p.protected
                && (p.touches_gpu(gpu)
                    || (p.gpu_memory.is_empty() && p.devices.iter().all(|d| d.gpu.is_none())))
        })
        .collect()
}

/// The explanation that fits `unexplained` bytes on GPU `gpu`, most
/// likely first: holders that may own the contexts, a nested namespace,
/// a partial view, then the driver.
fn explain(s: &Snapshot, gpu: u32, unexplained: u64, holders: &[&Process]) -> Explanation {
    let head = format!("GPU {gpu}: {} used", mib(unexplained));
    // A CUDA context maps the device; an NVML monitor (gpufree serve,
    // nvidia-smi -l, nvtop) only opens the nodes.
    let (mapping, openers): (Vec<&Process>, Vec<&Process>) = holders.iter().partition(|p| {
        p.devices
            .iter()
            .any(|d| d.via.contains(&crate::model::Via::Mmap))
    });
    let blind = verdict::blind_spots(s, gpu);
    if !openers.is_empty() && mapping.is_empty() {
        monitors_only(s, gpu, &head, &openers)
    } else if !holders.is_empty() {
        // They come first: they may own contexts NVML lists under no PID
        // gpufree can see.
        holders_first(&head, holders)
    } else if s.visibility.nested_pid_namespace {
        nested_namespace(&head)
    } else if !blind.is_empty() && !s.visibility.root {
        partial(&head, &blind)
    } else if !blind.is_empty() {
        driver_held(s, gpu, &head, &blind)
    } else {
        driver_leak(s, gpu, &head)
    }
}

fn reset(gpu: u32) -> String {
    format!("nvidia-smi --gpu-reset -i {gpu}")
}

/// Only processes that open the nodes without mapping them (monitors):
/// the driver likely holds the memory.
fn monitors_only(s: &Snapshot, gpu: u32, head: &str, openers: &[&Process]) -> Explanation {
    let mut details: Vec<String> = openers.iter().map(|p| who(p)).collect();
    details.extend(reset_plan(s, gpu));
    Explanation {
        kind: FindingKind::UnaccountedMemory,
        severity: Severity::Warning,
        message: format!(
            "{head} that no visible process accounts for; {} its device nodes open without mapping them, as NVML monitors do (a CUDA context maps them): the driver likely holds the memory",
            count(openers.len(), "process holds", "processes hold")
        ),
        next: reset(gpu),
        details,
    }
}

/// Holders of the GPU's nodes that may own the contexts: freed first.
fn holders_first(head: &str, holders: &[&Process]) -> Explanation {
    let targets: Vec<u32> = holders.iter().map(|p| p.pid).collect();
    Explanation {
        kind: FindingKind::UnaccountedMemory,
        severity: Severity::Warning,
        message: format!(
            "{head} that no visible process accounts for; {} its device nodes and may own the contexts",
            count(holders.len(), "process holds", "processes hold")
        ),
        next: kill_command(&targets),
        details: holders.iter().map(|p| who(p)).collect(),
    }
}

/// gpufree runs in a container: the memory may be another namespace's.
fn nested_namespace(head: &str) -> Explanation {
    Explanation {
        kind: FindingKind::UnaccountedMemory,
        severity: Severity::Warning,
        message: format!(
            "{head} that no visible process accounts for; gpufree runs in a nested PID namespace: new drivers hide other namespaces' processes but count their memory"
        ),
        next: "nsenter --target 1 --pid --mount -- gpufree why".to_string(),
        details: Vec::new(),
    }
}

/// Not root, and some of the view is missing: ask for root.
fn partial(head: &str, blind: &[String]) -> Explanation {
    Explanation {
        kind: FindingKind::UnaccountedMemory,
        severity: Severity::Warning,
        message: format!(
            "{head} that no visible process accounts for; the view is partial: {}",
            blind.join("; ")
        ),
        next: "sudo gpufree why".to_string(),
        details: Vec::new(),
    }
}

/// Root, and still some process cannot be read (an outer sandbox's
/// init): the driver's memory is the likely answer, with those processes
/// named as what could prove it wrong.
fn driver_held(s: &Snapshot, gpu: u32, head: &str, blind: &[String]) -> Explanation {
    let mut plan = root_caveats(s);
    if plan.is_empty() {
        plan.push(format!("caveat: {}", blind.join("; ")));
    }
    plan.extend(reset_plan(s, gpu));
    Explanation {
        kind: FindingKind::DriverHeldMemory,
        severity: Severity::Warning,
        message: format!(
            "{head} with no process listed by NVML and no readable holder of any GPU device node: memory the driver holds, unless a process even root cannot read holds it"
        ),
        next: reset(gpu),
        details: plan,
    }
}

/// The processes even root could not read, the first six by name.
fn root_caveats(s: &Snapshot) -> Vec<String> {
    let unreadable = &s.visibility.unreadable;
    let mut caveats: Vec<String> = unreadable
        .iter()
        .take(6)
        .map(|u| {
            format!(
                "caveat: PID {}{} could not be read ({}), even as root; it may hold the memory",
                u.pid,
                u.comm
                    .as_deref()
                    .map(|c| format!(" ({c})"))
                    .unwrap_or_default(),
                u.why
            )
        })
        .collect();
    if unreadable.len() > 6 {
        caveats.push(format!(
            "caveat: and {} more processes could not be read",
            unreadable.len() - 6
        ));
    }
    caveats
}

/// A complete view and nobody holds the memory: the driver's leak.
fn driver_leak(s: &Snapshot, gpu: u32, head: &str) -> Explanation {
    Explanation {
        kind: FindingKind::DriverLeak,
        severity: Severity::Error,
        message: format!(
            "{head} with no process listed by NVML and no holder of any GPU device node: memory the driver has not released"
        ),
        next: reset(gpu),
        details: reset_plan(s, gpu),
    }
}
