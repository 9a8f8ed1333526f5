//! `gpufree why` with real processes on the simulator: each kind of
//! finding, the exit codes, and the order.

use crate::harness::*;
use gpufree::demo::holder::HoldSpec;
use gpufree::demo::Incident;
use serde_json::Value;
use std::path::Path;

fn find<'a>(doc: &'a Value, kind: &str) -> Vec<&'a Value> {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == kind)
        .collect()
}

fn pids(f: &Value) -> Vec<u32> {
    f["pids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn seed_incident_why_names_the_live_renamed_workers_not_a_driver_bug() {
    let inc = Incident::start(&bin()).unwrap();
    let r = Gpufree::new(["why"])
        .json()
        .dev(&inc.dev)
        .sim(&inc.state)
        .args(["--pattern", "python3.*vllm"])
        .run();
    let doc = r.json();
    r.assert_exit_with(1, format_args!("something holds the GPUs"));
    let first = &doc["findings"][0];
    assert_eq!(first["kind"], "live-holders");
    assert_eq!(first["severity"], "error");
    let mut workers: Vec<u32> = (0..8)
        .map(|i| inc.pid(&format!("worker{i}")).unwrap())
        .collect();
    workers.sort_unstable();
    assert_eq!(pids(first), workers);
    let launcher = inc.pid("launcher").unwrap();
    assert!(first["message"]
        .as_str()
        .unwrap()
        .starts_with(&format!("8 live processes of launcher {launcher} ")));
    // The next command frees exactly the ten: workers, launcher, tracker.
    let mut ten = workers.clone();
    ten.extend([launcher, inc.pid("tracker").unwrap()]);
    ten.sort_unstable();
    let expected: String = ten.iter().map(|p| format!(" --pid {p}")).collect();
    assert_eq!(first["next"], format!("gpufree kill{expected}"));
    let renamed = &find(&doc, "renamed-holders")[0];
    assert_eq!(pids(renamed).len(), 9, "8 workers and the launcher");
    let pattern = &find(&doc, "pattern")[0];
    assert!(
        pattern["message"]
            .as_str()
            .unwrap()
            .starts_with("`pkill -f 'python3.*vllm'` would hit 0 of 10 holders"),
        "{pattern}"
    );
    let dev = &find(&doc, "device-holders")[0];
    let mut two = pids(dev);
    two.sort_unstable();
    let mut expect = vec![launcher, inc.pid("tracker").unwrap()];
    expect.sort_unstable();
    assert_eq!(two, expect);
    assert!(
        find(&doc, "driver-leak").is_empty(),
        "no reset while live holders exist"
    );
}

#[test]
fn why_text_is_a_short_explanation_with_next_commands() {
    let inc = Incident::start(&bin()).unwrap();
    let r = Gpufree::new(["why"]).dev(&inc.dev).sim(&inc.state).run();
    r.assert_exit(1);
    assert!(
        r.stdout
            .starts_with("Why GPUs 0-7 are not free:\n 1. error 8 live processes of launcher"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("next: gpufree kill --pid"));
}

#[test]
fn zombie_holder_is_named_with_the_parent_that_must_reap_it() {
    let d = TestDir::new(1);
    let z = d.zombie("nvidia0"); // exited, never reaped
    let state = d.one_gpu(&[(z.pid(), 4096, "while-alive")], 0);
    let r = Gpufree::new(["why"]).json().on(&d, &state).run();
    // The simulator releases a zombie's memory: the GPU is free.
    r.assert_exit(0);
    let doc = r.json();
    // A zombie has no fds or maps left: only NVML could list it, and the
    // simulator, like the driver, releases a zombie's memory.
    assert!(process(&doc, z.pid()).is_none() || process(&doc, z.pid()).unwrap()["state"] == "Z");
    assert_eq!(doc["gpus"][0]["memory"]["used_bytes"], 0);
    assert!(
        find(&doc, "live-holders").is_empty(),
        "a zombie is not a live holder: {doc}"
    );
}

#[test]
fn zombie_leader_with_live_threads_is_a_live_holder() {
    let d = TestDir::new(1);
    let h = hold(
        &["gpufree"],
        HoldSpec {
            mmap: vec![d.node("nvidia0")],
            leader_exits: true,
            ..HoldSpec::default()
        },
    );
    wait_state(h.pid(), 'Z');
    let state = d.one_gpu(&[(h.pid(), 4096, "always")], 0);
    let r = Gpufree::new(["why"]).json().on(&d, &state).run();
    let doc = r.json();
    r.assert_exit(1);
    let z = &find(&doc, "zombies")[0];
    assert_eq!(z["severity"], "error");
    assert!(
        z["message"]
            .as_str()
            .unwrap()
            .contains("1 other thread still runs"),
        "{z}"
    );
    assert_eq!(pids(find(&doc, "live-holders")[0]), vec![h.pid()]);
}

#[test]
fn stopped_holder_needs_sigcont() {
    let d = TestDir::new(1);
    let h = d.mapper("nvidia0");
    // SIGSTOP the holder this test started.
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(h.pid() as i32).unwrap(),
        rustix::process::Signal::STOP,
    )
    .unwrap();
    wait_state(h.pid(), 'T');
    let state = d.one_gpu(&[(h.pid(), 2048, "while-alive")], 0);
    let r = Gpufree::new(["why"]).json().on(&d, &state).run();
    r.assert_exit(1);
    let doc = r.json();
    let t = &find(&doc, "stopped")[0];
    assert_eq!(pids(t), vec![h.pid()]);
    assert!(t["message"].as_str().unwrap().contains("SIGCONT"));
}

#[test]
fn orphaned_holder_is_named() {
    let d = TestDir::new(1);
    // A parent that exits at once, leaving a child that survives it.
    let tree = hold(
        &["gpufree"],
        HoldSpec {
            label: "parent".into(),
            exit_after_ms: Some(0),
            children: vec![gpufree::demo::holder::ChildSpec {
                argv: vec!["gpufree".into(), "worker".into()],
                spec: HoldSpec {
                    label: "orphan".into(),
                    survive_parent: true,
                    mmap: vec![d.node("nvidia0")],
                    ..HoldSpec::default()
                },
            }],
            ..HoldSpec::default()
        },
    );
    let orphan = tree.pid_of("orphan");
    // Keep a pidfd: the orphan is no longer our child, and is signalled
    // only through this reference to the process we started.
    let pidfd = rustix::process::pidfd_open(
        rustix::process::Pid::from_raw(orphan as i32).unwrap(),
        rustix::process::PidfdFlags::empty(),
    )
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let st = gpufree::proc::parse::parse_stat(
            &std::fs::read(format!("/proc/{orphan}/stat")).unwrap(),
        )
        .unwrap();
        if st.ppid != tree.pid() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never reparented");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let state = d.one_gpu(&[(orphan, 1024, "while-alive")], 0);
    let r = Gpufree::new(["why"]).json().on(&d, &state).run();
    r.assert_exit(1);
    let doc = r.json();
    let p = process(&doc, orphan).unwrap();
    let reaper_is_init = p["ppid"] == 1;
    if reaper_is_init {
        assert_eq!(p["orphaned"], true);
        assert_eq!(pids(find(&doc, "orphans")[0]), vec![orphan]);
    } else {
        eprintln!(
            "orphan went to a subreaper ({}), which /proc cannot tell from a parent",
            p["ppid"]
        );
    }
    rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL).unwrap();
}

