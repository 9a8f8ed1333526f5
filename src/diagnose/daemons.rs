//! Protected holders (driver daemons, display servers): named, never
//! part of a kill by default, and how an operator stops each.

use super::{gpus_of_all, who};
use crate::model::{Evidence, Finding, Next, Process, Severity, Snapshot};

pub(super) fn protected(s: &Snapshot, out: &mut Vec<Finding>) {
    let prot: Vec<&Process> = s.processes.iter().filter(|p| p.protected).collect();
    if prot.is_empty() {
        return;
    }
    out.push(Finding {
        severity: Severity::Info,
        pids: prot.iter().map(|p| p.pid).collect(),
        gpus: gpus_of_all(prot.iter().copied()),
        bytes: crate::model::saturating_sum(prot.iter().map(|p| p.memory_bytes())),
        next: prot.first().map_or(Next::Nothing, |p| stop_command(p)),
        evidence: Evidence::Protected(prot.iter().map(|p| (who(p), stop_command(p))).collect()),
    });
}

/// How an operator stops a protected daemon (printed, never run).
pub(super) fn stop_command(p: &Process) -> Next {
    match p.program() {
        "nvidia-persistenced" => Next::StopService("nvidia-persistenced"),
        "nv-fabricmanager" => Next::StopService("nvidia-fabricmanager"),
        "nv-hostengine" => Next::StopService("nvidia-dcgm"),
        "nvidia-cuda-mps-control" | "nvidia-cuda-mps-server" => Next::QuitMps,
        "Xorg" | "X" | "Xwayland" | "gnome-shell" | "kwin_wayland" => {
            Next::StopService("display-manager")
        }
        _ => Next::KillProtected(p.pid),
    }
}
