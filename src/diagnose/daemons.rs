//! Protected holders (driver daemons, display servers): named, never
//! part of a kill by default, and how an operator stops each.

use super::*;

pub(super) fn protected(s: &Snapshot, out: &mut Vec<Finding>) {
    let prot: Vec<&Process> = s.processes.iter().filter(|p| p.protected).collect();
    if prot.is_empty() {
        return;
    }
    let stop: Vec<String> = prot
        .iter()
        .map(|p| format!("{}: stop with `{}`", who(p), stop_command(p)))
        .collect();
    let f = finding(
        FindingKind::ProtectedHolders,
        Severity::Info,
        format!(
            "{} ({}): never part of a kill by default; a GPU reset fails while {} the GPU",
            count(
                prot.len(),
                "driver daemon or display server holds the GPU",
                "driver daemons or display servers hold the GPU"
            ),
            prot.iter()
                .map(|p| p.comm.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            if prot.len() == 1 {
                "it holds"
            } else {
                "they hold"
            }
        ),
        prot.iter().map(|p| p.pid).collect(),
        gpus_of_all(prot.iter().copied()),
        prot.first().map(|p| stop_command(p)).unwrap_or_default(),
    );
    let bytes = crate::model::saturating_sum(prot.iter().map(|p| p.memory_bytes()));
    out.push(with(f, stop, bytes));
}

/// The program a process runs: its exe's file name, or comm when the exe
/// cannot be read.
pub(super) fn program(p: &Process) -> &str {
    let exe = p.exe.as_deref().unwrap_or(&p.comm);
    exe.rsplit('/').next().unwrap_or(exe)
}

/// How an operator stops a protected daemon (printed, never run).
pub(super) fn stop_command(p: &Process) -> String {
    match program(p) {
        "nvidia-persistenced" => "systemctl stop nvidia-persistenced".into(),
        "nv-fabricmanager" => "systemctl stop nvidia-fabricmanager".into(),
        "nv-hostengine" => "systemctl stop nvidia-dcgm".into(),
        "nvidia-cuda-mps-control" | "nvidia-cuda-mps-server" => {
            "echo quit | nvidia-cuda-mps-control".into()
        }
        "Xorg" | "X" | "Xwayland" | "gnome-shell" | "kwin_wayland" => {
            "systemctl stop display-manager".into()
        }
        _ => fixed_command(&[
            "kill".into(),
            "--force-protected".into(),
            "--pid".into(),
            p.pid.to_string(),
        ]),
    }
}
