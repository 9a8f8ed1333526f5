//! The simulator's state file (SPEC.md, "The simulator") and what the
//! simulated driver reports from it at a given moment: which processes are
//! alive, which have been gone for less than `release_delay_ms`, and the memory
//! that follows from them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The whole state file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    /// `nvmlSystemGetDriverVersion`.
    #[serde(default = "default_driver")]
    pub driver_version: String,
    /// `nvmlSystemGetCudaDriverVersion`, e.g. 13000 for 13.0.
    #[serde(default = "default_cuda")]
    pub cuda_driver_version: i32,
    /// The GPUs, in index order.
    #[serde(default)]
    pub devices: Vec<Device>,
    /// Calls that hang this many milliseconds before they answer (an
    /// extension of SPEC.md's format, for timeout tests): `init`,
    /// `device_count`.
    #[serde(default)]
    pub hang_ms: BTreeMap<String, u64>,
}

/// Sleeps as long as `hang_ms` says for `call`: a driver call that hangs.
pub fn hang(hang_ms: &BTreeMap<String, u64>, call: &str) {
    if let Some(&ms) = hang_ms.get(call) {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

fn default_driver() -> String {
    "580.95.05".to_string()
}

fn default_cuda() -> i32 {
    13000
}

/// One simulated GPU.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Device {
    /// Product name.
    pub name: String,
    /// `GPU-...` UUID.
    pub uuid: String,
    /// `00000000:01:00.0` form.
    pub pci_bus_id: String,
    /// N of `/dev/nvidiaN`.
    pub minor_number: u32,
    /// Framebuffer size.
    pub memory_total_bytes: u64,
    /// Used even when idle (driver reserve).
    #[serde(default)]
    pub memory_baseline_bytes: u64,
    /// Used, attributed to no process.
    #[serde(default)]
    pub leaked_bytes: u64,
    /// How long memory stays after its process is first seen gone.
    #[serde(default)]
    pub release_delay_ms: u64,
    /// Processes with memory on this GPU.
    #[serde(default)]
    pub processes: Vec<Process>,
    /// MPS: the PID of the `nvidia-cuda-mps-server` that serves this GPU
    /// (list the server itself as a `compute` entry). Its clients, the
    /// `mps` entries, live in its context: they are reported only while
    /// it lives, and their memory goes with it (after `release_delay_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mps_server_pid: Option<u32>,
    /// Calls that fail on this device, with the NVML return code they give
    /// (an extension of SPEC.md's format): keys `name`, `uuid`, `pci_info`,
    /// `minor_number`, `memory_info`, `compute_processes`,
    /// `graphics_processes`, `mps_processes`; e.g. `{"memory_info": 15}`
    /// for GPU_IS_LOST.
    #[serde(default)]
    pub errors: BTreeMap<String, u32>,
    /// Calls that hang this many milliseconds before they answer (an
    /// extension of SPEC.md's format), with the keys of `errors`.
    #[serde(default)]
    pub hang_ms: BTreeMap<String, u64>,
    /// MIG mode (`nvmlDeviceGetMigMode`): absent for a board without MIG,
    /// `false` for MIG disabled, `true` for enabled (then its memory and
    /// processes live in `mig`, and `processes` must be empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_mode: Option<bool>,
    /// The MIG devices (compute instances) in MIG index order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig: Vec<MigDevice>,
    /// `NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`; absent: NOT_SUPPORTED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_action: Option<RecoveryAction>,
    /// `nvmlDeviceGetRemappedRows`; absent: NOT_SUPPORTED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remapped_rows: Option<RemappedRows>,
    /// `nvmlDeviceGetRetiredPagesPendingStatus`; absent: NOT_SUPPORTED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_pages_pending: Option<bool>,
    /// `nvmlDeviceGetUtilizationRates`: the whole GPU's use, percent;
    /// absent: NOT_SUPPORTED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization: Option<health::GpuUtilization>,
    /// Xid critical errors, delivered in this order by
    /// `nvmlEventSetWait_v2` to a set registered for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xid_events: Vec<XidEvent>,
}

impl Device {
    /// Hangs as configured for `call`, then gives the return code injected
    /// for it, if any.
    pub fn injected(&self, call: &str) -> Option<u32> {
        hang(&self.hang_ms, call);
        self.errors.get(call).copied()
    }
}

/// A process entry of a device.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Process {
    /// PID as the caller's /proc sees it (or any number for `always`).
    pub pid: u32,
    /// Memory this process uses on the device.
    pub used_bytes: u64,
    /// Which list reports it.
    #[serde(default, rename = "type")]
    pub kind: ProcessKind,
    /// When it is reported.
    #[serde(default)]
    pub visible: Visibility,
    /// With `while-alive`: reported only while the process with this PID
    /// has this start time (stat field 22), as the real driver tracks a
    /// process and not a number: a reused PID is not reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time_ticks: Option<u64>,
    /// SM utilisation, percent (`nvmlDeviceGetProcessUtilization`);
    /// absent: not sampled.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "percent"
    )]
    pub sm_util: Option<u32>,
    /// Memory-bandwidth utilisation, percent; absent: not sampled.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "percent"
    )]
    pub mem_util: Option<u32>,
}

/// A percentage, 0 to 100: what NVML's samples hold.
fn percent<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let v = Option::<u32>::deserialize(d)?;
    match v {
        Some(p) if p > 100 => Err(serde::de::Error::custom(format!(
            "{p} is not a percentage (0 to 100)"
        ))),
        v => Ok(v),
    }
}

