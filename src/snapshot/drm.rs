//! GPUs that NVML does not see (AMD, Intel, any DRM driver) joined into a
//! snapshot: a GPU for each DRM card that is not NVIDIA's (indexes after
//! NVML's), its DRM nodes mapped to it by PCI slot, its memory from sysfs,
//! and each process's memory on it from its DRM clients' fdinfo and the
//! KFD (AMD compute).
//!
//! A DRM client shared by several fds or processes (fork, dup,
//! SCM_RIGHTS) is one client: each process that shares it shows its
//! memory, and the GPU counts it once. The KFD and amdgpu's fdinfo count
//! the same buffers of a process twice over, so a process's memory on a
//! GPU is the larger of the two, never their sum.

use super::select::normalize_pci;
use crate::model::Gpu;
use crate::model::{Call, DrmClient, Failure, Memory, Unavailable, Unplaced, Vendor};
use crate::nvml::NvmlReport;
use crate::proc::drm;
use crate::proc::nodes::{NodeKind, NodeSet};
use crate::proc::scan::Seen;
use crate::sysfs::{self, DriDevice, DrmCard};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// What sysfs says of the host's DRM devices, read once per collection.
#[derive(Debug, Default)]
pub(super) struct DrmHost {
    cards: Vec<DrmCard>,
    /// By name under `/dev/dri` (`card1`, `renderD128`).
    nodes: BTreeMap<String, DriDevice>,
    /// The KFD's VRAM per process, placed by PCI slot or by GPU id.
    kfd: sysfs::KfdVram,
}

impl DrmHost {
    /// Reads `sys_root`: cards, their nodes, the KFD's processes.
    pub(super) fn read(sys_root: &Path) -> DrmHost {
        DrmHost {
            cards: sysfs::drm_cards(sys_root),
            nodes: sysfs::dri_devices(sys_root),
            kfd: sysfs::kfd_vram(sys_root),
        }
    }

    /// The KFD's VRAM that no GPU can be named for, as calls that could
    /// not be answered: memory somebody holds on some AMD GPU, which keeps
    /// the AMD GPUs' unaccounted memory from being called the driver's.
    pub(super) fn unplaced(&self) -> Vec<Unavailable> {
        self.kfd
            .unmapped
            .iter()
            .flat_map(|(pid, ids)| {
                ids.iter().map(move |(id, bytes)| Unavailable {
                    what: Call::KfdVram {
                        pid: *pid,
                        gpu_id: *id,
                    },
                    gpu: None,
                    why: Failure::KfdUnmapped {
                        gpu_id: *id,
                        bytes: *bytes,
                    },
                    unplaced: Some(Unplaced::KfdVram),
                })
            })
            .collect()
    }
}

/// Adds to an NVML reading the DRM GPUs a collection adds, with their
/// memory from sysfs now (the same indexes: the same cards after the same
/// GPUs), for the cheap looks of `wait` and kill's release wait.
pub(super) fn memory_now(report: &mut NvmlReport, sys_root: &Path, dev: &NodeSet) {
    let host = DrmHost {
        cards: sysfs::drm_cards(sys_root),
        nodes: sysfs::dri_devices(sys_root),
        kfd: sysfs::KfdVram::default(),
    };
    let mut all = if report.status.available {
        report.gpus.clone()
    } else {
        super::refused::gpus_without_nvml(dev)
    };
    let ours = add_gpus(&mut all, &host, dev).ours;
    report
        .gpus
        .extend(all.into_iter().filter(|g| ours.contains(&g.index)));
}

/// The GPUs of a snapshot by normalized PCI slot, and the DRM nodes'.
pub(super) struct DrmGpus {
    by_slot: BTreeMap<String, u32>,
    /// The GPUs whose memory comes from DRM clients (not NVML's).
    ours: BTreeSet<u32>,
    /// Node name under `/dev/dri` → normalized PCI slot.
    nodes: BTreeMap<String, String>,
}

impl DrmGpus {
    /// The GPU a DRM node (`dri/card1`, relative to the device directory)
    /// belongs to, when sysfs says.
    pub(super) fn of_node(&self, rel: &str) -> Option<u32> {
        let slot = self.nodes.get(rel.strip_prefix("dri/")?)?;
        self.by_slot.get(slot).copied()
    }

    fn of_slot(&self, pdev: &str) -> Option<u32> {
        self.by_slot.get(&normalize_pci(pdev)?).copied()
    }
}

