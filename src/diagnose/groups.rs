//! Launch groups: holders grouped by what started them (a unit,
//! container, pod or job; the launcher above sibling trees; a dead parent
//! for orphans), one finding per group whose next frees all of it; and the
//! device-node holders without memory.

use super::{gpus_of_all, printable, supervisors, unprotected, who};
use crate::diagnose::shapes::{role, shape};
use crate::model::{Alongside, GroupName, Holding, LaunchGroup, Role};
use crate::model::{Evidence, Finding, Lookup, Next, OwnerKind, Process, Severity, Snapshot};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// What started a group of holders.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Group {
    /// A unit, container, pod or job (from the cgroup).
    Owner(OwnerKind, String, String),
    /// A process tree: its topmost holder.
    Tree(u32),
    /// Holders started by a process that holds nothing itself (a torchrun
    /// agent, an mpirun, a Python launcher): that process.
    Launcher(u32),
    /// Trees of holders whose parent died (now children of init or a
    /// subreaper): that reaper's PID and the user's UID.
    Orphans(u32, u32),
}

/// Parents that start everything and launch nothing in particular: a
/// holder under one of these is its own group.
pub(super) const NOT_LAUNCHERS: &[&str] = &[
    "systemd",
    "init",
    "bash",
    "sh",
    "dash",
    "zsh",
    "fish",
    "ksh",
    "mksh",
    "tcsh",
    "csh",
    "ash",
    "busybox",
    "sshd",
    "sudo",
    "su",
    "login",
    "tmux: server",
    "screen",
    "SCREEN",
    "containerd-shim",
    "conmon",
    "runc",
    "tini",
    "dumb-init",
    "docker-init",
    "catatonit",
    "s6-svscan",
    "runsvdir",
    "supervisord",
    "cron",
    "slurmstepd",
    "sshd-session",
];

pub(super) struct Ctx<'a> {
    pub(super) s: &'a Snapshot,
    pub(super) by_pid: HashMap<u32, &'a Process>,
    /// The snapshot indexed once, for questions asked per holder.
    pub(super) look: Lookup<'a>,
}

