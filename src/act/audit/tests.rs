use super::*;
use crate::model::{Change, Changed, Owner, OwnerKind, Skipped};
use crate::present::words::front::audit_message;
use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// The fields of one native-protocol datagram, in order; panics on a
/// malformed one (what journald would reject).
pub(crate) fn parse_native(mut b: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let end = b.iter().position(|&c| c == b'\n' || c == b'=').unwrap();
        let key = String::from_utf8(b[..end].to_vec()).unwrap();
        if b[end] == b'=' {
            let nl = b[end..].iter().position(|&c| c == b'\n').unwrap() + end;
            out.push((key, b[end + 1..nl].to_vec()));
            b = &b[nl + 1..];
        } else {
            let len = u64::from_le_bytes(b[end + 1..end + 9].try_into().unwrap()) as usize;
            let start = end + 9;
            out.push((key, b[start..start + len].to_vec()));
            assert_eq!(b[start + len], b'\n');
            b = &b[start + len + 1..];
        }
    }
    out
}

fn handled(pid: u32, comm: &str, signals: &[&str]) -> Handled {
    Handled {
        pid,
        start_time_ticks: 1000 + u64::from(pid),
        why: crate::model::Target::holds(crate::model::Holds::Nodes {
            nodes: vec![format!("nvidia{pid}")],
        }),
        round: 1,
        comm: comm.into(),
        cmdline: vec![comm.into(), "--x".into()],
        exe: Some("/usr/bin/python3".into()),
        uid: Some(1000),
        user: "alice".into(),
        owner: Owner {
            kind: OwnerKind::SystemdUnit,
            id: "vllm.service".into(),
            name: "vllm.service".into(),
            claims: None,
        },
        signals: signals.iter().map(|s| s.to_string()).collect(),
    }
}

fn ctx() -> Context {
    Context {
        command: "kill".into(),
        invoker: Invoker {
            pid: 42,
            uid: 0,
            user: "root".into(),
            login_uid: Some(1000),
            tty: Some("/dev/pts/3".into()),
            ssh: Some("10.0.0.7 52311".into()),
            sudo_user: Some("alice".into()),
            argv: vec!["gpufree".into(), "kill".into(), "--yes".into()],
            ..Invoker::default()
        },
        host: "node1".into(),
        signal: Signal::TERM,
        no_wait: false,
        time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        reasons: vec!["11 still holds GPU 0".into()],
        words: Words {
            target: crate::present::words::target::target,
            left: crate::present::words::target::left,
            message: crate::present::words::front::audit_message,
        },
    }
}

/// A kill of six targets, one of each outcome.
fn report() -> Report {
    Report {
        targets: vec![10, 11],
        survivors: vec![11],
        killed_hard: vec![11],
        identity_changed: vec![12],
        changed: vec![Changed {
            pid: 13,
            why: Change::LetGo,
        }],
        skipped: vec![Skipped {
            pid: 14,
            why: crate::model::Left::Said {
                text: "permission denied".into(),
            },
            refused: true,
        }],
        verdict: VerdictState::Busy,
        reasons: vec![crate::model::Why::Said {
            text: "11 still holds GPU 0".into(),
        }
        .into()],
        rounds: 1,
        handled: vec![
            handled(10, "python3", &["TERM"]),
            handled(11, "stubborn", &["TERM", "KILL"]),
            handled(12, "reused", &[]),
            handled(13, "exec'd", &[]),
            handled(14, "theirs", &[]),
            handled(15, "early", &[]),
        ],
        ..Report::default()
    }
}

#[test]
fn a_kill_that_signalled_nothing_has_no_record() {
    let r = Report {
        handled: vec![handled(12, "reused", &[])],
        identity_changed: vec![12],
        ..Report::default()
    };
    assert_eq!(record(&ctx(), &r), None);
}

#[test]
fn each_target_has_its_identity_signals_and_outcome() {
    let rec = record(&ctx(), &report()).unwrap();
    let outcomes: Vec<(u32, &str, Vec<String>)> = rec
        .targets
        .iter()
        .map(|t| (t.pid, t.outcome.as_str(), t.signals.clone()))
        .collect();
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        outcomes,
        vec![
            (10, "gone", s(&["TERM"])),
            (11, "survived", s(&["TERM", "KILL"])),
            (12, "identity-changed", vec![]),
            (13, "let-go", vec![]),
            (14, "refused", vec![]),
            (15, "gone", vec![]),
        ]
    );
    assert_eq!(
        rec.targets[3].detail.as_deref(),
        Some("no longer holds a GPU device node (it exec'd another program or let go)")
    );
    assert_eq!(rec.targets[0].start_time_ticks, 1010);
    assert_eq!(rec.outcome.result.as_str(), "not-released");
    assert_eq!(rec.time, "2023-11-14T22:13:20.000Z");
    assert_eq!(rec.signal, "TERM");
    // The reasons in the words the command made, and typed beside them.
    assert_eq!(
        rec.outcome.reasons,
        vec!["11 still holds GPU 0".to_string()]
    );
    assert_eq!(rec.outcome.causes, report().reasons);
    let mut no_wait = ctx();
    no_wait.no_wait = true;
    assert_eq!(
        record(&no_wait, &report()).unwrap().outcome.result.as_str(),
        "not-waited"
    );
}

