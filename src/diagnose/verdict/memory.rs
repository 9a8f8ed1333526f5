//! What a GPU's memory says: whether it can be read (NVML for NVIDIA's,
//! sysfs for DRM GPUs), what no process accounts for, and what part of
//! the view is missing.

use crate::model::{BlindSpot, Call, Gpu, MemoryUnknown, Snapshot, Unplaced, Vendor};

/// Why this GPU's memory cannot be read, if it cannot: NVML's for
/// NVIDIA's, sysfs's for the others (only amdgpu publishes its use there;
/// see [`holders_only_driver`]).
pub(super) fn memory_unknown(s: &Snapshot, g: &Gpu) -> Option<MemoryUnknown> {
    if g.vendor != Vendor::Nvidia {
        return (!g.memory.known && holders_only_driver(g).is_none()).then(|| {
            MemoryUnknown::Sysfs {
                pci_bus_id: g.pci_bus_id.clone(),
            }
        });
    }
    if !s.nvml.available {
        return Some(MemoryUnknown::NoNvml {
            error: s.nvml.error.as_ref().map(ToString::to_string),
        });
    }
    if !g.memory.known {
        let error = s
            .unavailable
            .iter()
            .find(|u| u.gpu == Some(g.index) && u.what == Call::Memory)
            .map(|u| u.why.clone());
        return Some(MemoryUnknown::Nvml { failure: error });
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
    let elsewhere: std::collections::HashSet<u32> = (v.nvml_pids_not_visible.iter())
        .chain(&v.nvml_pids_stale)
        .copied()
        .collect();
    let listed_elsewhere = g.listed_bytes(|pid| elsewhere.contains(&pid));
    g.memory.unaccounted_bytes.saturating_sub(listed_elsewhere)
}

/// Why memory that NVML attributes to no visible process cannot be called
/// a driver leak: the parts of the view that are missing. Empty when the
/// view is complete.
pub fn blind_spots(s: &Snapshot, gpu: u32) -> Vec<BlindSpot> {
    let mut why = Vec::new();
    if let Some(u) = s
        .unavailable
        .iter()
        .find(|u| u.gpu == Some(gpu) && matches!(u.what, Call::Processes { .. }))
    {
        why.push(BlindSpot::ProcessList {
            unavailable: u.clone(),
        });
    }
    let amd = s
        .gpus
        .iter()
        .any(|g| g.index == gpu && g.vendor == Vendor::Amd);
    for u in s
        .unavailable
        .iter()
        .filter(|u| amd && u.unplaced == Some(Unplaced::KfdVram))
    {
        why.push(BlindSpot::KfdVram {
            unavailable: u.clone(),
        });
    }
    // DRM memory a holder has that cannot be told: on this GPU, or on
    // some AMD GPU for the KFD's VRAM of a process it cannot place.
    for u in s.unavailable.iter().filter(|u| {
        matches!(u.unplaced, Some(Unplaced::DrmUsage | Unplaced::KfdProcess))
            && (u.gpu == Some(gpu) || (amd && u.gpu.is_none()))
    }) {
        why.push(BlindSpot::DrmMemory {
            unavailable: u.clone(),
        });
    }
    let pids: Vec<u32> = s.visibility.unreadable.iter().map(|u| u.pid).collect();
    if !pids.is_empty() {
        why.push(BlindSpot::Unreadable { pids });
    }
    if s.visibility.hidepid && !s.visibility.root {
        why.push(BlindSpot::Hidepid);
    }
    why
}
