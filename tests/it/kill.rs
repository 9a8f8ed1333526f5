//! `gpufree kill` and `gpufree wait` on real processes and the simulator:
//! TERM-handling and TERM-ignoring targets, stopped targets, a target that
//! forks a holder while being stopped, zombies, PID reuse, protected names,
//! non-root refusal, confirmation, the release wait, `wait` exits.

use crate::harness::*;
use gpufree::demo::holder::{ChildSpec, HoldSpec};
use gpufree::demo::Incident;
use std::time::{Duration, Instant};

#[test]
fn seed_incident_kill_frees_exactly_the_ten_and_confirms_the_release() {
    let inc = Incident::start(&bin()).unwrap();
    let ours: Vec<u32> = inc.spawned.pids.iter().map(|(p, _)| *p).collect();
    let started = Instant::now();
    let r = Gpufree::new(["kill"])
        .json()
        .dev(&inc.dev)
        .sim(&inc.state)
        .args(["--yes"])
        .run();
    let doc = r.json_or_null();
    r.assert_exit(0);
    let k = &doc["kill"];
    let mut targets = u32s(&k["targets"]);
    targets.sort_unstable();
    let mut expect = ours.clone();
    expect.sort_unstable();
    assert_eq!(
        targets, expect,
        "exactly the launcher, the tracker and the eight workers"
    );
    assert_eq!(k["survivors"], serde_json::json!([]));
    assert_eq!(k["released"], true);
    let secs = k["seconds_to_release"].as_f64().unwrap();
    assert!(
        secs >= 1.9,
        "the simulated driver holds the memory 2 s after the exits: {secs}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    for g in doc["gpus"].as_array().unwrap() {
        assert_eq!(g["memory"]["used_bytes"], 0);
    }
    for p in ours {
        assert!(!alive(p), "{p} survived");
    }
}

#[test]
fn term_ignoring_target_gets_sigkill_after_the_grace_period() {
    let d = TestDir::new(1);
    let h = hold(
        &["gpufree"],
        HoldSpec {
            mmap: vec![d.node("nvidia0")],
            ignore_term: true,
            ..HoldSpec::default()
        },
    );
    let ok = hold(
        &["gpufree"],
        HoldSpec {
            fd: vec![d.node("nvidia0")],
            ..HoldSpec::default()
        },
    );
    let state = d.one_gpu(&[(h.pid(), 1024, "while-alive")], 0);
    let pid = h.pid().to_string();
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args([
            "--pid",
            &pid,
            "--pid",
            &ok.pid().to_string(),
            "--grace",
            "300ms",
            "--yes",
        ])
        .run();
    let doc = r.json_or_null();
    r.assert_exit(0);
    assert_eq!(
        u32s(&doc["kill"]["killed_hard"]),
        vec![h.pid()],
        "only the TERM-ignoring one needed KILL"
    );
    assert!(!alive(h.pid()) && !alive(ok.pid()));
    assert_eq!(doc["kill"]["released"], true);
}

#[test]
fn stopped_target_is_continued_and_handles_term() {
    let d = TestDir::new(1);
    let h = d.mapper("nvidia0");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(h.pid() as i32).unwrap(),
        rustix::process::Signal::STOP,
    )
    .unwrap();
    wait_state(h.pid(), 'T');
    let state = d.one_gpu(&[(h.pid(), 1024, "while-alive")], 0);
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--gpu", "0", "--grace", "5s", "--yes"])
        .run();
    let doc = r.json_or_null();
    r.assert_exit(0);
    assert_eq!(
        doc["kill"]["killed_hard"],
        serde_json::json!([]),
        "SIGCONT let it act on TERM"
    );
    assert!(!alive(h.pid()));
}

#[test]
fn target_forking_a_holder_during_the_grace_period_is_handled_in_the_same_run() {
    let d = TestDir::new(1);
    let child = ChildSpec {
        argv: vec!["gpufree".into(), "forked-worker".into()],
        spec: HoldSpec {
            label: "forked".into(),
            survive_parent: true,
            mmap: vec![d.node("nvidia0")],
            ..HoldSpec::default()
        },
    };
    let h = hold(
        &["gpufree"],
        HoldSpec {
            fd: vec![d.node("nvidia0")],
            fork_on_term: Some(Box::new(child)),
            ..HoldSpec::default()
        },
    );
    let state = d.one_gpu(&[], 0);
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--gpu", "0", "--grace", "2s", "--yes"])
        .run();
    let doc = r.json_or_null();
    let rescued = u32s(&doc["kill"]["found_by_rescan"]);
    // Clean up by identity if gpufree failed to (the forked child is not ours).
    let survivors = survivors_reaped(&rescued, "forked-worker");
    r.assert_exit_with(0, format_args!("{doc}"));
    assert_eq!(
        rescued.len(),
        1,
        "the forked holder was found by the rescan: {}",
        doc["kill"]
    );
    assert!(!alive(h.pid()));
    assert_eq!(survivors, Vec::<u32>::new(), "the forked holder survived");
    assert!(
        doc["processes"].as_array().unwrap().is_empty(),
        "nothing holds the node any more"
    );
}

