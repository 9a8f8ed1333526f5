//! The health calls and the event API called as a C client would; run
//! from `abi`'s one test (the library's state is process-global).

use crate::ret;
use crate::*;
use std::ffi::{c_uint, c_ulonglong};

fn field_value(id: c_uint) -> FieldValue {
    FieldValue {
        field_id: id,
        scope_id: 0,
        timestamp: 0,
        latency_usec: 0,
        value_type: 0,
        nvml_return: 0,
        value: 0,
    }
}

/// GPU 0 reports everything, GPU 1 nothing (NOT_SUPPORTED), GPU 2
/// answers GPU_IS_LOST and RESET_REQUIRED where injected.
pub(crate) fn health_and_events(dir: &std::path::Path) {
    let me = std::process::id();
    let state = dir.join("health.json");
    std::fs::write(
        &state,
        format!(
            r#"{{"devices":[
            {{"name":"G","uuid":"GPU-0","pci_bus_id":"00000000:01:00.0","minor_number":0,"memory_total_bytes":1000,
              "recovery_action":"gpu_reset","retired_pages_pending":true,
              "remapped_rows":{{"pending":true,"failure":false,"correctable":2,"uncorrectable":1}},
              "xid_events":[{{"xid":48,"seconds_ago":5}},{{"xid":63,"pid":{me},"seconds_ago":1}}],
              "processes":[{{"pid":{me},"used_bytes":100,"sm_util":0,"mem_util":3}}]}},
            {{"name":"G","uuid":"GPU-1","pci_bus_id":"00000000:02:00.0","minor_number":1,"memory_total_bytes":1000,
              "xid_events":[{{"xid":79,"seconds_ago":9}}],
              "processes":[{{"pid":{me},"used_bytes":100}}]}},
            {{"name":"G","uuid":"GPU-2","pci_bus_id":"00000000:03:00.0","minor_number":2,"memory_total_bytes":1000,
              "errors":{{"remapped_rows":15,"field_values":16}}}}]}}"#
        ),
    )
    .unwrap();
    std::env::set_var("GPUFREE_SIM_STATE", &state);
    // SAFETY: valid pointers to locals, as a C client passes them.
    unsafe {
        assert_eq!(nvmlInit_v2(), ret::SUCCESS);
        let mut h = [std::ptr::null(); 3];
        for (i, h) in h.iter_mut().enumerate() {
            assert_eq!(nvmlDeviceGetHandleByIndex_v2(i as c_uint, h), ret::SUCCESS);
        }
        // Field values: per-field return codes, the call succeeds.
        let mut f = [field_value(FI_GPU_RECOVERY_ACTION), field_value(4)];
        assert_eq!(
            nvmlDeviceGetFieldValues(h[0], 2, f.as_mut_ptr()),
            ret::SUCCESS
        );
        assert_eq!(
            (f[0].nvml_return, f[0].value_type, f[0].value),
            (ret::SUCCESS, 1, 1)
        );
        assert_eq!(f[1].nvml_return, ret::NOT_SUPPORTED);
        let mut g = [field_value(FI_GPU_RECOVERY_ACTION)];
        assert_eq!(
            nvmlDeviceGetFieldValues(h[1], 1, g.as_mut_ptr()),
            ret::SUCCESS
        );
        assert_eq!(
            g[0].nvml_return,
            ret::NOT_SUPPORTED,
            "absent: not supported"
        );
        assert_eq!(
            nvmlDeviceGetFieldValues(h[2], 1, g.as_mut_ptr()),
            ret::RESET_REQUIRED
        );

        let (mut c, mut u, mut p, mut fl) = (0, 0, 0, 0);
        assert_eq!(
            nvmlDeviceGetRemappedRows(h[0], &mut c, &mut u, &mut p, &mut fl),
            ret::SUCCESS
        );
        assert_eq!((c, u, p, fl), (2, 1, 1, 0));
        assert_eq!(
            nvmlDeviceGetRemappedRows(h[1], &mut c, &mut u, &mut p, &mut fl),
            ret::NOT_SUPPORTED
        );
        assert_eq!(
            nvmlDeviceGetRemappedRows(h[2], &mut c, &mut u, &mut p, &mut fl),
            ret::GPU_IS_LOST
        );
        let mut pending: c_uint = 0;
        assert_eq!(
            nvmlDeviceGetRetiredPagesPendingStatus(h[0], &mut pending),
            ret::SUCCESS
        );
        assert_eq!(pending, 1);
        assert_eq!(
            nvmlDeviceGetRetiredPagesPendingStatus(h[1], &mut pending),
            ret::NOT_SUPPORTED
        );

        // Process utilisation: NULL asks the count (INSUFFICIENT_SIZE).
        let mut n: c_uint = 0;
        let r = nvmlDeviceGetProcessUtilization(h[0], std::ptr::null_mut(), &mut n, 0);
        assert_eq!((r, n), (ret::INSUFFICIENT_SIZE, 1));
        let mut s = [UtilSample {
            pid: 0,
            timestamp: 0,
            sm_util: 9,
            mem_util: 9,
            enc_util: 9,
            dec_util: 9,
        }];
        let r = nvmlDeviceGetProcessUtilization(h[0], s.as_mut_ptr(), &mut n, 0);
        assert_eq!(
            (r, s[0].pid, s[0].sm_util, s[0].mem_util),
            (ret::SUCCESS, me, 0, 3)
        );
        // A look back (gpufree's `--idle-window`): the sample is newer
        // than the CPU timestamp asked, in microseconds.
        let since = crate::health::now_us() - 5_000_000;
        let r = nvmlDeviceGetProcessUtilization(h[0], s.as_mut_ptr(), &mut n, since);
        assert_eq!(r, ret::SUCCESS);
        assert!(s[0].timestamp > since, "{} > {since}", s[0].timestamp);
        let r = nvmlDeviceGetProcessUtilization(h[0], s.as_mut_ptr(), &mut n, u64::MAX);
        assert_eq!(r, ret::NOT_FOUND, "nothing newer than the timestamp");
        let r = nvmlDeviceGetProcessUtilization(h[1], std::ptr::null_mut(), &mut n, 0);
        assert_eq!(r, ret::NOT_SUPPORTED);

        // Events: Xids in order, oldest first across GPUs, then TIMEOUT.
        let mut types: c_ulonglong = 0;
        assert_eq!(
            nvmlDeviceGetSupportedEventTypes(h[0], &mut types),
            ret::SUCCESS
        );
        assert_eq!(types, XID_CRITICAL_ERROR);
        let mut set: NvmlEventSet = std::ptr::null_mut();
        assert_eq!(nvmlEventSetCreate(&mut set), ret::SUCCESS);
        assert_eq!(
            nvmlDeviceRegisterEvents(h[0], 1 | 8, set),
            ret::NOT_SUPPORTED
        );
        for d in [h[0], h[1]] {
            assert_eq!(
                nvmlDeviceRegisterEvents(d, XID_CRITICAL_ERROR, set),
                ret::SUCCESS
            );
        }
        let mut got = Vec::new();
        loop {
            let mut e = EventData {
                device: std::ptr::null(),
                event_type: 0,
                event_data: 0,
                gpu_instance_id: 0,
                compute_instance_id: 0,
            };
            match nvmlEventSetWait_v2(set, &mut e, 10) {
                r if r == ret::SUCCESS => {
                    assert_eq!(
                        (e.event_type, e.gpu_instance_id),
                        (XID_CRITICAL_ERROR, u32::MAX)
                    );
                    got.push((h.iter().position(|&x| x == e.device).unwrap(), e.event_data));
                }
                r => {
                    assert_eq!(r, ret::TIMEOUT);
                    break;
                }
            }
        }
        assert_eq!(got, [(1, 79), (0, 48), (0, 63)]);
        assert_eq!(nvmlEventSetFree(set), ret::SUCCESS);
        assert_eq!(nvmlEventSetFree(set), ret::INVALID_ARGUMENT, "freed once");
        assert_eq!(nvmlShutdown(), ret::SUCCESS);
    }
}
