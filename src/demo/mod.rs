//! `gpufree demo`: the reference incident (fixtures/seed-incident), replayed
//! on any machine with real processes and simulated GPUs.
//!
//! It builds a temporary device directory and simulator state for an 8-GPU
//! host, starts a launcher (`VLLM::EngineCore`), eight workers that rename
//! themselves exactly as setproctitle does (`VLLM::Worker_TP0..7`) and a
//! multiprocessing resource tracker, all holding and mapping their nodes;
//! shows what `pkill -f "python3.*vllm"` and `ps aux | grep` would have seen
//! (computed, never run); then shows `gpufree status`. It signals only what
//! it started, and everything it started dies with it, Ctrl-C included.

pub mod holder;
mod narrate;
pub mod title;

use narrate::{free_it, narrate};

use crate::pipeline;
use crate::present::words::demo as words;
use crate::present::{write_json, Printer};
use crate::snapshot::{self, Config};
use holder::{ChildSpec, HoldSpec, Spawned};
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Each worker's GPU memory in the incident (nvidia-smi-compute-apps.csv).
pub const WORKER_MIB: u64 = 96_610;
/// Framebuffer of an RTX PRO 6000 Blackwell (97,887 MiB).
pub const GPU_TOTAL_BYTES: u64 = 102_642_810_880;
/// GPUs on the incident's host.
pub const GPUS: u32 = 8;
/// The operator's pattern.
pub const PKILL_PATTERN: &str = "python3.*vllm";

/// Why the demo could not run to its end; each names what it could not
/// do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Setting up the incident failed (files, links, processes).
    #[error("demo: {what}: {source}")]
    Setup {
        /// What could not be done ("cannot create /tmp/...").
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// The plan names a process the demo did not start: never signalled.
    #[error("demo: {}", crate::present::words::demo::stranger(*.0))]
    Stranger(u32),
    /// The simulated NVML library is missing.
    #[error(transparent)]
    Sim(#[from] crate::sim::SimError),
    /// The snapshot of the incident failed.
    #[error(transparent)]
    Snapshot(#[from] crate::snapshot::SnapshotError),
    /// One of the story's own patterns did not compile.
    #[error(transparent)]
    Regex(#[from] regex::Error),
    /// Writing the story failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Adds what the demo was doing to an I/O error.
trait Doing<T> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T, Error>;
}

impl<T> Doing<T> for std::io::Result<T> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T, Error> {
        self.map_err(|source| Error::Setup {
            what: what(),
            source,
        })
    }
}

/// Options of `gpufree demo`.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Keep the incident running until Enter or Ctrl-C.
    pub hold: bool,
    /// How to print: its colours; with JSON, only the status JSON of the
    /// incident (the story itself is always told in full).
    pub printer: Printer,
    /// Where a collection looks otherwise (the command line's settings):
    /// the demo points it at its own device directory and the simulator.
    pub config: Config,
}

/// The device nodes of the incident's host.
pub fn node_names() -> Vec<String> {
    let mut n: Vec<String> = (0..GPUS).map(|i| format!("nvidia{i}")).collect();
    n.extend(["nvidiactl", "nvidia-uvm"].map(String::from));
    n
}

/// Creates the nodes as plain 4 KiB files (mappable) in `dev`.
pub fn make_dev_dir(dev: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dev)?;
    for n in node_names() {
        std::fs::write(dev.join(n), vec![0u8; 4096])?;
    }
    Ok(())
}

