//! Real holder processes for the demo and the tests: the gpufree binary,
//! started with [`HOLDER_ENV`] set to a [`HoldSpec`], opens and maps files of
//! a (temporary) device directory, starts its own children, renames itself
//! like a vLLM worker, reports `ready <pid>` on stdout and waits to be
//! signalled. Its argv is whatever the starter chose (e.g. `python3 -m vllm
//! ...`), so the original command line looks like the real thing.
//!
//! Every holder dies with its parent (`PR_SET_PDEATHSIG`), so nothing the demo
//! or a test started outlives it, Ctrl-C and crashes included.

mod signals;

use signals::{
    catch_usr1, end_main_thread, ignore_sigterm, on_term, supervise, unblock_signals, vfork_pause,
};

use crate::present::words::demo::holder_exited;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The environment variable that turns the gpufree binary into a holder.
pub const HOLDER_ENV: &str = "GPUFREE_INTERNAL_HOLDER";
const PARENT_ENV: &str = "GPUFREE_INTERNAL_HOLDER_PARENT";

/// What a holder process does.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HoldSpec {
    /// A name for this process in the ready report (`worker0`, `tracker`).
    #[serde(default)]
    pub label: String,
    /// Rename like setproctitle: comm and cmdline.
    #[serde(default)]
    pub title: Option<String>,
    /// Rename comm only (`prctl(PR_SET_NAME)`).
    #[serde(default)]
    pub comm: Option<String>,
    /// Files to open and keep open.
    #[serde(default)]
    pub fd: Vec<PathBuf>,
    /// Files to open and map, keeping both.
    #[serde(default)]
    pub mmap: Vec<PathBuf>,
    /// Files to map, then close: a maps-only holder.
    #[serde(default)]
    pub maps_only: Vec<PathBuf>,
    /// Files to map executable (private, read and execute), then close:
    /// code loaded from wherever the file is, as `dlopen` would.
    #[serde(default)]
    pub exec_map: Vec<PathBuf>,
    /// Children to start (and wait for) before reporting ready.
    #[serde(default)]
    pub children: Vec<ChildSpec>,
    /// Survive the parent (no PDEATHSIG): becomes an orphan when its
    /// parent exits. Whoever starts it must end it by identity (pidfd).
    #[serde(default)]
    pub survive_parent: bool,
    /// Ignore SIGTERM.
    #[serde(default)]
    pub ignore_term: bool,
    /// Start a session of its own (`setsid`): a new session and process
    /// group, as a daemonizing child does.
    #[serde(default)]
    pub new_session: bool,
    /// On SIGTERM, start this child (it should `survive_parent`), wait for
    /// it to be ready, then exit: a target that forks a holder while it is
    /// being stopped.
    #[serde(default)]
    pub fork_on_term: Option<Box<ChildSpec>>,
    /// On each SIGTERM, start a copy of this holder (surviving its parent,
    /// with one fewer re-fork; the last copy ignores SIGTERM) and keep
    /// running: a TERM-ignoring holder that re-forks.
    #[serde(default)]
    pub refork_on_term: u32,
    /// Start each child again when it exits, up to this many times in all:
    /// a supervisor (a parent that re-forks, like `Restart=always`).
    #[serde(default)]
    pub respawn: u32,
    /// Wait this long before each restart (a supervisor's restart delay,
    /// like `RestartSec=`).
    #[serde(default)]
    pub respawn_delay_ms: u64,
    /// Wait this long before opening anything: a program that opens the
    /// GPU only after its start-up (a CUDA initialisation).
    #[serde(default)]
    pub open_delay_ms: u64,
    /// Environment variables to start it with (`TORCHELASTIC_*`).
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// Exit this long after reporting ready.
    #[serde(default)]
    pub exit_after_ms: Option<u64>,
    /// After reporting ready, end the main thread (the thread-group leader)
    /// and keep running in another thread: a zombie leader with live threads.
    #[serde(default)]
    pub leader_exits: bool,
    /// Become a child subreaper (`PR_SET_CHILD_SUBREAPER`): the orphans of
    /// its descendants are reparented to it, as to a user's systemd manager.
    #[serde(default)]
    pub subreaper: bool,
    /// After reporting ready, read this file in the main thread (a FUSE
    /// file whose daemon never answers: the read blocks). SIGUSR1 is caught
    /// and does nothing, so a signal moves such a read from its
    /// interruptible wait (S) to its killable one (D).
    #[serde(default)]
    pub read_after_ready: Option<PathBuf>,
    /// After reporting ready, start a child as `vfork` does and have it
    /// pause: the main thread waits for it in D, as a vfork parent does.
    #[serde(default)]
    pub vfork_pause: bool,
}

