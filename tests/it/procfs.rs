//! The scanner and the owner and orphan rules on a fake /proc tree
//! (`--proc-root`): every owner kind, orphans, renamed processes, maps-only.

use crate::harness::*;
use std::path::Path;

const CID: &str = "3f2a1b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7a8";

fn proc_<'a>(
    pid: u32,
    ppid: u32,
    start: u64,
    cgroup: &'a str,
    fds: &'a [&'a Path],
) -> FakeProcess<'a> {
    FakeProcess {
        pid,
        ppid,
        comm: "python3",
        state: 'S',
        start,
        cmdline: &["python3", "serve.py"],
        exe: "/usr/bin/python3.12",
        uid: 0,
        cgroup,
        fds,
        maps: &[],
    }
}

#[test]
fn owners_of_every_kind_come_from_the_cgroup() {
    let d = TestDir::new(1);
    let fake = FakeProc::new(d.tmp.path());
    let n0 = d.node("nvidia0");
    let fds: &[&Path] = &[&n0];
    let docker = format!("0::/system.slice/docker-{CID}.scope\n");
    let pod = format!(
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234abcd_5678_90ab_cdef_1234567890ab.slice/cri-containerd-{CID}.scope\n"
    );
    let cases: Vec<(u32, String, &str, &str)> = vec![
        (
            101,
            "0::/system.slice/vllm.service\n".into(),
            "systemd-unit",
            "vllm.service",
        ),
        (102, docker, "container", CID),
        (103, pod, "k8s-pod", "1234abcd-5678-90ab-cdef-1234567890ab"),
        (
            104,
            "0::/system.slice/slurmstepd.scope/job_3385/step_0/user/task_0\n".into(),
            "slurm-job",
            "3385",
        ),
        (
            105,
            "0::/user.slice/user-1000.slice/session-3.scope\n".into(),
            "session",
            "session-3",
        ),
        (106, "0::/\n".into(), "none", ""),
    ];
    for (pid, cg, _, _) in &cases {
        fake.add(&proc_(*pid, 50, 10, cg, fds));
    }
    let doc = fake.status(&d.dev);
    for (pid, _, kind, id) in &cases {
        let p = process(&doc, *pid).unwrap_or_else(|| panic!("{pid} missing: {doc}"));
        assert_eq!(p["owner"]["kind"], *kind, "{pid}");
        assert_eq!(p["owner"]["id"], *id, "{pid}");
        assert_eq!(via(p, "nvidia0"), ["fd"]);
    }
}

#[test]
fn orphans_are_reparented_holders_but_not_a_units_main_process() {
    let d = TestDir::new(1);
    let fake = FakeProc::new(d.tmp.path());
    let n0 = d.node("nvidia0");
    let fds: &[&Path] = &[&n0];
    let unit = "0::/system.slice/vllm.service\n";
    let session = "0::/user.slice/user-1000.slice/session-3.scope\n";
    fake.add(&proc_(300, 1, 100, unit, fds)); // the unit's main process
    fake.add(&proc_(301, 1, 200, unit, fds)); // left behind by a dead parent
    fake.add(&proc_(302, 300, 150, unit, fds)); // the main process's child
    fake.add(&proc_(400, 1, 300, session, fds)); // a session's orphan
    fake.add(&proc_(401, 399, 300, session, fds)); // parent alive (not in the tree: not init)
    let doc = fake.status(&d.dev);
    let orphaned = |pid| process(&doc, pid).unwrap()["orphaned"].as_bool().unwrap();
    assert!(
        !orphaned(300),
        "a unit's main process has PID 1 as parent legitimately"
    );
    assert!(orphaned(301));
    assert!(!orphaned(302));
    assert!(orphaned(400));
    assert!(!orphaned(401));
    let f = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "orphans")
        .unwrap();
    assert_eq!(f["pids"], serde_json::json!([301, 400]));
}

#[test]
fn renamed_and_maps_only_holders_in_a_fake_tree() {
    let d = TestDir::new(2);
    let fake = FakeProc::new(d.tmp.path());
    let n1 = d.node("nvidia1");
    let uvm = d.node("nvidia-uvm");
    fake.add(&FakeProcess {
        pid: 212_702,
        ppid: 202_515,
        comm: "VLLM::Worker_TP",
        state: 'S',
        start: 5,
        cmdline: &["VLLM::Worker_TP1"],
        exe: "/usr/bin/python3.12",
        uid: 0,
        cgroup: "0::/system.slice/vllm.service\n",
        fds: &[],
        maps: &[&n1, &uvm],
    });
    let doc = fake.status(&d.dev);
    let p = process(&doc, 212_702).expect("maps-only holder");
    assert_eq!(p["renamed"], true);
    assert_eq!(via(p, "nvidia1"), ["mmap"]);
    assert_eq!(via(p, "nvidia-uvm"), ["mmap"]);
    assert_eq!(
        p["devices"].as_array().unwrap().len(),
        2,
        "the python3.12 and [stack] lines are not nodes"
    );
    assert_eq!(doc["visibility"]["processes_scanned"], 1);
}

/// A proc root that lists no process (an empty mount point where a
/// DaemonSet's host /proc should be) is no view at all: status, why and
/// wait say so in one line and exit 3, never "free".
#[test]
fn an_empty_proc_root_is_an_error_never_free() {
    let d = TestDir::new(1);
    let h = d.mapper("nvidia0");
    let empty = tempfile::tempdir().unwrap();
    for args in [&["status"][..], &["why"], &["wait", "--timeout", "0"]] {
        let r = Gpufree::new(args)
            .proc_root(empty.path())
            .dev(&d.dev)
            .no_nvml()
            .run();
        r.assert_exit(3);
        assert_eq!(
            r.stderr.trim(),
            format!(
                "gpufree: {}: lists no process: not a proc file system",
                empty.path().display()
            ),
            "{args:?}"
        );
    }
    drop(h);
}
