//! `gpufree check` as each monitor reads it: exit codes and lines of the
//! text, npd, nagios and slurm formats for a free host, leftover holders,
//! a leak within and past its grace period, an unknown verdict, a lost GPU
//! and a stuck holder; on the simulator with a fake /proc (whose cgroups
//! the test chooses, so a holder's owner is known).

use crate::harness::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const GIB: u64 = 1 << 30;

/// A host: a device directory, a fake /proc with an init, a state file.
struct Host {
    d: TestDir,
    fake: FakeProc,
    state: PathBuf,
    memory: PathBuf,
}

impl Host {
    fn new(gpu: Value) -> Host {
        let d = TestDir::new(1);
        let fake = FakeProc::idle(d.tmp.path());
        let state = d.state(&sim_state(vec![gpu]));
        let memory = d.tmp.path().join("run/check.json");
        Host {
            d,
            fake,
            state,
            memory,
        }
    }

    /// A python3 holder of `/dev/nvidia0` in `cgroup`, in state `state`.
    fn holder(&self, pid: u32, cgroup: &str, state: char) {
        let node = self.d.node("nvidia0");
        let fds: &[&Path] = &[&node];
        self.fake.add(&FakeProcess {
            pid,
            ppid: 1,
            comm: "python3",
            state,
            start: 100 + u64::from(pid),
            cmdline: &["python3", "train.py"],
            exe: "/usr/bin/python3.12",
            uid: 1000,
            cgroup,
            fds,
            maps: &[],
        });
    }

    /// `gpufree check --format FORMAT ARGS` (which never panics).
    fn check(&self, format: &str, args: &[&str]) -> Output {
        let r = Gpufree::new(["check", "--format", format])
            .proc_root(&self.fake.root)
            .dev(&self.d.dev)
            .sim(&self.state)
            .arg("--state")
            .arg(&self.memory)
            .args(args)
            .run();
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
        r
    }

    /// Asserts the exit codes of text, npd, nagios and slurm, in that
    /// order.
    #[track_caller]
    fn assert_codes(&self, args: &[&str], codes: [i32; 4]) {
        for (format, code) in ["text", "npd", "nagios", "slurm"].into_iter().zip(codes) {
            self.check(format, args)
                .assert_exit_with(code, format_args!("--format {format}"));
        }
    }
}

fn gpu(procs: &[(u32, u64)], leaked: u64) -> Value {
    let mut g = sim_gpu(0, &[], 0);
    g["processes"] = json!(procs
        .iter()
        .map(|(pid, gib)| json!({"pid": pid, "used_bytes": gib * GIB, "visible": "always"}))
        .collect::<Vec<_>>());
    g["leaked_bytes"] = json!(leaked);
    g
}

/// Every line a format prints obeys its consumer: npd's one line fits in
/// 80 characters, nagios's carries performance data per GPU.
fn lines_obey(h: &Host, args: &[&str]) {
    let npd = h.check("npd", args).stdout;
    assert_eq!(npd.lines().count(), 1, "{npd}");
    // NPD's max_output_length counts bytes.
    assert!(npd.trim_end().len() <= 80, "{npd}");
    let nagios = h.check("nagios", args).stdout;
    assert_eq!(nagios.lines().count(), 1, "{nagios}");
    let (_, perf) = nagios.split_once(" | ").unwrap();
    assert!(
        perf.starts_with("gpu0_used=") && perf.contains(";0;150754820096"),
        "{perf}"
    );
    let slurm = h.check("slurm", args).stdout;
    assert!(slurm.trim_end().len() <= 100, "{slurm}");
}

#[test]
fn a_free_host_is_ok_in_every_format() {
    let h = Host::new(gpu(&[], 0));
    h.assert_codes(&[], [0, 0, 0, 0]);
    assert_eq!(h.check("npd", &[]).stdout, "1 GPU fine\n");
    let nagios = h.check("nagios", &[]).stdout;
    assert!(nagios.starts_with("GPU OK - 1 GPU fine | gpu0_used=0B;;;0;150754820096 gpu0_unaccounted=0B;1073741824;1073741824;0;150754820096"), "{nagios}");
    lines_obey(&h, &[]);
}

