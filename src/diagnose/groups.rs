//! Launch groups: holders grouped by what started them (a unit,
//! container, pod or job; the launcher above sibling trees; a dead parent
//! for orphans), one finding per group whose next frees all of it; and the
//! device-node holders without memory.

use super::*;

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
}

impl<'a> Ctx<'a> {
    pub(super) fn group(&self, p: &Process) -> Group {
        if matches!(
            p.owner.kind,
            OwnerKind::SystemdUnit | OwnerKind::Container | OwnerKind::K8sPod | OwnerKind::SlurmJob
        ) {
            return Group::Owner(p.owner.kind, p.owner.id.clone(), p.owner.name.clone());
        }
        let mut root = p;
        for _ in 0..64 {
            match self.by_pid.get(&root.ppid) {
                Some(parent) if !parent.protected && parent.pid != root.pid => root = parent,
                _ => break,
            }
        }
        if root.orphaned {
            return Group::Orphans(root.ppid, root.uid);
        }
        Group::Tree(root.pid)
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

    pub(super) fn group_name(&self, g: &Group, members: &[&Process]) -> String {
        match g {
            Group::Owner(_, _, name) => name.clone(),
            Group::Tree(root) => match self.by_pid.get(root) {
                Some(r) if members.len() > 1 || members.iter().any(|m| m.pid != *root) => {
                    match role(r) {
                        Some(what) => format!("launcher {} ({}) [{what}]", r.pid, r.comm),
                        None => format!("launcher {} ({})", r.pid, r.comm),
                    }
                }
                Some(r) => format!("{} ({})", r.pid, r.comm),
                None => format!("PID {root}"),
            },
            Group::Launcher(pid) => match self.s.parents.get(pid) {
                Some(k) => match shape(&k.comm, &k.cmdline.join(" ")) {
                    Some(what) => format!("launcher {pid} ({}) [{what}]", k.comm),
                    None => format!("launcher {pid} ({})", k.comm),
                },
                None => format!("launcher {pid}"),
            },
            Group::Orphans(reaper, _) => match self.s.parents.get(reaper) {
                Some(k) => format!("a dead parent (now under PID {reaper} ({}))", k.comm),
                None => format!("a dead parent (now under PID {reaper})"),
            },
        }
    }

    pub(super) fn group_kill(&self, g: &Group, members: &[&Process]) -> String {
        let by_unit = match g {
            Group::Owner(OwnerKind::SystemdUnit, id, name) if id != name => kill_by("--unit", name),
            Group::Owner(_, id, _) => kill_by("--unit", id),
            Group::Tree(_) | Group::Orphans(..) => None,
            // Every holder below it, as one selector (a worker it starts
            // again is below it too), when the group is all that is below
            // it; else exactly the group's PIDs.
            Group::Launcher(pid) => {
                let below_only_members = self
                    .s
                    .processes
                    .iter()
                    .filter(|q| q.is_live() && !q.protected && self.s.descends_from(q.pid, *pid))
                    .all(|q| members.iter().any(|m| m.pid == q.pid));
                below_only_members
                    .then(|| fixed_command(&["kill".into(), "--tree".into(), pid.to_string()]))
            }
        };
        by_unit.unwrap_or_else(|| {
            let mut pids: Vec<u32> = members
                .iter()
                .filter(|p| !p.protected)
                .map(|p| p.pid)
                .collect();
            pids.sort_unstable();
            kill_command(&pids)
        })
    }
}

/// What started each holder of a snapshot, looked up through one PID map.
pub struct Groups<'a>(Ctx<'a>);

