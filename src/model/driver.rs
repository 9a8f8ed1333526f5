//! The driver's own evidence about a GPU's health, as read (issue 29):
//! NVIDIA's recovery action, row remapping, retired pages pending, the
//! volatile uncorrectable ECC count, per-process utilisation, NVML
//! returns that already mean a fault (RESET_REQUIRED, GPU_IS_LOST), and
//! Xid reports (from NVML's event API, [`XidEvent`], or the kernel's log,
//! [`XidReport`]).
//!
//! Each reading is a [`Reading`]: a value, not supported by this driver
//! or GPU, or failed with why. "Not supported" is never "no fault":
//! nothing here is judged, only read.

use super::Failure;
use serde::{Deserialize, Serialize};

/// One piece of evidence as the driver answered; `F`: why a read failed
/// (an NVML [`Failure`] by default; its words are present's).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Reading<T, F = Failure> {
    /// The driver answered with this value.
    Value(T),
    /// NOT_SUPPORTED (or the call is missing from this library): the
    /// driver says nothing either way.
    #[default]
    NotSupported,
    /// The call failed, with why: the evidence is unknown.
    Failed(F),
}

impl<T, F> Reading<T, F> {
    /// The value, where the driver gave one.
    pub fn value(&self) -> Option<&T> {
        match self {
            Reading::Value(v) => Some(v),
            _ => None,
        }
    }

    /// Why the read failed, where it did.
    pub fn failure(&self) -> Option<&F> {
        match self {
            Reading::Failed(f) => Some(f),
            _ => None,
        }
    }

    /// Whether the driver gave no answer at all (neither value nor failure).
    pub fn not_supported(&self) -> bool {
        matches!(self, Reading::NotSupported)
    }
}

/// NVML's `nvmlDeviceGpuRecoveryAction_t`
/// (`NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`): what NVIDIA says this GPU
/// needs now.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryAction {
    /// `NVML_GPU_RECOVERY_ACTION_NONE` (0): nothing needed.
    None,
    /// `NVML_GPU_RECOVERY_ACTION_GPU_RESET` (1).
    GpuReset,
    /// `NVML_GPU_RECOVERY_ACTION_NODE_REBOOT` (2).
    NodeReboot,
    /// `NVML_GPU_RECOVERY_ACTION_DRAIN_P2P` (3): stop peer-to-peer work.
    DrainP2p,
    /// `NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET` (4).
    DrainAndReset,
    /// A value newer than this build knows.
    Other(u32),
}

impl RecoveryAction {
    /// The action NVML's value stands for.
    pub fn from_nvml(v: u32) -> RecoveryAction {
        match v {
            0 => RecoveryAction::None,
            1 => RecoveryAction::GpuReset,
            2 => RecoveryAction::NodeReboot,
            3 => RecoveryAction::DrainP2p,
            4 => RecoveryAction::DrainAndReset,
            other => RecoveryAction::Other(other),
        }
    }
}

/// `nvmlDeviceGetRemappedRows`: rows of memory remapped, and whether a
/// remap waits for a reset or failed.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Remap {
    /// A remap is pending: it takes effect at the next GPU reset.
    pub pending: bool,
    /// A remap failed: the memory can no longer be repaired.
    pub failure: bool,
    /// Rows remapped for correctable errors.
    pub correctable: u32,
    /// Rows remapped for uncorrectable errors.
    pub uncorrectable: u32,
}

/// An NVML return that means a fault whatever was asked.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FaultCode {
    /// `NVML_ERROR_RESET_REQUIRED` (16).
    ResetRequired,
    /// `NVML_ERROR_GPU_IS_LOST` (15): the GPU fell off the bus.
    GpuIsLost,
}

/// A call that answered with a [`FaultCode`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FaultReturn {
    /// The NVML call, e.g. `nvmlDeviceGetMemoryInfo_v2`.
    pub call: String,
    /// What it returned.
    pub code: FaultCode,
}

/// One process's utilisation sample (`nvmlDeviceGetProcessUtilization`),
/// percent of the sample period.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProcessUtil {
    /// The PID as NVML reports it.
    pub pid: u32,
    /// SM (compute) utilisation.
    pub sm: u32,
    /// Memory-bandwidth utilisation.
    pub mem: u32,
    /// Encoder utilisation.
    pub enc: u32,
    /// Decoder utilisation.
    pub dec: u32,
    /// The sample's CPU timestamp, microseconds since the epoch.
    pub timestamp_us: u64,
}