#[test]
fn protected_daemon_is_named_and_left_out_of_the_kill() {
    let d = TestDir::new(1);
    let bin_dir = d.tmp.path().join("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    let daemon = bin_dir.join("nvidia-persistenced");
    if std::fs::hard_link(bin(), &daemon).is_err() {
        std::fs::copy(bin(), &daemon).unwrap();
    }
    let child = gpufree::demo::holder::ChildSpec {
        argv: vec!["nvidia-persistenced".into()],
        spec: HoldSpec {
            fd: vec![d.node("nvidia0")],
            ..HoldSpec::default()
        },
    };
    let pd = gpufree::demo::holder::spawn(&daemon, &child).unwrap();
    let w = d.mapper("nvidia0");
    let state = d.one_gpu(&[(w.pid(), 2048, "while-alive")], 0);
    let r = Gpufree::new(["why"]).json().on(&d, &state).run();
    r.assert_exit(1);
    let doc = r.json();
    assert_eq!(process(&doc, pd.pid()).unwrap()["protected"], true);
    let p = &find(&doc, "protected-holders")[0];
    assert_eq!(p["next"], "systemctl stop nvidia-persistenced");
    for f in doc["findings"].as_array().unwrap() {
        if f["kind"] != "protected-holders" {
            assert!(
                !f["next"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("--pid {}", pd.pid())),
                "{f}"
            );
        }
    }
}

#[test]
fn memory_of_another_namespace_says_run_on_the_host() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[(4_194_304, 8192, "always")], 0);
    let r = Gpufree::new(["why"]).json().on(&d, &state).run();
    let doc = r.json();
    r.assert_exit(1);
    assert_eq!(doc["findings"][0]["kind"], "outside-namespace");
    assert!(find(&doc, "driver-leak").is_empty());
}