#[test]
fn zombie_holder_is_not_killed_and_its_parent_is_named() {
    let d = TestDir::new(1);
    let z = d.zombie("nvidia0");
    // NVML still lists it (as a driver may while it tears down).
    let state = d.one_gpu(&[(z.pid(), 1024, "always")], 0);
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--pid", &z.pid().to_string(), "--yes", "--no-wait"])
        .run();
    let doc = r.json_or_null();
    r.assert_exit(0);
    let skipped = &doc["kill"]["skipped"][0];
    assert_eq!(skipped["pid"], z.pid());
    assert!(
        skipped["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("parent {} must reap it", std::process::id())),
        "{skipped}"
    );
    assert_eq!(doc["kill"]["targets"], serde_json::json!([]));
}

#[test]
fn protected_daemon_is_refused_unless_forced() {
    let d = TestDir::new(1);
    let link = d.tmp.path().join("nvidia-persistenced");
    if std::fs::hard_link(bin(), &link).is_err() {
        std::fs::copy(bin(), &link).unwrap();
    }
    let pd = gpufree::demo::holder::spawn(
        &link,
        &ChildSpec {
            argv: vec!["nvidia-persistenced".into()],
            spec: HoldSpec {
                fd: vec![d.node("nvidia0")],
                ..HoldSpec::default()
            },
        },
    )
    .unwrap();
    let state = d.one_gpu(&[], 0);
    // Asked for by PID: refused for safety.
    let pid = pd.pid().to_string();
    let out = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--pid", &pid, "--yes"])
        .run();
    let doc = out.json_or_null();
    out.assert_exit_with(5, format_args!("refused for safety"));
    assert!(doc["kill"]["skipped"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("protected"));
    assert!(alive(pd.pid()));
    // Freeing the GPU it alone holds (as on every node running
    // nvidia-persistenced): nothing to free, done (exit 0, a Slurm epilog
    // stays quiet), and the daemon untouched.
    let ran = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--gpu", "0", "--yes"])
        .run();
    let doc = ran.json_or_null();
    ran.assert_exit(0);
    assert_eq!(doc["kill"]["targets"], serde_json::json!([]));
    assert!(alive(pd.pid()));
    let r = Gpufree::new(["kill"])
        .on(&d, &state)
        .args(["--gpu", "0", "--yes"])
        .run();
    r.assert_exit(0);
    assert!(
        r.stdout
            .contains("Nothing to signal: GPU 0 is free; only protected daemons hold it"),
        "{}",
        r.stdout
    );
    let quiet = Gpufree::new(["kill"])
        .on(&d, &state)
        .args(["--gpu", "0", "--yes", "--quiet"])
        .run();
    quiet.assert_exit(0);
    assert_eq!((quiet.stdout.as_str(), quiet.stderr.as_str()), ("", ""));
    assert!(alive(pd.pid()));
    let res = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--gpu", "0", "--yes", "--force-protected"])
        .run();
    let doc = res.json_or_null();
    res.assert_exit(0);
    assert_eq!(u32s(&doc["kill"]["targets"]), vec![pd.pid()]);
    assert!(!alive(pd.pid()));
}

#[test]
fn non_root_may_not_signal_other_users_processes() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to run gpufree as nobody");
        return;
    }
    let d = TestDir::new(1);
    use std::os::unix::fs::PermissionsExt;
    let h = d.mapper("nvidia0");
    // NVML lists root's process, so nobody sees it as a holder.
    let state = d.one_gpu(&[(h.pid(), 1024, "while-alive")], 0);
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o644)).unwrap();
    let r = as_nobody(&d, &["kill", "--gpu", "0", "--yes"])
        .json()
        .dev(&d.dev)
        .env("GPUFREE_SIM_STATE", &state)
        .run();
    r.assert_exit(5);
    let doc = r.json();
    assert!(
        doc["kill"]["skipped"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("run as root"),
        "{}",
        doc["kill"]
    );
    assert!(alive(h.pid()));
}

