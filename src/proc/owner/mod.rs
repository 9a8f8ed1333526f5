//! Who started a process, from /proc/PID/cgroup: systemd unit, user session,
//! Docker, containerd, CRI-O, podman, LXC/LXD/Incus, Kubernetes pod (systemd
//! and cgroupfs drivers), Slurm job (cgroup v1, v2 and SLUID paths).
//!
//! A path is read from the root down, one component at a time, and the
//! first ownership boundary decides. Outside a delegated subtree only
//! root's managers (systemd, the container runtimes, the kubelet,
//! slurmstepd) make cgroups, so the names there are theirs: a pod's slice
//! then its container's scope, `slurmstepd.scope/job_N/step_M`,
//! `/slurm/uid_N/job_M`, a system unit. Two boundaries delegate the subtree
//! below them to another party, who may name its cgroups anything:
//! `user@UID.service` (that user's manager, and the user: the owner is the
//! user's, whatever the leaves are named) and a container's own cgroup
//! (`docker-<id>.scope`, `/docker/<id>`, `cri-containerd-<id>.scope`,
//! `crio-<id>.scope`, `libpod-<id>.scope`, `lxc.payload.<name>`,
//! `/lxc/<name>`: with its cgroup namespace and Delegate, it makes any
//! names below). A unit's own subtree is its processes' too (systemd
//! never makes a unit inside a unit). A pod, job or container named below
//! the boundary is only claimed ([`Claim`]): never the owner.

use crate::model::{Claim, Owner, OwnerKind};
use regex_lite::Regex;
use std::sync::LazyLock;

/// Picks the cgroup path that best shows the owner: the v2 line `0::`, else
/// `name=systemd`, else the `memory` or `devices` controller, else any.
/// Malformed lines are skipped; None when no line is usable.
pub fn cgroup_path(bytes: &[u8]) -> Option<String> {
    cgroup_line(bytes).map(|(_, path)| path)
}

/// The line [`cgroup_path`] picks: its v1 controllers (None for v2's
/// `0::` line) and its path.
pub fn cgroup_line(bytes: &[u8]) -> Option<(Option<String>, String)> {
    let text = String::from_utf8_lossy(bytes);
    let mut best: Option<(u8, &str, &str)> = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if !path.starts_with('/') {
            continue;
        }
        let rank = if id == "0" && controllers.is_empty() {
            0
        } else if controllers.split(',').any(|c| c == "name=systemd") {
            1
        } else if controllers
            .split(',')
            .any(|c| c == "memory" || c == "devices")
        {
            2
        } else {
            3
        };
        if best.is_none_or(|(r, ..)| rank < r) {
            best = Some((rank, controllers, path));
        }
    }
    best.map(|(rank, c, p)| ((rank > 0).then(|| c.to_string()), p.to_string()))
}

