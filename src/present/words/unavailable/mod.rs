//! The words of what collection could not read: each [`Call`] and each
//! [`Failure`] (JSON's `unavailable[].what` and `.why`, the status table's
//! "unavailable" lines, and the verdict's sentences that name them).

use crate::model::{mig_label, Call, Failure, MigCall, Unavailable};
use crate::units::mib;

/// What could not be read, in words (`memory`, `compute processes`).
pub fn call(c: &Call, gpu: Option<u32>) -> String {
    match c {
        Call::DeviceCount => "device count".into(),
        Call::DeviceHandle => "device handle".into(),
        Call::Name => "name".into(),
        Call::Uuid => "uuid".into(),
        Call::PciInfo => "pci info".into(),
        Call::MinorNumber => "minor number".into(),
        Call::Memory => "memory".into(),
        Call::Processes { kind } => {
            format!("{} processes", format!("{kind:?}").to_lowercase())
        }
        Call::MigMode => "MIG mode".into(),
        Call::MigDeviceCount => "MIG device count".into(),
        Call::MigDevice { mig } => format!("MIG device {}", mig_label(gpu.unwrap_or(0), *mig)),
        Call::OfMigDevice { mig, call } => format!(
            "MIG device {} {}",
            mig_label(gpu.unwrap_or(0), *mig),
            mig_call(*call)
        ),
        Call::KfdVram { pid, gpu_id } => {
            format!("KFD VRAM of PID {pid} on KFD GPU id {gpu_id}")
        }
        Call::DrmUsage { pid, client_id } => {
            format!("memory of PID {pid}'s DRM client {client_id}")
        }
        Call::MigCaps { pids } => {
            let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
            format!("MIG capability nodes held by PID {}", pids.join(", "))
        }
    }
}

fn mig_call(c: MigCall) -> &'static str {
    match c {
        MigCall::Uuid => "uuid",
        MigCall::GpuInstanceId => "GPU instance id",
        MigCall::ComputeInstanceId => "compute instance id",
        MigCall::Memory => "memory",
    }
}

/// Why a call failed, in words.
pub fn failure(f: &Failure) -> String {
    match f {
        Failure::MissingSymbol { symbol } => {
            format!("missing symbol in the NVML library (driver too old?): {symbol}")
        }
        Failure::CannotLoad { error } => format!("cannot load the NVML library: {error}"),
        Failure::NotSupported => "NOT_SUPPORTED on this GPU or driver".into(),
        Failure::NoPermission => "NO_PERMISSION (run as root to see it)".into(),
        Failure::GpuIsLost => "GPU_IS_LOST: the GPU fell off the bus".into(),
        Failure::DriverNotLoaded => {
            "DRIVER_NOT_LOADED: the NVIDIA kernel driver is not running".into()
        }
        Failure::Uninitialized => "UNINITIALIZED".into(),
        // nvml-wrapper's words for these two, as before they were typed.
        Failure::Timeout => "the provided timeout was reached".into(),
        Failure::ResetRequired => "device requires a reset before it can be used again".into(),
        Failure::Nvml { error } => error.clone(),
        Failure::KfdUnmapped { gpu_id, bytes } => format!(
            "the KFD topology maps GPU id {gpu_id} to no PCI device: {} cannot be placed on a GPU",
            mib(*bytes)
        ),
        Failure::KfdNotAGpu { pdev, bytes } => format!(
            "the KFD topology places it on PCI device {pdev}, which is no GPU here: {} cannot be placed on a GPU",
            mib(*bytes)
        ),
        Failure::KfdProcessUnseen { bytes } => format!(
            "that PID is none of the GPU holders read (another PID namespace's, or gone): {} held by a process gpufree cannot see",
            mib(*bytes)
        ),
        Failure::DrmNoUsage { driver } => format!(
            "its {driver} fdinfo has no drm-resident-, drm-total- or drm-memory- key (amdgpu before Linux 5.14, or a driver that reports no memory per client): unknown"
        ),
        Failure::MigMinorsSilent => "the driver's mig-minors table does not name them".into(),
        Failure::MigMinorsUnread => "the driver's mig-minors table could not be read (GPUFREE_MIG_MINORS, or driver/nvidia-caps/mig-minors under the proc root)".into(),
    }
}

/// `u`'s call in words.
pub fn what(u: &Unavailable) -> String {
    call(&u.what, u.gpu)
}

/// `u`'s failure in words.
pub fn why(u: &Unavailable) -> String {
    failure(&u.why)
}

#[cfg(test)]
mod tests;
