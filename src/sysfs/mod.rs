//! Collection from sysfs, for GPUs that NVML does not see (AMD, Intel and
//! any DRM driver): each DRM card's PCI device, vendor and, where its
//! driver publishes them, its memory total and use; and the VRAM that
//! AMD's KFD (ROCm compute) charges to each process, with the KFD's GPU
//! ids mapped to PCI devices through its topology.
//!
//! The root is a value (`GPUFREE_SYS_ROOT`, default `/sys`), so the tests
//! read fixture trees. Every read that fails leaves its value absent: a
//! total that cannot be read is unknown, never zero.

mod kfd;
mod nodes;

pub use kfd::{kfd_gpus, kfd_vram, per_process_device_bytes, KfdVram};
pub use nodes::{dri_devices, DriDevice};

use crate::model::Vendor;
use std::path::Path;

/// One DRM card (`class/drm/cardN`) backed by a PCI device.
///
/// Memory, by driver: amdgpu publishes its VRAM's total and use
/// (`mem_info_vram_total`, `mem_info_vram_used`); xe publishes each
/// tile's physical VRAM (`tileN/physical_vram_size_bytes`) but not its
/// use; i915 publishes neither in mainline sysfs (its local memory is
/// told only through its query ioctl), so both stay unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrmCard {
    /// N of `cardN` (its `/dev/dri/cardN` node).
    pub card: u32,
    /// The PCI slot (`0000:c3:00.0`): what a DRM client's `drm-pdev` names.
    pub pdev: String,
    /// Its vendor.
    pub vendor: Vendor,
    /// Device memory in bytes: amdgpu's `mem_info_vram_total`, else xe's
    /// `physical_vram_size_bytes` summed over its tiles (unknown if one
    /// tile's cannot be read). None for i915 and other drivers.
    pub vram_total: Option<u64>,
    /// Device memory used in bytes: amdgpu's `mem_info_vram_used`. None
    /// (unknown, never 0) for Intel's drivers, which do not publish it.
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
                vram_total: number(&device.join("mem_info_vram_total"))
                    .or_else(|| xe_tiles_vram(&device)),
                vram_used: number(&device.join("mem_info_vram_used")),
                pdev,
            })
        })
        .collect();
    cards.sort_by_key(|c| c.card);
    cards
}

/// xe's VRAM: `tileN/physical_vram_size_bytes` of the PCI device, summed
/// over its tiles; None without tiles or when one tile's cannot be read.
fn xe_tiles_vram(device: &Path) -> Option<u64> {
    let tiles: Vec<_> = std::fs::read_dir(device)
        .ok()?
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("tile"))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    if tiles.is_empty() {
        return None;
    }
    tiles.iter().try_fold(0u64, |sum, t| {
        sum.checked_add(number(&t.path().join("physical_vram_size_bytes"))?)
    })
}

/// Whether `name` is a PCI slot, `domain:bus:device.function` in hex,
/// with a domain of 4 or more digits (`0000:03:00.0`, `10000:03:00.0`,
/// as Linux names devices behind a VMD bridge).
pub fn pci_slot(name: &str) -> bool {
    let hex = |s: &str, len: std::ops::RangeInclusive<usize>| {
        len.contains(&s.len()) && s.bytes().all(|c| c.is_ascii_hexdigit())
    };
    let mut parts = name.split(':');
    let (Some(domain), Some(bus), Some(devfn), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let Some((device, function)) = devfn.split_once('.') else {
        return false;
    };
    hex(domain, 4..=8)
        && hex(bus, 2..=2)
        && hex(device, 2..=2)
        && matches!(function.as_bytes(), [b'0'..=b'7'])
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// A file that holds one unsigned number, in decimal or `0x` hex (xe
/// writes some sizes in hex).
fn number(path: &Path) -> Option<u64> {
    let text = read(path)?;
    let text = text.trim();
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

#[cfg(test)]
mod tests;
