//! What a verdict could not see: a GPU's memory that cannot be read
//! ([`MemoryUnknown`]) and the parts of the view whose absence keeps
//! unaccounted memory from being called the driver's ([`BlindSpot`]).

use super::{Failure, Unavailable};
use serde::{Deserialize, Serialize};

/// Why a GPU's memory cannot be read.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "source", rename_all = "kebab-case")]
pub enum MemoryUnknown {
    /// A DRM GPU's sysfs files could not be read.
    Sysfs {
        /// Its PCI device.
        pci_bus_id: String,
    },
    /// NVML is unavailable.
    NoNvml {
        /// Its error (as collection said it).
        error: Option<String>,
    },
    /// NVML did not report this GPU's memory.
    Nvml {
        /// Why the memory call failed, if it did.
        failure: Option<Failure>,
    },
}

/// A part of the view that is missing, so memory no visible process
/// accounts for cannot be called the driver's.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum BlindSpot {
    /// An NVML process list is unavailable.
    ProcessList {
        /// The list's call, and why it failed.
        unavailable: Unavailable,
    },
    /// The KFD's VRAM could not be placed on a GPU.
    KfdVram {
        /// Whose VRAM on which KFD GPU id, and how much.
        unavailable: Unavailable,
    },
    /// A DRM GPU's memory that a process holds and that cannot be told:
    /// a client whose fdinfo says no memory, the KFD's VRAM of a process
    /// not read.
    DrmMemory {
        /// Whose memory, and why it is unknown.
        unavailable: Unavailable,
    },
    /// Processes that could not be read.
    Unreadable {
        /// Their PIDs.
        pids: Vec<u32>,
    },
    /// /proc hides other users' processes.
    Hidepid,
}