/// Trust III: a holder whose cgroup is its user's delegated subtree is the
/// user's, whatever the subtree's names claim (a Docker container, a pod,
/// a Slurm job): a leftover, where it once passed as the container's.
#[test]
fn a_users_process_claiming_a_container_pod_or_job_is_a_leftover() {
    let h = Host::new(gpu(&[(100, 8), (101, 2), (102, 1), (200, 4)], 0));
    let user = "0::/user.slice/user-1000.slice/user@1000.service/app.slice";
    let id = "3f2a1b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7a8";
    h.holder(100, &format!("{user}/docker-{id}.scope\n"), 'S');
    h.holder(
        101,
        &format!("{user}/kubepods.slice/kubepods-pod1234abcd_5678_90ab_cdef_1234567890ab.slice/cri-containerd-{id}.scope\n"),
        'S',
    );
    h.holder(
        102,
        &format!("{user}/slurmstepd.scope/job_42/step_0\n"),
        'S',
    );
    // Root's container of the same id is one.
    h.holder(200, &format!("0::/system.slice/docker-{id}.scope\n"), 'S');
    let r = h.check("json", &[]);
    r.assert_exit_with(1, "critical");
    let json = r.stdout;
    let doc: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["problems"].as_array().unwrap().len(), 1, "{doc}");
    assert_eq!(doc["problems"][0]["condition"], "leftover");
    assert_eq!(doc["problems"][0]["level"], "critical");
    assert_eq!(
        doc["problems"][0]["processes"],
        json!([[100, "python3"], [101, "python3"], [102, "python3"]])
    );
    assert_eq!(doc["problems"][0]["bytes"], json!(11 * GIB));
}

#[test]
fn leftover_holders_are_critical_and_a_running_job_s_are_not() {
    let h = Host::new(gpu(&[(100, 8), (200, 4)], 0));
    // 100 belongs to nothing; 200 to a running Slurm job.
    h.holder(100, "0::/user.slice\n", 'S');
    h.holder(
        200,
        "0::/system.slice/slurmstepd.scope/job_42/step_0\n",
        'S',
    );
    h.assert_codes(&[], [1, 1, 2, 1]);
    let npd = h.check("npd", &[]).stdout;
    assert_eq!(
        npd,
        "GPU 0: 8.0 GiB held by 1 leftover process (PID 100 python3)\n"
    );
    let slurm = h.check("slurm", &[]).stdout;
    assert!(
        slurm.starts_with("gpufree: GPU 0: 8.0 GiB held by 1 leftover"),
        "{slurm}"
    );
    let json = h.check("json", &[]).stdout;
    let doc: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["level"], "critical");
    assert_eq!(
        doc["problems"].as_array().unwrap().len(),
        1,
        "the job's holder is no problem: {doc}"
    );
    assert_eq!(doc["problems"][0]["condition"], "leftover");
    assert_eq!(doc["problems"][0]["processes"], json!([[100, "python3"]]));
    lines_obey(&h, &[]);
    // Left out on request.
    h.assert_codes(&["--ignore", "leftover"], [0, 0, 0, 0]);
    // Only device nodes held: a warning, which Slurm neither drains nor
    // resumes on (2); and what could not be seen outranks a warning.
    let h = Host::new(gpu(&[], 0));
    h.holder(100, "0::/user.slice\n", 'S');
    h.assert_codes(&[], [1, 1, 1, 2]);
    let mut g = gpu(&[], 4 * GIB);
    g["errors"] = json!({"compute_processes": 999});
    let h = Host::new(g);
    h.holder(100, "0::/user.slice\n", 'S');
    h.assert_codes(&[], [3, 2, 3, 3]);
}

