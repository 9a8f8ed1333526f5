//! The integration harness: a temporary device directory with plain-file
//! GPU nodes, a simulator state beside it, and real holder processes
//! started from the gpufree binary (renamed, holding and mapping the
//! nodes); gpufree itself runs through the command builder (cmd.rs). Tests
//! never open the machine's real GPU nodes and signal only the processes
//! they started.

#[allow(unused_imports)] // Re-exported for the tests; tests/collect uses a part.
pub use crate::cmd::{bin, bpf_cache, command_line, run_cmd, scratch, sim_lib, Gpufree, Output};
use gpufree::demo::holder::{self, ChildSpec, HoldSpec, Spawned};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A temporary device directory (`dev/`) with nodes for `gpus` GPUs, plus
/// room for a simulator state.
pub struct TestDir {
    pub tmp: tempfile::TempDir,
    pub dev: PathBuf,
}

/// The builder's step for a [`TestDir`] (here, not in `cmd.rs`, which the
/// property tests share without the harness).
impl Gpufree {
    /// On a test's machine: its device directory (`--dev-dir`) and the
    /// simulated NVML over `state` ([`Gpufree::sim`]).
    pub fn on(self, dir: &TestDir, state: impl AsRef<Path>) -> Gpufree {
        self.dev(&dir.dev).sim(state)
    }
}

impl TestDir {
    pub fn new(gpus: u32) -> TestDir {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dev = tmp.path().join("dev");
        std::fs::create_dir(&dev).unwrap();
        let mut names: Vec<String> = (0..gpus).map(|i| format!("nvidia{i}")).collect();
        names.extend(["nvidiactl".into(), "nvidia-uvm".into()]);
        for n in names {
            std::fs::write(dev.join(n), vec![0u8; 4096]).unwrap();
        }
        TestDir { tmp, dev }
    }

    pub fn node(&self, name: &str) -> PathBuf {
        self.dev.join(name)
    }

    /// A holder (the gpufree binary) that opens and maps `node`.
    pub fn mapper(&self, node: &str) -> Spawned {
        hold(
            &["gpufree"],
            HoldSpec {
                mmap: vec![self.node(node)],
                ..HoldSpec::default()
            },
        )
    }

    /// A holder of `node` that exited at once and is never reaped by us
    /// until it drops: a zombie, whose parent is the test process.
    pub fn zombie(&self, node: &str) -> Spawned {
        let z = hold(
            &["gpufree"],
            HoldSpec {
                mmap: vec![self.node(node)],
                exit_after_ms: Some(0),
                ..HoldSpec::default()
            },
        );
        wait_state(z.pid(), 'Z');
        z
    }

    /// A one-GPU simulator state with `procs` (pid, MiB, visible) and a
    /// release delay; returns its path.
    pub fn one_gpu(&self, procs: &[(u32, u64, &str)], delay_ms: u64) -> PathBuf {
        self.state(&sim_state(vec![sim_gpu(0, procs, delay_ms)]))
    }

    /// Writes a simulator state; returns its path.
    pub fn state(&self, state: &Value) -> PathBuf {
        let p = self.tmp.path().join("state.json");
        std::fs::write(&p, serde_json::to_vec_pretty(state).unwrap()).unwrap();
        p
    }
}

/// One simulated GPU with the given processes `(pid, MiB, visible)`.
pub fn sim_gpu(index: u32, procs: &[(u32, u64, &str)], delay_ms: u64) -> Value {
    let processes: Vec<Value> = procs
        .iter()
        .map(|(pid, mib, vis)| json!({"pid": pid, "used_bytes": mib << 20, "type": "compute", "visible": vis}))
        .collect();
    json!({
        "name": "NVIDIA H200",
        "uuid": format!("GPU-aa{index:02}bb00-1111-2222-3333-444455556666"),
        "pci_bus_id": format!("00000000:{:02X}:00.0", 0x18 + index),
        "minor_number": index,
        "memory_total_bytes": 150_754_820_096u64,
        "memory_baseline_bytes": 0,
        "release_delay_ms": delay_ms,
        "processes": processes,
    })
}

pub fn sim_state(gpus: Vec<Value>) -> Value {
    json!({"driver_version": "580.95.05", "cuda_driver_version": 13000, "devices": gpus})
}

/// Starts a holder tree from the gpufree binary with `argv`.
pub fn hold(argv: &[&str], spec: HoldSpec) -> Spawned {
    let child = ChildSpec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        spec,
    };
    holder::spawn(&bin(), &child).expect("holder starts")
}

