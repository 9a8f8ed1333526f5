//! MIG capability holders: each `nvidia-caps/nvidia-capN` node a process
//! holds, mapped through the driver's `mig-minors` table (read under the
//! proc root, or from `GPUFREE_MIG_MINORS`, so tests give their own) to its
//! GPU and instance.

use super::*;
use crate::model::MigCap;
use crate::proc::caps::parse_mig_minors;

/// Sets `snap.mig_caps` for the capability nodes of the device directory
/// that the table names, and ties their holders' uses to the GPU. Without
/// the table (no MIG, an old driver), capability nodes stay shared.
pub(super) fn map_caps(
    proc_fd: &OwnedFd,
    table: Option<&std::path::Path>,
    nodes: &NodeSet,
    snap: &mut Snapshot,
) {
    let text = match table {
        Some(path) => std::fs::read(path),
        None => scan::read_at(proc_fd, "driver/nvidia-caps/mig-minors").map_err(Into::into),
    };
    let Ok(text) = text else {
        return;
    };
    let table = parse_mig_minors(&String::from_utf8_lossy(&text));
    for node in nodes.nodes.iter().filter(|n| n.kind == NodeKind::NvidiaCap) {
        let Some(minor) = node
            .rel
            .strip_prefix("nvidia-caps/nvidia-cap")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Some(row) = table.iter().find(|r| r.cap_minor == minor) else {
            continue;
        };
        let Some(gpu) = snap
            .gpus
            .iter()
            .find(|g| g.minor_number == Some(row.gpu_minor))
            .map(|g| g.index)
        else {
            continue;
        };
        snap.mig_caps.insert(
            node.path.display().to_string(),
            MigCap {
                gpu,
                gpu_instance_id: row.gpu_instance_id,
                compute_instance_id: row.compute_instance_id,
            },
        );
    }
    for p in &mut snap.processes {
        for d in &mut p.devices {
            if let Some(c) = snap.mig_caps.get(&d.path) {
                d.gpu = Some(c.gpu);
            }
        }
    }
}
