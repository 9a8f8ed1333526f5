//! The driver's evidence on the simulator and a kernel-log fixture:
//! `status --json` shows NVIDIA's recovery action, remapped rows, retired
//! pages, utilisation and the kernel log's Xids on the GPU they belong to,
//! and says "not supported" where the driver does, never "no fault".

use crate::cmd::Gpufree;
use crate::harness::*;
use serde_json::{json, Value};

const KMSG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/kmsg/two-gpus.kmsg");

#[test]
fn a_gpu_reset_recovery_action_and_kernel_xids_show_on_the_right_gpu() {
    let dir = TestDir::new(2);
    let holder = dir.mapper("nvidia1");
    let mut gpu1 = sim_gpu(1, &[(holder.pid(), 4096, "while-alive")], 0);
    gpu1["processes"][0]["sm_util"] = json!(0);
    gpu1["processes"][0]["mem_util"] = json!(0);
    gpu1["recovery_action"] = json!("gpu_reset");
    gpu1["remapped_rows"] =
        json!({"pending": true, "failure": false, "correctable": 0, "uncorrectable": 1});
    gpu1["retired_pages_pending"] = json!(false);
    gpu1["xid_events"] = json!([{"xid": 48, "seconds_ago": 30}]);
    let state = dir.state(&sim_state(vec![sim_gpu(0, &[], 0), gpu1]));
    let doc = Gpufree::new(["status"])
        .json()
        .on(&dir, &state)
        .kmsg(KMSG)
        .run()
        .assert_exit(0)
        .json();
    let e = &doc["gpus"][1]["driver_evidence"];
    assert_eq!(
        e["recovery_action"],
        json!({"value": "gpu_reset"}),
        "{doc:#}"
    );
    assert_eq!(e["remapped_rows"]["value"]["pending"], true);
    assert_eq!(e["remapped_rows"]["value"]["uncorrectable"], 1);
    assert_eq!(e["retired_pages_pending"], json!({"value": false}));
    assert_eq!(e["volatile_uncorrectable_ecc"], "not_supported");
    let util = e["process_utilization"]["value"]
        .as_array()
        .expect("sampled");
    assert_eq!(util.len(), 1);
    assert_eq!(
        (util[0]["pid"].clone(), util[0]["sm"].clone()),
        (json!(holder.pid()), json!(0))
    );
    let xids = e["xids"].as_array().expect("GPU 1's Xids");
    assert_eq!(xids.len(), 1);
    assert_eq!(
        (xids[0]["xid"].clone(), xids[0]["gpu"].clone()),
        (json!(48), json!(1))
    );
    assert!(
        xids[0]["at_unix_ms"].as_u64().is_some(),
        "wall clock from btime"
    );
    // GPU 0: the driver supports none of it, and says so; its Xid names
    // a process (raw, as the log has it).
    let e0 = &doc["gpus"][0]["driver_evidence"];
    assert_eq!(e0["recovery_action"], "not_supported");
    assert_eq!(e0["remapped_rows"], "not_supported");
    assert_eq!(e0["xids"][0]["xid"], 31);
    assert_eq!(e0["xids"][0]["pid"], 4242);
    assert_eq!(e0["xids"][0]["comm"], "python3");
    // The log itself: every Xid, one on no GPU of this host.
    let all = doc["kernel_log"]["xids"]["value"].as_array().expect("read");
    assert_eq!(all.len(), 3);
    assert_eq!(all[2]["xid"], 79);
    assert!(all[2].get("gpu").is_none(), "0000:99:00 is no GPU here");
}

#[test]
fn not_supported_everywhere_is_said_and_the_verdict_is_unchanged() {
    let dir = TestDir::new(1);
    let holder = dir.mapper("nvidia0");
    let state = dir.one_gpu(&[(holder.pid(), 4096, "while-alive")], 0);
    let quiet = Gpufree::new(["status"])
        .json()
        .on(&dir, &state)
        .kmsg("off")
        .run()
        .assert_exit(0)
        .json();
    let e = &quiet["gpus"][0]["driver_evidence"];
    for reading in [
        "recovery_action",
        "remapped_rows",
        "retired_pages_pending",
        "volatile_uncorrectable_ecc",
        "process_utilization",
    ] {
        assert_eq!(e[reading], "not_supported", "{reading} is said: {e}");
    }
    assert!(quiet.get("kernel_log").is_none(), "not read");
    let unreadable = Gpufree::new(["status"])
        .json()
        .on(&dir, &state)
        .kmsg("/nonexistent/kmsg")
        .run()
        .assert_exit(0)
        .json();
    let why = unreadable["kernel_log"]["xids"]["failed"]
        .as_str()
        .expect("a failure");
    assert!(why.contains("No such file"), "{why}");
    assert_eq!(quiet["verdict"], unreadable["verdict"]);
    assert_eq!(
        quiet["gpus"][0]["verdict"],
        unreadable["gpus"][0]["verdict"]
    );
    assert_eq!(quiet["verdict"]["state"], "busy");
}

