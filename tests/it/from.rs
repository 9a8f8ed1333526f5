//! `--from FILE`: `why`, `status` and `check` read a snapshot document
//! back and print what the live command printed from that collection.
//! Each host of the suite's shapes (tests/it/shapes.rs) and the
//! hostile-names corpus (tests/it/evil.rs) runs the live command once,
//! with the test hook `GPUFREE_TEST_SNAPSHOT_COPY` writing the snapshot
//! document of that same collection; `--from` of that copy must print
//! the same document (findings, verdict and next commands included),
//! the same text and the same exit code, marked as from the file; so must
//! a host with the driver's evidence (failed readings, an Xid, an
//! unreadable log) and one with MIG devices. Bad files, refused commands
//! and flags, stdin and a setuid copy's stdin-only rule are tested too.

use crate::harness::{sim_gpu, sim_state, Gpufree, Output, TestDir};
use serde_json::Value;
use std::path::Path;

/// The hook's variable.
const COPY: &str = "GPUFREE_TEST_SNAPSHOT_COPY";

/// `live` run with the hook writing its snapshot's document to `copy`.
fn live_with_copy(live: Gpufree, copy: &Path) -> Output {
    let out = live.env(COPY, copy).run();
    assert!(copy.exists(), "no copy written\n{}", out.report());
    out
}

/// `gpufree WORDS --from FILE` (nothing of the host named).
fn from(words: &[&str], file: &Path) -> Output {
    Gpufree::new(words).arg("--from").arg(file).run()
}

/// `gpufree WORDS --from -` with `stdin`.
fn from_stdin(words: &[&str], stdin: &Path) -> Output {
    let mut cmd = Gpufree::new(words).args(["--from", "-"]).command();
    cmd.stdin(std::fs::File::open(stdin).unwrap());
    let out = cmd.output().unwrap();
    Output::ended(&cmd, out)
}

/// `doc` without its `from_file` marker.
fn unmarked(mut doc: Value) -> Value {
    doc.as_object_mut().map(|o| o.remove("from_file"));
    doc
}

/// The live JSON of `words` and of `--from` its copy are one document but
/// the marker, the exit codes the same; the marker names the file, the
/// time and the host.
fn same_json(what: &str, live: Gpufree, words: &[&str], copy: &Path) {
    let (l, f) = live_and_from(what, live, words, copy);
    let (ld, fd) = (l.json(), f.json());
    let marker = &fd["from_file"];
    assert_eq!(marker["path"], copy.to_str().unwrap(), "{what}: {marker}");
    assert_eq!(marker["taken_unix_ms"], ld["taken_unix_ms"], "{what}");
    assert_eq!(marker["host"], ld["host"], "{what}");
    assert!(
        ld["taken_unix_ms"].as_u64().is_some_and(|t| t > 0),
        "{what}"
    );
    assert!(
        f.stderr.contains("nothing here is live"),
        "{what}: {}",
        f.stderr
    );
    for key in ["findings", "verdict", "gpus", "processes"] {
        assert_eq!(fd[key], ld[key], "{what}: {key} differ");
    }
    assert_eq!(unmarked(fd), ld, "{what}: the documents differ");
}

/// The live text of `words` and `--from` its copy are the same.
fn same_text(what: &str, live: Gpufree, words: &[&str], copy: &Path) {
    let (l, f) = live_and_from(what, live, words, copy);
    assert_eq!(f.stdout, l.stdout, "{what}: the text differs");
}

/// `live` run (writing its snapshot to `copy`) and `words --from copy`,
/// their exit codes the same.
fn live_and_from(what: &str, live: Gpufree, words: &[&str], copy: &Path) -> (Output, Output) {
    let l = live_with_copy(live, copy);
    let f = from(words, copy);
    assert_eq!(
        f.code,
        l.code,
        "{what}: exit codes\n{}\n{}",
        l.report(),
        f.report()
    );
    (l, f)
}

