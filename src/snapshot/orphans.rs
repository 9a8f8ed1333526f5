//! Orphans: holders whose parent is init or a user manager (a subreaper),
//! told apart from the main process of a unit or container, from the
//! scan's one pass.

use crate::model::Kin;
use crate::model::{Owner, OwnerKind, Process};
use crate::proc::{owner, parse, scan};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::OwnedFd;

/// Marks holders whose parent is init or a user manager (a subreaper) as
/// orphaned, except the main process of a unit or container: the earliest
/// process of its cgroup whose parent is that reaper. Parents and siblings
/// come from the scan's one pass (`kin`); only the siblings' cgroups are
/// read, never /proc walked again.
pub(super) fn mark_orphans(proc_fd: &OwnedFd, processes: &mut [Process], kin: &BTreeMap<u32, Kin>) {
    let mut holders: HashMap<u32, &str> = HashMap::with_capacity(processes.len());
    for q in processes.iter() {
        // The first of a PID, as a search from the front finds it.
        holders.entry(q.pid).or_insert(q.comm.as_str());
    }
    let comm_of = |pid: u32| {
        kin.get(&pid)
            .map(|k| k.comm.as_str())
            .or_else(|| holders.get(&pid).copied())
    };
    let candidates: Vec<usize> = (0..processes.len())
        .filter(|&i| {
            let ppid = processes[i].ppid;
            ppid == 1 || (ppid > 1 && comm_of(ppid) == Some("systemd"))
        })
        .collect();
    if candidates.is_empty() {
        return;
    }
    let needs_main = candidates
        .iter()
        .any(|&i| has_main_process(&processes[i].owner));
    // The reaper's other children, with their cgroups and start times.
    let children: Vec<(u32, String, u64)> = if needs_main {
        let reapers = candidates.iter().map(|&i| processes[i].ppid).collect();
        let mut siblings = reaper_children(proc_fd, &reapers, kin);
        siblings.extend(
            processes
                .iter()
                .filter(|q| reapers.contains(&q.ppid))
                .map(|q| (q.ppid, q.cgroup.clone(), q.start_time_ticks)),
        );
        siblings
    } else {
        Vec::new()
    };
    // The earliest start among each reaper's children of one cgroup.
    let mut earliest: HashMap<(u32, String), u64> = HashMap::new();
    for (ppid, cg, start) in children {
        let first = earliest.entry((ppid, cg)).or_insert(start);
        *first = (*first).min(start);
    }
    for i in candidates {
        let p = &processes[i];
        let is_main = has_main_process(&p.owner)
            && earliest
                .get(&(p.ppid, p.cgroup.clone()))
                .is_none_or(|&first| first >= p.start_time_ticks);
        processes[i].orphaned = !is_main;
    }
}

fn has_main_process(owner: &Owner) -> bool {
    matches!(
        owner.kind,
        OwnerKind::SystemdUnit | OwnerKind::Container | OwnerKind::K8sPod | OwnerKind::SlurmJob
    )
}

/// (ppid, cgroup path, start time) of every non-holder the scan read whose
/// parent is one of `reapers`: its cgroup read now, and kept only if the
/// process still has the start time the scan saw (the PID was not reused
/// in between).
fn reaper_children(
    proc_fd: &OwnedFd,
    reapers: &BTreeSet<u32>,
    kin: &BTreeMap<u32, Kin>,
) -> Vec<(u32, String, u64)> {
    kin.iter()
        .filter(|(_, k)| reapers.contains(&k.ppid))
        .filter_map(|(pid, k)| {
            let cg = scan::read_at(proc_fd, &format!("{pid}/cgroup")).ok()?;
            let stat =
                parse::parse_stat(&scan::read_at(proc_fd, &format!("{pid}/stat")).ok()?).ok()?;
            (stat.start_time == k.start_time_ticks).then(|| {
                (
                    k.ppid,
                    owner::cgroup_path(&cg).unwrap_or_default(),
                    k.start_time_ticks,
                )
            })
        })
        .collect()
}