#[test]
fn a_leak_counts_once_it_has_lasted_its_grace_period() {
    let h = Host::new(gpu(&[], 4 * GIB));
    // First seen now: within the 5 minutes, OK, and remembered.
    h.assert_codes(&[], [0, 0, 0, 0]);
    let npd = h.check("npd", &[]).stdout;
    assert!(
        npd.starts_with("1 GPU fine; GPU 0: 4.0 GiB unaccounted for"),
        "{npd}"
    );
    let kept: Value = serde_json::from_slice(&std::fs::read(&h.memory).unwrap()).unwrap();
    let since = kept["unaccounted_since"]["GPU-aa00bb00-1111-2222-3333-444455556666"]
        .as_u64()
        .unwrap();
    // Twelve minutes ago: a problem, said with its age.
    let earlier =
        json!({"unaccounted_since": {"GPU-aa00bb00-1111-2222-3333-444455556666": since - 720}});
    std::fs::write(&h.memory, earlier.to_string()).unwrap();
    h.assert_codes(&[], [1, 1, 2, 1]);
    let npd = h.check("npd", &[]).stdout;
    assert_eq!(npd, "GPU 0: 4.0 GiB unaccounted for 12 min\n");
    let nagios = h.check("nagios", &[]).stdout;
    assert!(
        nagios.starts_with("GPU CRITICAL - GPU 0: 4.0 GiB unaccounted for 12 min | "),
        "{nagios}"
    );
    assert!(
        nagios.contains("gpu0_unaccounted=4294967296B;1073741824;1073741824;0;"),
        "{nagios}"
    );
    // Below the threshold it is none, and forgotten.
    h.assert_codes(&["--leak-min", "8GiB"], [0, 0, 0, 0]);
    let kept: Value = serde_json::from_slice(&std::fs::read(&h.memory).unwrap()).unwrap();
    assert_eq!(kept["unaccounted_since"], json!({}));
    // An unwritable state cannot time a leak: it counts at once.
    let mut h2 = Host::new(gpu(&[], 4 * GIB));
    let blocked = h2.d.tmp.path().join("file");
    std::fs::write(&blocked, "x").unwrap();
    h2.memory = blocked.join("check.json");
    let r = h2.check("npd", &[]);
    r.assert_exit(1);
    assert_eq!(r.stdout, "GPU 0: 4.0 GiB unaccounted for 0 min\n");
    // A FIFO at the state's path is never waited on (nor a symlink
    // followed): the leak counts at once.
    let mut h3 = Host::new(gpu(&[], 4 * GIB));
    h3.memory = h3.d.tmp.path().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&h3.memory)
        .status()
        .unwrap();
    assert!(made.success());
    h3.check("npd", &[]).assert_exit(1);
}

