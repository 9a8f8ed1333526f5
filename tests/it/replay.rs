//! `gpufree watch --replay FILE` used as a person uses it: a host recorded
//! while a holder is stuck, killed and released, then replayed in tmux:
//! the first moment shows the holder under the REPLAY bar, End shows the
//! GPU free, ← goes back to the holder past the kill's moment (which says
//! who signalled what and what came of it), space plays it to its end, the kill
//! and rescan keys say why they do nothing, q quits. A file that is no recording and a flag that needs
//! the live host fail before the terminal is taken.

use crate::harness::{bin, hold, Gpufree, TestDir, Tmux};
use gpufree::demo::holder::HoldSpec;
use std::path::Path;
use std::time::{Duration, Instant};

/// Waits (10 s at most) until the recording at `path` holds `text`.
fn wait_text(path: &Path, text: &str) {
    let until = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(path)
        .unwrap_or_default()
        .contains(text)
    {
        assert!(Instant::now() < until, "no {text} in the recording");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The moment the bar shows (`moment N/M`): N.
fn moment(screen: &str) -> usize {
    let at = screen.split("moment ").nth(1).unwrap_or("");
    at.split('/').next().unwrap_or("").parse().unwrap_or(0)
}

#[test]
fn a_replay_shows_the_stuck_holder_then_the_free_gpu_and_signals_nothing() {
    let d = TestDir::new(1);
    let trainer = hold(
        &["python3", "train.py"],
        HoldSpec {
            fd: vec![d.node("nvidia0")],
            ..HoldSpec::default()
        },
    );
    let state = d.one_gpu(&[(trainer.pid(), 1024, "while-alive")], 0);
    let rec_path = d.tmp.path().join("timeline.jsonl");
    let log = d.tmp.path().join("kills.jsonl");
    let log = log.to_str().unwrap();
    let rec = Gpufree::new(["record"])
        .on(&d, &state)
        .args(["--out", rec_path.to_str().unwrap(), "--interval", "100ms"])
        .args(["--scan", "procfs", "--scan-every", "1s", "--audit-log", log])
        .spawn();
    wait_text(&rec_path, "\"full\"");
    std::thread::sleep(Duration::from_millis(300));
    let pid = trainer.pid().to_string();
    Gpufree::new(["kill"])
        .on(&d, &state)
        .args(["--pid", &pid, "--yes", "--audit-log", log])
        .run()
        .assert_exit(0);
    wait_text(&rec_path, "\"state\":\"free\"");
    wait_text(&rec_path, "\"kill\":");
    let id = rustix::process::Pid::from_raw(rec.child.id() as i32).unwrap();
    rustix::process::kill_process(id, rustix::process::Signal::TERM).unwrap();
    rec.finish().assert_exit(0);

    // The exit code into a file: the pane's own line is under the
    // restored screen.
    let code = d.tmp.path().join("exit");
    let cmd = format!(
        "{} watch --replay {}; echo $? > {}",
        bin().display(),
        rec_path.display(),
        code.display()
    );
    let Some(t) = Tmux::start("replay", &cmd) else {
        return;
    };
    let s = t.wait_for("REPLAY — nothing here is live");
    let s = if s.contains(&pid) {
        s
    } else {
        t.wait_for(&pid)
    };
    assert!(s.contains("moment 1/") && s.contains("paused"), "{s}");
    assert!(s.contains("+0.0 s"), "{s}");
    let last = s
        .split("moment 1/")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap();
    assert!(last > 2, "{s}");

    t.keys(&["End"]);
    let s = t.wait_for(&format!("moment {last}/{last}"));
    assert!(s.contains("GPU 0  free"), "the GPU free at the end:\n{s}");
    assert!(!s.contains(&pid), "the holder gone at the end:\n{s}");

    // Back, one moment at a time, to the last one the holder was in; on
    // the way, the kill's moment says what the kill did.
    let mut s = s;
    let mut kill_said = None;
    while !s.contains(&pid) || s.contains("kill by") {
        if s.contains("kill by") {
            kill_said = Some(s.clone());
        }
        let now = moment(&s);
        assert!(now > 1, "the holder never came back:\n{s}");
        t.keys(&["Left"]);
        s = t.wait_for(&format!("moment {}/{last}", now - 1));
    }
    assert!(!s.contains("GPU 0  free"), "{s}");
    let said = kill_said.expect("no moment said the kill");
    assert!(
        said.contains(&format!("SIGTERM to 1 process: {pid}")) && said.contains("→ released in"),
        "{said}"
    );

    // Played from the first moment at 64 times its pace: it stops at the
    // last moment, paused.
    t.keys(&["Home"]);
    t.wait_for(&format!("moment 1/{last}"));
    t.keys(&["+", "+", "+", "+", "+", "+", " "]);
    let s = t.wait_for(&format!("moment {last}/{last}  ×64  paused"));
    assert!(s.contains("GPU 0  free"), "{s}");
    t.keys(&["Left"]);
    t.wait_for(&format!("moment {}/{last}", last - 1));

    t.keys(&["k"]);
    let s = t.wait_for("nothing can be signalled");
    assert!(!s.contains("kill: plan"), "{s}");
    t.keys(&["r"]);
    t.wait_for("cannot be scanned again");
    t.keys(&["-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-"]);
    t.wait_for("×1/16");
    t.keys(&["q"]);
    let until = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&code).is_ok_and(|c| c.ends_with('\n')) {
        assert!(Instant::now() < until, "q did not quit:\n{}", t.screen());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(std::fs::read_to_string(&code).unwrap().trim(), "0");
}

#[test]
fn a_replay_of_a_file_that_is_no_recording_says_which_file() {
    let d = TestDir::new(1);
    let missing = d.tmp.path().join("missing.jsonl");
    let out = Gpufree::new(["watch", "--replay"]).arg(&missing).run();
    out.assert_exit(2);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains(missing.to_str().unwrap()) && out.stderr.contains("cannot be read"),
        "{}",
        out.stderr
    );
    let snapshot = d.tmp.path().join("status.json");
    std::fs::write(&snapshot, "{\"snapshot_version\": 1, \"gpus\": []}\n").unwrap();
    let out = Gpufree::new(["watch", "--replay"]).arg(&snapshot).run();
    out.assert_exit(2);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains(snapshot.to_str().unwrap()) && out.stderr.contains("not a recording"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_replay_refuses_a_flag_that_needs_the_live_host() {
    for flag in [
        &["--proc-root", "/proc"][..],
        &["--audit-log", "/tmp/kills.jsonl"],
        &["--scan", "procfs"],
    ] {
        let out = Gpufree::new(["watch", "--replay", "/nonexistent.jsonl"])
            .args(flag)
            .run();
        out.assert_exit(2);
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
        assert!(
            out.stderr.contains(flag[0]) && out.stderr.contains("watch --replay"),
            "{}",
            out.stderr
        );
    }
}