#[test]
fn why_from_the_snapshot_of_every_shape_is_the_live_why() {
    for (name, shape) in crate::shapes::rows() {
        let (d, _tree, state, _) = crate::shapes::host(&shape);
        let copy = d.tmp.path().join("snapshot.json");
        let on = |words: &[&str]| Gpufree::new(words).on(&d, &state);
        same_json(name, on(&["why"]).json(), &["why", "--json"], &copy);
        same_json(name, on(&["status"]).json(), &["status", "--json"], &copy);
        same_text(name, on(&["why"]), &["why"], &copy);
        // The comparison tells: without the holders' ancestors the
        // launcher is not named.
        if name.starts_with("vllm_api") {
            let mut doc: Value = serde_json::from_slice(&std::fs::read(&copy).unwrap()).unwrap();
            doc.as_object_mut().unwrap().remove("parents");
            let bare = d.tmp.path().join("bare.json");
            std::fs::write(&bare, doc.to_string()).unwrap();
            let f = from(&["why", "--json"], &bare).json();
            assert_ne!(
                f["findings"], doc["findings"],
                "{name}: parents change nothing"
            );
        }
        // --gpu selects among the document's GPUs as among the host's:
        // the whole snapshot narrowed from the file judges as a live
        // `--gpu 0` of this unchanging host.
        let whole = d.tmp.path().join("whole.json");
        std::fs::copy(&copy, &whole).unwrap();
        let narrowed = from(&["why", "--json", "--gpu", "0"], &whole);
        let live = on(&["why", "--gpu", "0"]).json().run();
        assert_eq!(narrowed.code, live.code, "{name}: {}", narrowed.report());
        let (n, l) = (narrowed.json(), live.json());
        // (Two collections: only what they judged is compared, not when.)
        for key in ["findings", "verdict"] {
            assert_eq!(
                n[key], l[key],
                "{name}: --gpu 0 from the file: {key} differ"
            );
        }
        // A copy of a narrowed why's document.
        let gpu0 = on(&["why", "--gpu", "0"]).json();
        same_json(name, gpu0, &["why", "--json"], &copy);
    }
}

#[test]
fn why_from_the_hostile_names_snapshot_is_the_live_why() {
    let s = crate::evil::scene();
    let copy = s.d.tmp.path().join("snapshot.json");
    same_json("why", s.gpufree(&["why"]).json(), &["why", "--json"], &copy);
    same_text("why", s.gpufree(&["why"]), &["why"], &copy);
    same_text("status", s.gpufree(&["status"]), &["status"], &copy);
    let pattern = ["why", "--pattern", "it's \"q"];
    same_json(
        "pattern",
        s.gpufree(&pattern).json(),
        &[&pattern[..], &["--json"]].concat(),
        &copy,
    );
    same_text("pattern", s.gpufree(&pattern), &pattern, &copy);
    // The marker escapes what it names.
    let f = from(&["why"], &copy);
    crate::evil::assert_inert("why --from stderr", &f.stderr_bytes);
}

#[test]
fn check_from_a_snapshot_exits_as_the_live_check() {
    let d = TestDir::new(2);
    let holder = d.mapper("nvidia0");
    // One GPU held, one leaking memory no process holds.
    let state = d.state(&sim_state(vec![
        sim_gpu(0, &[(holder.pid(), 1024, "while-alive")], 0),
        sim_gpu(1, &[(999_999, 4096, "always")], 0),
    ]));
    let copy = d.tmp.path().join("snapshot.json");
    for format in ["text", "json", "npd", "nagios", "slurm"] {
        // A fresh state: a first check, as one from a file is.
        let st = d.tmp.path().join(format!("state-{format}.json"));
        let words = ["check", "--format", format, "--grace", "0"];
        let live = Gpufree::new(words).on(&d, &state).arg("--state").arg(&st);
        same_text(format, live, &words, &copy);
    }
    let f = from(&["check"], &copy);
    assert!(f.stderr.contains("nothing here is live"), "{}", f.report());
}

#[test]
fn kill_and_the_live_commands_refuse_a_snapshot_from_a_file() {
    let d = TestDir::new(1);
    let holder = d.mapper("nvidia0");
    let state = d.one_gpu(&[(holder.pid(), 1024, "while-alive")], 0);
    let copy = d.tmp.path().join("snapshot.json");
    live_with_copy(Gpufree::new(["status"]).on(&d, &state), &copy);
    for words in [
        &["kill", "--pid", "1", "--yes"][..],
        &["kill", "--gpu", "0", "--dry-run"],
        &["wait", "--timeout", "0"],
        &["metrics"],
    ] {
        let out = from(words, &copy);
        out.assert_exit(2);
        assert!(out.stdout.is_empty(), "{}", out.report());
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.report());
        assert!(out.stderr.contains("--from"), "{}", out.report());
    }
    let kill = from(&["kill", "--gpu", "0", "--yes"], &copy);
    assert!(kill.stderr.contains("pins no process"), "{}", kill.report());
    assert!(
        crate::harness::alive(holder.pid()),
        "a kill from a file signalled"
    );
    // Flags that steer a live collection.
    for flag in [
        &["--scan", "procfs"][..],
        &["--dev-dir", "/dev"],
        &["--nvml-lib", "/nonexistent.so"],
        &["--proc-root", "/proc"],
        &["--idle-window", "1s"],
        &["--read-timeout", "1s"],
    ] {
        let out = Gpufree::new(["why"])
            .args(flag)
            .arg("--from")
            .arg(&copy)
            .run();
        out.assert_exit(2);
        assert!(out.stderr.contains(flag[0]), "{}", out.report());
    }
    let out = from(&["check", "--state", "/tmp/x"], &copy);
    out.assert_exit(2);
}

