//! Tests of `state`.

use super::*;
use std::path::PathBuf;

fn dev(delay: u64) -> Device {
    Device {
        name: "sim".into(),
        uuid: "GPU-1".into(),
        pci_bus_id: "00000000:01:00.0".into(),
        minor_number: 0,
        memory_total_bytes: 1000,
        memory_baseline_bytes: 10,
        leaked_bytes: 5,
        release_delay_ms: delay,
        errors: BTreeMap::new(),
        hang_ms: BTreeMap::new(),
        mig_mode: None,
        mig: Vec::new(),
        mps_server_pid: None,
        recovery_action: None,
        remapped_rows: None,
        retired_pages_pending: None,
        utilization: None,
        xid_events: Vec::new(),
        processes: vec![
            Process {
                pid: 7,
                used_bytes: 100,
                kind: ProcessKind::Compute,
                visible: Visibility::WhileAlive,
                start_time_ticks: None,
                sm_util: None,
                mem_util: None,
            },
            Process {
                pid: 999_999,
                used_bytes: 50,
                kind: ProcessKind::Graphics,
                visible: Visibility::Always,
                start_time_ticks: None,
                sm_util: None,
                mem_util: None,
            },
        ],
    }
}

#[test]
fn alive_process_counts_and_always_counts_when_absent() {
    let mut log = GoneLog::default();
    let mut changed = false;
    let v = view_device(&dev(0), 0, &|pid, _| pid == 7, &mut log, &mut changed);
    assert_eq!(v.used_bytes, 165);
    assert_eq!(v.processes.len(), 2);
}

#[test]
fn gone_process_is_released_after_the_delay() {
    let d = dev(2000);
    let mut log = GoneLog::default();
    let mut changed = false;
    let v = view_device(&d, 1000, &|_, _| false, &mut log, &mut changed);
    assert!(changed, "first sight of the exit is recorded");
    assert_eq!(v.used_bytes, 165, "still held during the delay");
    let v = view_device(&d, 2999, &|_, _| false, &mut log, &mut changed);
    assert_eq!(v.used_bytes, 165);
    let v = view_device(&d, 3000, &|_, _| false, &mut log, &mut changed);
    assert_eq!(v.used_bytes, 65, "released once the delay has passed");
}

#[test]
fn no_delay_releases_at_once() {
    let mut log = GoneLog::default();
    let mut changed = false;
    let v = view_device(&dev(0), 0, &|_, _| false, &mut log, &mut changed);
    assert_eq!(v.used_bytes, 65);
    assert!(!changed);
}

#[test]
fn mps_clients_are_reported_while_they_and_their_server_live() {
    let mut d = dev(0);
    d.mps_server_pid = Some(7);
    d.processes.push(Process {
        pid: 8,
        used_bytes: 300,
        kind: ProcessKind::Mps,
        visible: Visibility::WhileAlive,
        start_time_ticks: None,
        sm_util: None,
        mem_util: None,
    });
    let pids = |v: &DeviceView| v.processes.iter().map(|p| (p.0, p.2)).collect::<Vec<_>>();
    let mut log = GoneLog::default();
    let v = view_device(&d, 0, &|pid, _| pid == 7 || pid == 8, &mut log, &mut false);
    assert_eq!(v.used_bytes, 465, "server 100 + client 300 + 65");
    assert!(pids(&v).contains(&(8, ProcessKind::Mps)));
    // The server gone: the client lives on, but its context and memory
    // were the server's.
    let v = view_device(&d, 0, &|pid, _| pid == 8, &mut log, &mut false);
    assert_eq!(pids(&v), [(999_999, ProcessKind::Graphics)]);
    assert_eq!(v.used_bytes, 65);
    // A client that exits while the server lives is released alone.
    let v = view_device(&d, 0, &|pid, _| pid == 7, &mut log, &mut false);
    assert_eq!(v.used_bytes, 165);
}

#[test]
fn used_never_exceeds_total() {
    let mut d = dev(0);
    d.leaked_bytes = 10_000;
    let mut log = GoneLog::default();
    let v = view_device(&d, 0, &|_, _| true, &mut log, &mut false);
    assert_eq!(v.used_bytes, 1000);
}

