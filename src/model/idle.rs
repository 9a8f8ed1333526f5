//! Idle holders (issue 29): which NVML call answered a GPU's per-process
//! utilisation and over which window, the rule that makes a holder idle
//! ([`activity`]), the framework shape an idle holder has, and the
//! evidence of the `idle-holders` and `idle-unknown` findings.
//!
//! A holder is idle when it holds GPU memory and the driver, asked for
//! every sample in the window, gave none with SM, memory-bandwidth,
//! encoder or decoder activity above zero. A reading that was not
//! supported or failed makes every holder of that GPU unknown, never
//! idle.

use super::{DriverEvidence, MpsRole, Process, Reading, Snapshot, Who};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The NVML call that answered a GPU's per-process utilisation.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum UtilCall {
    /// `nvmlDeviceGetProcessUtilization`. (The newer
    /// `nvmlDeviceGetProcessesUtilizationInfo` is not asked:
    /// nvml-wrapper 0.13 does not wrap it.)
    #[serde(rename = "nvmlDeviceGetProcessUtilization")]
    ProcessUtilization,
}

/// How a GPU's per-process utilisation was asked for.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct UtilWindow {
    /// The call that answered (or was refused).
    pub call: UtilCall,
    /// The timestamp passed as `lastSeenTimeStamp`: samples newer than
    /// this, microseconds since the epoch (the CPU clock).
    pub since_unix_us: u64,
    /// The window asked for (`--idle-window`), milliseconds.
    pub window_ms: u64,
}

/// What a process did on one GPU in the window, as the driver answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Activity {
    /// A sample with SM, memory, encoder or decoder use above zero.
    Busy,
    /// The reading succeeded and no sample shows any use.
    Idle,
    /// Not supported, failed, or not read: unknown.
    Unknown,
}

/// What `pid` did on a GPU whose evidence is `e` (None: NVML did not
/// read it). A sample of it with use is busy. Without one it is idle
/// where the driver sampled it at zero, where another process's samples
/// show the GPU's use, or where the GPU's own utilisation is zero; else
/// unknown: a driver that kept no sample in the window (NOT_FOUND) of a
/// GPU that is running something has not said who runs it.
pub fn activity(e: Option<&DriverEvidence>, pid: u32) -> Activity {
    Samples::of(e).map_or(Activity::Unknown, |s| s.activity(pid))
}

/// One GPU's per-process samples as [`activity`] reads them, read once:
/// whether each sampled PID used the GPU, and what the GPU as a whole
/// shows. None where the driver gave no samples (every PID unknown).
pub(super) struct Samples {
    /// Each sampled PID: whether any of its samples shows use, and its
    /// largest SM utilisation.
    mine: HashMap<u32, (bool, u32)>,
    /// Some process's sample shows use.
    any_used: bool,
    /// The GPU's own utilisation reads zero.
    gpu_still: bool,
}

impl Samples {
    /// The samples of a GPU whose evidence is `e`.
    pub(super) fn of(e: Option<&DriverEvidence>) -> Option<Samples> {
        let e = e?;
        let Reading::Value(samples) = &e.process_utilization else {
            return None;
        };
        let mut mine: HashMap<u32, (bool, u32)> = HashMap::with_capacity(samples.len());
        let mut any_used = false;
        for s in samples {
            let used = s.sm > 0 || s.mem > 0 || s.enc > 0 || s.dec > 0;
            any_used |= used;
            let (was_used, sm) = mine.entry(s.pid).or_default();
            *was_used |= used;
            *sm = (*sm).max(s.sm);
        }
        let gpu_still =
            matches!(e.gpu_utilization, Reading::Value(u) if u.gpu == 0 && u.memory == 0);
        Some(Samples {
            mine,
            any_used,
            gpu_still,
        })
    }

