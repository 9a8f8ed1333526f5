//! Holders in states a kill treats apart: orphans, zombies (and zombie
//! leaders whose threads run), uninterruptible and stopped processes.

use super::*;

pub(super) fn orphans(ctx: &Ctx<'_>, out: &mut Vec<Finding>) {
    let s = ctx.s;
    // Orphans with memory outside a unit, container, pod or job are a
    // group of their own (live_holders).
    let grouped = |p: &Process| {
        p.memory_bytes() > 0 && !p.protected && matches!(ctx.group(p), Group::Orphans(..))
    };
    let orphans: Vec<&Process> = s
        .processes
        .iter()
        .filter(|p| p.orphaned && p.is_live() && !grouped(p))
        .collect();
    if orphans.is_empty() {
        return;
    }
    let bytes = crate::model::saturating_sum(orphans.iter().map(|p| p.memory_bytes()));
    let f = finding(
        FindingKind::Orphans,
        Severity::Warning,
        format!(
            "{} whose parent died (reparented to init or a subreaper): the service that started {} is gone, and a restart will find the GPU full",
            count(orphans.len(), "holder", "holders"),
            if orphans.len() == 1 { "it" } else { "them" }
        ),
        orphans.iter().map(|p| p.pid).collect(),
        gpus_of_all(orphans.iter().copied()),
        kill_command(&orphans.iter().filter(|p| !p.protected).map(|p| p.pid).collect::<Vec<_>>()),
    );
    let details = orphans
        .iter()
        .map(|p| {
            format!(
                "{}: parent now {}, owner {}",
                who(p),
                p.ppid,
                if p.owner.name.is_empty() {
                    "-"
                } else {
                    &p.owner.name
                }
            )
        })
        .collect();
    out.push(with(f, details, bytes));
}

pub(super) fn zombies(s: &Snapshot, out: &mut Vec<Finding>) {
    for p in s.processes.iter().filter(|p| p.state == "Z") {
        let listed = s
            .gpus
            .iter()
            .any(|g| g.nvml_processes.iter().any(|n| n.pid == p.pid));
        let (severity, message) = if p.threads > 1 {
            (
                Severity::Error,
                format!(
                    "{} is a zombie leader whose {} still {} and {} the GPU: killing the process ends {}",
                    p.pid,
                    count(p.threads as usize - 1, "other thread", "other threads"),
                    if p.threads == 2 { "runs" } else { "run" },
                    if p.threads == 2 { "holds" } else { "hold" },
                    if p.threads == 2 { "it" } else { "them" }
                ),
            )
        } else if listed {
            (
                Severity::Warning,
                format!("{} is a zombie that NVML still lists: the driver is releasing its memory; killing does nothing, parent {} must reap it", p.pid, p.ppid),
            )
        } else {
            (
                Severity::Info,
                format!("{} is a zombie: its memory is already released; killing does nothing, parent {} must reap it", p.pid, p.ppid),
            )
        };
        let next = if p.threads > 1 {
            kill_command(&[p.pid])
        } else {
            format!("kill -s CHLD {}", p.ppid)
        };
        let f = finding(
            FindingKind::Zombies,
            severity,
            message,
            vec![p.pid],
            gpus_of(p),
            next,
        );
        out.push(with(f, vec![who(p)], p.memory_bytes()));
    }
}

pub(super) fn blocked(s: &Snapshot, out: &mut Vec<Finding>) {
    for p in s.processes.iter() {
        let wchan = p
            .wchan
            .as_deref()
            .map(|w| format!(" (waiting in {w})"))
            .unwrap_or_default();
        let (kind, message, next) = match p.state.as_str() {
            "D" => (
                FindingKind::Uninterruptible,
                format!("{} is in uninterruptible sleep{wchan}: SIGKILL takes effect only when it leaves that kernel wait, and its memory comes back after that; a wait that lasts minutes is a hung driver call, which only a GPU reset ends", p.pid),
                fixed_command(
                    &[
                        vec!["wait".to_string()],
                        gpu_args(&gpus_of(p)),
                        vec!["--timeout".into(), "300s".into()],
                    ]
                    .concat(),
                ),
            ),
            "T" | "t" => (
                FindingKind::Stopped,
                format!("{} is stopped{wchan}: it cannot handle SIGTERM until it gets SIGCONT", p.pid),
                kill_command(&[p.pid]),
            ),
            _ => continue,
        };
        let f = finding(
            kind,
            Severity::Warning,
            message,
            vec![p.pid],
            gpus_of(p),
            next,
        );
        out.push(with(f, vec![who(p)], p.memory_bytes()));
    }
}
