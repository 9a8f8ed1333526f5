//! NVML's part of the JSON documents: its status with why it is
//! unavailable in words (`nvml.error`) beside the value (`nvml.cause`),
//! and a GPU's driver evidence with each failed reading in words
//! (`{"failed": "why"}`, as SPEC.md has it).

use super::words::nvml::described;
use crate::model::{
    DriverEvidence, Failure, FaultReturn, NvmlDown, NvmlStatus, Reading, UtilWindow, XidReport,
};
use serde::Serialize;
use std::collections::BTreeMap;

/// NVML's status as JSON has it.
#[derive(Debug, Serialize)]
pub struct NvmlDoc<'a> {
    available: bool,
    library: &'a str,
    driver_version: &'a Option<String>,
    /// Why NVML is unavailable, in words.
    error: Option<String>,
    /// Why, as a value (an addition to SPEC.md).
    cause: &'a Option<NvmlDown>,
}

impl<'a> NvmlDoc<'a> {
    /// The document of `s`.
    pub fn new(s: &'a NvmlStatus) -> NvmlDoc<'a> {
        let NvmlStatus {
            available,
            library,
            driver_version,
            error,
        } = s;
        NvmlDoc {
            available: *available,
            library,
            driver_version,
            error: error.as_ref().map(ToString::to_string),
            cause: error,
        }
    }
}

/// One reading as JSON has it: a value, `"not_supported"`, or
/// `{"failed": "why"}` in words.
#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case")]
enum ReadingDoc<'a, T> {
    Value(&'a T),
    NotSupported,
    Failed(String),
}

impl<'a, T> ReadingDoc<'a, T> {
    fn new(r: &'a Reading<T>) -> ReadingDoc<'a, T> {
        match r {
            Reading::Value(v) => ReadingDoc::Value(v),
            Reading::NotSupported => ReadingDoc::NotSupported,
            Reading::Failed(f) => ReadingDoc::Failed(described(f)),
        }
    }
}

/// A GPU's driver evidence as JSON has it.
#[derive(Debug, Serialize)]
pub struct DriverEvidenceDoc<'a> {
    recovery_action: ReadingDoc<'a, crate::model::RecoveryAction>,
    remapped_rows: ReadingDoc<'a, crate::model::Remap>,
    retired_pages_pending: ReadingDoc<'a, bool>,
    volatile_uncorrectable_ecc: ReadingDoc<'a, u64>,
    process_utilization: ReadingDoc<'a, Vec<crate::model::ProcessUtil>>,
    gpu_utilization: ReadingDoc<'a, crate::model::GpuUtil>,
    #[serde(skip_serializing_if = "Option::is_none")]
    utilization_window: &'a Option<UtilWindow>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    fault_returns: &'a [FaultReturn],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    xids: &'a [XidReport],
    /// Each failed reading's cause, by its name (an addition: the words
    /// above do not read back as the failure).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    failed_causes: BTreeMap<&'static str, &'a Failure>,
}

impl<'a> DriverEvidenceDoc<'a> {
    /// The document of `e`.
    pub fn new(e: &'a DriverEvidence) -> DriverEvidenceDoc<'a> {
        // Every field named: a field added to the evidence fails to
        // compile here until the document says whether JSON has it.
        let DriverEvidence {
            recovery_action,
            remapped_rows,
            retired_pages_pending,
            volatile_uncorrectable_ecc,
            process_utilization,
            gpu_utilization,
            utilization_window,
            fault_returns,
            xids,
        } = e;
        let failed_causes = [
            ("recovery_action", recovery_action.failure()),
            ("remapped_rows", remapped_rows.failure()),
            ("retired_pages_pending", retired_pages_pending.failure()),
            (
                "volatile_uncorrectable_ecc",
                volatile_uncorrectable_ecc.failure(),
            ),
            ("process_utilization", process_utilization.failure()),
            ("gpu_utilization", gpu_utilization.failure()),
        ]
        .into_iter()
        .filter_map(|(name, cause)| Some((name, cause?)))
        .collect();
        DriverEvidenceDoc {
            failed_causes,
            recovery_action: ReadingDoc::new(recovery_action),
            remapped_rows: ReadingDoc::new(remapped_rows),
            retired_pages_pending: ReadingDoc::new(retired_pages_pending),
            volatile_uncorrectable_ecc: ReadingDoc::new(volatile_uncorrectable_ecc),
            process_utilization: ReadingDoc::new(process_utilization),
            gpu_utilization: ReadingDoc::new(gpu_utilization),
            utilization_window,
            fault_returns,
            xids,
        }
    }
}