#[test]
fn rfc3339_dates() {
    let at = |s: u64| rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(s));
    assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(at(951_782_400), "2000-02-29T00:00:00.000Z");
    assert_eq!(at(4_107_542_399), "2100-02-28T23:59:59.000Z");
    assert_eq!(
        rfc3339(SystemTime::UNIX_EPOCH - Duration::from_secs(5)),
        "1970-01-01T00:00:00.000Z"
    );
}

#[test]
fn hostile_values_cannot_inject_a_journal_field() {
    let mut r = report();
    r.handled[0].comm = "x\nPRIORITY=0\nGPUFREE_OUTCOME=released".into();
    r.handled[0].cmdline = vec!["a=b\nMESSAGE_ID=0".into(), "\u{202e}".into()];
    let rec = record(&ctx(), &r).unwrap();
    let line = file::json_line(&rec);
    let fields = parse_native(&journal::encode(&journal::fields(
        &rec,
        &line,
        &audit_message(&rec),
    )));
    let count = |k: &str| fields.iter().filter(|(f, _)| f == k).count();
    for k in ["PRIORITY", "GPUFREE_OUTCOME", "MESSAGE_ID", "MESSAGE"] {
        assert_eq!(count(k), 1, "{k}");
    }
    let get = |k: &str| {
        let v = &fields.iter().find(|(f, _)| f == k).unwrap().1;
        String::from_utf8(v.clone()).unwrap()
    };
    assert_eq!(get("GPUFREE_TARGET_0_COMM"), r.handled[0].comm);
    assert_eq!(
        get("GPUFREE_TARGET_0_CMDLINE"),
        "a=b\nMESSAGE_ID=0 \u{202e}"
    );
    assert_eq!(get("GPUFREE_OUTCOME"), "not-released");
    assert_eq!(get("PRIORITY"), "4");
    assert!(!get("MESSAGE").contains('\n'));
    // The JSON line is one line, its hostile characters escaped.
    assert_eq!(line.matches('\n').count(), 1);
    assert!(line.contains("\\u202e") && !line.contains('\u{202e}'));
    let back: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(back["targets"][0]["comm"], r.handled[0].comm.as_str());
    assert_eq!(get("GPUFREE_RECORD"), line.trim_end());
}

/// A target's argv that holds a record of its own (`GPUFREE_RECORD={...}`)
/// or shell code cannot be read back as either: the line holds no `=`,
/// `$`, backquote or quote outside the JSON's structure, and parses back
/// to the very argv.
#[test]
fn a_targets_argv_cannot_forge_a_record_or_reach_a_shell() {
    let mut r = report();
    let forged = r#"x GPUFREE_RECORD={"version":1,"outcome":{"released":true}}"#;
    r.handled[0].cmdline = vec![forged.into(), "$(reboot)`id`'\"<b>&;|".into()];
    let rec = record(&ctx(), &r).unwrap();
    let line = file::json_line(&rec);
    for c in ['=', '$', '`', '\'', '<', '>', '&', ';', '|'] {
        assert!(!line.contains(c), "{c:?} in {line}");
    }
    assert_eq!(line.matches("GPUFREE_RECORD").count(), 1, "{line}");
    let back: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(back["targets"][0]["cmdline"][0], forged);
    assert_eq!(
        back["targets"][0]["cmdline"][1],
        r.handled[0].cmdline[1].as_str()
    );
}

fn socket(dir: &std::path::Path, name: &str) -> (UnixDatagram, PathBuf) {
    let p = dir.join(name);
    let s = UnixDatagram::bind(&p).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    (s, p)
}

