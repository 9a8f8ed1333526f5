//! Collection from sysfs, for GPUs that NVML does not see (AMD, Intel and
//! any DRM driver): each DRM card's PCI device, vendor and, where its
//! driver publishes them (amdgpu), its memory total and use; and the VRAM
//! that AMD's KFD (ROCm compute) charges to each process, with the KFD's
//! GPU ids mapped to PCI devices through its topology.
//!
//! The root is a value (`GPUFREE_SYS_ROOT`, default `/sys`), so the tests
//! read fixture trees. Every read that fails leaves its value absent: a
//! total that cannot be read is unknown, never zero.

mod nodes;

pub use nodes::{dri_devices, DriDevice};

use crate::model::Vendor;
use std::collections::BTreeMap;
use std::path::Path;

/// One DRM card (`class/drm/cardN`) backed by a PCI device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrmCard {
    /// N of `cardN` (its `/dev/dri/cardN` node).
    pub card: u32,
    /// The PCI slot (`0000:c3:00.0`): what a DRM client's `drm-pdev` names.
    pub pdev: String,
    /// Its vendor.
    pub vendor: Vendor,
    /// Device memory in bytes (amdgpu's `mem_info_vram_total`).
    pub vram_total: Option<u64>,
    /// Device memory used in bytes (amdgpu's `mem_info_vram_used`).
    pub vram_used: Option<u64>,
}

/// Every `class/drm/cardN` under `sys_root` whose `device` is a PCI device,
/// by card number (connectors such as `card0-DP-1` are not cards).
pub fn drm_cards(sys_root: &Path) -> Vec<DrmCard> {
    let Ok(entries) = std::fs::read_dir(sys_root.join("class/drm")) else {
        return Vec::new();
    };
    let mut cards: Vec<DrmCard> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let card: u32 = name.to_str()?.strip_prefix("card")?.parse().ok()?;
            let device = e.path().join("device");
            let pdev = std::fs::read_link(&device)
                .ok()?
                .file_name()?
                .to_str()?
                .to_string();
            pci_slot(&pdev).then(|| DrmCard {
                card,
                vendor: Vendor::from_pci_id(&read(&device.join("vendor")).unwrap_or_default()),
                vram_total: number(&device.join("mem_info_vram_total")),
                vram_used: number(&device.join("mem_info_vram_used")),
                pdev,
            })
        })
        .collect();
    cards.sort_by_key(|c| c.card);
    cards
}

/// VRAM that the KFD charges to each process, per PCI device:
/// `class/kfd/kfd/proc/PID/vram_GPUID`, with GPU ids mapped to devices by
/// [`kfd_gpus`]. PIDs are as the kernel's init namespace numbers them.
pub fn kfd_vram(sys_root: &Path) -> BTreeMap<u32, BTreeMap<String, u64>> {
    let gpus = kfd_gpus(sys_root);
    let mut out: BTreeMap<u32, BTreeMap<String, u64>> = BTreeMap::new();
    let Ok(procs) = std::fs::read_dir(sys_root.join("class/kfd/kfd/proc")) else {
        return out;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(files) = std::fs::read_dir(p.path()) else {
            continue;
        };
        for f in files.flatten() {
            let name = f.file_name();
            let Some(gpu_id) = name.to_str().and_then(|n| n.strip_prefix("vram_")) else {
                continue;
            };
            let (Some(pdev), Some(bytes)) = (
                gpu_id.parse::<u32>().ok().and_then(|id| gpus.get(&id)),
                number(&f.path()),
            ) else {
                continue;
            };
            let slot = out.entry(pid).or_default().entry(pdev.clone()).or_insert(0);
            *slot = slot.saturating_add(bytes);
        }
    }
    out
}

/// The KFD's GPU ids and their PCI slots, from its topology
/// (`class/kfd/kfd/topology/nodes/N/gpu_id` and the node's `properties`:
/// `domain` and `location_id`, which is bus << 8 | device << 3 | function).
/// CPU nodes (gpu_id 0) are left out.
pub fn kfd_gpus(sys_root: &Path) -> BTreeMap<u32, String> {
    let Ok(nodes) = std::fs::read_dir(sys_root.join("class/kfd/kfd/topology/nodes")) else {
        return BTreeMap::new();
    };
    nodes
        .flatten()
        .filter_map(|n| {
            let id = number(&n.path().join("gpu_id")).and_then(|i| u32::try_from(i).ok())?;
            let props = read(&n.path().join("properties"))?;
            let field = |key: &str| {
                props.lines().find_map(|l| {
                    let (k, v) = l.split_once(' ')?;
                    (k == key).then(|| v.trim().parse::<u32>().ok())?
                })
            };
            let (domain, location) = (field("domain")?, field("location_id")?);
            (id != 0).then(|| {
                (
                    id,
                    format!(
                        "{domain:04x}:{:02x}:{:02x}.{:x}",
                        location >> 8,
                        (location >> 3) & 0x1f,
                        location & 0x7
                    ),
                )
            })
        })
        .collect()
}

/// Whether `name` is a PCI slot (`dddd:bb:dd.f`).
fn pci_slot(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && b.iter()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// A file that holds one unsigned number.
fn number(path: &Path) -> Option<u64> {
    read(path)?.trim().parse().ok()
}

#[cfg(test)]
mod tests;
