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
/// the release (or, for a pod whose controller cannot be told, the lookup
/// that tells it).
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
        Group::Owner(OwnerKind::SystemdUnit, id, name) if id == name => {
            let r = s
                .units
                .get(id.as_str())
                .filter(|r| r.restarts() || !r.unreadable.is_empty())?;
            let unsure = if r.unreadable.is_empty() {
                String::new()
            } else {
                format!("; could not read {}", r.unreadable.join(", "))
            };
            let sec = r
                .restart_sec
                .as_deref()
                .map(|t| format!(", RestartSec={t}"))
                .unwrap_or_default();
            Some(Supervisor {
                what: if !r.restarts() {
                    format!("systemd may start {id} again (its readable files say Restart=no; some could not be read): stop the unit")
                } else {
                    format!(
                        "systemd starts {id} again when it dies (Restart={}{sec}): stop the unit",
                        r.restart
                    )
                },
                evidence: format!("Restart={} from {}{unsure}", r.restart, r.source),
                next: stop_unit(id, gpus)?,
            })
        }
        Group::Owner(OwnerKind::K8sPod, uid, _) => pod(s, uid, gpus),
        Group::Launcher(pid) => torchrun(s, *pid, members, gpus),
        _ => None,
    }
}

/// `systemctl stop UNIT`, then the wait that proves `gpus` free; None when
/// the unit's name cannot be pasted safely.
pub(crate) fn stop_unit(unit: &str, gpus: &[u32]) -> Option<String> {
    // A unit name may start with '-': never taken for an option.
    let argv: &[&str] = if unit.starts_with('-') {
        &["systemctl", "stop", "--", unit]
    } else {
        &["systemctl", "stop", unit]
    };
    let stop = crate::safe::shell_command(argv)?;
    Some(format!("{stop} && {}", wait_for(gpus)))
}

/// Where a pod's name is unknown, the `next` is the lookup that finds the
/// pod and its controller by UID.
fn lookup(uid: &str) -> String {
    format!(
        "kubectl get pods --all-namespaces -o custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,UID:.metadata.uid,OWNER:.metadata.ownerReferences[0].kind/.metadata.ownerReferences[0].name | grep {uid}"
    )
}

/// A pod's name as a Deployment's ReplicaSet makes it: NAME-HASH-XXXXX
/// (the hash and suffix from Kubernetes' safe alphabet). Another shape
/// says nothing sure about a controller (`worker-3` may be a bare pod).
static DEPLOYMENT_POD: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^(.+)-[bcdfghjklmnpqrstvwxz2456789]{6,10}-[bcdfghjklmnpqrstvwxz2456789]{5}$").ok()
});

fn pod(s: &Snapshot, uid: &str, gpus: &[u32]) -> Option<Supervisor> {
    let Some(p) = s.pods.get(uid) else {
        return Some(Supervisor {
            what: format!("the kubelet restarts pod {uid}'s containers when they die: delete the pod, or scale down its controller"),
            evidence: "no kubelet log directory names the pod (/var/log/pods/NAMESPACE_NAME_UID)".into(),
            next: lookup(uid),
        });
    };
    let (ns, name) = (p.namespace.as_str(), p.name.as_str());
    let deployment = DEPLOYMENT_POD
        .as_ref()
        .and_then(|re| re.captures(name))
        .and_then(|c| c.get(1))
        .map(|m| m.as_str());
    let evidence = format!("pod {ns}/{name} (UID {uid}), named by the kubelet's log directory");
    let Some(d) = deployment else {
        // Bare, or owned by a Job, DaemonSet, StatefulSet or a ReplicaSet
        // whose name was cut: only its ownerReferences tell which.
        let owner = crate::safe::shell_command(&[
            "kubectl",
            "-n",
            ns,
            "get",
            "pod",
            name,
            "-o",
            "jsonpath={.metadata.ownerReferences[*].kind}/{.metadata.ownerReferences[*].name}",
        ])?;
        return Some(Supervisor {
            what: format!("the kubelet restarts pod {ns}/{name}'s containers when they die: with no owner, `kubectl -n {ns} delete pod {name}`; with one (this prints it), scale that down"),
            evidence,
            next: owner,
        });
    };
    let stop = crate::safe::shell_command(&[
        "kubectl",
        "-n",
        ns,
        "scale",
        &format!("deployment/{d}"),
        "--replicas",
        "0",
    ])?;
    Some(Supervisor {
        what: format!("pod {ns}/{name} is named like Deployment {d}'s: its ReplicaSet starts it again; scale the Deployment down"),
        evidence: format!("{evidence}; the Deployment from the name's shape"),
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