#[test]
fn without_a_terminal_and_without_yes_nothing_is_signalled() {
    let d = TestDir::new(1);
    let h = d.mapper("nvidia0");
    let state = d.one_gpu(&[], 0);
    let out = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--gpu", "0"])
        .run();
    out.assert_exit(5);
    assert!(out.stderr.contains("--yes"), "{}", out.stderr);
    assert!(alive(h.pid()));
    let r = Gpufree::new(["kill"])
        .on(&d, &state)
        .args(["--dry-run", "--gpu", "0"])
        .run();
    r.assert_exit(0);
    assert!(
        r.stdout.contains("Plan: signal 1 process") && r.stdout.contains(&h.pid().to_string()),
        "{}",
        r.stdout
    );
    assert!(alive(h.pid()), "--dry-run signals nothing");
}

#[test]
fn release_without_a_delay_is_seen_at_once() {
    let d = TestDir::new(1);
    let h = d.mapper("nvidia0");
    let state = d.one_gpu(&[(h.pid(), 8192, "while-alive")], 0);
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--gpu", "0", "--yes"])
        .run();
    let doc = r.json_or_null();
    r.assert_exit(0);
    assert!(
        doc["kill"]["seconds_to_release"].as_f64().unwrap() < 1.5,
        "{}",
        doc["kill"]
    );
}

#[test]
fn memory_that_never_comes_back_exits_4_and_says_what_holds_it() {
    let d = TestDir::new(1);
    let h = d.mapper("nvidia0");
    // The driver keeps the memory for 60 s after the exit.
    let state = d.state(&sim_state(vec![sim_gpu(
        0,
        &[(h.pid(), 8192, "while-alive")],
        60_000,
    )]));
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--gpu", "0", "--yes", "--timeout", "500ms"])
        .run();
    let doc = r.json_or_null();
    r.assert_exit(4);
    assert_eq!(doc["kill"]["released"], false);
    assert!(
        doc["kill"]["still_holding"][0]
            .as_str()
            .unwrap()
            .contains("GPU 0"),
        "{}",
        doc["kill"]
    );
}

#[test]
fn wait_times_out_with_exit_1_while_held_and_returns_0_once_released() {
    let d = TestDir::new(1);
    let mut h = d.mapper("nvidia0");
    let state = d.one_gpu(&[(h.pid(), 4096, "while-alive")], 500);
    let r = Gpufree::new(["wait"])
        .on(&d, &state)
        .args(["--timeout", "400ms"])
        .run();
    r.assert_exit(1);
    assert!(r.stdout.contains("timeout:"), "{}", r.stdout);
    let r = Gpufree::new(["wait"])
        .on(&d, &state)
        .args(["--timeout", "0"])
        .run();
    r.assert_exit_with(1, format_args!("--timeout 0 checks once"));
    let waiter = Gpufree::new(["wait"])
        .on(&d, &state)
        .args(["--timeout", "20s", "--json"])
        .spawn();
    std::thread::sleep(Duration::from_millis(300));
    h.kill();
    let gone = Instant::now();
    let out = waiter.finish();
    out.assert_exit(0);
    let doc = out.json();
    assert_eq!(doc["wait"]["free"], true);
    let after = gone.elapsed();
    assert!(
        after >= Duration::from_millis(450),
        "not before the simulated release: {after:?}"
    );
}

#[test]
fn wait_max_used_threshold() {
    let d = TestDir::new(1);
    let h = d.mapper("nvidia0");
    let state = d.one_gpu(&[(h.pid(), 2048, "while-alive")], 0);
    Gpufree::new(["wait"])
        .on(&d, &state)
        .args(["--max-used", "4GiB", "--timeout", "0", "-q"])
        .run()
        .assert_exit(0);
    let r = Gpufree::new(["wait"])
        .on(&d, &state)
        .args(["--max-used", "1GiB", "--timeout", "0", "-q"])
        .run();
    r.assert_exit(1);
    assert!(r.stdout.is_empty(), "-q prints nothing");
    let r = Gpufree::new(["wait"])
        .on(&d, &state)
        .args(["--max-used", "lots"])
        .run();
    r.assert_exit(2);
    assert!(r.stderr.contains("lots"));
}