/// A fake /proc whose one process holds nothing: a complete view with no
/// holder at all.
fn empty_proc(dir: &Path) -> std::path::PathBuf {
    FakeProc::idle(dir).root
}

#[test]
fn leaked_memory_with_no_holder_and_a_complete_view_is_a_driver_leak_with_a_printed_reset() {
    let d = TestDir::new(1);
    let mut g = sim_gpu(0, &[], 0);
    g["leaked_bytes"] = serde_json::json!(20u64 << 30);
    let state = d.state(&sim_state(vec![g]));
    let proc_root = empty_proc(d.tmp.path());
    let r = Gpufree::new(["why"])
        .json()
        .on(&d, &state)
        .args(["--proc-root", proc_root.to_str().unwrap()])
        .run();
    let doc = r.json();
    r.assert_exit(1);
    let f = &doc["findings"][0];
    assert_eq!(f["kind"], "driver-leak");
    assert_eq!(f["next"], "nvidia-smi --gpu-reset -i 0");
    // The same with a holder of the GPU's node: no reset recommended.
    let h = hold(
        &["gpufree"],
        HoldSpec {
            fd: vec![d.node("nvidia0")],
            ..HoldSpec::default()
        },
    );
    let out = Gpufree::new(["why"]).json().on(&d, &state).run();
    out.assert_exit(1);
    let doc = out.json();
    assert!(find(&doc, "driver-leak").is_empty(), "{doc}");
    assert!(process(&doc, h.pid()).is_some());
}

#[test]
fn free_gpus_exit_0_and_unreadable_processes_are_named_as_caveats_once() {
    let d = TestDir::new(2);
    let state = d.state(&sim_state(vec![sim_gpu(0, &[], 0), sim_gpu(1, &[], 0)]));
    let proc_root = empty_proc(d.tmp.path());
    let out = Gpufree::new(["why"])
        .json()
        .on(&d, &state)
        .args(["--proc-root", proc_root.to_str().unwrap()])
        .run();
    let doc = out.json();
    out.assert_exit_with(0, format_args!("{doc}"));
    assert_eq!(doc["findings"][0]["kind"], "free");
    if rustix::process::geteuid().is_root() {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o644)).unwrap();
        let r = as_nobody(&d, &["why"])
            .json()
            .dev(&d.dev)
            .env("GPUFREE_SIM_STATE", &state)
            .run();
        // Other users' processes cannot be read, but NVML accounts for all
        // the memory: free, and what could not be read is said (SPEC.md).
        r.assert_exit(0);
        let doc = r.json();
        assert_eq!(doc["verdict"]["state"], "free");
        let caveats = doc["verdict"]["caveats"].to_string();
        assert!(caveats.contains("permission denied"), "{caveats}");
        // Said once: in the free finding, not again as a partial view.
        assert!(find(&doc, "partial-view").is_empty(), "{doc}");
        let text = as_nobody(&d, &["why"])
            .dev(&d.dev)
            .env("GPUFREE_SIM_STATE", &state)
            .run();
        text.assert_exit(0);
        assert_eq!(
            text.stdout.matches("could not be read").count(),
            1,
            "{}",
            text.stdout
        );
        // The same with memory NVML attributes to nobody: unknown, exit 3.
        let mut g = sim_gpu(0, &[], 0);
        g["leaked_bytes"] = serde_json::json!(4u64 << 30);
        std::fs::write(&state, sim_state(vec![g]).to_string()).unwrap();
        let r = as_nobody(&d, &["why"])
            .json()
            .dev(&d.dev)
            .env("GPUFREE_SIM_STATE", &state)
            .run();
        r.assert_exit(3);
        assert_eq!(r.json()["verdict"]["state"], "unknown");
        assert!(find(&r.json(), "driver-leak").is_empty());
    }
}

