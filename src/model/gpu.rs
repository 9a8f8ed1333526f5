//! One GPU and its MIG devices: what NVML (or sysfs, for a DRM GPU) says
//! of them; the one rule for reading NVML's process lists (a process's
//! largest listing, never a sum); MIG accounting by GPU instance; a GPU
//! narrowed to some of its MIG devices.

use super::Verdict;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One GPU as NVML (or, without NVML, its device node) describes it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Gpu {
    /// NVML index (without NVML: the minor number of `/dev/nvidiaN`).
    pub index: u32,
    /// `GPU-...`; empty when unknown.
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// `00000000:01:00.0` form; empty when unknown.
    pub pci_bus_id: String,
    /// Who made it (SPEC.md: `nvidia|amd|intel|other`).
    #[serde(default)]
    pub vendor: Vendor,
    /// N of `/dev/nvidiaN`, which ties the device node to this GPU.
    pub minor_number: Option<u32>,
    /// The kernel driver of a GPU found through DRM (`amdgpu`, `i915`,
    /// `xe`); None for NVML's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// Memory as NVML reports it, split by attribution (narrowed to MIG
    /// devices, theirs: see `mig_only`).
    pub memory: Memory,
    /// The processes NVML lists on this GPU, visible here or not
    /// (narrowed to MIG devices, their lists).
    pub nvml_processes: Vec<NvmlProcess>,
    /// Whether this GPU is free.
    #[serde(default)]
    pub verdict: Verdict,
    /// MIG mode now: None where the GPU has no MIG (or NVML could not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_mode: Option<bool>,
    /// Its MIG devices, in NVML's MIG index order (empty outside MIG mode).
    #[serde(default)]
    pub mig_devices: Vec<MigDevice>,
    /// Narrowed to some of its MIG devices (`--gpu GPU:MIG`): its memory
    /// and lists are theirs, and so is everything said of it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mig_only: bool,
    /// The driver's own evidence of its health (NVML, and the kernel
    /// log's Xids); None where not read (a DRM GPU, NVML unavailable).
    /// JSON has it whenever it was read, "not supported" included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_evidence: Option<super::DriverEvidence>,
}

/// One MIG device: a compute instance inside a GPU instance, with memory
/// and processes of its own (SPEC.md's `mig_devices`). Selected as
/// `--gpu GPU:INDEX` or by its `MIG-...` UUID.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct MigDevice {
    /// NVML's MIG device index on its GPU.
    pub index: u32,
    /// `MIG-...`; empty when unknown.
    pub uuid: String,
    /// Its name (`NVIDIA H200 MIG 1g.18gb`).
    #[serde(default)]
    pub name: String,
    /// The GPU instance it lives in.
    pub gpu_instance_id: Option<u32>,
    /// Its compute instance inside that GPU instance.
    pub compute_instance_id: Option<u32>,
    /// Its own memory (the GPU instance's), split by attribution.
    pub memory: Memory,
    /// The processes NVML lists on it.
    #[serde(default)]
    pub nvml_processes: Vec<NvmlProcess>,
    /// Whether it is free, judged as a GPU of its own.
    #[serde(default)]
    pub verdict: Verdict,
}

/// PID → the largest memory any listing gives it (see [`Gpu::listed`]).
fn listed(list: &[NvmlProcess]) -> BTreeMap<u32, Option<u64>> {
    let mut listed = BTreeMap::new();
    for p in list {
        // Option's order puts a known size above an unknown one.
        let slot = listed.entry(p.pid).or_insert(p.used_bytes);
        *slot = (*slot).max(p.used_bytes);
    }
    listed
}

fn listed_bytes(list: &[NvmlProcess], which: impl Fn(u32) -> bool) -> u64 {
    listed(list)
        .into_iter()
        .filter(|(pid, _)| which(*pid))
        .filter_map(|(_, bytes)| bytes)
        .fold(0, u64::saturating_add)
}

impl MigDevice {
    /// The memory NVML lists on it for the PIDs that `which` accepts.
    pub fn listed_bytes(&self, which: impl Fn(u32) -> bool) -> u64 {
        listed_bytes(&self.nvml_processes, which)
    }

    /// `GPU:INDEX`, as `--gpu` takes it.
    pub fn label(&self, gpu: u32) -> String {
        super::mig_label(gpu, self.index)
    }
}

