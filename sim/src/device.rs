//! Finding devices and their identity: the device count, handles by index,
//! UUID or PCI bus id, and name, UUID, index, minor number and MIG status.

use crate::out::{write, write_cstr};
use crate::pci::Pci;
use crate::ret;
use crate::session::{handle_of, with_device, with_state, NvmlDevice};
use crate::state::{self, Device};
use std::ffi::{c_char, c_uint, CStr};

/// `nvmlDeviceGetCount_v2`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> u32 {
    // SAFETY: `count` points to an unsigned int owned by the caller.
    with_state(|s| {
        state::hang(&s.hang_ms, "device_count");
        // SAFETY: as above.
        unsafe { write(count, s.devices.len() as c_uint) }
    })
}

/// `nvmlDeviceGetCount` (v1 name).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount(count: *mut c_uint) -> u32 {
    // SAFETY: as for `_v2`.
    unsafe { nvmlDeviceGetCount_v2(count) }
}

/// `nvmlDeviceGetHandleByIndex_v2`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, out: *mut NvmlDevice) -> u32 {
    with_state(|s| {
        if (index as usize) < s.devices.len() {
            // SAFETY: `out` points to a handle owned by the caller.
            unsafe { write(out, handle_of(index as usize)) }
        } else {
            ret::INVALID_ARGUMENT
        }
    })
}

/// `nvmlDeviceGetHandleByIndex` (v1 name).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(index: c_uint, out: *mut NvmlDevice) -> u32 {
    // SAFETY: as for `_v2`.
    unsafe { nvmlDeviceGetHandleByIndex_v2(index, out) }
}

unsafe fn handle_where(
    key: *const c_char,
    out: *mut NvmlDevice,
    hit: impl Fn(&Device, &str) -> bool,
) -> u32 {
    if key.is_null() {
        return ret::INVALID_ARGUMENT;
    }
    // SAFETY: nvml.h's contract: a NUL-terminated string.
    let key = unsafe { CStr::from_ptr(key) }
        .to_string_lossy()
        .into_owned();
    with_state(|s| match s.devices.iter().position(|d| hit(d, &key)) {
        // SAFETY: `out` points to a handle owned by the caller.
        Some(i) => unsafe { write(out, handle_of(i)) },
        None => ret::NOT_FOUND,
    })
}

/// `nvmlDeviceGetHandleByUUID`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    out: *mut NvmlDevice,
) -> u32 {
    // SAFETY: nvml.h's contract.
    unsafe { handle_where(uuid, out, |d, k| d.uuid == k) }
}

/// `nvmlDeviceGetHandleByPciBusId_v2`: full or legacy (short) bus id.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    bus: *const c_char,
    out: *mut NvmlDevice,
) -> u32 {
    // SAFETY: nvml.h's contract.
    unsafe {
        handle_where(bus, out, |d, k| {
            let p = Pci::parse(&d.pci_bus_id);
            k.eq_ignore_ascii_case(&p.bus_id()) || k.eq_ignore_ascii_case(&p.legacy())
        })
    }
}

/// `nvmlDeviceGetHandleByPciBusId` (v1 name).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId(
    bus: *const c_char,
    out: *mut NvmlDevice,
) -> u32 {
    // SAFETY: as for `_v2`.
    unsafe { nvmlDeviceGetHandleByPciBusId_v2(bus, out) }
}

/// `nvmlDeviceGetName`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    dev: NvmlDevice,
    name: *mut c_char,
    length: c_uint,
) -> u32 {
    with_device(dev, |d, _, _| match d.injected("name") {
        Some(e) => e,
        // SAFETY: the caller's buffer contract is nvml.h's.
        None => unsafe { write_cstr(name, length, &d.name) },
    })
}

/// `nvmlDeviceGetUUID`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    dev: NvmlDevice,
    uuid: *mut c_char,
    length: c_uint,
) -> u32 {
    with_device(dev, |d, _, _| match d.injected("uuid") {
        Some(e) => e,
        // SAFETY: the caller's buffer contract is nvml.h's.
        None => unsafe { write_cstr(uuid, length, &d.uuid) },
    })
}

/// `nvmlDeviceGetIndex`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(dev: NvmlDevice, index: *mut c_uint) -> u32 {
    // SAFETY: `index` points to an unsigned int owned by the caller.
    with_device(dev, |_, _, i| unsafe { write(index, i as c_uint) })
}

/// `nvmlDeviceGetMinorNumber`: N of /dev/nvidiaN.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(dev: NvmlDevice, minor: *mut c_uint) -> u32 {
    with_device(dev, |d, _, _| match d.injected("minor_number") {
        Some(e) => e,
        // SAFETY: `minor` points to an unsigned int owned by the caller.
        None => unsafe { write(minor, d.minor_number) },
    })
}

/// `nvmlDeviceIsMigDeviceHandle`: simulated GPUs are never MIG instances.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(dev: NvmlDevice, is_mig: *mut c_uint) -> u32 {
    // SAFETY: `is_mig` points to an unsigned int owned by the caller.
    with_device(dev, |_, _, _| unsafe { write(is_mig, 0) })
}
