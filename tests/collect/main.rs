//! Each one-shot command collects exactly once (issue 13): one walk of
//! /proc and one NVML read pass, counted where they happen
//! ([`gpufree::proc::scan::walks`], [`gpufree::nvml::read_passes`]).
//!
//! The commands run in this process, through [`gpufree::cli::run_from`],
//! on the simulated NVML library with a real holder process. The tests of
//! this binary (this one, and the kill's progress events, which also need
//! the library in-process) take one lock, so nothing else walks /proc or
//! reads NVML in the process meanwhile; the commands run one after the
//! other in one test.

#![allow(clippy::unwrap_used)] // Tests fail loudly by design.
#![allow(clippy::too_many_lines)] // A test reads as one story; its length is exempt.

#[allow(dead_code)] // The integration tests' command builder, which the harness uses.
#[path = "../it/cmd.rs"]
mod cmd;
#[allow(dead_code)] // The tests' environment, which the command builder gives.
#[path = "../common/env.rs"]
mod env;
#[allow(dead_code)] // The integration tests' harness; this binary uses a part.
#[path = "../it/harness.rs"]
mod harness;

use gpufree::act::kill::{self, Safety, Selectors};
use gpufree::act::progress::Event;
use gpufree::nvml::read_passes;
use gpufree::pipeline;
use gpufree::proc::kmsg;
use gpufree::proc::scan::walks;
use gpufree::snapshot::{Collector, Config};
use harness::{sim_lib, TestDir};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

/// A kernel log fixture.
const KMSG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/kmsg/two-gpus.kmsg");

/// The tests of this binary run one at a time: the counters are the
/// process's, and the simulator's state file is named by its environment.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `gpufree ARGS` in this process: its exit code, and how many walks
/// of /proc, NVML read passes and reads of the kernel log it made.
fn collections(args: &[&str]) -> (ExitCode, usize, usize, usize) {
    let (walks_before, passes_before, kmsg_before) = (walks(), read_passes(), kmsg::reads());
    let code = gpufree::cli::run_from(std::iter::once("gpufree").chain(args.iter().copied()));
    (
        code,
        walks() - walks_before,
        read_passes() - passes_before,
        kmsg::reads() - kmsg_before,
    )
}

#[test]
fn status_why_and_kill_dry_run_collect_exactly_once() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = TestDir::new(1);
    let holder = dir.mapper("nvidia0");
    // And a PID of another namespace (no such process here), which the
    // collection tries to pin and must not make it read NVML twice.
    let state = dir.one_gpu(
        &[
            (holder.pid(), 4096, "while-alive"),
            (other_namespace_pid(), 2048, "always"),
        ],
        0,
    );
    let lib = sim_lib();
    // The simulated library reads its state file from the environment.
    std::env::set_var("GPUFREE_SIM_STATE", &state);
    // This boot's relocation of the in-kernel walk: not the machine's /run.
    std::env::set_var("GPUFREE_BPF_CACHE", harness::bpf_cache());
    // The kernel log: a fixture, read once per command.
    std::env::set_var("GPUFREE_KMSG", KMSG);
    let on_sim = [
        "--dev-dir",
        dir.dev.to_str().unwrap(),
        "--nvml-lib",
        lib.to_str().unwrap(),
    ];
    let commands: [(&[&str], u8); 5] = [
        (&["status"], 0),
        (&["status", "--json"], 0),
        // The holder holds 4 GiB: busy.
        (&["why"], 1),
        (&["why", "--pattern", "gpufree"], 1),
        (&["kill", "--dry-run"], 0),
    ];
    // Either walk (the in-kernel one where it can run; else it falls back
    // to /proc, once) is one walk of every process.
    for scan in ["procfs", "bpf"] {
        for (command, code) in commands {
            let args: Vec<&str> = command
                .iter()
                .chain(&on_sim)
                .chain(&["--scan", scan])
                .copied()
                .collect();
            let (got, walked, read, logs) = collections(&args);
            assert_eq!(got, ExitCode::from(code), "gpufree {args:?}: exit code");
            assert_eq!(
                (walked, read, logs),
                (1, 1, 1),
                "gpufree {args:?}: (walks of every process, NVML read passes, kernel log reads)"
            );
        }
    }
}

