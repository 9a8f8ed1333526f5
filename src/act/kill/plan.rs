//! The plan: a pure function of a snapshot, the selectors and the safety
//! context — which holders are targets, and which are left out and why.

use crate::diagnose::Groups;
use crate::model::{
    Holds, Left, Owner, OwnerKind, Plan, PlanEntry, Process, Protection, Selection, Skipped,
    Snapshot, Target, UnitMiss, UnitOwner, UsersOwn, With,
};
use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};

/// `--user NAME|UID`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserSel {
    /// A numeric UID.
    Uid(u32),
    /// A user name.
    Name(String),
}

/// Which holders to target; every given selector must hold.
#[derive(Debug, Clone, Default)]
pub struct Selectors {
    /// `--gpu`: holders of these GPUs or MIG devices (None: not given).
    pub gpus: Option<Selection>,
    /// `--pid`.
    pub pids: Vec<u32>,
    /// `--match`: comm, whole cmdline or exe.
    pub matcher: Option<Regex>,
    /// `--user`.
    pub user: Option<UserSel>,
    /// `--unit`: systemd unit, container id, pod UID, job id.
    pub unit: Option<String>,
    /// `--tree`: holders that are this process or descend from it (a
    /// launcher and its workers, through parents that hold nothing).
    pub tree: Option<u32>,
}

impl Selectors {
    /// Whether only GPUs were selected: the command is "free these GPUs",
    /// and its end verdict is theirs.
    pub fn gpus_only(&self) -> bool {
        self.gpus.is_some()
            && self.pids.is_empty()
            && self.matcher.is_none()
            && self.user.is_none()
            && self.unit.is_none()
            && self.tree.is_none()
    }
}

/// What must never be signalled, and what may be.
#[derive(Debug, Clone, Default)]
pub struct Safety {
    /// gpufree's own PID.
    pub me: u32,
    /// gpufree's ancestors (its shell, its service, init).
    pub ancestors: Vec<u32>,
    /// The real UID gpufree runs for: its caller. A setuid or setcap
    /// gpufree signals only its caller's processes, as that user could
    /// (root's gpufree, any process).
    pub uid: u32,
    /// `--force-protected`.
    pub force_protected: bool,
    /// `--include-shared`: holders of only shared nodes join the plan even
    /// when they belong to no targeted group.
    pub include_shared: bool,
}

impl Safety {
    /// The safety context of the running process.
    pub fn current() -> Safety {
        let me = std::process::id();
        let ancestors = crate::proc::me::ancestors();
        Safety {
            me,
            ancestors,
            uid: rustix::process::getuid().as_raw(),
            ..Safety::default()
        }
    }
}

/// Whether `owner` is the one `--unit unit` names: its unit with or without
/// `.service`, its readable name, or, for a container or pod, its id in
/// full or by a prefix of at least 12 hex digits. A user's unit is named
/// only by its readable name (`vllm.service (user 1000)`).
pub(super) fn unit_names(owner: &Owner, unit: &str) -> bool {
    if unit.is_empty() || owner.kind == OwnerKind::None {
        return false;
    }
    if owner.name == unit {
        return true;
    }
    // A user's unit (`vllm.service (user 1000)`) is named only in full: the
    // system unit of the same name is another owner.
    let user_unit = owner.kind == OwnerKind::SystemdUnit && owner.name != owner.id;
    if user_unit {
        return false;
    }
    if owner.id == unit {
        return true;
    }
    match owner.kind {
        OwnerKind::SystemdUnit => owner.id == format!("{unit}.service"),
        OwnerKind::Container | OwnerKind::K8sPod => {
            let hex = unit.chars().filter(char::is_ascii_hexdigit).count();
            hex >= 12
                && unit.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
                && owner.id.starts_with(unit)
        }
        _ => false,
    }
}