    /// What `pid` did, by the rule of [`activity`].
    pub(super) fn activity(&self, pid: u32) -> Activity {
        match self.mine.get(&pid) {
            Some((true, _)) => Activity::Busy,
            Some((false, _)) => Activity::Idle,
            None if self.any_used || self.gpu_still => Activity::Idle,
            None => Activity::Unknown,
        }
    }

    /// `pid`'s largest SM utilisation in the samples, 0 without one.
    pub(super) fn sm(&self, pid: u32) -> u32 {
        self.mine.get(&pid).map_or(0, |&(_, sm)| sm)
    }
}

/// What `p` did over the window on every GPU it holds memory on: busy on
/// any is busy; unknown on any (and busy on none) is unknown; idle only
/// where every GPU answered and none shows use. None: it holds no
/// memory on a GPU NVML reads. (Once per holder:
/// [`super::Lookup::process_activity`].)
pub fn process_activity(s: &Snapshot, p: &Process) -> Option<Activity> {
    over_gpus(p, |gpu| {
        let e = s
            .gpus
            .iter()
            .find(|g| g.index == gpu)
            .and_then(|g| g.driver_evidence.as_ref());
        activity(e, p.pid)
    })
}

/// `p`'s activity on each GPU it holds memory on (`on`), folded, with
/// what it did on the GPUs `--gpu` left out.
pub(super) fn over_gpus(p: &Process, on: impl Fn(u32) -> Activity) -> Option<Activity> {
    let mut out: Option<Activity> = None;
    for m in &p.gpu_memory {
        out = Some(fold(out, on(m.gpu)));
    }
    // Where `--gpu` narrowed the snapshot, what it did on the others.
    match (out, p.unselected_activity) {
        (Some(_), Some(a)) => Some(fold(out, a)),
        _ => out,
    }
}

/// Busy on any GPU is busy; unknown on any (and busy on none) unknown.
fn fold(out: Option<Activity>, a: Activity) -> Activity {
    match (out, a) {
        (_, Activity::Busy) | (Some(Activity::Busy), _) => Activity::Busy,
        (_, Activity::Unknown) | (Some(Activity::Unknown), _) => Activity::Unknown,
        _ => Activity::Idle,
    }
}

/// What `p` did over the window as the idle findings judge it: None for
/// a process they never name (gone, protected, an MPS server: it holds
/// its busy clients' memory, or with no memory on a GPU NVML reads);
/// unknown for an MPS client (the driver samples its server). (Once per
/// holder: [`super::Lookup::judged_activity`].)
pub fn judged_activity(s: &Snapshot, p: &Process) -> Option<Activity> {
    judged(p, s.mps_role(p), || process_activity(s, p))
}

/// The rule of [`judged_activity`], given `p`'s MPS role and (asked only
/// when needed) what it did.
pub(super) fn judged(
    p: &Process,
    role: Option<MpsRole>,
    activity: impl FnOnce() -> Option<Activity>,
) -> Option<Activity> {
    if !p.is_live() || p.protected || role == Some(MpsRole::Server) {
        return None;
    }
    let a = activity()?;
    Some(if role == Some(MpsRole::Client) {
        Activity::Unknown
    } else {
        a
    })
}

/// Where `p`'s window began on the GPUs it holds memory on (the latest
/// of them: what every one of its GPUs was asked from), milliseconds
/// since the epoch.
pub fn window_start_ms(s: &Snapshot, p: &Process) -> Option<u64> {
    p.gpu_memory
        .iter()
        .filter_map(|m| s.gpus.iter().find(|g| g.index == m.gpu))
        .filter_map(|g| g.driver_evidence.as_ref()?.utilization_window)
        .map(|w| w.since_unix_us / 1000)
        .max()
}

/// `p`'s SM (compute) utilisation over the window: the largest of its
/// samples on the GPUs it holds memory on that answered (0 where such a
/// GPU has no sample of it); None where none answered.
pub fn sm_percent(s: &Snapshot, p: &Process) -> Option<u32> {
    p.gpu_memory
        .iter()
        .filter_map(|m| {
            let g = s.gpus.iter().find(|g| g.index == m.gpu)?;
            Some(Samples::of(g.driver_evidence.as_ref())?.sm(p.pid))
        })
        .max()
}

