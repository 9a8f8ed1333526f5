//! NVIDIA MPS in the kill plan's words. A client is named as its server's;
//! the server, left out as protected, holds the clients' memory, which each
//! client's exit frees, and is stopped last through the control daemon; a
//! server that is a target (`--force-protected`) while clients it serves
//! are not says what its end does to them.

use crate::model::Plan;
use crate::model::{Left, MpsPart, MpsRole, Snapshot};
use std::collections::BTreeSet;

/// Says what each of the plan's MPS processes is to MPS.
pub(super) fn explain(snap: &Snapshot, plan: &mut Plan) {
    if snap.mps().is_empty() && snap.mps_controls().is_empty() {
        return;
    }
    let targets: BTreeSet<u32> = plan.targets.iter().map(|t| t.pid).collect();
    for t in &mut plan.targets {
        if let Some(part) = role(snap, t.pid, &targets, true) {
            t.why.mps = Some(part);
        }
    }
    for k in &mut plan.skipped {
        if let Some(part) = role(snap, k.pid, &targets, false) {
            k.why = Left::Mps { part };
        }
    }
}

/// What the process `pid` is to MPS, for the plan: `target` says whether
/// it will be signalled.
fn role(snap: &Snapshot, pid: u32, targets: &BTreeSet<u32>, target: bool) -> Option<MpsPart> {
    let p = snap.processes.iter().find(|p| p.pid == pid)?;
    let gpus = snap.mps();
    match snap.mps_role(p)? {
        MpsRole::Client => {
            let servers: Vec<u32> = gpus
                .iter()
                .filter(|m| m.clients.contains(&pid))
                .filter_map(|m| snap.mps_server_of(m.gpu))
                .collect();
            target.then_some(MpsPart::Client { servers })
        }
        MpsRole::Server => {
            let served: Vec<&crate::model::MpsGpu> =
                gpus.iter().filter(|m| m.servers.contains(&pid)).collect();
            let spared: Vec<u32> = served
                .iter()
                .flat_map(|m| &m.clients)
                .filter(|c| !targets.contains(c))
                .copied()
                .collect();
            let clients = served.iter().map(|m| m.clients.len()).sum::<usize>();
            Some(MpsPart::Server {
                clients,
                spared,
                target,
            })
        }
        MpsRole::Control => (!target).then_some(MpsPart::Control),
    }
}
