//! `gpufree wait`: block until the selected GPUs are free, for systemd's
//! ExecStartPre=, Slurm's prolog and CI.
//!
//! A full snapshot decides, through the one verdict
//! ([`crate::diagnose::verdict`]). Between snapshots it sleeps on the pidfds
//! of the holders it knows (waking the moment one exits) and polls NVML alone
//! each interval, taking the next full snapshot only when NVML shows a change
//! or a holder exited: cheap on a busy host, prompt when the memory comes
//! back. Every read ends by the deadline, so `--timeout` is a hard cap.
//! The loop is the [`monitor`]'s: this file says what one look is.

use super::identity::Target;
use super::monitor::{self, Ended, Tick, Watch};
use crate::diagnose::verdict::{self, Policy};
use crate::model::{Selection, Snapshot, Verdict, VerdictState};
use crate::pipeline::{self, select};
use crate::snapshot::{Collector, SnapshotError};
use std::ops::ControlFlow;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

/// How far past its deadline a snapshot's reads may go, so that the last
/// look is a whole one (SPEC.md allows 0.5 s).
pub const LAST_LOOK: Duration = Duration::from_millis(350);

/// Options of `gpufree wait`.
#[derive(Debug, Clone)]
pub struct Options {
    /// The GPUs (or MIG devices) to wait for.
    pub gpus: Selection,
    /// What free means (`--max-used`, `--holders-only`).
    pub policy: Policy,
    /// When the wait began, before its first snapshot (`seconds` counts
    /// from here: a first snapshot that took the whole timeout is time
    /// waited).
    pub started: Instant,
    /// Stop looking at this moment.
    pub deadline: Instant,
    /// How often NVML is polled.
    pub interval: Duration,
}

/// The outcome.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The verdict of the last look.
    pub verdict: Verdict,
    /// Seconds waited.
    pub seconds: f64,
    /// Full snapshots taken.
    pub snapshots: u32,
    /// The last snapshot (of the selected GPUs).
    pub last: Snapshot,
}

/// NVML's view of the selected GPUs (sysfs's for DRM GPUs): (used, listed
/// PIDs) each.
fn fingerprint(c: &Collector, sel: &Selection, deadline: Instant) -> Vec<(u64, Vec<u32>)> {
    let mut gpus = c.memory_until(Some(deadline)).gpus;
    sel.narrow_gpus(&mut gpus);
    gpus.iter()
        .map(|g| {
            (
                g.memory.used_bytes,
                g.nvml_processes.iter().map(|p| p.pid).collect(),
            )
        })
        .collect()
}

/// Waits until the selected GPUs are free or the deadline passes, from a
/// first snapshot already taken. An unknown verdict that cannot change by
/// waiting (no NVML library, without `--holders-only`) ends the wait at once.
pub fn wait(c: &Collector, opts: &Options, first: Snapshot) -> Result<Outcome, SnapshotError> {
    let mut w = Waiting {
        c,
        opts,
        started: opts.started,
        snapshots: 1,
        snap: select(first, &opts.gpus),
        verdict: None,
        pinned: Vec::new(),
        before: Vec::new(),
        looked: Instant::now(),
        relook: None,
    };
    match monitor::run(&mut w, opts.interval) {
        Ended::Stopped(outcome) => outcome,
        // The last look: a whole snapshot, whatever it says.
        Ended::Deadline => {
            w.take()?;
            let verdict = verdict::overall(&w.snap, &opts.policy);
            Ok(w.outcome(verdict))
        }
        Ended::Interrupted => {
            let verdict = w
                .verdict
                .take()
                .unwrap_or_else(|| verdict::overall(&w.snap, &opts.policy));
            Ok(w.outcome(verdict))
        }
    }
}

/// One wait: the last snapshot, and what is watched for a change until the
/// next.
struct Waiting<'a> {
    c: &'a Collector,
    opts: &'a Options,
    started: Instant,
    snapshots: u32,
    /// The last snapshot (of the selected GPUs).
    snap: Snapshot,
    /// Its verdict, once judged.
    verdict: Option<Verdict>,
    /// Its holders, pinned: their exit wakes the wait.
    pinned: Vec<Target>,
    /// NVML's view when it was taken.
    before: Vec<(u64, Vec<u32>)>,
    /// When it was taken.
    looked: Instant,
    /// While the verdict is unknown for what could not be read: look again
    /// after this long (a stuck read may have cleared).
    relook: Option<Duration>,
}

impl Waiting<'_> {
    /// Takes the next full snapshot.
    fn take(&mut self) -> Result<(), SnapshotError> {
        let deadline = self.opts.deadline + LAST_LOOK;
        self.snap = select(
            pipeline::judged_until(self.c, Some(deadline))?,
            &self.opts.gpus,
        );
        self.snapshots += 1;
        Ok(())
    }

    /// Judges the last snapshot: the outcome when it ends the wait (free,
    /// hopeless, or the deadline passed), else the watch for a change is
    /// set up from it.
    fn judge(&mut self) -> ControlFlow<Outcome> {
        let verdict = verdict::overall(&self.snap, &self.opts.policy);
        let hopeless = verdict.state == VerdictState::Unknown && !self.c.has_nvml();
        if verdict.state == VerdictState::Free || hopeless || Instant::now() >= self.opts.deadline {
            return ControlFlow::Break(self.outcome(verdict));
        }
        self.looked = Instant::now();
        self.relook =
            (verdict.state == VerdictState::Unknown).then_some(self.c.config().read_timeout);
        self.verdict = Some(verdict);
        self.pinned = Target::pin_all(&self.snap);
        self.before = fingerprint(self.c, &self.opts.gpus, self.opts.deadline + LAST_LOOK);
        ControlFlow::Continue(())
    }

    /// Whether something may have changed since the last snapshot: a holder
    /// exited, a read timeout passed while the verdict is unknown, or NVML
    /// changed.
    fn changed(&self, tick: Tick) -> bool {
        let exited = if self.wake_on().is_empty() {
            self.pinned.iter().any(Target::exited)
        } else {
            tick.woken
        };
        exited
            || self.relook.is_some_and(|r| self.looked.elapsed() >= r)
            || fingerprint(self.c, &self.opts.gpus, self.opts.deadline + LAST_LOOK) != self.before
    }

    /// The outcome, with the last snapshot (taken: the wait is over).
    fn outcome(&mut self, verdict: Verdict) -> Outcome {
        Outcome {
            verdict,
            seconds: self.started.elapsed().as_secs_f64(),
            snapshots: self.snapshots,
            last: std::mem::take(&mut self.snap),
        }
    }
}

impl Watch for Waiting<'_> {
    type Out = Result<Outcome, SnapshotError>;

    /// The first snapshot is judged at once; after each nap, a new one is
    /// taken and judged only when something may have changed.
    fn look(&mut self, tick: Tick) -> ControlFlow<Self::Out> {
        if !tick.first() {
            if !self.changed(tick) {
                return ControlFlow::Continue(());
            }
            if let Err(e) = self.take() {
                return ControlFlow::Break(Err(e));
            }
        }
        self.judge().map_break(Ok)
    }

    fn deadline(&self) -> Option<Instant> {
        Some(self.opts.deadline)
    }

    fn wake_on(&self) -> Vec<BorrowedFd<'_>> {
        super::identity::pidfds(&self.pinned)
    }
}
