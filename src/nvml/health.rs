//! One GPU's evidence of its health, from the driver itself: NVIDIA's
//! recovery action (`nvmlDeviceGetFieldValues`,
//! `NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`), remapped rows
//! (`nvmlDeviceGetRemappedRows`), retired pages pending
//! (`nvmlDeviceGetRetiredPagesPendingStatus`), the volatile uncorrectable
//! ECC count (`nvmlDeviceGetTotalEccErrors`) and per-process utilisation
//! (`nvmlDeviceGetProcessUtilization`: the samples newer than now minus
//! the idle window, the largest per PID; [`read_utilization`]). Not supported (or a call missing from
//! an older library) is [`Reading::NotSupported`], never "no fault"; any
//! call answering RESET_REQUIRED or GPU_IS_LOST is kept as a
//! [`FaultReturn`].

use super::{failure, Shared};
use crate::model::{
    DriverEvidence, FaultCode, FaultReturn, GpuUtil, ProcessUtil, Reading, RecoveryAction, Remap,
    Step, UtilCall, UtilWindow,
};
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::{nvml_sym, nvml_try, NvmlError};
use nvml_wrapper::struct_wrappers::device::FieldValueSample;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::Device;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `NVML_FI_DEV_GET_GPU_RECOVERY_ACTION` (nvml.h; outside the range
/// nvml-wrapper renumbers for drivers from 580.82).
pub const FI_GPU_RECOVERY_ACTION: u32 = 230;

/// The fault an NVML error stands for, where it stands for one.
pub fn fault_of(e: &NvmlError) -> Option<FaultCode> {
    match e {
        NvmlError::ResetRequired => Some(FaultCode::ResetRequired),
        NvmlError::GpuLost => Some(FaultCode::GpuIsLost),
        _ => None,
    }
}

/// Notes `e` in `faults` under `call` where it stands for a fault.
pub(super) fn note(faults: &mut Vec<FaultReturn>, call: &str, e: &NvmlError) {
    if let Some(code) = fault_of(e) {
        faults.push(FaultReturn {
            call: call.to_string(),
            code,
        });
    }
}

/// A reading from a call's result; a fault return is also noted in
/// `faults` under `call`.
fn reading<T>(r: Result<T, NvmlError>, call: &str, faults: &mut Vec<FaultReturn>) -> Reading<T> {
    match r {
        Ok(v) => Reading::Value(v),
        Err(NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_)) => Reading::NotSupported,
        Err(NvmlError::FunctionNotFound) => Reading::NotSupported,
        Err(e) => {
            note(faults, call, &e);
            Reading::Failed(failure(&e))
        }
    }
}

/// Reads GPU `index`'s evidence; `faults`: fault returns its other calls
/// (memory, process lists) already met.
pub(super) fn read_evidence(
    dev: &Device<'_>,
    index: u32,
    faults: Vec<FaultReturn>,
    at: &Shared,
) -> DriverEvidence {
    let mut faults = faults;
    at.step(Step::on_gpu("nvmlDeviceGetFieldValues", index));
    let recovery_action = reading(
        recovery_action(dev),
        "nvmlDeviceGetFieldValues",
        &mut faults,
    );
    at.step(Step::on_gpu("nvmlDeviceGetRemappedRows", index));
    let remapped_rows = reading(remapped_rows(dev), "nvmlDeviceGetRemappedRows", &mut faults);
    at.step(Step::on_gpu(
        "nvmlDeviceGetRetiredPagesPendingStatus",
        index,
    ));
    let retired_pages_pending = reading(
        dev.are_pages_pending_retired(),
        "nvmlDeviceGetRetiredPagesPendingStatus",
        &mut faults,
    );
    at.step(Step::on_gpu("nvmlDeviceGetTotalEccErrors", index));
    let volatile_uncorrectable_ecc = reading(
        dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
        "nvmlDeviceGetTotalEccErrors",
        &mut faults,
    );
    DriverEvidence {
        recovery_action,
        remapped_rows,
        retired_pages_pending,
        volatile_uncorrectable_ecc,
        process_utilization: Reading::NotSupported,
        gpu_utilization: Reading::NotSupported,
        utilization_window: None,
        fault_returns: faults,
        xids: Vec::new(),
    }
}

/// The recovery action field; the call's own error, else the field's.
fn recovery_action(dev: &Device<'_>) -> Result<RecoveryAction, NvmlError> {
    let samples = dev.field_values_for(&[FieldId(FI_GPU_RECOVERY_ACTION)])?;
    let sample: FieldValueSample = samples.into_iter().next().ok_or(NvmlError::Unknown)??;
    // A driver that does not know the field answers it INVALID_ARGUMENT
    // (the call itself succeeds): it cannot report it, like NOT_SUPPORTED.
    let value = sample.value.map_err(|e| match e {
        NvmlError::InvalidArg => NvmlError::NotSupported,
        e => e,
    });
    let v = match value? {
        SampleValue::U32(v) => v,
        SampleValue::U64(v) => u32::try_from(v).unwrap_or(u32::MAX),
        SampleValue::I64(v) => u32::try_from(v).unwrap_or(u32::MAX),
        SampleValue::F64(_) => return Err(NvmlError::Unknown),
    };
    Ok(RecoveryAction::from_nvml(v))
}