/// What an idle holder is, where a framework's shape says (a leftover
/// more often than not).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum IdleShape {
    /// A Jupyter (IPython) kernel: `ipykernel_launcher` or `ipykernel`
    /// in its command line.
    JupyterKernel,
    /// A Ray worker the raylet keeps idle: its title `ray::IDLE`.
    RayIdleWorker,
    /// A notebook server (`jupyter-lab`, `jupyter-notebook`,
    /// `jupyter_server`).
    NotebookServer,
}

/// One idle holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleHolder {
    /// The holder.
    pub who: Who,
    /// Its framework shape, where one matches.
    pub shape: Option<IdleShape>,
    /// Its memory per GPU (bytes when known).
    pub memory: Vec<(u32, Option<u64>)>,
    /// Since when a long-running command has found it idle, milliseconds
    /// since the epoch.
    pub since_unix_ms: Option<u64>,
}

/// The `idle-holders` finding: live holders with memory and no activity
/// over the window, and how many busy holders share their GPUs (left
/// alone by its next).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleHolders {
    /// The idle holders.
    pub holders: Vec<IdleHolder>,
    /// Busy holders on the same GPUs.
    pub busy: usize,
    /// The window asked for, milliseconds.
    pub window_ms: u64,
}

/// The `idle-unknown` finding: GPUs whose holders' activity the driver
/// did not give, so none of them is called idle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleUnknown {
    /// The GPUs.
    pub gpus: Vec<u32>,
    /// Why, as read: NOT_SUPPORTED, the failure, or (a value) an answer
    /// that left some holders neither busy nor idle.
    pub reading: Reading<()>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GpuUtil, ProcessUtil};

    #[test]
    fn idle_only_where_the_reading_answered_and_showed_nothing() {
        let sample = |pid, sm, dec| ProcessUtil {
            pid,
            sm,
            dec,
            ..ProcessUtil::default()
        };
        let e = DriverEvidence {
            process_utilization: Reading::Value(vec![sample(1, 0, 0), sample(2, 0, 3)]),
            ..DriverEvidence::default()
        };
        assert_eq!(activity(Some(&e), 1), Activity::Idle, "a zero sample");
        assert_eq!(activity(Some(&e), 2), Activity::Busy, "a decoder");
        assert_eq!(activity(Some(&e), 3), Activity::Idle, "no sample");
        let n = DriverEvidence::default();
        assert_eq!(activity(Some(&n), 1), Activity::Unknown);
        assert_eq!(activity(None, 1), Activity::Unknown);
        let f = DriverEvidence {
            process_utilization: Reading::Failed(crate::model::Failure::NoPermission),
            ..DriverEvidence::default()
        };
        assert_eq!(activity(Some(&f), 1), Activity::Unknown);
    }

    /// NOT_FOUND (no sample in the window) is idle only where the GPU's
    /// own utilisation is zero: busy workers the driver did not sample
    /// are never called idle.
    #[test]
    fn no_sample_at_all_is_idle_only_on_a_still_gpu() {
        let unsampled = |gpu_utilization| DriverEvidence {
            process_utilization: Reading::Value(Vec::new()),
            gpu_utilization,
            ..DriverEvidence::default()
        };
        let busy = unsampled(Reading::Value(GpuUtil {
            gpu: 90,
            memory: 40,
        }));
        assert_eq!(activity(Some(&busy), 1), Activity::Unknown);
        let blind = unsampled(Reading::NotSupported);
        assert_eq!(activity(Some(&blind), 1), Activity::Unknown);
        let still = unsampled(Reading::Value(GpuUtil { gpu: 0, memory: 0 }));
        assert_eq!(activity(Some(&still), 1), Activity::Idle);
    }
}
