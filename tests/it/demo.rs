//! `gpufree demo`: the incident end to end, computed pkill matches, and
//! nothing left behind.

use crate::harness::*;
use gpufree::demo::WORKER_MIB;

#[test]
fn demo_json_is_the_incident() {
    let r = Gpufree::new(["demo"]).json().run();
    r.assert_exit(0);
    let doc = r.json();
    let procs = doc["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 10, "8 workers, launcher, tracker");
    let workers: Vec<&serde_json::Value> = procs
        .iter()
        .filter(|p| p["comm"] == "VLLM::Worker_TP")
        .collect();
    assert_eq!(workers.len(), 8);
    for w in &workers {
        assert_eq!(w["renamed"], true);
        assert_eq!(w["gpu_memory"][0]["used_bytes"], WORKER_MIB << 20);
    }
    for p in procs {
        assert!(
            !alive(p["pid"].as_u64().unwrap() as u32),
            "demo left {p} running"
        );
    }
}

#[test]
fn demo_shows_what_pkill_and_grep_miss_then_status_and_cleans_up() {
    let r = Gpufree::new(["demo", "--wide"]).run();
    r.assert_exit(0);
    let out = &r.stdout;
    assert!(
        out.contains("would signal 0 of the 10 GPU holders"),
        "{out}"
    );
    assert_eq!(
        out.matches("  misses ").count(),
        9,
        "8 workers and the launcher: {out}"
    );
    assert!(out.contains("multiprocessing.resource_tracker"));
    assert!(out.contains("$ gpufree status"));
    assert!(
        out.contains("8 live processes of launcher") && out.contains("hold 754.8 GiB on GPUs 0-7")
    );
    // Every PID the demo printed is gone.
    let pids: Vec<u32> = out
        .lines()
        .filter(|l| l.starts_with("  misses "))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .collect();
    assert_eq!(pids.len(), 9);
    for p in pids {
        assert!(!alive(p), "demo left {p} running");
    }
}

/// The demo within 80 and 100 columns (`COLUMNS`, stdout not a terminal):
/// its narration (the files, the "misses" lines, the operator's theory,
/// the ending), the tables, `why`'s evidence and the kill plan, every line
/// but the `next:` commands (cut, they would not paste); the "misses" lines
/// keep the exe on a line of their own.
#[test]
fn demo_fits_80_and_100_columns() {
    for columns in [80, 100] {
        let r = Gpufree::new(["demo"])
            .env("COLUMNS", columns.to_string())
            .run();
        r.assert_exit(0);
        for line in r.stdout.lines() {
            if line.trim_start().starts_with("next:") {
                continue;
            }
            assert!(
                gpufree::safe::width(line) <= columns,
                "{} > {columns}: {line}\n{}",
                gpufree::safe::width(line),
                r.stdout
            );
        }
        assert_eq!(r.stdout.matches("  misses ").count(), 9, "{}", r.stdout);
        assert!(r.stdout.contains("The operator's first theory"));
        assert!(
            r.stdout.contains("All 8 GPUs are free again"),
            "{}",
            r.stdout
        );
    }
}

/// `demo --hold` names this gpufree by its path in what it suggests (a
/// README's build is not on PATH), and ends when its input does.
#[test]
fn demo_hold_suggests_this_gpufree_by_its_path() {
    let r = Gpufree::new(["demo", "--hold"]).run();
    r.assert_exit(0);
    let me = bin().display().to_string();
    assert!(
        r.stdout.contains(&format!("  {me} sim exec --state ")),
        "{}",
        r.report()
    );
    assert!(r.stdout.contains(&format!(" -- {me} status --dev-dir ")));
}

#[test]
fn ctrl_c_ends_the_demo_and_everything_it_started() {
    use std::io::{BufRead, BufReader};
    let mut demo = Gpufree::new(["demo", "--hold"]).command();
    let mut child = demo
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut pids = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if line.starts_with("  misses ") {
            pids.push(
                line.split_whitespace()
                    .nth(1)
                    .unwrap()
                    .parse::<u32>()
                    .unwrap(),
            );
        }
        if line.starts_with("Press Enter") {
            break;
        }
    }
    assert_eq!(pids.len(), 9);
    assert!(
        pids.iter().all(|p| alive(*p)),
        "the incident runs while held"
    );
    // Its stdin stays open until it has exited: Child::wait would close
    // it first, and the demo, reading EOF where it waits for Enter, would
    // race its own Ctrl-C handler to a clean exit 0.
    let _stdin = child.stdin.take();
    // SIGINT to the demo, which this test started.
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    // (Its stdout was read above; its stderr went to the test's.)
    Output::of(&demo, status.code().unwrap_or(-1), vec![], vec![]).assert_exit(130);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while pids.iter().any(|p| alive(*p)) {
        assert!(
            std::time::Instant::now() < deadline,
            "demo processes outlived Ctrl-C"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// gpufree as `cargo install` leaves it: the binary alone in a directory,
/// nothing of the checkout beside it. The demo and the simulator still
/// run, from the library the binary carries, written out once to the
/// user's private cache; a cache directory others may write is refused.
#[test]
fn an_installed_gpufree_runs_the_demo_from_the_library_it_carries() {
    let tmp = tempfile::tempdir().unwrap();
    // Private, as a directory in /tmp must be for a cache's path to pass.
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let (bin_dir, home) = (tmp.path().join("bin"), tmp.path().join("home"));
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let installed = bin_dir.join("gpufree");
    std::fs::copy(bin(), &installed).unwrap();
    let run = |args: &[&str]| {
        run_cmd(
            std::process::Command::new(&installed)
                .args(args)
                .env_clear()
                .env("GPUFREE_BPF_CACHE", bpf_cache())
                .env("PATH", "/usr/bin:/bin")
                .env("HOME", &home),
        )
    };
    let r = run(&["sim", "lib"]);
    r.assert_exit(0);
    let cache = home.join(".cache/gpufree");
    assert_eq!(
        r.stdout.trim(),
        cache.join("nvml-sim").display().to_string()
    );
    let lib = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "so"))
        .expect("the library written out");
    let written = std::fs::metadata(&lib).unwrap().modified().unwrap();
    let r = run(&["demo"]);
    r.assert_exit(0);
    assert!(
        r.stdout.contains("All 8 GPUs are free again"),
        "{}",
        r.stdout
    );
    // Written once: the next run uses it as it is.
    assert_eq!(
        std::fs::metadata(&lib).unwrap().modified().unwrap(),
        written
    );
    // A library beside a binary in a directory others can write (a copy
    // in /tmp) could be anyone's: never loaded, the carried one is.
    let shared = tmp.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    std::fs::copy(bin(), shared.join("gpufree")).unwrap();
    std::fs::write(shared.join("libgpufree_nvml_sim.so"), "planted").unwrap();
    let r = run_cmd(
        std::process::Command::new(shared.join("gpufree"))
            .args(["sim", "lib"])
            .env_clear()
            .env("HOME", &home),
    );
    assert_eq!(
        r.stdout.trim(),
        cache.join("nvml-sim").display().to_string(),
        "{}",
        r.stderr
    );
    // A cache others could write is no place to load a library from: the
    // user's own directory in the temp dir is taken instead, and where
    // that is not safe either, nothing is (exit 3, each reason said).
    std::fs::set_permissions(&cache, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let temp = tmp.path().join("temp");
    std::fs::create_dir_all(&temp).unwrap();
    let in_temp = |temp: &std::path::Path| {
        run_cmd(
            std::process::Command::new(&installed)
                .args(["sim", "lib"])
                .env_clear()
                .env("HOME", &home)
                .env("TMPDIR", temp),
        )
    };
    let r = in_temp(&temp);
    r.assert_exit(0);
    let uid = rustix::process::getuid().as_raw();
    assert_eq!(
        r.stdout.trim(),
        temp.join(format!("gpufree-sim-{uid}/nvml-sim"))
            .display()
            .to_string()
    );
    std::fs::set_permissions(&temp, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let r = in_temp(&temp);
    r.assert_exit(3);
    assert!(
        r.stderr
            .contains("no safe directory for the simulated NVML library")
            && r.stderr
                .contains(".cache/gpufree: neither root's nor this user's, or others may write it")
            && r.stderr
                .contains("temp: neither root's nor this user's, or others may write it"),
        "{}",
        r.stderr
    );
}
