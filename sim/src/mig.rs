//! MIG: the mode of a GPU, its MIG devices' handles, and a MIG device's
//! parent and GPU/compute instance ids (the calls nvidia-smi-like clients
//! make: pynvml, nvitop, nvml-wrapper). A MIG device's name, UUID,
//! memory and processes are answered where a GPU's are.

use crate::out::write;
use crate::ret;
use crate::session::{handle_of, mig_handle_of, with_target, NvmlDevice};
use crate::state::{Target, MAX_MIG};
use std::ffi::c_uint;

/// `nvmlDeviceGetMigMode`: (current, pending), both the state's mode; a
/// board without MIG (no `mig_mode` in the state) answers NOT_SUPPORTED.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    dev: NvmlDevice,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> u32 {
    with_target(dev, |d, t, _, _| match (t, d.mig_mode) {
        (Target::Whole, Some(on)) => {
            if current.is_null() || pending.is_null() {
                return ret::INVALID_ARGUMENT;
            }
            // SAFETY: both non-NULL, pointing to the caller's unsigned ints.
            unsafe {
                write(current, c_uint::from(on));
                write(pending, c_uint::from(on))
            }
        }
        _ => ret::NOT_SUPPORTED,
    })
}

/// `nvmlDeviceGetMaxMigDeviceCount`: 7 in MIG mode, else 0 (nvml.h:
/// "zero if MIG is not supported or enabled").
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    dev: NvmlDevice,
    count: *mut c_uint,
) -> u32 {
    with_target(dev, |d, t, _, _| match t {
        Target::Mig(_) => ret::NOT_SUPPORTED,
        Target::Whole => {
            let n = if d.mig_mode == Some(true) { MAX_MIG } else { 0 };
            // SAFETY: `count` points to the caller's unsigned int.
            unsafe { write(count, n as c_uint) }
        }
    })
}

/// `nvmlDeviceGetMigDeviceHandleByIndex`: MIG device `index` of a GPU in
/// MIG mode; NOT_FOUND for an index below the maximum that holds no MIG
/// device (nvitop stops there), INVALID_ARGUMENT past the maximum.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    dev: NvmlDevice,
    index: c_uint,
    out: *mut NvmlDevice,
) -> u32 {
    with_target(dev, |d, t, _, i| {
        let j = index as usize;
        match t {
            Target::Whole if d.mig_mode == Some(true) && j < d.mig.len() => {
                // SAFETY: `out` points to a handle owned by the caller.
                unsafe { write(out, mig_handle_of(i, j)) }
            }
            Target::Whole if d.mig_mode == Some(true) && j < MAX_MIG => ret::NOT_FOUND,
            Target::Whole if d.mig_mode == Some(true) => ret::INVALID_ARGUMENT,
            _ => ret::NOT_SUPPORTED,
        }
    })
}

/// `nvmlDeviceIsMigDeviceHandle`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(dev: NvmlDevice, is_mig: *mut c_uint) -> u32 {
    with_target(dev, |_, t, _, _| {
        // SAFETY: `is_mig` points to an unsigned int owned by the caller.
        unsafe { write(is_mig, c_uint::from(matches!(t, Target::Mig(_)))) }
    })
}

/// `nvmlDeviceGetDeviceHandleFromMigDeviceHandle`: the parent GPU.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    dev: NvmlDevice,
    out: *mut NvmlDevice,
) -> u32 {
    with_target(dev, |_, t, _, i| match t {
        // SAFETY: `out` points to a handle owned by the caller.
        Target::Mig(_) => unsafe { write(out, handle_of(i)) },
        Target::Whole => ret::INVALID_ARGUMENT,
    })
}

unsafe fn instance_id(dev: NvmlDevice, id: *mut c_uint, compute: bool) -> u32 {
    with_target(dev, |d, t, _, _| match t {
        Target::Mig(j) => {
            let m = &d.mig[j];
            let v = if compute {
                m.compute_instance_id
            } else {
                m.gpu_instance_id
            };
            // SAFETY: `id` points to an unsigned int owned by the caller.
            unsafe { write(id, v) }
        }
        Target::Whole => ret::NOT_SUPPORTED,
    })
}

/// `nvmlDeviceGetGpuInstanceId` of a MIG device.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(dev: NvmlDevice, id: *mut c_uint) -> u32 {
    // SAFETY: nvml.h's contract, as `instance_id` writes it.
    unsafe { instance_id(dev, id, false) }
}

/// `nvmlDeviceGetComputeInstanceId` of a MIG device.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(dev: NvmlDevice, id: *mut c_uint) -> u32 {
    // SAFETY: nvml.h's contract, as `instance_id` writes it.
    unsafe { instance_id(dev, id, true) }
}
