//! AMD's KFD (the ROCm compute driver) in sysfs: the VRAM it charges to
//! each process, and its topology, which maps its GPU ids to PCI devices.

use super::{drm_cards, number, read};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// VRAM that the KFD charges to processes.
///
/// The KFD's VRAM and the fdinfo of the process's amdgpu render fd tell
/// the same memory twice: ROCm hands the KFD the render node's GPU VM
/// (AMDKFD_IOC_ACQUIRE_VM), so the KFD's buffers live in that VM and
/// amdgpu's fdinfo counts them too. A join of the two must take the
/// larger per (pid, device), never the sum: [`per_process_device_bytes`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KfdVram {
    /// PID → PCI slot → bytes.
    pub by_device: BTreeMap<u32, BTreeMap<String, u64>>,
    /// PID → KFD GPU id → bytes, for GPU ids its topology does not map to
    /// a PCI device: memory held on a GPU that cannot be named, never
    /// dropped.
    pub unmapped: BTreeMap<u32, BTreeMap<u32, u64>>,
    /// PCI slot → a KFD GPU id the topology maps to it, to name it by.
    pub gpu_ids: BTreeMap<String, u32>,
}

/// VRAM that the KFD charges to each process
/// (`class/kfd/kfd/proc/PID/vram_GPUID`), per PCI device where [`kfd_gpus`]
/// maps the GPU id (the partitions of one device add up), else per GPU id
/// in [`KfdVram::unmapped`]. PIDs are as
/// the kernel's init namespace numbers them. A file that holds no number
/// is left out (unknown, not 0).
pub fn kfd_vram(sys_root: &Path) -> KfdVram {
    let gpus = kfd_gpus(sys_root);
    let mut out = KfdVram::default();
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
            let Some(gpu_id) = name
                .to_str()
                .and_then(|n| n.strip_prefix("vram_"))
                .and_then(|id| id.parse::<u32>().ok())
            else {
                continue;
            };
            let Some(bytes) = number(&f.path()) else {
                continue;
            };
            match gpus.get(&gpu_id) {
                Some(pdev) => {
                    out.gpu_ids.entry(pdev.clone()).or_insert(gpu_id);
                    let sum = out.by_device.entry(pid).or_default();
                    let sum = sum.entry(pdev.clone()).or_insert(0);
                    *sum = sum.saturating_add(bytes);
                }
                None => {
                    out.unmapped.entry(pid).or_default().insert(gpu_id, bytes);
                }
            }
        }
    }
    out
}

/// The KFD's GPU ids and their PCI slots, from its topology
/// (`class/kfd/kfd/topology/nodes/N/gpu_id` and the node's `properties`).
///
/// `location_id` is the PCI device id, bus << 8 | device << 3 | function,
/// but on parts split into partitions (MI300's CPX and the like) the
/// driver ORs the partition's node id into it (into the function bits, or
/// in some kernels bits 28 and up), so: the bus is masked to 8 bits, and
/// a slot that is not a DRM card's falls back to function 0 of the same
/// (domain, bus, device) when that one is, the device whose `drm-pdev`
/// the partitions' clients name. A node without `domain` (kernels before
/// it was added) is in domain 0. CPU nodes (gpu_id 0) are left out.
pub fn kfd_gpus(sys_root: &Path) -> BTreeMap<u32, String> {
    let Ok(nodes) = std::fs::read_dir(sys_root.join("class/kfd/kfd/topology/nodes")) else {
        return BTreeMap::new();
    };
    let cards: BTreeSet<String> = drm_cards(sys_root).into_iter().map(|c| c.pdev).collect();
    nodes
        .flatten()
        .filter_map(|n| {
            let id = number(&n.path().join("gpu_id")).and_then(|i| u32::try_from(i).ok())?;
            let props = read(&n.path().join("properties"))?;
            let field = |key: &str| {
                props.lines().find_map(|l| {
                    let (k, v) = l.split_once(' ')?;
                    (k == key).then(|| v.trim().parse::<u64>().ok())?
                })
            };
            let location = field("location_id")?;
            let domain = field("domain").unwrap_or(0);
            (id != 0).then(|| (id, slot(&cards, domain, location)))
        })
        .collect()
}

/// The PCI slot of a KFD node at `domain` and `location_id`: the exact
/// slot when it is a card's or no card has function 0 there, else
/// function 0.
fn slot(cards: &BTreeSet<String>, domain: u64, location: u64) -> String {
    let (bus, device) = ((location >> 8) & 0xff, (location >> 3) & 0x1f);
    let at = |function: u64| format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}");
    let exact = at(location & 0x7);
    let first = at(0);
    if !cards.contains(&exact) && cards.contains(&first) {
        first
    } else {
        exact
    }
}

/// Each process's device memory per PCI device, joining the KFD's VRAM
/// (`kfd`, as [`KfdVram::by_device`]) with what its DRM clients report
/// (`drm`: (pid, pdev, device bytes) once per distinct client a process
/// holds, as `proc::drm::clients` counts them). The clients of one process
/// on one device add up (each is its own memory); then, since the KFD's
/// buffers are in the amdgpu client's VM and counted by both, the larger
/// of the two is taken, never their sum.
pub fn per_process_device_bytes(
    kfd: &BTreeMap<u32, BTreeMap<String, u64>>,
    drm: impl IntoIterator<Item = (u32, String, u64)>,
) -> BTreeMap<(u32, String), u64> {
    let mut out: BTreeMap<(u32, String), u64> = BTreeMap::new();
    for (pid, pdev, bytes) in drm {
        let sum = out.entry((pid, pdev)).or_insert(0);
        *sum = sum.saturating_add(bytes);
    }
    for (&pid, devices) in kfd {
        for (pdev, &bytes) in devices {
            let most = out.entry((pid, pdev.clone())).or_insert(0);
            *most = (*most).max(bytes);
        }
    }
    out
}
