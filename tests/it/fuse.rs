//! A holder that also has a file open on a FUSE file system whose GETATTR
//! blocks forever or answers EIO (tests/fuse/fusefs.py, a stdlib-only
//! server on /dev/fuse): the scan must neither stall on it nor drop the
//! holder. And the per-read deadline without FUSE: a fake /proc whose
//! `maps` is a FIFO that never opens.
//!
//! Every gpufree run here is under a watchdog: past its limit it is
//! killed and the test fails (a process stuck on the FUSE server only
//! dies once the server is gone, so the server is stopped first). The
//! server dies with its test, unmounting its mount point.

use crate::harness::*;
use gpufree::demo::holder::HoldSpec;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The test FUSE server, mounted on a temporary directory. Stopped (and
/// unmounted) on drop, a failing test included.
pub struct Fuse {
    server: Child,
    mnt: PathBuf,
    _tmp: tempfile::TempDir,
}

/// Without FUSE here: fails under CI (which must provide it), else skips.
fn unavailable(why: &str) -> Option<Fuse> {
    skip_off_ci("FUSE (root, /dev/fuse, python3)", &why);
    None
}

impl Fuse {
    /// Mounts the server in `mode` (`ok`, `block-getattr`, `eio-getattr`);
    /// None (skipped) where FUSE is unavailable.
    pub fn start(mode: &str) -> Option<Fuse> {
        if !Path::new("/dev/fuse").exists() {
            return unavailable("no /dev/fuse");
        }
        if !rustix::process::geteuid().is_root() {
            return unavailable("mounting the test FUSE server needs root");
        }
        let tmp = tempfile::tempdir().unwrap();
        let mnt = tmp.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let script = crate::harness::repo("tests/fuse/fusefs.py");
        let spawned = Command::new("python3")
            .arg(script)
            .arg(&mnt)
            .arg(mode)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut server = match spawned {
            Ok(c) => c,
            Err(e) => return unavailable(&format!("python3: {e}")),
        };
        let out = server.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
        let ready = rx
            .recv_timeout(Duration::from_secs(10))
            .is_ok_and(|l| l.trim() == "ready");
        let mut fuse = Fuse {
            server,
            mnt,
            _tmp: tmp,
        };
        if !ready {
            fuse.stop();
            let mut err = String::new();
            if let Some(mut e) = fuse.server.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            return unavailable(&format!("the FUSE server did not mount: {}", err.trim()));
        }
        Some(fuse)
    }

    /// The one file it serves.
    pub fn file(&self) -> PathBuf {
        self.mnt.join("f")
    }

    /// Stops the server: SIGTERM (it unmounts and closes /dev/fuse, which
    /// fails every request still waiting), SIGKILL after 3 s, then a lazy
    /// unmount in case it could not.
    pub fn stop(&mut self) {
        if self.server.try_wait().unwrap().is_none() {
            let pid = rustix::process::Pid::from_child(&self.server);
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            let deadline = Instant::now() + Duration::from_secs(3);
            while self.server.try_wait().unwrap().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self.server.kill();
            let _ = self.server.wait();
        }
        let mounted = std::fs::read_to_string("/proc/self/mounts")
            .unwrap_or_default()
            .lines()
            .any(|l| l.split(' ').nth(1) == Some(self.mnt.to_str().unwrap()));
        if mounted {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
    }
}

impl Drop for Fuse {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A gpufree run under a watchdog.
struct Timed {
    /// None when the watchdog had to kill it.
    run: Option<Output>,
    took: Duration,
}

/// Runs `gpufree`; past `limit` kills it, stops `fuse` (only then can a
/// process stuck on it die) and reaps it.
fn timed(gpufree: &Gpufree, limit: Duration, fuse: Option<&mut Fuse>) -> Timed {
    let started = Instant::now();
    let mut cmd = gpufree.command();
    let line = command_line(&cmd);
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gpufree starts");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = r.read_to_end(&mut s);
            s
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let took = started.elapsed();
            eprintln!("{line}: exit {:?} after {took:?}", status.code());
            return Timed {
                run: Some(Output::of(
                    &cmd,
                    status.code().unwrap_or(-1),
                    stdout.join().unwrap(),
                    stderr.join().unwrap(),
                )),
                took,
            };
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            if let Some(f) = fuse {
                f.stop();
            }
            let _ = child.wait();
            eprintln!("{line}: killed after {limit:?}");
            return Timed {
                run: None,
                took: started.elapsed(),
            };
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

const WATCHDOG: Duration = Duration::from_secs(10);

/// A holder of nvidia0 that also keeps `extra` open (the FUSE file).
fn holder_with(d: &TestDir, extra: &[PathBuf]) -> gpufree::demo::holder::Spawned {
    let mut fd = vec![d.node("nvidia0")];
    fd.extend(extra.iter().cloned());
    hold(
        &["gpufree"],
        HoldSpec {
            fd,
            ..HoldSpec::default()
        },
    )
}

/// The device directory of `d` and the simulator with an idle GPU.
struct Sim {
    dev: PathBuf,
    state: PathBuf,
}

impl Sim {
    fn new(d: &TestDir) -> Sim {
        Sim {
            dev: d.dev.clone(),
            state: d.one_gpu(&[], 0),
        }
    }

    /// `gpufree CMD... --dev-dir D --nvml-lib L` under the watchdog.
    fn run(&self, cmd: &[&str], fuse: &mut Fuse) -> Timed {
        let gpufree = Gpufree::new(cmd).dev(&self.dev).sim(&self.state);
        timed(&gpufree, WATCHDOG, Some(fuse))
    }
}

fn finished(t: Timed, what: &str) -> Output {
    t.run
        .unwrap_or_else(|| panic!("{what} hung: killed by the watchdog after {WATCHDOG:?}"))
}

/// Starts `python3 -c 'os.stat(path)'`; returns it once it is about to stat.
fn stat_in_child(path: &Path) -> Child {
    let mut c = Command::new("python3")
        .args([
            "-c",
            "import os, sys; print('stat', flush=True); os.stat(sys.argv[1]); print('returned')",
        ])
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = BufReader::new(c.stdout.take().unwrap());
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "stat");
    c
}

#[test]
fn holder_with_a_fuse_file_whose_getattr_blocks_hangs_neither_status_nor_wait() {
    let Some(mut fuse) = Fuse::start("block-getattr") else {
        return;
    };
    let d = TestDir::new(1);
    let sim = Sim::new(&d);
    let holder = holder_with(&d, &[fuse.file()]);

    let t = sim.run(&["status", "--json"], &mut fuse);
    let took = t.took;
    let r = finished(t, "status");
    r.assert_exit(0);
    let doc = r.json();
    let p = process(&doc, holder.pid())
        .unwrap_or_else(|| panic!("the holder is listed: {doc}\nstatus took {took:?}"));
    assert_eq!(via(p, "nvidia0"), ["fd"]);
    assert!(
        !doc["visibility"]["unreadable"]
            .as_array()
            .unwrap()
            .iter()
            .any(|u| u["pid"] == holder.pid() || u["reason"] == "timeout"),
        "nothing needed the read deadline: {}",
        doc["visibility"]
    );
    assert_eq!(doc["verdict"]["state"], "busy", "{}", doc["verdict"]);
    assert!(
        took < Duration::from_secs(4),
        "status took {took:?}: the default 5 s read deadline must not have been needed"
    );

    let t = sim.run(&["wait", "--timeout", "2s"], &mut fuse);
    let took = t.took;
    let r = finished(t, "wait --timeout 2s");
    r.assert_exit_with(1, format_args!("busy at the timeout: {}", r.stderr));
    assert!(
        took <= Duration::from_millis(2500),
        "wait --timeout 2s took {took:?}"
    );

    // The hazard is real: an ordinary stat of the file blocks (and, once the
    // server has read the request, even SIGKILL waits for the server).
    let mut stat = stat_in_child(&fuse.file());
    std::thread::sleep(Duration::from_secs(1));
    let blocked = stat.try_wait().unwrap().is_none();
    let _ = stat.kill();
    fuse.stop();
    let _ = stat.wait();
    assert!(blocked, "a plain stat of the FUSE file returned: no hazard");
}

/// Signals our own child `pid` with SIGUSR1 (which it catches) until it is
/// in D (up to 5 s): a FUSE request waits interruptibly until a signal,
/// then killably. A signal that comes before the read only runs the
/// handler, one during the requests that open the file only makes their
/// answered wait killable for a moment: the read is the wait that stays.
fn signal_into_d(pid: u32) {
    let target = rustix::process::Pid::from_raw(pid as i32).unwrap();
    let in_d = || crate::harness::stat(pid).unwrap().state == 'D';
    for _ in 0..100 {
        rustix::process::kill_process(target, rustix::process::Signal::USR1).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        if in_d() {
            std::thread::sleep(Duration::from_millis(30));
            if in_d() {
                return;
            }
        }
    }
    panic!("{pid} never stayed in D");
}

/// Trust III, item 6: a holder reading a FUSE file whose daemon never
/// answers the READ is in D once a signal has moved FUSE's wait to its
/// killable one (as an NFS or Lustre read is in D), in
/// `request_wait_answer`, not in a GPU driver: `check` warns, and Slurm's
/// health check (exit 2) does not drain the node.
#[test]
fn a_holder_in_d_on_a_fuse_read_is_a_warning_not_a_drain() {
    // Declared first, dropped last: the holder can only die once the
    // server is gone.
    let mut holder: Option<gpufree::demo::holder::Spawned> = None;
    let Some(mut fuse) = Fuse::start("block-read") else {
        return;
    };
    let d = TestDir::new(1);
    let sim = Sim::new(&d);
    let pid = holder
        .insert(hold(
            &["gpufree"],
            HoldSpec {
                fd: vec![d.node("nvidia0")],
                read_after_ready: Some(fuse.file()),
                ..HoldSpec::default()
            },
        ))
        .pid();
    signal_into_d(pid);
    let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap();
    assert_eq!(wchan.trim(), "request_wait_answer");

    let memory = d.tmp.path().join("check.json");
    let state = ["--state", memory.to_str().unwrap()];
    let r = finished(
        sim.run(
            &[&["check", "--format", "slurm"][..], &state].concat(),
            &mut fuse,
        ),
        "check --format slurm",
    );
    r.assert_exit_with(2, format_args!("not drained: {}{}", r.stdout, r.stderr));
    let r = finished(
        sim.run(
            &[&["check", "--format", "json"][..], &state].concat(),
            &mut fuse,
        ),
        "check --format json",
    );
    r.assert_exit(1);
    let doc = r.json();
    assert_eq!(doc["level"], "warning", "{doc}");
    let stuck: Vec<&Value> = doc["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["condition"] == "stuck")
        .collect();
    assert_eq!(stuck.len(), 1, "{doc}");
    assert_eq!(stuck[0]["level"], "warning", "{doc}");
    assert_eq!(stuck[0]["processes"][0][0], pid, "{doc}");
    let why = stuck[0]["why"].as_str().unwrap();
    assert!(
        why.starts_with("waits in request_wait_answer") && why.ends_with("not in the GPU driver"),
        "{why}"
    );
    fuse.stop();
}

#[test]
fn holder_with_a_fuse_file_whose_getattr_fails_eio_is_not_dropped() {
    let Some(mut fuse) = Fuse::start("eio-getattr") else {
        return;
    };
    let err = std::fs::metadata(fuse.file()).expect_err("stat of the file fails");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    let d = TestDir::new(1);
    let sim = Sim::new(&d);
    let holder = holder_with(&d, &[fuse.file()]);

    let r = finished(sim.run(&["status", "--json"], &mut fuse), "status");
    r.assert_exit(0);
    let doc = r.json();
    let p = process(&doc, holder.pid()).unwrap_or_else(|| panic!("the holder is listed: {doc}"));
    assert_eq!(via(p, "nvidia0"), ["fd"]);
    assert_eq!(doc["verdict"]["state"], "busy", "{}", doc["verdict"]);

    let r = finished(sim.run(&["why", "--no-color"], &mut fuse), "why");
    r.assert_exit_with(1, format_args!("busy: {}{}", r.stdout, r.stderr));
    assert!(
        r.stdout.contains(&holder.pid().to_string()),
        "why names the holder {}:\n{}",
        holder.pid(),
        r.stdout
    );
    let r = finished(sim.run(&["why", "--json"], &mut fuse), "why --json");
    r.assert_exit(1);
    let doc = r.json();
    assert!(
        doc["findings"].as_array().unwrap().iter().any(|f| f["pids"]
            .as_array()
            .is_some_and(|p| p.contains(&holder.pid().into()))),
        "a finding names the holder: {}",
        doc["findings"]
    );
}

#[test]
fn process_holding_only_a_fuse_file_that_blocks_or_fails_getattr_is_no_holder() {
    for mode in ["block-getattr", "eio-getattr"] {
        let Some(mut fuse) = Fuse::start(mode) else {
            return;
        };
        let d = TestDir::new(1);
        let sim = Sim::new(&d);
        let other = hold(
            &["gpufree"],
            HoldSpec {
                fd: vec![fuse.file()],
                ..HoldSpec::default()
            },
        );
        let r = finished(sim.run(&["status", "--json"], &mut fuse), "status");
        r.assert_exit_with(0, format_args!("{mode}: {}", r.stderr));
        let doc = r.json();
        assert!(
            process(&doc, other.pid()).is_none(),
            "{mode}: not a holder: {doc}"
        );
        assert_eq!(
            doc["gpus"][0]["verdict"]["state"], "free",
            "{mode}: {}",
            doc["gpus"][0]["verdict"]
        );
        let r = finished(sim.run(&["why"], &mut fuse), "why");
        r.assert_exit_with(0, format_args!("{mode}: free: {}{}", r.stdout, r.stderr));
    }
}

/// A fake /proc with a clean process and one whose `maps` is a FIFO with no
/// writer (opening it blocks), over an idle simulated GPU: with a 500 ms
/// read deadline every command answers "unknown" within about 1.5 s.
#[test]
fn read_that_blocks_in_a_fake_proc_times_out_and_makes_the_verdict_unknown() {
    let d = TestDir::new(1);
    let fake = FakeProc::new(d.tmp.path());
    let clean = |pid| FakeProcess {
        pid,
        ppid: 1,
        comm: "python3",
        state: 'S',
        start: 10,
        cmdline: &["python3", "serve.py"],
        exe: "/usr/bin/python3.12",
        uid: 0,
        cgroup: "0::/\n",
        fds: &[],
        maps: &[],
    };
    fake.add(&clean(100));
    fake.add(&clean(200));
    let maps = fake.root.join("200/maps");
    let file_maps = std::fs::read(&maps).unwrap();
    std::fs::remove_file(&maps).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &maps,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let state = d.one_gpu(&[], 0);
    let run = |cmd: &[&'static str]| {
        let gpufree = Gpufree::new(cmd)
            .proc_root(&fake.root)
            .on(&d, &state)
            .env("GPUFREE_READ_TIMEOUT", "500ms");
        let t = timed(&gpufree, WATCHDOG, None);
        let took = t.took;
        (finished(t, &cmd.join(" ")), took)
    };
    let limit = Duration::from_millis(1500);

    let (r, took) = run(&["status", "--json"]);
    r.assert_exit(0);
    assert!(took <= limit, "status took {took:?}");
    let doc = r.json();
    let unreadable = doc["visibility"]["unreadable"].as_array().unwrap();
    assert!(
        unreadable
            .iter()
            .any(|u| u["pid"] == 200 && u["reason"] == "timeout"),
        "PID 200 timed out: {}",
        doc["visibility"]
    );
    assert!(
        !unreadable.iter().any(|u| u["pid"] == 100),
        "{}",
        doc["visibility"]
    );
    let verdict: &Value = &doc["verdict"];
    assert_eq!(verdict["state"], "unknown", "{verdict}");
    assert!(verdict["reasons"].to_string().contains("200"), "{verdict}");

    let (r, took) = run(&["why"]);
    r.assert_exit_with(3, format_args!("unknown: {}{}", r.stdout, r.stderr));
    assert!(took <= limit, "why took {took:?}");

    let (r, took) = run(&["wait", "--timeout", "1s"]);
    r.assert_exit_with(3, format_args!("unknown at the timeout: {}", r.stderr));
    assert!(took <= limit, "wait --timeout 1s took {took:?}");

    // The same tree with an ordinary maps file: free, so the FIFO alone
    // made it unknown.
    std::fs::remove_file(&maps).unwrap();
    std::fs::write(&maps, file_maps).unwrap();
    let (r, _) = run(&["why"]);
    r.assert_exit_with(
        0,
        format_args!("free without the FIFO: {}{}", r.stdout, r.stderr),
    );
}

/// The in-kernel walk's boot cache named on a FUSE mount that answers
/// nothing, directly or through a link: gpufree never asks the server
/// (each directory on the way is found on a local file system, by its
/// mount id, before anything in it is looked up, and no link is
/// followed). It finishes, says why the cache is not used, and walks.
#[test]
fn a_boot_cache_on_a_stuck_fuse_mount_is_never_asked() {
    let d = TestDir::new(1);
    if !crate::bpf::per_process_walk_runs(&d) {
        return;
    }
    let Some(mut fuse) = Fuse::start("block-all") else {
        return;
    };
    let link = d.tmp.path().join("to-fuse");
    std::os::unix::fs::symlink(&fuse.mnt, &link).unwrap();
    let cases = [
        (fuse.mnt.join("cache"), "on a fuse"),
        (fuse.mnt.clone(), "on a fuse"),
        (link.join("cache"), "a link, or not a directory"),
        (link.clone(), "a link, or not a directory"),
    ];
    for (dir, why) in cases {
        // auto looks at the cache between its crossovers (the tests' count).
        for (scan, files) in [("bpf", "100"), ("auto", "12000")] {
            let gpufree = Gpufree::new(["status", "--json", "--scan", scan])
                .dev(&d.dev)
                .no_nvml()
                .env("GPUFREE_BPF_CACHE", &dir)
                .env("GPUFREE_TEST_OPEN_FILES", files);
            let t = timed(&gpufree, Duration::from_secs(20), Some(&mut fuse));
            let what = format!("--scan {scan} with the cache at {}", dir.display());
            let run = finished(t, &what);
            run.assert_exit_with(0, format_args!("{what}: {}", run.stderr));
            let v = &run.json()["visibility"];
            let reason = v["scan_reason"].as_str().unwrap();
            let want = if scan == "bpf" { "bpf" } else { "procfs" };
            assert_eq!(v["scan"], want, "{what}: {reason}");
            if scan == "bpf" {
                assert!(reason.contains(why), "{what}: {reason}");
            }
        }
    }
}
