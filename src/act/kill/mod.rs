//! `gpufree kill`: the plan (a pure function of a snapshot, the selectors
//! and the safety context), then its execution by identity, to quiescence:
//!
//! 1. each target is pinned through the directory fd the scan opened for
//!    it (never by number) and held still — its cgroup frozen where every
//!    process of it is a target, else SIGSTOP — so it can neither exec nor
//!    fork while it is checked;
//! 2. it is checked to still hold a GPU node (or NVML memory): one that
//!    exec'd or let go is continued and reported as changed, not signalled;
//! 3. the signal, SIGCONT, the grace period polled through pidfds, SIGKILL
//!    for survivors;
//! 4. a rescan: holders that matched meanwhile, that were forked by the
//!    targets (their child, or an orphan of their process group, session
//!    and cgroup started after the first signal) or that their unit,
//!    container, pod or job started again join the next round; a bounded
//!    number of rounds, SIGKILL at once from the third;
//! 5. the end verdict from NVML and a fresh scan: the memory back, no
//!    target or descendant left holding, no zombie still listed. Anything
//!    else is "not released" or "unknown", never "released".
//!
//! `--timeout` bounds all of it. The plan is in `plan.rs`, one round of
//! signals and the rescan in `signals.rs`, the end verdict in `release.rs`,
//! the watch for restarts after the release in `settle.rs`; this file runs
//! them in order.

mod plan;
mod release;
mod settle;
mod signals;

pub use crate::model::{Changed, Plan, PlanEntry, Report, Skipped};
pub use plan::{check_unit, plan, Safety, Selectors, UserSel};
use plan::{reason, refusal};
use release::Release;
use settle::{known_restart_watch, restart_suspected, settle};
use signals::{joiners, round};

use super::identity::{wait_exited, KillError, Target};
use super::progress::Event;
use super::quiesce::quiesce;
use crate::diagnose::verdict::{self, Policy};
use crate::diagnose::{memory_on_gpus, Groups, IDLE_SLACK_BYTES};
use crate::model::{Owner, OwnerKind, Process, Snapshot, VerdictState};
use crate::proc::scan::Holding;
use crate::snapshot::{select, Collector};
use crate::units::mib;
use regex::Regex;
use rustix::process::Signal;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How to execute a plan.
#[derive(Debug, Clone)]
pub struct Options {
    /// First signal (default TERM).
    pub signal: Signal,
    /// How long to wait after the first signal before KILL.
    pub grace: Duration,
    /// The whole execution, from the first signal to the verdict on the
    /// memory, ends within this (SPEC.md: a hard cap).
    pub timeout: Duration,
    /// Do not wait for the memory.
    pub no_wait: bool,
    /// `--holders-only`: without NVML, "released" may rest on the holders
    /// alone.
    pub holders_only: bool,
    /// After the memory is back, watch this long for a holder that a
    /// supervisor starts again (longer while a process the targets' parent
    /// started meanwhile may still open a GPU); zero: do not watch.
    pub settle: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            signal: Signal::TERM,
            grace: Duration::from_secs(10),
            timeout: Duration::from_secs(60),
            no_wait: false,
            holders_only: false,
            settle: Duration::from_secs(1),
        }
    }
}

/// At most this many rounds of signals; from the third on, SIGKILL at once
/// (what keeps forking on SIGTERM gets no more chances).
const MAX_ROUNDS: u32 = 5;

/// The clock ticks since boot now, comparable with start times.
fn ticks_now() -> u64 {
    let tps = rustix::param::clock_ticks_per_second();
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|u| u.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0, |up| (up * tps as f64) as u64)
}

/// The deadlines of one execution: signals and waits end by `act`, the
/// verdict by `end` (the user's cap).
struct Deadlines {
    act: Instant,
    end: Instant,
}

impl Deadlines {
    fn new(timeout: Duration) -> Deadlines {
        let now = Instant::now();
        let reserve = (timeout / 5).min(Duration::from_millis(400));
        Deadlines {
            act: now + timeout.saturating_sub(reserve),
            end: now + timeout,
        }
    }
    fn left(&self) -> Duration {
        self.act.saturating_duration_since(Instant::now())
    }
}

/// Executes `plan` (made from `initial` with `sel` and `safety`); returns
/// the report and the snapshot its verdict was made from. Reports no
/// progress: [`execute_reporting`] with no one listening.
pub fn execute(
    c: &Collector,
    initial: &Snapshot,
    plan: Plan,
    sel: &Selectors,
    safety: &Safety,
    opts: &Options,
) -> (Report, Option<Snapshot>) {
    execute_reporting(c, initial, plan, sel, safety, opts, &mut |_| {})
}

