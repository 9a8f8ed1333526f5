//! The in-kernel walk's records ([`crate::proc::bpf`]) made into the same
//! [`ScanResult`] the /proc walk gives: each holder pinned through its own
//! `/proc/PID` directory fd, and kept only when the start time read there
//! is the one the kernel wrote with the match (a PID reused between the
//! walk and the pin is a vanished holder, never another process's record).

use super::{
    classify, is_gone, open_dir, read_at, task, DrmFd, Limits, NodeUse, Outcome, ScanResult, Seen,
    WALKS,
};
use crate::proc::bpf::{Hold, HoldRecord, Record, TaskRecord, Unavailable, Unread};
use crate::proc::nodes::{NodeKind, NodeSet};
use crate::proc::parse;
use crate::proc::scan::details::read_details;
use crate::proc::scan::jobs::{reserve_fds, run_jobs, worker_count, Stuck};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Turns a task's `start_boottime` into /proc's start time, in clock
/// ticks, for this reader: /proc adds the reader's time namespace's boot
/// time offset and divides by the clock tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    ns_per_tick: u64,
    offset_ns: i64,
}

impl Clock {
    /// The clock of this process: `CLK_TCK`, and the boot time offset of
    /// its time namespace (`/proc/self/timens_offsets`; none without one).
    /// That file shows the offsets of the namespace this process's
    /// children get, which differ from its own after an
    /// `unshare(CLONE_NEWTIME)` without a fork: [`calibrate`] catches that.
    pub fn here(proc_fd: &OwnedFd) -> Clock {
        let hz = rustix::param::clock_ticks_per_second().max(1);
        let offset_ns = read_at(proc_fd, "self/timens_offsets")
            .ok()
            .and_then(|b| boottime_offset(&b))
            .unwrap_or(0);
        Clock {
            ns_per_tick: 1_000_000_000 / hz,
            offset_ns,
        }
    }

    /// Start time in ticks as /proc shows it.
    pub fn ticks(&self, start_ns: u64) -> u64 {
        start_ns.saturating_add_signed(self.offset_ns) / self.ns_per_tick
    }

    /// The tick of a moment read from this process's own `CLOCK_BOOTTIME`
    /// (which already carries its time namespace's offset).
    pub fn ticks_here(&self, boottime_ns: u64) -> u64 {
        boottime_ns / self.ns_per_tick
    }
}

/// The boot time line of `timens_offsets` (`boottime <secs> <nsecs>`), in
/// nanoseconds.
fn boottime_offset(bytes: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let line = text.lines().find(|l| l.starts_with("boottime"))?;
    let mut f = line.split_whitespace().skip(1);
    let secs: i64 = f.next()?.parse().ok()?;
    let nsecs: i64 = f.next()?.parse().ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nsecs)
}

/// Checks the clock against this process's own record: the start time the
/// kernel's walk gives it must be the one its /proc shows, or no holder
/// could be pinned by it (and every one would wrongly count as gone).
pub fn calibrate(proc_fd: &OwnedFd, tasks: &[TaskRecord], clock: Clock) -> Result<(), Unavailable> {
    let me = std::process::id();
    let kernel = tasks
        .iter()
        .find(|t| t.pid == me)
        .map_or(0, |t| clock.ticks(t.start_ns));
    let proc_start = read_at(proc_fd, "self/stat")
        .ok()
        .and_then(|b| parse::parse_stat(&b).ok())
        .map(|s| s.start_time);
    match proc_start {
        Some(p) if p == kernel => Ok(()),
        p => Err(Unavailable::Calibration { kernel, proc: p }),
    }
}

/// One holder as the walk saw it: what it holds, by which fds.
#[derive(Default)]
struct Matched {
    uses: Vec<NodeUse>,
    /// fds on DRM nodes: (node, fd, the task whose table has it).
    drm: Vec<(usize, u32, u32)>,
    /// The walk could not read all of it: read it again through /proc.
    unread: bool,
    /// Its mappings came from the result the walk kept at an earlier walk.
    kept: bool,
}

/// What the walk matched at one PID, by the start time of the process
/// that had it: a PID that named two processes during the walk has two.
type AtPid = Vec<(u64, Matched)>;