/// Appends a GPU for each DRM card that is not NVIDIA's (NVML describes
/// those), that no GPU has already, and whose render node is in the device
/// directory: a card with no render node is a display controller (a
/// server's BMC graphics, a VM's console), not a GPU anything computes on;
/// and a render node elsewhere (a test's device directory) is not this
/// scan's. Maps every GPU's PCI slot.
pub(super) fn add_gpus(gpus: &mut Vec<Gpu>, host: &DrmHost, dev: &NodeSet) -> DrmGpus {
    let rendering: BTreeSet<String> = dev
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::DriRender)
        .filter_map(|n| host.nodes.get(n.rel.strip_prefix("dri/")?))
        .filter_map(|d| normalize_pci(&d.pdev))
        .collect();
    let mut by_slot: BTreeMap<String, u32> = gpus
        .iter()
        .filter_map(|g| Some((normalize_pci(&g.pci_bus_id)?, g.index)))
        .collect();
    let mut ours = BTreeSet::new();
    let mut next = gpus.iter().map(|g| g.index + 1).max().unwrap_or(0);
    for card in &host.cards {
        let Some(slot) = normalize_pci(&card.pdev) else {
            continue;
        };
        if card.vendor == Vendor::Nvidia
            || by_slot.contains_key(&slot)
            || !rendering.contains(&slot)
        {
            continue;
        }
        let driver = host
            .nodes
            .get(&format!("card{}", card.card))
            .and_then(|d| d.driver.clone());
        gpus.push(drm_gpu(next, card, driver));
        by_slot.insert(slot, next);
        ours.insert(next);
        next += 1;
    }
    let nodes = host
        .nodes
        .iter()
        .filter_map(|(name, d)| Some((name.clone(), normalize_pci(&d.pdev)?)))
        .collect();
    DrmGpus {
        by_slot,
        ours,
        nodes,
    }
}

fn drm_gpu(index: u32, card: &DrmCard, driver: Option<String>) -> Gpu {
    let vendor = match card.vendor {
        Vendor::Amd => "AMD",
        Vendor::Intel => "Intel",
        _ => "DRM",
    };
    Gpu {
        index,
        name: match &driver {
            Some(d) => format!("{vendor} GPU ({d})"),
            None => format!("{vendor} GPU"),
        },
        pci_bus_id: card.pdev.clone(),
        vendor: card.vendor,
        driver,
        memory: Memory {
            total_bytes: card.vram_total.unwrap_or(0),
            used_bytes: card.vram_used.unwrap_or(0),
            known: card.vram_total.is_some() && card.vram_used.is_some(),
            ..Memory::default()
        },
        ..Gpu::default()
    }
}

/// PID → GPU → bytes (None: some of it could not be read).
pub(super) type ByPid = BTreeMap<u32, BTreeMap<u32, Option<u64>>>;

/// Each process's memory on the DRM GPUs (its distinct clients' device
/// memory, or the KFD's VRAM where that is larger), and each DRM GPU's
/// memory held by the processes seen, every shared client counted once.
/// `unread`: the processes the scan could not read (already said so);
/// the KFD's VRAM of any other process not seen is memory no holder
/// accounts for, named in [`Held::unknown`] with the KFD's VRAM no GPU
/// can be named for ([`DrmHost::unplaced`]).
pub(super) fn memory<U>(
    seen: &BTreeMap<u32, Seen>,
    unread: &BTreeMap<u32, U>,
    nodes: &NodeSet,
    host: &DrmHost,
    gpus: &DrmGpus,
) -> (ByPid, Held) {
    let mut by_pid = ByPid::new();
    let mut fds = Vec::new();
    for (&pid, s) in seen {
        for f in &s.drm {
            let node = &nodes.nodes[f.node];
            let Some(slot) = gpus.nodes.get(node.rel.strip_prefix("dri/").unwrap_or("")) else {
                continue;
            };
            let Some(gpu) = gpus.by_slot.get(slot).filter(|g| gpus.ours.contains(g)) else {
                continue;
            };
            match &f.info {
                Some(info) => {
                    let mut info = info.clone();
                    // The node's device where the driver names none.
                    info.pdev.get_or_insert_with(|| slot.clone());
                    fds.push((pid, info));
                }
                None => {
                    by_pid.entry(pid).or_default().insert(*gpu, None);
                }
            }
        }
    }
    let mut held = Held {
        unknown: host.unplaced(),
        ..Held::default()
    };
    for client in drm::clients(fds) {
        let Some(gpu) = client.info.pdev.as_deref().and_then(|p| gpus.of_slot(p)) else {
            continue;
        };
        add_client(&mut by_pid, &mut held, gpu, &client);
    }
    add_kfd(&mut by_pid, &mut held, (seen, unread), host, gpus);
    (by_pid, held)
}