impl<'a> Ctx<'a> {
    /// The holders of `s` indexed by PID.
    pub(super) fn new(s: &'a Snapshot) -> Ctx<'a> {
        Ctx {
            s,
            by_pid: s.processes.iter().map(|p| (p.pid, p)).collect(),
            look: Lookup::new(s),
        }
    }

    pub(super) fn group(&self, p: &Process) -> Group {
        if matches!(
            p.owner.kind,
            OwnerKind::SystemdUnit | OwnerKind::Container | OwnerKind::K8sPod | OwnerKind::SlurmJob
        ) {
            return Group::Owner(p.owner.kind, p.owner.id.clone(), p.owner.name.clone());
        }
        let root = self.top(p);
        if root.orphaned {
            return Group::Orphans(root.ppid, root.uid);
        }
        Group::Tree(root.pid)
    }

    /// The top of `p`'s tree of holders: its farthest ancestor reached
    /// through unprotected holders.
    pub(super) fn top(&self, p: &'a Process) -> &'a Process {
        let mut root = p;
        for _ in 0..64 {
            match self.by_pid.get(&root.ppid) {
                Some(parent) if !parent.protected_for_all() && parent.pid != root.pid => {
                    root = parent
                }
                _ => break,
            }
        }
        root
    }

    /// In a group of a dead parent, the top of `p`'s tree when that is
    /// not `p` (its own parent is alive).
    fn orphan_top(&self, g: &Group, p: &'a Process) -> Option<u32> {
        let top = self.top(p);
        (matches!(g, Group::Orphans(..)) && top.pid != p.pid).then_some(top.pid)
    }

    /// The process that started the tree topped by `root`, if it holds
    /// nothing itself and is not a shell, init or session (see
    /// [`NOT_LAUNCHERS`]).
    pub(super) fn launcher_of(&self, root: u32) -> Option<u32> {
        let ppid = self.by_pid.get(&root)?.ppid;
        match self.s.parents.get(&ppid) {
            // PID 1 counts: in a container, the launcher is often its init.
            Some(k) if ppid > 0 && !NOT_LAUNCHERS.contains(&k.comm.as_str()) => Some(ppid),
            _ => None,
        }
    }

    pub(super) fn group_name(&self, g: &Group, members: &[&Process]) -> GroupName {
        match g {
            Group::Owner(_, _, name) => GroupName::Owner(name.clone()),
            Group::Tree(root) => match self.by_pid.get(root) {
                Some(r) if members.len() > 1 || members.iter().any(|m| m.pid != *root) => {
                    GroupName::Launcher {
                        pid: r.pid,
                        comm: Some(r.comm.clone()),
                        role: role(r),
                    }
                }
                Some(r) => GroupName::Process {
                    pid: r.pid,
                    comm: r.comm.clone(),
                },
                None => GroupName::Pid(*root),
            },
            Group::Launcher(pid) => {
                let kin = self.s.parents.get(pid);
                GroupName::Launcher {
                    pid: *pid,
                    comm: kin.map(|k| k.comm.clone()),
                    role: kin.and_then(|k| shape(&k.comm, &k.cmdline.join(" "))),
                }
            }
            Group::Orphans(reaper, _) => GroupName::DeadParent {
                reaper: *reaper,
                comm: self.s.parents.get(reaper).map(|k| k.comm.clone()),
            },
        }
    }

    pub(super) fn group_kill(&self, g: &Group, members: &[&Process]) -> Next {
        let unit = |u: &str| printable(&[u]).then(|| Next::KillUnit(u.to_string()));
        let by_unit = match g {
            Group::Owner(OwnerKind::SystemdUnit, id, name) if id != name => unit(name),
            Group::Owner(_, id, _) => unit(id),
            Group::Tree(_) | Group::Orphans(..) => None,
            // Every holder below it, as one selector (a worker it starts
            // again is below it too), when the group is all that is below
            // it; else exactly the group's PIDs.
            Group::Launcher(pid) => {
                let members: HashSet<u32> = members.iter().map(|m| m.pid).collect();
                let below_only_members = self
                    .look
                    .subtree(*pid)
                    .into_iter()
                    .filter_map(|q| self.look.process(q))
                    .filter(|q| q.is_live() && !q.protected_for_all())
                    .all(|q| members.contains(&q.pid));
                below_only_members.then_some(Next::KillTree(*pid))
            }
        };
        by_unit.unwrap_or_else(|| {
            let mut pids = unprotected(members);
            pids.sort_unstable();
            Next::Kill(pids)
        })
    }
}

/// What started each holder of a snapshot, looked up through one PID map.
pub struct Groups<'a>(Ctx<'a>);

impl<'a> Groups<'a> {
    /// Indexes the holders of `s`.
    pub fn new(s: &'a Snapshot) -> Groups<'a> {
        Groups(Ctx::new(s))
    }

    /// A stable key for what started `p`: its unit, container, pod or job
    /// (by name too: users' units of one name are each user's), or the
    /// top of its tree of holders (the launcher).
    pub fn key(&self, p: &Process) -> String {
        match self.0.group(p) {
            Group::Owner(kind, id, name) => format!("{}:{id}:{name}", kind.as_str()),
            Group::Tree(root) => format!("tree:{root}"),
            Group::Launcher(pid) => format!("launcher:{pid}"),
            Group::Orphans(reaper, uid) => format!("orphans:{reaper}:{uid}"),
        }
    }
}

/// One finding per launch group that holds GPU memory: its processes,
/// what started them, and the command that frees all of it (or stops what
/// would start it again).
pub(super) fn live_holders(ctx: &Ctx<'_>, out: &mut Vec<Finding>) {
    for (g, members) in &launch_groups(ctx) {
        if let Some(f) = group_finding(ctx, g, members) {
            out.push(f);
        }
    }
}

/// The live holders by what started them, sibling trees of one kind
/// merged into their launcher's group.
fn launch_groups<'a>(ctx: &Ctx<'a>) -> BTreeMap<Group, Vec<&'a Process>> {
    let mut groups: BTreeMap<Group, Vec<&Process>> = BTreeMap::new();
    for p in ctx.s.processes.iter().filter(|p| p.is_live()) {
        groups.entry(ctx.group(p)).or_default().push(p);
    }
    merge_siblings(ctx, &mut groups);
    groups
}

/// What makes sibling trees one launcher's: their tops' framework role
/// (Ray's busy and idle workers differ in comm), else their comm.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Role(Role),
    Comm(String),
}

/// Trees whose tops share a parent that holds nothing (the ranks of a
/// torchrun agent, the workers of a Python launcher) become one group:
/// that launcher's. A single tree keeps its own top. Only siblings of one
/// kind (the same comm: ranks and workers look alike) count as one
/// launcher's: two different programs under one parent are two jobs.
fn merge_siblings<'a>(ctx: &Ctx<'a>, groups: &mut BTreeMap<Group, Vec<&'a Process>>) {
    let mut by_launcher: BTreeMap<(u32, Kind), Vec<Group>> = BTreeMap::new();
    for g in groups.keys() {
        if let Group::Tree(root) = g {
            if let (Some(l), Some(top)) = (ctx.launcher_of(*root), ctx.by_pid.get(root)) {
                // Ray's busy and idle workers, vLLM's workers: one kind.
                let kind = role(top).map_or_else(|| Kind::Comm(top.comm.clone()), Kind::Role);
                by_launcher.entry((l, kind)).or_default().push(g.clone());
            }
        }
    }
    for ((l, _), trees) in by_launcher.into_iter().filter(|(_, t)| t.len() > 1) {
        if groups.contains_key(&Group::Launcher(l)) {
            continue; // two kinds under one launcher: the second stays apart
        }
        let mut merged = Vec::new();
        for t in trees {
            merged.extend(groups.remove(&t).unwrap_or_default());
        }
        groups.insert(Group::Launcher(l), merged);
    }
}

