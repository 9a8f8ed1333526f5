//! MIG capability holders: each `nvidia-caps/nvidia-capN` node a process
//! holds, mapped through the driver's `mig-minors` table (read under the
//! proc root, or from `GPUFREE_MIG_MINORS`, so tests give their own) to its
//! GPU and instance.

use crate::model::Snapshot;
use crate::model::{Call, Failure, MigCap, Unavailable, Unplaced};
use crate::proc::caps::{listed_minors, parse_mig_minors, MigMinor};
use crate::proc::nodes::{NodeKind, NodeSet};
use crate::proc::scan;
use std::collections::BTreeSet;
use std::os::fd::OwnedFd;

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
    let text = text.map(|t| String::from_utf8_lossy(&t).into_owned()).ok();
    let rows = text.as_deref().map(parse_mig_minors).unwrap_or_default();
    let listed = text.as_deref().map(listed_minors).unwrap_or_default();
    let mut unplaced = BTreeSet::new();
    for node in nodes.nodes.iter().filter(|n| n.kind == NodeKind::NvidiaCap) {
        let path = node.path.display().to_string();
        let minor = cap_minor(&node.rel);
        match place(snap, &rows, minor) {
            Some(cap) => {
                snap.mig_caps.insert(path, cap);
            }
            // Named by the table, but no instance (config, monitor).
            None if minor.is_some_and(|m| listed.contains(&m)) => {}
            None => {
                unplaced.insert(path);
            }
        }
    }
    for p in &mut snap.processes {
        for d in &mut p.devices {
            if let Some(c) = snap.mig_caps.get(&d.path) {
                d.gpu = Some(c.gpu);
            }
        }
    }
    note_unplaced(snap, &unplaced, text.is_some());
}

/// N of `nvidia-caps/nvidia-capN`.
fn cap_minor(rel: &str) -> Option<u32> {
    rel.strip_prefix("nvidia-caps/nvidia-cap")?.parse().ok()
}

/// What capability `minor` opens, by the table, on a GPU of `snap`.
fn place(snap: &Snapshot, rows: &[MigMinor], minor: Option<u32>) -> Option<MigCap> {
    let row = rows.iter().find(|r| Some(r.cap_minor) == minor)?;
    let gpu = snap
        .gpus
        .iter()
        .find(|g| g.minor_number == Some(row.gpu_minor))?
        .index;
    Some(MigCap {
        gpu,
        gpu_instance_id: row.gpu_instance_id,
        compute_instance_id: row.compute_instance_id,
    })
}

/// Capability nodes that holders hold and nothing places, where a GPU is
/// in MIG mode: an unavailable entry, which leaves the verdicts of MIG
/// devices unknown (such a holder may be on any of them).
fn note_unplaced(snap: &mut Snapshot, unplaced: &BTreeSet<String>, table_read: bool) {
    if !snap.gpus.iter().any(|g| g.mig_mode == Some(true)) {
        return;
    }
    let holders: Vec<u32> = snap
        .processes
        .iter()
        .filter(|p| p.devices.iter().any(|d| unplaced.contains(&d.path)))
        .map(|p| p.pid)
        .collect();
    if holders.is_empty() {
        return;
    }
    snap.unavailable.push(Unavailable {
        what: Call::MigCaps { pids: holders },
        gpu: None,
        why: if table_read {
            Failure::MigMinorsSilent
        } else {
            Failure::MigMinorsUnread
        },
        unplaced: Some(Unplaced::MigCaps),
    });
}
