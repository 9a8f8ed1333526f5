//! What starts a launch group again when its processes die — a systemd
//! unit with `Restart=` other than `no`, a Kubernetes pod (the kubelet
//! restarts its containers, a controller its pods), a torchrun agent with
//! restarts left — and the command that stops it first.

use super::{printable, Group};
use crate::model::{Next, OwnerKind, Process, Restarter, Role, Selection, Snapshot};
use regex::Regex;
use std::sync::LazyLock;

/// The `gpufree wait` that proves the release after a supervisor stops.
pub(crate) fn wait_for(gpus: &Selection) -> String {
    format!(
        "gpufree {}",
        [vec!["wait".to_string()], gpus.args()].concat().join(" ")
    )
}

/// The supervisor of group `g` (its holders `members`, on `gpus`), if
/// anything will restart them, and the `next` that stops it and then
/// proves the release (or, for a pod whose controller cannot be told,
/// the lookup that tells it). None also when a name in that command
/// cannot be printed safely.
pub(super) fn of(
    s: &Snapshot,
    g: &Group,
    members: &[&Process],
    gpus: &[u32],
) -> Option<(Restarter, Next)> {
    match g {
        Group::Owner(OwnerKind::SystemdUnit, id, name) if id == name => {
            let r = s
                .units
                .get(id.as_str())
                .filter(|r| r.restarts() || !r.unreadable.is_empty())?;
            printable(&[id]).then(|| {
                (
                    Restarter::Unit {
                        unit: id.clone(),
                        policy: r.clone(),
                    },
                    Next::StopUnit {
                        unit: id.clone(),
                        gpus: s.selection_of(gpus),
                    },
                )
            })
        }
        Group::Owner(OwnerKind::K8sPod, uid, _) => pod(s, uid, gpus),
        Group::Launcher(pid) => torchrun(s, *pid, members, gpus),
        _ => None,
    }
}

/// `systemctl stop UNIT`, then the wait that proves `gpus` free; None when
/// the unit's name cannot be pasted safely.
pub(crate) fn stop_unit(unit: &str, gpus: &Selection) -> Option<String> {
    // A unit name may start with '-': never taken for an option.
    let argv: &[&str] = if unit.starts_with('-') {
        &["systemctl", "stop", "--", unit]
    } else {
        &["systemctl", "stop", unit]
    };
    let stop = crate::safe::shell_command(argv)?;
    Some(format!("{stop} && {}", wait_for(gpus)))
}

/// A pod's name as a Deployment's ReplicaSet makes it: NAME-HASH-XXXXX
/// (the hash and suffix from Kubernetes' safe alphabet). Another shape
/// says nothing sure about a controller (`worker-3` may be a bare pod).
static DEPLOYMENT_POD: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"^(.+)-[bcdfghjklmnpqrstvwxz2456789]{6,10}-[bcdfghjklmnpqrstvwxz2456789]{5}$").ok()
});

fn pod(s: &Snapshot, uid: &str, gpus: &[u32]) -> Option<(Restarter, Next)> {
    let Some(p) = s.pods.get(uid) else {
        let uid = uid.to_string();
        return Some((
            Restarter::UnnamedPod { uid: uid.clone() },
            Next::FindPod(uid),
        ));
    };
    let (namespace, name) = (p.namespace.clone(), p.name.clone());
    let deployment = DEPLOYMENT_POD
        .as_ref()
        .and_then(|re| re.captures(&name))
        .and_then(|c| c.get(1))
        .map(|m| m.as_str().to_string());
    let uid = uid.to_string();
    let Some(deployment) = deployment else {
        // Bare, or owned by a Job, DaemonSet, StatefulSet or a ReplicaSet
        // whose name was cut: only its ownerReferences tell which.
        if !printable(&[&namespace, &name]) {
            return None;
        }
        let next = Next::PodOwner {
            namespace: namespace.clone(),
            name: name.clone(),
        };
        return Some((
            Restarter::Pod {
                namespace,
                name,
                uid,
            },
            next,
        ));
    };
    if !printable(&[&namespace, &format!("deployment/{deployment}")]) {
        return None;
    }
    let next = Next::ScaleDeployment {
        namespace: namespace.clone(),
        deployment: deployment.clone(),
        gpus: s.selection_of(gpus),
    };
    Some((
        Restarter::Deployment {
            namespace,
            name,
            uid,
            deployment,
        },
        next,
    ))
}

fn torchrun(
    s: &Snapshot,
    agent: u32,
    members: &[&Process],
    gpus: &[u32],
) -> Option<(Restarter, Next)> {
    let kin = s.parents.get(&agent)?;
    let cmd = kin.cmdline.join(" ");
    if super::shape(&kin.comm, &cmd) != Some(Role::TorchrunAgent) {
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
    (max.saturating_sub(used) > 0).then(|| {
        (
            Restarter::Torchrun { agent, used, max },
            Next::StopAgent {
                pid: agent,
                gpus: s.selection_of(gpus),
            },
        )
    })
}