#[test]
fn an_unknown_verdict_a_lost_gpu_and_a_stuck_holder() {
    // NVML's process list fails while memory is used: unknown.
    let mut g = gpu(&[], 4 * GIB);
    g["errors"] = json!({"compute_processes": 999});
    let h = Host::new(g);
    h.assert_codes(&[], [3, 2, 3, 3]);
    let npd = h.check("npd", &[]).stdout;
    assert!(npd.starts_with("GPU 0: unknown: "), "{npd}");
    lines_obey(&h, &[]);

    // The GPU fell off the bus.
    let mut g = gpu(&[], 0);
    g["errors"] = json!({"memory_info": 15});
    let h = Host::new(g);
    h.assert_codes(&[], [1, 1, 2, 1]);
    let npd = h.check("npd", &[]).stdout;
    // The driver's own evidence first: GPU_IS_LOST needs a reboot.
    assert!(
        npd.starts_with(
            "GPU 0 needs a reboot of the node: NVML's memory read returned GPU_IS_LOST"
        ),
        "{npd}"
    );
    let json = h.check("json", &[]).stdout;
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let conditions: Vec<&str> = doc["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["condition"].as_str().unwrap())
        .collect();
    assert_eq!(conditions, ["reset-required", "nvml", "unknown"], "{json}");

    // A holder stuck in the driver, in a job: not leftover, but stuck.
    let h = Host::new(gpu(&[(300, 2)], 0));
    h.holder(300, "0::/system.slice/slurmstepd.scope/job_7/step_0\n", 'D');
    h.assert_codes(&[], [1, 1, 2, 1]);
    let npd = h.check("npd", &[]).stdout;
    assert_eq!(
        npd,
        "1 holder stuck in the driver (D state): PID 300 python3\n"
    );
}

/// The `stuck` problems of a JSON check, by PID: (level, why).
fn stuck_of(doc: &Value) -> Vec<(u64, String, String)> {
    let mut out = Vec::new();
    for p in doc["problems"].as_array().unwrap() {
        if p["condition"] != "stuck" {
            continue;
        }
        for proc_ in p["processes"].as_array().unwrap() {
            out.push((
                proc_[0].as_u64().unwrap(),
                p["level"].as_str().unwrap().to_string(),
                p["why"].as_str().unwrap_or("").to_string(),
            ));
        }
    }
    out.sort();
    out
}

/// Trust III, item 6. The critical case, which no GPU driver here can
/// give: fake holders in D in every sample of the window, waiting where
/// the kernel says the GPU driver is (a wchan of nvidia_uvm's, a stack
/// frame in `[nvidia_uvm]`): stuck, critical, and Slurm drains. Holders
/// in D in an NFS read (`rpc_wait_bit_killable` as wchan or in
/// `[sunrpc]`) are a warning: alone, Slurm's health check exits 2 and
/// does not drain.
#[test]
fn in_d_across_the_window_in_the_gpu_driver_drains_and_in_an_nfs_read_does_not() {
    const UVM_STACK: &str = "[<0>] uvm_va_space_mm_shutdown+0x9c/0x1a0 [nvidia_uvm]\n\
        [<0>] uvm_va_space_destroy+0x1c/0x80 [nvidia_uvm]\n[<0>] do_exit+0x2d6/0xad0\n";
    const NFS_STACK: &str = "[<0>] rpc_wait_bit_killable+0x11/0x70 [sunrpc]\n\
        [<0>] nfs_read_folio+0xf2/0x1a0 [nfs]\n[<0>] filemap_read+0x111/0x400\n";
    let waits: [(u32, &str, &str); 4] = [
        (300, "wchan", "uvm_va_space_mm_shutdown\n"),
        (301, "stack", UVM_STACK),
        (302, "wchan", "rpc_wait_bit_killable\n"),
        (303, "stack", NFS_STACK),
    ];
    let host = |pids: &[u32]| {
        let h = Host::new(gpu(&[], 0));
        for (pid, file, text) in waits.iter().filter(|w| pids.contains(&w.0)) {
            h.holder(
                *pid,
                "0::/system.slice/slurmstepd.scope/job_7/step_0\n",
                'D',
            );
            std::fs::write(h.fake.root.join(pid.to_string()).join(file), text).unwrap();
        }
        h
    };
    let h = host(&[300, 301, 302, 303]);
    let r = h.check("json", &[]);
    r.assert_exit(1);
    let json = r.stdout;
    let doc: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["level"], "critical", "{doc}");
    // The window spans 1 s or a little more (its reads take time).
    let crit = |w: &str| ("critical".to_string(), format!(", in the GPU driver: {w}"));
    let nfs = |w: &str| {
        (
            "warning".to_string(),
            format!("waits in {w}, not in the GPU driver"),
        )
    };
    let seen: Vec<(u64, (String, String))> = stuck_of(&doc)
        .into_iter()
        .map(|(pid, level, why)| {
            match why
                .strip_prefix("in D for ")
                .and_then(|r| r.split_once(" s"))
            {
                Some((secs, rest)) if secs.parse::<f64>().is_ok_and(|s| s >= 1.0) => {
                    (pid, (level, rest.to_string()))
                }
                _ => (pid, (level, why)),
            }
        })
        .collect();
    assert_eq!(
        seen,
        [
            (300, crit("uvm_va_space_mm_shutdown")),
            (301, crit("uvm_va_space_mm_shutdown [nvidia_uvm]")),
            (302, nfs("rpc_wait_bit_killable")),
            (303, nfs("rpc_wait_bit_killable [sunrpc]")),
        ],
        "{doc}"
    );

    let h = host(&[302, 303]);
    let r = h.check("slurm", &[]);
    r.assert_exit_with(2, "a warning neither drains nor resumes");
    let slurm = r.stdout;
    assert!(
        slurm.starts_with("gpufree: 1 holder in D state, not stuck in the driver: PID 302"),
        "{slurm}"
    );
}

