//! `gpufree wait`: block until the selected GPUs are free, for systemd's
//! ExecStartPre=, Slurm's prolog and CI.
//!
//! A full snapshot decides, through the one verdict
//! ([`crate::diagnose::verdict`]). Between snapshots it sleeps on the pidfds
//! of the holders it knows (waking the moment one exits) and polls NVML alone
//! each interval, taking the next full snapshot only when NVML shows a change
//! or a holder exited: cheap on a busy host, prompt when the memory comes
//! back. Every read ends by the deadline, so `--timeout` is a hard cap.

use super::identity::Target;
use crate::diagnose::verdict::{self, Policy};
use crate::model::{Snapshot, Verdict, VerdictState};
use crate::pipeline::{select, Look};
use crate::snapshot::{Collector, SnapshotError};
use rustix::event::{poll, PollFd, PollFlags};
use std::time::{Duration, Instant};

/// How far past its deadline a snapshot's reads may go, so that the last
/// look is a whole one (SPEC.md allows 0.5 s).
pub const LAST_LOOK: Duration = Duration::from_millis(350);

/// Options of `gpufree wait`.
#[derive(Debug, Clone)]
pub struct Options {
    /// The GPUs to wait for (NVML indexes).
    pub gpus: Vec<u32>,
    /// What free means (`--max-used`, `--holders-only`).
    pub policy: Policy,
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

/// NVML's view of the selected GPUs: (used, listed PIDs) each.
fn fingerprint(c: &Collector, gpus: &[u32], deadline: Instant) -> Vec<(u64, Vec<u32>)> {
    c.nvml_until(Some(deadline))
        .gpus
        .iter()
        .filter(|g| gpus.contains(&g.index))
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
    let started = Instant::now();
    let mut snapshots = 1;
    let mut snap = select(first, &opts.gpus);
    loop {
        let verdict = verdict::overall(&snap, &opts.policy);
        let hopeless = verdict.state == VerdictState::Unknown && !c.has_nvml();
        if verdict.state == VerdictState::Free || hopeless || Instant::now() >= opts.deadline {
            return Ok(Outcome {
                verdict,
                seconds: started.elapsed().as_secs_f64(),
                snapshots,
                last: snap,
            });
        }
        // Sleep until something may have changed: a holder exits, NVML
        // changes, or, while the verdict is unknown for what could not be
        // read, a read timeout has passed (a stuck read may have cleared).
        let looked = Instant::now();
        let relook = (verdict.state == VerdictState::Unknown).then_some(c.config().read_timeout);
        let pinned = Target::pin_all(&snap);
        let before = fingerprint(c, &opts.gpus, opts.deadline + LAST_LOOK);
        loop {
            let now = Instant::now();
            if now >= opts.deadline {
                break;
            }
            let nap = opts.interval.min(opts.deadline - now);
            let fds: Vec<_> = pinned.iter().filter_map(|t| t.pidfd()).collect();
            let exited = if fds.is_empty() {
                std::thread::sleep(nap);
                pinned.iter().any(Target::exited)
            } else {
                let mut polls: Vec<PollFd<'_>> = fds
                    .iter()
                    .map(|fd| PollFd::new(*fd, PollFlags::IN))
                    .collect();
                let ts = rustix::event::Timespec {
                    tv_sec: nap.as_secs() as i64,
                    tv_nsec: i64::from(nap.subsec_nanos()),
                };
                poll(&mut polls, Some(&ts)).is_ok_and(|n| n > 0)
            };
            if exited
                || relook.is_some_and(|r| looked.elapsed() >= r)
                || fingerprint(c, &opts.gpus, opts.deadline + LAST_LOOK) != before
            {
                break;
            }
        }
        snap = select(
            c.snapshot_until(Some(opts.deadline + LAST_LOOK))?,
            &opts.gpus,
        );
        snapshots += 1;
    }
}
