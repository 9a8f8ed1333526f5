//! `gpufree bundle`: the archive of a seed-like scene (a renamed worker
//! holding a GPU with a secret in its command line and its environment,
//! a kill in the audit log) holds the status and why documents of one
//! collection, the versions and the manifest; no secret is anywhere in
//! its bytes unless asked; `why --from` re-diagnoses its status document;
//! a holder's unit file comes along (a link in the unit directory is not
//! followed); an existing `--out` or a link there is refused, a bad flag
//! is a one-line usage error.

use crate::harness::*;
use gpufree::demo::holder::{HoldSpec, Spawned};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The secret in the worker's command line.
const CMD_SECRET: &str = "SECRET123";
/// The secret in its environment (a variable gpufree reads: who restarts
/// it).
const ENV_SECRET: &str = "ENVSECRET456";
/// The secret in the killed process's command line (the audit record).
const AUDIT_SECRET: &str = "AUDITSECRET789";

/// The archive's members (name, bytes), and its whole tar stream
/// (decompressed): every byte a reader of the archive could see.
fn unpack(path: &Path) -> (Vec<(String, Vec<u8>)>, Vec<u8>) {
    let gz = std::fs::read(path).unwrap();
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(gz.as_slice())
        .read_to_end(&mut raw)
        .unwrap();
    let mut members = Vec::new();
    let mut a = tar::Archive::new(raw.as_slice());
    for e in a.entries().unwrap() {
        let mut e = e.unwrap();
        assert_eq!(e.header().mode().unwrap(), 0o600);
        let name = e.path().unwrap().display().to_string();
        let mut bytes = Vec::new();
        e.read_to_end(&mut bytes).unwrap();
        members.push((name, bytes));
    }
    (members, raw)
}

/// The member whose name ends with `/name`.
fn member<'a>(members: &'a [(String, Vec<u8>)], name: &str) -> &'a [u8] {
    let suffix = format!("/{name}");
    &members
        .iter()
        .find(|(n, _)| n.ends_with(&suffix))
        .unwrap_or_else(|| panic!("no {name} in {:?}", names(members)))
        .1
}

fn names(members: &[(String, Vec<u8>)]) -> Vec<&str> {
    members.iter().map(|(n, _)| n.as_str()).collect()
}

