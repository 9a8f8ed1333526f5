//! Folding a fresh NVML reading into a snapshot without rescanning /proc
//! (`watch`'s cheap ticks), while the process set is unchanged.

use super::assemble::set_accounting;
use crate::model::{Gpu, Snapshot};
use crate::nvml::NvmlReport;
use std::collections::BTreeSet;

/// Folds a fresh NVML reading into `snap` without rescanning /proc: GPU
/// memory and process lists, the memory of known processes and the
/// accounting (verdicts and findings are left to the diagnosis). Returns
/// false (and changes nothing) when NVML now lists a PID
/// the snapshot does not know or no longer lists one it knew, or when NVML's
/// own state changed, or when a GPU came through DRM: then a full snapshot
/// is needed.
pub fn fold_memory(snap: &mut Snapshot, report: &NvmlReport) -> bool {
    // A GPU found through DRM: its memory comes from its clients' fdinfo,
    // which only a scan reads. A GPU in MIG mode: its memory is its MIG
    // devices', which a full collection reads (and narrows).
    if snap
        .gpus
        .iter()
        .any(|g| g.vendor != crate::model::Vendor::Nvidia || g.mig_mode == Some(true))
    {
        return false;
    }
    // NVML failing now (hung, lost), or a GPU it no longer reports, is a
    // change only a full snapshot can describe.
    if report.status.available != snap.nvml.available {
        return false;
    }
    if !report.status.available {
        return true; // still no NVML: nothing to fold in
    }
    if snap.gpus.iter().any(|g| {
        !report
            .gpus
            .iter()
            .any(|f| f.index == g.index && f.memory.known == g.memory.known)
    }) {
        return false;
    }
    let fresh: Vec<&Gpu> = report
        .gpus
        .iter()
        .filter(|g| snap.gpus.iter().any(|s| s.index == g.index))
        .collect();
    if listings(fresh.iter().copied()) != listings(snap.gpus.iter()) {
        return false;
    }
    let not_visible: BTreeSet<u32> = snap
        .visibility
        .nvml_pids_not_visible
        .iter()
        .copied()
        .collect();
    for g in &mut snap.gpus {
        if let Some(f) = fresh.iter().find(|f| f.index == g.index) {
            fold_gpu(g, f, &not_visible);
            let listed = g.listed();
            for p in &mut snap.processes {
                for m in p.gpu_memory.iter_mut().filter(|m| m.gpu == g.index) {
                    m.used_bytes = listed.get(&p.pid).copied().flatten();
                }
            }
        }
    }
    true
}

/// Every (GPU, PID) pair NVML lists.
fn listings<'a>(gpus: impl Iterator<Item = &'a Gpu>) -> BTreeSet<(u32, u32)> {
    gpus.flat_map(|g| g.nvml_processes.iter().map(move |p| (g.index, p.pid)))
        .collect()
}

/// One GPU's fresh memory and listings, accounted to the PIDs that were
/// visible before (the process set is unchanged).
fn fold_gpu(g: &mut Gpu, fresh: &Gpu, not_visible: &BTreeSet<u32>) {
    let visible: BTreeSet<u32> = g
        .nvml_processes
        .iter()
        .map(|p| p.pid)
        .filter(|pid| !not_visible.contains(pid))
        .collect();
    g.memory = fresh.memory;
    g.nvml_processes = fresh.nvml_processes.clone();
    // The utilisation of the window just read: idle or busy now.
    if let (Some(e), Some(f)) = (g.driver_evidence.as_mut(), fresh.driver_evidence.as_ref()) {
        e.process_utilization = f.process_utilization.clone();
        e.utilization_window = f.utilization_window;
    }
    set_accounting(g, |pid| visible.contains(&pid));
}