/// A child holder: its argv and what it does.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChildSpec {
    /// argv, `argv[0]` included (e.g. `["python3", "-m", "vllm..."]`).
    pub argv: Vec<String>,
    /// What it does.
    pub spec: HoldSpec,
}

impl HoldSpec {
    /// How many processes this spec starts, itself included.
    pub fn process_count(&self) -> usize {
        1 + self
            .children
            .iter()
            .map(|c| c.spec.process_count())
            .sum::<usize>()
    }
}

/// A started holder tree.
#[derive(Debug)]
pub struct Spawned {
    /// The top holder (the caller's child).
    pub child: Child,
    /// Every process of the tree as (PID, label), in the order they became
    /// ready (children before their parent).
    pub pids: Vec<(u32, String)>,
}

impl Spawned {
    /// The PID of the process of this tree labelled `label`.
    ///
    /// # Panics
    /// When no process has that label: a test's own mistake.
    pub fn pid_of(&self, label: &str) -> u32 {
        self.pids
            .iter()
            .find(|(_, l)| l == label)
            .unwrap_or_else(|| panic!("no holder labelled {label}"))
            .0
    }

    /// Kills the top holder (its descendants follow by PDEATHSIG) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The top holder's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `exe` as a holder with `argv` and `spec`; returns once every
/// process of the tree reported ready.
pub fn spawn(exe: &Path, child: &ChildSpec) -> std::io::Result<Spawned> {
    spawn_from(Command::new(exe), child)
}

/// Starts as a holder what `cmd` runs (the gpufree binary or a copy of it,
/// set up as the caller chose: another user's IDs, say), with `argv` and
/// `spec`; returns once every process of the tree reported ready.
pub fn spawn_from(mut cmd: Command, child: &ChildSpec) -> std::io::Result<Spawned> {
    let json = serde_json::to_string(&child.spec).map_err(std::io::Error::other)?;
    let (argv0, rest) = child
        .argv
        .split_first()
        .ok_or_else(|| std::io::Error::other("holder argv is empty"))?;
    cmd.arg0(argv0)
        .args(rest)
        .env(HOLDER_ENV, json)
        .env(PARENT_ENV, std::process::id().to_string())
        .envs(&child.spec.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let mut proc = cmd.spawn()?;
    let out = proc
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("no stdout"))?;
    let mut pids = Vec::new();
    let mut lines = BufReader::new(out).lines();
    while pids.len() < child.spec.process_count() {
        let Some(line) = lines.next().transpose()? else {
            let _ = proc.kill();
            let status = proc.wait()?;
            return Err(std::io::Error::other(holder_exited(argv0, &status)));
        };
        if let Some(rest) = line.strip_prefix("ready ") {
            let (pid, label) = rest.split_once(' ').unwrap_or((rest, ""));
            if let Ok(pid) = pid.parse() {
                pids.push((pid, label.to_string()));
            }
        }
    }
    Ok(Spawned { child: proc, pids })
}

fn open(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::File::open(path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

fn map(file: &std::fs::File) -> std::io::Result<()> {
    use rustix::mm::{MapFlags, ProtFlags};
    map_as(file, ProtFlags::READ, MapFlags::SHARED)
}

#[allow(unsafe_code)]
fn map_as(
    file: &std::fs::File,
    prot: rustix::mm::ProtFlags,
    flags: rustix::mm::MapFlags,
) -> std::io::Result<()> {
    // SAFETY: a fresh mapping chosen by the kernel (null hint), never
    // writable; we never read, write or run anything through it or unmap
    // it, so no Rust reference aliases it.
    unsafe { rustix::mm::mmap(std::ptr::null_mut(), 4096, prot, flags, file, 0) }?;
    Ok(())
}

/// The holder's main: runs `spec` (JSON) and never returns normally.
pub fn run(spec_json: &str) -> std::io::Result<()> {
    let spec: HoldSpec = serde_json::from_str(spec_json)
        .map_err(|e| std::io::Error::other(format!("{HOLDER_ENV}: {e}")))?;
    if !spec.survive_parent {
        die_with_parent()?;
    }
    set_up_process(&spec)?;
    std::thread::sleep(std::time::Duration::from_millis(spec.open_delay_ms));
    let kept = hold_nodes(&spec)?;
    let exe = std::env::current_exe()?;
    let mut ready = Vec::new();
    let mut children = Vec::new();
    for c in &spec.children {
        let s = spawn(&exe, c)?;
        ready.extend(s.pids.iter().cloned());
        children.push(s);
    }
    rename(&spec)?;
    ready.push((std::process::id(), spec.label.clone()));
    report_ready(&ready)?;
    if spec.respawn > 0 {
        let delay = std::time::Duration::from_millis(spec.respawn_delay_ms);
        supervise(exe, spec.children.clone(), children, spec.respawn, delay);
    }
    if let Some(path) = &spec.read_after_ready {
        read_once(path);
    }
    if spec.vfork_pause {
        vfork_pause();
    }
    if spec.leader_exits {
        std::thread::spawn(|| loop {
            std::thread::park();
        });
        end_main_thread();
    }
    match spec.exit_after_ms {
        Some(ms) => std::thread::sleep(std::time::Duration::from_millis(ms)),
        None => loop {
            std::thread::park();
        },
    }
    drop(kept);
    std::process::exit(0);
}

/// Dies with the parent (PDEATHSIG); if it is already gone, stops now.
fn die_with_parent() -> std::io::Result<()> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    let expected_parent: Option<u32> = std::env::var(PARENT_ENV).ok().and_then(|p| p.parse().ok());
    let parent = rustix::process::getppid().map(|p| p.as_raw_nonzero().get() as u32);
    if expected_parent.is_some() && parent != expected_parent {
        std::process::exit(0);
    }
    Ok(())
}

/// The process's signals, session and reaping as `spec` asks: SIGTERM
/// ignored or answered with a fork, a new session, a subreaper.
fn set_up_process(spec: &HoldSpec) -> std::io::Result<()> {
    if spec.ignore_term {
        ignore_sigterm();
    }
    unblock_signals();
    if spec.new_session {
        rustix::process::setsid()?;
    }
    if spec.subreaper {
        rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
    }
    if spec.read_after_ready.is_some() {
        catch_usr1();
    }
    if let Some(child) = spec.fork_on_term.clone() {
        on_term(*child, false)?;
    }
    if spec.refork_on_term > 0 {
        let mut copy = spec.clone();
        copy.refork_on_term -= 1;
        copy.ignore_term = copy.refork_on_term == 0;
        copy.survive_parent = true;
        copy.children.clear();
        copy.label = "refork".into();
        let argv = std::env::args().collect();
        on_term(ChildSpec { argv, spec: copy }, true)?;
    }
    Ok(())
}

/// Opens the nodes `spec` names: held by fd, mapped and held, or only
/// mapped (the fd closed); maps the files it runs code from. Returns the
/// fds to keep.
fn hold_nodes(spec: &HoldSpec) -> std::io::Result<Vec<OwnedFd>> {
    let mut kept: Vec<OwnedFd> = Vec::new();
    for p in &spec.fd {
        kept.push(open(p)?.into());
    }
    for p in &spec.mmap {
        let f = open(p)?;
        map(&f)?;
        kept.push(f.into());
    }
    for p in &spec.maps_only {
        let f = open(p)?;
        map(&f)?;
        drop(f);
    }
    for p in &spec.exec_map {
        use rustix::mm::{MapFlags, ProtFlags};
        let f = open(p)?;
        map_as(&f, ProtFlags::READ | ProtFlags::EXEC, MapFlags::PRIVATE)?;
    }
    Ok(kept)
}

/// Reads the start of `path`, waiting as long as its file system makes it
/// (whatever the read returns, even an error, the holder goes on).
fn read_once(path: &Path) {
    use std::io::Read;
    if let Ok(mut f) = std::fs::File::open(path) {
        let mut buf = [0u8; 4096];
        let _ = f.read(&mut buf);
    }
}

/// Retitles the process as setproctitle does, or only renames its comm.
fn rename(spec: &HoldSpec) -> std::io::Result<()> {
    if let Some(title) = &spec.title {
        super::title::set_process_title(title)?;
    } else if let Some(comm) = &spec.comm {
        let c = std::ffi::CString::new(comm.as_bytes()).map_err(std::io::Error::other)?;
        rustix::thread::set_name(&c)?;
    }
    Ok(())
}

/// One `ready PID LABEL` line per process of the tree, for the spawner.
fn report_ready(ready: &[(u32, String)]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    for (pid, label) in ready {
        writeln!(out, "ready {pid} {label}")?;
    }
    out.flush()
}
