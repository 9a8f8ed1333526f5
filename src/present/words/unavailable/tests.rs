//! Each call and failure in the words collection used before they were
//! typed (JSON's `unavailable[]` and the status table print them).

use super::*;
use crate::model::NvmlProcessKind;

#[test]
fn each_call_in_words() {
    let cases = [
        (Call::DeviceCount, "device count"),
        (Call::DeviceHandle, "device handle"),
        (Call::Name, "name"),
        (Call::Uuid, "uuid"),
        (Call::PciInfo, "pci info"),
        (Call::MinorNumber, "minor number"),
        (Call::Memory, "memory"),
        (
            Call::Processes {
                kind: NvmlProcessKind::Compute,
            },
            "compute processes",
        ),
        (
            Call::Processes {
                kind: NvmlProcessKind::Graphics,
            },
            "graphics processes",
        ),
        (Call::MigMode, "MIG mode"),
        (Call::MigDeviceCount, "MIG device count"),
        (Call::MigDevice { mig: 2 }, "MIG device 1:2"),
        (
            Call::OfMigDevice {
                mig: 2,
                call: MigCall::GpuInstanceId,
            },
            "MIG device 1:2 GPU instance id",
        ),
        (
            Call::OfMigDevice {
                mig: 0,
                call: MigCall::ComputeInstanceId,
            },
            "MIG device 1:0 compute instance id",
        ),
        (
            Call::OfMigDevice {
                mig: 0,
                call: MigCall::Uuid,
            },
            "MIG device 1:0 uuid",
        ),
        (
            Call::OfMigDevice {
                mig: 0,
                call: MigCall::Memory,
            },
            "MIG device 1:0 memory",
        ),
        (
            Call::KfdVram { pid: 40, gpu_id: 7 },
            "KFD VRAM of PID 40 on KFD GPU id 7",
        ),
        (
            Call::MigCaps { pids: vec![3, 4] },
            "MIG capability nodes held by PID 3, 4",
        ),
    ];
    for (c, words) in cases {
        assert_eq!(call(&c, Some(1)), words);
    }
}

#[test]
fn each_failure_in_words() {
    let cases = [
        (
            Failure::MissingSymbol {
                symbol: "nvmlDeviceGetComputeRunningProcesses_v3".into(),
            },
            "missing symbol in the NVML library (driver too old?): nvmlDeviceGetComputeRunningProcesses_v3",
        ),
        (
            Failure::CannotLoad {
                error: "no such file".into(),
            },
            "cannot load the NVML library: no such file",
        ),
        (Failure::NotSupported, "NOT_SUPPORTED on this GPU or driver"),
        (Failure::NoPermission, "NO_PERMISSION (run as root to see it)"),
        (Failure::GpuIsLost, "GPU_IS_LOST: the GPU fell off the bus"),
        (
            Failure::DriverNotLoaded,
            "DRIVER_NOT_LOADED: the NVIDIA kernel driver is not running",
        ),
        (Failure::Uninitialized, "UNINITIALIZED"),
        (Failure::Timeout, "the provided timeout was reached"),
        (
            Failure::ResetRequired,
            "device requires a reset before it can be used again",
        ),
        (
            Failure::Nvml {
                error: "insufficient memory".into(),
            },
            "insufficient memory",
        ),
        (
            Failure::KfdUnmapped {
                gpu_id: 7,
                bytes: 2048 << 20,
            },
            "the KFD topology maps GPU id 7 to no PCI device: 2,048 MiB cannot be placed on a GPU",
        ),
        (
            Failure::KfdNotAGpu {
                pdev: "0000:c4:00.0".into(),
                bytes: 2048 << 20,
            },
            "the KFD topology places it on PCI device 0000:c4:00.0, which is no GPU here: 2,048 MiB cannot be placed on a GPU",
        ),
        (
            Failure::KfdProcessUnseen { bytes: 2048 << 20 },
            "that PID is none of the GPU holders read (another PID namespace's, or gone): 2,048 MiB held by a process gpufree cannot see",
        ),
        (
            Failure::DrmNoUsage {
                driver: "amdgpu".into(),
            },
            "its amdgpu fdinfo has no drm-resident-, drm-total- or drm-memory- key (amdgpu before Linux 5.14, or a driver that reports no memory per client): unknown",
        ),
        (
            Failure::MigMinorsSilent,
            "the driver's mig-minors table does not name them",
        ),
        (
            Failure::MigMinorsUnread,
            "the driver's mig-minors table could not be read (GPUFREE_MIG_MINORS, or driver/nvidia-caps/mig-minors under the proc root)",
        ),
    ];
    for (f, words) in cases {
        assert_eq!(failure(&f), words);
    }
}
