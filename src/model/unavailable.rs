//! What collection could not read, as values: the call ([`Call`]) and why
//! it failed ([`Failure`], one variant per NVML return gpufree tells
//! apart, as nvml-wrapper types them). The words are made in
//! `present/words/unavailable/`; JSON's `unavailable[].what` and `.why`
//! are those words, `call` and `cause` these values.

use super::NvmlProcessKind;
use serde::{Deserialize, Serialize};

/// A call that failed, with why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Unavailable {
    /// What could not be read (JSON's `call`; its `what` in words).
    #[serde(rename = "call")]
    pub what: Call,
    /// The GPU, when the call was per GPU.
    pub gpu: Option<u32>,
    /// Why (JSON's `cause`; its `why` in words).
    #[serde(rename = "cause")]
    pub why: Failure,
    /// What the missing part holds when it is memory or devices gpufree
    /// cannot place on a GPU (an addition to SPEC.md): the verdict reads
    /// this, never the words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unplaced: Option<Unplaced>,
}

/// Something held that gpufree cannot place on a GPU.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Unplaced {
    /// The KFD's VRAM on a GPU id its topology maps to no PCI device: it
    /// may be on any AMD GPU.
    KfdVram,
    /// MIG capability nodes no table places: their holders may be on any
    /// MIG device.
    MigCaps,
    /// A DRM client whose fdinfo has no memory keys: its memory on the GPU
    /// is unknown.
    DrmUsage,
    /// The KFD's VRAM of a process gpufree did not read (another PID
    /// namespace's, or gone): memory on the GPU no holder accounts for.
    KfdProcess,
}

/// What could not be read.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Call {
    /// NVML's device count.
    DeviceCount,
    /// A GPU's NVML handle.
    DeviceHandle,
    /// A GPU's name.
    Name,
    /// A GPU's UUID.
    Uuid,
    /// A GPU's PCI information.
    PciInfo,
    /// A GPU's minor number.
    MinorNumber,
    /// A GPU's memory.
    Memory,
    /// One of a GPU's process lists.
    Processes {
        /// Which.
        kind: NvmlProcessKind,
    },
    /// A GPU's MIG mode.
    MigMode,
    /// A GPU's MIG device count.
    MigDeviceCount,
    /// A MIG device's handle.
    MigDevice {
        /// Its slot (NVML's MIG device index).
        mig: u32,
    },
    /// Something of a MIG device.
    OfMigDevice {
        /// Its slot.
        mig: u32,
        /// What.
        call: MigCall,
    },
    /// The KFD's VRAM of a process on a KFD GPU id.
    KfdVram {
        /// The process.
        pid: u32,
        /// The KFD's GPU id.
        gpu_id: u32,
    },
    /// The memory of a process's DRM client, from its fdinfo.
    DrmUsage {
        /// The process.
        pid: u32,
        /// The client's `drm-client-id`.
        client_id: u64,
    },
    /// MIG capability nodes held by these processes.
    MigCaps {
        /// Their holders.
        pids: Vec<u32>,
    },
}

/// What of a MIG device could not be read.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum MigCall {
    /// Its UUID.
    Uuid,
    /// Its GPU instance id.
    GpuInstanceId,
    /// Its compute instance id.
    ComputeInstanceId,
    /// Its memory.
    Memory,
}

/// Why a call failed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Failure {
    /// The NVML library lacks the function (an older driver).
    MissingSymbol {
        /// The symbol.
        symbol: String,
    },
    /// The NVML library could not be loaded.
    CannotLoad {
        /// The loader's error.
        error: String,
    },
    /// NOT_SUPPORTED.
    NotSupported,
    /// NO_PERMISSION.
    NoPermission,
    /// GPU_IS_LOST.
    GpuIsLost,
    /// DRIVER_NOT_LOADED.
    DriverNotLoaded,
    /// UNINITIALIZED.
    Uninitialized,
    /// TIMEOUT.
    Timeout,
    /// RESET_REQUIRED.
    ResetRequired,
    /// Another NVML error, as nvml-wrapper says it.
    Nvml {
        /// nvml-wrapper's message.
        error: String,
    },
    /// The KFD topology maps a GPU id to no PCI device.
    KfdUnmapped {
        /// The KFD's GPU id.
        gpu_id: u32,
        /// The VRAM that cannot be placed.
        bytes: u64,
    },
    /// The KFD topology maps a GPU id to a PCI device that is no GPU here.
    KfdNotAGpu {
        /// The PCI slot its topology names.
        pdev: String,
        /// The VRAM that cannot be placed.
        bytes: u64,
    },
    /// The KFD lists a process that is not among those read: another PID
    /// namespace's, or gone.
    KfdProcessUnseen {
        /// The VRAM it holds.
        bytes: u64,
    },
    /// A DRM client's fdinfo says no memory (no `drm-resident-`,
    /// `drm-total-` or `drm-memory-` key: amdgpu before Linux 5.14, a
    /// driver without drm-usage-stats' memory keys).
    DrmNoUsage {
        /// Its `drm-driver`.
        driver: String,
    },
    /// The driver's mig-minors table does not name the capability nodes.
    MigMinorsSilent,
    /// The driver's mig-minors table could not be read.
    MigMinorsUnread,
}
