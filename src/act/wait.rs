//! `gpufree wait`: block until the selected GPUs are free, for systemd's
//! ExecStartPre=, Slurm's prolog and CI.
//!
//! A full snapshot decides. Between snapshots it sleeps on the pidfds of the
//! holders it knows (waking the moment one exits) and polls NVML alone each
//! interval, taking the next full snapshot only when NVML shows a change or a
//! holder exited: cheap on a busy host, prompt when the memory comes back.

use super::identity::Target;
use crate::diagnose::gpu_free;
use crate::model::Snapshot;
use crate::snapshot::{select, Collector, SnapshotError};
use rustix::event::{poll, PollFd, PollFlags};
use std::time::{Duration, Instant};

/// Options of `gpufree wait`.
#[derive(Debug, Clone)]
pub struct Options {
    /// The GPUs to wait for (NVML indexes).
    pub gpus: Vec<u32>,
    /// Free means at most this much used (default: no holders and the idle
    /// baseline).
    pub max_used: Option<u64>,
    /// Give up after this long; zero checks once.
    pub timeout: Duration,
    /// How often NVML is polled.
    pub interval: Duration,
}

/// The outcome.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The GPUs are free.
    pub free: bool,
    /// Seconds waited.
    pub seconds: f64,
    /// Full snapshots taken.
    pub snapshots: u32,
    /// The last snapshot (of the selected GPUs).
    pub last: Snapshot,
}

fn is_free(s: &Snapshot, opts: &Options, nvml: bool) -> bool {
    match opts.max_used {
        Some(max) if nvml => opts.gpus.iter().all(|&i| {
            s.gpus
                .iter()
                .any(|g| g.index == i && g.memory.known && g.memory.used_bytes <= max)
        }),
        _ => opts.gpus.iter().all(|&i| gpu_free(s, i)),
    }
}

/// NVML's view of the selected GPUs: (used, listed PIDs) each.
fn fingerprint(c: &Collector, gpus: &[u32]) -> Vec<(u64, Vec<u32>)> {
    c.nvml()
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

/// Waits until the selected GPUs are free or the timeout passes.
pub fn wait(c: &Collector, opts: &Options) -> Result<Outcome, SnapshotError> {
    let started = Instant::now();
    let deadline = started + opts.timeout;
    let mut snapshots = 0;
    loop {
        let snap = select(c.snapshot()?, &opts.gpus);
        snapshots += 1;
        let free = is_free(&snap, opts, c.has_nvml());
        if free || Instant::now() >= deadline {
            return Ok(Outcome {
                free,
                seconds: started.elapsed().as_secs_f64(),
                snapshots,
                last: snap,
            });
        }
        // Sleep until something may have changed.
        let pinned = Target::pin_all(&c.config().proc_root, &snap.processes);
        let before = fingerprint(c, &opts.gpus);
        loop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let nap = opts.interval.min(deadline - now);
            let exited = if pinned.is_empty() {
                std::thread::sleep(nap);
                false
            } else {
                let fds: Vec<_> = pinned.iter().filter_map(|t| t.pidfd()).collect();
                let mut polls: Vec<PollFd<'_>> = fds
                    .iter()
                    .map(|fd| PollFd::new(*fd, PollFlags::IN))
                    .collect();
                let ts = rustix::event::Timespec {
                    tv_sec: nap.as_secs() as i64,
                    tv_nsec: i64::from(nap.subsec_nanos()),
                };
                if polls.is_empty() {
                    std::thread::sleep(nap);
                    pinned.iter().any(Target::exited)
                } else {
                    poll(&mut polls, Some(&ts)).is_ok_and(|n| n > 0)
                }
            };
            if exited || fingerprint(c, &opts.gpus) != before {
                break;
            }
        }
    }
}