/// The NVML list that reports a process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessKind {
    /// `nvmlDeviceGetComputeRunningProcesses`.
    #[default]
    Compute,
    /// `nvmlDeviceGetGraphicsRunningProcesses`.
    Graphics,
    /// `nvmlDeviceGetMPSComputeRunningProcesses`.
    Mps,
}

/// When a process entry is reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Visibility {
    /// While the PID exists and is not a zombie, then for the release delay.
    #[default]
    WhileAlive,
    /// Always, even if no such PID exists here (another PID namespace).
    Always,
}

/// Why the state file could not be used; the message names the file.
#[derive(Debug)]
pub struct StateError(pub String);

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `s` on one line, safe for a terminal: control characters (a field name
/// in the file may hold a newline or an escape sequence) and bidi controls
/// written as escapes.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control()
                || ('\u{202a}'..='\u{202e}').contains(&c)
                || ('\u{2066}'..='\u{2069}').contains(&c)
            {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

impl State {
    /// Parses a state file's bytes; `path` only names it in errors. The
    /// error is one line, whatever the file holds.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<State, StateError> {
        let state: State = serde_json::from_slice(bytes).map_err(|e| {
            StateError(format!(
                "invalid simulator state {}: {}",
                one_line(&path.display().to_string()),
                one_line(&e.to_string())
            ))
        })?;
        for (i, d) in state.devices.iter().enumerate() {
            if d.uuid.is_empty() || d.name.is_empty() {
                return Err(StateError(format!(
                    "invalid simulator state {}: device {i} needs a name and a uuid",
                    one_line(&path.display().to_string())
                )));
            }
            if let Err(why) = mig::check(d) {
                return Err(StateError(format!(
                    "invalid simulator state {}: device {i}: {}",
                    one_line(&path.display().to_string()),
                    one_line(&why)
                )));
            }
        }
        Ok(state)
    }

    /// Reads and parses the state file at `path`.
    pub fn load(path: &Path) -> Result<State, StateError> {
        let bytes = std::fs::read(path).map_err(|e| {
            StateError(format!(
                "cannot read simulator state {}: {e}",
                path.display()
            ))
        })?;
        State::parse(&bytes, path)
    }
}

/// Whether a PID exists in this /proc and is not a zombie (or dead), and,
/// when `start_time` is given, started at that tick.
pub fn pid_alive(proc_root: &Path, pid: u32, start_time: Option<u64>) -> bool {
    let Ok(stat) = std::fs::read(proc_root.join(pid.to_string()).join("stat")) else {
        return false;
    };
    // Fields after the last ')' (comm may hold ')'): state first, the
    // start time 20th.
    let Some(close) = stat.iter().rposition(|&b| b == b')') else {
        return false;
    };
    let rest = String::from_utf8_lossy(stat.get(close + 2..).unwrap_or_default());
    let fields: Vec<&str> = rest.split(' ').collect();
    let live = !matches!(fields.first(), Some(&("Z" | "X" | "x")) | None);
    live && start_time.is_none_or(|want| fields.get(19).and_then(|f| f.parse().ok()) == Some(want))
}

/// What the simulated driver reports for one device at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceView {
    /// The reported processes: (pid, used bytes, kind).
    pub processes: Vec<(u32, u64, ProcessKind)>,
    /// Baseline + leaked + the reported processes, at most the total.
    pub used_bytes: u64,
}

/// Decides which processes are reported now. `alive` says whether a PID
/// lives; `log` records first-gone moments (changed is set when it grew).
pub fn view_device(
    dev: &Device,
    now_ms: u64,
    alive: &dyn Fn(u32, Option<u64>) -> bool,
    log: &mut GoneLog,
    changed: &mut bool,
) -> DeviceView {
    let mut processes = Vec::new();
    // An MPS client's context is its server's: it dies with the server.
    let server_lives = dev.mps_server_pid.is_none_or(|s| alive(s, None));
    for p in &dev.processes {
        let context_lives = p.kind != ProcessKind::Mps || server_lives;
        let reported = match p.visible {
            Visibility::Always => true,
            Visibility::WhileAlive if context_lives && alive(p.pid, p.start_time_ticks) => {
                if log.first_gone_ms.remove(&p.pid).is_some() {
                    *changed = true;
                }
                true
            }
            Visibility::WhileAlive if dev.release_delay_ms == 0 => false,
            Visibility::WhileAlive => {
                let since = *log.first_gone_ms.entry(p.pid).or_insert_with(|| {
                    *changed = true;
                    now_ms
                });
                now_ms.saturating_sub(since) < dev.release_delay_ms
            }
        };
        if reported {
            processes.push((p.pid, p.used_bytes, p.kind));
        }
    }
    let used = processes
        .iter()
        .fold(
            dev.memory_baseline_bytes.saturating_add(dev.leaked_bytes),
            |acc, p| acc.saturating_add(p.1),
        )
        .min(dev.memory_total_bytes);
    DeviceView {
        processes,
        used_bytes: used,
    }
}

mod gone;
mod health;
mod mig;

pub use gone::{gone_log_path, replace, GoneLog};
pub use health::{GpuUtilization, RecoveryAction, RemappedRows, XidEvent};
pub use mig::{view_target, MigDevice, Reported, Target, TargetView, MAX_MIG};

#[cfg(test)]
mod tests;