fn has(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The scene: a worker renamed `VLLM::Worker_TP` holding GPU 0 with
/// secrets in its argv and environment, and a process killed with an
/// audit log whose argv held another; returns the worker, the state and
/// the audit log.
fn scene(d: &TestDir) -> (Spawned, PathBuf, PathBuf) {
    let worker = hold(
        &[
            "python3",
            "-m",
            "vllm.entrypoints.openai.api_server",
            &format!("--api-key={CMD_SECRET}"),
        ],
        HoldSpec {
            label: "worker".into(),
            comm: Some("VLLM::Worker_TP".into()),
            mmap: vec![d.node("nvidia0"), d.node("nvidia-uvm")],
            env: [(
                "TORCHELASTIC_MAX_RESTARTS".to_string(),
                ENV_SECRET.to_string(),
            )]
            .into(),
            ..HoldSpec::default()
        },
    );
    let victim = hold(
        &["python3", "old.py", &format!("--token={AUDIT_SECRET}")],
        HoldSpec {
            fd: vec![d.node("nvidia0")],
            ..HoldSpec::default()
        },
    );
    let state = d.one_gpu(
        &[
            (worker.pid(), 20_000, "while-alive"),
            (victim.pid(), 1024, "while-alive"),
        ],
        0,
    );
    let audit = d.tmp.path().join("audit.jsonl");
    Gpufree::new(["kill"])
        .on(d, &state)
        .args(["--pid", &victim.pid().to_string(), "--yes", "--audit-log"])
        .arg(&audit)
        .env("GPUFREE_JOURNAL_SOCKET", "")
        .env("GPUFREE_SYSLOG_SOCKET", "")
        .run()
        .assert_exit(0);
    assert!(has(&std::fs::read(&audit).unwrap(), AUDIT_SECRET));
    (worker, state, audit)
}

#[test]
fn bundle_of_the_seed_scene_holds_no_secret_unless_asked() {
    let d = TestDir::new(1);
    let (worker, state, audit) = scene(&d);
    let out = d.tmp.path().join("b.tar.gz");
    let r = Gpufree::new(["bundle"])
        .arg("--audit-log")
        .arg(&audit)
        .arg("--out")
        .arg(&out)
        .on(&d, &state)
        .run();
    r.assert_exit(0);
    let (members, raw) = unpack(&out);
    for name in [
        "MANIFEST",
        "status.json",
        "why.json",
        "status.txt",
        "why.txt",
        "versions.txt",
        "proc-version.txt",
        "audit.jsonl",
    ] {
        member(&members, name);
    }
    for secret in [CMD_SECRET, ENV_SECRET, AUDIT_SECRET] {
        assert!(!has(&raw, secret), "{secret} in the archive");
        assert!(!r.stdout.contains(secret), "{secret} in the listing");
    }
    // The listing printed is the manifest, and names every member.
    let manifest = String::from_utf8(member(&members, "MANIFEST").to_vec()).unwrap();
    assert!(r.stdout.starts_with(&manifest), "{}", r.report());
    for (name, _) in &members {
        let short = name.split_once('/').unwrap().1;
        assert!(manifest.contains(short), "{short} not listed:\n{manifest}");
    }
    assert!(manifest.contains("command lines: left out"), "{manifest}");
    assert!(manifest.contains("environments: left out"), "{manifest}");
    let doc: serde_json::Value = serde_json::from_slice(member(&members, "status.json")).unwrap();
    let p = process(&doc, worker.pid()).expect("the worker is in the document");
    assert_eq!(p["comm"], "VLLM::Worker_TP");
    assert_eq!(p["cmdline"], serde_json::json!([]));
    assert_eq!(
        member(&members, "status.json"),
        member(&members, "why.json")
    );
    let versions = String::from_utf8_lossy(member(&members, "versions.txt")).into_owned();
    assert!(versions.contains("580.95.05"), "{versions}");
    assert!(versions.contains(env!("CARGO_PKG_VERSION")), "{versions}");
    // The audit record is there, without the command line.
    let record: serde_json::Value =
        serde_json::from_slice(member(&members, "audit.jsonl")).unwrap();
    assert_eq!(record["targets"][0]["cmdline"], serde_json::json!([]));

    // `why --from` of the bundled status document re-diagnoses it: the
    // bundled why's document, found holding.
    let doc_path = d.tmp.path().join("bundled-status.json");
    std::fs::write(&doc_path, member(&members, "status.json")).unwrap();
    let f = Gpufree::new(["why"])
        .json()
        .arg("--from")
        .arg(&doc_path)
        .run();
    f.assert_exit(1);
    let mut again = f.json();
    again.as_object_mut().unwrap().remove("from_file");
    assert_eq!(again, doc, "why --from differs from the bundled document");
    assert!(!findings_of(&again, "live-holders").is_empty(), "{again}");

    // Asked for, the command lines and the environment are kept.
    let kept = d.tmp.path().join("kept.tar.gz");
    Gpufree::new(["bundle", "--with-cmdlines", "--with-env"])
        .arg("--audit-log")
        .arg(&audit)
        .arg("--out")
        .arg(&kept)
        .on(&d, &state)
        .run()
        .assert_exit(0);
    let (_, raw) = unpack(&kept);
    for secret in [CMD_SECRET, ENV_SECRET, AUDIT_SECRET] {
        assert!(has(&raw, secret), "{secret} not kept");
    }
    drop(worker);
}

#[test]
fn bundle_refuses_an_existing_out_and_a_link_and_bad_flags() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let existing = d.tmp.path().join("there.tar.gz");
    std::fs::write(&existing, "mine").unwrap();
    let link = d.tmp.path().join("link.tar.gz");
    std::os::unix::fs::symlink(d.tmp.path().join("elsewhere"), &link).unwrap();
    for (out, word) in [(&existing, "already exists"), (&link, "is a symlink")] {
        let r = Gpufree::new(["bundle"])
            .arg("--out")
            .arg(out)
            .on(&d, &state)
            .run();
        r.assert_exit(2);
        assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.report());
        assert!(r.stderr.contains(word), "{}", r.report());
    }
    assert_eq!(std::fs::read(&existing).unwrap(), b"mine");
    assert!(!d.tmp.path().join("elsewhere").exists());
    let r = Gpufree::new(["bundle", "--no-such-flag"]).run();
    r.assert_exit(2);
    let r = Gpufree::new(["bundle"])
        .arg("--recording")
        .arg(d.tmp.path().join("none.jsonl"))
        .arg("--out")
        .arg(d.tmp.path().join("x.tar.gz"))
        .on(&d, &state)
        .run();
    r.assert_exit(2);
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.report());
    assert!(!d.tmp.path().join("x.tar.gz").exists());
    // `--from` is no source of a bundle.
    Gpufree::new(["bundle"])
        .arg("--from")
        .arg(&existing)
        .run()
        .assert_exit(2);
}