/// Trust III, item 6: a job's process whose vfork child pauses waits in
/// D (in `kernel_clone` on Linux 6.18), not in a GPU driver: `check`
/// warns, and Slurm's health check (exit 2) does not drain the node.
#[test]
fn a_vfork_parent_in_d_is_a_warning_not_a_drain() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let holder = hold(
        &["python3", "train.py"],
        gpufree::demo::holder::HoldSpec {
            fd: vec![d.node("nvidia0")],
            vfork_pause: true,
            ..Default::default()
        },
    );
    let pid = holder.pid();
    wait_state(pid, 'D');
    let memory = d.tmp.path().join("check.json");
    let check = |format: &str| {
        let r = Gpufree::new(["check"])
            .on(&d, &state)
            .args(["--format", format, "--state", memory.to_str().unwrap()])
            .run();
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
        r
    };
    let r = check("slurm");
    r.assert_exit_with(2, format_args!("not drained: {}{}", r.stdout, r.stderr));
    let r = check("json");
    r.assert_exit(1);
    let doc = r.json();
    assert_eq!(doc["level"], "warning", "{doc}");
    let stuck = stuck_of(&doc);
    assert_eq!(stuck.len(), 1, "{doc}");
    let (p, level, why) = &stuck[0];
    assert_eq!((*p, level.as_str()), (u64::from(pid), "warning"), "{doc}");
    assert!(
        why.starts_with("waits in ") && why.ends_with(", not in the GPU driver"),
        "{why}"
    );
}

#[test]
fn no_look_at_all_is_unknown_never_ok() {
    let h = Host::new(gpu(&[], 0));
    let r = Gpufree::new(["check"])
        .dev("/nonexistent-gpufree-dev")
        .no_nvml()
        .args(["--format", "nagios", "--state", h.memory.to_str().unwrap()])
        .run();
    r.assert_exit(3);
    assert!(
        r.stdout.starts_with("GPU UNKNOWN - unknown: "),
        "{}",
        r.stdout
    );
}

/// A fake `scontrol` (`SCONTROL`): records each call's argv (one line, the
/// arguments separated by US), keeps a drain reason as slurmctld would,
/// and answers `show node` with it.
fn fake_scontrol(dir: &Path) -> (PathBuf, PathBuf) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.join("scontrol.log");
    let script = format!(
        r#"#!/bin/bash
printf '%s\x1f' "$@" >>'{log}'; echo >>'{log}'
reason='{dir}/reason'
case "$1 $2" in
"show node")
    if [ -e "$reason" ]; then printf 'NodeName=%s State=IDLE+DRAIN\n   Reason=%s\n' "$3" "$(cat "$reason")"; else echo "NodeName=$3 State=IDLE"; fi ;;
"update nodename=n1")
    for a in "$@"; do case "$a" in reason=*) echo "${{a#reason=}} [root@now]" >"$reason" ;; state=resume) rm -f "$reason" ;; esac; done ;;
esac
"#,
        log = log.display(),
        dir = dir.display()
    );
    let path = bin.join("scontrol");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (bin, log)
}

/// The contrib health check, run as Slurm would, on `h`.
fn health_check(h: &Host, bin: &Path) -> Output {
    run_cmd(
        std::process::Command::new("bash")
            .arg(repo("contrib/slurm/healthcheck.sh"))
            .env_clear()
            .env("SCONTROL", bin.join("scontrol"))
            .env("GPUFREE", crate::harness::bin())
            .env("GPUFREE_BPF_CACHE", crate::harness::bpf_cache())
            .env("GPUFREE_NODE", "n1")
            .env("GPUFREE_DRAIN_MARK", h.d.tmp.path().join("drained"))
            .env("GPUFREE_CHECK_STATE", &h.memory)
            .env("GPUFREE_PROC_ROOT", &h.fake.root)
            .env("GPUFREE_DEV_DIR", &h.d.dev)
            .env("GPUFREE_NVML_LIB", sim_lib())
            .env("GPUFREE_SIM_STATE", &h.state),
    )
}

fn calls(log: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            l.split('\x1f')
                .filter(|a| !a.is_empty())
                .map(str::to_string)
                .collect()
        })
        .collect()
}