/// `b` as lowercase hex (raw bytes through argv or the environment to a
/// python3 child that decodes them).
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Starts `cmd` (stdin closed, stdout piped) and waits for its `ready`
/// line: a test process that reports once it is set up.
pub fn spawn_ready(cmd: &mut Command) -> std::process::Child {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("child starts");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().expect("stdout piped")),
        &mut line,
    )
    .expect("ready line");
    assert_eq!(line.trim(), "ready");
    child
}

/// The findings of `kind` in a JSON document (`status`/`why --json`); a
/// document without findings fails the test (never "none of that kind").
pub fn findings_of<'a>(doc: &'a Value, kind: &str) -> Vec<&'a Value> {
    let all = doc["findings"].as_array();
    let all = all.unwrap_or_else(|| panic!("no findings in {doc:#}"));
    all.iter().filter(|f| f["kind"] == kind).collect()
}

/// PIDs of a JSON array.
pub fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .map(|a| a.iter().map(|p| p.as_u64().unwrap() as u32).collect())
        .unwrap_or_default()
}

/// Of `pids` (processes that a test's own holders forked, as gpufree
/// reported them), those still alive; each of them is then killed through
/// a pidfd, once /proc shows that the pidfd names a process whose command
/// line contains `marker` (so a PID reused since is never touched).
pub fn survivors_reaped(pids: &[u32], marker: &str) -> Vec<u32> {
    let mut alive_ones = Vec::new();
    for &pid in pids {
        let Ok(fd) = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(pid as i32).unwrap(),
            rustix::process::PidfdFlags::empty(),
        ) else {
            continue; // gone
        };
        let ours = std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker));
        if ours && alive(pid) {
            alive_ones.push(pid);
            let _ = rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL);
        }
    }
    alive_ones
}

/// The process with `pid` in a status document.
pub fn process(doc: &Value, pid: u32) -> Option<&Value> {
    doc["processes"]
        .as_array()?
        .iter()
        .find(|p| p["pid"] == pid)
}

/// `via` of the device whose path ends with `/name`, as strings.
pub fn via(proc_: &Value, name: &str) -> Vec<String> {
    proc_["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["path"].as_str().unwrap().ends_with(&format!("/{name}")))
        .map(|d| {
            d["via"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a PID exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    gpufree::proc::scan::alive(pid)
}

/// A fake /proc tree (for `--proc-root`): plain files with the kernel's
/// formats, fd entries as symlinks to nodes, maps lines naming the nodes'
/// device and inode.
pub struct FakeProc {
    pub root: PathBuf,
}

/// One fake process.
pub struct FakeProcess<'a> {
    pub pid: u32,
    pub ppid: u32,
    pub comm: &'a str,
    pub state: char,
    pub start: u64,
    pub cmdline: &'a [&'a str],
    pub exe: &'a str,
    pub uid: u32,
    pub cgroup: &'a str,
    pub fds: &'a [&'a Path],
    pub maps: &'a [&'a Path],
}

impl FakeProc {
    pub fn new(dir: &Path) -> FakeProc {
        let root = dir.join("proc");
        std::fs::create_dir_all(&root).unwrap();
        FakeProc { root }
    }

    /// A fake /proc whose one process (an init) holds nothing: a complete
    /// view in which nobody holds a GPU. (A proc root that lists no
    /// process at all is refused: it is no view.)
    pub fn idle(dir: &Path) -> FakeProc {
        let fake = FakeProc::new(dir);
        fake.add(&FakeProcess {
            pid: 1,
            ppid: 0,
            comm: "init",
            state: 'S',
            start: 1,
            cmdline: &["/sbin/init"],
            exe: "/sbin/init",
            uid: 0,
            cgroup: "0::/init.scope",
            fds: &[],
            maps: &[],
        });
        fake
    }

    pub fn add(&self, p: &FakeProcess<'_>) {
        use std::os::unix::fs::MetadataExt;
        let d = self.root.join(p.pid.to_string());
        std::fs::create_dir_all(d.join("fd")).unwrap();
        let mut fields: Vec<String> = (3..=52).map(|_| "0".to_string()).collect();
        fields[0] = p.state.to_string();
        fields[1] = p.ppid.to_string();
        fields[17] = "1".into();
        fields[19] = p.start.to_string();
        std::fs::write(
            d.join("stat"),
            format!("{} ({}) {}\n", p.pid, p.comm, fields.join(" ")),
        )
        .unwrap();
        std::fs::write(d.join("comm"), format!("{}\n", p.comm)).unwrap();
        std::fs::write(
            d.join("status"),
            format!(
                "Name:\t{}\nUid:\t{u}\t{u}\t{u}\t{u}\nNSpid:\t{}\n",
                p.comm,
                p.pid,
                u = p.uid
            ),
        )
        .unwrap();
        let mut cmd = p.cmdline.join("\0");
        cmd.push('\0');
        std::fs::write(d.join("cmdline"), cmd).unwrap();
        std::os::unix::fs::symlink(p.exe, d.join("exe")).unwrap();
        std::fs::write(d.join("cgroup"), p.cgroup).unwrap();
        for (i, node) in p.fds.iter().enumerate() {
            std::os::unix::fs::symlink(node, d.join("fd").join((3 + i).to_string())).unwrap();
        }
        let mut maps = String::from(
            "55d0c0000000-55d0c0001000 r--p 00000000 fd:01 1234 /usr/bin/python3.12\n",
        );
        for node in p.maps {
            let m = std::fs::metadata(node).unwrap();
            maps.push_str(&format!(
                "7f0000000000-7f0000001000 rw-s 00000000 {:02x}:{:02x} {}                 {}\n",
                rustix::fs::major(m.dev()),
                rustix::fs::minor(m.dev()),
                m.ino(),
                node.display()
            ));
        }
        maps.push_str(
            "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]\n",
        );
        std::fs::write(d.join("maps"), maps).unwrap();
    }

