//! What a GPU's memory says: whether it can be read (NVML for NVIDIA's,
//! sysfs for DRM GPUs), what no process accounts for, and what part of
//! the view is missing.

use super::{pid_list, processes};
use crate::model::{Gpu, Snapshot, Vendor};

/// Why this GPU's memory cannot be read, if it cannot: NVML's for
/// NVIDIA's, sysfs's for the others (only amdgpu publishes its use there;
/// see [`holders_only_driver`]).
pub(super) fn memory_unknown(s: &Snapshot, g: &Gpu) -> Option<String> {
    if g.vendor != Vendor::Nvidia {
        return (!g.memory.known && holders_only_driver(g).is_none()).then(|| {
            format!(
                "its memory could not be read from sysfs (mem_info_vram_total and \
                 mem_info_vram_used of {})",
                g.pci_bus_id
            )
        });
    }
    if !s.nvml.available {
        return Some(format!(
            "NVML is unavailable, so its memory cannot be read ({})",
            s.nvml.error.as_deref().unwrap_or("unknown error")
        ));
    }
    if !g.memory.known {
        let why = s
            .unavailable
            .iter()
            .find(|u| u.gpu == Some(g.index) && u.what == "memory")
            .map_or("NVML did not report it".to_string(), |u| u.why.clone());
        return Some(format!("its memory could not be read: {why}"));
    }
    None
}

/// The driver of a GPU found through DRM whose used memory no sysfs file
/// tells (i915, xe and any DRM driver but amdgpu): its verdict rests on who
/// holds it, and says so. None for NVIDIA's GPUs (NVML tells) and AMD's.
pub fn holders_only_driver(g: &Gpu) -> Option<&str> {
    if g.vendor == Vendor::Nvidia {
        return None;
    }
    match g.driver.as_deref() {
        Some("amdgpu") => None,
        Some(d) => Some(d),
        None if g.vendor == Vendor::Amd => None,
        None => Some("its driver"),
    }
}

/// Memory used on `g` that no process accounts for, not even one NVML lists
/// from another PID namespace or under a PID that now names another process.
pub fn unexplained_bytes(s: &Snapshot, g: &Gpu) -> u64 {
    let v = &s.visibility;
    let listed_elsewhere = g.listed_bytes(|pid| {
        v.nvml_pids_not_visible.contains(&pid) || v.nvml_pids_stale.contains(&pid)
    });
    g.memory.unaccounted_bytes.saturating_sub(listed_elsewhere)
}

/// Why memory that NVML attributes to no visible process cannot be called
/// a driver leak: the parts of the view that are missing. Empty when the
/// view is complete.
pub fn blind_spots(s: &Snapshot, gpu: u32) -> Vec<String> {
    let mut why = Vec::new();
    if let Some(u) = s
        .unavailable
        .iter()
        .find(|u| u.gpu == Some(gpu) && u.what.ends_with("processes"))
    {
        why.push(format!("NVML's {} list is unavailable ({})", u.what, u.why));
    }
    let amd = s
        .gpus
        .iter()
        .any(|g| g.index == gpu && g.vendor == Vendor::Amd);
    for u in s
        .unavailable
        .iter()
        .filter(|u| amd && u.unplaced == Some(crate::model::Unplaced::KfdVram))
    {
        why.push(format!("{}: {}", u.what, u.why));
    }
    let denied: Vec<String> = s
        .visibility
        .unreadable
        .iter()
        .map(|u| u.pid.to_string())
        .collect();
    if !denied.is_empty() {
        why.push(format!(
            "{} could not be read (PID {})",
            processes(denied.len()),
            pid_list(&denied)
        ));
    }
    if s.visibility.hidepid && !s.visibility.root {
        why.push("/proc is mounted with hidepid: other users' processes are hidden".into());
    }
    why
}
