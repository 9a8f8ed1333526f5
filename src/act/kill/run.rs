//! The steps of one execution, in the order `execute` runs them: the
//! rounds of signals, the wait for the memory, the end verdict and the
//! watch for restarts, and the report.

use super::{Deadlines, Options, MAX_ROUNDS};
use crate::act::identity::Target;
use crate::act::kill::plan::{Safety, Selectors};
use crate::act::kill::release::Release;
use crate::act::kill::settle::{known_restart_watch, restart_suspected, settle};
use crate::act::kill::signals::{as_handled, joiners, round, Sent};
use crate::act::monitor::{self, Tick, Watch};
use crate::act::progress::Event;
use crate::diagnose::verdict;
use crate::model::{Plan, PlanEntry, Process, Report, Snapshot, VerdictState};
use crate::pipeline;
use crate::snapshot::Collector;
use rustix::process::Signal;
use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

/// One execution's fixed context.
pub(super) struct Run<'a> {
    pub(super) c: &'a Collector,
    pub(super) opts: &'a Options,
    pub(super) deadlines: Deadlines,
    pub(super) started: Instant,
    /// Clock ticks at the start: a process started later started during
    /// the kill.
    pub(super) first_tick: u64,
}

/// What the rounds of signals did.
pub(super) struct Rounds {
    pub(super) report: Report,
    /// Every identity the run meant to free (planned or joined).
    pub(super) handled: BTreeSet<(u32, u64)>,
    /// The targets signalled, pinned.
    pub(super) targets: Vec<Target>,
    /// The processes signalled, as the snapshots saw them.
    pub(super) signalled: Vec<Process>,
}

/// When the steps of an execution ended.
pub(super) struct Times {
    pub(super) started: Instant,
    /// Every target had exited.
    pub(super) exited_at: Option<Instant>,
    /// The first end verdict was made.
    pub(super) released_at: Instant,
}

impl Run<'_> {
    /// The rounds of signals: the plan's targets, then whoever a rescan
    /// finds joining, up to [`MAX_ROUNDS`] (SIGKILL at once from the
    /// third) and the signals' deadline.
    pub(super) fn rounds(
        &self,
        initial: &Snapshot,
        plan: Plan,
        sel: &Selectors,
        safety: &Safety,
        progress: &mut dyn FnMut(Event),
    ) -> Rounds {
        let mut report = Report {
            skipped: plan.skipped.clone(),
            ..Report::default()
        };
        let mut handled: BTreeSet<(u32, u64)> = plan
            .targets
            .iter()
            .map(|e| (e.pid, e.start_time_ticks))
            .collect();
        let (mut targets, mut signalled) = (Vec::new(), Vec::new());
        let mut snap = initial.clone();
        let mut entries = plan.targets;
        while !entries.is_empty() && report.rounds < MAX_ROUNDS {
            report.rounds += 1;
            let (sig, done) = self.one_round(&snap, &entries, &mut report);
            progress(Event::Signalled {
                round: report.rounds,
                signal: sig,
                pids: done.iter().map(|t| t.pid).collect(),
            });
            signalled.extend(
                done.iter()
                    .filter_map(|t| snap.processes.iter().find(|p| p.pid == t.pid))
                    .cloned(),
            );
            targets.extend(done);
            if Instant::now() >= self.deadlines.act {
                break;
            }
            let Ok(next) = pipeline::judged_until(self.c, Some(self.deadlines.act)) else {
                break;
            };
            snap = next;
            entries = joiners(&snap, sel, safety, &handled, &signalled, self.first_tick);
            handled.extend(entries.iter().map(|e| (e.pid, e.start_time_ticks)));
            report.found_by_rescan.extend(entries.iter().map(|e| e.pid));
        }
        report.targets.sort_unstable();
        report.targets.dedup();
        report.found_by_rescan.sort_unstable();
        report.found_by_rescan.dedup();
        Rounds {
            report,
            handled,
            targets,
            signalled,
        }
    }

    /// One round of signals to `entries` (SIGKILL at once from the third),
    /// noting in the report who each was and the signals it was sent.
    /// Returns the first signal and the targets signalled.
    fn one_round(
        &self,
        snap: &Snapshot,
        entries: &[PlanEntry],
        report: &mut Report,
    ) -> (Signal, Vec<Target>) {
        let sig = if report.rounds >= 3 {
            Signal::KILL
        } else {
            self.opts.signal
        };
        let hard_before = report.killed_hard.len();
        let done = round(
            self.c,
            snap,
            entries,
            sig,
            self.opts,
            &self.deadlines,
            report,
        );
        let sent = Sent {
            round: report.rounds,
            first: sig,
            hard: report.killed_hard[hard_before..].to_vec(),
        };
        report
            .handled
            .extend(as_handled(snap, entries, &done, &sent));
        (sig, done)
    }

    /// Waits, on NVML alone, until the targets' memory is back or the
    /// signals' deadline passes. Returns when every target had exited, if
    /// they all had.
    pub(super) fn await_memory(
        &self,
        release: &Release,
        targets: &[Target],
        progress: &mut dyn FnMut(Event),
    ) -> Option<Instant> {
        progress(Event::ReleaseWaitStarted);
        let mut back = MemoryBack {
            c: self.c,
            release,
            targets,
            deadline: self.deadlines.act,
            waiting: Instant::now(),
            exited_at: None,
            progress,
        };
        if self.c.has_nvml() && !release.expected.is_empty() {
            let _ = monitor::run(&mut back, Duration::from_millis(25));
        }
        (back.progress)(Event::ReleaseWaitEnded);
        back.note_exits();
        back.exited_at
    }

    /// The end verdict, from a fresh snapshot, then (when the memory is
    /// back) the watch for a holder a supervisor starts again, which may
    /// overturn it. Returns the verdict, the snapshot it was made from, and
    /// when the memory was first judged back.
    pub(super) fn conclude(
        &self,
        initial: &Snapshot,
        release: &Release,
        signalled: &[Process],
        report: &mut Report,
    ) -> (crate::model::Verdict, Option<Snapshot>, Instant) {
        let end = pipeline::judged_until(self.c, Some(self.deadlines.end));
        let judged: &Report = report;
        let judge = |end: &Snapshot| {
            release.judge(
                end,
                judged,
                signalled,
                self.first_tick,
                self.opts.holders_only,
            )
        };
        let mut verdict = match &end {
            Ok(end) => judge(end),
            Err(e) => verdict::finish(
                Vec::new(),
                vec![crate::model::Why::NoFinalSnapshot {
                    error: e.to_string(),
                }],
                Vec::new(),
            ),
        };
        let released_at = Instant::now();
        let mut end = end.ok();
        let watch = verdict.state == VerdictState::Free
            && !self.opts.settle.is_zero()
            && !signalled.is_empty();
        if watch {
            let watched = match end.as_ref() {
                Some(first) => self.watch_for_restarts(initial, signalled, first, &judge),
                None => Ok(None),
            };
            match watched {
                Ok(Some((snap, busy))) => {
                    verdict = busy;
                    end = Some(snap);
                }
                Ok(None) => {}
                Err(e) => {
                    report.restart_watch_error = Some(crate::model::WatchFailed {
                        error: e.to_string(),
                    });
                }
            }
            report.seconds_watched_for_restarts = released_at.elapsed().as_secs_f64();
        }
        (verdict, end, released_at)
    }

    /// After the memory is back: watches the release for a holder that a
    /// supervisor starts again. A supervisor known beforehand is given its
    /// restart delay and the time a restarted program takes to open the
    /// GPU; the watch ends halfway through the reserve before the user's
    /// cap (the rest is for the verdict and the report).
    fn watch_for_restarts(
        &self,
        initial: &Snapshot,
        signalled: &[Process],
        first: &Snapshot,
        judge: &dyn Fn(&Snapshot) -> crate::model::Verdict,
    ) -> Result<Option<(Snapshot, crate::model::Verdict)>, crate::snapshot::SnapshotError> {
        let base = self
            .opts
            .settle
            .max(known_restart_watch(initial, signalled));
        let d = &self.deadlines;
        let watch_end = d.end - (d.end - d.act) / 2;
        let suspect = |snap: &Snapshot| restart_suspected(snap, signalled, self.first_tick);
        settle(self.c, first, base, watch_end, judge, &suspect)
    }
}

