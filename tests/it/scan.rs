//! The holder scan on real processes: fd, mmap, maps-only, renamed,
//! non-UTF-8 argv, exiting mid-scan, dead leaders, unreadable processes,
//! a container's own node for the same device.

use crate::harness::*;
use gpufree::demo::holder::HoldSpec;

#[test]
fn fd_only_mmap_and_maps_only_holders_are_found_with_how_they_hold() {
    let d = TestDir::new(2);
    let fd_only = hold(
        &["gpufree"],
        HoldSpec {
            fd: vec![d.node("nvidia0")],
            ..HoldSpec::default()
        },
    );
    let both = d.mapper("nvidia1");
    let maps_only = hold(
        &["gpufree"],
        HoldSpec {
            maps_only: vec![d.node("nvidia-uvm")],
            ..HoldSpec::default()
        },
    );
    let doc = Gpufree::new(["status"]).json().dev(&d.dev).no_nvml().doc();
    let p = process(&doc, fd_only.pid()).expect("fd-only holder found");
    assert_eq!(via(p, "nvidia0"), ["fd"]);
    assert_eq!(p["devices"][0]["gpu"], 0);
    let p = process(&doc, both.pid()).expect("fd+mmap holder found");
    assert_eq!(via(p, "nvidia1"), ["fd", "mmap"]);
    assert_eq!(p["devices"][0]["gpu"], 1);
    let p =
        process(&doc, maps_only.pid()).expect("maps-only holder found (fd closed, mapping kept)");
    assert_eq!(via(p, "nvidia-uvm"), ["mmap"]);
    assert!(
        p["devices"][0]["gpu"].is_null(),
        "nvidia-uvm is a shared node: gpu is null"
    );
    assert_eq!(
        doc["processes"].as_array().unwrap().len(),
        3,
        "nothing else holds these files: {doc}"
    );
}

#[test]
fn renamed_holders_are_flagged_and_plain_ones_are_not() {
    let d = TestDir::new(1);
    let plain = hold(
        &["gpufree", "--serve-model"],
        HoldSpec {
            fd: vec![d.node("nvidia0")],
            ..HoldSpec::default()
        },
    );
    let title = hold(
        &["gpufree", "-m", "vllm.entrypoints.openai.api_server"],
        HoldSpec {
            title: Some("VLLM::Worker_TP0".into()),
            mmap: vec![d.node("nvidia0")],
            ..HoldSpec::default()
        },
    );
    let comm_only = hold(
        &["gpufree", "train.py"],
        HoldSpec {
            comm: Some("pt_data_worker".into()),
            fd: vec![d.node("nvidia0")],
            ..HoldSpec::default()
        },
    );
    let doc = Gpufree::new(["status"]).json().dev(&d.dev).no_nvml().doc();
    let p = process(&doc, plain.pid()).unwrap();
    assert_eq!(p["renamed"], false, "{p}");
    assert_eq!(
        p["cmdline"],
        serde_json::json!(["gpufree", "--serve-model"])
    );
    let p = process(&doc, title.pid()).unwrap();
    assert_eq!(p["renamed"], true);
    assert_eq!(p["comm"], "VLLM::Worker_TP", "comm is cut at 15 bytes");
    assert_eq!(
        p["cmdline"],
        serde_json::json!(["VLLM::Worker_TP0"]),
        "NUL padding is not an argument"
    );
    assert!(
        p["exe"].as_str().unwrap().ends_with("/gpufree"),
        "exe is unchanged: {}",
        p["exe"]
    );
    let p = process(&doc, comm_only.pid()).unwrap();
    assert_eq!(p["renamed"], true);
    assert_eq!(p["comm"], "pt_data_worker");
}