/// Checks that `--unit unit` names at most one owner among the holders of
/// `snap`; an ambiguous prefix is an error listing the candidates.
pub fn check_unit(snap: &Snapshot, unit: &str) -> Result<(), UnitMiss> {
    // In the order of the kinds' names, as the message lists them.
    let owners: BTreeSet<(&str, UnitOwner)> = snap
        .processes
        .iter()
        .filter(|p| unit_names(&p.owner, unit))
        .map(|p| {
            let o = &p.owner;
            let owner = UnitOwner {
                kind: o.kind,
                id: o.id.clone(),
                name: o.name.clone(),
            };
            (o.kind.as_str(), owner)
        })
        .collect();
    if owners.len() > 1 {
        return Err(UnitMiss {
            unit: unit.to_string(),
            owners: owners.into_iter().map(|(_, o)| o).collect(),
        });
    }
    Ok(())
}

/// Whether the selectors name `p`; `tree`: the PIDs below `--tree`'s
/// root, found once for all processes.
pub(super) fn matches(
    snap: &Snapshot,
    p: &Process,
    sel: &Selectors,
    tree: Option<&std::collections::HashSet<u32>>,
) -> bool {
    if tree.is_some_and(|below| !below.contains(&p.pid)) {
        return false;
    }
    if let Some(gpus) = &sel.gpus {
        if !snap.in_selection(p, gpus) {
            return false;
        }
    }
    if !sel.pids.is_empty() && !sel.pids.contains(&p.pid) {
        return false;
    }
    if let Some(re) = &sel.matcher {
        let hit = re.is_match(&p.comm)
            || re.is_match(&p.cmdline_joined())
            || p.exe.as_deref().is_some_and(|e| re.is_match(e));
        if !hit {
            return false;
        }
    }
    if let Some(u) = &sel.user {
        let hit = match u {
            UserSel::Uid(uid) => p.uid == *uid,
            UserSel::Name(n) => p.user == *n,
        };
        if !hit {
            return false;
        }
    }
    if let Some(unit) = &sel.unit {
        if !unit_names(&p.owner, unit) {
            return false;
        }
    }
    true
}

pub(super) fn shared_only(p: &Process) -> bool {
    p.gpu_memory.is_empty() && p.devices.iter().all(|d| d.gpu.is_none())
}

/// Why `p` is a target, from what it holds alone.
pub(super) fn reason(p: &Process) -> Target {
    Target::holds(Holds::of(p))
}

/// Why a matching holder must not be signalled, if it must not, and
/// whether that is for safety.
pub(super) fn refusal(p: &Process, safety: &Safety) -> Option<(Left, bool)> {
    if p.pid == 1 {
        return Some((Left::Init, true));
    }
    if p.pid == safety.me {
        return Some((Left::Itself, true));
    }
    if safety.ancestors.contains(&p.pid) {
        return Some((Left::Ancestor, true));
    }
    if p.exe.is_none() && p.cmdline.is_empty() && p.state != "Z" && (p.ppid == 2 || p.pid == 2) {
        return Some((Left::KernelThread, true));
    }
    if p.protected && !safety.force_protected && !beyond_protection(p, safety) {
        let comm = p.comm.clone();
        return Some((Left::Protected { comm }, true));
    }
    if safety.uid != 0 && p.uid != safety.uid {
        let user = p.user.clone();
        let (uid, runs_for) = (p.uid, safety.uid);
        return Some((
            Left::NotYours {
                user,
                uid,
                runs_for,
            },
            true,
        ));
    }
    if !p.is_live() {
        return Some((Left::Zombie { parent: p.ppid }, false));
    }
    None
}

/// Whether `p` is a display server or MPS daemon a person runs and this
/// kill is someone else's (root's): it protects only within that person's
/// own kills, since their code may run in it.
fn beyond_protection(p: &Process, safety: &Safety) -> bool {
    p.protection == Some(Protection::User) && safety.uid != p.uid
}

/// Why a protected process of a person's is a target of this kill.
fn users_own(p: &Process) -> UsersOwn {
    UsersOwn {
        user: p.user.clone(),
        mps: p.program().starts_with("nvidia-cuda-mps"),
    }
}

