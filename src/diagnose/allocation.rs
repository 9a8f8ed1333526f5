//! What the kubelet allocated against who holds the GPUs: memory on a GPU
//! allocated to no pod, a pod's process on another pod's GPU, and
//! processes of a pod the kubelet no longer runs.

use super::{gpus_of_all, unprotected, who};
use crate::diagnose::verdict::IDLE_SLACK_BYTES;
use crate::model::{AllocationIssue, KubeletView, OwnerKind};
use crate::model::{Evidence, Finding, Next, Process, Severity, Snapshot};
use std::collections::BTreeMap;

pub(super) fn allocation(s: &Snapshot, out: &mut Vec<Finding>) {
    let Some(k) = s.kubelet.as_ref().filter(|k| k.error.is_none()) else {
        return;
    };
    for g in &s.gpus {
        // A GPU the kubelet does not manage is none of its business.
        if !k.manages(g) {
            continue;
        }
        let allocated = k.allocated_to(g);
        let holders: Vec<&Process> = s
            .processes
            .iter()
            .filter(|p| p.is_live() && !p.protected_for_all() && p.touches_gpu(g.index))
            .collect();
        if allocated.is_empty() && g.memory.known && g.memory.used_bytes > IDLE_SLACK_BYTES {
            out.push(Finding {
                severity: Severity::Warning,
                pids: holders.iter().map(|p| p.pid).collect(),
                gpus: vec![g.index],
                bytes: g.memory.used_bytes,
                next: Next::Why(s.selection_of(&[g.index])),
                evidence: Evidence::Allocation(AllocationIssue::Unallocated {
                    uuid: g.uuid.clone(),
                    holders: holders.iter().map(|p| who(p)).collect(),
                }),
            });
        }
        for p in holders.iter().filter(|p| p.owner.kind == OwnerKind::K8sPod) {
            match s.pods.get(&p.owner.id) {
                // A pod the kubelet no longer runs is said as such
                // (`gone_pods`), not as another pod's tenant.
                Some(mine)
                    if !allocated.is_empty()
                        && !allocated.contains(mine)
                        && k.runs(&mine.namespace, &mine.name) =>
                {
                    out.push(Finding {
                        severity: Severity::Error,
                        pids: vec![p.pid],
                        gpus: vec![g.index],
                        bytes: p.memory_bytes(),
                        next: Next::Kill(vec![p.pid]),
                        evidence: Evidence::Allocation(AllocationIssue::OtherPod {
                            who: who(p),
                            pod: mine.clone(),
                            allocated_to: allocated.clone(),
                        }),
                    });
                }
                _ => {}
            }
        }
    }
    gone_pods(s, k, out);
}

/// Holders of a GPU whose pod the kubelet does not run: known by name and
/// absent from its list, or with no name left (the kubelet removes a
/// pod's log directory with the pod).
fn gone_pods(s: &Snapshot, k: &KubeletView, out: &mut Vec<Finding>) {
    let mut by_pod: BTreeMap<&str, Vec<&Process>> = BTreeMap::new();
    for p in s.processes.iter().filter(|p| {
        p.is_live()
            && p.owner.kind == OwnerKind::K8sPod
            && (!p.gpu_memory.is_empty() || p.devices.iter().any(|d| d.gpu.is_some()))
    }) {
        by_pod.entry(p.owner.id.as_str()).or_default().push(p);
    }
    for (uid, holders) in by_pod {
        let pod = s.pods.get(uid);
        if pod.is_some_and(|n| k.runs(&n.namespace, &n.name)) {
            continue;
        }
        out.push(Finding {
            severity: Severity::Error,
            pids: holders.iter().map(|p| p.pid).collect(),
            gpus: gpus_of_all(holders.iter().copied()),
            bytes: crate::model::saturating_sum(holders.iter().map(|p| p.memory_bytes())),
            next: Next::Kill(unprotected(&holders)),
            evidence: Evidence::Allocation(AllocationIssue::GonePod {
                uid: uid.to_string(),
                pod: pod.cloned(),
                holders: holders.iter().map(|p| who(p)).collect(),
            }),
        });
    }
}