impl<'a> Groups<'a> {
    /// Indexes the holders of `s`.
    pub fn new(s: &'a Snapshot) -> Groups<'a> {
        Groups(Ctx {
            s,
            by_pid: s.processes.iter().map(|q| (q.pid, q)).collect(),
        })
    }

    /// A stable key for what started `p`: its unit, container, pod or job,
    /// or the top of its tree of holders (the launcher).
    pub fn key(&self, p: &Process) -> String {
        match self.0.group(p) {
            Group::Owner(kind, id, _) => format!("{}:{id}", kind.as_str()),
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

/// Trees whose tops share a parent that holds nothing (the ranks of a
/// torchrun agent, the workers of a Python launcher) become one group:
/// that launcher's. A single tree keeps its own top. Only siblings of one
/// kind (the same comm: ranks and workers look alike) count as one
/// launcher's: two different programs under one parent are two jobs.
fn merge_siblings<'a>(ctx: &Ctx<'a>, groups: &mut BTreeMap<Group, Vec<&'a Process>>) {
    let mut by_launcher: BTreeMap<(u32, String), Vec<Group>> = BTreeMap::new();
    for g in groups.keys() {
        if let Group::Tree(root) = g {
            if let (Some(l), Some(top)) = (ctx.launcher_of(*root), ctx.by_pid.get(root)) {
                // Ray's busy and idle workers, vLLM's workers: one kind.
                let kind = role(top).map_or_else(|| top.comm.clone(), str::to_string);
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

/// The finding of group `g`, if any of its unprotected members holds
/// memory: what it holds and where; what restarts it is stopped first.
fn group_finding(ctx: &Ctx<'_>, g: &Group, members: &[&Process]) -> Option<Finding> {
    let holding: Vec<&Process> = members
        .iter()
        .copied()
        .filter(|p| p.memory_bytes() > 0 && !p.protected)
        .collect();
    if holding.is_empty() {
        return None;
    }
    let bytes: u64 = crate::model::saturating_sum(holding.iter().map(|p| p.memory_bytes()));
    let gpus = gpus_of_all(holding.iter().copied());
    let mut details: Vec<String> = holding
        .iter()
        .map(|p| format!("{}: {}", who(p), memory_on_gpus(p)))
        .collect();
    if let Group::Launcher(pid) = g {
        details.push(format!(
            "launcher {pid} holds no GPU, so gpufree never signals it; if it starts workers again, stop it as well"
        ));
    }
    let orphans = matches!(g, Group::Orphans(..));
    let supervisor = supervisors::of(ctx.s, g, members, &gpus);
    let they = if holding.len() == 1 { "it" } else { "them" };
    let why = match &supervisor {
        Some(sup) => format!("; {}", sup.what),
        None if orphans => format!(": nothing that started {they} is left to stop {they}"),
        None => String::new(),
    };
    let message = format!(
        "{} of {} {} {} on {}{why}",
        count(holding.len(), "live process", "live processes"),
        ctx.group_name(g, members),
        if holding.len() == 1 { "holds" } else { "hold" },
        gib(bytes),
        gpus_phrase(&gpus),
    );
    let next = match supervisor {
        Some(sup) => {
            details.insert(0, format!("restarts: {} ({})", sup.what, sup.evidence));
            sup.next
        }
        None => ctx.group_kill(g, members),
    };
    let f = finding(
        if orphans {
            FindingKind::Orphans
        } else {
            FindingKind::LiveHolders
        },
        Severity::Error,
        message,
        holding.iter().map(|p| p.pid).collect(),
        gpus,
        next,
    );
    Some(with(f, details, bytes))
}

pub(super) fn node_only(ctx: &Ctx<'_>, out: &mut Vec<Finding>) {
    let s = ctx.s;
    let memory_groups: Vec<Group> = s
        .processes
        .iter()
        .filter(|p| p.memory_bytes() > 0 && p.is_live())
        .map(|p| ctx.group(p))
        .collect();
    let node_only: Vec<&Process> = s
        .processes
        .iter()
        .filter(|p| p.memory_bytes() == 0 && !p.devices.is_empty() && p.is_live() && !p.protected)
        .collect();
    let (with_group, alone): (Vec<&Process>, Vec<&Process>) = node_only
        .iter()
        .partition(|p| memory_groups.contains(&ctx.group(p)));
    device_holders(
        &with_group,
        Severity::Warning,
        format!(
            "{} GPU device nodes open without GPU memory, started with the memory holders: free {} together with the memory holders",
            count(with_group.len(), "process holds", "processes hold"),
            if with_group.len() == 1 { "it" } else { "them" }
        ),
        out,
    );
    device_holders(
        &alone,
        Severity::Info,
        format!(
            "{} GPU device nodes open without GPU memory: not needed to free memory, but the driver keeps its files open until {}",
            count(alone.len(), "process holds", "processes hold"),
            if alone.len() == 1 { "it exits" } else { "they exit" }
        ),
        out,
    );
}

/// One finding for processes that hold device nodes without memory (none
/// when there are none), each named with its nodes, killed by PID.
fn device_holders(ps: &[&Process], severity: Severity, message: String, out: &mut Vec<Finding>) {
    if ps.is_empty() {
        return;
    }
    let pids: Vec<u32> = ps.iter().map(|p| p.pid).collect();
    let f = finding(
        FindingKind::DeviceHolders,
        severity,
        message,
        pids.clone(),
        gpus_of_all(ps.iter().copied()),
        kill_command(&pids),
    );
    let details = ps
        .iter()
        .map(|p| format!("{}: {}", who(p), nodes(p)))
        .collect();
    out.push(with(f, details, 0));
}

pub(super) fn nodes(p: &Process) -> String {
    p.devices
        .iter()
        .map(|d| {
            let name = d.path.rsplit('/').next().unwrap_or(&d.path);
            let via: Vec<String> = d
                .via
                .iter()
                .map(|v| format!("{v:?}").to_lowercase())
                .collect();
            format!("{name} ({})", via.join("+"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}