#[test]
fn slurm_health_check_drains_with_gpufree_s_reason_and_resumes_only_its_own_drain() {
    let h = Host::new(gpu(&[(100, 8)], 0));
    h.holder(100, "0::/user.slice\n", 'S');
    let (bin, log) = fake_scontrol(h.d.tmp.path());
    let r = health_check(&h, &bin);
    r.assert_exit(0);
    assert_eq!(
        calls(&log),
        [
            vec!["show", "node", "n1"],
            vec![
                "update",
                "nodename=n1",
                "state=drain",
                "reason=gpufree: GPU 0: 8.0 GiB held by 1 leftover process (PID 100 python3)"
            ]
        ]
    );
    // Fixed: the leftover is gone. The node it drained is resumed.
    std::fs::write(&h.state, sim_state(vec![gpu(&[], 0)]).to_string()).unwrap();
    std::fs::remove_dir_all(h.fake.root.join("100")).unwrap();
    std::fs::remove_file(&log).unwrap();
    let r = health_check(&h, &bin);
    r.assert_exit(0);
    assert_eq!(
        calls(&log),
        [
            vec!["show", "node", "n1"],
            vec!["update", "nodename=n1", "state=resume"]
        ]
    );
    // Free and not drained by it: nothing to do, never a resume.
    std::fs::remove_file(&log).unwrap();
    health_check(&h, &bin);
    assert!(calls(&log).is_empty(), "{:?}", calls(&log));
    // Someone else's drain stays, even after gpufree drained earlier.
    std::fs::write(h.d.tmp.path().join("drained"), "").unwrap();
    std::fs::write(h.d.tmp.path().join("reason"), "bad DIMM [admin@then]").unwrap();
    health_check(&h, &bin);
    assert_eq!(calls(&log), [vec!["show", "node", "n1"]]);
    // So does the epilog's, though its reason starts `gpufree:` too: the
    // mark holds the health check's own reason, and only that is resumed.
    std::fs::remove_file(&log).unwrap();
    std::fs::write(
        h.d.tmp.path().join("drained"),
        "gpufree: GPU 0: 8.0 GiB held by 1 leftover process (PID 100 python3)\n",
    )
    .unwrap();
    std::fs::write(
        h.d.tmp.path().join("reason"),
        "gpufree: 8.0 GiB on GPU 0 not released [root@then]",
    )
    .unwrap();
    health_check(&h, &bin);
    assert_eq!(calls(&log), [vec!["show", "node", "n1"]]);
    assert!(!h.d.tmp.path().join("drained").exists());
    // Unknown: logged, never drained.
    let mut g = gpu(&[], 4 * GIB);
    g["errors"] = json!({"compute_processes": 999});
    std::fs::write(&h.state, sim_state(vec![g]).to_string()).unwrap();
    std::fs::remove_file(&log).unwrap();
    let r = health_check(&h, &bin);
    assert!(calls(&log).is_empty(), "{:?}", calls(&log));
    assert!(
        r.stderr.contains("neither drained nor resumed (3)"),
        "{}",
        r.stderr
    );
    // An admin's drain is never taken over: no drain of our own, no mark,
    // so no resume later.
    let h = Host::new(gpu(&[(100, 8)], 0));
    h.holder(100, "0::/user.slice\n", 'S');
    let (bin, log) = fake_scontrol(h.d.tmp.path());
    std::fs::write(h.d.tmp.path().join("reason"), "bad DIMM [admin@then]").unwrap();
    let r = health_check(&h, &bin);
    assert_eq!(calls(&log), [vec!["show", "node", "n1"]]);
    assert!(!h.d.tmp.path().join("drained").exists());
    assert!(r.stderr.contains("not taking it over"), "{}", r.stderr);
    // A node that cannot be read is never drained blindly (it could be an
    // admin's drain that gpufree would replace): no update, no mark.
    let r = health_check(&h, Path::new("/nonexistent"));
    r.assert_exit(0);
    assert!(
        r.stderr
            .contains("cannot read node n1, not drained by gpufree"),
        "{}",
        r.stderr
    );
    assert!(!h.d.tmp.path().join("drained").exists());
}

