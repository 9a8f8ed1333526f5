//! The words of findings about holders: launch groups and what restarts
//! them, orphans, a `pkill` pattern, device-node
//! holders, single processes in odd states, protected daemons.

use crate::model::{Finding, GroupName, LaunchGroup, Next, Orphan, PatternHits, Restarter, Who};
use crate::present::columns::command_in;
use crate::present::next::{count, gpus_phrase, memory, next_line, nodes, one_or, quoted, who};
use crate::safe::width;
use crate::units::gib;

/// A launch group: how many of it hold how much where, what else its
/// next stops, and what restarts it; its processes one line each.
pub(super) fn group(f: &Finding, g: &LaunchGroup) -> (String, Vec<String>) {
    let n = g.holders.len();
    let they = one_or(n, "it", "them");
    let dead = matches!(g.name, GroupName::DeadParent { .. });
    let why = match &g.restarter {
        Some(r) => format!("; {}", restarter(r).0),
        None if dead => format!(": nothing that started {they} is left to stop {they}"),
        None => String::new(),
    };
    let live = count(n, "live process", "live processes");
    let subject = match &g.name {
        GroupName::DeadParent { reaper, comm } if g.holders.iter().any(|h| h.top.is_some()) => {
            format!(
                "{live} in trees whose top's parent died ({})",
                under(*reaper, comm)
            )
        }
        // A holder that is its own group is named, not said to be its own.
        GroupName::Process { pid, comm } if n == 1 => format!("1 live process, {pid} ({comm}),"),
        other => format!("{live} of {}", group_name(other)),
    };
    let also = also(g);
    let message = format!(
        "{subject} {} {} on {}{why}{also}",
        one_or(n, "holds", "hold"),
        gib(f.bytes),
        gpus_phrase(&f.gpus),
    );
    let tree = |top: Option<u32>| match (dead, top) {
        (false, _) => String::new(),
        (true, None) => "; its parent died".to_string(),
        (true, Some(t)) => format!("; its parent is alive, in the tree of {t}, whose parent died"),
    };
    let mut details: Vec<String> = g
        .holders
        .iter()
        .map(|h| format!("{}: {}{}", who(&h.who), memory(&h.memory), tree(h.top)))
        .collect();
    details.extend(g.also.iter().map(|a| {
        let held = if a.devices.is_empty() {
            "no GPU memory".to_string()
        } else {
            format!("no GPU memory, holds {}", nodes(&a.devices))
        };
        format!("{}: {held}{}", who(&a.who), tree(a.top))
    }));
    if let Some(pid) = g.launcher {
        details.push(format!(
            "launcher {pid} holds no GPU, so gpufree never signals it; if it starts workers again, stop it as well"
        ));
    }
    if let Some(r) = &g.restarter {
        let (what, evidence) = restarter(r);
        details.insert(0, format!("restarts: {what} ({evidence})"));
    }
    (message, details)
}

/// What else a group's next stops: its processes without memory.
fn also(g: &LaunchGroup) -> String {
    if g.also.is_empty() {
        return String::new();
    }
    let pids: Vec<String> = g.also.iter().map(|a| a.who.pid.to_string()).collect();
    format!(
        "; the next also stops {} of its processes without GPU memory: {}",
        pids.len(),
        pids.join(", ")
    )
}

/// Where a dead parent's children went.
fn under(reaper: u32, comm: &Option<String>) -> String {
    match comm {
        Some(c) => format!("now under PID {reaper} ({c})"),
        None => format!("now under PID {reaper}"),
    }
}

/// What started a group, in words.
fn group_name(g: &GroupName) -> String {
    match g {
        GroupName::Owner(name) => name.clone(),
        GroupName::Launcher {
            pid, comm: None, ..
        } => format!("launcher {pid}"),
        GroupName::Launcher {
            pid,
            comm: Some(comm),
            role,
        } => match role {
            Some(what) => format!("launcher {pid} ({comm}) [{}]", super::role(*what)),
            None => format!("launcher {pid} ({comm})"),
        },
        GroupName::Process { pid, comm } => format!("{pid} ({comm})"),
        GroupName::Pid(pid) => format!("PID {pid}"),
        GroupName::DeadParent { reaper, comm } => {
            format!("a dead parent ({})", under(*reaper, comm))
        }
    }
}

