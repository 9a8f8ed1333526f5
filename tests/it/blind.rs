//! A blind spot even root has (issue: "GPU memory used with no visible
//! holder and one unreadable process"): PID 1 of gpufree's PID namespace
//! cannot be read, as an outer sandbox's init on a container or VM host.
//! Built with real processes: a new PID namespace whose init (python3) makes
//! itself non-dumpable, and gpufree run inside that namespace as root of a
//! child user namespace, so it is root there but has no CAP_SYS_PTRACE over
//! the init's user namespace and /proc/1's fds, maps and exe are denied to
//! it. None of this depends on the machine's own PID 1.

use crate::harness::*;
use serde_json::Value;
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The namespace's init: non-dumpable, then asleep until killed.
const INIT: &str = "\
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE, 0
    sys.exit('prctl(PR_SET_DUMPABLE, 0) failed: errno %d' % ctypes.get_errno())
print('ready', flush=True)
time.sleep(3600)
";

/// A PID namespace (`unshare --pid --fork --mount-proc --kill-child`) and
/// its init. Dropping it kills the init (through a pidfd opened once its
/// parent was seen to be our unshare) and the unshare, reaps the unshare
/// and waits until the init is gone, whatever failed before.
struct Namespace {
    unshare: Child,
    init: Option<(u32, rustix::fd::OwnedFd)>,
}

impl Drop for Namespace {
    fn drop(&mut self) {
        if let Some((_, fd)) = &self.init {
            let _ = rustix::process::pidfd_send_signal(fd, rustix::process::Signal::KILL);
        }
        // unshare ignores SIGTERM while it waits; --kill-child makes its
        // death the init's too.
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
        if let Some((pid, _)) = &self.init {
            let deadline = Instant::now() + Duration::from_secs(5);
            while alive(*pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if alive(*pid) && !std::thread::panicking() {
                panic!("the namespace's init {pid} outlived its unshare");
            }
        }
    }
}

/// Fails under CI (which runs as root with namespaces), skips elsewhere.
fn cannot(why: &str) {
    skip_off_ci("an unreadable PID 1 (root, namespaces)", &why);
}

impl Namespace {
    /// Starts the namespace; Err says why this environment cannot.
    fn start() -> Result<Namespace, String> {
        let mut unshare = Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "--kill-child", "--"])
            .args(["python3", "-c", INIT])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("unshare does not run: {e}"))?;
        let mut line = String::new();
        let read = std::io::BufReader::new(unshare.stdout.take().expect("stdout piped"))
            .read_line(&mut line);
        let mut ns = Namespace {
            unshare,
            init: None,
        };
        if read.is_err() || line.trim() != "ready" {
            let _ = ns.unshare.kill();
            let out = ended(&mut ns.unshare);
            return Err(format!("the namespace's init never got ready: {out}"));
        }
        // The init: the one child of our unshare.
        let parent = ns.unshare.id();
        let deadline = Instant::now() + Duration::from_secs(5);
        let init = loop {
            if let Some(pid) = child_of(parent) {
                break pid;
            }
            if Instant::now() > deadline {
                return Err(format!("no child of unshare {parent} found"));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let fd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(init as i32).expect("a PID"),
            rustix::process::PidfdFlags::empty(),
        )
        .map_err(|e| format!("pidfd_open({init}): {e}"))?;
        // The pidfd names our init only if that PID is still unshare's child.
        if child_of(parent) != Some(init) {
            return Err(format!("the init {init} changed under us"));
        }
        let nspid = std::fs::read(format!("/proc/{init}/status"))
            .ok()
            .and_then(|b| gpufree::proc::parse::parse_status(&b).ok())
            .map(|s| s.nspid)
            .unwrap_or_default();
        ns.init = Some((init, fd));
        if nspid.last() != Some(&1) {
            return Err(format!(
                "the init {init} is not PID 1 inside: NSpid {nspid:?}"
            ));
        }
        Ok(ns)
    }

    fn init_pid(&self) -> u32 {
        self.init.as_ref().expect("started").0
    }

    /// `PROGRAM ARGS` run inside the namespace (its PID and mount
    /// namespaces) as root of a new child user namespace.
    fn inside(&self, program: &Path, args: &[&str]) -> Command {
        let [first, rest @ ..] = &self.wrapper()[..] else {
            unreachable!()
        };
        let mut c = Command::new(first);
        c.args(rest).arg(program).args(args);
        c
    }

    /// The command line that runs a program inside (see [`Self::inside`]).
    fn wrapper(&self) -> Vec<String> {
        let init = self.init_pid().to_string();
        ["nsenter", "--target", &init, "--pid", "--mount", "--"]
            .into_iter()
            .chain(["unshare", "--user", "--map-root-user", "--"])
            .map(String::from)
            .collect()
    }
}

/// How a killed child ended, with what it wrote to stderr.
fn ended(child: &mut Child) -> String {
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
    format!("{status}: {}", err.trim())
}

