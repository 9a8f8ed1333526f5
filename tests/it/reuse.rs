//! The PID-reuse harness (tests/reuse/driver.py) in a PID namespace of its
//! own: at each window (the scan between the fd table and the identity
//! read, between plan and signal, an exec between plan and signal) a
//! holder's PID goes to an innocent process, or the holder exec's, and
//! gpufree must neither list nor signal the wrong process.
//! `scripts/pid-reuse-trials.sh` runs 10,000 trials.

use crate::cmd::hook;
use crate::harness::*;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Instant;

/// Trials across the three windows (a third each): about 30 s in a debug
/// build on 2 cores.
const TRIALS: u32 = 300;

/// The driver's last line, `key=value ...`, as a map.
fn summary(stdout: &str) -> BTreeMap<String, f64> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("trials="))
        .unwrap_or_else(|| panic!("no summary line in:\n{stdout}"));
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

#[test]
fn a_reused_or_exec_d_pid_is_never_listed_or_signalled() {
    trials("procfs", TRIALS);
}

/// The same windows with the holders found by the in-kernel walk (its
/// match carries the start time; the pin through /proc must agree).
#[test]
fn nor_when_the_kernel_walk_finds_the_holders() {
    trials("bpf", TRIALS / 2);
}

/// Runs `n` trials with `--scan` set to `scan` (GPUFREE_SCAN, which the
/// driver passes on to every gpufree it starts).
fn trials(scan: &str, n: u32) {
    if !rustix::process::geteuid().is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the PID-reuse harness as root"
        );
        eprintln!("skipped: the PID-reuse harness needs root (a PID namespace, ns_last_pid)");
        return;
    }
    // The driver sets it for each gpufree it starts.
    hook("GPUFREE_TEST_PAUSE");
    let driver = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/reuse/driver.py");
    let started = Instant::now();
    let r = run_cmd(
        Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "python3", driver])
            .arg("--gpufree")
            .arg(bin())
            .arg("--lib")
            .arg(sim_lib())
            .args(["--trials", &n.to_string(), "--window", "all"])
            .env("GPUFREE_SCAN", scan)
            .env("GPUFREE_BPF_CACHE", bpf_cache()),
    );
    let took = started.elapsed();
    r.assert_exit(0);
    let s = summary(&r.stdout);
    eprintln!("--scan {scan}: {} ({took:.1?})", r.stdout.trim_end());
    assert_eq!(s["trials"], f64::from(n));
    for bad in ["wrong_kills", "wrong_listings", "missed_reports", "errors"] {
        assert_eq!(s[bad], 0.0, "{bad}:\n{}\n{}", r.stdout, r.stderr);
    }
    assert!(
        s["forced"] >= 0.95 * f64::from(n),
        "the PID was handed over (or the exec happened) in too few trials:\n{}",
        r.stdout
    );
}