/// The targets still running.
pub(super) fn survivors(targets: &[Target]) -> Vec<u32> {
    targets
        .iter()
        .filter(|t| !t.exited())
        .map(|t| t.pid)
        .collect()
}

/// Completes the report from the end verdict, the end snapshot (if one
/// was taken) and the targets as they are now.
pub(super) fn finish(
    report: &mut Report,
    targets: &[Target],
    release: &Release,
    verdict: crate::model::Verdict,
    end: Option<&Snapshot>,
    times: &Times,
) {
    let released = verdict.state == VerdictState::Free;
    report.seconds_after_exit = times.exited_at.map(|t| {
        let until = if released {
            times.released_at
        } else {
            Instant::now()
        };
        until.saturating_duration_since(t).as_secs_f64()
    });
    if let Some(end) = end {
        report.still_holding = release.memory_held(&end.gpus, end.nvml.available);
    }
    report.survivors = survivors(targets);
    report.waiting_for_kernel = targets
        .iter()
        .filter(|t| !t.exited() && t.state() == 'D')
        .map(|t| t.pid)
        .collect();
    report.verdict = verdict.state;
    report.reasons = verdict.reasons;
    report.released = released;
    report.seconds_to_release = if released {
        times
            .released_at
            .saturating_duration_since(times.started)
            .as_secs_f64()
    } else {
        0.0
    };
}

/// The watch of [`Run::await_memory`]: NVML until the targets' memory is
/// back, and the moment every target had exited.
struct MemoryBack<'a, 'p> {
    c: &'a Collector,
    release: &'a Release,
    targets: &'a [Target],
    deadline: Instant,
    /// When the wait began.
    waiting: Instant,
    /// When every target had exited, once they all had.
    exited_at: Option<Instant>,
    progress: &'a mut (dyn FnMut(Event) + 'p),
}

impl MemoryBack<'_, '_> {
    fn note_exits(&mut self) {
        if self.exited_at.is_none() && self.targets.iter().all(Target::exited) {
            self.exited_at = Some(Instant::now());
        }
    }
}

impl Watch for MemoryBack<'_, '_> {
    type Out = ();

    fn look(&mut self, _: Tick) -> ControlFlow<()> {
        self.note_exits();
        let now = self.c.memory_until(Some(self.deadline));
        let held = self.release.memory_held(&now.gpus, now.status.available);
        // Past the deadline there is no more waiting to tell of.
        if held.is_empty() || Instant::now() >= self.deadline {
            return ControlFlow::Break(());
        }
        (self.progress)(Event::MemoryHeld {
            elapsed: self.waiting.elapsed(),
            held,
        });
        ControlFlow::Continue(())
    }

    fn deadline(&self) -> Option<Instant> {
        Some(self.deadline)
    }
}
