//! The kernel log's parsers and its reader on fixture files.

use super::*;
use std::time::Duration;

fn rec(message: &str) -> Record {
    Record {
        facility: 0,
        seq: 1,
        ts_usec: 2_500_000,
        message: message.to_string(),
    }
}

#[test]
fn records_and_their_continuation_lines() {
    let bytes = b"6,1,0,-;hello\n SUBSYSTEM=pci\n4,2,15,-,caller=T1;a;b\nnot a record\n\n";
    let r = parse_records(bytes);
    assert_eq!(r.len(), 2);
    assert_eq!(
        (r[0].seq, r[0].ts_usec, r[0].message.as_str()),
        (1, 0, "hello")
    );
    assert_eq!(
        (r[1].seq, r[1].ts_usec, r[1].message.as_str()),
        (2, 15, "a;b")
    );
    assert_eq!(parse_record(b"x,1,2,-;m"), None);
    assert_eq!(parse_record(b"6,1,2,-"), None, "no message separator");
    assert_eq!(parse_record(b"6,1;m"), None, "truncated header");
    let lossy = parse_record(b"6,1,2,-;\xff\xfe").expect("non-UTF-8 message");
    assert_eq!(lossy.message, "\u{fffd}\u{fffd}");
}

#[test]
fn an_xid_with_pid_and_name() {
    let x = parse_xid(
        &rec("NVRM: Xid (PCI:0000:01:00): 79, pid=1234, name=python3, GPU has fallen off the bus."),
        Some(1_700_000_000),
    )
    .expect("an Xid");
    assert_eq!(
        (x.xid, x.pci.as_str(), x.pid),
        (79, "0000:01:00", Some(1234))
    );
    assert_eq!(x.comm.as_deref(), Some("python3"));
    assert_eq!(x.text, "GPU has fallen off the bus.");
    assert_eq!(x.since_boot_us, 2_500_000);
    assert_eq!(x.at_unix_ms, Some(1_700_000_002_500));
    assert_eq!(x.gpu_instance, None);
}

#[test]
fn an_xid_without_pid_or_with_an_unknown_one() {
    let x = parse_xid(
        &rec("NVRM: Xid (PCI:0000:03:00): 79, GPU has fallen off the bus."),
        None,
    )
    .expect("an Xid");
    assert_eq!((x.xid, x.pid, x.comm.clone()), (79, None, None));
    assert_eq!(x.text, "GPU has fallen off the bus.");
    assert_eq!(x.at_unix_ms, None, "no boot time, no wall clock");
    let u = parse_xid(
        &rec("NVRM: Xid (PCI:0000:01:00): 48, pid='<unknown>', name=<unknown>, DBE"),
        None,
    )
    .expect("an Xid");
    assert_eq!((u.xid, u.pid, u.comm.as_deref()), (48, None, None));
    let na = parse_xid(
        &rec("NVRM: Xid (PCI:0000:65:00): 64, pid='N/A', Row Remapper"),
        None,
    )
    .expect("an Xid");
    assert_eq!((na.pid, na.text.as_str()), (None, "Row Remapper"));
    // Drivers before R352 wrote the address without `PCI:`: too loose a
    // form to tell from a comm that spells it (see the module's doc), and
    // older than any NVML gpufree reads.
    let old = parse_xid(&rec("NVRM: Xid (0000:01:00): 3, C 00000005"), None);
    assert_eq!(old, None);
    let bare = parse_xid(&rec("NVRM: Xid (PCI:0000:01:00): 13"), None).expect("an Xid");
    assert_eq!((bare.xid, bare.text.as_str()), (13, ""));
}

#[test]
fn a_mig_xid_names_its_gpu_instance() {
    let x = parse_xid(
        &rec("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, name=train, Contained: CE"),
        None,
    )
    .expect("an Xid");
    assert_eq!(
        (x.pci.as_str(), x.gpu_instance, x.pid),
        ("0000:01:00", Some(5), Some(7194))
    );
}

#[test]
fn a_hostile_comm_stays_raw_and_other_lines_are_no_xid() {
    let x = parse_xid(
        &rec("NVRM: Xid (PCI:0000:01:00): 31, pid=9, name=\\x1b[2Jrm -rf, MMU Fault"),
        None,
    )
    .expect("an Xid");
    assert_eq!(x.comm.as_deref(), Some("\\x1b[2Jrm -rf"));
    for m in [
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
        "NVRM: Xid (PCI:0000:01:00) 79 no colon",
        "NVRM: Xid (PCI:zz;): 79, x",
        "NVRM: Xid (PCI:0000:01:00): , no number",
        "NVRM: Xid (PCI:0000:01:00",
        "usb 1-1: Xid (PCI:0000:01:00): 79",
    ] {
        assert_eq!(parse_xid(&rec(m), None), None, "{m}");
    }
}

