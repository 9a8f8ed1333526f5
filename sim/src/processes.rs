//! The running-process lists (compute, graphics, MPS; `_v3`, `_v2` and v1
//! records) and nvml.h's count protocol for them. On a MIG device's handle
//! the instance's processes; on a GPU in MIG mode every instance's, each
//! record with its GPU and compute instance ids.

use crate::ret;
use crate::session::{with_target, NvmlDevice};
use crate::state::{ProcessKind, Reported};
use crate::view::report;
use std::ffi::c_uint;

/// Writes the processes of `kind` with the `_v3`/`_v2` (24-byte) or v1
/// (16-byte) record, following the count protocol of nvml.h.
unsafe fn running(
    dev: NvmlDevice,
    count: *mut c_uint,
    infos: *mut u8,
    kind: ProcessKind,
    stride: usize,
) -> u32 {
    if count.is_null() {
        return ret::INVALID_ARGUMENT;
    }
    with_target(dev, |d, t, path, _| {
        let call = match kind {
            ProcessKind::Compute => "compute_processes",
            ProcessKind::Graphics => "graphics_processes",
            ProcessKind::Mps => "mps_processes",
        };
        if let Some(e) = d.injected(call) {
            return e;
        }
        let Some(v) = report(d, t, path) else {
            return ret::INVALID_ARGUMENT;
        };
        // The real driver lists an MPS client in the compute list too,
        // with the same memory as in the MPS list (seen on an H200, driver
        // 580.159); the device's used memory counts it once.
        let listed = |p: &Reported| {
            p.kind == kind || (kind == ProcessKind::Compute && p.kind == ProcessKind::Mps)
        };
        let list: Vec<Reported> = v.processes.into_iter().filter(listed).collect();
        // SAFETY: `count` is non-NULL and points to the caller's counter.
        let room = unsafe { count.read_unaligned() } as usize;
        // SAFETY: as above.
        unsafe { count.write_unaligned(list.len() as c_uint) };
        if list.is_empty() {
            return ret::SUCCESS;
        }
        if room < list.len() {
            return ret::INSUFFICIENT_SIZE;
        }
        if infos.is_null() {
            return ret::INVALID_ARGUMENT;
        }
        for (i, p) in list.iter().enumerate() {
            // SAFETY: the caller gave room for `room` >= list.len() records of
            // `stride` bytes; we write within record i only.
            unsafe {
                let rec = infos.add(i * stride);
                rec.cast::<u32>().write_unaligned(p.pid);
                rec.add(4).cast::<u32>().write_unaligned(0);
                rec.add(8).cast::<u64>().write_unaligned(p.used_bytes);
                if stride == 24 {
                    let gi = p.gpu_instance_id.unwrap_or(u32::MAX);
                    let ci = p.compute_instance_id.unwrap_or(u32::MAX);
                    rec.add(16).cast::<u32>().write_unaligned(gi);
                    rec.add(20).cast::<u32>().write_unaligned(ci);
                }
            }
        }
        ret::SUCCESS
    })
}

macro_rules! process_lists {
    ($($name:ident => $kind:ident, $stride:expr;)*) => {$(
        /// A running-processes list of nvml.h (count protocol, 24- or 16-byte records).
        #[no_mangle]
        pub unsafe extern "C" fn $name(dev: NvmlDevice, count: *mut c_uint, infos: *mut u8) -> u32 {
            // SAFETY: nvml.h's count/array contract, checked in `running`.
            unsafe { running(dev, count, infos, ProcessKind::$kind, $stride) }
        }
    )*};
}

process_lists! {
    nvmlDeviceGetComputeRunningProcesses_v3 => Compute, 24;
    nvmlDeviceGetGraphicsRunningProcesses_v3 => Graphics, 24;
    nvmlDeviceGetMPSComputeRunningProcesses_v3 => Mps, 24;
    nvmlDeviceGetComputeRunningProcesses_v2 => Compute, 24;
    nvmlDeviceGetGraphicsRunningProcesses_v2 => Graphics, 24;
    nvmlDeviceGetMPSComputeRunningProcesses_v2 => Mps, 24;
    nvmlDeviceGetComputeRunningProcesses => Compute, 16;
    nvmlDeviceGetGraphicsRunningProcesses => Graphics, 16;
    nvmlDeviceGetMPSComputeRunningProcesses => Mps, 16;
}
