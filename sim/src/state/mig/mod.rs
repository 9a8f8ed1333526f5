//! MIG in the state file (SPEC.md: `mig_mode`, `mig`) and what a GPU in
//! MIG mode reports: each MIG device (a compute instance) its own
//! processes and memory, and the parent GPU every instance's processes,
//! with their GPU and compute instance ids, and the sum of their memory
//! over its baseline and leak, as the real driver does.

use super::{view_device, Device, GoneLog, Process, ProcessKind};
use serde::{Deserialize, Serialize};

/// The most MIG devices one GPU has (an H100/H200 in 7 × 1g slices).
pub const MAX_MIG: usize = 7;

/// One MIG device of a GPU in MIG mode.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MigDevice {
    /// `MIG-...` UUID.
    pub uuid: String,
    /// `nvmlDeviceGetGpuInstanceId`.
    pub gpu_instance_id: u32,
    /// `nvmlDeviceGetComputeInstanceId`.
    #[serde(default)]
    pub compute_instance_id: u32,
    /// The GPU instance profile, e.g. `1g.18gb` (it ends the MIG device's
    /// name, as on a real driver: `NVIDIA H200 MIG 1g.18gb`).
    #[serde(default)]
    pub profile: String,
    /// The instance's memory.
    pub memory_total_bytes: u64,
    /// Processes with memory on this instance, as a device's.
    #[serde(default)]
    pub processes: Vec<Process>,
}

/// What a handle names: the whole GPU, or one of its MIG devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The GPU (in MIG mode: the aggregate of its instances).
    Whole,
    /// MIG device N of the GPU.
    Mig(usize),
}

/// A process as a list reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reported {
    /// PID.
    pub pid: u32,
    /// Its memory.
    pub used_bytes: u64,
    /// Which list.
    pub kind: ProcessKind,
    /// `gpuInstanceId`, None (0xFFFFFFFF) outside MIG.
    pub gpu_instance_id: Option<u32>,
    /// `computeInstanceId`, None (0xFFFFFFFF) outside MIG.
    pub compute_instance_id: Option<u32>,
}

/// What a GPU or one of its MIG devices reports at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetView {
    /// The reported processes.
    pub processes: Vec<Reported>,
    /// Used memory.
    pub used_bytes: u64,
    /// Total memory.
    pub total_bytes: u64,
}

/// Checks a device's MIG fields: instances only in MIG mode, at most
/// [`MAX_MIG`], each with a UUID and distinct ids; no whole-GPU processes
/// in MIG mode.
pub(super) fn check(d: &Device) -> Result<(), String> {
    if d.mig_mode != Some(true) {
        if d.mig.is_empty() {
            return Ok(());
        }
        return Err("mig devices need \"mig_mode\": true".into());
    }
    if !d.processes.is_empty() {
        return Err("in MIG mode processes belong to mig[].processes".into());
    }
    if d.mig.len() > MAX_MIG {
        return Err(format!("more than {MAX_MIG} mig devices"));
    }
    for (j, m) in d.mig.iter().enumerate() {
        if m.uuid.is_empty() {
            return Err(format!("mig device {j} needs a uuid"));
        }
        let ids = (m.gpu_instance_id, m.compute_instance_id);
        let dup = d.mig[..j]
            .iter()
            .any(|o| (o.gpu_instance_id, o.compute_instance_id) == ids || o.uuid == m.uuid);
        if dup {
            return Err(format!("mig device {j} repeats another's uuid or ids"));
        }
    }
    Ok(())
}

/// An instance as a device of its own (no baseline, no leak; the parent's
/// release delay), so that it follows the same visibility rules.
fn as_device(parent: &Device, m: &MigDevice) -> Device {
    Device {
        memory_total_bytes: m.memory_total_bytes,
        memory_baseline_bytes: 0,
        leaked_bytes: 0,
        processes: m.processes.clone(),
        mig_mode: None,
        mig: Vec::new(),
        errors: Default::default(),
        hang_ms: Default::default(),
        ..parent.clone()
    }
}

fn instance_view(
    parent: &Device,
    m: &MigDevice,
    now_ms: u64,
    alive: &dyn Fn(u32, Option<u64>) -> bool,
    log: &mut GoneLog,
    changed: &mut bool,
) -> TargetView {
    let v = view_device(&as_device(parent, m), now_ms, alive, log, changed);
    TargetView {
        processes: v
            .processes
            .into_iter()
            .map(|(pid, used_bytes, kind)| Reported {
                pid,
                used_bytes,
                kind,
                gpu_instance_id: Some(m.gpu_instance_id),
                compute_instance_id: Some(m.compute_instance_id),
            })
            .collect(),
        used_bytes: v.used_bytes,
        total_bytes: m.memory_total_bytes,
    }
}

/// What `target` of `dev` reports now (see `view_device` for `alive`,
/// `log` and `changed`). None for a MIG device that does not exist.
pub fn view_target(
    dev: &Device,
    target: Target,
    now_ms: u64,
    alive: &dyn Fn(u32, Option<u64>) -> bool,
    log: &mut GoneLog,
    changed: &mut bool,
) -> Option<TargetView> {
    if let Target::Mig(j) = target {
        let m = dev.mig.get(j).filter(|_| dev.mig_mode == Some(true))?;
        return Some(instance_view(dev, m, now_ms, alive, log, changed));
    }
    let whole = view_device(dev, now_ms, alive, log, changed);
    let mut out = TargetView {
        processes: whole
            .processes
            .into_iter()
            .map(|(pid, used_bytes, kind)| Reported {
                pid,
                used_bytes,
                kind,
                gpu_instance_id: None,
                compute_instance_id: None,
            })
            .collect(),
        used_bytes: whole.used_bytes,
        total_bytes: dev.memory_total_bytes,
    };
    if dev.mig_mode == Some(true) {
        for m in &dev.mig {
            let v = instance_view(dev, m, now_ms, alive, log, changed);
            out.used_bytes = out.used_bytes.saturating_add(v.used_bytes);
            out.processes.extend(v.processes);
        }
        out.used_bytes = out.used_bytes.min(dev.memory_total_bytes);
    }
    Some(out)
}

#[cfg(test)]
mod tests;