#[test]
fn boot_time_from_proc_stat() {
    assert_eq!(
        parse_btime(b"cpu  1 2 3\nbtime 1700000000\nprocesses 5\n"),
        Some(1_700_000_000)
    );
    assert_eq!(parse_btime(b"cpu 1\n"), None);
    assert_eq!(parse_btime(b"btime x\n"), None);
}

#[test]
fn the_fixture_reads_to_its_end_with_every_xid() {
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/kmsg/xid-incident.kmsg"
    ));
    let read = read(path, Instant::now() + Duration::from_secs(5)).expect("readable");
    assert_eq!((read.lost, read.truncated), (0, false));
    let xids = xids(&read, Some(1_000));
    let numbers: Vec<u32> = xids.iter().map(|x| x.xid).collect();
    assert_eq!(numbers, [48, 31, 94, 79]);
    assert_eq!(xids[1].pid, Some(4242));
    assert_eq!(xids[0].at_unix_ms, Some(1_000_000 + 3_600_000));
}

#[test]
fn an_unreadable_log_is_an_error_and_a_past_deadline_truncates() {
    let e = read(
        Path::new("/nonexistent/kmsg"),
        Instant::now() + Duration::from_secs(1),
    )
    .expect_err("no such file");
    assert!(e.why.contains("No such file"), "{e:?}");
    let dir = tempfile::tempdir().expect("temp dir");
    let locked = dir.path().join("kmsg");
    std::fs::write(&locked, "6,1,0,-;x\n").expect("written");
    let late = read(&locked, Instant::now() - Duration::from_millis(1)).expect("opened");
    assert!(late.truncated && late.records.is_empty());
    let dir_err = read(dir.path(), Instant::now() + Duration::from_secs(1))
        .expect_err("a directory reads as EISDIR");
    assert!(!dir_err.why.is_empty());
    assert!(denied(&std::io::Error::from_raw_os_error(libc::EPERM)));
    assert!(!dir_err.denied, "EISDIR is no refusal");
}

/// What a user can put in the kernel's log is never an Xid: a record of
/// another facility (userspace's writes to /dev/kmsg), a kernel line
/// quoting a crashing file's name or a device's product string (the
/// prefix not at the start), a comm of 15 bytes that spells the prefix
/// (the address after it is not hexadecimal), an address without `PCI:`.
#[test]
fn only_the_kernels_own_driver_lines_are_xids() {
    let forged = "NVRM: Xid (PCI:0000:01:00): 79, pid=1, name=systemd, GPU has fallen off the bus.";
    let user = Record {
        facility: 1,
        ..rec(forged)
    };
    assert_eq!(parse_xid(&user, None), None, "userspace's record");
    let segv = format!("a.out[4242]: segfault at 0 ip 0 sp 0 error 4 in {forged}[55d0,1000]");
    assert_eq!(
        parse_xid(&rec(&segv), None),
        None,
        "quoted in a kernel line"
    );
    let comm = "NVRM: Xid (PCI:[4242]: segfault at 0 ip 0 sp 0 error 4";
    assert_eq!(
        parse_xid(&rec(comm), None),
        None,
        "a comm spelling the prefix"
    );
    let bare = "NVRM: Xid (0000:01:00): 79, GPU has fallen off the bus.";
    assert_eq!(
        parse_xid(&rec(bare), None),
        None,
        "no PCI: before the address"
    );
    assert!(
        parse_xid(&rec(forged), None).is_some(),
        "the driver's own line"
    );
}

/// A `name=` that is the driver's placeholder, or longer than a comm can
/// be, names no process.
#[test]
fn a_placeholder_or_overlong_name_is_no_comm() {
    let unknown = "NVRM: Xid (PCI:0000:01:00): 48, pid='<unknown>', name=<unknown>, DBE.";
    let x = parse_xid(&rec(unknown), None).expect("an Xid");
    assert_eq!((x.pid, x.comm), (None, None));
    let long = format!(
        "NVRM: Xid (PCI:0000:01:00): 31, pid=7, name={}, MMU Fault.",
        "x".repeat(65)
    );
    let x = parse_xid(&rec(&long), None).expect("an Xid");
    assert_eq!((x.pid, x.comm), (Some(7), None));
}

/// The reader keeps the driver's records of a log far larger than what it
/// keeps, the newest included, and only those.
#[test]
fn a_long_log_keeps_its_newest_xids() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kmsg");
    let mut log = String::new();
    for i in 0..200_000u64 {
        log.push_str(&format!("6,{i},{i},-;usb 1-1: noise line number {i}\n"));
    }
    log.push_str("4,200000,200000,-;NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.\n");
    log.push_str("12,200001,200001,-;NVRM: Xid (PCI:0000:01:00): 48, forged by a user.\n");
    std::fs::write(&path, &log).unwrap();
    let read = read(&path, Instant::now() + Duration::from_secs(30)).unwrap();
    assert!(!read.truncated);
    let xids = xids(&read, None);
    assert_eq!(xids.len(), 1, "{xids:?}");
    assert_eq!(xids[0].xid, 79);
}
