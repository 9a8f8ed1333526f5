//! Memory: `nvmlMemory_t`, `nvmlMemory_v2_t` and `nvmlDeviceGetMemoryInfo*`
//! (and BAR1's),
//! the used bytes following from the processes the device (or the MIG
//! device) reports now.

use crate::out::write;
use crate::ret;
use crate::session::{with_target, NvmlDevice};
use crate::state::Target;
use crate::view::report;
use std::ffi::{c_uint, c_ulonglong};

/// `nvmlMemory_t`.
#[repr(C)]
pub struct Memory {
    pub(crate) total: c_ulonglong,
    pub(crate) free: c_ulonglong,
    pub(crate) used: c_ulonglong,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
pub struct MemoryV2 {
    pub(crate) version: c_uint,
    pub(crate) total: c_ulonglong,
    pub(crate) reserved: c_ulonglong,
    pub(crate) free: c_ulonglong,
    pub(crate) used: c_ulonglong,
}

/// `nvmlMemory_v2`: `sizeof(nvmlMemory_v2_t) | 2 << 24`.
pub(crate) const MEMORY_V2_VERSION: c_uint = 0x0200_0028;

/// `nvmlDeviceGetMemoryInfo`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(dev: NvmlDevice, mem: *mut Memory) -> u32 {
    with_target(dev, |d, t, path, _| {
        if let Some(e) = d.injected("memory_info") {
            return e;
        }
        let Some(v) = report(d, t, path) else {
            return ret::INVALID_ARGUMENT;
        };
        let m = Memory {
            total: v.total_bytes,
            free: v.total_bytes.saturating_sub(v.used_bytes),
            used: v.used_bytes,
        };
        // SAFETY: `mem` points to an nvmlMemory_t owned by the caller.
        unsafe { write(mem, m) }
    })
}

/// `nvmlDeviceGetMemoryInfo_v2`: checks the struct version like the driver.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(dev: NvmlDevice, mem: *mut MemoryV2) -> u32 {
    if mem.is_null() {
        return ret::INVALID_ARGUMENT;
    }
    // SAFETY: non-NULL, pointing to the caller's nvmlMemory_v2_t.
    if unsafe { std::ptr::addr_of!((*mem).version).read_unaligned() } != MEMORY_V2_VERSION {
        return ret::ARGUMENT_VERSION_MISMATCH;
    }
    with_target(dev, |d, t, path, _| {
        if let Some(e) = d.injected("memory_info") {
            return e;
        }
        let Some(v) = report(d, t, path) else {
            return ret::INVALID_ARGUMENT;
        };
        let m = MemoryV2 {
            version: MEMORY_V2_VERSION,
            total: v.total_bytes,
            reserved: 0,
            free: v.total_bytes.saturating_sub(v.used_bytes),
            used: v.used_bytes,
        };
        // SAFETY: as checked above.
        unsafe { write(mem, m) }
    })
}

/// `nvmlBAR1Memory_t`.
#[repr(C)]
pub struct Bar1Memory {
    pub(crate) total: c_ulonglong,
    pub(crate) free: c_ulonglong,
    pub(crate) used: c_ulonglong,
}

/// `nvmlDeviceGetBAR1MemoryInfo`: the simulator models a BAR1 aperture as
/// large as the device's (or MIG device's) memory with nothing mapped
/// through it. nvitop's view of a MIG device needs an answer here.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetBAR1MemoryInfo(
    dev: NvmlDevice,
    bar1: *mut Bar1Memory,
) -> u32 {
    with_target(dev, |d, t, _, _| {
        let total = match t {
            Target::Whole => d.memory_total_bytes,
            Target::Mig(j) => d.mig[j].memory_total_bytes,
        };
        let b = Bar1Memory {
            total,
            free: total,
            used: 0,
        };
        // SAFETY: `bar1` points to an nvmlBAR1Memory_t owned by the caller.
        unsafe { write(bar1, b) }
    })
}
