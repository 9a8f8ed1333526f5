//! Passes over chosen PIDs, never a walk of the proc directory: pinning
//! the processes NVML lists that the scan did not find, whether pinned
//! processes hold a node now, the titles `pkill` matches, and the state
//! of processes in D with where they wait. Each read runs on the scan's
//! workers under the same limits.

use super::{
    classify, is_gone, open_dir, read_at, read_one_at, task, Limits, Outcome, Seen, Unread,
};
use crate::model::{Sampled, Wait};
use crate::proc::nodes::NodeSet;
use crate::proc::parse;
use crate::proc::scan::details::read_details;
use crate::proc::scan::jobs::{run_jobs, worker_count, Stuck};
use crate::proc::scan::task::{holding_now, read_stat, task_uses, Holding};
use rustix::io::Errno;
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// Pins processes that the scan did not find holding a node (NVML lists
/// them): opens each `/proc/PID` once and reads its details, fds and maps
/// through it (whether it holds a node now, where that can be read). Gone
/// PIDs are left out; unreadable ones are returned with why.
pub fn pin(
    proc_fd: &Arc<OwnedFd>,
    nodes: &Arc<NodeSet>,
    pids: Vec<u32>,
    limits: Limits,
    stuck: &Stuck,
) -> (Vec<Seen>, Vec<(u32, Unread)>) {
    let (proc_fd, nodes) = (Arc::clone(proc_fd), Arc::clone(nodes));
    let job = Arc::new(move |pid: u32, buf: &mut Vec<u8>| {
        let dir = open_dir(&*proc_fd, &pid.to_string())?;
        let details = read_details(&dir)?;
        let (held, fds_read) = match task_uses(&dir, &details.stat, &nodes, buf) {
            Ok(held) => (held, true),
            Err(_) => (task::Held::default(), false),
        };
        Ok::<_, Errno>(Seen {
            pid,
            uses: held.uses,
            drm: held.drm,
            details,
            dir,
            fds_read,
        })
    });
    let threads = pids.len().clamp(1, 4);
    let mut seen = Vec::new();
    let mut unread = Vec::new();
    for (pid, r) in run_jobs(pids, threads, limits, stuck, job) {
        match r {
            Ok(Ok(s)) => seen.push(s),
            Ok(Err(e)) => {
                if let Outcome::Unreadable(why) = classify("details", e) {
                    unread.push((pid, why));
                }
            }
            Err(why) => unread.push((pid, why)),
        }
    }
    (seen, unread)
}

/// Whether each pinned process holds a node now, read through its
/// directory fd on worker threads under `limits`: a read that hangs (a
/// target in D state) is Unknown, never a wait without end.
pub fn holding_many(
    dirs: Vec<(u32, OwnedFd)>,
    nodes: &Arc<NodeSet>,
    limits: Limits,
    stuck: &Stuck,
) -> Vec<(u32, Holding)> {
    let pids: Vec<u32> = dirs.iter().map(|(pid, _)| *pid).collect();
    let dirs: Arc<BTreeMap<u32, OwnedFd>> = Arc::new(dirs.into_iter().collect());
    let nodes = Arc::clone(nodes);
    let job = Arc::new(move |pid: u32, _: &mut Vec<u8>| match dirs.get(&pid) {
        Some(dir) => holding_now(dir, &nodes),
        None => Holding::Gone,
    });
    let threads = pids.len().clamp(1, 4);
    run_jobs(pids, threads, limits, stuck, job)
        .into_iter()
        .map(|(pid, r)| (pid, r.unwrap_or_else(Holding::Unknown)))
        .collect()
}

/// Each process's comm and command line (what `pkill` matches), each read
/// under `limits`: a process whose command line cannot be read in time
/// (its memory map locked in D state) is left out.
pub fn titles(
    proc_fd: &Arc<OwnedFd>,
    pids: Vec<u32>,
    limits: Limits,
    stuck: &Stuck,
) -> Vec<(u32, String, Vec<String>)> {
    let proc_fd = Arc::clone(proc_fd);
    let job = Arc::new(move |pid: u32, _: &mut Vec<u8>| {
        let dir = open_dir(&*proc_fd, &pid.to_string()).ok()?;
        let stat = read_stat(&dir).ok()?;
        let cmdline = read_one_at(&dir, "cmdline")
            .map(|b| parse::parse_cmdline(&b))
            .unwrap_or_default();
        Some((stat.comm, cmdline))
    });
    let threads = worker_count(pids.len());
    run_jobs(pids, threads, limits, stuck, job)
        .into_iter()
        .filter_map(|(pid, r)| r.ok().flatten().map(|(comm, cmd)| (pid, comm, cmd)))
        .collect()
}

/// One sample of each pinned process (its `/proc/PID` fd): its state
/// (`stat`) and, for one in D, where it waits ([`crate::proc::wchan`]:
/// `stack` where readable, else `wchan`), each read under `limits`. The
/// stacks are read apart, under their own `stacks` set of stuck reads: a
/// stack read that hangs (it takes the task's exec lock) costs that
/// process its stack, never its state. A process reaped since it was
/// pinned is [`Sampled::Gone`]; one whose state could not be read in time,
/// [`Sampled::Unread`].
pub fn waits(
    dirs: Vec<(u32, OwnedFd)>,
    limits: Limits,
    stuck: &Stuck,
    stacks: &Stuck,
) -> Vec<(u32, Sampled)> {
    let pids: Vec<u32> = dirs.iter().map(|(pid, _)| *pid).collect();
    let dirs: Arc<BTreeMap<u32, OwnedFd>> = Arc::new(dirs.into_iter().collect());
    let threads = pids.len().clamp(1, 4);
    let d = Arc::clone(&dirs);
    let job = Arc::new(move |pid: u32, _: &mut Vec<u8>| {
        let dir = d.get(&pid).ok_or(Errno::SRCH)?;
        let state = read_stat(dir)?.state;
        let wchan = (state == 'D')
            .then(|| read_one_at(dir, "wchan").ok())
            .flatten();
        Ok::<_, Errno>((state, wchan))
    });
    let states = run_jobs(pids, threads, limits, stuck, job);
    let in_d: Vec<u32> = states
        .iter()
        .filter(|(_, r)| matches!(r, Ok(Ok(('D', _)))))
        .map(|(pid, _)| *pid)
        .collect();
    let d = Arc::clone(&dirs);
    let job = Arc::new(move |pid: u32, _: &mut Vec<u8>| {
        d.get(&pid).and_then(|dir| read_at(dir, "stack").ok())
    });
    let mut stack: BTreeMap<u32, Vec<u8>> = run_jobs(in_d, threads, limits, stacks, job)
        .into_iter()
        .filter_map(|(pid, r)| Some((pid, r.ok()??)))
        .collect();
    states
        .into_iter()
        .map(|(pid, r)| {
            let seen = match r {
                Ok(Ok((state, wchan))) => Sampled::State {
                    state,
                    wait: if state == 'D' {
                        crate::proc::wchan::classify(
                            stack.remove(&pid).as_deref(),
                            wchan.as_deref(),
                        )
                    } else {
                        Wait::Unsaid
                    },
                },
                Ok(Err(e)) if is_gone(e) => Sampled::Gone,
                _ => Sampled::Unread,
            };
            (pid, seen)
        })
        .collect()
}
