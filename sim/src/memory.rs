//! Memory: `nvmlMemory_t`, `nvmlMemory_v2_t` and `nvmlDeviceGetMemoryInfo*`,
//! the used bytes following from the processes the device reports now.

use crate::out::write;
use crate::ret;
use crate::session::{with_device, NvmlDevice};
use crate::view::view;
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
    with_device(dev, |d, path, _| {
        if let Some(e) = d.injected("memory_info") {
            return e;
        }
        let used = view(d, path).used_bytes;
        let m = Memory {
            total: d.memory_total_bytes,
            free: d.memory_total_bytes - used,
            used,
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
    with_device(dev, |d, path, _| {
        if let Some(e) = d.injected("memory_info") {
            return e;
        }
        let used = view(d, path).used_bytes;
        let m = MemoryV2 {
            version: MEMORY_V2_VERSION,
            total: d.memory_total_bytes,
            reserved: 0,
            free: d.memory_total_bytes - used,
            used,
        };
        // SAFETY: as checked above.
        unsafe { write(mem, m) }
    })
}
