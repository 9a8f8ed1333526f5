//! Exit codes and words as SPEC.md says them, for the inputs that used to
//! get them wrong: a user that does not exist, a device directory with no
//! GPU node, an interval that only spins, a closed pipe told apart from an
//! error that merely mentions one, `watch` without a terminal, `-q`, and
//! the man pages.

use crate::cmd::Gpufree;
use crate::harness::{hold, TestDir};
use gpufree::demo::holder::HoldSpec;
use std::process::Command;

/// gpufree `words` against the simulator on `d` (one GPU, `holder`
/// listed).
fn on(d: &TestDir, state: &std::path::Path, words: &[&str]) -> Gpufree {
    Gpufree::new(words).on(d, state)
}

#[test]
fn kill_of_a_user_that_does_not_exist_is_a_usage_error() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let r = on(
        &d,
        &state,
        &["kill", "--user", "no-such-user-here", "--yes"],
    )
    .run();
    r.assert_exit(2);
    assert!(
        r.stderr.contains("--user no-such-user-here: no such user"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    // A UID is taken as it is, and a real name resolves.
    on(&d, &state, &["kill", "--user", "4242", "--dry-run"])
        .run()
        .assert_exit(0);
    on(&d, &state, &["kill", "--user", "root", "--dry-run"])
        .run()
        .assert_exit(0);
}

#[test]
fn a_device_directory_without_gpu_nodes_is_a_usage_error() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let empty = d.tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let r = Gpufree::new(["status"]).dev(&empty).sim(&state).run();
    r.assert_exit(2);
    assert!(
        r.stderr.contains("no GPU device node there"),
        "{}",
        r.stderr
    );
}

#[test]
fn intervals_that_only_spin_are_refused() {
    for args in [
        &["wait", "--interval", "0"][..],
        &["wait", "--interval", "1ms"],
        &["watch", "--interval", "0"],
        &["watch", "--scan-every", "10ms"],
        &["serve", "--interval", "0"],
    ] {
        let r = Gpufree::new(args).run();
        r.assert_exit_with(2, format_args!("{args:?}: {}", r.stderr));
        assert!(r.stderr.contains("only spins"), "{args:?}: {}", r.stderr);
    }
}

#[test]
fn watch_without_a_terminal_says_so_and_does_not_panic() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let r = on(&d, &state, &["watch"]).run();
    r.assert_exit(3);
    assert!(r.stderr.contains("watch: needs a terminal"), "{}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
}

#[test]
fn a_closed_pipe_is_success_but_an_error_naming_one_is_not() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    // The reader goes away before gpufree writes.
    let r = on(&d, &state, &["status"]).run_stdout_closed();
    r.assert_exit(0);
    assert!(r.stderr.is_empty(), "{}", r.stderr);
    // An error whose text says "Broken pipe" is still an error.
    let r = on(
        &d,
        &state,
        &[
            "metrics",
            "--output",
            "/nonexistent/Broken pipe/metrics.prom",
        ],
    )
    .run();
    r.assert_exit(3);
    assert!(r.stderr.contains("--output"), "{}", r.stderr);
}

/// A holder of GPU 0 that NVML lists with 1 GiB: the holder, its PID, the
/// simulator state.
fn listed_worker(d: &TestDir) -> (gpufree::demo::holder::Spawned, u32, std::path::PathBuf) {
    let h = hold(
        &["python3", "worker.py"],
        HoldSpec {
            fd: vec![d.node("nvidia0")],
            ..HoldSpec::default()
        },
    );
    let pid = h.pid();
    let state = d.one_gpu(&[(pid, 1024, "while-alive")], 0);
    (h, pid, state)
}

#[test]
fn quiet_leaves_out_everything_but_the_answer() {
    let d = TestDir::new(1);
    let (h, pid, state) = listed_worker(&d);
    let r = on(&d, &state, &["status", "-q"]).run();
    r.assert_exit(0);
    assert!(r.stdout.contains(&pid.to_string()), "{}", r.stdout);
    assert!(!r.stdout.contains("scanned"), "{}", r.stdout);
    assert!(!r.stdout.contains("next:"), "{}", r.stdout);
    let r = on(&d, &state, &["why", "-q"]).run();
    r.assert_exit(1);
    assert!(!r.stdout.contains("next:"), "{}", r.stdout);
    assert!(r.stdout.contains("holds"), "{}", r.stdout);
    let r = on(&d, &state, &["wait", "-q", "--timeout", "0"]).run();
    r.assert_exit(1);
    assert_eq!(r.stdout, "");
    assert_eq!(r.stderr, "");
    drop(h);
}

#[test]
fn man_pages_name_only_pages_that_exist() {
    let d = tempfile::tempdir().unwrap();
    let r = Gpufree::new(["man"])
        .args(["--dir", d.path().to_str().unwrap()])
        .run();
    r.assert_exit(0);
    let pages: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(pages.contains(&"gpufree-kill.1".to_string()), "{pages:?}");
    let refs = regex::Regex::new(r"(gpufree(?:\\-[a-z]+)*)\((\d)\)").unwrap();
    let mut texts: Vec<(String, String)> = pages
        .iter()
        .map(|p| {
            (
                p.clone(),
                std::fs::read_to_string(d.path().join(p)).unwrap(),
            )
        })
        .collect();
    texts.push(("gpufree man".into(), Gpufree::new(["man"]).run().stdout));
    let mut seen = 0;
    for (page, text) in &texts {
        for c in refs.captures_iter(text) {
            let file = format!("{}.{}", c[1].replace("\\-", "-"), &c[2]);
            assert!(
                pages.contains(&file),
                "{page} names {file}, which does not exist"
            );
            seen += 1;
        }
    }
    assert!(seen > 10, "only {seen} references checked");
}