#[test]
fn bundle_default_name_is_in_the_current_directory() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let cwd = d.tmp.path().join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    let mut cmd = Gpufree::new(["bundle", "-q"]).on(&d, &state).command();
    cmd.current_dir(&cwd);
    let r = run_cmd(&mut cmd);
    r.assert_exit(0);
    assert!(r.stdout.is_empty(), "{}", r.report());
    let made: Vec<String> = std::fs::read_dir(&cwd)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    assert!(
        made[0].starts_with("bundle-") && made[0].ends_with("Z.tar.gz"),
        "{made:?}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(cwd.join(&made[0]))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn bundle_takes_the_unit_file_of_a_holders_unit_and_follows_no_link() {
    let d = TestDir::new(1);
    let fake = FakeProc::idle(d.tmp.path());
    std::fs::write(fake.root.join("version"), "Linux version 6.1.0-test\n").unwrap();
    let node = d.node("nvidia0");
    fake.add(&FakeProcess {
        pid: 4242,
        ppid: 1,
        comm: "VLLM::Worker",
        state: 'S',
        start: 100,
        cmdline: &["python3", "-m", "vllm", "--api-key=SECRET123"],
        exe: "/usr/bin/python3.12",
        uid: 0,
        cgroup: "0::/system.slice/vllm.service",
        fds: &[&node],
        maps: &[],
    });
    fake.add(&FakeProcess {
        pid: 4343,
        ppid: 1,
        comm: "other",
        state: 'S',
        start: 101,
        cmdline: &["other"],
        exe: "/usr/bin/other",
        uid: 0,
        cgroup: "0::/system.slice/linked.service",
        fds: &[&node],
        maps: &[],
    });
    let units = d.tmp.path().join("units");
    std::fs::create_dir_all(units.join("vllm.service.d")).unwrap();
    std::fs::write(
        units.join("vllm.service"),
        // As systemd-run writes a transient unit: its Description is the
        // command line; a credential; a comment inside a continuation.
        "[Unit]\nDescription=/usr/bin/python3 -m vllm --api-key=SECRET123\n\
         [Service]\nExecStart=/usr/bin/python3 -m vllm \\\n# the key below\n  --api-key=CONTSECRET\n\
         SetCredential=hf:CREDSECRET\n\
         Environment=HF_TOKEN=ENVSECRET456\nRestart=always\n",
    )
    .unwrap();
    std::fs::write(
        units.join("vllm.service.d/10-gpu.conf"),
        "[Service]\nRestartSec=5\n",
    )
    .unwrap();
    let secret = d.tmp.path().join("shadow");
    std::fs::write(&secret, "root:LINKSECRET\n").unwrap();
    std::os::unix::fs::symlink(&secret, units.join("linked.service")).unwrap();
    let out = d.tmp.path().join("u.tar.gz");
    let r = Gpufree::new(["bundle"])
        .arg("--out")
        .arg(&out)
        .proc_root(&fake.root)
        .dev(&d.dev)
        .no_nvml()
        .env("GPUFREE_UNIT_PATH", &units)
        .run();
    r.assert_exit(0);
    let (members, raw) = unpack(&out);
    let unit = String::from_utf8(member(&members, "units/vllm.service").to_vec()).unwrap();
    assert!(unit.contains("Restart=always"), "{unit}");
    assert!(unit.contains("ExecStart=(left out)"), "{unit}");
    member(&members, "vllm.service.d/10-gpu.conf");
    let doctor = String::from_utf8(member(&members, "doctor.txt").to_vec()).unwrap();
    assert!(doctor.contains("vllm.service"), "{doctor}");
    let kernel = member(&members, "proc-version.txt");
    assert_eq!(kernel, b"Linux version 6.1.0-test\n");
    assert!(unit.contains("Description=(left out)"), "{unit}");
    assert!(unit.contains("SetCredential=(left out)"), "{unit}");
    for secret in [
        "SECRET123",
        "ENVSECRET456",
        "LINKSECRET",
        "CONTSECRET",
        "CREDSECRET",
    ] {
        assert!(!has(&raw, secret), "{secret} in the archive");
    }
    assert!(
        r.stdout.contains("linked.service: a symlink to"),
        "{}",
        r.report()
    );
}