/// The incident's process tree over the nodes in `dev`: the launcher, its
/// resource tracker and eight renamed workers.
pub fn incident_tree(dev: &Path) -> ChildSpec {
    let spawn_main = |fd: u32| {
        vec![
            "/usr/bin/python3".to_string(),
            "-c".into(),
            format!("from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd={fd}, pipe_handle=9)"),
            "--multiprocessing-fork".into(),
        ]
    };
    let mut children = vec![ChildSpec {
        argv: vec![
            "/usr/bin/python3".into(),
            "-c".into(),
            "from multiprocessing.resource_tracker import main;main(25)".into(),
        ],
        spec: HoldSpec {
            label: "tracker".into(),
            fd: vec![dev.join("nvidia-uvm")],
            mmap: vec![dev.join("nvidia0")],
            ..HoldSpec::default()
        },
    }];
    for i in 0..GPUS {
        children.push(ChildSpec {
            argv: spawn_main(26 + i),
            spec: HoldSpec {
                label: format!("worker{i}"),
                title: Some(format!("VLLM::Worker_TP{i}")),
                fd: vec![dev.join("nvidiactl")],
                mmap: vec![dev.join("nvidia-uvm"), dev.join(format!("nvidia{i}"))],
                ..HoldSpec::default()
            },
        });
    }
    ChildSpec {
        argv: spawn_main(5),
        spec: HoldSpec {
            label: "launcher".into(),
            title: Some("VLLM::EngineCore".into()),
            fd: vec![dev.join("nvidia-uvm"), dev.join("nvidia0")],
            children,
            ..HoldSpec::default()
        },
    }
}

/// The simulator state of the incident: worker `i` holds 96,610 MiB on GPU `i`.
pub fn incident_state(workers: &[u32]) -> serde_json::Value {
    let devices: Vec<serde_json::Value> = (0..GPUS)
        .map(|i| {
            let processes: Vec<serde_json::Value> = workers
                .get(i as usize)
                .map(|&pid| json!({"pid": pid, "used_bytes": WORKER_MIB << 20, "type": "compute", "visible": "while-alive"}))
                .into_iter()
                .collect();
            json!({
                "name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                "uuid": format!("GPU-7f3a{i:04x}-0c1d-4e2f-9a3b-5c6d7e8f{i:04x}"),
                "pci_bus_id": format!("00000000:{:02X}:00.0", [0x01, 0x21, 0x41, 0x61, 0x81, 0xA1, 0xC1, 0xE1][i as usize]),
                "minor_number": i,
                "memory_total_bytes": GPU_TOTAL_BYTES,
                "memory_baseline_bytes": 0,
                "leaked_bytes": 0,
                "release_delay_ms": 2000,
                "processes": processes,
            })
        })
        .collect();
    json!({"driver_version": "580.95.05", "cuda_driver_version": 13000, "devices": devices})
}

/// A temporary directory removed on drop.
struct WorkDir(PathBuf);

