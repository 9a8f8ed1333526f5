//! After the memory is back: watching the release for a holder that a
//! supervisor starts again, for as long as what is known of it says.

use crate::act::monitor::{self, Ended, Tick, Watch};
use crate::model::{OwnerKind, Process, Snapshot, VerdictState};
use crate::pipeline;
use crate::snapshot::Collector;
use crate::snapshot::SnapshotError;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

/// How much longer to watch, at most, once a process that the targets'
/// parent started during the kill is seen: time for it to open a GPU (a
/// CUDA initialisation takes seconds).
pub(super) const SUSPECT_WATCH: Duration = Duration::from_secs(5);

/// Watches a release for `base` (and up to [`SUSPECT_WATCH`] after the
/// first suspect is seen, never past `until`) for a holder a supervisor
/// starts again. Returns the first snapshot that `judge` finds not free,
/// with that verdict; None when the release held; Err when a snapshot
/// failed, so the watch could not finish.
pub(super) fn settle(
    c: &Collector,
    first: &Snapshot,
    base: Duration,
    until: Instant,
    judge: &dyn Fn(&Snapshot) -> crate::model::Verdict,
    suspect: &dyn Fn(&Snapshot) -> bool,
) -> Result<Option<(Snapshot, crate::model::Verdict)>, SnapshotError> {
    let mut watch = Settling {
        c,
        until,
        stop: (Instant::now() + base).min(until),
        suspected: suspect(first),
        extended: false,
        judge,
        suspect,
    };
    match monitor::run(&mut watch, Duration::from_millis(100)) {
        Ended::Stopped(found) => found.map(Some),
        Ended::Deadline | Ended::Interrupted => Ok(None),
    }
}

/// The watch of [`settle`].
struct Settling<'a> {
    c: &'a Collector,
    /// No snapshot reads past this, nor does the watch.
    until: Instant,
    /// When the watch ends, unless a suspect extends it.
    stop: Instant,
    /// The last snapshot showed a suspect.
    suspected: bool,
    /// The watch was extended for a suspect already.
    extended: bool,
    judge: &'a dyn Fn(&Snapshot) -> crate::model::Verdict,
    suspect: &'a dyn Fn(&Snapshot) -> bool,
}

impl Watch for Settling<'_> {
    type Out = Result<(Snapshot, crate::model::Verdict), SnapshotError>;

    /// After each nap, a snapshot: not free ends the watch; a suspect in it
    /// (or in the first) extends the watch once.
    fn look(&mut self, tick: Tick) -> ControlFlow<Self::Out> {
        if !tick.first() {
            let snap = match pipeline::judged_until(self.c, Some(self.until)) {
                Ok(snap) => snap,
                Err(e) => return ControlFlow::Break(Err(e)),
            };
            let v = (self.judge)(&snap);
            if v.state == VerdictState::Busy {
                return ControlFlow::Break(Ok((snap, v)));
            }
            self.suspected = (self.suspect)(&snap);
        }
        if self.suspected && !self.extended {
            self.extended = true;
            self.stop = self
                .stop
                .max((Instant::now() + SUSPECT_WATCH).min(self.until));
        }
        ControlFlow::Continue(())
    }

    fn deadline(&self) -> Option<Instant> {
        Some(self.stop)
    }
}

/// How long to watch a release when a target's system unit restarts it
/// (its `RestartSec=`, then [`SUSPECT_WATCH`] for the program to open the
/// GPU) or the kubelet does (a pod's container); zero otherwise.
pub(super) fn known_restart_watch(initial: &Snapshot, signalled: &[Process]) -> Duration {
    signalled
        .iter()
        .filter_map(|t| {
            if t.owner.kind == OwnerKind::K8sPod {
                return Some(SUSPECT_WATCH);
            }
            let r = initial.units.get(t.owner.system_unit()?)?;
            r.restarts().then(|| {
                let delay = r
                    .restart_sec
                    .as_deref()
                    .map_or(Duration::from_millis(100), restart_sec);
                delay.min(Duration::from_secs(30)) + SUSPECT_WATCH
            })
        })
        .max()
        .unwrap_or_default()
}

/// A systemd time span (`5`, `100ms`, `1min 30s`); 100 ms (systemd's
/// default) when it cannot be read.
pub(super) fn restart_sec(text: &str) -> Duration {
    let mut total = Duration::ZERO;
    for word in text.split_whitespace() {
        let split = word
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(word.len());
        let (number, unit) = word.split_at(split);
        let Ok(n) = number.parse::<f64>() else {
            return Duration::from_millis(100);
        };
        let seconds = match unit {
            "" | "s" | "sec" | "second" | "seconds" => n,
            "ms" | "msec" => n / 1000.0,
            "m" | "min" | "minute" | "minutes" => n * 60.0,
            "h" | "hr" | "hour" | "hours" => n * 3600.0,
            _ => return Duration::from_millis(100),
        };
        total += Duration::try_from_secs_f64(seconds).unwrap_or(Duration::from_secs(3600));
    }
    total
}

/// Whether `snap` has a process holding nothing yet that a living parent
/// of a signalled target started during the kill, running the target's
/// program: maybe a supervisor's restart that has not opened a GPU yet.
pub(super) fn restart_suspected(snap: &Snapshot, signalled: &[Process], first_tick: u64) -> bool {
    snap.parents.values().any(|k| {
        k.start_time_ticks >= first_tick
            && k.ppid > 1
            && signalled
                .iter()
                .any(|t| t.ppid == k.ppid && crate::proc::names_exe(&k.comm, t.exe.as_deref()))
            && snap.comm_of(k.ppid).is_some() // its parent lives
    })
}
