//! A simulated GPU's health as the driver reports it: NVIDIA's recovery
//! action, row remapping and Xid events (SPEC.md, "The simulator").

use serde::{Deserialize, Serialize};

/// NVML's `nvmlDeviceGpuRecoveryAction_t`, in lower case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryAction {
    /// `NVML_GPU_RECOVERY_ACTION_NONE` (0).
    None,
    /// `NVML_GPU_RECOVERY_ACTION_GPU_RESET` (1).
    GpuReset,
    /// `NVML_GPU_RECOVERY_ACTION_NODE_REBOOT` (2).
    NodeReboot,
    /// `NVML_GPU_RECOVERY_ACTION_DRAIN_P2P` (3).
    DrainP2p,
    /// `NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET` (4).
    DrainAndReset,
}

impl RecoveryAction {
    /// The value NVML reports.
    pub fn value(self) -> u32 {
        match self {
            RecoveryAction::None => 0,
            RecoveryAction::GpuReset => 1,
            RecoveryAction::NodeReboot => 2,
            RecoveryAction::DrainP2p => 3,
            RecoveryAction::DrainAndReset => 4,
        }
    }
}

/// What `nvmlDeviceGetRemappedRows` reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RemappedRows {
    /// A remap waits for the next reset.
    #[serde(default)]
    pub pending: bool,
    /// A remap failed.
    #[serde(default)]
    pub failure: bool,
    /// Rows remapped for correctable errors.
    #[serde(default)]
    pub correctable: u32,
    /// Rows remapped for uncorrectable errors.
    #[serde(default)]
    pub uncorrectable: u32,
}

/// One Xid critical error event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct XidEvent {
    /// The Xid number (the event's `eventData`).
    pub xid: u64,
    /// The process the driver's log line would name; NVML's event data
    /// has no field for it, so it is not delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// How long before the state was loaded it happened.
    #[serde(default)]
    pub seconds_ago: u64,
}

/// What `nvmlDeviceGetUtilizationRates` reports (`nvmlUtilization_t`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GpuUtilization {
    /// Percent of the sample period a kernel ran (0-100).
    #[serde(deserialize_with = "percent")]
    pub gpu: u32,
    /// Percent of it device memory was read or written (0-100).
    #[serde(deserialize_with = "percent")]
    pub memory: u32,
}

/// A percentage, 0 to 100, as NVML reports one.
fn percent<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let p = u32::deserialize(d)?;
    if p > 100 {
        return Err(serde::de::Error::custom(format!(
            "{p} is not a percentage (0 to 100)"
        )));
    }
    Ok(p)
}
