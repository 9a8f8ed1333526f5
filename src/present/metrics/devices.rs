//! The series of MIG devices, and of GPUs the kubelet allocated to no pod.

use super::{gauge, gauge_family, l, label_value};
use crate::model::{Snapshot, VerdictState};
use prometheus_client::registry::Registry;

/// Per MIG device (only where a GPU has them): its memory and verdict,
/// labelled `gpu`, `mig` (its index), `uuid` and its instance ids.
pub(super) fn add_mig(r: &mut Registry, s: &Snapshot) {
    if s.gpus.iter().all(|g| g.mig_devices.is_empty()) {
        return;
    }
    let memory = [
        ("mig_memory_total_bytes", "MIG device memory size"),
        (
            "mig_memory_used_bytes",
            "MIG device memory in use, as NVML reports it",
        ),
        (
            "mig_memory_unaccounted_bytes",
            "MIG device memory used that no visible process accounts for",
        ),
    ]
    .map(|(name, help)| gauge_family(r, name, help));
    let verdict = gauge_family(
        r,
        "mig_verdict",
        "1 for the MIG device's verdict (state=free|busy|unknown), 0 for the other two",
    );
    let id = |v: Option<u32>| v.map_or_else(String::new, |v| v.to_string());
    for g in &s.gpus {
        for m in &g.mig_devices {
            let device = [
                ("gpu", g.index.to_string()),
                ("mig", m.index.to_string()),
                ("uuid", label_value(&m.uuid)),
            ];
            let instances = [
                ("gpu_instance", id(m.gpu_instance_id)),
                ("compute_instance", id(m.compute_instance_id)),
            ];
            let labels = [&device[..], &instances[..]].concat();
            if m.memory.known {
                let bytes = [
                    m.memory.total_bytes,
                    m.memory.used_bytes,
                    m.memory.unaccounted_bytes,
                ];
                for (family, v) in memory.iter().zip(bytes) {
                    family.get_or_create(&l(&labels)).set(gauge(v));
                }
            }
            for state in [
                VerdictState::Free,
                VerdictState::Busy,
                VerdictState::Unknown,
            ] {
                let mut with = device.to_vec();
                with.push(("state", state.as_str().into()));
                verdict
                    .get_or_create(&l(&with))
                    .set(i64::from(m.verdict.state == state));
            }
        }
    }
}

/// On a Kubernetes node, per GPU the kubelet may allocate: the memory used
/// while it is allocated to no pod (0 while some pod has it).
pub(super) fn add_unallocated(r: &mut Registry, s: &Snapshot) {
    let Some(k) = s.kubelet.as_ref().filter(|k| k.error.is_none()) else {
        return;
    };
    let family = gauge_family(
        r,
        "unallocated_used_bytes",
        "GPU memory in use on a GPU the kubelet allocated to no pod",
    );
    for g in s.gpus.iter().filter(|g| g.memory.known && k.manages(g)) {
        let used = if k.allocated_to(g).is_empty() {
            g.memory.used_bytes
        } else {
            0
        };
        family
            .get_or_create(&l(&[
                ("gpu", g.index.to_string()),
                ("uuid", label_value(&g.uuid)),
            ]))
            .set(gauge(used));
    }
}