#[test]
fn nhc_check_fails_the_node_with_the_reason_and_npd_s_config_runs_the_check() {
    let h = Host::new(gpu(&[(100, 8)], 0));
    h.holder(100, "0::/user.slice\n", 'S');
    let nhc = repo("contrib/nhc/gpufree.nhc");
    let script = format!(
        "die() {{ echo \"DIE $1 $2\"; }}; log() {{ echo \"LOG $*\"; }}; source '{}'; check_gpufree; echo \"rc=$?\"",
        nhc.display()
    );
    let r = run_cmd(
        std::process::Command::new("bash")
            .args(["-c", &script])
            .env("GPUFREE", crate::harness::bin())
            .env("GPUFREE_BPF_CACHE", crate::harness::bpf_cache())
            .env("GPUFREE_CHECK_STATE", &h.memory)
            .env("GPUFREE_PROC_ROOT", &h.fake.root)
            .env("GPUFREE_DEV_DIR", &h.d.dev)
            .env("GPUFREE_NVML_LIB", sim_lib())
            .env("GPUFREE_SIM_STATE", &h.state),
    );
    assert_eq!(
        r.stdout,
        "DIE 1 gpufree: GPU 0: 8.0 GiB held by 1 leftover process (PID 100 python3)\nrc=1\n"
    );

    let config: Value = serde_json::from_str(
        &std::fs::read_to_string(repo("contrib/k8s/npd-gpufree-monitor.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(config["plugin"], "custom");
    assert_eq!(config["pluginConfig"]["max_output_length"], 80);
    let rule = &config["rules"][0];
    assert_eq!(rule["condition"], "GPUMemoryLeftover");
    assert_eq!(config["conditions"][0]["type"], "GPUMemoryLeftover");
    let args: Vec<&str> = rule["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args[..3], ["check", "--format", "npd"]);
}

/// Where gpufree is not where the scripts look (installed in
/// ~/.cargo/bin, off their PATH), the prolog and epilog drain with that
/// reason, not an empty one, and the health check only logs it, as it
/// does an unknown verdict.
#[test]
fn slurm_scripts_without_gpufree_say_so_as_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let (bin, log) = fake_scontrol(tmp.path());
    let missing = tmp.path().join("no/gpufree");
    let reason = format!(
        "reason=gpufree: {} not found; set GPUFREE to its path",
        missing.display()
    );
    for script in ["prolog.sh", "epilog.sh", "healthcheck.sh"] {
        let _ = std::fs::remove_file(&log);
        let _ = std::fs::remove_file(tmp.path().join("reason"));
        let r = run_cmd(
            std::process::Command::new("bash")
                .arg(repo("contrib/slurm").join(script))
                .env_clear()
                .env("SCONTROL", bin.join("scontrol"))
                .env("GPUFREE", &missing)
                .env("GPUFREE_NODE", "n1")
                .env("GPUFREE_DRAIN_MARK", tmp.path().join("drained"))
                .env("SLURM_JOB_GPUS", "0"),
        );
        assert!(
            r.stderr.contains("not found; set GPUFREE"),
            "{script}: {}",
            r.stderr
        );
        if script == "healthcheck.sh" {
            r.assert_exit_with(0, format_args!("{script}"));
            assert!(calls(&log).is_empty(), "{script}: {:?}", calls(&log));
        } else {
            r.assert_exit_with(1, format_args!("{script}"));
            assert_eq!(
                calls(&log),
                [
                    vec!["show", "node", "n1"],
                    vec!["update", "nodename=n1", "state=drain", &reason]
                ],
                "{script}"
            );
        }
    }
}

/// A node the epilog drained (its reason starts `gpufree:` too) is not
/// taken over by the health check when it finds a leftover of its own, so
/// that the health check never resumes it once that leftover is gone.
#[test]
fn slurm_health_check_keeps_the_epilog_s_drain() {
    let h = Host::new(gpu(&[(100, 8)], 0));
    h.holder(100, "0::/user.slice\n", 'S');
    let (bin, log) = fake_scontrol(h.d.tmp.path());
    std::fs::write(
        h.d.tmp.path().join("reason"),
        "gpufree: 8.0 GiB on GPU 0 not released [root@then]",
    )
    .unwrap();
    let r = health_check(&h, &bin);
    assert_eq!(calls(&log), [vec!["show", "node", "n1"]]);
    assert!(r.stderr.contains("keeping that"), "{}", r.stderr);
    assert!(!h.d.tmp.path().join("drained").exists());
    // The leftover gone: no mark of its own, so no resume.
    std::fs::write(&h.state, sim_state(vec![gpu(&[], 0)]).to_string()).unwrap();
    std::fs::remove_dir_all(h.fake.root.join("100")).unwrap();
    std::fs::remove_file(&log).unwrap();
    health_check(&h, &bin);
    assert!(calls(&log).is_empty(), "{:?}", calls(&log));
}