#[test]
fn corrupt_state_names_the_file() {
    let e = State::parse(b"{\"devices\": [", Path::new("/x/s.json")).unwrap_err();
    assert!(e.0.contains("/x/s.json"), "{}", e.0);
    let e = State::parse(br#"{"devices":[{"name":"","uuid":"","pci_bus_id":"","minor_number":0,"memory_total_bytes":1}]}"#, Path::new("s")).unwrap_err();
    assert!(e.0.contains("device 0"), "{}", e.0);
}

#[test]
fn a_utilisation_over_100_percent_is_refused() {
    let state = br#"{"devices":[{"name":"G","uuid":"GPU-1","pci_bus_id":"00000000:01:00.0","minor_number":0,"memory_total_bytes":1,"processes":[{"pid":1,"used_bytes":1,"sm_util":101}]}]}"#;
    let e = State::parse(state, Path::new("s")).unwrap_err();
    assert!(e.0.contains("101 is not a percentage"), "{}", e.0);
}

#[test]
fn a_state_error_is_one_line_whatever_the_file_holds() {
    // A key with an escaped newline and ESC [2J: serde names it as is.
    let e = State::parse(br#"{"cuda_driver_versio\n\u001b[2J": 1}"#, Path::new("s")).unwrap_err();
    assert!(!e.0.contains('\n') && !e.0.contains('\x1b'), "{}", e.0);
    assert!(e.0.contains("versio\\n\\u{1b}[2J"), "{}", e.0);
}

#[test]
fn zombie_and_missing_pids_are_not_alive() {
    let dir = std::env::temp_dir().join(format!("gpufree-sim-alive-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("5")).unwrap();
    std::fs::write(dir.join("5/stat"), b"5 (a) b) Z 1 2").unwrap();
    std::fs::create_dir_all(dir.join("6")).unwrap();
    let fields: Vec<String> = (3..=22).map(|f| f.to_string()).collect();
    std::fs::write(
        dir.join("6/stat"),
        format!("6 (x) S {}", fields[1..].join(" ")),
    )
    .unwrap();
    assert!(!pid_alive(&dir, 5, None));
    assert!(pid_alive(&dir, 6, None));
    assert!(pid_alive(&dir, 6, Some(22)), "field 22 is the start time");
    assert!(
        !pid_alive(&dir, 6, Some(21)),
        "another start time: a reused PID"
    );
    assert!(!pid_alive(&dir, 7, None));
    std::fs::remove_dir_all(dir).unwrap();
}

/// A file outside the state's directory that planted links point at.
fn victim(dir: &Path) -> PathBuf {
    let v = dir.join("victim");
    std::fs::write(&v, b"precious").unwrap();
    v
}

#[test]
fn the_gone_log_is_never_written_through_a_link_planted_beside_the_state() {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let outside = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let target = victim(outside.path());
    let missing = outside.path().join("created-through-a-link");
    let log = dir.path().join("state.json.gone");
    // Where the temporary file's name is known (here always the same),
    // links there (to a file, and dangling) are refused, never followed.
    let fixed = dir.path().join(".state.json.gone.fixed");
    for to in [&target, &missing] {
        symlink(to, &fixed).unwrap();
        let mut known = |base: &std::ffi::OsStr| {
            let mut n = std::ffi::OsString::from(".");
            n.push(base);
            n.push(".fixed");
            n
        };
        let e = replace(&log, b"{}", 0o644, &mut known).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{e}");
        assert!(std::fs::symlink_metadata(&fixed).unwrap().is_symlink());
        std::fs::remove_file(&fixed).unwrap();
    }
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    assert!(!missing.exists(), "nothing created through a dangling link");
    // The name this library used before (state.json.tmp<PID>), and the
    // log's own name: a link at the log is replaced, not written through.
    let old = dir
        .path()
        .join(format!("state.json.tmp{}", std::process::id()));
    symlink(&target, &old).unwrap();
    symlink(&target, &log).unwrap();
    GoneLog {
        first_gone_ms: BTreeMap::from([(7, 1)]),
    }
    .store(&log, 0o640);
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    assert!(std::fs::symlink_metadata(&old).unwrap().is_symlink());
    let meta = std::fs::symlink_metadata(&log).unwrap();
    assert!(meta.is_file(), "the log is a file of its own now");
    assert_eq!(
        meta.permissions().mode() & 0o137,
        0,
        "at most the mode given"
    );
    assert_eq!(GoneLog::load(&log).first_gone_ms.get(&7), Some(&1));
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let old_name = old.file_name().unwrap().to_str().unwrap();
    assert_eq!(
        names,
        ["state.json.gone", old_name],
        "no temporary file left"
    );
}
