//! The scan's pieces, tested on real processes and files.

use super::jobs::Job;
use super::*;
use std::sync::atomic::AtomicU32;
use std::sync::Mutex;

/// A job over PIDs 1..=4 where PID 2's read blocks until `gate` opens;
/// counts the reads of PID 2.
fn blocking_job(gate: Arc<Mutex<bool>>, reads: Arc<AtomicU32>) -> Job<u32> {
    Arc::new(move |pid, _: &mut Vec<u8>| {
        if pid == 2 {
            reads.fetch_add(1, Ordering::Relaxed);
            while !*gate.lock().unwrap() {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        pid * 10
    })
}

#[test]
fn a_read_that_hangs_times_out_and_costs_one_thread_across_scans() {
    let gate = Arc::new(Mutex::new(false));
    let reads = Arc::new(AtomicU32::new(0));
    let stuck = Stuck::default();
    let limits = Limits {
        read_timeout: Duration::from_millis(100),
        deadline: None,
    };
    let run = || {
        run_jobs(
            vec![1, 2, 3, 4],
            2,
            limits,
            &stuck,
            blocking_job(Arc::clone(&gate), Arc::clone(&reads)),
        )
    };
    let first = run();
    assert_eq!(first.len(), 4);
    assert!(matches!(first[1], (2, Err(Unread::TimedOut(_)))));
    assert!(first
        .iter()
        .filter(|r| r.0 != 2)
        .all(|r| r.1 == Ok(r.0 * 10)));
    // The next scan does not read PID 2 again while its read hangs.
    let second = run();
    assert_eq!(second[1], (2, Err(Unread::StillStuck)));
    assert_eq!(
        reads.load(Ordering::Relaxed),
        1,
        "one stuck thread, not two"
    );
    // Once the read returns, PID 2 is read again.
    *gate.lock().unwrap() = true;
    for _ in 0..200 {
        if !stuck.set().contains(&2) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let third = run();
    assert_eq!(third[1], (2, Ok(20)));
    assert_eq!(reads.load(Ordering::Relaxed), 2);
}

#[test]
fn what_the_deadline_leaves_unread_is_said_so() {
    let gate = Arc::new(Mutex::new(false));
    let reads = Arc::new(AtomicU32::new(0));
    let limits = Limits {
        read_timeout: Duration::from_secs(10),
        deadline: Some(Instant::now() + Duration::from_millis(100)),
    };
    let r = run_jobs(
        vec![1, 2, 3, 4],
        1,
        limits,
        &Stuck::default(),
        blocking_job(Arc::clone(&gate), reads),
    );
    *gate.lock().unwrap() = true;
    assert_eq!(r[0], (1, Ok(10)));
    // In hand at the deadline, but not past the read timeout: not read
    // (and not taken for stuck).
    assert_eq!(r[1], (2, Err(Unread::NotReached)));
    assert_eq!(r[2], (3, Err(Unread::NotReached)));
    assert_eq!(r[3], (4, Err(Unread::NotReached)));
}

/// A /proc whose `self` names this process by its PID here, but which
/// lists it in two PID namespaces (an ancestor's /proc, the PIDs equal by
/// coincidence or a steered `ns_last_pid`), is not this namespace's.
#[test]
fn a_proc_of_an_ancestor_namespace_is_not_ours_even_when_self_matches() {
    let me = std::process::id();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join(me.to_string());
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::symlink(me.to_string(), root.path().join("self")).unwrap();
    let status = |nspid: &str| {
        let text = format!("Name:\tgpufree\nUid:\t0\t0\t0\t0\nNSpid:\t{nspid}\n");
        std::fs::write(dir.join("status"), text).unwrap();
        open_proc(root.path()).unwrap()
    };
    assert!(self_is_ours(&status(&me.to_string())));
    assert!(!self_is_ours(&status(&format!("{}\t{me}", me + 7))));
    // And a tree of files is no proc file system, whatever its `self`
    // says: a caller could make one.
    assert!(!proc_is_ours(&status(&me.to_string())));
    assert!(proc_is_ours(
        &open_proc(std::path::Path::new("/proc")).unwrap()
    ));
}

/// Files the kernel writes whole, read with one read fewer, come back
/// whole however long: a command line and an environment of several pages
/// (each read fills the buffer until the text ends), a status and a stat.
#[test]
fn a_file_written_whole_reads_whole_when_a_short_read_ends_it() {
    use super::{read_at, read_one_at};
    let long_arg = "a".repeat(10_000);
    // (sh keeps its own command line, its extra argument unused, and
    // waits on its stdin: no process of its own. It says when it runs: a
    // spawn returns once the exec has begun, before the kernel has set the
    // new command line.)
    let mut child = std::process::Command::new("sh")
        .args(["-c", "echo ready; read x", "sh"])
        .arg(&long_arg)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .env("GPUFREE_TEST_LONG", "e".repeat(20_000))
        .spawn()
        .unwrap();
    let mut ready = String::new();
    let out = child.stdout.take().unwrap();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut ready).unwrap();
    assert_eq!(ready, "ready\n");
    let dir = rustix::fs::open(
        format!("/proc/{}", child.id()).as_str(),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    // Its command line and environment do not change: read both ways,
    // the same bytes.
    for name in ["cmdline", "environ"] {
        let whole = read_at(&dir, name).unwrap();
        assert_eq!(read_one_at(&dir, name).unwrap(), whole, "{name}");
    }
    // Its status and stat may (it may still be starting): whole, to their
    // last line's end, and readable.
    for name in ["status", "stat", "cgroup"] {
        let read = read_one_at(&dir, name).unwrap();
        assert!(
            read.ends_with(b"\n"),
            "{name}: {}",
            String::from_utf8_lossy(&read)
        );
    }
    assert!(crate::proc::parse::parse_stat(&read_one_at(&dir, "stat").unwrap()).is_ok());
    let status = read_one_at(&dir, "status").unwrap();
    assert!(String::from_utf8_lossy(&status).contains("\nUid:"));
    let cmdline = read_one_at(&dir, "cmdline").unwrap();
    let tail = String::from_utf8_lossy(&cmdline[cmdline.len().saturating_sub(40)..]).into_owned();
    assert!(
        cmdline.len() > 10_000 && cmdline.ends_with(format!("{long_arg}\0").as_bytes()),
        "{} bytes, ending {tail:?}",
        cmdline.len()
    );
    assert!(read_one_at(&dir, "environ").unwrap().len() > 20_000);
    let _ = child.kill();
    let _ = child.wait();
}

/// The fd table is grown to hold the jobs' fds above those open (FDSize,
/// the table's slots, at least twice what it was), and the fd that grew
/// it is closed.
#[test]
fn the_fd_table_is_grown_for_the_jobs_fds() {
    let fd_size = || {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("FDSize:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap()
    };
    let before = fd_size();
    let more = (2 * before).max(256);
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    if (more as u64) + 64 > limit {
        eprintln!("skipped: a soft limit of {limit} open files leaves no room to grow to {more}");
        return;
    }
    super::jobs::reserve_fds(more);
    assert!(fd_size() >= more, "FDSize {} for {more}", fd_size());
    let open: Vec<u32> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    assert!(
        open.iter().all(|&fd| (fd as usize) < more),
        "an fd at or above {more} was left open: {open:?}"
    );
}

/// A pin is alive while its process lives and while it is a zombie, and
/// gone once reaped, whoever takes its PID after.
#[test]
fn a_pin_is_gone_only_once_its_process_is_reaped() {
    let mut child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let dir = open_dir(rustix::fs::CWD, &format!("/proc/{}", child.id())).unwrap();
    assert_eq!(still_pinned(&[&dir]), [true], "running");
    child.kill().unwrap();
    // A zombie until reaped: still the process the pin was read with.
    while !std::fs::read_to_string(format!("/proc/{}/stat", child.id()))
        .unwrap()
        .contains(") Z ")
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(still_pinned(&[&dir]), [true], "a zombie");
    child.wait().unwrap();
    assert_eq!(still_pinned(&[&dir]), [false], "reaped");
}