/// What restarts a group (for the message and the kill plan) and where
/// that was read (for the details).
pub fn restarter(r: &Restarter) -> (String, String) {
    match r {
        Restarter::Unit { unit, policy: r } => {
            let unsure = if r.unreadable.is_empty() {
                String::new()
            } else {
                format!("; could not read {}", super::proc::unit_unread(&r.unreadable))
            };
            let sec = r
                .restart_sec
                .as_deref()
                .map(|t| format!(", RestartSec={t}"))
                .unwrap_or_default();
            let what = if r.restarts() {
                format!(
                    "systemd starts {unit} again when it dies (Restart={}{sec}): stop the unit",
                    r.restart
                )
            } else {
                format!("systemd may start {unit} again (its readable files say Restart=no; some could not be read): stop the unit")
            };
            (what, format!("Restart={} from {}{unsure}", r.restart, r.source))
        }
        Restarter::UnnamedPod { uid } => (
            format!("the kubelet restarts pod {uid}'s containers when they die: delete the pod, or scale down its controller"),
            "no kubelet log directory names the pod (/var/log/pods/NAMESPACE_NAME_UID)".into(),
        ),
        Restarter::Pod { namespace: ns, name, uid } => (
            format!("the kubelet restarts pod {ns}/{name}'s containers when they die: with no owner, `kubectl -n {ns} delete pod {name}`; with one (this prints it), scale that down"),
            pod_named(ns, name, uid),
        ),
        Restarter::Deployment { namespace: ns, name, uid, deployment: d } => (
            format!("pod {ns}/{name} is named like Deployment {d}'s: its ReplicaSet starts it again; scale the Deployment down"),
            format!("{}; the Deployment from the name's shape", pod_named(ns, name, uid)),
        ),
        Restarter::Torchrun { agent, used, max } => (
            format!(
                "torchrun agent {agent} starts its ranks again when one dies ({} of {max} restarts left): stop the agent, which stops its ranks",
                max.saturating_sub(*used)
            ),
            format!("TORCHELASTIC_RESTART_COUNT={used}, TORCHELASTIC_MAX_RESTARTS={max} in the ranks' environment"),
        ),
    }
}

fn pod_named(ns: &str, name: &str, uid: &str) -> String {
    format!("pod {ns}/{name} (UID {uid}), named by the kubelet's log directory")
}

/// What `pkill -f PATTERN` would hit and miss, and why.
pub(super) fn pattern(h: &PatternHits) -> (String, Vec<String>) {
    let q = quoted(&h.pattern);
    let mut details: Vec<String> = h
        .misses
        .iter()
        .map(|m| {
            let head = format!("misses {} {}: ", m.pid, m.comm);
            let why = if m.renamed {
                let used = width(&head) + "its cmdline is now '' (renamed)".len();
                format!(
                    "its cmdline is now '{}' (renamed)",
                    command_in(&m.seen, used)
                )
            } else {
                let used = width(&head) + "'' does not match".len();
                format!("'{}' does not match", command_in(&m.seen, used))
            };
            format!("{head}{why}")
        })
        .collect();
    details.extend(
        h.hits
            .iter()
            .map(|(pid, comm)| format!("hits {pid} {comm}")),
    );
    // procps warns of a pattern over 15 characters without -f (comm has at
    // most 15 bytes), but a regex that long can still match: say only what
    // it did here.
    if h.pattern.len() > 15 && h.comm_hits == 0 {
        details.push(format!("`pkill {q}` (without -f) matches comm, at most 15 bytes: this pattern, longer than that, hits no holder's comm"));
    }
    details.extend(h.collateral.iter().map(|(pid, comm, seen)| {
        let head = format!("also hits {pid} {comm} ('");
        let seen = command_in(seen, width(&head) + "'), which holds no GPU".len());
        format!("{head}{seen}'), which holds no GPU")
    }));
    let message = format!(
        "`pkill -f {q}` would hit {} of {} holders and {}; `pkill {q}` (comm) would hit {} of {}",
        h.hits.len(),
        h.holders,
        count(h.collateral.len(), "other process", "other processes"),
        h.comm_hits,
        h.holders,
    );
    (message, details)
}