/// Splits records into processes and holders. Records of this process, of
/// PID 0 (not visible here) and of a target the node set does not have are
/// left out.
fn sort_records(records: Vec<Record>, nodes: &NodeSet) -> (Vec<TaskRecord>, BTreeMap<u32, AtPid>) {
    let me = std::process::id();
    let mut tasks = Vec::new();
    let mut held: BTreeMap<u32, AtPid> = BTreeMap::new();
    for r in records {
        let hold = match r {
            Record::Task(t) => {
                tasks.push(t);
                continue;
            }
            Record::Unread(Unread { pid, start_ns }) => {
                if pid != 0 && pid != me {
                    at_start(held.entry(pid).or_default(), start_ns).unread = true;
                }
                continue;
            }
            Record::Hold(h) => h,
        };
        let HoldRecord {
            pid,
            start_ns,
            target,
            how,
            tid,
        } = hold;
        if pid == 0 || pid == me || target >= nodes.nodes.len() {
            continue;
        }
        let m = at_start(held.entry(pid).or_default(), start_ns);
        m.kept |= how == (Hold::Mapping { kept: true });
        let fd = matches!(how, Hold::Fd(_));
        task::note(&mut m.uses, target, fd, !fd);
        let drm_node = matches!(
            nodes.nodes[target].kind,
            NodeKind::DriCard | NodeKind::DriRender
        );
        if let (Hold::Fd(n), true) = (how, drm_node) {
            if !m.drm.iter().any(|&(t, fd, _)| (t, fd) == (target, n)) {
                m.drm.push((target, n, tid));
            }
        }
    }
    tasks.sort_by_key(|t| t.pid);
    tasks.dedup_by_key(|t| t.pid);
    for (_, m) in held.values_mut().flatten() {
        m.uses.sort_by_key(|u| u.node);
    }
    (tasks, held)
}

/// What the walk matched of the process at a PID that started at
/// `start_ns`.
fn at_start(at: &mut AtPid, start_ns: u64) -> &mut Matched {
    let i = at
        .iter()
        .position(|(s, _)| *s == start_ns)
        .unwrap_or_else(|| {
            at.push((start_ns, Matched::default()));
            at.len() - 1
        });
    &mut at[i].1
}

/// Pins the holder at `pid`: its /proc directory and details, kept only
/// when its start time (in ticks) is one the walk matched; else it is gone
/// (Vanished): the PID names another process now. A start time is known
/// to one clock tick: a process that started before the tick in which the
/// walk began cannot share it with a successor at its PID (which started
/// after the walk saw the first alive), so what the walk saw is its own.
/// A process that started in or after that tick is read again through its
/// directory, as the /proc walk reads it: a PID reused within one tick
/// must not inherit its predecessor's fds. So is a process the walk could
/// not read in full.
fn pin_one(
    proc_fd: &OwnedFd,
    nodes: &NodeSet,
    (pid, began): (u32, u64),
    at: &[(u64, Matched)],
    buf: &mut Vec<u8>,
) -> Outcome {
    crate::test_hooks::after_holder_scan(pid);
    let dir = match open_dir(proc_fd, &pid.to_string()) {
        Ok(d) => d,
        Err(e) if is_gone(e) => return Outcome::Vanished,
        Err(e) => return classify("the /proc directory", e),
    };
    let details = match read_details(&dir) {
        Ok(d) => d,
        Err(e) if is_gone(e) => return Outcome::Vanished,
        Err(e) => return classify("details", e),
    };
    let start = details.stat.start_time;
    let Some((_, m)) = at.iter().find(|(t, _)| *t == start) else {
        return Outcome::Vanished;
    };
    let (uses, drm) = if start < began && !m.unread {
        (m.uses.clone(), drm_fds(&dir, pid, m))
    } else {
        match task::task_uses(&dir, &details.stat, nodes, buf) {
            Ok(held) => (held.uses, held.drm),
            Err((_, e)) if is_gone(e) => return Outcome::Vanished,
            Err((what, e)) => return classify(what, e),
        }
    };
    if uses.is_empty() {
        return Outcome::Clean(task::clean_kin(details.stat));
    }
    Outcome::Holds(Box::new(Seen {
        pid,
        uses,
        drm,
        details,
        dir,
        fds_read: true,
    }))
}

