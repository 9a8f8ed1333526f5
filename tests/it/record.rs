//! `gpufree record` and `--from RECORDING --at TIME`: a host recorded
//! while a holder appears, its memory grows, `gpufree kill` ends it (its
//! audit record read into the timeline) and the memory comes back; the
//! state read back at a moment of the stuck stretch is the live `why`
//! taken then, and after the release it is free. Rotation by size, and
//! the files refused: a symlink, a directory another user owns.

use crate::harness::{hold, Gpufree, TestDir};
use gpufree::demo::holder::HoldSpec;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// The lines of the recording at `path` (none yet: empty).
pub(crate) fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Waits (10 s at most) until a line of `path` satisfies `want`; its index.
pub(crate) fn wait_line(path: &Path, what: &str, want: impl Fn(&Value) -> bool) -> usize {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(i) = lines(path).iter().position(&want) {
            return i;
        }
        assert!(
            Instant::now() < until,
            "no {what} in\n{}",
            std::fs::read_to_string(path).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether `line` is a change with an event of `kind` that `also` accepts.
pub(crate) fn has_event(line: &Value, kind: &str, also: impl Fn(&Value) -> bool) -> bool {
    line["change"]["events"]
        .as_array()
        .is_some_and(|es| es.iter().any(|e| e["event"] == kind && also(e)))
}

/// Ends the recorder with SIGTERM (it is our child); its output.
pub(crate) fn stop(rec: crate::cmd::Running) -> crate::cmd::Output {
    let pid = rustix::process::Pid::from_raw(rec.child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    rec.finish()
}

/// `doc` without what differs between two looks at the same state: the
/// marker of a file, the time and clock, the start of the driver's
/// utilisation window, how many processes the scan read (the recorder
/// writes no record for those alone).
fn comparable(mut doc: Value) -> Value {
    for k in ["from_file", "taken_unix_ms", "uptime_ticks"] {
        doc.as_object_mut().map(|o| o.remove(k));
    }
    doc["visibility"]
        .as_object_mut()
        .map(|o| o.remove("processes_scanned"));
    for g in doc["gpus"].as_array_mut().into_iter().flatten() {
        g["driver_evidence"]["utilization_window"]
            .as_object_mut()
            .map(|o| o.remove("since_unix_us"));
    }
    doc
}

#[test]
fn a_recorded_kill_replays_from_the_stuck_state_through_the_kill_to_the_release() {
    let d = TestDir::new(1);
    let holder = |argv: &[&str]| {
        hold(
            argv,
            HoldSpec {
                fd: vec![d.node("nvidia0")],
                ..HoldSpec::default()
            },
        )
    };
    // NVML's listing is read once per session (the simulator's state at
    // its init): the trainer holds 1 GiB from the start; the second
    // holder appears during the recording.
    let trainer = holder(&["python3", "train.py"]);
    let state = d.one_gpu(&[(trainer.pid(), 1024, "while-alive")], 0);
    let rec_path = d.tmp.path().join("timeline.jsonl");
    let log = d.tmp.path().join("kills.jsonl");
    let rec = Gpufree::new(["record"])
        .on(&d, &state)
        .args(["--out", rec_path.to_str().unwrap(), "--interval", "100ms"])
        .args(["--audit-log", log.to_str().unwrap(), "--scan", "procfs"])
        .args(["--scan-every", "1s"])
        .spawn();
    wait_line(&rec_path, "full snapshot", |l| l.get("full").is_some());
    let late = holder(&["python3", "eval.py"]);
    let appeared = wait_line(&rec_path, "holder-appeared", |l| {
        has_event(l, "holder-appeared", |e| e["pid"] == late.pid())
    });
    // The stuck state, live: what the recording must give back at this
    // moment (a look later, with nothing changed between).
    std::thread::sleep(Duration::from_millis(300));
    // The same walk as the recorder's (a one-shot command picks by the
    // host's open files).
    let live = Gpufree::new(["why"])
        .json()
        .on(&d, &state)
        .args(["--scan", "procfs"])
        .run();
    live.assert_exit(1);
    let live_doc = live.json();
    let stuck_ms = live_doc["taken_unix_ms"].as_u64().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let (a, b) = (trainer.pid().to_string(), late.pid().to_string());
    let killed = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args([
            "--pid",
            &a,
            "--pid",
            &b,
            "--yes",
            "--audit-log",
            log.to_str().unwrap(),
        ])
        .run();
    killed.assert_exit(0);
    let kill = wait_line(&rec_path, "kill", |l| l.get("kill").is_some());
    let released = wait_line(&rec_path, "the memory released", |l| {
        has_event(l, "gpu-memory", |e| e["used_bytes"] == 0)
    });
    let free = wait_line(&rec_path, "free", |l| {
        has_event(l, "verdict", |e| e["state"] == "free")
    });
    let out = stop(rec);
    out.assert_exit(0);
    let all = lines(&rec_path);
    assert_eq!(all.last().unwrap()["end"], "stopped", "{}", out.report());
    assert!(all.iter().all(|l| l["record"] == 1 && l["t"].is_u64()));
    assert!(all[0].get("full").is_some());
    // The holder appeared, then the memory came back and the GPU was
    // free; the kill's record is written when the kill ends (after the
    // release it waited for), and is in the timeline at that time.
    assert!(
        appeared < released && released <= free && appeared < kill,
        "{appeared} {released} {free} {kill}"
    );
    let left = |pid: u32| {
        all.iter()
            .position(|l| has_event(l, "holder-left", |e| e["pid"] == pid))
    };
    assert!(left(trainer.pid()).is_some_and(|i| i > appeared && i <= free));
    assert!(has_event(&all[released], "process-memory", |e| e["pid"]
        == trainer.pid()
        && e["used_bytes"] == 0));
    assert_eq!(all[kill]["kill"]["command"], "kill");
    assert_eq!(all[kill]["kill"]["outcome"]["result"], "released");
    let times: Vec<u64> = all.iter().map(|l| l["t"].as_u64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");

    // At the stuck moment: the live why, but for the file's marker and clock.
    let at = format!("{}.{:03}", stuck_ms / 1000, stuck_ms % 1000);
    let then = Gpufree::new(["why"])
        .json()
        .arg("--from")
        .arg(&rec_path)
        .args(["--at", &at])
        .run();
    then.assert_exit(1);
    let then_doc = then.json();
    assert_eq!(then_doc["from_file"]["taken_unix_ms"], stuck_ms);
    assert_eq!(comparable(then_doc), comparable(live_doc));
    // After the release (its end): free.
    let end = Gpufree::new(["why"])
        .json()
        .arg("--from")
        .arg(&rec_path)
        .run();
    end.assert_exit(0);
    assert_eq!(end.json()["verdict"]["state"], "free");
    let text = Gpufree::new(["status"])
        .arg("--from")
        .arg(&rec_path)
        .args(["--at", "-0s"])
        .run();
    text.assert_exit(0);
}

#[test]
fn a_recording_past_its_size_goes_on_in_a_new_file_keeping_n() {
    let d = TestDir::new(1);
    let h = hold(
        &["python3", "serve.py"],
        HoldSpec {
            fd: vec![d.node("nvidia0")],
            ..HoldSpec::default()
        },
    );
    let state = d.one_gpu(&[(h.pid(), 1024, "while-alive")], 0);
    let rec_path = d.tmp.path().join("timeline.jsonl");
    let rec = Gpufree::new(["record"])
        .on(&d, &state)
        .args(["--out", rec_path.to_str().unwrap(), "--interval", "100ms"])
        .args(["--full-every", "1s", "--max-size", "1KiB", "--keep", "2"])
        .spawn();
    let numbered = |n: u32| d.tmp.path().join(format!("timeline.jsonl.{n}"));
    let until = Instant::now() + Duration::from_secs(15);
    while !numbered(2).exists() {
        assert!(Instant::now() < until, "no second rotation");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(1500));
    stop(rec).assert_exit(0);
    assert!(!numbered(3).exists(), "kept more than 2");
    for p in [rec_path.clone(), numbered(1), numbered(2)] {
        let ls = lines(&p);
        assert!(ls[0].get("full").is_some(), "{}: {:?}", p.display(), ls[0]);
        let why = Gpufree::new(["why"]).json().arg("--from").arg(&p).run();
        why.assert_exit(1);
    }
    assert_eq!(lines(&numbered(1)).last().unwrap()["end"], "rotated");
}

#[test]
fn a_symlink_or_another_users_directory_is_refused_in_one_line() {
    use std::os::unix::fs::PermissionsExt;
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let real = d.tmp.path().join("real.jsonl");
    std::fs::write(&real, "keep\n").unwrap();
    let link = d.tmp.path().join("link.jsonl");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let r = Gpufree::new(["record"])
        .on(&d, &state)
        .arg("--out")
        .arg(&link)
        .run();
    r.assert_exit(2);
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("symlink"), "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&real).unwrap(), "keep\n");
    // A directory others may write, not sticky.
    let open = d.tmp.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let r = Gpufree::new(["record"])
        .on(&d, &state)
        .arg("--out")
        .arg(open.join("t.jsonl"))
        .run();
    r.assert_exit(2);
    assert!(r.stderr.contains("directory"), "{}", r.stderr);
    assert!(!open.join("t.jsonl").exists());
    if rustix::process::geteuid().is_root() {
        let theirs = d.tmp.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let r = Gpufree::new(["record"])
            .on(&d, &state)
            .arg("--out")
            .arg(theirs.join("t.jsonl"))
            .run();
        r.assert_exit(2);
        assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
        assert!(r.stderr.contains("another user's"), "{}", r.stderr);
        assert!(!theirs.join("t.jsonl").exists());
    }
}

#[test]
fn a_bad_at_or_an_at_without_a_recording_is_a_usage_error() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let snap = d.tmp.path().join("snap.json");
    let s = Gpufree::new(["status"]).json().on(&d, &state).run();
    std::fs::write(&snap, &s.stdout).unwrap();
    let r = Gpufree::new(["why"])
        .arg("--from")
        .arg(&snap)
        .args(["--at", "yesterday"])
        .run();
    r.assert_exit(2);
    assert!(r.stderr.contains("not a time"), "{}", r.stderr);
    let r = Gpufree::new(["why"])
        .arg("--from")
        .arg(&snap)
        .args(["--at", "-5m"])
        .run();
    r.assert_exit(2);
    assert!(r.stderr.contains("only a recording"), "{}", r.stderr);
    let r = Gpufree::new(["why"]).args(["--at", "-5m"]).run();
    r.assert_exit(2);
    // A recording with a line that is no record in the middle: the file
    // and the line said in one line, not the state before it shown.
    let full = serde_json::json!({"record": 1, "t": 1000, "full": s.json()});
    let end = serde_json::json!({"record": 1, "t": 3000, "end": "stopped"});
    let rec = d.tmp.path().join("bad.jsonl");
    std::fs::write(&rec, format!("{full}\ngarbage\n{end}\n")).unwrap();
    let r = Gpufree::new(["why"]).arg("--from").arg(&rec).run();
    r.assert_exit(2);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.report());
    assert!(
        r.stderr
            .contains(&format!("--from {}: line 2 is no record", rec.display())),
        "{}",
        r.report()
    );
}
