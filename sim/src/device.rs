//! Finding devices and their identity: the device count, handles by index,
//! UUID (a GPU's or a MIG device's) or PCI bus id, and name, UUID, index
//! and minor number, of a GPU or a MIG device.

use crate::out::{write, write_cstr};
use crate::pci::Pci;
use crate::ret;
use crate::session::{handle_of, mig_handle_of, with_device, with_state, with_target, NvmlDevice};
use crate::state::{self, Device, Target};
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
    let whole = unsafe { handle_where(uuid, out, |d, k| d.uuid == k) };
    if whole != ret::NOT_FOUND || uuid.is_null() {
        return whole;
    }
    // SAFETY: non-NULL, NUL-terminated per nvml.h.
    let key = unsafe { CStr::from_ptr(uuid) }
        .to_string_lossy()
        .into_owned();
    with_state(|s| {
        let hit = s.devices.iter().enumerate().find_map(|(i, d)| {
            let j = d.mig.iter().position(|m| m.uuid == key)?;
            (d.mig_mode == Some(true)).then_some((i, j))
        });
        match hit {
            // SAFETY: `out` points to a handle owned by the caller.
            Some((i, j)) => unsafe { write(out, mig_handle_of(i, j)) },
            None => ret::NOT_FOUND,
        }
    })
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
    with_target(dev, |d, t, _, _| {
        if let Some(e) = d.injected("name") {
            return e;
        }
        let text = match t {
            Target::Whole => d.name.clone(),
            // A real MIG device's name ends with its profile.
            Target::Mig(j) => format!("{} MIG {}", d.name, d.mig[j].profile)
                .trim_end()
                .to_string(),
        };
        // SAFETY: the caller's buffer contract is nvml.h's.
        unsafe { write_cstr(name, length, &text) }
    })
}

/// `nvmlDeviceGetUUID`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    dev: NvmlDevice,
    uuid: *mut c_char,
    length: c_uint,
) -> u32 {
    with_target(dev, |d, t, _, _| {
        if let Some(e) = d.injected("uuid") {
            return e;
        }
        let text = match t {
            Target::Whole => &d.uuid,
            Target::Mig(j) => &d.mig[j].uuid,
        };
        // SAFETY: the caller's buffer contract is nvml.h's.
        unsafe { write_cstr(uuid, length, text) }
    })
}

/// `nvmlDeviceGetIndex`: on a MIG device, its index under its GPU (what
/// `nvmlDeviceGetMigDeviceHandleByIndex` takes), as nvml.h says.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(dev: NvmlDevice, index: *mut c_uint) -> u32 {
    with_target(dev, |_, t, _, i| {
        let n = match t {
            Target::Whole => i,
            Target::Mig(j) => j,
        };
        // SAFETY: `index` points to an unsigned int owned by the caller.
        unsafe { write(index, n as c_uint) }
    })
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