/// `nvmlDeviceGetRemappedRows`. Written by hand: nvml-wrapper 0.13 loads
/// the symbol but wraps it not.
#[allow(unsafe_code)]
fn remapped_rows(dev: &Device<'_>) -> Result<Remap, NvmlError> {
    let sym = nvml_sym(dev.nvml().lib().nvmlDeviceGetRemappedRows.as_ref())?;
    let (mut corr, mut unc, mut pending, mut failure) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: `dev` is a live handle of this library (it outlives the
    // call) and the four pointers are unsigned ints the call writes.
    nvml_try(unsafe {
        sym(
            dev.handle(),
            &mut corr,
            &mut unc,
            &mut pending,
            &mut failure,
        )
    })?;
    Ok(Remap {
        pending: pending != 0,
        failure: failure != 0,
        correctable: corr,
        uncorrectable: unc,
    })
}

/// Reads the per-process utilisation samples newer than now minus
/// `window` into `e` (a look back into the driver's buffer, not a wait:
/// `lastSeenTimeStamp` is a CPU timestamp in microseconds), saying which
/// call answered and over which window.
pub(super) fn read_utilization(
    dev: &Device<'_>,
    index: u32,
    e: &mut DriverEvidence,
    window: Duration,
    at: &Shared,
) {
    at.step(Step::on_gpu("nvmlDeviceGetProcessUtilization", index));
    let now_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    let window_us = u64::try_from(window.as_micros()).unwrap_or(u64::MAX);
    // 0 asks for every buffered sample: the oldest timestamp is 1.
    let since_unix_us = now_us.saturating_sub(window_us).max(1);
    e.process_utilization = reading(
        process_utilization(dev, since_unix_us),
        "nvmlDeviceGetProcessUtilization",
        &mut e.fault_returns,
    );
    at.step(Step::on_gpu("nvmlDeviceGetUtilizationRates", index));
    e.gpu_utilization = reading(
        dev.utilization_rates().map(|u| GpuUtil {
            gpu: u.gpu,
            memory: u.memory,
        }),
        "nvmlDeviceGetUtilizationRates",
        &mut e.fault_returns,
    );
    e.utilization_window = Some(UtilWindow {
        call: UtilCall::ProcessUtilization,
        since_unix_us,
        window_ms: u64::try_from(window.as_millis()).unwrap_or(u64::MAX),
    });
}

/// The largest sample per PID among those newer than `since_us`; no
/// sample (NOT_FOUND) is an empty list: whether that is no activity, the
/// GPU's own utilisation says (`model::activity`).
fn process_utilization(dev: &Device<'_>, since_us: u64) -> Result<Vec<ProcessUtil>, NvmlError> {
    let samples = match dev.process_utilization_stats(since_us) {
        Err(NvmlError::NotFound) => Vec::new(),
        r => r?,
    };
    let mut by_pid: BTreeMap<u32, ProcessUtil> = BTreeMap::new();
    for s in samples {
        let e = by_pid.entry(s.pid).or_insert(ProcessUtil {
            pid: s.pid,
            ..ProcessUtil::default()
        });
        e.sm = e.sm.max(s.sm_util);
        e.mem = e.mem.max(s.mem_util);
        e.enc = e.enc.max(s.enc_util);
        e.dec = e.dec.max(s.dec_util);
        e.timestamp_us = e.timestamp_us.max(s.timestamp);
    }
    Ok(by_pid.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Failure;

    #[test]
    fn not_supported_is_no_value_and_faults_are_kept() {
        let mut faults = Vec::new();
        let r: Reading<bool> = reading(Err(NvmlError::NotSupported), "a", &mut faults);
        assert_eq!(r, Reading::NotSupported);
        let r: Reading<bool> = reading(
            Err(NvmlError::FailedToLoadSymbol("nvmlX".into())),
            "a",
            &mut faults,
        );
        assert_eq!(r, Reading::NotSupported, "an older library");
        assert!(faults.is_empty());
        let r: Reading<bool> = reading(Err(NvmlError::GpuLost), "b", &mut faults);
        assert_eq!(r, Reading::Failed(Failure::GpuIsLost));
        let r: Reading<bool> = reading(Err(NvmlError::ResetRequired), "c", &mut faults);
        assert_eq!(r, Reading::Failed(Failure::ResetRequired));
        let r: Reading<bool> = reading(Err(NvmlError::NoPermission), "d", &mut faults);
        assert!(matches!(r, Reading::Failed(_)));
        assert_eq!(
            faults,
            [
                FaultReturn {
                    call: "b".into(),
                    code: FaultCode::GpuIsLost
                },
                FaultReturn {
                    call: "c".into(),
                    code: FaultCode::ResetRequired
                }
            ]
        );
        assert_eq!(reading(Ok(true), "e", &mut faults), Reading::Value(true));
    }
}