/// [`execute`], telling `progress` what happens as it happens (the rounds
/// of signals, the wait for the memory).
pub fn execute_reporting(
    c: &Collector,
    initial: &Snapshot,
    plan: Plan,
    sel: &Selectors,
    safety: &Safety,
    opts: &Options,
    progress: &mut dyn FnMut(Event),
) -> (Report, Option<Snapshot>) {
    crate::pause::before_signals();
    super::quiesce::release_on_interrupt();
    let deadlines = Deadlines::new(opts.timeout);
    let started = Instant::now();
    let first_tick = ticks_now();
    let mut report = Report {
        skipped: plan.skipped.clone(),
        ..Report::default()
    };
    let mut handled: BTreeSet<(u32, u64)> = plan
        .targets
        .iter()
        .map(|e| (e.pid, e.start_time_ticks))
        .collect();
    let mut all: Vec<Target> = Vec::new();
    // The processes signalled, as the snapshots saw them.
    let mut signalled: Vec<Process> = Vec::new();
    let mut snap = initial.clone();
    let mut entries = plan.targets.clone();
    while !entries.is_empty() && report.rounds < MAX_ROUNDS {
        report.rounds += 1;
        let sig = if report.rounds >= 3 {
            Signal::KILL
        } else {
            opts.signal
        };
        let done = round(c, &snap, &entries, sig, opts, &deadlines, &mut report);
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
        all.extend(done);
        if Instant::now() >= deadlines.act {
            break;
        }
        let Ok(next) = c.snapshot_until(Some(deadlines.act)) else {
            break;
        };
        snap = next;
        entries = joiners(&snap, sel, safety, &handled, &signalled, first_tick);
        handled.extend(entries.iter().map(|e| (e.pid, e.start_time_ticks)));
        report.found_by_rescan.extend(entries.iter().map(|e| e.pid));
    }
    report.targets.sort_unstable();
    report.targets.dedup();
    report.found_by_rescan.sort_unstable();
    report.found_by_rescan.dedup();

    if opts.no_wait {
        report.survivors = all.iter().filter(|t| !t.exited()).map(|t| t.pid).collect();
        report.verdict = VerdictState::Unknown;
        report.reasons = vec!["not waited for (--no-wait)".into()];
        return (report, None);
    }
    let release = Release::new(initial, &signalled, &report, sel, handled);
    progress(Event::ReleaseWaitStarted);
    let waiting = Instant::now();
    // NVML alone until the targets' memory is back (or the deadline), then
    // one fresh snapshot decides.
    let mut exited_at = None;
    let mut note_exits = || {
        if exited_at.is_none() && all.iter().all(Target::exited) {
            exited_at = Some(Instant::now());
        }
    };
    if c.has_nvml() && !release.expected.is_empty() {
        loop {
            note_exits();
            let now = c.nvml_until(Some(deadlines.act));
            let held = release.memory_held(&now.gpus, now.status.available);
            if held.is_empty() || Instant::now() >= deadlines.act {
                break;
            }
            progress(Event::MemoryHeld {
                elapsed: waiting.elapsed(),
                held,
            });
            std::thread::sleep(Duration::from_millis(25));
        }
    }
    progress(Event::ReleaseWaitEnded);
    note_exits();
    let end = c.snapshot_until(Some(deadlines.end));
    let judge =
        |end: &Snapshot| release.judge(end, &report, &signalled, first_tick, opts.holders_only);
    let mut verdict = match &end {
        Ok(end) => judge(end),
        Err(e) => verdict::finish(
            Vec::new(),
            vec![format!("no final snapshot: {e}")],
            Vec::new(),
        ),
    };
    let released_at = Instant::now();
    let mut end = end;
    // A supervisor known beforehand is given its restart delay and the
    // time a restarted program takes to open the GPU.
    let settle = opts.settle.max(known_restart_watch(initial, &signalled));
    if verdict.state == VerdictState::Free && !opts.settle.is_zero() && !signalled.is_empty() {
        // The watch ends halfway through the reserve before the user's cap:
        // the rest is for the verdict and the report.
        let watch_end = deadlines.end - (deadlines.end - deadlines.act) / 2;
        if let Ok(first) = end.as_ref() {
            let suspect = |snap: &Snapshot| restart_suspected(snap, &signalled, first_tick);
            let watched = self::settle(c, first, settle, watch_end, &judge, &suspect);
            match watched {
                Ok(Some((snap, busy))) => {
                    verdict = busy;
                    end = Ok(snap);
                }
                Ok(None) => {}
                Err(e) => report.restart_watch_error = Some(e),
            }
        }
        report.seconds_watched_for_restarts = released_at.elapsed().as_secs_f64();
    }
    report.seconds_after_exit = exited_at.map(|t| {
        let until = if verdict.state == VerdictState::Free {
            released_at
        } else {
            Instant::now()
        };
        until.saturating_duration_since(t).as_secs_f64()
    });
    if let Ok(end) = &end {
        report.still_holding = release.memory_held(&end.gpus, end.nvml.available);
    }
    report.survivors = all.iter().filter(|t| !t.exited()).map(|t| t.pid).collect();
    report.waiting_for_kernel = all
        .iter()
        .filter(|t| !t.exited() && t.state() == 'D')
        .map(|t| t.pid)
        .collect();
    report.verdict = verdict.state;
    report.reasons = verdict.reasons;
    report.released = verdict.state == VerdictState::Free;
    report.seconds_to_release = if report.released {
        released_at.saturating_duration_since(started).as_secs_f64()
    } else {
        0.0
    };
    (report, end.ok())
}

#[cfg(test)]
mod tests;
