//! The driver's own evidence of a GPU's health: field values (NVIDIA's
//! recovery action, `NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`), remapped
//! rows, retired pages pending, and per-process utilisation samples.
//! Each answers NOT_SUPPORTED where the state file leaves it out, as the
//! real library does on a GPU without it.

use crate::out::write;
use crate::ret;
use crate::session::{with_device, NvmlDevice};
use crate::state::Device;
use crate::view::report;
use std::ffi::{c_int, c_uint, c_ulonglong};
use std::time::{SystemTime, UNIX_EPOCH};

/// `NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`.
pub const FI_GPU_RECOVERY_ACTION: c_uint = 230;
/// `NVML_VALUE_TYPE_UNSIGNED_INT`.
const VALUE_TYPE_UNSIGNED_INT: c_uint = 1;

/// `nvmlFieldValue_t` (40 bytes).
#[repr(C)]
pub struct FieldValue {
    pub(crate) field_id: c_uint,
    pub(crate) scope_id: c_uint,
    pub(crate) timestamp: i64,
    pub(crate) latency_usec: i64,
    pub(crate) value_type: c_uint,
    pub(crate) nvml_return: c_uint,
    pub(crate) value: u64,
}

/// `nvmlProcessUtilizationSample_t` (32 bytes).
#[repr(C)]
pub struct UtilSample {
    pub(crate) pid: c_uint,
    pub(crate) timestamp: c_ulonglong,
    pub(crate) sm_util: c_uint,
    pub(crate) mem_util: c_uint,
    pub(crate) enc_util: c_uint,
    pub(crate) dec_util: c_uint,
}

pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// The answer to one requested field of `d`: its return code and value.
fn field(d: &Device, id: c_uint) -> (c_uint, u64) {
    match (id, d.recovery_action) {
        (FI_GPU_RECOVERY_ACTION, Some(a)) => (ret::SUCCESS, u64::from(a.value())),
        _ => (ret::NOT_SUPPORTED, 0),
    }
}

/// `nvmlDeviceGetFieldValues`: each field's own return code; the call
/// itself succeeds.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    dev: NvmlDevice,
    count: c_int,
    values: *mut FieldValue,
) -> u32 {
    let Ok(n) = usize::try_from(count) else {
        return ret::INVALID_ARGUMENT;
    };
    if values.is_null() {
        return ret::INVALID_ARGUMENT;
    }
    with_device(dev, |d, _, _| {
        if let Some(e) = d.injected("field_values") {
            return e;
        }
        for i in 0..n {
            // SAFETY: the caller gave `count` records at `values`; we read
            // and write record i only.
            unsafe {
                let v = values.add(i);
                let id = std::ptr::addr_of!((*v).field_id).read_unaligned();
                let (code, value) = field(d, id);
                std::ptr::addr_of_mut!((*v).timestamp).write_unaligned(now_us() as i64);
                std::ptr::addr_of_mut!((*v).latency_usec).write_unaligned(0);
                std::ptr::addr_of_mut!((*v).value_type).write_unaligned(VALUE_TYPE_UNSIGNED_INT);
                std::ptr::addr_of_mut!((*v).nvml_return).write_unaligned(code);
                std::ptr::addr_of_mut!((*v).value).write_unaligned(value);
            }
        }
        ret::SUCCESS
    })
}

/// `nvmlDeviceGetRemappedRows`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRemappedRows(
    dev: NvmlDevice,
    corr: *mut c_uint,
    unc: *mut c_uint,
    pending: *mut c_uint,
    failure: *mut c_uint,
) -> u32 {
    if corr.is_null() || unc.is_null() || pending.is_null() || failure.is_null() {
        return ret::INVALID_ARGUMENT;
    }
    with_device(dev, |d, _, _| {
        if let Some(e) = d.injected("remapped_rows") {
            return e;
        }
        let Some(r) = d.remapped_rows else {
            return ret::NOT_SUPPORTED;
        };
        // SAFETY: four non-NULL unsigned ints owned by the caller.
        unsafe {
            write(corr, r.correctable);
            write(unc, r.uncorrectable);
            write(pending, c_uint::from(r.pending));
            write(failure, c_uint::from(r.failure))
        }
    })
}

