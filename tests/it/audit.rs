//! The audit record of `gpufree kill` on real processes and the simulator:
//! one journal datagram (native protocol) with every field, to a socket
//! the test binds; hostile names that cannot inject a field; syslog where
//! the journal is absent; `--audit-log` as appended JSON lines, never
//! through a symlink; nothing for a dry run; and a record that cannot be
//! written changes neither the kill nor its exit code.

use crate::harness::*;
use gpufree::demo::holder::HoldSpec;
use serde_json::Value;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::Duration;

const MESSAGE_ID: &str = "c8f371fd4a354bb8b6b4205c04bdfa2c";

type Fields = Vec<(String, Vec<u8>)>;

/// A socket the test binds, standing in for the journal or syslog.
struct Socket {
    sock: UnixDatagram,
    path: PathBuf,
}

impl Socket {
    fn bind(dir: &Path, name: &str) -> Socket {
        let path = dir.join(name);
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        Socket { sock, path }
    }

    fn path(&self) -> &str {
        self.path.to_str().unwrap()
    }

    /// The next datagram, if one came.
    fn next(&self) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 1 << 20];
        let n = self.sock.recv(&mut buf).ok()?;
        buf.truncate(n);
        Some(buf)
    }

    /// Whether no datagram is waiting.
    fn empty(&self) -> bool {
        self.sock.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 16];
        let none = self.sock.recv(&mut buf).is_err();
        self.sock.set_nonblocking(false).unwrap();
        none
    }
}

/// The fields of one native-protocol datagram, in order, as journald
/// reads them: `KEY=value\n`, or `KEY\n<le64 length><value>\n`.
fn parse_native(mut b: &[u8]) -> Fields {
    let mut out = Vec::new();
    while !b.is_empty() {
        let end = b.iter().position(|&c| c == b'\n' || c == b'=').unwrap();
        let key = String::from_utf8(b[..end].to_vec()).unwrap();
        if b[end] == b'=' {
            let nl = end + b[end..].iter().position(|&c| c == b'\n').unwrap();
            out.push((key, b[end + 1..nl].to_vec()));
            b = &b[nl + 1..];
        } else {
            let len = u64::from_le_bytes(b[end + 1..end + 9].try_into().unwrap()) as usize;
            let start = end + 9;
            out.push((key, b[start..start + len].to_vec()));
            assert_eq!(b[start + len], b'\n', "a binary value ends with a newline");
            b = &b[start + len + 1..];
        }
    }
    out
}

/// The one value of field `k` (it must appear exactly once).
fn field(f: &Fields, k: &str) -> String {
    let all: Vec<&Vec<u8>> = f.iter().filter(|(x, _)| x == k).map(|(_, v)| v).collect();
    assert_eq!(all.len(), 1, "{k} appears {} times", all.len());
    String::from_utf8(all[0].clone()).unwrap()
}

/// A holder of GPU 0 that NVML lists with 1 GiB, and the simulator state.
fn listed(
    d: &TestDir,
    argv: &[&str],
    comm: Option<&str>,
) -> (gpufree::demo::holder::Spawned, PathBuf) {
    let h = hold(
        argv,
        HoldSpec {
            fd: vec![d.node("nvidia0")],
            comm: comm.map(str::to_string),
            ..HoldSpec::default()
        },
    );
    let state = d.one_gpu(&[(h.pid(), 1024, "while-alive")], 0);
    (h, state)
}