#[test]
fn invalid_pattern_is_a_usage_error_in_one_line() {
    let r = Gpufree::new(["why"])
        .args(["--pattern", "python3.*(vllm"])
        .run();
    r.assert_exit(2);
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("--pattern"));
}

/// A real Python interpreter renames itself as setproctitle does (via
/// scripts/cuda_worker.py --hold, which maps a node instead of creating a
/// CUDA context): gpufree sees through it, pkill would not, kill frees it.
#[test]
fn real_python_worker_renamed_like_vllm_is_seen_explained_and_freed() {
    use std::io::BufRead;
    let d = TestDir::new(1);
    let script = crate::harness::repo("scripts/cuda_worker.py");
    let mut py = std::process::Command::new("python3")
        .arg(&script)
        .args([
            "--hold",
            d.node("nvidia0").to_str().unwrap(),
            "VLLM::Worker_TP3",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(py.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let pid: u32 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert_eq!(pid, py.id());
    let state = d.one_gpu(&[(pid, 8192, "while-alive")], 0);
    let out = Gpufree::new(["why"])
        .json()
        .on(&d, &state)
        .args(["--pattern", "python3.*vllm"])
        .run();
    let doc = out.json();
    out.assert_exit(1);
    let p = process(&doc, pid).expect("the renamed interpreter is a holder");
    assert_eq!(p["renamed"], true);
    assert_eq!(p["comm"], "VLLM::Worker_TP");
    assert_eq!(p["cmdline"], serde_json::json!(["VLLM::Worker_TP3"]));
    assert!(
        p["exe"].as_str().unwrap().contains("python3"),
        "{}",
        p["exe"]
    );
    assert_eq!(via(p, "nvidia0"), ["fd", "mmap"]);
    let pattern = &find(&doc, "pattern")[0];
    assert!(
        pattern["message"]
            .as_str()
            .unwrap()
            .contains("would hit 0 of 1 holders"),
        "{pattern}"
    );
    let r = Gpufree::new(["kill"])
        .on(&d, &state)
        .args(["--pid", &pid.to_string(), "--yes"])
        .run();
    if r.code != 0 {
        let _ = py.kill(); // never leave it running, nor hang on it
    }
    let status = py.wait().unwrap();
    r.assert_exit(0);
    assert!(!status.success(), "ended by SIGTERM");
}

/// A real `hidepid` proc mount (in a private mount namespace): noticed;
/// root sees through it; as nobody, hidden processes are a caveat while
/// NVML accounts for the memory, and make the verdict unknown when it does
/// not.
#[test]
fn hidepid_proc_is_noticed_and_never_called_free_blindly() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: mounting proc needs root");
        return;
    }
    let d = TestDir::new(1);
    let mut g = sim_gpu(0, &[], 0);
    g["leaked_bytes"] = serde_json::json!(4u64 << 30);
    let leak = d.tmp.path().join("leak.json");
    std::fs::write(&leak, sim_state(vec![g]).to_string()).unwrap();
    let state = d.one_gpu(&[], 0);
    let proc_dir = d.tmp.path().join("proc");
    std::fs::create_dir(&proc_dir).unwrap();
    // The kit as_nobody uses: a copy of gpufree and the library others may run.
    let kit = nobody_kit(&d);
    use std::os::unix::fs::PermissionsExt;
    for f in [&state, &leak] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let why = |who: &str, state: &std::path::Path| {
        let script = format!(
            "mount -t proc -o hidepid=2 proc {p} && exec {who} \"$0\" \"$@\"",
            p = proc_dir.display()
        );
        Gpufree::new(["why", "--json"])
            .program(&kit.gpufree)
            .wrapped(["unshare", "--mount", "--fork", "--", "sh", "-c", &script])
            .proc_root(&proc_dir)
            .dev(&d.dev)
            .nvml_lib(&kit.lib)
            .sim_state(state)
            .run()
    };
    let r = why("", &state);
    if r.stderr.contains("Operation not permitted") || r.stderr.contains("unshare failed") {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs mount namespaces: {}",
            r.stderr
        );
        eprintln!("skipped: no mount namespaces here: {}", r.stderr);
        return;
    }
    // Root sees through hidepid.
    r.assert_exit(0);
    assert_eq!(r.json()["visibility"]["hidepid"], true);
    let nobody = "setpriv --reuid=nobody --regid=nogroup --clear-groups --";
    let r = why(nobody, &state);
    r.assert_exit(0);
    let doc = r.json();
    assert!(
        doc["verdict"]["caveats"].to_string().contains("hidepid"),
        "{}",
        doc["verdict"]
    );
    // Said once: by the free finding, not again as a partial view.
    let saying: Vec<&Value> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["message"].as_str().unwrap().contains("hidepid"))
        .collect();
    assert_eq!(saying.len(), 1, "{doc}");
    assert_eq!(saying[0]["kind"], "free", "{doc}");
    // Memory nobody visible accounts for, behind hidepid: unknown, never
    // free and never a driver leak.
    let r = why(nobody, &leak);
    r.assert_exit(3);
    let doc = r.json();
    assert_eq!(doc["verdict"]["state"], "unknown");
    assert!(find(&doc, "free").is_empty());
    assert!(find(&doc, "driver-leak").is_empty());
}