/// Patterns of one path component each.
struct Patterns {
    /// A pod's slice or directory: `kubepods-besteffort-pod<uid_>.slice`,
    /// `pod<uid>` (below a `kubepods` component).
    k8s_pod: Regex,
    /// A pod's container: `cri-containerd-<id>.scope`, `crio-<id>.scope`,
    /// `docker-<id>.scope`, `...:cri-containerd:<id>`, `<64 hex>`.
    k8s_container: Regex,
    /// A runtime's monitor beside a pod's containers (`crio-conmon-<id>.scope`).
    k8s_monitor: Regex,
    /// A container's own cgroup, by runtime.
    containers: Vec<(&'static str, Regex)>,
    hex64: Regex,
    slurm_uid: Regex,
    slurm_job: Regex,
    slurm_sluid: Regex,
    slurm_step: Regex,
    user_slice: Regex,
    session: Regex,
    user_manager: Regex,
    unit: Regex,
}

#[allow(clippy::expect_used)] // The patterns are literals, checked by the unit tests.
static PATTERNS: LazyLock<Patterns> = LazyLock::new(|| {
    let re = |p: &str| Regex::new(p).expect("owner pattern is valid");
    Patterns {
        k8s_pod: re(r"(?:^|-)pod([0-9a-f_-]{32,})(?:\.slice)?$"),
        k8s_container: re(
            r"^(?:cri-containerd-|crio-|docker-)([0-9a-f]{12,})(?:\.scope)?$|:cri-containerd:([0-9a-f]{12,})$|^([0-9a-f]{64})$",
        ),
        k8s_monitor: re(r"^(?:crio|libpod)-conmon-[0-9a-f]{12,}\.scope$"),
        containers: vec![
            ("docker", re(r"^docker-([0-9a-f]{64})\.scope$")),
            (
                "containerd",
                re(r"^cri-containerd-([0-9a-f]{12,})\.scope$|:cri-containerd:([0-9a-f]{12,})$"),
            ),
            ("cri-o", re(r"^crio-(?:conmon-)?([0-9a-f]{12,})\.scope$")),
            ("podman", re(r"^libpod-(?:conmon-)?([0-9a-f]{12,})\.scope$")),
            ("lxc", re(r"^lxc\.(?:payload|monitor)\.(.+)$")),
        ],
        hex64: re(r"^[0-9a-f]{64}$"),
        slurm_uid: re(r"^uid_\d+$"),
        slurm_job: re(r"^job_(\d+)$"),
        slurm_sluid: re(r"^(s[0-9A-Za-z]{8,})$"),
        slurm_step: re(r"^step_(.+)$"),
        user_slice: re(r"^user-(\d+)\.slice$"),
        session: re(r"^session-(.+)\.scope$"),
        user_manager: re(r"^user@(\d+)\.service$"),
        unit: re(r"^.+\.(?:service|scope)$"),
    }
});

fn first_group(caps: &regex_lite::Captures<'_>) -> String {
    caps.iter()
        .skip(1)
        .flatten()
        .next()
        .map(|m| m.as_str().to_string())
        .unwrap_or_default()
}

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// The owner named by a cgroup path, read from the root down: the first
/// ownership boundary decides (see the module's doc), and a pod, job or
/// container named below a delegation point is the owner's `claims`.
pub fn owner_from_path(path: &str) -> Owner {
    let parts: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    read(&parts, Reading::Owner)
        .map(|(mut owner, _, below)| {
            owner.claims = claim(&parts[below..]);
            owner
        })
        .unwrap_or_default()
}

/// The owner of `path` where its component `delegated.0` (from the root,
/// 0-based) is the first cgroup directory of the path handed to someone
/// other than root (not root's, or writable by others): the kernel says
/// `delegated.1` (`uid 4242`, `group 4242`, `anyone`) may name anything
/// below it. A boundary that starts at or above it was root's to make and
/// decides as [`owner_from_path`] reads it (`user@UID.service`, a
/// container's own cgroup root handed over, a Slurm job whose directory
/// slurmstepd gave its user); one that starts below it is the user's
/// naming: the owner is that user's cgroup, and a pod, job or container
/// named there only claimed.
pub fn owner_delegated(path: &str, delegated: Option<(usize, &str)>) -> Owner {
    let Some((k, who)) = delegated else {
        return owner_from_path(path);
    };
    let parts: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    match read(&parts, Reading::Owner) {
        Some((mut owner, start, below)) if start <= k => {
            owner.claims = claim(&parts[below..]);
            owner
        }
        _ => {
            let top = format!(
                "/{}",
                parts[..=k.min(parts.len().saturating_sub(1))].join("/")
            );
            let mut o = owner(
                OwnerKind::Session,
                format!("cgroup:{top}"),
                format!("cgroup {top} of {who}"),
            );
            o.claims = claim(parts.get(k + 1..).unwrap_or_default());
            o
        }
    }
}

/// What a walk of components looks for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// The owner: the first boundary of any kind.
    Owner,
    /// What names made by a delegated party claim: only a pod, Slurm job
    /// or container counts (units, sessions and user managers are its
    /// own to name, and claim nothing of root's).
    Claim,
}

/// The first boundary of `parts` (see [`Reading`]), with the index of the
/// component where it starts.
fn read(parts: &[&str], reading: Reading) -> Option<(Owner, usize, usize)> {
    read_from(parts, reading).map(|((o, below), start)| (o, start, below))
}

/// [`read`]'s walk: the boundary, the first component below it, and where
/// it starts.
fn read_from(parts: &[&str], reading: Reading) -> Option<((Owner, usize), usize)> {
    let p = &*PATTERNS;
    let mut kube = false;
    for i in 0..parts.len() {
        if let Some(found) = boundary_at(p, parts, i, reading, &mut kube) {
            return Some((found, i));
        }
    }
    None
}

/// The boundary that starts at component `i`, if one does (`kube`: a
/// `kubepods` component came before).
fn boundary_at(
    p: &Patterns,
    parts: &[&str],
    i: usize,
    reading: Reading,
    kube: &mut bool,
) -> Option<(Owner, usize)> {
    let here = parts[i];
    if reading == Reading::Owner {
        if let Some(c) = p.user_manager.captures(here) {
            return Some((user_manager(&c[1], &parts[i + 1..]), i + 1));
        }
        if let Some(owner) = session(p, parts, i) {
            return Some((owner, i + 1));
        }
    }
    *kube |= here.contains("kubepods");
    if *kube {
        if let Some(c) = p.k8s_pod.captures(here) {
            return Some(pod(p, c[1].replace('_', "-"), parts, i));
        }
    }
    if let Some(found) = container(p, parts, i) {
        return Some(found);
    }
    if let Some(found) = slurm_job(p, parts, i) {
        return Some(found);
    }
    if reading == Reading::Owner && p.unit.is_match(here) {
        let unit = here.to_string();
        return Some((owner(OwnerKind::SystemdUnit, unit.clone(), unit), i + 1));
    }
    None
}