#[test]
fn kill_sends_one_journal_record_naming_the_target_its_signals_and_the_release() {
    let d = TestDir::new(1);
    let (h, state) = listed(&d, &["python3", "serve.py", "--port=8000"], None);
    let pid = h.pid();
    let before = Gpufree::new(["status"]).json().on(&d, &state).doc();
    let seen = process(&before, pid).unwrap().clone();
    let journal = Socket::bind(d.tmp.path(), "journal.sock");
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--pid", &pid.to_string(), "--yes"])
        .envs([("GPUFREE_JOURNAL_SOCKET", journal.path())])
        .run();
    let doc = r.json_or_null();
    r.assert_exit(0);
    assert!(!r.stderr.contains("audit"), "{}", r.stderr);
    assert!(!alive(pid));
    let f = parse_native(&journal.next().expect("a journal record"));
    assert!(journal.empty(), "one record per kill");
    assert_eq!(field(&f, "MESSAGE_ID"), MESSAGE_ID);
    assert_eq!(field(&f, "SYSLOG_IDENTIFIER"), "gpufree");
    assert_eq!(field(&f, "PRIORITY"), "5");
    assert!(field(&f, "MESSAGE").contains(&pid.to_string()));
    assert_eq!(field(&f, "GPUFREE_COMMAND"), "kill");
    let uid = rustix::process::getuid().as_raw().to_string();
    assert_eq!(field(&f, "GPUFREE_UID"), uid);
    assert_eq!(field(&f, "GPUFREE_SIGNAL"), "TERM");
    assert_eq!(field(&f, "GPUFREE_TARGET_PIDS"), pid.to_string());
    assert_eq!(field(&f, "GPUFREE_SIGNALLED_PIDS"), pid.to_string());
    assert_eq!(field(&f, "GPUFREE_SURVIVORS"), "");
    assert_eq!(field(&f, "GPUFREE_OUTCOME"), "released");
    assert_eq!(field(&f, "GPUFREE_RELEASED"), "true");
    assert_eq!(field(&f, "GPUFREE_TARGET_0_PID"), pid.to_string());
    assert_eq!(
        field(&f, "GPUFREE_TARGET_0_START_TIME"),
        seen["start_time_ticks"].to_string()
    );
    assert_eq!(
        field(&f, "GPUFREE_TARGET_0_COMM"),
        seen["comm"].as_str().unwrap()
    );
    assert_eq!(
        field(&f, "GPUFREE_TARGET_0_CMDLINE"),
        "python3 serve.py --port=8000"
    );
    assert_eq!(field(&f, "GPUFREE_TARGET_0_UID"), uid);
    assert_eq!(field(&f, "GPUFREE_TARGET_0_SIGNALS"), "TERM");
    assert_eq!(field(&f, "GPUFREE_TARGET_0_OUTCOME"), "gone");
    assert!(!field(&f, "GPUFREE_TARGET_0_REASON").is_empty());
    let rec: Value = serde_json::from_str(&field(&f, "GPUFREE_RECORD")).unwrap();
    assert_eq!(rec["targets"][0]["pid"], pid);
    assert_eq!(
        rec["targets"][0]["start_time_ticks"],
        seen["start_time_ticks"]
    );
    assert_eq!(rec["targets"][0]["owner"], seen["owner"]);
    assert_eq!(rec["outcome"]["released"], true);
    assert_eq!(
        rec["outcome"]["seconds_to_release"],
        doc["kill"]["seconds_to_release"]
    );
    assert!(rec["invoker"]["pid"].is_u64());
    // When it began, and ended: the release lies between them.
    let ms = |f: &str| gpufree::model::rfc3339_ms(rec[f].as_str().unwrap()).unwrap();
    let (started, ended) = (ms("started"), ms("time"));
    let took = rec["outcome"]["seconds_to_release"].as_f64().unwrap();
    assert!(
        started as f64 + took * 1000.0 <= ended as f64 + 1.0,
        "{rec}"
    );
}

#[test]
fn hostile_comm_and_cmdline_cannot_inject_a_journal_field() {
    let d = TestDir::new(1);
    let argv = [
        "x\nPRIORITY=0\nGPUFREE_OUTCOME=injected",
        "a=b\nMESSAGE_ID=00\n",
    ];
    let (h, state) = listed(&d, &argv, Some("c\nPRIORITY=1"));
    let pid = h.pid();
    let before = Gpufree::new(["status"]).json().on(&d, &state).doc();
    let comm = process(&before, pid).unwrap()["comm"].clone();
    assert!(comm.as_str().unwrap().contains('\n'), "{comm}");
    let journal = Socket::bind(d.tmp.path(), "journal.sock");
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--pid", &pid.to_string(), "--yes"])
        .envs([("GPUFREE_JOURNAL_SOCKET", journal.path())])
        .run();
    r.assert_exit(0);
    let f = parse_native(&journal.next().expect("a journal record"));
    for (k, _) in &f {
        assert!(
            k.bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'),
            "{k:?} is no field of gpufree's"
        );
    }
    // Each appears once, with gpufree's value: nothing was injected.
    assert_eq!(field(&f, "PRIORITY"), "5");
    assert_eq!(field(&f, "GPUFREE_OUTCOME"), "released");
    assert_eq!(field(&f, "MESSAGE_ID"), MESSAGE_ID);
    assert!(!field(&f, "MESSAGE").contains('\n'));
    assert_eq!(field(&f, "GPUFREE_TARGET_0_COMM"), comm.as_str().unwrap());
    assert_eq!(field(&f, "GPUFREE_TARGET_0_CMDLINE"), argv.join(" "));
    let rec: Value = serde_json::from_str(&field(&f, "GPUFREE_RECORD")).unwrap();
    assert_eq!(rec["targets"][0]["comm"], comm);
    assert_eq!(rec["targets"][0]["cmdline"], serde_json::json!(argv));
}