#[test]
fn a_closed_pipe_keeps_the_outcome_and_never_signals_an_unseen_plan() {
    let d = TestDir::new(1);
    let (h, pid, state) = listed_worker(&d);
    let closed = |words: &[&str]| on(&d, &state, words).run_stdout_closed();
    // Busy stays busy, whoever stopped reading.
    closed(&["why"]).assert_exit(1);
    closed(&["why", "--json"]).assert_exit(1);
    closed(&["status", "--json"]).assert_exit(0);
    closed(&["wait", "--timeout", "0"]).assert_exit(1);
    // A plan nobody could read is not carried out.
    let p = pid.to_string();
    let r = closed(&["kill", "--pid", &p, "--yes"]);
    r.assert_exit(3);
    assert!(r.stderr.contains("nothing signalled"), "{}", r.stderr);
    assert!(
        crate::harness::alive(pid),
        "signalled without showing the plan"
    );
    drop(h);
}

/// Completions into a full disk or a closed pipe: one line and exit 3, or
/// success for the pipe; never a panic (clap_complete panics on a write
/// error when it writes itself).
#[test]
fn completions_into_a_full_disk_fail_in_one_line_without_a_panic() {
    let full = std::fs::File::options()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let r = Gpufree::new(["completions", "bash"]).run_stdout_to(full);
    r.assert_exit(3);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    Gpufree::new(["completions", "fish"])
        .run_stdout_closed()
        .assert_exit(0);
}

#[test]
fn files_gpufree_reads_or_writes_are_checked_for_what_they_are() {
    let d = tempfile::tempdir().unwrap();
    // man --dir: a symlink planted at a page's name is refused.
    let victim = d.path().join("victim");
    std::fs::write(&victim, "keep me\n").unwrap();
    let man = d.path().join("man");
    std::fs::create_dir(&man).unwrap();
    std::os::unix::fs::symlink(&victim, man.join("gpufree.1")).unwrap();
    let r = Gpufree::new(["man"])
        .args(["--dir", man.to_str().unwrap()])
        .run();
    r.assert_exit(2);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
    // doctor --unit: not a device or a FIFO (neither read forever nor
    // waited on), and a stray byte that is not UTF-8 does not stop the check.
    let fifo = d.path().join("unit.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    for path in ["/dev/zero", fifo.to_str().unwrap()] {
        let r = Gpufree::new(["doctor"]).args(["--unit", path]).run();
        r.assert_exit_with(2, format_args!("{path}: {}", r.stderr));
        assert!(r.stderr.contains("not a regular file"), "{}", r.stderr);
    }
    let unit = d.path().join("x.service");
    std::fs::write(
        &unit,
        b"[Service]\nExecStart=/usr/bin/serve \xff\nKillMode=process\n",
    )
    .unwrap();
    let r = Gpufree::new(["doctor"])
        .args(["--unit", unit.to_str().unwrap()])
        .run();
    r.assert_exit(1);
    assert!(r.stdout.contains("KillMode"), "{}", r.stdout);
}

#[test]
fn a_pid_that_holds_nothing_is_left_out_the_same_with_or_without_dry_run() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    for extra in ["--dry-run", "--yes"] {
        let r = on(&d, &state, &["kill", "--pid", "4194000", extra]).run();
        assert!(r.stdout.contains("never a target"), "{}", r.stdout);
        r.assert_exit(0);
    }
}

#[test]
fn the_remaining_usage_and_environment_errors_name_their_flag_in_one_line() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let file = d.tmp.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let under_file = file.join("man");
    let missing = d.tmp.path().join("missing").join("gpufree.prom");
    let cases: [(&[&str], i32, &str); 5] = [
        // Usage (2): a proc root kill may not signal through, a regular
        // expression that does not compile, a duration without a unit.
        (
            &["kill", "--proc-root", "/tmp", "--dry-run"],
            2,
            "--proc-root",
        ),
        (
            &["kill", "--match", "python(", "--dry-run"],
            2,
            "--match 'python('",
        ),
        (&["kill", "--grace", "lots", "--dry-run"], 2, "lots"),
        // Environment (3): a file stands where the pages' directory goes;
        // the metrics file's directory does not exist.
        (&["man", "--dir", under_file.to_str().unwrap()], 3, "--dir"),
        (
            &["metrics", "--output", missing.to_str().unwrap()],
            3,
            "--output",
        ),
    ];
    for (args, code, names) in cases {
        let r = on(&d, &state, args).run();
        r.assert_exit_with(code, format_args!("{args:?}: {}", r.stderr));
        assert!(r.stderr.contains(names), "{args:?}: {}", r.stderr);
        if args[1] != "--grace" {
            // clap explains a bad value over several lines; ours are one.
            assert_eq!(r.stderr.trim().lines().count(), 1, "{args:?}: {}", r.stderr);
        }
    }
}