/// A setuid copy of gpufree, run by nobody, writes no file for its
/// caller and reads none the caller names: a bundle only to stdin's
/// shell-opened stdout (`--out -`), without `--recording` or
/// `--audit-log`; refused in the configuration step (test hooks, such
/// as the snapshot's copy, never run in secure mode, so what was not
/// collected cannot be seen here).
#[test]
fn a_setuid_copy_bundles_only_to_stdout() {
    use std::os::unix::fs::PermissionsExt;
    let Some(p) = crate::privilege::Privileged::new("setuid") else {
        return;
    };
    // Where nobody could write, were it not refused.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = dir.path().join("b.tar.gz");
    let file = out.to_str().unwrap();
    for args in [
        &["bundle"][..],
        &["bundle", "--out", file][..],
        &["bundle", "--out", "-", "--recording", "/etc/shadow"][..],
        &["bundle", "--out", "-", "--audit-log", "/etc/shadow"][..],
    ] {
        let r = p.run(args, &[]);
        r.assert_exit(2);
        assert!(r.stdout.is_empty(), "{}", r.report());
        assert!(r.stderr.contains("refused"), "{}", r.report());
    }
    assert!(!out.exists());
}

/// A recording's lines come along with their command lines emptied; a
/// line that is not JSON cannot be redacted and is left out, said. The
/// recording is a stand-in for `gpufree record`'s format: JSON lines with
/// command lines and environments at some depth.
#[test]
fn bundle_copies_a_recording_redacted_and_leaves_out_what_is_not_json() {
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

/// `--out -` with stdout a terminal is a usage error (exit 2) refused
/// before anything is collected: the snapshot the test hook copies, which
/// the same bundle to a file writes, is never taken.
#[test]
fn bundle_to_stdout_on_a_terminal_is_refused_before_anything_is_collected() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let copy = d.tmp.path().join("copy.json");
    Gpufree::new(["bundle"])
        .arg("--out")
        .arg(d.tmp.path().join("b.tar.gz"))
        .on(&d, &state)
        .env("GPUFREE_TEST_SNAPSHOT_COPY", &copy)
        .run()
        .assert_exit(0);
    assert!(copy.exists(), "the hook copies a bundle's snapshot");
    std::fs::remove_file(&copy).unwrap();
    // It ends at once: the pause lets the pane be kept before it does.
    let cmd = format!(
        "sleep 1; env GPUFREE_TEST_SNAPSHOT_COPY={} GPUFREE_SIM_STATE={} {} bundle --out - --dev-dir {} --nvml-lib {}",
        copy.display(),
        state.display(),
        bin().display(),
        d.dev.display(),
        sim_lib().display()
    );
    let Some(t) = Tmux::start("bundle-tty", &cmd) else {
        return;
    };
    assert_eq!(t.wait_exit(), "2", "{}", t.screen());
    // Its whole output, the lines scrolled off the pane's top too.
    let all = t.cmd(&["capture-pane", "-p", "-S", "-"]).stdout;
    let all = String::from_utf8_lossy(&all);
    assert!(all.contains("stdout is a terminal"), "{all}");
    assert!(!copy.exists(), "nothing was collected");
}

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
    assert!(has(copy, "VLLM::Worker_TP"));
    let (_, raw) = bundle("k.tar.gz", &["--with-cmdlines", "--with-env"]);
    for secret in [CMD_SECRET, AUDIT_SECRET, REC_SECRET] {
        assert!(has(&raw, secret), "{secret} not kept");
    }
    drop(worker);
}