/// A DRM fd's fdinfo, through the table that has the fd: the leader's, or
/// a live thread's once the leader has exited.
fn drm_fds(dir: &OwnedFd, pid: u32, m: &Matched) -> Vec<DrmFd> {
    m.drm
        .iter()
        .map(|&(node, fd, tid)| {
            let path = if tid == 0 || tid == pid {
                format!("fdinfo/{fd}")
            } else {
                format!("task/{tid}/fdinfo/{fd}")
            };
            let info = task::drm_info(dir, &path);
            DrmFd { node, fd, info }
        })
        .collect()
}

/// The result of a walk's records: every process listed and read (the
/// kernel sees every task of this PID namespace, so none is unreadable),
/// the holders pinned on the scan's workers under `limits`.
pub fn from_records(
    proc_fd: &Arc<OwnedFd>,
    nodes: &Arc<NodeSet>,
    records: Vec<Record>,
    (clock, began): (Clock, u64),
    limits: Limits,
    stuck: &Stuck,
) -> Result<ScanResult, Unavailable> {
    // The kernel's walk of every process counts as a walk, as /proc's does.
    WALKS.fetch_add(1, Ordering::Relaxed);
    let (tasks, held) = sort_records(records, nodes);
    calibrate(proc_fd, &tasks, clock)?;
    let me = std::process::id();
    let mut result = ScanResult {
        listed: tasks.iter().map(|t| t.pid).filter(|&p| p != me).collect(),
        ..ScanResult::default()
    };
    result.scanned = u32::try_from(result.listed.len()).unwrap_or(u32::MAX);
    result.parents = tasks
        .iter()
        .filter(|t| t.pid != me && !held.contains_key(&t.pid))
        .map(|t| {
            let kin = crate::model::Kin {
                ppid: t.ppid,
                comm: parse::escape_bytes(&t.comm),
                start_time_ticks: clock.ticks(t.start_ns),
                cmdline: Vec::new(),
            };
            (t.pid, kin)
        })
        .collect();
    let pids: Vec<u32> = held.keys().copied().collect();
    crate::test_hooks::walk_reread(
        held.iter()
            .filter(|(_, at)| at.iter().any(|(_, m)| m.unread))
            .map(|(&pid, _)| pid),
    );
    let reread = held.values().flatten().filter(|(_, m)| m.unread).count();
    result.reread = u32::try_from(reread).unwrap_or(u32::MAX);
    let kept = held.values().flatten().filter(|(_, m)| m.kept).count();
    result.kept = u32::try_from(kept).unwrap_or(u32::MAX);
    let held: Arc<BTreeMap<u32, AtPid>> = Arc::new(
        held.into_iter()
            .map(|(pid, at)| {
                let at = at.into_iter().map(|(s, m)| (clock.ticks(s), m)).collect();
                (pid, at)
            })
            .collect(),
    );
    // The tick in which the walk began, as /proc counts ticks.
    let began = clock.ticks_here(began);
    let threads = worker_count(pids.len());
    // Each holder kept keeps its directory fd.
    reserve_fds(pids.len());
    let (fd, nodes) = (Arc::clone(proc_fd), Arc::clone(nodes));
    let job = Arc::new(move |pid: u32, buf: &mut Vec<u8>| match held.get(&pid) {
        Some(at) => pin_one(&fd, &nodes, (pid, began), at, buf),
        None => Outcome::Gone,
    });
    for (pid, outcome) in run_jobs(pids, threads, limits, stuck, job) {
        match outcome {
            Ok(Outcome::Holds(seen)) => result.holders.push(*seen),
            Ok(Outcome::Vanished) => result.vanished.push(pid),
            Ok(Outcome::Unreadable(why)) | Err(why) => result.unreadable.push((pid, why)),
            Ok(Outcome::Clean(kin)) => result.parents.push((pid, kin)),
            Ok(Outcome::Gone) => {}
        }
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_time_offset_of_a_time_namespace() {
        let b = b"monotonic           0         0\nboottime         -3600 500\n";
        assert_eq!(boottime_offset(b), Some(-3_599_999_999_500));
        assert_eq!(boottime_offset(b"monotonic 1 2\n"), None);
        let clock = Clock {
            ns_per_tick: 10_000_000,
            offset_ns: 0,
        };
        assert_eq!(clock.ticks(12_345_678_901), 1234);
    }
}
