//! What `kill` plans and reports: plain values, shared by the action
//! that makes them and the presenters that show them.

use super::{Owner, Reason, VerdictState};
use serde::Serialize;

/// One process the plan will signal.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PlanEntry {
    /// PID.
    pub pid: u32,
    /// Start time seen by the scan: the identity.
    pub start_time_ticks: u64,
    /// Why it is a target.
    pub reason: String,
}

/// A process left out, and why.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Skipped {
    /// PID.
    pub pid: u32,
    /// Why it is not signalled.
    pub reason: String,
    /// Left out for safety (exit 5 when nothing else was done).
    pub refused: bool,
}

/// The plan.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Plan {
    /// What will be signalled.
    pub targets: Vec<PlanEntry>,
    /// What matched but will not be.
    pub skipped: Vec<Skipped>,
}

/// A target that was not signalled because it had changed.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Changed {
    /// PID.
    pub pid: u32,
    /// What changed.
    pub why: String,
}

/// What happened (SPEC.md's `kill` object, with additions).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Every PID signalled.
    pub targets: Vec<u32>,
    /// Targets still running at the end.
    pub survivors: Vec<u32>,
    /// The memory is proven back: the verdict is free.
    pub released: bool,
    /// free (released), busy (not released) or unknown (it could not be
    /// proven either way).
    pub verdict: VerdictState,
    /// Why not released, or why that is unknown (JSON's `causes`; the
    /// `reasons` of `kill --json` are these in words).
    #[serde(rename = "causes")]
    pub reasons: Vec<Reason>,
    /// From the first signal to the release.
    pub seconds_to_release: f64,
    /// From the moment every signalled target had exited to the release
    /// (the driver's teardown), or to the end when not released; None when
    /// a target never exited.
    pub seconds_after_exit: Option<f64>,
    /// How long the release was watched for a supervisor's restart.
    pub seconds_watched_for_restarts: f64,
    /// Why that watch stopped early (a snapshot failed): no restart was
    /// seen, but none can be ruled out.
    pub restart_watch_error: Option<String>,
    /// Targets that needed SIGKILL.
    pub killed_hard: Vec<u32>,
    /// Targets whose PID now names another process: not signalled.
    pub identity_changed: Vec<u32>,
    /// Targets that no longer held a GPU (exec'd or let go) when checked
    /// right before the signal: not signalled.
    pub changed: Vec<Changed>,
    /// Targets that could not be checked again right before the signal (a
    /// read failed or timed out): not signalled, and the release unknown.
    pub unchecked: Vec<Changed>,
    /// Survivors in uninterruptible sleep: waiting for the kernel.
    pub waiting_for_kernel: Vec<u32>,
    /// Left out, with why.
    pub skipped: Vec<Skipped>,
    /// Processes found by a rescan (matched, forked or restarted
    /// meanwhile) and handled in the same run.
    pub found_by_rescan: Vec<u32>,
    /// What still holds the GPUs when not released.
    pub still_holding: Vec<String>,
    /// Rounds of signals (1 unless the rescans found more).
    pub rounds: u32,
    /// Cgroups frozen while their processes (all targets) were checked and
    /// signalled; other targets were stopped with SIGSTOP.
    pub frozen_cgroups: Vec<String>,
    /// Every target the rounds handled, signalled or not, with who it was
    /// and the signals it was sent: what the audit record names. Not part
    /// of `kill --json`.
    #[serde(skip)]
    pub handled: Vec<Handled>,
}

/// A target one round of signals handled (planned, or found by a
/// rescan), as that round's snapshot saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Handled {
    /// PID.
    pub pid: u32,
    /// Start time: the identity.
    pub start_time_ticks: u64,
    /// Why it was a target.
    pub reason: String,
    /// The round (from 1).
    pub round: u32,
    /// comm; empty when the snapshot no longer had the process.
    pub comm: String,
    /// argv.
    pub cmdline: Vec<String>,
    /// The executable, when readable.
    pub exe: Option<String>,
    /// Real UID; None when the snapshot no longer had the process.
    pub uid: Option<u32>,
    /// User name.
    pub user: String,
    /// Who started it.
    pub owner: Owner,
    /// The signals sent to end it (`TERM`, `KILL`), in order; empty when
    /// it was not signalled.
    pub signals: Vec<String>,
}