/// On a terminal, kill asks first; `y` goes ahead, anything else stops.
/// Regression: the progress bar, drawing on stderr from its own thread,
/// deadlocked against a stderr lock held by kill.
#[test]
fn on_a_terminal_kill_asks_and_acts_only_on_yes() {
    let d = TestDir::new(1);
    let h = d.mapper("nvidia0");
    let state = d.state(&sim_state(vec![sim_gpu(
        0,
        &[(h.pid(), 1024, "while-alive")],
        1000, // the driver takes 1 s: the progress bar ticks while kill waits
    )]));
    let lib = sim_lib();
    let cmd = format!(
        "env GPUFREE_SIM_STATE={} {} kill --gpu 0 --dev-dir {} --nvml-lib {}",
        state.display(),
        bin().display(),
        d.dev.display(),
        lib.display()
    );
    let Some(t) = Tmux::start("kill-no", &cmd) else {
        return;
    };
    t.wait_for("Signal this process? [y/N]");
    t.keys(&["n", "Enter"]);
    assert_eq!(t.wait_exit(), "5", "not confirmed: refused");
    assert!(alive(h.pid()));
    drop(t);
    let Some(t) = Tmux::start("kill-yes", &cmd) else {
        return;
    };
    t.wait_for("[y/N]");
    t.keys(&["y", "Enter"]);
    assert_eq!(t.wait_exit(), "0", "{}", t.screen());
    assert!(t.screen().contains("GPU memory released after"));
    assert!(!alive(h.pid()));
}

/// `kill --tree LAUNCHER` takes the holders that descend from the launcher,
/// through a middle process that holds nothing itself, and nothing else:
/// the holder outside the tree keeps running.
#[test]
fn tree_selects_the_holders_below_a_launcher_and_nothing_else() {
    let d = TestDir::new(2);
    let worker = |label: &str, node: &str| ChildSpec {
        argv: vec!["python3".into(), "-m".into(), "worker".into()],
        spec: HoldSpec {
            label: label.into(),
            title: Some(format!("Worker_{label}")),
            fd: vec![d.node(node)],
            ..HoldSpec::default()
        },
    };
    let middle = ChildSpec {
        argv: vec!["python3".into(), "-m".into(), "spawner".into()],
        spec: HoldSpec {
            label: "middle".into(),
            children: vec![worker("w0", "nvidia0"), worker("w1", "nvidia1")],
            ..HoldSpec::default()
        },
    };
    let launcher = hold(
        &["torchrun", "--nproc-per-node", "2", "train.py"],
        HoldSpec {
            label: "launcher".into(),
            children: vec![middle],
            ..HoldSpec::default()
        },
    );
    let pid_of = |label: &str| launcher.pid_of(label);
    let (w0, w1, mid) = (pid_of("w0"), pid_of("w1"), pid_of("middle"));
    let outsider = d.mapper("nvidia0");
    let state = d.state(&sim_state(vec![
        sim_gpu(
            0,
            &[
                (w0, 1024, "while-alive"),
                (outsider.pid(), 512, "while-alive"),
            ],
            0,
        ),
        sim_gpu(1, &[(w1, 1024, "while-alive")], 0),
    ]));
    let root = launcher.pid().to_string();
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--tree", &root, "--yes"])
        .run();
    let doc = r.json_or_null();
    // Released: what the tree held is back (the outsider's memory was not
    // part of the ask). The report says which target survived, or which
    // memory stayed, where it is not (once seen under CI's load: exit 4).
    r.assert_exit_with(0, format_args!("{}", doc["kill"]));
    let mut targets = u32s(&doc["kill"]["targets"]);
    targets.sort_unstable();
    let mut want = vec![w0, w1];
    want.sort_unstable();
    assert_eq!(
        targets, want,
        "the tree's holders, not the middle or the outsider"
    );
    assert!(alive(outsider.pid()), "outside the tree");
    assert!(alive(mid), "holds nothing: never a target");
    assert!(!alive(w0) && !alive(w1));
}

