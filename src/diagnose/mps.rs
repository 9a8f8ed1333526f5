//! NVIDIA MPS: on a GPU under MPS the server (`nvidia-cuda-mps-server`)
//! holds its clients' memory in its one context. The clients are what to
//! stop (each one's memory is freed as it exits); the daemons are
//! protected, and stopped last, by `quit` to the control daemon, which
//! waits for the clients. Killing the server while clients run would end
//! their CUDA contexts: never the suggestion.

use super::{unprotected, who};
use crate::model::{Evidence, Finding, Lookup, Next, Process, Severity, Who};
use crate::model::{MpsGpu, MpsRole, MpsServed};
use std::collections::HashSet;

/// One finding per GPU under MPS.
pub(super) fn mps(look: &Lookup<'_>, out: &mut Vec<Finding>) {
    let s = look.snapshot();
    let controls: Vec<Who> = s
        .processes
        .iter()
        .filter(|p| look.mps_role(p) == Some(MpsRole::Control))
        .map(who)
        .collect();
    for m in s.mps() {
        out.push(served(look, &m, &controls));
    }
}

/// The finding of GPU `m.gpu` under MPS.
fn served(look: &Lookup<'_>, m: &MpsGpu, controls: &[Who]) -> Finding {
    let s = look.snapshot();
    let on_gpu = |p: &Process| {
        p.gpu_memory
            .iter()
            .find(|g| g.gpu == m.gpu)
            .and_then(|g| g.used_bytes)
    };
    let procs = |pids: &[u32]| -> Vec<&Process> {
        let pids: HashSet<u32> = pids.iter().copied().collect();
        s.processes
            .iter()
            .filter(|p| pids.contains(&p.pid))
            .collect()
    };
    let servers = procs(&m.servers);
    let clients = procs(&m.clients);
    let live: Vec<&Process> = clients.iter().copied().filter(|p| p.is_live()).collect();
    let unseen_clients: Vec<u32> = m
        .clients
        .iter()
        .copied()
        .filter(|pid| look.process(*pid).is_none())
        .collect();
    let mut pids: Vec<u32> = [&m.servers[..], &m.clients[..]].concat();
    pids.retain(|pid| look.process(*pid).is_some());
    pids.extend(controls.iter().map(|w| w.pid));
    pids.sort_unstable();
    pids.dedup();
    let next = next(unprotected(&live), m, &unseen_clients);
    Finding {
        severity: if m.clients.is_empty() {
            Severity::Info
        } else {
            Severity::Warning
        },
        pids,
        gpus: vec![m.gpu],
        bytes: crate::model::saturating_sum(
            servers
                .iter()
                .filter_map(|p| on_gpu(p))
                .chain([m.client_bytes]),
        ),
        next,
        evidence: Evidence::Mps(Box::new(MpsServed {
            gpu: m.gpu,
            servers: servers.iter().map(|p| (who(p), on_gpu(p))).collect(),
            clients: clients.iter().map(|p| (who(p), on_gpu(p))).collect(),
            unseen_clients,
            client_bytes: m.client_bytes,
            controls: controls.to_vec(),
        })),
    }
}

/// Clients first; the daemons once no client is left.
fn next(kill: Vec<u32>, m: &MpsGpu, unseen_clients: &[u32]) -> Next {
    match (
        kill.is_empty(),
        m.clients.is_empty(),
        unseen_clients.is_empty(),
    ) {
        (false, _, _) => Next::Kill(kill),
        (true, true, _) => Next::QuitMps,
        (true, false, false) => Next::OnHost,
        (true, false, true) => Next::Nothing,
    }
}