/// The GPU's own utilisation over the driver's last sample period
/// (`nvmlDeviceGetUtilizationRates`), percent.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct GpuUtil {
    /// Time a kernel ran.
    pub gpu: u32,
    /// Time device memory was read or written.
    pub memory: u32,
}

/// One GPU's evidence from the driver (NVML), each piece as read. JSON
/// writes a failed reading in words (`{"failed": "why"}`) and its cause
/// beside (`failed_causes`): it reads back through `readback.rs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(from = "super::readback::EvidenceDoc")]
pub struct DriverEvidence {
    /// `NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`.
    #[serde(default)]
    pub recovery_action: Reading<RecoveryAction>,
    /// `nvmlDeviceGetRemappedRows`.
    #[serde(default)]
    pub remapped_rows: Reading<Remap>,
    /// `nvmlDeviceGetRetiredPagesPendingStatus`: pages retired at the next
    /// reset or reboot.
    #[serde(default)]
    pub retired_pages_pending: Reading<bool>,
    /// `nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)`: since the last
    /// reset or reboot.
    #[serde(default)]
    pub volatile_uncorrectable_ecc: Reading<u64>,
    /// `nvmlDeviceGetProcessUtilization`: the processes with a sample in
    /// the window asked for (a process with none had no activity), the
    /// largest of its samples per PID.
    #[serde(default)]
    pub process_utilization: Reading<Vec<ProcessUtil>>,
    /// `nvmlDeviceGetUtilizationRates`: the whole GPU's use now, which
    /// tells "no process sampled" from "nothing ran" (an addition).
    #[serde(default)]
    pub gpu_utilization: Reading<GpuUtil>,
    /// Which call answered `process_utilization`, and over which window
    /// (None where it was not asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization_window: Option<super::UtilWindow>,
    /// NVML calls on this GPU that answered RESET_REQUIRED or GPU_IS_LOST.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fault_returns: Vec<FaultReturn>,
    /// The kernel log's Xid reports for this GPU, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xids: Vec<XidReport>,
}

impl DriverEvidence {
    /// The driver said nothing: every call unsupported, no fault return,
    /// no Xid.
    pub fn is_silent(&self) -> bool {
        self.recovery_action.not_supported()
            && self.remapped_rows.not_supported()
            && self.retired_pages_pending.not_supported()
            && self.volatile_uncorrectable_ecc.not_supported()
            && self.process_utilization.not_supported()
            && self.fault_returns.is_empty()
            && self.xids.is_empty()
    }
}

/// An Xid as the kernel logged it (`NVRM: Xid (PCI:0000:01:00): 79, pid=1234,
/// name=python3, GPU has fallen off the bus.`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct XidReport {
    /// The Xid number.
    pub xid: u32,
    /// The PCI address as the line wrote it (`0000:01:00`).
    pub pci: String,
    /// The GPU it was tied to by PCI address, when one matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    /// The MIG GPU instance (`GPU-I:05`), when the line names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_instance: Option<u32>,
    /// The process the line names (`pid=1234`); None for `'<unknown>'`,
    /// `'N/A'` or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// What the PID the line names is now among the holders (set where
    /// the report is joined into a snapshot): an Xid names a process only
    /// while the PID still belongs to one that started before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_now: Option<XidPid>,
    /// The comm the line names (`name=...`), raw: chosen by the process
    /// itself, never trusted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// The rest of the line after the Xid number (and pid, name), raw.
    pub text: String,
    /// Microseconds since boot (the record's timestamp).
    pub since_boot_us: u64,
    /// Wall-clock time, milliseconds since the epoch (boot time + the
    /// record's timestamp); None where the boot time is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_unix_ms: Option<u64>,
}

impl XidReport {
    /// Whether a process started at `start_time_ticks` (clock ticks since
    /// boot, `ticks_per_second` of them a second) can be the one this
    /// report names: it started before the report by more than a tick
    /// (start times are in ticks, the log in microseconds); one started
    /// later only reuses the PID. Where the clock is unknown, it may be.
    pub fn may_name(&self, start_time_ticks: u64, ticks_per_second: u64) -> bool {
        if ticks_per_second == 0 {
            return true;
        }
        let started_us =
            start_time_ticks.saturating_add(1).saturating_mul(1_000_000) / ticks_per_second;
        started_us < self.since_boot_us
    }
}

