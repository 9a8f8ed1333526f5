//! The `nvmlSystem*` queries: driver and CUDA versions, and process names.

use crate::out::{write, write_cstr};
use crate::ret;
use crate::session::with_state;
use std::ffi::{c_char, c_int, c_uint};
use std::path::Path;

/// `nvmlSystemGetDriverVersion`.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> u32 {
    // SAFETY: the caller's buffer contract is nvml.h's.
    with_state(|s| unsafe { write_cstr(version, length, &s.driver_version) })
}

/// `nvmlSystemGetNVMLVersion`: CUDA major version, a dot, the driver version.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> u32 {
    with_state(|s| {
        let v = format!("{}.{}", s.cuda_driver_version / 1000, s.driver_version);
        // SAFETY: the caller's buffer contract is nvml.h's.
        unsafe { write_cstr(version, length, &v) }
    })
}

/// `nvmlSystemGetCudaDriverVersion`.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(v: *mut c_int) -> u32 {
    // SAFETY: `v` points to an int owned by the caller.
    with_state(|s| unsafe { write(v, s.cuda_driver_version) })
}

/// `nvmlSystemGetCudaDriverVersion_v2`.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(v: *mut c_int) -> u32 {
    // SAFETY: as for the unversioned call.
    unsafe { nvmlSystemGetCudaDriverVersion(v) }
}

/// `nvmlSystemGetProcessName`: the first argument of the process's cmdline,
/// else its comm, as the real library reports.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetProcessName(
    pid: c_uint,
    name: *mut c_char,
    length: c_uint,
) -> u32 {
    with_state(|_| {
        let dir = Path::new("/proc").join(pid.to_string());
        let from_cmdline = std::fs::read(dir.join("cmdline")).ok().and_then(|c| {
            let first = c.split(|&b| b == 0).next().unwrap_or_default();
            (!first.is_empty()).then(|| String::from_utf8_lossy(first).into_owned())
        });
        let from_comm = || {
            std::fs::read_to_string(dir.join("comm"))
                .ok()
                .map(|s| s.trim_end().to_string())
        };
        match from_cmdline.or_else(from_comm) {
            // SAFETY: the caller's buffer contract is nvml.h's.
            Some(n) => unsafe { write_cstr(name, length, &n) },
            None => ret::NOT_FOUND,
        }
    })
}