impl WorkDir {
    fn new() -> std::io::Result<WorkDir> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let p = std::env::temp_dir().join(format!("gpufree-demo-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&p)?;
        Ok(WorkDir(p))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The running incident: its processes and files, gone when dropped.
pub struct Incident {
    dir: WorkDir,
    /// The holder tree.
    pub spawned: Spawned,
    /// Device directory.
    pub dev: PathBuf,
    /// Simulator state file.
    pub state: PathBuf,
}

impl Incident {
    /// Starts the incident: files, processes (run from the gpufree binary
    /// `exe`), simulator state.
    pub fn start(exe: &Path) -> Result<Incident, Error> {
        let dir = WorkDir::new().doing(|| words::NO_TEMP_DIR.into())?;
        let dev = dir.0.join("dev");
        make_dev_dir(&dev).doing(|| words::cannot_create(&dev))?;
        let exe = python_alias(&dir.0, exe).doing(|| words::NO_PYTHON_LINK.into())?;
        let spawned =
            holder::spawn(&exe, &incident_tree(&dev)).doing(|| words::NO_PROCESSES.into())?;
        let state = dir.0.join("state.json");
        let workers = pids_labelled(&spawned, "worker");
        let text = format!("{:#}", incident_state(&workers));
        std::fs::write(&state, text).doing(|| words::cannot_write(&state))?;
        Ok(Incident {
            dir,
            spawned,
            dev,
            state,
        })
    }

    /// The PID with this label.
    pub fn pid(&self, label: &str) -> Option<u32> {
        self.spawned
            .pids
            .iter()
            .find(|(_, l)| l == label)
            .map(|(p, _)| *p)
    }

    /// The working directory.
    pub fn dir(&self) -> &Path {
        &self.dir.0
    }
}

impl Drop for Incident {
    fn drop(&mut self) {
        self.spawned.kill();
        // The tree dies by PDEATHSIG; wait until none of it runs any more.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < deadline
            && self
                .spawned
                .pids
                .iter()
                .any(|(p, _)| crate::proc::scan::alive(*p))
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// The gpufree binary under the name `python3.12` (a hard link, else a
/// copy), so the demo's processes show the exe a Python program has: their
/// comm and `argv[0]` then agree with it until they rename themselves.
pub fn python_alias(dir: &Path, exe: &Path) -> std::io::Result<PathBuf> {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin)?;
    let alias = bin.join("python3.12");
    if std::fs::hard_link(exe, &alias).is_err() {
        std::fs::copy(exe, &alias)?;
    }
    Ok(alias)
}

fn pids_labelled(s: &Spawned, prefix: &str) -> Vec<u32> {
    s.pids
        .iter()
        .filter(|(_, l)| l.starts_with(prefix))
        .map(|(p, _)| *p)
        .collect()
}

/// Runs the demo; true when it ran its course (the GPUs came back free,
/// or only the JSON or the held incident was asked for), false when the
/// GPUs did not come back.
pub fn run(opts: &Options) -> Result<bool, Error> {
    let exe = std::env::current_exe().doing(|| words::NO_BINARY.into())?;
    let incident = Incident::start(&exe)?;
    end_on_ctrl_c(&incident);
    let lib = crate::sim::library_dir()?.join(crate::sim::NVML_SONAME);
    std::env::set_var("GPUFREE_SIM_STATE", &incident.state);
    let cfg = Config {
        proc_root: PathBuf::from("/proc"),
        dev_dir: incident.dev.clone(),
        nvml_lib: Some(lib),
        ..opts.config.clone()
    };
    let collector = snapshot::Collector::new(cfg, None)?;
    let snap = pipeline::judged(&collector)?;
    let mut out = std::io::stdout().lock();
    if opts.printer.json() {
        write_json(&mut out, &crate::present::json::SnapshotDoc::new(&snap))?;
        return Ok(true);
    }
    let printer = opts.printer.full();
    narrate(&mut out, &incident, &snap, &printer)?;
    if !opts.hold {
        return free_it(&mut out, &incident, &collector, &snap, &printer);
    }
    keep_running(&mut out, &incident)?;
    Ok(true)
}

/// Ctrl-C: kill what we started (our child; the rest follow) and leave.
fn end_on_ctrl_c(incident: &Incident) {
    let launcher_pid = incident.spawned.child.id();
    let workdir = incident.dir().to_path_buf();
    let _ = ctrlc::set_handler(move || {
        // Our own child, not yet waited for: its PID cannot have been
        // reused. A PID that does not convert is signalled not at all.
        if let Some(pid) = rustix::process::Pid::from_raw(launcher_pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        let _ = std::fs::remove_dir_all(&workdir);
        std::process::exit(130);
    });
}

/// `demo --hold`: says what to try on the incident, then waits for Enter.
fn keep_running(out: &mut impl Write, incident: &Incident) -> std::io::Result<()> {
    // This very gpufree, by its path: the one a README's build made is not
    // on PATH.
    let me = std::env::current_exe()
        .ok()
        .and_then(|p| crate::safe::shell_word(&p.display().to_string()))
        .unwrap_or_else(|| "gpufree".to_string());
    writeln!(out, "{}", words::hold(&me, &incident.state, &incident.dev))?;
    out.flush()?;
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    Ok(())
}
