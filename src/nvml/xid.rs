//! Xid events from NVML's event API, for the long-running commands
//! (watch, serve, wait): on a thread of its own with its own NVML
//! session, one event set (`nvmlEventSetCreate`) registered for
//! `nvmlEventTypeXidCriticalError` (`nvmlDeviceRegisterEvents`) on every
//! GPU whose `nvmlDeviceGetSupportedEventTypes` has it, waited on in
//! short slices (`nvmlEventSetWait_v2`) so that it stops soon after the
//! watcher is dropped; the set is freed (`nvmlEventSetFree`) on the way
//! out. NVML's event data names no process: each [`XidEvent`]'s `pid` is
//! None.

use super::failure;
use crate::model::{XidDown, XidEvent};
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{EventSet, Nvml};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// How long one wait in the driver lasts before the stop flag is looked at.
const SLICE_MS: u32 = 200;

/// What the watcher's thread says.
enum Said {
    /// Registered on these GPUs (NVML index), or why on none.
    Registered(Result<Vec<u32>, XidDown>),
    /// An event.
    Event(XidEvent),
    /// Waiting failed for good, with why.
    Failed(XidDown),
}

/// Xid critical errors as NVML delivers them, collected in the
/// background from [`XidWatcher::start`] until dropped.
pub struct XidWatcher {
    said: mpsc::Receiver<Said>,
    stop: Arc<AtomicBool>,
    registered: Option<Result<Vec<u32>, XidDown>>,
    failed: Option<XidDown>,
}

impl XidWatcher {
    /// Starts watching through the library at `lib` (default: the
    /// system's); returns at once.
    pub fn start(lib: Option<&Path>) -> XidWatcher {
        let (tx, said) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let lib = lib.map(Path::to_path_buf);
        let flag = Arc::clone(&stop);
        let spawned = std::thread::Builder::new()
            .name("nvml-xid".into())
            .spawn(move || watch(lib, &flag, &tx));
        let failed = spawned.err().map(|e| XidDown::NoThread {
            error: e.to_string(),
        });
        XidWatcher {
            said,
            stop,
            registered: failed.clone().map(Err),
            failed,
        }
    }

    /// The GPUs Xid events are watched on, waiting at most `timeout` for
    /// the registration; Err with why where none is (no library, no GPU
    /// supports them, or not answered yet).
    pub fn registered(&mut self, timeout: Duration) -> Result<Vec<u32>, XidDown> {
        let until = Instant::now() + timeout;
        while self.registered.is_none() && self.take(until) {}
        self.registered.clone().unwrap_or(Err(XidDown::Late))
    }

    /// The events that arrived, waiting until `until` for the first.
    pub fn events(&mut self, until: Instant) -> Vec<XidEvent> {
        let mut out = Vec::new();
        loop {
            let now = Instant::now();
            let wait = if out.is_empty() { until } else { now };
            match self.said.recv_timeout(wait.saturating_duration_since(now)) {
                Ok(Said::Event(e)) => out.push(e),
                Ok(Said::Registered(r)) => self.registered = Some(r),
                Ok(Said::Failed(why)) => self.failed = Some(why),
                Err(_) => return out,
            }
        }
    }

    /// Why waiting stopped for good, once it has.
    pub fn failed(&self) -> Option<&XidDown> {
        self.failed.as_ref()
    }

    /// Takes one message, waiting until `until`; false when none came.
    fn take(&mut self, until: Instant) -> bool {
        match self
            .said
            .recv_timeout(until.saturating_duration_since(Instant::now()))
        {
            Ok(Said::Registered(r)) => self.registered = Some(r),
            Ok(Said::Failed(why)) => self.failed = Some(why),
            // The thread answers the registration before any event.
            Ok(Said::Event(_)) => {}
            Err(_) => return false,
        }
        true
    }
}

impl Drop for XidWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The watcher's thread.
fn watch(lib: Option<PathBuf>, stop: &AtomicBool, tx: &mpsc::Sender<Said>) {
    let mut builder = Nvml::builder();
    if let Some(p) = &lib {
        builder.lib_path(p.as_os_str());
    }
    let nvml = match builder.init() {
        Ok(n) => n,
        Err(e) => {
            let _ = tx.send(Said::Registered(Err(XidDown::Nvml(failure(&e)))));
            return;
        }
    };
    let (set, gpus) = match register(&nvml) {
        Ok(r) => r,
        Err(why) => {
            let _ = tx.send(Said::Registered(Err(why)));
            return;
        }
    };
    if tx.send(Said::Registered(Ok(gpus))).is_err() {
        return;
    }
    while !stop.load(Ordering::Relaxed) {
        match set.wait(SLICE_MS) {
            Ok(data) => {
                let event = XidEvent {
                    gpu: data.device.index().unwrap_or(u32::MAX),
                    xid: match data.event_data {
                        Some(XidError::Value(v)) => Some(v),
                        Some(XidError::Unknown) | None => None,
                    },
                    pid: None,
                    at_unix_ms: crate::units::unix_now_ms(),
                };
                if tx.send(Said::Event(event)).is_err() {
                    break;
                }
            }
            Err(NvmlError::Timeout) => {}
            Err(e) => {
                let _ = tx.send(Said::Failed(XidDown::Nvml(failure(&e))));
                break;
            }
        }
    }
    let _ = set.release_events();
}

/// One set registered for Xid events on every GPU that supports them.
/// A failed registration frees the set (nvml-wrapper gives it up), so
/// the set is made again for the GPUs registered so far.
fn register(nvml: &Nvml) -> Result<(EventSet<'_>, Vec<u32>), XidDown> {
    let count = nvml
        .device_count()
        .map_err(|e| XidDown::Nvml(failure(&e)))?;
    let mut set = nvml
        .create_event_set()
        .map_err(|e| XidDown::Nvml(failure(&e)))?;
    let mut gpus = Vec::new();
    let mut why = None;
    for index in 0..count {
        let Ok(dev) = nvml.device_by_index(index) else {
            continue;
        };
        let supported = dev
            .supported_event_types()
            .is_ok_and(|t| t.contains(EventTypes::CRITICAL_XID_ERROR));
        if !supported {
            why.get_or_insert(XidDown::NotReported { gpu: index });
            continue;
        }
        match dev.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
            Ok(s) => {
                set = s;
                gpus.push(index);
            }
            Err(e) => {
                why = Some(XidDown::Gpu {
                    gpu: index,
                    failure: failure(&e.error),
                });
                set = nvml
                    .create_event_set()
                    .map_err(|e| XidDown::Nvml(failure(&e)))?;
                for &g in &gpus {
                    let dev = nvml
                        .device_by_index(g)
                        .map_err(|e| XidDown::Nvml(failure(&e)))?;
                    set = dev
                        .register_events(EventTypes::CRITICAL_XID_ERROR, set)
                        .map_err(|e| XidDown::Nvml(failure(&e.error)))?;
                }
            }
        }
    }
    if gpus.is_empty() {
        return Err(why.unwrap_or(XidDown::NoGpu));
    }
    Ok((set, gpus))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_library_is_a_reason_never_an_empty_watch() {
        let mut w = XidWatcher::start(Some(Path::new("/nonexistent/libnvidia-ml.so.1")));
        let why = w
            .registered(Duration::from_secs(10))
            .expect_err("nothing to watch")
            .to_string();
        assert!(why.contains("cannot load the NVML library"), "{why}");
        assert!(w.events(Instant::now()).is_empty());
    }
}