/// `nvmlDeviceGetRetiredPagesPendingStatus`: an `nvmlEnableState_t`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRetiredPagesPendingStatus(
    dev: NvmlDevice,
    pending: *mut c_uint,
) -> u32 {
    with_device(dev, |d, _, _| {
        if let Some(e) = d.injected("retired_pages_pending") {
            return e;
        }
        match d.retired_pages_pending {
            // SAFETY: `pending` points to an enum owned by the caller.
            Some(p) => unsafe { write(pending, c_uint::from(p)) },
            None => ret::NOT_SUPPORTED,
        }
    })
}

/// `nvmlUtilization_t`.
#[repr(C)]
pub struct Utilization {
    pub(crate) gpu: c_uint,
    pub(crate) memory: c_uint,
}

/// `nvmlDeviceGetUtilizationRates`: the whole GPU's use over the last
/// sample period.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    dev: NvmlDevice,
    util: *mut Utilization,
) -> u32 {
    with_device(dev, |d, _, _| {
        if let Some(e) = d.injected("utilization") {
            return e;
        }
        match d.utilization {
            // SAFETY: `util` points to an nvmlUtilization_t the caller owns.
            Some(u) => unsafe {
                write(
                    util,
                    Utilization {
                        gpu: u.gpu,
                        memory: u.memory,
                    },
                )
            },
            None => ret::NOT_SUPPORTED,
        }
    })
}

/// `nvmlDeviceGetProcessUtilization`: one sample, taken now, for each
/// reported process whose entry gives `sm_util` or `mem_util`; NULL
/// asks for the count (INSUFFICIENT_SIZE, as pynvml expects); NOT_FOUND
/// when no sample is newer than `last_seen`; NOT_SUPPORTED where no entry
/// of the device gives either.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    dev: NvmlDevice,
    samples: *mut UtilSample,
    count: *mut c_uint,
    last_seen: c_ulonglong,
) -> u32 {
    if count.is_null() {
        return ret::INVALID_ARGUMENT;
    }
    with_device(dev, |d, path, _| {
        if let Some(e) = d.injected("process_utilization") {
            return e;
        }
        let sampled = |pid: u32| {
            d.processes
                .iter()
                .find(|p| p.pid == pid && (p.sm_util.is_some() || p.mem_util.is_some()))
        };
        if !d.processes.iter().any(|p| sampled(p.pid).is_some()) {
            return ret::NOT_SUPPORTED;
        }
        let Some(v) = report(d, crate::state::Target::Whole, path) else {
            return ret::INVALID_ARGUMENT;
        };
        let now = now_us();
        let list: Vec<UtilSample> = v
            .processes
            .iter()
            .filter_map(|r| sampled(r.pid))
            .filter(|_| now > last_seen)
            .map(|p| UtilSample {
                pid: p.pid,
                timestamp: now,
                sm_util: p.sm_util.unwrap_or(0),
                mem_util: p.mem_util.unwrap_or(0),
                enc_util: 0,
                dec_util: 0,
            })
            .collect();
        // SAFETY: `count` is non-NULL and the caller's.
        let room = unsafe { count.read_unaligned() } as usize;
        // SAFETY: as above.
        unsafe { count.write_unaligned(list.len() as c_uint) };
        if list.is_empty() {
            return ret::NOT_FOUND;
        }
        if samples.is_null() || room < list.len() {
            return ret::INSUFFICIENT_SIZE;
        }
        for (i, s) in list.into_iter().enumerate() {
            // SAFETY: room for `room` >= list.len() samples at `samples`.
            unsafe { samples.add(i).write_unaligned(s) };
        }
        ret::SUCCESS
    })
}