/// The one process whose parent is `parent`, if there is exactly one.
fn child_of(parent: u32) -> Option<u32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(b) = std::fs::read(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if gpufree::proc::parse::parse_stat(&b).is_ok_and(|s| s.ppid == parent) {
            found.push(pid);
        }
    }
    (found.len() == 1).then(|| found[0])
}

/// gpufree `args` inside the namespace, against the simulator.
fn gpufree_inside(ns: &Namespace, d: &TestDir, state: &Path, args: &[&str]) -> Gpufree {
    Gpufree::new(args)
        .on(d, state)
        .env("GPUFREE_READ_TIMEOUT", "2s")
        .wrapped(ns.wrapper())
}

#[test]
fn unreadable_pid_1_with_leaked_memory_gives_the_driver_verdict_first() {
    if !rustix::process::geteuid().is_root() {
        return cannot("a PID namespace and its init need root");
    }
    let ns = match Namespace::start() {
        Ok(ns) => ns,
        Err(why) => return cannot(&why),
    };
    // The blind spot itself, seen by a tool other than gpufree: root of the
    // child user namespace may not read the init's exe link.
    let probe = run_cmd(&mut ns.inside(Path::new("readlink"), &["-v", "/proc/1/exe"]));
    if probe.code == 0 || !probe.stderr.contains("ermission denied") {
        return cannot(&format!(
            "root of a child user namespace can read its PID namespace's init here (or nsenter/unshare --user failed): exit {}, {:?} {:?}",
            probe.code, probe.stdout, probe.stderr
        ));
    }

    let d = TestDir::new(1);
    let mut g = sim_gpu(0, &[], 0);
    g["leaked_bytes"] = serde_json::json!(4u64 << 30);
    let state = d.state(&sim_state(vec![g]));

    // What the scan makes of it: PID 1 unreadable for lack of permission,
    // as root, in a namespace that is not taken for a nested one.
    let status = gpufree_inside(&ns, &d, &state, &["status", "--json"]).run();
    status.assert_exit(0);
    let vis = status.json()["visibility"].clone();
    let unreadable = vis["unreadable"].as_array().expect("visibility.unreadable");
    assert!(
        unreadable
            .iter()
            .any(|u| u["pid"] == 1 && u["reason"] == "permission"),
        "PID 1 is not reported unreadable: {vis}"
    );
    assert_eq!(vis["root"], true, "{vis}");

    // why --json: unknown (SPEC.md: memory NVML attributes to nobody while
    // a process could not be read), exit 3; the driver's verdict first.
    let why = gpufree_inside(&ns, &d, &state, &["why", "--json"]).run();
    let doc: Value = why.json();
    why.assert_exit(3);
    assert_eq!(doc["verdict"]["state"], "unknown", "{}", doc["verdict"]);
    let first = &doc["findings"][0];
    assert_eq!(
        first["kind"], "driver-held-memory",
        "first finding: {:#}",
        doc["findings"]
    );
    assert_eq!(first["gpus"], serde_json::json!([0]), "{first:#}");
    assert_eq!(first["next"], "nvidia-smi --gpu-reset -i 0", "{first:#}");
    let details: Vec<&str> = first["details"]
        .as_array()
        .expect("details")
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    // The caveat names PID 1 and why it could not be read.
    let caveat = details
        .iter()
        .find(|l| l.contains("caveat"))
        .unwrap_or_else(|| panic!("no caveat in the details: {details:#?}"));
    assert!(caveat.contains("PID 1"), "caveat: {caveat}");
    assert!(
        caveat.contains("permission denied"),
        "the caveat does not say why PID 1 could not be read: {caveat:?}\nfull finding: {first:#}"
    );
    // Then the reset plan: blockers (none here), then the reset command.
    let blockers = details
        .iter()
        .position(|l| l.starts_with("blockers:") || l.starts_with("1. stop "))
        .unwrap_or_else(|| panic!("no blockers in the plan: {details:#?}"));
    let reset = details
        .iter()
        .position(|l| l.ends_with("reset: `nvidia-smi --gpu-reset -i 0`"))
        .unwrap_or_else(|| panic!("no reset line in the plan: {details:#?}"));
    assert!(blockers < reset, "{details:#?}");
    assert!(
        !why.stdout.contains("sudo"),
        "sudo offered to root: {doc:#}"
    );
    assert!(!why.stderr.contains("sudo"), "{}", why.stderr);

    // The same as text.
    let text = gpufree_inside(&ns, &d, &state, &["why", "--no-color", "--wide"]).run();
    text.assert_exit(3);
    let first_line = text
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("1. "))
        .unwrap_or_else(|| panic!("no numbered finding:\n{}", text.stdout));
    assert!(
        first_line.contains("memory the driver holds")
            && first_line.ends_with("(inferred, not reported by the driver)"),
        "first finding in text: {first_line:?}\n{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("nvidia-smi --gpu-reset -i 0"),
        "{}",
        text.stdout
    );
    assert!(
        !text.stdout.contains("sudo") && !text.stderr.contains("sudo"),
        "sudo offered to root:\n{}\n{}",
        text.stdout,
        text.stderr
    );
}