/// The pod, job or container that `below` (names made by a delegated
/// party) claims, if any: the first one read from its top.
fn claim(below: &[&str]) -> Option<Claim> {
    let (o, ..) = read(below, Reading::Claim)?;
    Some(Claim {
        kind: o.kind,
        id: o.id,
        name: o.name,
    })
}

fn owner(kind: OwnerKind, id: String, name: String) -> Owner {
    Owner {
        kind,
        id,
        name,
        claims: None,
    }
}

/// The subtree of `user@UID.service`: that user's. A user's unit where the
/// first unit below the manager is a service, else the manager's apps.
fn user_manager(uid: &str, below: &[&str]) -> Owner {
    let p = &*PATTERNS;
    match below.iter().find(|c| p.unit.is_match(c)) {
        Some(unit) if unit.ends_with(".service") => owner(
            OwnerKind::SystemdUnit,
            unit.to_string(),
            format!("{unit} (user {uid})"),
        ),
        _ => owner(
            OwnerKind::Session,
            format!("user@{uid}.service"),
            format!("apps of uid {uid}"),
        ),
    }
}

/// A login session: `user-UID.slice/session-N.scope` at `i`.
fn session(p: &Patterns, parts: &[&str], i: usize) -> Option<Owner> {
    let c = p.session.captures(parts[i])?;
    let uid = p.user_slice.captures(parts.get(i.checked_sub(1)?)?)?;
    let id = format!("session-{}", &c[1]);
    let name = format!("{id} (uid {})", &uid[1]);
    Some(owner(OwnerKind::Session, id, name))
}

/// A Kubernetes pod at `i`, with its container where the next component
/// names one (the runtime's monitor beside it is the pod's too).
fn pod(p: &Patterns, uid: String, parts: &[&str], i: usize) -> (Owner, usize) {
    let next = parts.get(i + 1).copied().unwrap_or_default();
    if let Some(c) = p.k8s_container.captures(next) {
        let name = format!("pod {uid} container {}", short(&first_group(&c)));
        return (owner(OwnerKind::K8sPod, uid, name), i + 2);
    }
    let below = if p.k8s_monitor.is_match(next) {
        i + 2
    } else {
        i + 1
    };
    let name = format!("pod {uid}");
    (owner(OwnerKind::K8sPod, uid, name), below)
}

/// A container of one of the known runtimes at `i`: its own cgroup, or
/// `/docker/<id>` and (at the top) `/lxc/<name>`.
fn container(p: &Patterns, parts: &[&str], i: usize) -> Option<(Owner, usize)> {
    let here = parts[i];
    let next = parts.get(i + 1).copied();
    let (runtime, id, below) = p
        .containers
        .iter()
        .find_map(|(runtime, re)| Some((*runtime, first_group(&re.captures(here)?), i + 1)))
        .or_else(|| match (here, next) {
            ("docker", Some(id)) if p.hex64.is_match(id) => Some(("docker", id.to_string(), i + 2)),
            ("lxc", Some(name)) if i == 0 => Some(("lxc", name.to_string(), i + 2)),
            _ => None,
        })?;
    let name = format!("{runtime} {}", short(&id));
    Some((owner(OwnerKind::Container, id, name), below))
}

/// A Slurm job (and step) at `i`: `slurm/uid_N/job_M` (cgroup v1), or
/// `slurmstepd.scope/job_M` or `slurmstepd.scope/<SLUID>` (v2).
fn slurm_job(p: &Patterns, parts: &[&str], i: usize) -> Option<(Owner, usize)> {
    let at = |k: usize| parts.get(k).copied().unwrap_or_default();
    let (job, at_step) = match parts[i] {
        "slurm" if p.slurm_uid.is_match(at(i + 1)) => {
            (p.slurm_job.captures(at(i + 2))?[1].to_string(), i + 3)
        }
        "slurmstepd.scope" => {
            let c = p
                .slurm_job
                .captures(at(i + 1))
                .or_else(|| p.slurm_sluid.captures(at(i + 1)))?;
            (c[1].to_string(), i + 2)
        }
        _ => return None,
    };
    Some(match p.slurm_step.captures(at(at_step)) {
        Some(step) => {
            let name = format!("slurm job {job} step {}", &step[1]);
            (owner(OwnerKind::SlurmJob, job, name), at_step + 1)
        }
        None => {
            let name = format!("slurm job {job}");
            (owner(OwnerKind::SlurmJob, job, name), at_step)
        }
    })
}

/// The owner from the bytes of /proc/PID/cgroup, with the path it came from.
pub fn parse_cgroup(bytes: &[u8]) -> (String, Owner) {
    match cgroup_path(bytes) {
        Some(path) => {
            let owner = owner_from_path(&path);
            (path, owner)
        }
        None => (String::new(), Owner::default()),
    }
}

#[cfg(test)]
mod tests;