/// What an Xid's PID is now, among the snapshot's holders.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum XidPid {
    /// A holder has the PID and started before the Xid (by more than a
    /// clock tick): the process the Xid names.
    Holder,
    /// A holder has the PID but started after the Xid (or in its clock
    /// tick): the PID was reused, the process the Xid names is gone.
    Reused,
    /// No holder has the PID now.
    NotHolding,
}

/// An Xid delivered by NVML's event API (`nvmlEventSetWait_v2`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct XidEvent {
    /// The GPU's NVML index.
    pub gpu: u32,
    /// The Xid number; None for NVML's "unknown" (999).
    pub xid: Option<u64>,
    /// The process, where known: NVML's event data names none, so events
    /// from NVML carry None.
    pub pid: Option<u32>,
    /// When it was received, milliseconds since the epoch.
    pub at_unix_ms: u64,
}

/// The kernel log as one collection read it (read back through
/// `readback.rs`: a refused read's error is in words in JSON).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(from = "super::readback::KernelLogDoc")]
pub struct KernelLog {
    /// Where it was read (`GPUFREE_KMSG`, default `/dev/kmsg`).
    pub path: String,
    /// Every Xid report in the ring, oldest first (each also on its GPU);
    /// Failed where the log could not be read (then nothing is known, and
    /// no Xid is not "none").
    pub xids: Reading<Vec<XidReport>, String>,
    /// Records the kernel overwrote while they were read (EPIPE).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lost: u64,
    /// The read stopped at its byte or time limit before the ring's end.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// The log refused the read (EPERM, EACCES: it needs CAP_SYSLOG where
    /// `dmesg_restrict` is set); `xids` failed with the system's error. An
    /// addition to SPEC.md; JSON's `xids.failed` says so in words.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub denied: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Whether the kernel log's PCI address (`0000:01:00`, domain:bus:device)
/// and NVML's bus id (`00000000:01:00.0`) name the same device.
pub fn same_pci(kmsg: &str, nvml: &str) -> bool {
    fn parts(s: &str) -> Option<(u32, u32, u32)> {
        let mut it = s.split(':');
        let domain = u32::from_str_radix(it.next()?, 16).ok()?;
        let bus = u32::from_str_radix(it.next()?, 16).ok()?;
        let dev = it.next()?;
        let dev = dev.split('.').next()?;
        let dev = u32::from_str_radix(dev, 16).ok()?;
        it.next().is_none().then_some((domain, bus, dev))
    }
    parts(kmsg).is_some_and(|k| parts(nvml) == Some(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_actions_from_nvml_keep_newer_values() {
        assert_eq!(RecoveryAction::from_nvml(0), RecoveryAction::None);
        assert_eq!(RecoveryAction::from_nvml(1), RecoveryAction::GpuReset);
        assert_eq!(RecoveryAction::from_nvml(2), RecoveryAction::NodeReboot);
        assert_eq!(RecoveryAction::from_nvml(3), RecoveryAction::DrainP2p);
        assert_eq!(RecoveryAction::from_nvml(4), RecoveryAction::DrainAndReset);
        assert_eq!(RecoveryAction::from_nvml(9), RecoveryAction::Other(9));
    }

    #[test]
    fn readings_serialize_not_supported_apart_from_a_value() {
        let r: Reading<RecoveryAction> = Reading::Value(RecoveryAction::GpuReset);
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!({"value": "gpu_reset"})
        );
        let n: Reading<bool> = Reading::NotSupported;
        assert_eq!(serde_json::to_value(&n).unwrap(), "not_supported");
        let f: Reading<bool> = Reading::Failed(Failure::GpuIsLost);
        let back: Reading<bool> =
            serde_json::from_value(serde_json::to_value(&f).unwrap()).unwrap();
        assert_eq!(back, f);
        assert!(DriverEvidence::default().is_silent());
        let e = DriverEvidence {
            retired_pages_pending: Reading::Value(false),
            ..DriverEvidence::default()
        };
        assert!(!e.is_silent(), "a supported 'no' is evidence");
    }

    #[test]
    fn pci_addresses_of_the_log_and_nvml_match_by_number() {
        assert!(same_pci("0000:01:00", "00000000:01:00.0"));
        assert!(same_pci("0000:c1:00", "00000000:C1:00.0"));
        assert!(!same_pci("0000:02:00", "00000000:01:00.0"));
        assert!(!same_pci("0001:01:00", "00000000:01:00.0"));
        assert!(!same_pci("garbage", "00000000:01:00.0"));
        assert!(!same_pci("0000:01:00", ""));
    }
}
