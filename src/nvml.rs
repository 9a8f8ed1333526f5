//! The NVML backend, over nvml-wrapper: per GPU the index, UUID, name, PCI
//! bus id, minor number, memory (v2) and the compute, graphics and MPS
//! processes with their memory.
//!
//! Every call that fails becomes an [`Unavailable`] entry saying why
//! (NOT_SUPPORTED, a missing `_v3` symbol on an old driver, GPU_IS_LOST,
//! NO_PERMISSION...), never silently missing data. A missing library is a
//! [`NvmlStatus`] with an error, not a failure of the whole snapshot: the
//! device-node scan still runs.

use crate::model::{Gpu, Memory, NvmlProcess, NvmlProcessKind, NvmlStatus, Unavailable};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::{Device, Nvml};
use std::path::Path;

/// The library loaded when none is named.
pub const DEFAULT_LIB: &str = "libnvidia-ml.so.1";

/// What NVML said.
#[derive(Debug, Clone, Default)]
pub struct NvmlReport {
    /// Library, driver version, or why NVML is unavailable.
    pub status: NvmlStatus,
    /// The GPUs, in NVML index order (empty without NVML).
    pub gpus: Vec<Gpu>,
    /// Calls that failed.
    pub unavailable: Vec<Unavailable>,
}

/// A person-readable reason for an NVML error.
pub fn describe(e: &NvmlError) -> String {
    match e {
        NvmlError::FailedToLoadSymbol(s) => {
            format!("missing symbol in the NVML library (driver too old?): {s}")
        }
        NvmlError::LibloadingError(e) => format!("cannot load the NVML library: {e}"),
        NvmlError::NotSupported => "NOT_SUPPORTED on this GPU or driver".into(),
        NvmlError::NoPermission => "NO_PERMISSION (run as root to see it)".into(),
        NvmlError::GpuLost => "GPU_IS_LOST: the GPU fell off the bus".into(),
        NvmlError::DriverNotLoaded => {
            "DRIVER_NOT_LOADED: the NVIDIA kernel driver is not running".into()
        }
        NvmlError::Uninitialized => "UNINITIALIZED".into(),
        other => other.to_string(),
    }
}

fn process(p: &ProcessInfo, kind: NvmlProcessKind) -> NvmlProcess {
    NvmlProcess {
        pid: p.pid,
        used_bytes: match p.used_gpu_memory {
            UsedGpuMemory::Used(b) => Some(b),
            UsedGpuMemory::Unavailable => None,
        },
        kind,
    }
}

/// One process list, `_v3` first, `_v2` when the driver lacks `_v3`.
fn list(
    dev: &Device<'_>,
    kind: NvmlProcessKind,
    index: u32,
    unavailable: &mut Vec<Unavailable>,
) -> Vec<NvmlProcess> {
    let result: Result<Vec<ProcessInfo>, NvmlError> = match kind {
        NvmlProcessKind::Compute => match dev.running_compute_processes() {
            Err(NvmlError::FailedToLoadSymbol(_)) => dev.running_compute_processes_v2(),
            r => r,
        },
        NvmlProcessKind::Graphics => match dev.running_graphics_processes() {
            Err(NvmlError::FailedToLoadSymbol(_)) => dev.running_graphics_processes_v2(),
            r => r,
        },
        NvmlProcessKind::Mps => dev.mps_running_compute_processes(),
    };
    match result {
        Ok(ps) => ps.iter().map(|p| process(p, kind)).collect(),
        // MPS is absent from most drivers' feature set; not worth a line.
        Err(NvmlError::NotSupported) if kind == NvmlProcessKind::Mps => Vec::new(),
        Err(e) => {
            unavailable.push(Unavailable {
                what: format!("{} processes", format!("{kind:?}").to_lowercase()),
                gpu: Some(index),
                why: describe(&e),
            });
            Vec::new()
        }
    }
}

/// An initialised NVML library, kept for repeated reads (`wait`, `kill`).
pub struct Session {
    nvml: Nvml,
    status: NvmlStatus,
}

impl Session {
    /// Loads and initialises the library at `lib` (default: the system's);
    /// on failure, the status says why.
    pub fn open(lib: Option<&Path>) -> Result<Session, NvmlStatus> {
        let library = lib.map_or(DEFAULT_LIB.to_string(), |p| p.display().to_string());
        let mut status = NvmlStatus {
            library: library.clone(),
            ..NvmlStatus::default()
        };
        let mut builder = Nvml::builder();
        if let Some(p) = lib {
            builder.lib_path(p.as_os_str());
        }
        match builder.init() {
            Ok(nvml) => {
                status.available = true;
                status.driver_version = nvml.sys_driver_version().ok();
                Ok(Session { nvml, status })
            }
            Err(e) => {
                status.error = Some(match e {
                    NvmlError::LibloadingError(_) => format!("no NVIDIA library ({library}): {e}"),
                    e => format!("NVML init failed ({library}): {}", describe(&e)),
                });
                Err(status)
            }
        }
    }

    /// Reads every GPU now.
    pub fn read(&self) -> NvmlReport {
        let mut report = NvmlReport {
            status: self.status.clone(),
            ..NvmlReport::default()
        };
        let count = match self.nvml.device_count() {
            Ok(c) => c,
            Err(e) => {
                report.unavailable.push(Unavailable {
                    what: "device count".into(),
                    gpu: None,
                    why: describe(&e),
                });
                0
            }
        };
        for index in 0..count {
            match self.nvml.device_by_index(index) {
                Ok(dev) => {
                    let gpu = read_gpu(&dev, index, &mut report.unavailable);
                    report.gpus.push(gpu);
                }
                Err(e) => report.unavailable.push(Unavailable {
                    what: "device handle".into(),
                    gpu: Some(index),
                    why: describe(&e),
                }),
            }
        }
        report
    }
}

/// Reads every GPU once from the library at `lib` (default: the system's).
pub fn collect(lib: Option<&Path>) -> NvmlReport {
    match Session::open(lib) {
        Ok(session) => session.read(),
        Err(status) => NvmlReport {
            status,
            ..NvmlReport::default()
        },
    }
}

fn read_gpu(dev: &Device<'_>, index: u32, unavailable: &mut Vec<Unavailable>) -> Gpu {
    let mut miss = |what: &str, e: NvmlError| {
        unavailable.push(Unavailable {
            what: what.into(),
            gpu: Some(index),
            why: describe(&e),
        })
    };
    let name = dev.name().unwrap_or_else(|e| {
        miss("name", e);
        String::new()
    });
    let uuid = dev.uuid().unwrap_or_else(|e| {
        miss("uuid", e);
        String::new()
    });
    let pci_bus_id = dev.pci_info().map(|p| p.bus_id).unwrap_or_else(|e| {
        miss("pci info", e);
        String::new()
    });
    let minor_number = dev.minor_number().map_err(|e| miss("minor number", e)).ok();
    let memory = match dev.memory_info() {
        Ok(m) => Memory {
            total_bytes: m.total,
            used_bytes: m.used,
            reserved_bytes: m.reserved,
            known: true,
            ..Memory::default()
        },
        Err(e) => {
            miss("memory", e);
            Memory::default()
        }
    };
    let mut nvml_processes = Vec::new();
    for kind in [
        NvmlProcessKind::Compute,
        NvmlProcessKind::Graphics,
        NvmlProcessKind::Mps,
    ] {
        nvml_processes.extend(list(dev, kind, index, unavailable));
    }
    Gpu {
        index,
        uuid,
        name,
        pci_bus_id,
        minor_number,
        memory,
        nvml_processes,
    }
}