/// Who made a GPU, from its PCI vendor id (SPEC.md's `vendor`).
/// The default is NVIDIA: every GPU NVML reports or `/dev/nvidiaN` names.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// 0x10de.
    #[default]
    Nvidia,
    /// 0x1002.
    Amd,
    /// 0x8086.
    Intel,
    /// Anything else, or unreadable.
    Other,
}

impl Vendor {
    /// From sysfs's `vendor` file (`0x1002`).
    pub fn from_pci_id(text: &str) -> Vendor {
        match text.trim() {
            "0x10de" => Vendor::Nvidia,
            "0x1002" => Vendor::Amd,
            "0x8086" => Vendor::Intel,
            _ => Vendor::Other,
        }
    }

    /// SPEC.md's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Vendor::Nvidia => "nvidia",
            Vendor::Amd => "amd",
            Vendor::Intel => "intel",
            Vendor::Other => "other",
        }
    }
}

/// Memory of one GPU, in bytes.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Memory {
    /// Framebuffer size.
    pub total_bytes: u64,
    /// In use, as NVML reports it.
    pub used_bytes: u64,
    /// Used by processes visible in this /proc.
    pub accounted_bytes: u64,
    /// `used - accounted`: held by nobody visible here.
    pub unaccounted_bytes: u64,
    /// Reserved by the driver (memory_info v2), outside `used`.
    pub reserved_bytes: u64,
    /// False when NVML could not report memory for this GPU.
    pub known: bool,
    /// A DRM GPU's: what its clients say of their memory is shared with
    /// other clients (`drm-shared-*`), which `accounted_bytes` may count
    /// more than once (an addition to SPEC.md; absent when 0).
    #[serde(default, skip_serializing_if = "no_bytes")]
    pub shared_bytes: u64,
}

/// Whether a count of bytes is 0 (left out of JSON).
fn no_bytes(n: &u64) -> bool {
    *n == 0
}

/// A process listed by NVML on one GPU.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct NvmlProcess {
    /// PID as NVML reports it.
    pub pid: u32,
    /// Memory used; None when NVML says "not available".
    pub used_bytes: Option<u64>,
    /// Which NVML list reported it.
    pub kind: NvmlProcessKind,
}

/// The NVML process list a process came from.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum NvmlProcessKind {
    /// Compute (CUDA) context.
    Compute,
    /// Graphics context.
    Graphics,
    /// MPS client.
    Mps,
}

impl Gpu {
    /// Each MIG device's memory accounted to the processes NVML lists on
    /// it that `visible` accepts, and the rest unaccounted. The memory of
    /// a MIG device is its GPU instance's, which the compute instances in
    /// it share: a device's memory is accounted to every process of its
    /// GPU instance, never left unaccounted for being a sibling's.
    pub fn account_mig(&mut self, visible: impl Fn(u32) -> bool) {
        let by_gi: Vec<(Option<u32>, u64)> = self
            .mig_devices
            .iter()
            .map(|m| (m.gpu_instance_id, m.listed_bytes(&visible)))
            .collect();
        for m in &mut self.mig_devices {
            let accounted = by_gi
                .iter()
                .filter(|(gi, _)| m.gpu_instance_id.is_some() && *gi == m.gpu_instance_id)
                .map(|(_, b)| *b)
                .fold(0, u64::saturating_add)
                .max(m.listed_bytes(&visible));
            m.memory.accounted_bytes = accounted;
            m.memory.unaccounted_bytes = m.memory.used_bytes.saturating_sub(accounted);
        }
    }

    /// This GPU narrowed to the MIG devices `keep` (by MIG index): its
    /// memory and process lists become theirs, so that everything that
    /// judges or frees a GPU judges or frees just those instances (a GPU
    /// instance's memory counted once, however many of its compute
    /// instances are kept).
    pub fn restrict_to(&mut self, keep: &std::collections::BTreeSet<u32>) {
        self.mig_devices.retain(|m| keep.contains(&m.index));
        self.mig_only = true;
        let mut memory = Memory {
            known: self.mig_devices.iter().all(|m| m.memory.known),
            ..Memory::default()
        };
        let mut counted = std::collections::BTreeSet::new();
        for m in &self.mig_devices {
            // A device of unknown GPU instance counts on its own.
            if m.gpu_instance_id.is_some() && !counted.insert(m.gpu_instance_id) {
                continue;
            }
            memory.total_bytes = memory.total_bytes.saturating_add(m.memory.total_bytes);
            memory.used_bytes = memory.used_bytes.saturating_add(m.memory.used_bytes);
            memory.accounted_bytes = memory
                .accounted_bytes
                .saturating_add(m.memory.accounted_bytes);
        }
        memory.unaccounted_bytes = memory.used_bytes.saturating_sub(memory.accounted_bytes);
        self.memory = memory;
        self.nvml_processes = self
            .mig_devices
            .iter()
            .flat_map(|m| m.nvml_processes.iter().copied())
            .collect();
    }

