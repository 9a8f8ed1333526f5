//! MIG through NVML: a GPU's mode and, in MIG mode, each MIG device with
//! its GPU and compute instance ids, memory and processes.

use super::{failure, list, Shared};
use crate::model::MigDevice;
use crate::model::{Call, Gpu, Memory, MigCall, NvmlProcessKind, Step, Unavailable};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::error::{nvml_sym, nvml_try};
use nvml_wrapper::Device;

/// `NVML_DEVICE_MIG_ENABLE`.
const MIG_ENABLE: u32 = 1;

/// Reads the MIG mode of `dev` into `gpu` and, in MIG mode, its MIG
/// devices. A GPU without MIG (NOT_SUPPORTED, or a driver without the
/// call) is left without a mode; any other failure is named.
pub(super) fn read_mig(
    dev: &Device<'_>,
    gpu: &mut Gpu,
    unavailable: &mut Vec<Unavailable>,
    at: &Shared,
) {
    let index = gpu.index;
    let miss = |unavailable: &mut Vec<Unavailable>, what: Call, e: NvmlError| {
        unavailable.push(Unavailable {
            what,
            gpu: Some(index),
            why: failure(&e),
            unplaced: None,
        })
    };
    at.step(Step::on_gpu("nvmlDeviceGetMigMode", index));
    match dev.mig_mode() {
        Ok(mode) => gpu.mig_mode = Some(mode.current == MIG_ENABLE),
        Err(NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_)) => return,
        Err(e) => return miss(unavailable, Call::MigMode, e),
    }
    if gpu.mig_mode != Some(true) {
        return;
    }
    at.step(Step::on_gpu("nvmlDeviceGetMaxMigDeviceCount", index));
    let slots = match dev.mig_device_count() {
        Ok(n) => n,
        Err(e) => return miss(unavailable, Call::MigDeviceCount, e),
    };
    for slot in 0..slots {
        at.step(Step::MigHandle {
            gpu: index,
            mig: slot,
        });
        match dev.mig_device_by_index(slot) {
            Ok(m) => gpu
                .mig_devices
                .push(read_one(&m, index, slot, unavailable, at)),
            // An empty slot: fewer instances than the GPU could hold.
            Err(NvmlError::NotFound) => {}
            Err(e) => miss(unavailable, Call::MigDevice { mig: slot }, e),
        }
    }
    // Accounted to what NVML lists (what is visible here is the
    // snapshot's to say).
    gpu.account_mig(|_| true);
}

/// One MIG device's ids, name, memory and process lists.
fn read_one(
    m: &Device<'_>,
    gpu: u32,
    slot: u32,
    unavailable: &mut Vec<Unavailable>,
    at: &Shared,
) -> MigDevice {
    let mut miss = |call: MigCall, e: NvmlError| {
        unavailable.push(Unavailable {
            what: Call::OfMigDevice { mig: slot, call },
            gpu: Some(gpu),
            why: failure(&e),
            unplaced: None,
        })
    };
    at.step(Step::MigIds { gpu, mig: slot });
    let uuid = m.uuid().unwrap_or_else(|e| {
        miss(MigCall::Uuid, e);
        String::new()
    });
    let name = m.name().unwrap_or_default();
    let gpu_instance_id = instance_id(m, Instance::Gpu)
        .map_err(|e| miss(MigCall::GpuInstanceId, e))
        .ok();
    let compute_instance_id = instance_id(m, Instance::Compute)
        .map_err(|e| miss(MigCall::ComputeInstanceId, e))
        .ok();
    at.step(Step::OnMig {
        call: "nvmlDeviceGetMemoryInfo".into(),
        gpu,
        mig: slot,
    });
    let memory = match m.memory_info() {
        Ok(mem) => Memory {
            total_bytes: mem.total,
            used_bytes: mem.used,
            known: true,
            ..Memory::default()
        },
        Err(e) => {
            miss(MigCall::Memory, e);
            Memory::default()
        }
    };
    let mut nvml_processes = Vec::new();
    for kind in [NvmlProcessKind::Compute, NvmlProcessKind::Graphics] {
        at.step(Step::Processes {
            kind,
            gpu,
            mig: Some(slot),
        });
        nvml_processes.extend(list(m, kind, gpu, unavailable, &mut Vec::new()));
    }
    MigDevice {
        index: slot,
        uuid,
        name,
        gpu_instance_id,
        compute_instance_id,
        memory,
        nvml_processes,
        ..MigDevice::default()
    }
}

/// Which id of a MIG device.
#[derive(Clone, Copy)]
enum Instance {
    Gpu,
    Compute,
}

/// `nvmlDeviceGetGpuInstanceId` / `nvmlDeviceGetComputeInstanceId` on a
/// MIG device handle. Written by hand: nvml-wrapper 0.13 loads both
/// symbols but wraps neither.
#[allow(unsafe_code)]
fn instance_id(m: &Device<'_>, which: Instance) -> Result<u32, NvmlError> {
    let lib = m.nvml().lib();
    let sym = nvml_sym(match which {
        Instance::Gpu => lib.nvmlDeviceGetGpuInstanceId.as_ref(),
        Instance::Compute => lib.nvmlDeviceGetComputeInstanceId.as_ref(),
    })?;
    let mut id: std::ffi::c_uint = 0;
    // SAFETY: `m` is a live handle of this library (it outlives the call)
    // and `id` is an unsigned int the call writes.
    nvml_try(unsafe { sym(m.handle(), &mut id) })?;
    Ok(id)
}
