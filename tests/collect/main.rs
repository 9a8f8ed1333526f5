//! Each one-shot command collects exactly once (issue 13): one walk of
//! /proc and one NVML read pass, counted where they happen
//! ([`gpufree::proc::scan::walks`], [`gpufree::nvml::read_passes`]).
//!
//! The commands run in this process, through [`gpufree::cli::run_from`],
//! on the simulated NVML library with a real holder process. This binary
//! holds no other test, so nothing else walks /proc or reads NVML in the
//! process meanwhile; the commands run one after the other in one test.

#![allow(clippy::unwrap_used)] // Tests fail loudly by design.
#![allow(clippy::too_many_lines)] // A test reads as one story; its length is exempt.

#[allow(dead_code)] // The integration tests' harness; this binary uses a part.
#[path = "../it/harness.rs"]
mod harness;

use gpufree::nvml::read_passes;
use gpufree::proc::scan::walks;
use harness::{sim_lib, TestDir};
use std::process::ExitCode;

/// Runs `gpufree ARGS` in this process: its exit code, and how many walks
/// of /proc and NVML read passes it made.
fn collections(args: &[&str]) -> (ExitCode, usize, usize) {
    let (walks_before, passes_before) = (walks(), read_passes());
    let code = gpufree::cli::run_from(std::iter::once("gpufree").chain(args.iter().copied()));
    (code, walks() - walks_before, read_passes() - passes_before)
}

#[test]
fn status_why_and_kill_dry_run_collect_exactly_once() {
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
    for (command, code) in commands {
        let args: Vec<&str> = command.iter().chain(&on_sim).copied().collect();
        let (got, walked, read) = collections(&args);
        assert_eq!(got, ExitCode::from(code), "gpufree {command:?}: exit code");
        assert_eq!(
            (walked, read),
            (1, 1),
            "gpufree {command:?}: (walks of /proc, NVML read passes)"
        );
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