#[test]
fn journal_first_then_syslog_and_the_file_always() {
    let tmp = tempfile::tempdir().unwrap();
    let (journal, jp) = socket(tmp.path(), "journal");
    let (syslog, sp) = socket(tmp.path(), "syslog");
    let file = tmp.path().join("audit.jsonl");
    let rec = record(&ctx(), &report()).unwrap();
    let sinks = Sinks {
        journal: Some(jp),
        syslog: Some(sp.clone()),
        file: Some(file.clone()),
    };
    write(&sinks, &rec, &audit_message(&rec)).unwrap();
    let mut buf = vec![0; 1 << 16];
    let n = journal.recv(&mut buf).unwrap();
    assert!(parse_native(&buf[..n])
        .iter()
        .any(|(k, v)| k == "MESSAGE_ID" && v == MESSAGE_ID.as_bytes()));
    // The journal gone: syslog has it, one line.
    let sinks = Sinks {
        journal: Some(tmp.path().join("absent")),
        ..sinks
    };
    write(&sinks, &rec, &audit_message(&rec)).unwrap();
    let n = syslog.recv(&mut buf).unwrap();
    let text = String::from_utf8(buf[..n].to_vec()).unwrap();
    assert!(
        text.starts_with("<84>gpufree[42]: gpufree kill by UID 0 (root)"),
        "{text}"
    );
    assert!(!text.contains('\n'), "{text}");
    assert_eq!(std::fs::read_to_string(&file).unwrap().lines().count(), 2);
    // Neither: one error naming both, the file still written.
    let sinks = Sinks {
        syslog: Some(tmp.path().join("absent-too")),
        ..sinks
    };
    let e = write(&sinks, &rec, &audit_message(&rec))
        .unwrap_err()
        .to_string();
    assert!(e.contains("journal") && e.contains("syslog"), "{e}");
    assert_eq!(std::fs::read_to_string(&file).unwrap().lines().count(), 3);
}

#[test]
fn a_record_too_large_for_a_datagram_goes_as_a_memfd() {
    use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let tmp = tempfile::tempdir().unwrap();
    let (journal, jp) = socket(tmp.path(), "journal");
    let mut r = report();
    r.handled[0].cmdline = vec!["y".repeat(600_000)];
    let rec = record(&ctx(), &r).unwrap();
    let line = file::json_line(&rec);
    let datagram = journal::encode(&journal::fields(&rec, &line, &audit_message(&rec)));
    journal::send(&jp, &datagram).unwrap();
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut buf = [0u8; 16];
    let got = recvmsg(
        &journal,
        &mut [std::io::IoSliceMut::new(&mut buf)],
        &mut control,
        RecvFlags::empty(),
    )
    .unwrap();
    assert_eq!(got.bytes, 0);
    let fd = control
        .drain()
        .find_map(|m| match m {
            RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
            _ => None,
        })
        .unwrap();
    // The memfd shares its offset with gpufree's write: read from 0, as
    // journald maps it.
    let mut file = std::fs::File::from(fd);
    std::io::Seek::rewind(&mut file).unwrap();
    let mut sent = Vec::new();
    std::io::Read::read_to_end(&mut file, &mut sent).unwrap();
    assert!(
        sent == datagram,
        "{} bytes of {}",
        sent.len(),
        datagram.len()
    );
}

#[test]
fn the_file_is_appended_created_0600_and_never_through_a_symlink() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("audit.jsonl");
    file::append(&p, b"one\n").unwrap();
    file::append(&p, b"two\n").unwrap();
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "one\ntwo\n");
    let mode = std::fs::metadata(&p).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&p, &link).unwrap();
    let e = file::append(&link, b"three\n").unwrap_err();
    assert!(e.to_string().contains("symlink"), "{e}");
    let fifo = tmp.path().join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    // No reader: the open fails at once (ENXIO) rather than waiting for one.
    assert!(file::append(&fifo, b"four\n").is_err());
    let e = file::append(std::path::Path::new("/dev/null"), b"five\n").unwrap_err();
    assert!(e.to_string().contains("regular"), "{e}");
    let e = file::append(tmp.path(), b"six\n").unwrap_err();
    assert!(e.raw_os_error() == Some(libc::EISDIR), "{e}");
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "one\ntwo\n");
}

#[test]
fn a_kill_of_many_targets_stays_under_journald_s_field_limit() {
    // journald drops an entry of 1024 fields or more without a word.
    let pids: Vec<u32> = (1000..1200).collect();
    let r = Report {
        targets: pids.clone(),
        handled: pids
            .iter()
            .map(|&p| handled(p, "worker", &["TERM"]))
            .collect(),
        verdict: VerdictState::Free,
        ..Report::default()
    };
    let rec = record(&ctx(), &r).expect("a record");
    assert_eq!(rec.targets.len(), 200);
    let line = super::file::json_line(&rec);
    let fields = super::journal::fields(&rec, &line, &audit_message(&rec));
    assert!(fields.len() < 1024, "{} fields", fields.len());
    let all = fields
        .iter()
        .find(|(k, _)| k == "GPUFREE_RECORD")
        .expect("the whole record");
    assert!(
        all.1.contains("\"pid\":1199"),
        "every target is in the record"
    );
}