#[test]
fn non_utf8_command_line_is_escaped_not_lost() {
    use std::os::unix::ffi::OsStrExt;
    let d = TestDir::new(1);
    let json = serde_json::to_string(&HoldSpec {
        fd: vec![d.node("nvidia0")],
        ..HoldSpec::default()
    })
    .unwrap();
    let mut child = std::process::Command::new(bin())
        .arg(std::ffi::OsStr::from_bytes(b"model-\xff\xfe.bin"))
        .env(gpufree::demo::holder::HOLDER_ENV, json)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(first_line(&mut child).starts_with("ready"));
    let doc = Gpufree::new(["status"]).json().dev(&d.dev).no_nvml().doc();
    let p = process(&doc, child.id()).expect("holder found");
    assert_eq!(p["cmdline"][1], "model-\\xff\\xfe.bin");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn holders_exiting_mid_scan_are_gone_not_errors() {
    let d = TestDir::new(1);
    let mut quitting = Vec::new();
    for i in 0..24u64 {
        quitting.push(hold(
            &["gpufree"],
            HoldSpec {
                mmap: vec![d.node("nvidia0")],
                exit_after_ms: Some(20 + i * 15),
                ..HoldSpec::default()
            },
        ));
    }
    let mut seen_some = false;
    for _ in 0..40 {
        let doc = Gpufree::new(["status"]).json().dev(&d.dev).no_nvml().doc(); // asserts exit 0 and valid JSON each time
        seen_some |= !doc["processes"].as_array().unwrap().is_empty();
        for p in doc["processes"].as_array().unwrap() {
            assert!(
                quitting.iter().any(|q| q.pid() == p["pid"]),
                "only our holders: {p}"
            );
        }
    }
    assert!(seen_some, "the holders were seen before they exited");
    std::thread::sleep(std::time::Duration::from_millis(400));
    let doc = Gpufree::new(["status"]).json().dev(&d.dev).no_nvml().doc();
    assert!(
        doc["processes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["state"] == "Z"),
        "exited holders are not holders: {doc}"
    );
}

#[test]
fn dead_thread_group_leader_with_live_threads_still_holds() {
    let d = TestDir::new(1);
    let h = hold(
        &["gpufree"],
        HoldSpec {
            mmap: vec![d.node("nvidia0")],
            leader_exits: true,
            ..HoldSpec::default()
        },
    );
    // Wait until the leader is a zombie while its thread lives on.
    wait_state(h.pid(), 'Z');
    let doc = Gpufree::new(["status"]).json().dev(&d.dev).no_nvml().doc();
    let p = process(&doc, h.pid()).expect("found through task/*/");
    assert_eq!(p["state"], "Z");
    assert_eq!(via(p, "nvidia0"), ["fd", "mmap"]);
}

/// A zombie leader's /proc/PID/fd is root's (its memory is gone) while its
/// live threads' are their owner's: a non-root gpufree finds its user's
/// holder through them, as root does, rather than calling it unreadable.
#[test]
fn a_non_root_scan_reads_the_threads_of_a_zombie_leader() {
    let python = std::path::Path::new("/usr/bin/python3");
    if !rustix::process::geteuid().is_root() || !python.exists() {
        eprintln!("skipped: needs root and /usr/bin/python3 to start a process as nobody");
        return;
    }
    let d = TestDir::new(1);
    let scan = as_nobody(&d, &["status", "--scan", "procfs"])
        .json()
        .dev(&d.dev);
    let script = format!(
        "import ctypes,os,threading,time\nlibc=ctypes.CDLL(None)\nf=os.open({:?},os.O_RDONLY)\nfor _ in range(3):\n    threading.Thread(target=time.sleep,args=(120,),daemon=True).start()\nprint('ready',flush=True)\nlibc.syscall({{'x86_64':60,'aarch64':93}}[os.uname().machine],0)",
        d.node("nvidia0").to_str().unwrap()
    );
    let mut holder = spawn_ready(
        std::process::Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
            .arg(python)
            .args(["-c", &script]),
    );
    wait_state(holder.id(), 'Z');
    let r = scan.run();
    let _ = holder.kill();
    let _ = holder.wait();
    r.assert_exit(0);
    let doc = r.json();
    let p = process(&doc, holder.id()).unwrap_or_else(|| panic!("not listed: {doc}"));
    assert_eq!(via(p, "nvidia0"), ["fd"]);
}

#[test]
fn non_root_scan_counts_what_it_cannot_read_and_sees_its_own() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to start a process as nobody");
        return;
    }
    let d = TestDir::new(1);
    let root_holder = hold(
        &["gpufree"],
        HoldSpec {
            fd: vec![d.node("nvidia0")],
            ..HoldSpec::default()
        },
    );
    let r = as_nobody(&d, &["status"])
        .json()
        .dev(&d.dev)
        .no_nvml()
        .run();
    r.assert_exit(0);
    let doc = r.json();
    assert_eq!(doc["visibility"]["root"], false);
    assert!(
        doc["visibility"]["processes_unreadable"].as_u64().unwrap() >= 1,
        "{}",
        doc["visibility"]
    );
    assert!(
        doc["visibility"]["unreadable_pids"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| *p == root_holder.pid()),
        "root's holder is reported unreadable, not clean"
    );
    assert!(process(&doc, root_holder.pid()).is_none());
    assert!(doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["kind"] == "partial-view"));
}

#[test]
fn container_node_with_the_same_device_number_matches() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: mknod needs root");
        return;
    }
    // A device directory whose `nvidia0` is a character node with /dev/zero's
    // device number: a process holding the real /dev/zero holds "the same
    // device" through another node, as a container's own /dev/nvidia0 does.
    let d = TestDir::new(0);
    let zero = std::fs::metadata("/dev/zero").unwrap();
    use std::os::unix::fs::MetadataExt;
    let node = d.node("nvidia0");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &node,
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o600),
        zero.rdev(),
    )
    .unwrap();
    let h = hold(
        &["gpufree"],
        HoldSpec {
            fd: vec!["/dev/zero".into()],
            ..HoldSpec::default()
        },
    );
    // /dev/zero's major registered as the NVIDIA frontend's (the tests'
    // hook): a node of another driver's major is no GPU node.
    let r = Gpufree::new(["status"])
        .json()
        .dev(&d.dev)
        .no_nvml()
        .env(
            "GPUFREE_TEST_GPU_MAJORS",
            format!("nvidia-frontend={}", rustix::fs::major(zero.rdev())),
        )
        .run();
    r.assert_exit(0);
    let doc = r.json();
    let p = process(&doc, h.pid()).expect("matched by device number");
    assert_eq!(via(p, "nvidia0"), ["fd"]);
}