/// Builds the plan: the holders the selectors name, plus the holders of
/// only shared nodes started with them, minus what safety forbids.
pub fn plan(snap: &Snapshot, sel: &Selectors, safety: &Safety) -> Plan {
    let mut plan = Plan::default();
    for (pid, (p, why)) in chosen(snap, sel, safety) {
        match refusal(p, safety) {
            Some((why, refused)) => plan.skipped.push(Skipped { pid, why, refused }),
            None => plan.targets.push(PlanEntry {
                pid,
                start_time_ticks: p.start_time_ticks,
                why: Target {
                    users_own: (p.protected && !safety.force_protected).then(|| users_own(p)),
                    ..why
                },
            }),
        }
    }
    plan.skipped.extend(absent_pids(snap, sel));
    super::mps::explain(snap, &mut plan);
    plan
}

/// The holders the selectors name, each with why it is chosen; where GPUs
/// were selected, also the holders of only shared nodes that started with
/// the memory holders (or every one, with `--include-shared`).
fn chosen<'a>(
    snap: &'a Snapshot,
    sel: &Selectors,
    safety: &Safety,
) -> BTreeMap<u32, (&'a Process, Target)> {
    let tree: Option<std::collections::HashSet<u32>> = sel.tree.map(|root| {
        crate::model::Lookup::new(snap)
            .subtree(root)
            .into_iter()
            .collect()
    });
    let matched: Vec<&Process> = snap
        .processes
        .iter()
        .filter(|p| matches(snap, p, sel, tree.as_ref()))
        .collect();
    let grouper = Groups::new(snap);
    let groups: BTreeSet<String> = matched
        .iter()
        .filter(|p| p.memory_bytes() > 0)
        .map(|p| grouper.key(p))
        .collect();
    let mut chosen: BTreeMap<u32, (&Process, Target)> =
        matched.iter().map(|p| (p.pid, (*p, reason(p)))).collect();
    if let Some(gpus) = &sel.gpus {
        // Where MIG devices were selected, other tenants share the GPU: a
        // group that also holds memory outside the selection (on another
        // instance) lends no holder of shared nodes to this kill.
        let beyond: BTreeSet<String> = snap
            .processes
            .iter()
            .filter(|p| !gpus.mig.is_empty() && p.memory_bytes() > 0)
            .filter(|p| !chosen.contains_key(&p.pid))
            .map(|p| grouper.key(p))
            .collect();
        let extra: Vec<&Process> = snap
            .processes
            .iter()
            .filter(|p| shared_only(p) && !chosen.contains_key(&p.pid))
            .collect();
        for p in extra {
            let key = grouper.key(p);
            let same_group = groups.contains(&key) && !beyond.contains(&key);
            if same_group || safety.include_shared {
                let with = if same_group {
                    With::StartedWithHolders
                } else {
                    With::IncludeShared
                };
                let why = Target {
                    with: Some(with),
                    ..reason(p)
                };
                chosen.insert(p.pid, (p, why));
            }
        }
    }
    chosen
}

/// The `--pid`s that name no holder. A PID that NVML lists but whose
/// process here holds no node names an innocent (the memory is kept by a
/// process that had the PID before): refused for safety. One that nothing
/// lists has nothing to free: left out, not refused.
fn absent_pids(snap: &Snapshot, sel: &Selectors) -> Vec<Skipped> {
    sel.pids
        .iter()
        .filter(|&&pid| !snap.processes.iter().any(|p| p.pid == pid))
        .map(|&pid| {
            let listed = snap
                .gpus
                .iter()
                .any(|g| g.nvml_processes.iter().any(|n| n.pid == pid));
            Skipped {
                pid,
                why: if listed {
                    Left::ListedNotHolder
                } else {
                    Left::NoHolder
                },
                refused: listed,
            }
        })
        .collect()
}