/// A holder in its own PID namespace (a container's process seen from the
/// host): its PID there is named next to the host PID.
#[test]
fn holder_in_another_pid_namespace_is_mapped_through_nspid() {
    use std::io::BufRead;
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: a PID namespace needs root");
        return;
    }
    let d = TestDir::new(1);
    let spec = serde_json::to_string(&HoldSpec {
        mmap: vec![d.node("nvidia0")],
        survive_parent: true,
        ..HoldSpec::default()
    })
    .unwrap();
    let mut ns = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--kill-child", "--"])
        .arg(bin())
        .env(gpufree::demo::holder::HOLDER_ENV, spec)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(ns.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready 1", "PID 1 inside its namespace");
    let state = d.one_gpu(&[], 0);
    let r = Gpufree::new(["why"]).json().on(&d, &state).run();
    r.assert_exit(1);
    let doc = r.json();
    let p = doc["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["nspid"].as_array().is_some_and(|n| n.len() == 2))
        .expect("the namespaced holder");
    let host_pid = p["pid"].as_u64().unwrap();
    assert_eq!(p["nspid"], serde_json::json!([host_pid, 1]));
    let dev = &find(&doc, "device-holders")[0];
    assert!(
        dev["details"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l.as_str().unwrap().contains("= PID 1 in its container")),
        "{dev}"
    );
    ns.kill().unwrap(); // unshare --kill-child takes the holder with it
    ns.wait().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while alive(host_pid as u32) {
        assert!(
            std::time::Instant::now() < deadline,
            "the namespaced holder outlived its unshare"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A torchrun-shaped job: an elastic agent that holds no GPU and its ranks,
/// each on its own GPU, renamed. `why` gives one group finding naming the
/// agent, whose next line (`kill --tree AGENT`) frees every GPU.
#[test]
fn ranks_under_a_launcher_that_holds_nothing_are_one_group() {
    let d = TestDir::new(4);
    let rank = |i: usize| gpufree::demo::holder::ChildSpec {
        argv: vec!["python3".into(), "-u".into(), "train.py".into()],
        spec: HoldSpec {
            label: format!("rank{i}"),
            title: Some(format!("pt_main_thread rank {i}")),
            mmap: vec![d.node(&format!("nvidia{i}")), d.node("nvidia-uvm")],
            ..HoldSpec::default()
        },
    };
    let agent = hold(
        &["torchrun", "--nproc-per-node", "4", "train.py"],
        HoldSpec {
            label: "agent".into(),
            comm: Some("torchrun".into()),
            children: (0..4).map(rank).collect(),
            ..HoldSpec::default()
        },
    );
    let ranks: Vec<u32> = (0..4).map(|i| agent.pid_of(&format!("rank{i}"))).collect();
    let gpus: Vec<Value> = ranks
        .iter()
        .enumerate()
        .map(|(i, p)| sim_gpu(i as u32, &[(*p, 20 * 1024, "while-alive")], 0))
        .collect();
    let state = d.state(&sim_state(gpus));
    let out = Gpufree::new(["why"]).json().on(&d, &state).run();
    let doc = out.json();
    out.assert_exit(1);
    let first = &doc["findings"][0];
    assert_eq!(first["kind"], "live-holders", "{doc}");
    let mut want = ranks.clone();
    want.sort_unstable();
    assert_eq!(pids(first), want);
    let agent_pid = agent.pid();
    assert!(
        first["message"].as_str().unwrap().starts_with(&format!(
            "4 live processes of launcher {agent_pid} (torchrun)"
        )),
        "{}",
        first["message"]
    );
    assert_eq!(first["next"], format!("gpufree kill --tree {agent_pid}"));
    assert_eq!(find(&doc, "live-holders").len(), 1, "one group, not four");
    // Its next line frees the GPUs.
    let next = first["next"].as_str().unwrap();
    let r = Gpufree::new(next.split(' ').skip(1))
        .on(&d, &state)
        .args(["--yes", "--json"])
        .run();
    r.assert_exit(0);
    let after = r.json();
    for g in after["gpus"].as_array().unwrap() {
        assert_eq!(g["memory"]["used_bytes"], 0, "{g}");
    }
    for p in &ranks {
        assert!(!alive(*p));
    }
}

/// A PID NVML lists on GPU 1 that no process here is belongs to GPU 1's
/// findings only: `why --gpu 0` of a free GPU 0 names none of it
/// (newuser32 F1: it showed as an error with 0 bytes), and `why --gpu 1`
/// names it with its memory.
#[test]
fn a_hidden_pid_on_another_gpu_is_not_the_selection_s_finding() {
    let d = TestDir::new(2);
    let state = d.state(&sim_state(vec![
        sim_gpu(0, &[], 0),
        sim_gpu(1, &[(999_999, 4096, "always")], 0),
    ]));
    let zero = Gpufree::new(["why"])
        .json()
        .on(&d, &state)
        .args(["--gpu", "0"])
        .run();
    zero.assert_exit(0);
    let doc = zero.json();
    for kind in ["outside-namespace", "stale-nvml-pid"] {
        assert!(find(&doc, kind).is_empty(), "{kind}: {}", zero.report());
    }
    let one = Gpufree::new(["why"])
        .json()
        .on(&d, &state)
        .args(["--gpu", "1"])
        .run();
    let doc = one.json();
    let named: Vec<&Value> = ["outside-namespace", "stale-nvml-pid"]
        .iter()
        .flat_map(|k| find(&doc, k))
        .collect();
    assert_eq!(named.len(), 1, "{}", one.report());
    assert_eq!(pids(named[0]), vec![999_999]);
    assert_eq!(named[0]["bytes"], 4096u64 << 20, "{}", one.report());
}
