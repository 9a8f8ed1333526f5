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
//! the watch for restarts after the release in `settle.rs`, the steps of
//! one execution in `run.rs`; this file runs them in order.

mod mps;
mod plan;
mod release;
mod run;
mod settle;
mod signals;

pub use crate::model::Held;
pub use crate::model::{Changed, Handled, NotOurProc, Plan, PlanEntry, Report, Skipped};
pub use plan::{check_unit, plan, Safety, Selectors, UserSel};
use release::Release;
use run::{finish, survivors, Rounds, Run, Times};
pub use signals::signal_name;

use super::progress::Event;
use crate::model::{Left, Selection, Snapshot, VerdictState, Why};
use crate::pipeline::select;
use crate::snapshot::Collector;
use rustix::process::Signal;
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

/// Whether a kill of GPUs (nothing else selected) whose plan signals
/// nothing has nothing to free: it refused only protected daemons, and
/// the selected GPUs are free (the daemons hold them within their idle
/// slack, as nvidia-persistenced does on most hosts). Such a kill is done,
/// not refused: a Slurm epilog after a clean job must not drain the node.
pub fn nothing_to_free(snap: &Snapshot, sel: &Selectors, plan: &Plan, gpus: &Selection) -> bool {
    let protected = |pid: u32| snap.processes.iter().any(|p| p.pid == pid && p.protected);
    plan.targets.is_empty()
        && sel.gpus_only()
        && plan
            .skipped
            .iter()
            .filter(|k| k.refused)
            .all(|k| protected(k.pid))
        && select(snap.clone(), gpus).verdict.state == VerdictState::Free
}

/// Whether a kill may signal the processes `c` sees: only through `/proc`
/// itself, a proc file system whose `self` is this process, named by one
/// PID ([`Collector::proc_is_ours`]). `gpufree kill`, `watch`'s kill and
/// [`execute_reporting`] all ask this one function before any signal.
pub fn may_signal(c: &Collector) -> Result<(), NotOurProc> {
    if c.config().proc_root != std::path::Path::new("/proc") {
        return Err(NotOurProc::OtherRoot);
    }
    if !c.proc_is_ours() {
        return Err(NotOurProc::Foreign);
    }
    Ok(())
}

/// The report of a kill that signals nothing because its proc root may
/// not be signalled through ([`may_signal`]): every target refused.
fn not_ours(plan: Plan, why: NotOurProc) -> Report {
    let mut report = Report {
        verdict: VerdictState::Unknown,
        reasons: vec![Why::ProcNotOurs { root: why }.into()],
        ..Report::default()
    };
    report.skipped = plan
        .targets
        .iter()
        .map(|e| Skipped {
            pid: e.pid,
            why: Left::ProcNotOurs { root: why },
            refused: true,
        })
        .collect();
    report
}

/// At most this many rounds of signals; from the third on, SIGKILL at once
/// (what keeps forking on SIGTERM gets no more chances).
const MAX_ROUNDS: u32 = 5;

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
    crate::test_hooks::before_signals();
    if let Err(why) = may_signal(c) {
        return (not_ours(plan, why), None);
    }
    super::quiesce::release_on_interrupt();
    let run = Run {
        c,
        opts,
        deadlines: Deadlines::new(opts.timeout),
        started: Instant::now(),
        // Unknown: nothing counts as started during the kill, so no
        // process joins the targets for its start time alone.
        first_tick: crate::proc::me::uptime_ticks().unwrap_or(u64::MAX),
    };
    let started_unix_ms = crate::units::unix_now_ms();
    let Rounds {
        mut report,
        handled,
        targets,
        signalled,
    } = run.rounds(initial, plan, sel, safety, progress);
    report.started_unix_ms = Some(started_unix_ms);
    if opts.no_wait {
        report.survivors = survivors(&targets);
        report.verdict = VerdictState::Unknown;
        report.reasons = vec![Why::NotWaited.into()];
        return (report, None);
    }
    let release = Release::new(initial, &signalled, &report, sel, handled);
    let exited_at = run.await_memory(&release, &targets, progress);
    let (verdict, end, released_at) = run.conclude(initial, &release, &signalled, &mut report);
    let times = Times {
        started: run.started,
        exited_at,
        released_at,
    };
    finish(
        &mut report,
        &targets,
        &release,
        verdict,
        end.as_ref(),
        &times,
    );
    (report, end)
}

#[cfg(test)]
mod tests;
