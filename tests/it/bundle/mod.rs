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

mod recording;
mod refusals;

/// Where there is no GPU to collect (no NVIDIA library, no device node:
/// the host whose driver is the trouble, or an analyst's machine), the
/// archive still holds the recording the caller named, the listing says
/// the collection is left out and why, and it exits 3 (newuser38 5).
#[test]
fn without_a_gpu_the_bundle_holds_what_was_named_and_exits_3() {
    if crate::harness::nvidia_library_here() {
        return;
    }
    let empty = tempfile::tempdir().unwrap();
    let rec = empty.path().join("timeline.jsonl");
    std::fs::write(&rec, "{\"record\":1,\"t\":1000,\"end\":\"stopped\"}\n").unwrap();
    let out = empty.path().join("b.tar.gz");
    let r = Gpufree::new(["bundle"])
        .no_gpu_at(empty.path())
        .arg("--recording")
        .arg(&rec)
        .arg("--out")
        .arg(&out)
        .run();
    r.assert_exit(3);
    assert!(
        r.stdout.contains("the collection (status, why"),
        "{}",
        r.report()
    );
    assert!(r.stdout.contains("no NVIDIA library"), "{}", r.report());
    let (members, _) = unpack(&out);
    assert!(has(member(&members, "recording.jsonl"), "stopped"));
    assert!(names(&members).iter().all(|n| !n.ends_with("status.json")));
}