/// A zombie: a leader whose threads still run, one NVML still lists, or
/// one whose memory is already released.
pub(super) fn zombie(w: &Who, parent: u32, threads: u32, listed: bool) -> (String, Vec<String>) {
    let pid = w.pid;
    let message = if threads > 1 {
        let two = threads == 2;
        format!(
            "{pid} is a zombie leader whose {} still {} and {} the GPU: killing the process ends {}",
            count(threads as usize - 1, "other thread", "other threads"),
            if two { "runs" } else { "run" },
            if two { "holds" } else { "hold" },
            if two { "it" } else { "them" }
        )
    } else if listed {
        format!("{pid} is a zombie that NVML still lists: the driver is releasing its memory; killing does nothing, parent {parent} must reap it")
    } else {
        format!("{pid} is a zombie: its memory is already released; killing does nothing, parent {parent} must reap it")
    };
    (message, vec![who(w)])
}

/// A holder in uninterruptible sleep, or (`stopped`) a stopped one, with
/// where the kernel has it waiting.
pub(super) fn blocked(w: &Who, wchan: Option<&str>, stopped: bool) -> (String, Vec<String>) {
    let pid = w.pid;
    let waiting = wchan
        .map(|w| format!(" (waiting in {w})"))
        .unwrap_or_default();
    let message = if stopped {
        format!("{pid} is stopped{waiting}: it cannot handle SIGTERM until it gets SIGCONT")
    } else {
        format!("{pid} is in uninterruptible sleep{waiting}: SIGKILL takes effect only when it leaves that kernel wait, and its memory comes back after that; a wait that lasts minutes is a hung driver call, which only a GPU reset ends")
    };
    (message, vec![who(w)])
}

/// Driver daemons and display servers, each with how to stop it.
pub(super) fn protected(list: &[(Who, Next)]) -> (String, Vec<String>) {
    let n = list.len();
    let comms: Vec<&str> = list.iter().map(|(w, _)| w.program.as_str()).collect();
    let message = format!(
        "{} ({}): never part of a kill by default; a GPU reset fails while {} the GPU",
        count(
            n,
            "driver daemon or display server holds the GPU",
            "driver daemons or display servers hold the GPU"
        ),
        comms.join(", "),
        one_or(n, "it holds", "they hold")
    );
    let details = list
        .iter()
        .map(|(w, stop)| {
            let own = w.protected_for.as_ref().map_or(String::new(), |u| {
                format!("; {u}'s own, protected only in {u}'s kills (root's kill of its GPU includes it)")
            });
            format!("{}: stop with `{}`{own}", who(w), next_line(stop))
        })
        .collect();
    (message, details)
}

/// Holders whose parent died.
pub(super) fn orphans(orphans: &[Orphan]) -> (String, Vec<String>) {
    let message = format!(
        "{} whose parent died (reparented to init or a subreaper): the service that started {} is gone, and a restart will find the GPU full",
        count(orphans.len(), "holder", "holders"),
        one_or(orphans.len(), "it", "them")
    );
    let details = orphans
        .iter()
        .map(|o| {
            let owner = if o.owner.is_empty() { "-" } else { &o.owner };
            format!("{}: parent now {}, owner {owner}", who(&o.who), o.parent)
        })
        .collect();
    (message, details)
}

/// Processes that hold device nodes without memory, each with its nodes:
/// a GPU's own node (status lists it under that GPU) or only the shared
/// driver nodes (status lists it apart), said as status says it.
pub(super) fn device_holders(
    with_memory_holders: bool,
    holders: &[(Who, Vec<crate::model::DeviceUse>)],
) -> (String, Vec<String>) {
    let n = holders.len();
    let shared = holders
        .iter()
        .filter(|(_, d)| d.iter().all(|u| u.gpu.is_none()))
        .count();
    let what = match shared {
        0 => "GPU device nodes".to_string(),
        k if k == n => "only shared driver nodes (no GPU's own node)".to_string(),
        k => format!("GPU device nodes ({k} of them only shared driver nodes)"),
    };
    let message = if with_memory_holders {
        format!(
            "{} {what} open without GPU memory, started with the memory holders: free {} together with the memory holders",
            count(n, "process holds", "processes hold"),
            one_or(n, "it", "them")
        )
    } else {
        format!(
            "{} {what} open without GPU memory: not needed to free memory, but the driver keeps its files open until {}",
            count(n, "process holds", "processes hold"),
            one_or(n, "it exits", "they exit")
        )
    };
    let details = holders
        .iter()
        .map(|(w, d)| format!("{}: {}", who(w), nodes(d)))
        .collect();
    (message, details)
}
