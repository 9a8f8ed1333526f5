//! NVIDIA MPS in the kill plan's words. A client is named as its server's;
//! the server, left out as protected, holds the clients' memory, which each
//! client's exit frees, and is stopped last through the control daemon; a
//! server that is a target (`--force-protected`) while clients it serves
//! are not says what its end does to them.

use crate::model::Plan;
use crate::model::{MpsRole, Snapshot};
use std::collections::BTreeSet;

/// Rewrites the reasons of the plan's MPS processes.
pub(super) fn explain(snap: &Snapshot, plan: &mut Plan) {
    if snap.mps().is_empty() && snap.mps_controls().is_empty() {
        return;
    }
    let targets: BTreeSet<u32> = plan.targets.iter().map(|t| t.pid).collect();
    for t in &mut plan.targets {
        if let Some(words) = role(snap, t.pid, &targets, true) {
            t.reason = format!("{}; {words}", t.reason);
        }
    }
    for k in &mut plan.skipped {
        if let Some(words) = role(snap, k.pid, &targets, false) {
            k.reason = words;
        }
    }
}

/// What the process `pid` is to MPS, for the plan: `target` says whether
/// it will be signalled.
fn role(snap: &Snapshot, pid: u32, targets: &BTreeSet<u32>, target: bool) -> Option<String> {
    let p = snap.processes.iter().find(|p| p.pid == pid)?;
    let gpus = snap.mps();
    match snap.mps_role(p)? {
        MpsRole::Client => {
            let servers: Vec<String> = gpus
                .iter()
                .filter(|m| m.clients.contains(&pid))
                .filter_map(|m| snap.mps_server_of(m.gpu))
                .map(|s| s.to_string())
                .collect();
            target.then(|| match servers.len() {
                0 => "an MPS client: its memory is freed when it exits".to_string(),
                _ => format!(
                    "an MPS client of server {}: its memory is freed when it exits",
                    servers.join(", ")
                ),
            })
        }
        MpsRole::Server => {
            let served: Vec<&crate::model::MpsGpu> =
                gpus.iter().filter(|m| m.servers.contains(&pid)).collect();
            let spared: Vec<String> = served
                .iter()
                .flat_map(|m| &m.clients)
                .filter(|c| !targets.contains(c))
                .map(u32::to_string)
                .collect();
            let clients = served.iter().map(|m| m.clients.len()).sum::<usize>();
            Some(if clients == 0 {
                format!(
                    "the MPS server, with no client{}",
                    if target {
                        String::new()
                    } else {
                        "; protected, left running; stop MPS with `echo quit | nvidia-cuda-mps-control`".into()
                    }
                )
            } else if target && spared.is_empty() {
                "the MPS server: its clients are targets too".into()
            } else if target {
                format!(
                    "the MPS server: killing it ends the CUDA contexts of its clients {}, which fail and lose their GPU state",
                    spared.join(", ")
                )
            } else {
                format!(
                    "the MPS server: protected, left running; it holds its clients' memory, which each client's exit frees; once no client is left, stop MPS with `echo quit | nvidia-cuda-mps-control` (killing the server while clients run ends their CUDA contexts){}",
                    if spared.is_empty() { String::new() } else { format!("; clients not targeted: {}", spared.join(", ")) }
                )
            })
        }
        MpsRole::Control => (!target).then(|| {
            "the MPS control daemon: protected, left running; once no client is left, `echo quit | nvidia-cuda-mps-control` stops it and its servers".into()
        }),
    }
}