    /// Writes the fdinfo of fd `3 + index` of `pid` (what the kernel shows
    /// of that fd: for a DRM node, its client's drm-usage-stats).
    pub fn fdinfo(&self, pid: u32, index: usize, text: &str) {
        let d = self.root.join(pid.to_string()).join("fdinfo");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join((3 + index).to_string()), text).unwrap();
    }

    /// `gpufree status --json` over this tree and `dev`, without NVML.
    pub fn status(&self, dev: &Path) -> Value {
        Gpufree::new(["status"])
            .json()
            .proc_root(&self.root)
            .dev(dev)
            .no_nvml()
            .doc()
    }
}

/// `path` inside the repository (contrib files, scripts, fixtures).
pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// What /proc/PID/stat says of `pid` (state, parent, comm); None once it
/// is gone.
pub fn stat(pid: u32) -> Option<gpufree::proc::parse::Stat> {
    let bytes = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    Some(gpufree::proc::parse::parse_stat(&bytes).unwrap())
}

/// Waits (up to 2 s) until `pid` is in state `want` (e.g. 'Z', 'T').
pub fn wait_state(pid: u32, want: char) {
    for _ in 0..200 {
        if stat(pid).is_some_and(|s| s.state == want) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{pid} never reached state {want}");
}

/// A copy of gpufree and of the simulated NVML library that any user may
/// run: the checkout may sit below a directory only root may enter (a
/// clone in `mktemp -d`), so they are placed in the test's own directory
/// (`kit/`), opened to others.
pub struct Kit {
    pub gpufree: PathBuf,
    pub lib: PathBuf,
}

/// The [`Kit`] in `d`, placed there on first use.
pub fn nobody_kit(d: &TestDir) -> Kit {
    use std::os::unix::fs::PermissionsExt;
    let open =
        |p: &Path| std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    open(d.tmp.path());
    let kit = d.tmp.path().join("kit");
    if !kit.exists() {
        std::fs::create_dir(&kit).unwrap();
        open(&kit);
        for (from, name) in [
            (bin(), "gpufree"),
            (
                std::fs::canonicalize(sim_lib()).unwrap(),
                "libnvidia-ml.so.1",
            ),
        ] {
            let to = kit.join(name);
            if std::fs::hard_link(&from, &to).is_err() {
                std::fs::copy(&from, &to).unwrap();
            }
            open(&to);
        }
    }
    Kit {
        gpufree: kit.join("gpufree"),
        lib: kit.join("libnvidia-ml.so.1"),
    }
}

/// `gpufree WORDS` run as nobody through setpriv (tests that need it check
/// for root first): the [`Kit`]'s gpufree, with its simulated NVML library
/// as `GPUFREE_NVML_LIB`.
pub fn as_nobody(d: &TestDir, words: &[&str]) -> Gpufree {
    let kit = nobody_kit(d);
    Gpufree::new(words)
        .program(&kit.gpufree)
        .wrapped([
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "--",
        ])
        .env("GPUFREE_NVML_LIB", &kit.lib)
}

/// A holder (opening and mapping `node`) run as nobody: setpriv execs the
/// [`Kit`]'s gpufree in the same process, so it is the test's child and
/// dies with it as every holder.
pub fn mapper_as_nobody(d: &TestDir, node: &str) -> Spawned {
    let copy = nobody_kit(d).gpufree;
    let child = ChildSpec {
        argv: [
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "--",
            copy.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec(),
        spec: HoldSpec {
            mmap: vec![d.node(node)],
            ..HoldSpec::default()
        },
    };
    holder::spawn(Path::new("/usr/bin/setpriv"), &child).expect("nobody's holder starts")
}

/// A private tmux server: a pseudo-terminal to run gpufree in as a person
/// would, read the screen and type keys.
pub struct Tmux {
    pub socket: String,
}

impl Tmux {
    pub fn cmd(&self, args: &[&str]) -> std::process::Output {
        scratch(&mut Command::new("tmux"))
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux runs")
    }
    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p"]).stdout).into_owned()
    }
    pub fn keys(&self, keys: &[&str]) {
        for k in keys {
            self.cmd(&["send-keys", k]);
        }
    }
    /// Waits until the screen shows `text`; returns the screen.
    pub fn wait_for(&self, text: &str) -> String {
        self.wait_for_all(&[text])
    }

    /// As [`Self::wait_for`], until the screen shows every one of `texts`
    /// at once: a screen read while the program is still drawing a frame
    /// shows part of it, and part of the one before.
    pub fn wait_for_all(&self, texts: &[&str]) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            let s = self.screen();
            if texts.iter().all(|t| s.contains(t)) {
                return s;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "screen never showed {texts:?}:\n{s}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.cmd(&["kill-server"]);
    }
}

impl Tmux {
    /// A new server with one session running `cmd` (None without tmux).
    pub fn start(name: &str, cmd: &str) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            assert!(std::env::var_os("CI").is_none(), "CI must install tmux");
            eprintln!("skipped: tmux is not installed");
            return None;
        }
        let t = Tmux {
            socket: format!("gpufree-it-{name}-{}", std::process::id()),
        };
        // The pane prints the exit code itself (pane_dead_status is not in every tmux).
        let wrapped = format!("sh -c '{cmd}; echo gpufree-exit=$?'");
        let out = t.cmd(&["new-session", "-d", "-x", "180", "-y", "45", &wrapped]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        t.cmd(&["set-option", "-g", "remain-on-exit", "on"]);
        Some(t)
    }

    /// Waits until the command in the pane has exited; returns its exit code.
    pub fn wait_exit(&self) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let screen = self.screen();
            if let Some(code) = screen.split("gpufree-exit=").nth(1) {
                return code.split_whitespace().next().unwrap_or("").to_string();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "never exited:\n{}",
                self.screen()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// A root daemon like `nvidia-persistenced` (a copy of the gpufree binary
/// by that name, root's, in the test's root-only directory: protected)
/// holding `nodes` of `d` by fd, as it does on most real hosts.
pub fn persistenced(d: &TestDir, nodes: &[&str]) -> Spawned {
    let exe = d.tmp.path().join("nvidia-persistenced");
    if !exe.exists() && std::fs::hard_link(bin(), &exe).is_err() {
        std::fs::copy(bin(), &exe).unwrap();
    }
    holder::spawn(
        &exe,
        &ChildSpec {
            argv: vec!["nvidia-persistenced".into()],
            spec: HoldSpec {
                fd: nodes.iter().map(|n| d.node(n)).collect(),
                ..HoldSpec::default()
            },
        },
    )
    .unwrap()
}

/// Starts `cmd` (a `gpufree serve ...`, or what runs it) and returns it
/// once it says it listens; the rest of its stderr is read and dropped, so
/// it never writes into a closed pipe.
pub fn serve_listening(cmd: &mut Command) -> std::process::Child {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve starts");
    let mut err = std::io::BufReader::new(child.stderr.take().expect("stderr piped"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut err, &mut line).expect("serve's first line");
    assert!(line.contains("listening"), "serve: {line}");
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    child
}

/// The first line `child` writes to its piped stdout.
pub fn first_line(child: &mut std::process::Child) -> String {
    let mut line = String::new();
    let out = child.stdout.take().expect("a piped stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line)
        .expect("reading the child's first line");
    line
}

/// A test that needs what this machine lacks (root, FUSE, cgroups, a
/// D-Bus daemon): it fails under CI, which must provide it (`needs` says
/// what), and elsewhere says it is skipped.
pub fn skip_off_ci(needs: &str, why: &dyn std::fmt::Display) {
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must provide {needs}: {why}"
    );
    eprintln!("skipped: {needs}: {why}");
}

/// Whether a test of the "no library" path cannot run here, decided from
/// the machine before gpufree runs (so that a changed message fails, not
/// skips): NVIDIA's library is installed (`ldconfig -p` lists
/// libnvidia-ml.so.1). Then the test is skipped, or fails under CI.
pub fn nvidia_library_here() -> bool {
    let here = Command::new("ldconfig")
        .arg("-p")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("libnvidia-ml.so.1"));
    if here {
        skip_off_ci(
            "a machine without libnvidia-ml.so.1",
            &"ldconfig -p lists it",
        );
    }
    here
}