/// pynvml, an NVML client written apart from both the simulator and
/// gpufree, reads the same evidence through the real ABI: the recovery
/// action field, remapped rows, retired pages, process utilisation and
/// Xid events; NOT_SUPPORTED where the state leaves them out. nvitop
/// still runs on such a host.
#[test]
fn pynvml_reads_the_evidence_through_the_real_abi() {
    let has = std::process::Command::new("python3")
        .args(["-c", "import pynvml, nvitop"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install nvidia-ml-py and nvitop"
        );
        eprintln!("skipped: pip install nvidia-ml-py nvitop");
        return;
    }
    let dir = TestDir::new(2);
    let me = std::process::id();
    let mut gpu0 = sim_gpu(0, &[(me, 1024, "while-alive")], 0);
    gpu0["processes"][0]["sm_util"] = json!(7);
    gpu0["processes"][0]["mem_util"] = json!(2);
    gpu0["recovery_action"] = json!("node_reboot");
    gpu0["remapped_rows"] =
        json!({"pending": false, "failure": true, "correctable": 3, "uncorrectable": 4});
    gpu0["retired_pages_pending"] = json!(true);
    gpu0["xid_events"] = json!([{"xid": 79, "seconds_ago": 1}]);
    let state = dir.state(&sim_state(vec![gpu0, sim_gpu(1, &[], 0)]));
    let script = r#"
import json, pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
out = {}
out["action"] = n.nvmlDeviceGetFieldValues(h, [230])[0].value.uiVal
out["rows"] = list(n.nvmlDeviceGetRemappedRows(h))
out["pending"] = n.nvmlDeviceGetRetiredPagesPendingStatus(h)
out["util"] = [[s.pid, s.smUtil, s.memUtil] for s in n.nvmlDeviceGetProcessUtilization(h, 0)]
s = n.nvmlEventSetCreate()
n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, s)
out["xid"] = n.nvmlEventSetWait_v2(s, 1000).eventData
n.nvmlEventSetFree(s)
g = n.nvmlDeviceGetHandleByIndex(1)
out["bare"] = []
for call in (lambda: n.nvmlDeviceGetRemappedRows(g), lambda: n.nvmlDeviceGetRetiredPagesPendingStatus(g)):
    try:
        call(); out["bare"].append("answered")
    except n.NVMLError_NotSupported:
        out["bare"].append("not supported")
out["bare_field"] = n.nvmlDeviceGetFieldValues(g, [230])[0].nvmlReturn
n.nvmlShutdown()
print(json.dumps(out))
"#;
    let st = state.to_str().unwrap();
    let r = Gpufree::new(["sim", "exec", "--state", st, "--", "python3", "-c", script]).run();
    r.assert_exit(0);
    let got: Value = serde_json::from_str(r.stdout.trim()).expect("pynvml's JSON");
    assert_eq!(got["action"], 2, "NODE_REBOOT");
    assert_eq!(got["rows"], json!([3, 4, 0, 1]));
    assert_eq!(got["pending"], 1);
    assert_eq!(got["util"], json!([[me, 7, 2]]));
    assert_eq!(got["xid"], 79);
    assert_eq!(got["bare"], json!(["not supported", "not supported"]));
    assert_eq!(got["bare_field"], 3, "NVML_ERROR_NOT_SUPPORTED per field");
    Gpufree::new(["sim", "exec", "--state", st, "--", "nvitop", "-1"])
        .run()
        .assert_exit_with(0, "nvitop");
}

/// A long-running command hears Xids from NVML's event API (it reads no
/// kernel log): serve's metrics count the Xid NVML delivered on GPU 0,
/// and its finding says the GPU needs a reboot, while GPU 1 has none.
#[test]
fn serve_counts_the_xids_nvmls_event_api_delivers_on_their_gpu() {
    use crate::daemon::{get, serve, until};
    let dir = TestDir::new(2);
    let holder = dir.mapper("nvidia0");
    let mut gpu0 = sim_gpu(0, &[(holder.pid(), 4096, "while-alive")], 0);
    gpu0["xid_events"] = json!([{"xid": 79, "seconds_ago": 2}]);
    let state = dir.state(&sim_state(vec![gpu0, sim_gpu(1, &[], 0)]));
    let (daemon, addr) = serve("serve-xid", &dir, &state, "200ms", &[]);
    let url = format!("http://{addr}/metrics");
    let text = until("the Xid event in serve's metrics", 20, &[&daemon], || {
        get(&url, &[]).filter(|t| t.contains("gpufree_gpu_xid_reports{"))
    });
    let xids: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("gpufree_gpu_xid_reports{"))
        .collect();
    assert_eq!(xids.len(), 1, "{text}");
    assert!(
        xids[0].contains(r#"gpu="0""#)
            && xids[0].contains(r#"xid="79""#)
            && xids[0].ends_with(" 1"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("gpufree_findings{")
            && l.contains(r#"kind="driver-fault""#)
            && l.contains(r#"gpu="0""#)
            && !l.ends_with(" 0")),
        "no driver-fault finding for GPU 0:\n{text}"
    );
}
