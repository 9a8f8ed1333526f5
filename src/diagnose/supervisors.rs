//! What starts a launch group again when its processes die — a systemd
//! unit with `Restart=` other than `no`, a Kubernetes pod (the kubelet
//! restarts its containers, a controller its pods), a torchrun agent with
//! restarts left — and the command that stops it first.

use super::{fixed_command, gpu_args, Group};
use crate::model::{OwnerKind, Process, Snapshot};
use regex::Regex;
use std::sync::LazyLock;

/// A group's supervisor: what it is (for the message), where that was
/// read (for the details), and the `next` that stops it and then proves
/// the release (or, for a pod that cannot be named for sure, finds it).
pub(super) struct Supervisor {
    pub what: String,
    pub evidence: String,
    pub next: String,
}

/// The `gpufree wait` that proves the release after the supervisor stops.
fn wait_for(gpus: &[u32]) -> String {
    fixed_command(&[vec!["wait".to_string()], gpu_args(gpus)].concat())
}

/// The supervisor of group `g` (its holders `members`, on `gpus`), if
/// anything will restart them.
pub(super) fn of(
    s: &Snapshot,
    g: &Group,
    members: &[&Process],
    gpus: &[u32],
) -> Option<Supervisor> {
    match g {
        Group::Owner(OwnerKind::SystemdUnit, id, name) if id == name => unit(s, id, gpus),
        Group::Owner(OwnerKind::K8sPod, uid, _) => pod(s, uid, gpus),
        Group::Launcher(pid) => torchrun(s, *pid, members, gpus),
        _ => None,
    }
}

fn unit(s: &Snapshot, unit: &str, gpus: &[u32]) -> Option<Supervisor> {
    let r = s.units.get(unit).filter(|r| r.restart != "no")?;
    let stop = crate::safe::shell_command(&["systemctl", "stop", unit])?;
    let sec = r
        .restart_sec
        .as_deref()
        .map(|t| format!(", RestartSec={t}"))
        .unwrap_or_default();
    Some(Supervisor {
        what: format!(
            "systemd starts {unit} again when it dies (Restart={}{sec}): stop the unit",
            r.restart
        ),
        evidence: format!("Restart={} from {}", r.restart, r.source),
        next: format!("{stop} && {}", wait_for(gpus)),
    })
}

/// Where a pod's name or namespace is unknown, the `next` is the lookup
/// that finds the pod and its controller by UID (a stop command could hit
/// another pod of that name).
fn lookup(uid: &str) -> String {
    format!(
        "kubectl get pods --all-namespaces -o custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,UID:.metadata.uid,OWNER:.metadata.ownerReferences[0].name | grep {uid}"
    )
}

/// A pod's name as a Deployment's ReplicaSet makes it: NAME-HASH-XXXXX
/// (the hash and suffix from Kubernetes' safe alphabet).
static DEPLOYMENT_POD: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^(.+)-[bcdfghjklmnpqrstvwxz2456789]{6,10}-[bcdfghjklmnpqrstvwxz2456789]{5}$").ok()
});
/// A pod's name as a StatefulSet makes it: NAME-ORDINAL.
static STATEFUL_POD: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"^(.+)-[0-9]+$").ok());

fn pod(s: &Snapshot, uid: &str, gpus: &[u32]) -> Option<Supervisor> {
    let Some(p) = s.pods.get(uid) else {
        return Some(Supervisor {
            what: format!("the kubelet restarts pod {uid}'s containers when they die: delete the pod, or scale down its controller"),
            evidence: "its name could not be read from a holder's HOSTNAME".into(),
            next: lookup(uid),
        });
    };
    // Without its namespace, a stop command would act on whatever the
    // current context's namespace has by that name: look the pod up.
    let Some(namespace) = p.namespace.as_deref() else {
        return Some(Supervisor {
            what: format!("the kubelet restarts pod {}'s containers when they die (its namespace could not be read): delete the pod, or scale down its controller", p.name),
            evidence: format!("pod {} (UID {uid}), its name from the container's HOSTNAME", p.name),
            next: lookup(uid),
        });
    };
    let ns = ["-n", namespace];
    let capture = |re: &LazyLock<Option<Regex>>| {
        re.as_ref()?
            .captures(&p.name)
            .and_then(|c| c.get(1))
            .map(|m| m.as_str().to_string())
    };
    let (what, args): (String, Vec<String>) = if let Some(d) = capture(&DEPLOYMENT_POD) {
        (
            format!("pod {} is named like Deployment {d}'s: its ReplicaSet starts it again; scale the Deployment down", p.name),
            vec!["scale".into(), format!("deployment/{d}"), "--replicas".into(), "0".into()],
        )
    } else if let Some(st) = capture(&STATEFUL_POD) {
        (
            format!("pod {} is named like StatefulSet {st}'s: it starts it again; scale the StatefulSet down", p.name),
            vec!["scale".into(), format!("statefulset/{st}"), "--replicas".into(), "0".into()],
        )
    } else {
        (
            format!("the kubelet restarts pod {}'s containers when they die: delete the pod (if a controller owns it, scale that down instead)", p.name),
            vec!["delete".into(), "pod".into(), p.name.clone()],
        )
    };
    let mut argv: Vec<&str> = vec!["kubectl"];
    argv.extend(ns);
    argv.extend(args.iter().map(String::as_str));
    let stop = crate::safe::shell_command(&argv)?;
    Some(Supervisor {
        what,
        evidence: format!(
            "pod {}{} (UID {uid}), its name from the container's HOSTNAME, the controller guessed from it; `kubectl get pod {} -o jsonpath='{{.metadata.ownerReferences}}'` tells",
            p.namespace.as_deref().map(|n| format!("{n}/")).unwrap_or_default(),
            p.name,
            p.name
        ),
        next: format!("{stop} && {}", wait_for(gpus)),
    })
}

fn torchrun(s: &Snapshot, agent: u32, members: &[&Process], gpus: &[u32]) -> Option<Supervisor> {
    let kin = s.parents.get(&agent)?;
    let cmd = kin.cmdline.join(" ");
    if super::shape(&kin.comm, &cmd) != Some("torchrun elastic agent") {
        return None;
    }
    // Each rank's environment says how many restarts the agent has made
    // and may make.
    let number = |p: &Process, key: &str| p.environment.get(key)?.parse::<u64>().ok();
    let (used, max) = members.iter().find_map(|p| {
        Some((
            number(p, "TORCHELASTIC_RESTART_COUNT")?,
            number(p, "TORCHELASTIC_MAX_RESTARTS")?,
        ))
    })?;
    let left = max.saturating_sub(used);
    (left > 0).then(|| Supervisor {
        what: format!(
            "torchrun agent {agent} starts its ranks again when one dies ({left} of {max} restarts left): stop the agent, which stops its ranks"
        ),
        evidence: format!(
            "TORCHELASTIC_RESTART_COUNT={used}, TORCHELASTIC_MAX_RESTARTS={max} in the ranks' environment"
        ),
        next: format!("kill -s TERM {agent} && {}", wait_for(gpus)),
    })
}
