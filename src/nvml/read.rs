//! One read of every GPU through an initialised NVML: memory, the process
//! lists, names and ids, each failed call kept as unavailable with why.

use super::{failure, list, NvmlReport, Shared, PASSES};
use crate::model::{
    Call, FaultReturn, Gpu, Memory, NvmlProcess, NvmlProcessKind, NvmlStatus, Unavailable,
};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

/// `idle_window`: how far back per-process utilisation is asked for.
pub(super) fn read_all(
    nvml: &Nvml,
    status: &NvmlStatus,
    at: &Shared,
    idle_window: std::time::Duration,
) -> NvmlReport {
    PASSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut report = NvmlReport {
        status: status.clone(),
        ..NvmlReport::default()
    };
    at.step("nvmlDeviceGetCount");
    let count = match nvml.device_count() {
        Ok(c) => c,
        Err(e) => {
            report.unavailable.push(Unavailable {
                what: Call::DeviceCount,
                gpu: None,
                why: failure(&e),
                unplaced: None,
            });
            0
        }
    };
    for index in 0..count {
        at.step(format!("nvmlDeviceGetHandleByIndex({index})"));
        match nvml.device_by_index(index) {
            Ok(dev) => {
                let mut gpu = read_gpu(&dev, index, &mut report.unavailable, at);
                if let Some(e) = gpu.driver_evidence.as_mut() {
                    super::health::read_utilization(&dev, index, e, idle_window, at);
                }
                report.gpus.push(gpu);
            }
            Err(e) => report.unavailable.push(Unavailable {
                what: Call::DeviceHandle,
                gpu: Some(index),
                why: failure(&e),
                unplaced: None,
            }),
        }
    }
    report
}

pub(super) fn read_gpu(
    dev: &Device<'_>,
    index: u32,
    unavailable: &mut Vec<Unavailable>,
    at: &Shared,
) -> Gpu {
    let mut faults = Vec::new();
    // The fault is noted under the call's name, the snapshot keeps the call.
    let mut miss = |what: Call, name: &str, e: NvmlError| {
        super::health::note(&mut faults, name, &e);
        unavailable.push(Unavailable {
            what,
            gpu: Some(index),
            why: failure(&e),
            unplaced: None,
        })
    };
    at.step(format!("nvmlDeviceGetName on GPU {index}"));
    let name = dev.name().unwrap_or_else(|e| {
        miss(Call::Name, "name", e);
        String::new()
    });
    at.step(format!("nvmlDeviceGetUUID on GPU {index}"));
    let uuid = dev.uuid().unwrap_or_else(|e| {
        miss(Call::Uuid, "uuid", e);
        String::new()
    });
    at.step(format!("nvmlDeviceGetPciInfo on GPU {index}"));
    let pci_bus_id = dev.pci_info().map(|p| p.bus_id).unwrap_or_else(|e| {
        miss(Call::PciInfo, "pci info", e);
        String::new()
    });
    at.step(format!("nvmlDeviceGetMinorNumber on GPU {index}"));
    let minor_number = dev
        .minor_number()
        .map_err(|e| miss(Call::MinorNumber, "minor number", e))
        .ok();
    at.step(format!("nvmlDeviceGetMemoryInfo on GPU {index}"));
    let memory = match dev.memory_info() {
        Ok(m) => Memory {
            total_bytes: m.total,
            used_bytes: m.used,
            reserved_bytes: m.reserved,
            known: true,
            ..Memory::default()
        },
        Err(e) => {
            miss(Call::Memory, "memory", e);
            Memory::default()
        }
    };
    let nvml_processes = lists(dev, index, unavailable, &mut faults, at);
    let driver_evidence = Some(super::health::read_evidence(dev, index, faults, at));
    let mut gpu = Gpu {
        index,
        uuid,
        name,
        pci_bus_id,
        minor_number,
        memory,
        nvml_processes,
        driver_evidence,
        ..Gpu::default() // vendor: NVIDIA, the only one NVML knows; no verdict yet
    };
    super::mig::read_mig(dev, &mut gpu, unavailable, at);
    gpu
}

/// The compute, graphics and MPS process lists of GPU `index`.
fn lists(
    dev: &Device<'_>,
    index: u32,
    unavailable: &mut Vec<Unavailable>,
    faults: &mut Vec<FaultReturn>,
    at: &Shared,
) -> Vec<NvmlProcess> {
    let mut nvml_processes = Vec::new();
    for kind in [
        NvmlProcessKind::Compute,
        NvmlProcessKind::Graphics,
        NvmlProcessKind::Mps,
    ] {
        at.step(format!(
            "the {} process list of GPU {index}",
            format!("{kind:?}").to_lowercase()
        ));
        nvml_processes.extend(list(dev, kind, index, unavailable, faults));
    }
    nvml_processes
}