/// A PID that names no process here: one past the highest this /proc
/// allows (`/proc/sys/kernel/pid_max`), as a process of another PID
/// namespace can be listed by NVML.
fn other_namespace_pid() -> u32 {
    let max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    max + 1
}

/// A kill reports its steps, in order, to whoever listens (act prints
/// nothing): the first round's signal to exactly the target, the release
/// wait's start, what still holds the memory meanwhile (later and later),
/// and its end; and the memory comes back.
#[test]
fn a_kill_reports_its_steps_in_order() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = TestDir::new(1);
    let holder = dir.mapper("nvidia0");
    // The driver takes 300 ms to give the memory back: the wait sees it held.
    let state = dir.one_gpu(&[(holder.pid(), 4096, "while-alive")], 300);
    std::env::set_var("GPUFREE_SIM_STATE", &state);
    let c = Collector::new(
        Config {
            dev_dir: dir.dev.clone(),
            nvml_lib: Some(sim_lib().to_path_buf()),
            // This boot's relocation of the in-kernel walk: not the
            // machine's /run.
            bpf_cache: Some(harness::bpf_cache().into()),
            ..Config::default()
        },
        None,
    )
    .unwrap();
    let snap = pipeline::judged(&c).unwrap();
    let sel = Selectors {
        pids: vec![holder.pid()],
        ..Selectors::default()
    };
    let safety = Safety::current();
    let plan = kill::plan(&snap, &sel, &safety);
    let opts = kill::Options {
        settle: Duration::ZERO,
        ..kill::Options::default()
    };
    let mut events = Vec::new();
    let (report, _) = kill::execute_reporting(&c, &snap, plan, &sel, &safety, &opts, &mut |e| {
        events.push(e)
    });
    assert!(report.released, "{report:?}");
    let Some((Event::Signalled { round, pids, .. }, rest)) = events.split_first() else {
        panic!("the first event is not the first round's signal: {events:?}");
    };
    assert_eq!((*round, pids.as_slice()), (1, [holder.pid()].as_slice()));
    assert_eq!(rest.first(), Some(&Event::ReleaseWaitStarted), "{events:?}");
    assert_eq!(rest.last(), Some(&Event::ReleaseWaitEnded), "{events:?}");
    let held: Vec<Duration> = rest[1..rest.len() - 1]
        .iter()
        .map(|e| match e {
            Event::MemoryHeld { elapsed, .. } => *elapsed,
            other => panic!("between the wait's start and end: {other:?}"),
        })
        .collect();
    assert!(
        !held.is_empty(),
        "the driver's 300 ms were not seen: {events:?}"
    );
    assert!(held.windows(2).all(|w| w[0] <= w[1]), "{held:?}");
}

/// NVML's Xid events, as the long-running commands watch them: one set
/// registered on every GPU, the simulator's events in order, each with
/// its GPU, and nothing more until the watcher is dropped.
#[test]
fn the_xid_watcher_delivers_the_drivers_events_in_order() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = TestDir::new(2);
    let mut gpu1 = harness::sim_gpu(1, &[], 0);
    gpu1["xid_events"] = serde_json::json!([
        {"xid": 48, "seconds_ago": 20},
        {"xid": 63, "pid": 4242, "seconds_ago": 10}
    ]);
    let mut gpu0 = harness::sim_gpu(0, &[], 0);
    gpu0["xid_events"] = serde_json::json!([{"xid": 79, "seconds_ago": 15}]);
    let state = dir.state(&harness::sim_state(vec![gpu0, gpu1]));
    std::env::set_var("GPUFREE_SIM_STATE", &state);
    let mut w = gpufree::nvml::XidWatcher::start(Some(sim_lib()));
    assert_eq!(w.registered(Duration::from_secs(10)), Ok(vec![0, 1]));
    let until = std::time::Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while got.len() < 3 && std::time::Instant::now() < until {
        got.extend(w.events(until));
    }
    let seen: Vec<(u32, Option<u64>, Option<u32>)> =
        got.iter().map(|e| (e.gpu, e.xid, e.pid)).collect();
    assert_eq!(
        seen,
        [
            (1, Some(48), None),
            (0, Some(79), None),
            (1, Some(63), None)
        ]
    );
    assert!(got.iter().all(|e| e.at_unix_ms > 0));
    let more = w.events(std::time::Instant::now() + Duration::from_millis(300));
    assert!(more.is_empty(), "each event once: {more:?}");
    assert_eq!(w.failed(), None);
}
