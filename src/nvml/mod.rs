//! The NVML backend, over nvml-wrapper: per GPU the index, UUID, name, PCI
//! bus id, minor number, memory (v2), the compute, graphics and MPS
//! processes with their memory, and in MIG mode each MIG device's
//! (`mig.rs`); the driver's evidence of each GPU's health (`health.rs`);
//! and, for long-running commands, Xid events (`xid.rs`, [`XidWatcher`]).
//!
//! Every call that fails becomes an [`Unavailable`] entry saying why
//! (NOT_SUPPORTED, a missing `_v3` symbol on an old driver, GPU_IS_LOST,
//! NO_PERMISSION...), never silently missing data. A missing library is a
//! [`NvmlStatus`] with an error, not a failure of the whole snapshot: the
//! device-node scan still runs.

mod health;
mod mig;
mod read;
mod xid;

pub use health::{fault_of, FI_GPU_RECOVERY_ACTION};
pub use xid::XidWatcher;

use read::read_all;

use crate::model::{Call, Failure, Gpu, NvmlProcess, NvmlProcessKind, NvmlStatus, Unavailable};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::{Device, Nvml};
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// The library loaded when none is named.
pub const DEFAULT_LIB: &str = "libnvidia-ml.so.1";

/// Read passes over every GPU by this process so far: see [`read_passes`].
static PASSES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many times this process has read every GPU through NVML (one pass:
/// the count, then each GPU's memory and process lists). Tests read it to
/// prove that a command collects once.
pub fn read_passes() -> usize {
    PASSES.load(std::sync::atomic::Ordering::Relaxed)
}

/// What NVML said.
#[derive(Debug, Clone, Default)]
pub struct NvmlReport {
    /// Library, driver version, or why NVML is unavailable.
    pub status: NvmlStatus,
    /// The GPUs, in NVML index order (empty without NVML).
    pub gpus: Vec<Gpu>,
    /// Calls that failed.
    pub unavailable: Vec<Unavailable>,
}

/// An NVML error as the snapshot keeps it: one value per return gpufree
/// tells apart (its words are present's).
pub fn failure(e: &NvmlError) -> Failure {
    match e {
        NvmlError::FailedToLoadSymbol(s) => Failure::MissingSymbol { symbol: s.clone() },
        NvmlError::LibloadingError(e) => Failure::CannotLoad {
            error: e.to_string(),
        },
        NvmlError::NotSupported => Failure::NotSupported,
        NvmlError::NoPermission => Failure::NoPermission,
        NvmlError::GpuLost => Failure::GpuIsLost,
        NvmlError::DriverNotLoaded => Failure::DriverNotLoaded,
        NvmlError::Uninitialized => Failure::Uninitialized,
        NvmlError::Timeout => Failure::Timeout,
        NvmlError::ResetRequired => Failure::ResetRequired,
        other => Failure::Nvml {
            error: other.to_string(),
        },
    }
}

/// A person-readable reason for an NVML error, where the snapshot still
/// keeps words (`NvmlStatus.error`, a driver reading that failed, the Xid
/// watcher); `Unavailable` keeps a [`failure`] instead.
pub fn describe(e: &NvmlError) -> String {
    match e {
        NvmlError::FailedToLoadSymbol(s) => {
            format!("missing symbol in the NVML library (driver too old?): {s}")
        }
        NvmlError::LibloadingError(e) => format!("cannot load the NVML library: {e}"),
        NvmlError::NotSupported => "NOT_SUPPORTED on this GPU or driver".into(),
        NvmlError::NoPermission => "NO_PERMISSION (run as root to see it)".into(),
        NvmlError::GpuLost => "GPU_IS_LOST: the GPU fell off the bus".into(),
        NvmlError::ResetRequired => "RESET_REQUIRED: the GPU needs a reset".into(),
        NvmlError::DriverNotLoaded => {
            "DRIVER_NOT_LOADED: the NVIDIA kernel driver is not running".into()
        }
        NvmlError::Uninitialized => "UNINITIALIZED".into(),
        other => other.to_string(),
    }
}

fn process(p: &ProcessInfo, kind: NvmlProcessKind) -> NvmlProcess {
    NvmlProcess {
        pid: p.pid,
        used_bytes: match p.used_gpu_memory {
            UsedGpuMemory::Used(b) => Some(b),
            UsedGpuMemory::Unavailable => None,
        },
        kind,
    }
}

/// One process list, `_v3` first, `_v2` when the driver lacks `_v3`.
fn list(
    dev: &Device<'_>,
    kind: NvmlProcessKind,
    index: u32,
    unavailable: &mut Vec<Unavailable>,
    faults: &mut Vec<crate::model::FaultReturn>,
) -> Vec<NvmlProcess> {
    let result: Result<Vec<ProcessInfo>, NvmlError> = match kind {
        NvmlProcessKind::Compute => match dev.running_compute_processes() {
            Err(NvmlError::FailedToLoadSymbol(_)) => dev.running_compute_processes_v2(),
            r => r,
        },
        NvmlProcessKind::Graphics => match dev.running_graphics_processes() {
            Err(NvmlError::FailedToLoadSymbol(_)) => dev.running_graphics_processes_v2(),
            r => r,
        },
        NvmlProcessKind::Mps => dev.mps_running_compute_processes(),
    };
    match result {
        Ok(ps) => ps.iter().map(|p| process(p, kind)).collect(),
        // MPS is absent from most drivers' feature set; not worth a line.
        Err(NvmlError::NotSupported) if kind == NvmlProcessKind::Mps => Vec::new(),
        Err(e) => {
            let what = format!("{} processes", format!("{kind:?}").to_lowercase());
            health::note(faults, &what, &e);
            unavailable.push(Unavailable {
                what: Call::Processes { kind },
                gpu: Some(index),
                why: failure(&e),
                unplaced: None,
            });
            Vec::new()
        }
    }
}

/// An initialised NVML library on its own thread, kept for repeated reads
/// (`wait`, `kill`, `watch`). Every call is made on that thread and waited
/// for with a deadline: a driver call that hangs makes this read report
/// NVML as unavailable ("did not answer within ..."), naming the call,
/// instead of hanging the command. Until the stuck call returns, reads
/// wait for it and report NVML unavailable; no second thread is started.
pub struct Session {
    requests: Mutex<mpsc::Sender<mpsc::Sender<NvmlReport>>>,
    /// The answer to a read that was given up on: until it comes, the
    /// thread is still inside the driver and no new read is sent.
    pending: Mutex<Option<(mpsc::Receiver<NvmlReport>, std::time::Instant)>>,
    /// How the initialisation went: still running (its answer to come),
    /// done, or failed.
    init: Mutex<Init>,
    library: String,
    shared: Arc<Shared>,
}

enum Init {
    Running(
        mpsc::Receiver<Result<NvmlStatus, NvmlStatus>>,
        std::time::Instant,
    ),
    Done(NvmlStatus),
    Failed(NvmlStatus),
}

/// What the NVML thread is doing now.
#[derive(Default)]
struct Shared {
    step: Mutex<String>,
}

impl Shared {
    fn step(&self, what: impl Into<String>) {
        *self.step.lock().unwrap_or_else(|p| p.into_inner()) = what.into();
    }
    fn current(&self) -> String {
        self.step.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

const HUNG: &str = "NVML did not answer within";

fn hung_message(step: &str, after: Duration) -> String {
    match step {
        // Between calls: the thread did not take the request up.
        "idle" => format!("{HUNG} {:.1} s", after.as_secs_f64()),
        _ => format!(
            "{HUNG} {:.1} s ({step} hangs in the driver)",
            after.as_secs_f64()
        ),
    }
}

/// On the NVML thread: loads and initialises the library, reads the
/// driver version, and sends the status to `ready` (an error when the
/// library could not be loaded or initialised). None when there is
/// nothing to serve.
fn init(
    lib: Option<&Path>,
    mut status: NvmlStatus,
    at: &Shared,
    ready: &mpsc::Sender<Result<NvmlStatus, NvmlStatus>>,
) -> Option<(Nvml, NvmlStatus)> {
    at.step("nvmlInit_v2");
    let mut builder = Nvml::builder();
    if let Some(p) = lib {
        builder.lib_path(p.as_os_str());
    }
    let nvml = match builder.init() {
        Ok(nvml) => nvml,
        Err(e) => {
            status.error = Some(match e {
                NvmlError::LibloadingError(_) => {
                    format!("no NVIDIA library ({}): {e}", status.library)
                }
                e => format!("NVML init failed ({}): {}", status.library, describe(&e)),
            });
            let _ = ready.send(Err(status));
            return None;
        }
    };
    at.step("nvmlSystemGetDriverVersion");
    status.available = true;
    status.driver_version = nvml.sys_driver_version().ok();
    at.step("idle");
    ready.send(Ok(status.clone())).ok()?;
    Some((nvml, status))
}

impl Session {
    /// Loads and initialises the library at `lib` (default: the system's)
    /// on a thread of its own, and returns at once: reads wait for the
    /// initialisation (within their own timeout), so that a slow or hung
    /// driver does not hold up the /proc scan meanwhile.
    /// `idle_window`: how far back each read asks the driver for
    /// per-process utilisation samples (`--idle-window`).
    pub fn start(lib: Option<&Path>, idle_window: Duration) -> Session {
        let library = lib.map_or(DEFAULT_LIB.to_string(), |p| p.display().to_string());
        let status = NvmlStatus {
            library: library.clone(),
            ..NvmlStatus::default()
        };
        let shared = Arc::new(Shared::default());
        shared.step("dlopen of the library");
        let (req_tx, req_rx) = mpsc::channel::<mpsc::Sender<NvmlReport>>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<NvmlStatus, NvmlStatus>>();
        let lib = lib.map(Path::to_path_buf);
        let worker = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("nvml".into())
            .spawn(move || {
                let Some((nvml, status)) = init(lib.as_deref(), status, &worker, &ready_tx) else {
                    return;
                };
                while let Ok(reply) = req_rx.recv() {
                    let report = read_all(&nvml, &status, &worker, idle_window);
                    worker.step("idle");
                    if reply.send(report).is_err() {
                        break;
                    }
                }
            });
        let init = match spawned {
            Ok(_) => Init::Running(ready_rx, std::time::Instant::now()),
            Err(e) => Init::Failed(NvmlStatus {
                library: library.clone(),
                error: Some(format!("cannot start the NVML thread: {e}")),
                ..NvmlStatus::default()
            }),
        };
        Session {
            requests: Mutex::new(req_tx),
            pending: Mutex::new(None),
            init: Mutex::new(init),
            library,
            shared,
        }
    }

    /// Waits at most `timeout` for the initialisation; its status (an
    /// error when it failed or has not answered yet).
    pub fn ready(&self, timeout: Duration) -> Result<NvmlStatus, NvmlStatus> {
        let mut init = self.init.lock().unwrap_or_else(|p| p.into_inner());
        if let Init::Running(rx, since) = &*init {
            match rx.recv_timeout(timeout) {
                Ok(Ok(status)) => *init = Init::Done(status),
                Ok(Err(status)) => *init = Init::Failed(status),
                Err(_) => {
                    return Err(NvmlStatus {
                        library: self.library.clone(),
                        error: Some(hung_message(&self.shared.current(), since.elapsed())),
                        ..NvmlStatus::default()
                    })
                }
            }
        }
        match &*init {
            Init::Done(status) => Ok(status.clone()),
            Init::Failed(status) => Err(status.clone()),
            Init::Running(..) => Err(NvmlStatus::default()),
        }
    }

    /// Whether the initialisation failed for good (not merely slow or
    /// hung): a new session may be tried later.
    pub fn failed(&self) -> bool {
        matches!(
            &*self.init.lock().unwrap_or_else(|p| p.into_inner()),
            Init::Failed(_)
        )
    }

    /// Reads every GPU now, waiting at most `timeout` for the driver (its
    /// initialisation included). A read still unanswered from before is
    /// waited for first: while the thread is stuck in the driver, NVML
    /// counts as unavailable. `cut`: the timeout is shorter than the read
    /// timeout because the command's deadline is near (then a late answer
    /// is not called a hang).
    pub fn read(&self, timeout: Duration, cut: bool) -> NvmlReport {
        let started = std::time::Instant::now();
        let status = match self.ready(timeout) {
            Ok(status) => status,
            Err(status) => {
                return NvmlReport {
                    status,
                    ..NvmlReport::default()
                }
            }
        };
        let timeout = timeout.saturating_sub(started.elapsed());
        let unavailable = |why: String| {
            let mut status = status.clone();
            status.available = false;
            status.error = Some(why);
            NvmlReport {
                status,
                ..NvmlReport::default()
            }
        };
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((rx, since)) = pending.as_ref() {
            match rx.recv_timeout(timeout) {
                Ok(_) | Err(mpsc::RecvTimeoutError::Disconnected) => *pending = None,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return unavailable(hung_message(&self.shared.current(), since.elapsed()))
                }
            }
        }
        let (tx, rx) = mpsc::channel();
        let sent = self
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(tx);
        if sent.is_err() {
            return unavailable("the NVML thread has stopped".into());
        }
        let asked = std::time::Instant::now();
        match rx.recv_timeout(timeout.saturating_sub(started.elapsed())) {
            Ok(report) => report,
            Err(_) => {
                let step = self.shared.current();
                let why = if cut {
                    match step.as_str() {
                        // Between calls: the read had not begun.
                        "idle" => "NVML was not read before the deadline".to_string(),
                        _ => format!(
                            "NVML was not read before the deadline ({step} was still running)"
                        ),
                    }
                } else {
                    hung_message(&step, asked.elapsed())
                };
                *pending = Some((rx, asked));
                unavailable(why)
            }
        }
    }
}
