//! How a snapshot document (`status --json`) reads back where it writes a
//! value in words: a GPU's failed driver reading is `{"failed": "why"}`
//! in words, and its [`Failure`] is beside it in `failed_causes` (an
//! addition), by the reading's name. A document without a cause (older
//! than `failed_causes`) reads the reading back as failed, for a reason
//! it did not say. A refused read of the kernel log is in words too
//! (`xids.failed`, with what it needs), and the system's error is beside
//! it (`failed_error`, an addition).

use super::driver::{DriverEvidence, FaultReturn, GpuUtil, ProcessUtil, Reading};
use super::driver::{KernelLog, RecoveryAction, Remap, XidReport};
use super::{Failure, UtilWindow};
use serde::de::IgnoredAny;
use serde::Deserialize;
use std::collections::BTreeMap;

/// A reading as JSON has it: the failure's words are not read.
type Worded<T> = Reading<T, IgnoredAny>;

/// [`DriverEvidence`] as JSON has it.
#[derive(Deserialize)]
pub(super) struct EvidenceDoc {
    #[serde(default)]
    recovery_action: Worded<RecoveryAction>,
    #[serde(default)]
    remapped_rows: Worded<Remap>,
    #[serde(default)]
    retired_pages_pending: Worded<bool>,
    #[serde(default)]
    volatile_uncorrectable_ecc: Worded<u64>,
    #[serde(default)]
    process_utilization: Worded<Vec<ProcessUtil>>,
    #[serde(default)]
    gpu_utilization: Worded<GpuUtil>,
    #[serde(default)]
    utilization_window: Option<UtilWindow>,
    #[serde(default)]
    fault_returns: Vec<FaultReturn>,
    #[serde(default)]
    xids: Vec<XidReport>,
    #[serde(default)]
    failed_causes: BTreeMap<String, Failure>,
}

impl From<EvidenceDoc> for DriverEvidence {
    fn from(d: EvidenceDoc) -> DriverEvidence {
        let causes = d.failed_causes;
        let typed = |name: &str| {
            causes.get(name).cloned().unwrap_or(Failure::Nvml {
                error: String::new(),
            })
        };
        DriverEvidence {
            recovery_action: caused(d.recovery_action, || typed("recovery_action")),
            remapped_rows: caused(d.remapped_rows, || typed("remapped_rows")),
            retired_pages_pending: caused(d.retired_pages_pending, || {
                typed("retired_pages_pending")
            }),
            volatile_uncorrectable_ecc: caused(d.volatile_uncorrectable_ecc, || {
                typed("volatile_uncorrectable_ecc")
            }),
            process_utilization: caused(d.process_utilization, || typed("process_utilization")),
            gpu_utilization: caused(d.gpu_utilization, || typed("gpu_utilization")),
            utilization_window: d.utilization_window,
            fault_returns: d.fault_returns,
            xids: d.xids,
        }
    }
}

/// `r` with its failure's cause.
fn caused<T>(r: Worded<T>, cause: impl FnOnce() -> Failure) -> Reading<T> {
    match r {
        Reading::Value(v) => Reading::Value(v),
        Reading::NotSupported => Reading::NotSupported,
        Reading::Failed(_) => Reading::Failed(cause()),
    }
}

/// [`KernelLog`] as JSON has it.
#[derive(Deserialize)]
pub(super) struct KernelLogDoc {
    path: String,
    xids: Reading<Vec<XidReport>, String>,
    #[serde(default)]
    lost: u64,
    #[serde(default)]
    truncated: bool,
    #[serde(default)]
    denied: bool,
    #[serde(default)]
    failed_error: Option<String>,
}

impl From<KernelLogDoc> for KernelLog {
    fn from(d: KernelLogDoc) -> KernelLog {
        KernelLog {
            path: d.path,
            xids: match (d.xids, d.failed_error) {
                (Reading::Failed(_), Some(error)) => Reading::Failed(error),
                (xids, _) => xids,
            },
            lost: d.lost,
            truncated: d.truncated,
            denied: d.denied,
        }
    }
}