/// One distinct client's memory: counted once, in the first process's
/// memory, and in its GPU's; unknown for every process that shares it
/// when its fdinfo says no memory at all.
fn add_client(by_pid: &mut ByPid, held: &mut Held, gpu: u32, client: &drm::Client) {
    let known = !client.info.regions.is_empty();
    let bytes = client.info.device_bytes().unwrap_or(0);
    for (i, &pid) in client.pids.iter().enumerate() {
        let slot = by_pid.entry(pid).or_default().entry(gpu).or_insert(Some(0));
        if !known {
            *slot = None;
        } else if i == 0 {
            *slot = slot.map(|b| b.saturating_add(bytes));
        }
        held.clients.entry(pid).or_default().push(DrmClient {
            gpu,
            driver: client.info.driver.clone(),
            client_id: client.info.client_id,
            device_bytes: bytes,
            memory_unknown: !known,
            shared_with: client.pids.iter().copied().filter(|p| *p != pid).collect(),
        });
    }
    if !known {
        held.unknown.push(Unavailable {
            what: Call::DrmUsage {
                pid: client.pids.first().copied().unwrap_or(0),
                client_id: client.info.client_id,
            },
            gpu: Some(gpu),
            why: Failure::DrmNoUsage {
                driver: client.info.driver.clone(),
            },
            unplaced: Some(Unplaced::DrmUsage),
        });
    }
    let shared = client.info.device_shared_bytes().unwrap_or(0);
    let total = held.by_gpu.entry(gpu).or_default();
    *total = total.saturating_add(bytes);
    let total = held.shared.entry(gpu).or_default();
    *total = total.saturating_add(shared);
}

/// What the processes seen hold on the DRM GPUs.
#[derive(Debug, Default)]
pub(super) struct Held {
    /// Per GPU, every client and the KFD's VRAM counted once.
    pub(super) by_gpu: BTreeMap<u32, u64>,
    /// Per GPU, what its clients say of their memory is shared with other
    /// clients (`drm-shared-*`): in `by_gpu` once per sharer.
    pub(super) shared: BTreeMap<u32, u64>,
    /// Per PID, its clients.
    pub(super) clients: BTreeMap<u32, Vec<DrmClient>>,
    /// Memory held on the DRM GPUs that cannot be told or placed: a client
    /// whose fdinfo says no memory, the KFD's VRAM of a process not seen
    /// or on a PCI device that is no GPU.
    pub(super) unknown: Vec<Unavailable>,
}

/// The KFD's VRAM: a process's memory on a GPU is the larger of its
/// clients' and the KFD's (they count the same buffers), and the GPU
/// gains what the KFD counts beyond the clients. VRAM of a process not
/// seen (and not unreadable, which is said already), or on a PCI device
/// that is none of these GPUs, is named in [`Held::unknown`].
fn add_kfd<U>(
    by_pid: &mut ByPid,
    held: &mut Held,
    (seen, unread): (&BTreeMap<u32, Seen>, &BTreeMap<u32, U>),
    host: &DrmHost,
    gpus: &DrmGpus,
) {
    for (&pid, devices) in host
        .kfd
        .by_device
        .iter()
        .filter(|(p, _)| !unread.contains_key(p))
    {
        for (pdev, &kfd) in devices {
            let gpu = gpus.of_slot(pdev).filter(|g| gpus.ours.contains(g));
            let gpu_id = host.kfd.gpu_ids.get(pdev).copied().unwrap_or(0);
            let unknown = |why, unplaced| Unavailable {
                what: Call::KfdVram { pid, gpu_id },
                gpu,
                why,
                unplaced: Some(unplaced),
            };
            let Some(gpu) = gpu else {
                let why = Failure::KfdNotAGpu {
                    pdev: pdev.clone(),
                    bytes: kfd,
                };
                held.unknown.push(unknown(why, Unplaced::KfdVram));
                continue;
            };
            if !seen.contains_key(&pid) {
                let why = Failure::KfdProcessUnseen { bytes: kfd };
                held.unknown.push(unknown(why, Unplaced::KfdProcess));
                continue;
            }
            let slot = by_pid.entry(pid).or_default().entry(gpu).or_insert(Some(0));
            let clients = slot.unwrap_or(0);
            if kfd > clients {
                let total = held.by_gpu.entry(gpu).or_default();
                *total = total.saturating_add(kfd - clients);
                if slot.is_some() {
                    *slot = Some(kfd);
                }
            }
        }
    }
}

/// Sets a DRM GPU's accounting: what the processes seen hold, and the
/// rest of the used memory unaccounted.
pub(super) fn account(gpus: &mut [Gpu], ours: &DrmGpus, held: &Held) {
    for g in gpus.iter_mut().filter(|g| ours.ours.contains(&g.index)) {
        let accounted = held.by_gpu.get(&g.index).copied().unwrap_or(0);
        g.memory.accounted_bytes = accounted;
        g.memory.unaccounted_bytes = g.memory.used_bytes.saturating_sub(accounted);
        g.memory.shared_bytes = held.shared.get(&g.index).copied().unwrap_or(0);
    }
}