/// A supervisor (a parent that starts its child again when it dies, like
/// `Restart=always`) that restarts after `respawn_delay_ms`, its worker
/// opening the GPU `open_delay_ms` after its start: the kill of the worker
/// does not free the GPU, exits 4, and names the supervisor and what stops
/// it.
fn supervised_kill_fails(respawn_delay_ms: u64, open_delay_ms: u64) {
    let d = TestDir::new(1);
    let worker = ChildSpec {
        argv: vec!["python3".into(), "serve.py".into()],
        spec: HoldSpec {
            label: "worker".into(),
            mmap: vec![d.node("nvidia0")],
            open_delay_ms,
            ..HoldSpec::default()
        },
    };
    let sup = hold(
        &["supervisord", "-n"],
        HoldSpec {
            label: "supervisor".into(),
            comm: Some("supervisord".into()),
            children: vec![worker],
            respawn: 3,
            respawn_delay_ms,
            ..HoldSpec::default()
        },
    );
    let w = sup.pid_of("worker");
    let state = d.one_gpu(&[], 0);
    let p = w.to_string();
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--pid", &p, "--yes", "--grace", "1s", "--timeout", "20s"])
        .run();
    let doc = r.json_or_null();
    r.assert_exit_with(4, format_args!("{}", doc["kill"]));
    assert_eq!(u32s(&doc["kill"]["targets"]), vec![w]);
    let reasons = doc["kill"]["reasons"].to_string();
    let sup_pid = sup.pid();
    assert!(
        reasons.contains(&format!("PID {sup_pid} (supervisord), started it again")),
        "{reasons}"
    );
    assert!(
        reasons.contains(&format!(
            "stop PID {sup_pid} first, then free the GPU: `gpufree kill --gpu 0`"
        )),
        "{reasons}"
    );
    assert!(
        alive(sup_pid),
        "the supervisor holds nothing: never signalled"
    );
}

#[test]
fn a_supervisor_that_restarts_its_worker_is_named_and_the_kill_fails() {
    supervised_kill_fails(0, 0);
}

/// The restart comes after the memory is back: the release is watched for
/// a while (`--settle`), and a restart within it is caught.
#[test]
fn a_supervisor_that_restarts_after_the_release_is_caught() {
    supervised_kill_fails(500, 0);
}

/// The restarted worker opens the GPU only after the settle second (as a
/// CUDA start-up does): the new child of the target's parent extends the
/// watch until it does.
#[test]
fn a_restart_that_opens_the_gpu_late_is_caught() {
    supervised_kill_fails(0, 2500);
}

/// A monitor that opens the GPU's node now and then without mapping it
/// (as `watch nvidia-smi` does, each poll a new process of the same user
/// and cgroup) is no restart: the settle watch lets the release stand.
#[test]
fn a_monitor_polling_the_node_during_the_settle_watch_is_no_restart() {
    let d = TestDir::new(1);
    let h = d.mapper("nvidia0");
    let poll = format!(
        "while :; do sleep 0.2 < {}; done",
        d.node("nvidia0").display()
    );
    let mut monitor = std::process::Command::new("sh")
        .args(["-c", &poll])
        .spawn()
        .unwrap();
    let state = d.one_gpu(&[(h.pid(), 1024, "while-alive")], 0);
    let p = h.pid().to_string();
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--pid", &p, "--yes", "--settle", "1500ms"])
        .run();
    let doc = r.json_or_null();
    let _ = monitor.kill();
    let _ = monitor.wait();
    r.assert_exit_with(0, format_args!("{}", doc["kill"]));
    assert!(!alive(h.pid()));
}

/// The release is timed from the targets' exit: the driver's teardown
/// (here the simulator's 400 ms release delay) shows as
/// `seconds_after_exit`, and a kill with no supervisor watches the release
/// for the settle time.
#[test]
fn the_drivers_teardown_time_is_reported() {
    let d = TestDir::new(1);
    let h = d.mapper("nvidia0");
    let state = d.one_gpu(&[(h.pid(), 1024, "while-alive")], 400);
    let p = h.pid().to_string();
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--pid", &p, "--yes", "--settle", "300ms"])
        .run();
    let doc = r.json_or_null();
    r.assert_exit(0);
    let k = &doc["kill"];
    let after_exit = k["seconds_after_exit"].as_f64().unwrap();
    assert!(after_exit >= 0.35, "{k}");
    assert!(
        k["seconds_to_release"].as_f64().unwrap() >= after_exit,
        "{k}"
    );
    assert!(
        k["seconds_watched_for_restarts"].as_f64().unwrap() >= 0.3,
        "{k}"
    );
}

/// `kill --user` naming no user is refused before anything is collected
/// (the configuration step resolves it): here a device directory that
/// does not exist would be the first error of a collection.
#[test]
fn kill_user_nosuch_is_refused_before_any_collection() {
    let r = Gpufree::new(["kill"])
        .dev("/nonexistent/gpufree-dev")
        .args(["--user", "no-such-user-gpufree", "--dry-run"])
        .run();
    r.assert_exit(2);
    assert_eq!(
        r.stderr.trim(),
        "gpufree: --user no-such-user-gpufree: no such user (give a name of this host or a UID)"
    );
}