#[test]
fn a_bad_snapshot_file_is_one_line_naming_it_and_exit_2() {
    let d = TestDir::new(1);
    let dir = d.tmp.path();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let cases = [
        (dir.join("missing.json"), "cannot be read"),
        (dir.to_path_buf(), "not a regular file"),
        (write("text.json", "not json at all"), "not JSON"),
        (write("array.json", "[1, 2]"), "not a snapshot document"),
        (
            write("other.json", r#"{"level": "ok"}"#),
            "not a snapshot document",
        ),
        (
            write("kill.json", r#"{"kill": {}, "gpus": []}"#),
            "`kill --json`'s document",
        ),
        (
            write("newer.json", r#"{"snapshot_version": 99}"#),
            "newer gpufree",
        ),
        (write("empty.json", ""), "not JSON"),
    ];
    for (path, says) in cases {
        for words in [&["why"][..], &["status", "--json"], &["check"]] {
            let out = from(words, &path);
            out.assert_exit(2);
            assert!(out.stdout.is_empty(), "{}", out.report());
            assert_eq!(out.stderr.lines().count(), 1, "{}", out.report());
            assert!(out.stderr.contains(says), "{says}\n{}", out.report());
            assert!(
                out.stderr.contains(path.to_str().unwrap()),
                "{}",
                out.report()
            );
            assert!(!out.stderr.contains("panicked"), "{}", out.report());
        }
    }
    #[cfg(target_os = "linux")]
    {
        // A FIFO is refused, never waited on; /dev/zero is no regular file.
        let fifo = dir.join("fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        for p in [fifo.as_path(), Path::new("/dev/zero")] {
            let out = from(&["why"], p);
            out.assert_exit(2);
            assert!(
                out.stderr.contains("not a regular file"),
                "{}",
                out.report()
            );
        }
    }
}

#[test]
fn a_snapshot_on_stdin_is_read_and_bounded() {
    let d = TestDir::new(1);
    let holder = d.mapper("nvidia0");
    let state = d.one_gpu(&[(holder.pid(), 1024, "while-alive")], 0);
    let copy = d.tmp.path().join("snapshot.json");
    let live = live_with_copy(Gpufree::new(["why"]).on(&d, &state).json(), &copy);
    let f = from_stdin(&["why", "--json"], &copy);
    assert_eq!(f.code, live.code, "{}", f.report());
    let doc = f.json();
    assert_eq!(doc["from_file"]["path"], "-");
    assert_eq!(unmarked(doc), live.json());
    // More than the bound on stdin: refused, not read to the end.
    let f = from_stdin(&["why"], Path::new("/dev/zero"));
    f.assert_exit(2);
    assert!(f.stderr.contains("larger than 256 MiB"), "{}", f.report());
}

/// A setuid copy of gpufree, run by nobody, reads no file its caller
/// names (root's secret, or even the caller's own): only stdin, which the
/// caller opened with its own rights.
#[test]
fn a_setuid_copy_reads_only_stdin_from_its_caller() {
    use std::os::unix::fs::PermissionsExt;
    if !rustix::process::geteuid().is_root() {
        crate::harness::skip_off_ci("root", &"to make a setuid copy of gpufree");
        return;
    }
    let d = TestDir::new(1);
    let holder = d.mapper("nvidia0");
    let state = d.one_gpu(&[(holder.pid(), 1024, "while-alive")], 0);
    let copy = d.tmp.path().join("snapshot.json");
    let live = live_with_copy(Gpufree::new(["why"]).on(&d, &state), &copy);
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.path().join("gpufree");
    std::fs::copy(crate::harness::bin(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o4755)).unwrap();
    // Root's own file, and one nobody may read.
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o600)).unwrap();
    let readable = dir.path().join("readable.json");
    std::fs::copy(&copy, &readable).unwrap();
    std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(0o644)).unwrap();
    let as_nobody = |file: &str, stdin: Option<&Path>| {
        let mut cmd = std::process::Command::new("setpriv");
        cmd.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
            .arg(&exe)
            .args(["why", "--from", file])
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        match stdin {
            Some(p) => cmd.stdin(std::fs::File::open(p).unwrap()),
            None => cmd.stdin(std::process::Stdio::null()),
        };
        let out = cmd.output().unwrap();
        Output::ended(&cmd, out)
    };
    for file in [&copy, &readable] {
        let out = as_nobody(file.to_str().unwrap(), None);
        out.assert_exit(2);
        assert!(out.stdout.is_empty(), "{}", out.report());
        assert!(out.stderr.contains("--from - < FILE"), "{}", out.report());
    }
    let out = as_nobody("-", Some(&readable));
    assert_eq!(out.code, live.code, "{}", out.report());
    assert_eq!(out.stdout, live.stdout, "{}", out.report());
}