#[test]
fn without_a_journal_the_record_goes_to_syslog_and_without_either_the_kill_still_succeeds() {
    let d = TestDir::new(1);
    let (h, state) = listed(&d, &["worker"], None);
    let pid = h.pid();
    let syslog = Socket::bind(d.tmp.path(), "log.sock");
    let absent = d.tmp.path().join("no-journal.sock");
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args(["--pid", &pid.to_string(), "--yes"])
        .envs([
            ("GPUFREE_JOURNAL_SOCKET", absent.to_str().unwrap()),
            ("GPUFREE_SYSLOG_SOCKET", syslog.path()),
        ])
        .run();
    r.assert_exit(0);
    assert!(!r.stderr.contains("audit"), "{}", r.stderr);
    let line = String::from_utf8(syslog.next().expect("a syslog line")).unwrap();
    assert!(line.starts_with("<85>gpufree["), "{line}");
    assert!(!line.contains('\n'), "{line}");
    let json = line.split_once("GPUFREE_RECORD=").unwrap().1;
    let rec: Value = serde_json::from_str(json).unwrap();
    assert_eq!(rec["targets"][0]["pid"], pid);
    // Neither socket (a host that keeps no log): the kill's outcome as
    // ever, and one line on stderr only with -v (not on every kill).
    for verbose in [false, true] {
        let (h, state) = listed(&d, &["worker"], None);
        let mut kill = Gpufree::new(["kill"])
            .json()
            .on(&d, &state)
            .args(["--pid", &h.pid().to_string(), "--yes"])
            .envs([
                ("GPUFREE_JOURNAL_SOCKET", absent.to_str().unwrap()),
                ("GPUFREE_SYSLOG_SOCKET", absent.to_str().unwrap()),
            ]);
        if verbose {
            kill = kill.opt("-v");
        }
        let out = kill.run();
        let doc = out.json_or_null();
        out.assert_exit(0);
        assert_eq!(doc["kill"]["released"], true);
        assert!(!alive(h.pid()));
        let lines: Vec<&str> = out.stderr.lines().filter(|l| l.contains("audit")).collect();
        if !verbose {
            assert!(lines.is_empty(), "{}", out.stderr);
            continue;
        }
        assert_eq!(lines.len(), 1, "{}", out.stderr);
        assert!(
            lines[0].contains("journal") && lines[0].contains("syslog"),
            "{}",
            out.stderr
        );
    }
}

#[test]
fn audit_log_gets_one_json_line_per_kill_appended_mode_0600() {
    use std::os::unix::fs::PermissionsExt;
    let d = TestDir::new(1);
    let log = d.tmp.path().join("kills.jsonl");
    let mut pids = Vec::new();
    for _ in 0..2 {
        let (h, state) = listed(&d, &["worker"], None);
        let r = Gpufree::new(["kill"])
            .json()
            .on(&d, &state)
            .args([
                "--pid",
                &h.pid().to_string(),
                "--yes",
                "--audit-log",
                log.to_str().unwrap(),
            ])
            .run();
        r.assert_exit(0);
        assert!(!r.stderr.contains("audit"), "{}", r.stderr);
        pids.push(h.pid());
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    for (rec, pid) in lines.iter().zip(&pids) {
        assert_eq!(rec["version"], 1);
        assert_eq!(rec["command"], "kill");
        assert_eq!(rec["targets"][0]["pid"], *pid);
        assert_eq!(rec["targets"][0]["signals"], serde_json::json!(["TERM"]));
        assert_eq!(rec["targets"][0]["outcome"], "gone");
        assert_eq!(rec["outcome"]["result"], "released");
        assert!(rec["invoker"]["uid"].is_u64());
    }
    let mode = std::fs::metadata(&log).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn a_symlinked_audit_log_is_refused_without_blocking_the_kill() {
    let d = TestDir::new(1);
    let (h, state) = listed(&d, &["worker"], None);
    let real = d.tmp.path().join("real.jsonl");
    std::fs::write(&real, "keep\n").unwrap();
    let link = d.tmp.path().join("link.jsonl");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let journal = Socket::bind(d.tmp.path(), "journal.sock");
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args([
            "--pid",
            &h.pid().to_string(),
            "--yes",
            "--audit-log",
            link.to_str().unwrap(),
        ])
        .envs([("GPUFREE_JOURNAL_SOCKET", journal.path())])
        .run();
    let doc = r.json_or_null();
    r.assert_exit(0);
    assert_eq!(doc["kill"]["released"], true);
    assert!(!alive(h.pid()));
    let lines: Vec<&str> = r.stderr.lines().filter(|l| l.contains("audit")).collect();
    assert_eq!(lines.len(), 1, "{}", r.stderr);
    assert!(lines[0].contains("symlink"), "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&real).unwrap(), "keep\n");
    // The journal has the record all the same.
    assert!(journal.next().is_some());
}

#[test]
fn a_dry_run_writes_no_audit_record() {
    let d = TestDir::new(1);
    let (h, state) = listed(&d, &["worker"], None);
    let log = d.tmp.path().join("kills.jsonl");
    let journal = Socket::bind(d.tmp.path(), "journal.sock");
    let r = Gpufree::new(["kill"])
        .json()
        .on(&d, &state)
        .args([
            "--pid",
            &h.pid().to_string(),
            "--dry-run",
            "--audit-log",
            log.to_str().unwrap(),
        ])
        .envs([("GPUFREE_JOURNAL_SOCKET", journal.path())])
        .run();
    r.assert_exit(0);
    assert!(alive(h.pid()));
    assert!(journal.empty());
    assert!(!log.exists());
}
