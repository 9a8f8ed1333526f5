//! A real recording in a bundle: `gpufree record`'s timeline and `kill
//! --audit-log`'s records copied with no command line of theirs, and the
//! copy still a recording that replays.

use super::{has, member, scene, unpack, AUDIT_SECRET, CMD_SECRET, ENV_SECRET};
use crate::harness::*;
use gpufree::demo::holder::HoldSpec;
use std::path::Path;

/// A secret on a command line that only `gpufree record` and `kill
/// --audit-log` saw (a holder appearing during the recording, then
/// killed).
const REC_SECRET: &str = "RECORDSECRET246";

/// Waits (10 s at most) until the file at `path` has a line with `needle`.
fn wait_for(path: &Path, needle: &str) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read(path).is_ok_and(|b| has(&b, needle)) {
        assert!(std::time::Instant::now() < until, "no {needle} in {path:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A real recording (`gpufree record`: full snapshots whose findings'
/// details quote command lines, changes whose patches set them, a kill's
/// record) and a real `kill --audit-log`: no command line of theirs is in
/// the archive, free text included; with `--with-cmdlines` they are.
#[test]
fn bundle_of_a_real_recording_and_audit_log_holds_no_command_line() {
    let d = TestDir::new(1);
    let (worker, state, audit) = scene(&d);
    let rec_path = d.tmp.path().join("timeline.jsonl");
    let rec = Gpufree::new(["record"])
        .on(&d, &state)
        .args(["--out", rec_path.to_str().unwrap(), "--interval", "100ms"])
        .args(["--audit-log", audit.to_str().unwrap(), "--scan", "procfs"])
        .args(["--scan-every", "1s"])
        .spawn();
    wait_for(&rec_path, "\"full\"");
    let late = hold(
        &["python3", "eval.py", &format!("--token={REC_SECRET}")],
        HoldSpec {
            fd: vec![d.node("nvidia0")],
            ..HoldSpec::default()
        },
    );
    wait_for(&rec_path, REC_SECRET);
    Gpufree::new(["kill"])
        .on(&d, &state)
        .args(["--pid", &late.pid().to_string(), "--yes", "--audit-log"])
        .arg(&audit)
        .env("GPUFREE_JOURNAL_SOCKET", "")
        .env("GPUFREE_SYSLOG_SOCKET", "")
        .run()
        .assert_exit(0);
    wait_for(&rec_path, "\"kill\"");
    let pid = rustix::process::Pid::from_raw(rec.child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    rec.finish();
    // And a status --json document as a line (attack 31's recording):
    // its findings' details quote the worker's command line.
    let status = Gpufree::new(["status"]).json().on(&d, &state).run();
    let line = format!("{}\n", status.json());
    assert!(
        line.contains("\"details\"") && line.contains(CMD_SECRET),
        "{line}"
    );
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&rec_path)
        .unwrap();
    std::io::Write::write_all(&mut f, line.as_bytes()).unwrap();
    let recorded = std::fs::read(&rec_path).unwrap();
    assert!(has(&recorded, CMD_SECRET) && has(&recorded, REC_SECRET));
    let bundle = |name: &str, flags: &[&str]| {
        let out = d.tmp.path().join(name);
        Gpufree::new(["bundle"])
            .args(flags)
            .arg("--recording")
            .arg(&rec_path)
            .arg("--audit-log")
            .arg(&audit)
            .arg("--out")
            .arg(&out)
            .on(&d, &state)
            .run()
            .assert_exit(0);
        unpack(&out)
    };
    let (members, raw) = bundle("r.tar.gz", &[]);
    for secret in [CMD_SECRET, ENV_SECRET, AUDIT_SECRET, REC_SECRET] {
        assert!(!has(&raw, secret), "{secret} in the archive");
    }
    // What explains the incident stays: the holders' PIDs and names, the
    // kill's record.
    let copy = member(&members, "recording.jsonl");
    assert!(has(copy, "\"kill\"") && has(copy, &late.pid().to_string()));
    // The kill's times come along: when it began and when it ended.
    let kill = String::from_utf8_lossy(copy)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|l| l.get("kill").is_some())
        .unwrap();
    for time in ["started", "time"] {
        let t = kill["kill"][time].as_str().unwrap_or_default();
        assert!(gpufree::model::rfc3339_ms(t).is_some(), "{time}: {kill}");
    }
    assert!(has(copy, "VLLM::Worker_TP"));
    // And it is still a recording: the moment the late holder appeared
    // shows it (its command line left out), the end shows it killed.
    let copied = d.tmp.path().join("copied.jsonl");
    std::fs::write(&copied, copy).unwrap();
    let appeared = appeared_at(copy, late.pid());
    let at = |at: Option<String>| {
        let mut cmd = Gpufree::new(["status"]).json().arg("--from").arg(&copied);
        if let Some(at) = at {
            cmd = cmd.args(["--at", &at]);
        }
        let r = cmd.run();
        r.assert_exit(0);
        r.json()
    };
    let then = at(Some(format!("{}.{:03}", appeared / 1000, appeared % 1000)));
    let late_then = then["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == late.pid())
        .unwrap_or_else(|| panic!("no late holder in {then}"));
    assert_eq!(late_then["cmdline"], serde_json::json!([]));
    let end = at(None);
    assert!(end["processes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["pid"] != late.pid()));
    let (_, raw) = bundle("k.tar.gz", &["--with-cmdlines", "--with-env"]);
    for secret in [CMD_SECRET, AUDIT_SECRET, REC_SECRET] {
        assert!(has(&raw, secret), "{secret} not kept");
    }
    drop(worker);
}

/// A `--recording` that is no recording of gpufree's (JSON lines with
/// command lines and environments at some depth) comes along by the
/// allowlist, its command lines emptied; a line that is not JSON cannot be
/// redacted and is left out, said.
#[test]
fn bundle_copies_a_file_that_is_no_recording_by_the_allowlist() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let rec = d.tmp.path().join("rec.jsonl");
    std::fs::write(
        &rec,
        "{\"t\":1,\"snapshot\":{\"processes\":[{\"pid\":7,\"cmdline\":[\"x\",\"--key=RECSECRET\"]}]}}\n\
         python3 --key=RECSECRET2\n\
         {\"t\":2,\"holder_appeared\":{\"pid\":8,\"environment\":{\"K\":\"RECSECRET3\"}}}\n",
    )
    .unwrap();
    let out = d.tmp.path().join("r.tar.gz");
    let r = Gpufree::new(["bundle"])
        .arg("--recording")
        .arg(&rec)
        .arg("--out")
        .arg(&out)
        .on(&d, &state)
        .run();
    r.assert_exit(0);
    let (members, raw) = unpack(&out);
    assert!(!has(&raw, "RECSECRET"), "a secret of the recording");
    let copy = String::from_utf8(member(&members, "recording.jsonl").to_vec()).unwrap();
    let lines: Vec<serde_json::Value> = copy
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{copy}");
    assert_eq!(lines[0]["snapshot"]["processes"][0]["pid"], 7);
    assert!(
        r.stdout.contains("1 line(s) that are not JSON"),
        "{}",
        r.report()
    );
}

/// When the recording `copy` says the holder `pid` appeared (ms).
fn appeared_at(copy: &[u8], pid: u32) -> u64 {
    let text = String::from_utf8_lossy(copy);
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|l| {
            l["change"]["events"].as_array().is_some_and(|e| {
                e.iter()
                    .any(|e| e["event"] == "holder-appeared" && e["pid"] == pid)
            })
        })
        .and_then(|l| l["t"].as_u64())
        .expect("the late holder appeared in the copy")
}