/// The driver's evidence reads back as it was read: a recovery action, a
/// failed reading (its cause, not only its words), the kernel log's Xid
/// naming a holder, and a log that could not be read.
#[test]
fn why_from_a_snapshot_with_the_drivers_evidence_is_the_live_why() {
    let d = TestDir::new(1);
    let holder = d.mapper("nvidia0");
    let mut gpu = sim_gpu(0, &[(holder.pid(), 4096, "while-alive")], 0);
    gpu["pci_bus_id"] = "00000000:01:00.0".into();
    gpu["recovery_action"] = "gpu_reset".into();
    // NVML_ERROR_UNKNOWN and NVML_ERROR_TIMEOUT.
    gpu["errors"] = serde_json::json!({"process_utilization": 999, "retired_pages_pending": 10});
    let state = d.state(&sim_state(vec![gpu]));
    // An Xid by the holder, two clock ticks after it started.
    std::thread::sleep(std::time::Duration::from_millis(50));
    let up = std::fs::read_to_string("/proc/uptime").unwrap();
    let at = (up
        .split_whitespace()
        .next()
        .unwrap()
        .parse::<f64>()
        .unwrap()
        * 1e6) as u64;
    let log = d.tmp.path().join("kmsg");
    std::fs::write(
        &log,
        format!(
            "6,1,0,-;Linux version 6.8.0 #1 SMP\n4,100,{at},-;NVRM: Xid (PCI:0000:01:00): 31, \
             pid={}, name=gpufree, Ch 00000008, intr 00000000. MMU Fault\n",
            holder.pid()
        ),
    )
    .unwrap();
    let copy = d.tmp.path().join("snapshot.json");
    for kmsg in [log.to_str().unwrap(), "/nonexistent/kmsg"] {
        let live = || Gpufree::new(["why"]).on(&d, &state).kmsg(kmsg);
        same_json(kmsg, live().json(), &["why", "--json"], &copy);
        let doc: Value = serde_json::from_slice(&std::fs::read(&copy).unwrap()).unwrap();
        let causes = &doc["gpus"][0]["driver_evidence"]["failed_causes"];
        assert!(causes["process_utilization"].is_object(), "{causes}");
        let kinds: Vec<&str> = doc["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f["kind"].as_str())
            .collect();
        assert!(kinds.contains(&"driver-fault"), "{kinds:?}");
        let logged = kmsg == log.to_str().unwrap();
        assert_eq!(kinds.contains(&"application-fault"), logged, "{kinds:?}");
        same_text(kmsg, live(), &["why"], &copy);
        same_text(
            kmsg,
            Gpufree::new(["status"]).on(&d, &state).kmsg(kmsg),
            &["status"],
            &copy,
        );
    }
}

/// MIG: a GPU in MIG mode with holders on two instances beside a whole
/// GPU; the whole snapshot, and one narrowed to a MIG device, read back
/// as the live command showed them.
#[test]
fn why_from_a_snapshot_of_mig_devices_is_the_live_why() {
    let d = TestDir::new(2);
    let (a, b, w) = (
        d.mapper("nvidia0"),
        d.mapper("nvidia0"),
        d.mapper("nvidia1"),
    );
    let mut whole = sim_gpu(1, &[(w.pid(), 1024, "while-alive")], 0);
    whole["mig_mode"] = false.into();
    let mig = crate::mig::mig_gpu(
        0,
        3,
        "2g.35gb",
        35,
        &[(0, a.pid(), 5120), (1, b.pid(), 3072)],
    );
    let state = d.state(&sim_state(vec![mig, whole]));
    let copy = d.tmp.path().join("snapshot.json");
    let on = |words: &[&str]| Gpufree::new(words).on(&d, &state);
    same_json("whole", on(&["why"]).json(), &["why", "--json"], &copy);
    same_text("whole", on(&["status"]), &["status"], &copy);
    let one = on(&["why", "--gpu", "0:1"]).json();
    same_json("0:1", one, &["why", "--json"], &copy);
    same_text("0:1", on(&["why", "--gpu", "0:1"]), &["why"], &copy);
}