    /// Each PID NVML lists on this GPU with its memory: the largest any
    /// list gives it (None: listed without a size), never their sum. The
    /// lists describe one process's memory, not shares of it: a process
    /// with compute and graphics contexts is in both (nvidia-smi shows it
    /// once, as C+G), and the driver lists an MPS client in the compute
    /// list as well as the MPS list, with the same bytes in each (seen on
    /// an H200, driver 580.159: 2,564 MiB in both).
    pub fn listed(&self) -> BTreeMap<u32, Option<u64>> {
        listed(&self.nvml_processes)
    }

    /// The memory NVML lists for the PIDs that `which` accepts, each PID
    /// once (see [`Gpu::listed`]).
    pub fn listed_bytes(&self, which: impl Fn(u32) -> bool) -> u64 {
        listed_bytes(&self.nvml_processes, which)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(pid: u32, used_bytes: Option<u64>, kind: NvmlProcessKind) -> NvmlProcess {
        NvmlProcess {
            pid,
            used_bytes,
            kind,
        }
    }

    #[test]
    fn a_process_in_several_lists_is_counted_once() {
        use NvmlProcessKind::{Compute, Graphics, Mps};
        let g = Gpu {
            nvml_processes: vec![
                // An MPS client, in the compute and MPS lists (real H200).
                listing(10, Some(2564 << 20), Compute),
                listing(10, Some(2564 << 20), Mps),
                // C+G; one list without a size.
                listing(11, None, Graphics),
                listing(11, Some(1 << 30), Compute),
                listing(12, None, Compute),
            ],
            ..Gpu::default()
        };
        let listed = g.listed();
        assert_eq!(listed[&10], Some(2564 << 20));
        assert_eq!(listed[&11], Some(1 << 30));
        assert_eq!(listed[&12], None);
        assert_eq!(g.listed_bytes(|_| true), (2564 << 20) + (1 << 30));
        assert_eq!(g.listed_bytes(|pid| pid != 10), 1 << 30);
    }

    #[test]
    fn compute_instances_share_their_gpu_instance_s_memory() {
        // GPU instance 1 (20 GiB) holds compute instances 0 and 1; NVML
        // reports its memory on both MIG devices. P, on ci 0, uses 5 GiB.
        let gib = 1u64 << 30;
        let device = |index, ci, pids: &[u32]| MigDevice {
            index,
            gpu_instance_id: Some(1),
            compute_instance_id: Some(ci),
            memory: Memory {
                total_bytes: 20 * gib,
                used_bytes: 5 * gib,
                known: true,
                ..Memory::default()
            },
            nvml_processes: pids
                .iter()
                .map(|&pid| listing(pid, Some(5 * gib), NvmlProcessKind::Compute))
                .collect(),
            ..MigDevice::default()
        };
        let mut g = Gpu {
            mig_mode: Some(true),
            mig_devices: vec![device(0, 0, &[40]), device(1, 1, &[])],
            ..Gpu::default()
        };
        g.account_mig(|_| true);
        // The idle sibling's memory is P's, not unaccounted.
        assert_eq!(g.mig_devices[1].memory.unaccounted_bytes, 0);
        g.account_mig(|pid| pid != 40);
        assert_eq!(g.mig_devices[1].memory.unaccounted_bytes, 5 * gib);
        g.account_mig(|_| true);
        g.restrict_to(&[0, 1].into());
        assert_eq!(
            (g.memory.total_bytes, g.memory.used_bytes),
            (20 * gib, 5 * gib)
        );
        assert_eq!(g.memory.unaccounted_bytes, 0);
        assert!(g.mig_only);
    }
}