/// A holder and its memory per GPU.
fn hold(ctx: &Ctx<'_>, g: &Group, p: &Process) -> Holding {
    Holding {
        who: who(p),
        memory: p.gpu_memory.iter().map(|m| (m.gpu, m.used_bytes)).collect(),
        top: ctx.orphan_top(g, p),
    }
}

/// The unprotected members of a group without counted memory, which a
/// kill of the group's PIDs stops with its holders.
fn alongside(ctx: &Ctx<'_>, g: &Group, members: &[&Process]) -> Vec<Alongside> {
    members
        .iter()
        .filter(|p| p.memory_bytes() == 0 && !p.protected_for_all())
        .map(|p| Alongside {
            who: who(p),
            devices: p.devices.clone(),
            top: ctx.orphan_top(g, p),
        })
        .collect()
}

/// The finding of group `g`, if any of its unprotected members holds
/// memory: what it holds and where; what restarts it is stopped first.
fn group_finding(ctx: &Ctx<'_>, g: &Group, members: &[&Process]) -> Option<Finding> {
    let holding: Vec<&Process> = members
        .iter()
        .copied()
        .filter(|p| p.memory_bytes() > 0 && !p.protected_for_all())
        .collect();
    if holding.is_empty() {
        return None;
    }
    let gpus = gpus_of_all(holding.iter().copied());
    let supervisor = supervisors::of(ctx.s, g, members, &gpus);
    let (restarter, next) = match supervisor {
        Some((r, next)) => (Some(r), next),
        None => (None, ctx.group_kill(g, members)),
    };
    Some(Finding {
        severity: Severity::Error,
        pids: holding.iter().map(|p| p.pid).collect(),
        gpus,
        bytes: crate::model::saturating_sum(holding.iter().map(|p| p.memory_bytes())),
        next,
        evidence: Evidence::Group(Box::new(LaunchGroup {
            name: ctx.group_name(g, members),
            holders: holding.iter().map(|p| hold(ctx, g, p)).collect(),
            also: alongside(ctx, g, members),
            launcher: match g {
                Group::Launcher(pid) => Some(*pid),
                _ => None,
            },
            restarter,
        })),
    })
}

pub(super) fn node_only(ctx: &Ctx<'_>, out: &mut Vec<Finding>) {
    let s = ctx.s;
    let memory_groups: BTreeSet<Group> = s
        .processes
        .iter()
        .filter(|p| p.memory_bytes() > 0 && p.is_live())
        .map(|p| ctx.group(p))
        .collect();
    let node_only: Vec<&Process> = s
        .processes
        .iter()
        .filter(|p| {
            p.memory_bytes() == 0
                && p.memory_known()
                && !nvidia_unread(s, p)
                && !p.devices.is_empty()
                && p.is_live()
                && !p.protected_for_all()
        })
        .collect();
    let (with_group, alone): (Vec<&Process>, Vec<&Process>) = node_only
        .iter()
        .partition(|p| memory_groups.contains(&ctx.group(p)));
    device_holders(&with_group, true, out);
    device_holders(&alone, false, out);
}

/// Whether NVML could not be read and `p` holds an NVIDIA node (the
/// discovery names them all `nvidia*`): its GPU memory is then unknown,
/// never none.
fn nvidia_unread(s: &Snapshot, p: &Process) -> bool {
    !s.nvml.available
        && p.devices.iter().any(|d| {
            let name = d.path.rsplit('/').next().unwrap_or_default();
            name.starts_with("nvidia")
        })
}

/// One finding for processes that hold device nodes without memory (none
/// when there are none), each with its nodes, killed by PID: a warning
/// when they were started with the memory holders.
fn device_holders(ps: &[&Process], with_memory_holders: bool, out: &mut Vec<Finding>) {
    if ps.is_empty() {
        return;
    }
    let pids: Vec<u32> = ps.iter().map(|p| p.pid).collect();
    out.push(Finding {
        severity: if with_memory_holders {
            Severity::Warning
        } else {
            Severity::Info
        },
        pids: pids.clone(),
        gpus: gpus_of_all(ps.iter().copied()),
        bytes: 0,
        next: Next::Kill(pids),
        evidence: Evidence::DeviceHolders {
            with_memory_holders,
            holders: ps.iter().map(|p| (who(p), p.devices.clone())).collect(),
        },
    });
}
