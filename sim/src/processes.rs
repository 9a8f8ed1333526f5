//! The running-process lists (compute, graphics, MPS; `_v3`, `_v2` and v1
//! records) and nvml.h's count protocol for them.

use crate::ret;
use crate::session::{with_device, NvmlDevice};
use crate::state::ProcessKind;
use crate::view::view;
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
    with_device(dev, |d, path, _| {
        let call = match kind {
            ProcessKind::Compute => "compute_processes",
            ProcessKind::Graphics => "graphics_processes",
            ProcessKind::Mps => "mps_processes",
        };
        if let Some(e) = d.injected(call) {
            return e;
        }
        let list: Vec<(u32, u64)> = view(d, path)
            .processes
            .into_iter()
            .filter(|p| p.2 == kind)
            .map(|p| (p.0, p.1))
            .collect();
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
        for (i, (pid, used)) in list.iter().enumerate() {
            // SAFETY: the caller gave room for `room` >= list.len() records of
            // `stride` bytes; we write within record i only.
            unsafe {
                let rec = infos.add(i * stride);
                rec.cast::<u32>().write_unaligned(*pid);
                rec.add(4).cast::<u32>().write_unaligned(0);
                rec.add(8).cast::<u64>().write_unaligned(*used);
                if stride == 24 {
                    rec.add(16).cast::<u32>().write_unaligned(u32::MAX);
                    rec.add(20).cast::<u32>().write_unaligned(u32::MAX);
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
