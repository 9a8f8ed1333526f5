//! The exported ABI called as a C client would. One test function: the
//! library's state is process-global.

use crate::memory::MEMORY_V2_VERSION;
use crate::ret;
use crate::*;
use std::ffi::{c_char, c_uint, CStr};

#[test]
fn refcount_count_protocol_and_version_checks() {
    let dir = std::env::temp_dir().join(format!("gpufree-sim-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("s.json");
    let me = std::process::id();
    std::fs::write(
        &state,
        format!(
            r#"{{"devices":[{{"name":"G","uuid":"GPU-1","pci_bus_id":"00000000:01:00.0","minor_number":0,
            "memory_total_bytes":1000,"memory_baseline_bytes":10,
            "processes":[{{"pid":{me},"used_bytes":100}},{{"pid":4194304,"used_bytes":7,"visible":"always"}},
                         {{"pid":4194305,"used_bytes":9,"type":"graphics","visible":"always"}}]}}]}}"#
        ),
    )
    .unwrap();
    std::env::set_var("GPUFREE_SIM_STATE", &state);
    let mut count: c_uint = 0;
    // SAFETY: valid pointers to locals, as a C client passes them.
    unsafe {
        assert_eq!(nvmlDeviceGetCount_v2(&mut count), ret::UNINITIALIZED);
        assert_eq!(nvmlInit_v2(), ret::SUCCESS);
        assert_eq!(nvmlInitWithFlags(0), ret::SUCCESS);
        assert_eq!(nvmlShutdown(), ret::SUCCESS);
        assert_eq!(
            nvmlDeviceGetCount_v2(&mut count),
            ret::SUCCESS,
            "still initialised once"
        );
        assert_eq!(count, 1);
        let mut h: NvmlDevice = std::ptr::null();
        assert_eq!(nvmlDeviceGetHandleByIndex_v2(0, &mut h), ret::SUCCESS);
        assert_eq!(
            nvmlDeviceGetHandleByIndex_v2(1, &mut h),
            ret::INVALID_ARGUMENT
        );
        assert_eq!(nvmlDeviceGetHandleByIndex_v2(0, &mut h), ret::SUCCESS);

        // Count protocol: ask with 0 and NULL, then too small, then enough.
        let mut n: c_uint = 0;
        let r = nvmlDeviceGetComputeRunningProcesses_v3(h, &mut n, std::ptr::null_mut());
        assert_eq!((r, n), (ret::INSUFFICIENT_SIZE, 2));
        let mut buf = [0u8; 24 * 3];
        let mut n: c_uint = 1;
        let r = nvmlDeviceGetComputeRunningProcesses_v3(h, &mut n, buf.as_mut_ptr());
        assert_eq!((r, n), (ret::INSUFFICIENT_SIZE, 2));
        let mut n: c_uint = 3;
        let r = nvmlDeviceGetComputeRunningProcesses_v3(h, &mut n, buf.as_mut_ptr());
        assert_eq!((r, n), (ret::SUCCESS, 2));
        assert_eq!(u32::from_ne_bytes(buf[0..4].try_into().unwrap()), me);
        assert_eq!(u64::from_ne_bytes(buf[8..16].try_into().unwrap()), 100);
        assert_eq!(
            u32::from_ne_bytes(buf[16..20].try_into().unwrap()),
            u32::MAX,
            "no MIG"
        );
        assert_eq!(
            u32::from_ne_bytes(buf[24..28].try_into().unwrap()),
            4_194_304
        );
        let mut n: c_uint = 5;
        let mut v1 = [0u8; 16 * 5];
        assert_eq!(
            nvmlDeviceGetGraphicsRunningProcesses(h, &mut n, v1.as_mut_ptr()),
            ret::SUCCESS
        );
        assert_eq!(n, 1);
        assert_eq!(
            u64::from_ne_bytes(v1[8..16].try_into().unwrap()),
            9,
            "v1 records are 16 bytes"
        );

        // Memory: v1, and v2 with and without the right version.
        let mut m = Memory {
            total: 0,
            free: 0,
            used: 0,
        };
        assert_eq!(nvmlDeviceGetMemoryInfo(h, &mut m), ret::SUCCESS);
        assert_eq!((m.total, m.used, m.free), (1000, 126, 874));
        let mut m2 = MemoryV2 {
            version: 1,
            total: 0,
            reserved: 0,
            free: 0,
            used: 0,
        };
        assert_eq!(
            nvmlDeviceGetMemoryInfo_v2(h, &mut m2),
            ret::ARGUMENT_VERSION_MISMATCH
        );
        m2.version = MEMORY_V2_VERSION;
        assert_eq!(nvmlDeviceGetMemoryInfo_v2(h, &mut m2), ret::SUCCESS);
        assert_eq!(m2.used, 126);

        // Strings: too short a buffer is INSUFFICIENT_SIZE.
        let mut small = [0 as c_char; 4];
        assert_eq!(
            nvmlDeviceGetUUID(h, small.as_mut_ptr(), 4),
            ret::INSUFFICIENT_SIZE
        );
        let mut uuid = [0 as c_char; 96];
        assert_eq!(nvmlDeviceGetUUID(h, uuid.as_mut_ptr(), 96), ret::SUCCESS);
        assert_eq!(CStr::from_ptr(uuid.as_ptr()).to_str().unwrap(), "GPU-1");
        assert_eq!(nvmlDeviceGetFanSpeed(), ret::NOT_SUPPORTED);

        assert_eq!(nvmlShutdown(), ret::SUCCESS);
        assert_eq!(nvmlDeviceGetCount_v2(&mut count), ret::UNINITIALIZED);
        assert_eq!(nvmlShutdown(), ret::UNINITIALIZED);
        assert_eq!(nvmlDeviceGetFanSpeed(), ret::UNINITIALIZED);
    }
    super::abi_health::health_and_events(&dir);
    std::fs::remove_dir_all(dir).unwrap();
}
