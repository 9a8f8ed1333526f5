//! Who started a process, from /proc/PID/cgroup: systemd unit, user session,
//! Docker, containerd, CRI-O, podman, LXC/LXD/Incus, Kubernetes pod (systemd
//! and cgroupfs drivers), Slurm job (cgroup v1, v2 and SLUID paths).
//!
//! Patterns are matched anywhere inside the path, since containers nest.

use crate::model::{Owner, OwnerKind};
use regex::Regex;
use std::sync::LazyLock;

/// Picks the cgroup path that best shows the owner: the v2 line `0::`, else
/// `name=systemd`, else the `memory` or `devices` controller, else any.
/// Malformed lines are skipped; None when no line is usable.
pub fn cgroup_path(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut best: Option<(u8, &str)> = None;
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
        if best.is_none_or(|(r, _)| rank < r) {
            best = Some((rank, path));
        }
    }
    best.map(|(_, p)| p.to_string())
}

struct Patterns {
    k8s_pod: Regex,
    k8s_container: Regex,
    slurm_job: Regex,
    slurm_sluid: Regex,
    containers: Vec<(&'static str, Regex)>,
    session: Regex,
    user_unit: Regex,
    user_manager: Regex,
    unit: Regex,
}

#[allow(clippy::expect_used)] // The patterns are literals, checked by the unit tests.
static PATTERNS: LazyLock<Patterns> = LazyLock::new(|| {
    let re = |p: &str| Regex::new(p).expect("owner pattern is valid");
    Patterns {
        k8s_pod: re(r"kubepods.*?pod([0-9a-f_-]{32,})(?:\.slice)?(?:/|$)"),
        k8s_container: re(
            r"(?:cri-containerd-|crio-|docker-|cri-containerd:)([0-9a-f]{12,})(?:\.scope)?$|/([0-9a-f]{64})$",
        ),
        slurm_job: re(
            r"(?:/slurm/uid_\d+/job_(\d+)|slurmstepd\.scope/job_(\d+))(?:/step_([^/]+))?",
        ),
        slurm_sluid: re(r"slurmstepd\.scope/(s[0-9A-Za-z]{8,})(?:/step_([^/]+))?"),
        containers: vec![
            (
                "docker",
                re(r"docker-([0-9a-f]{64})\.scope|/docker/([0-9a-f]{64})"),
            ),
            (
                "containerd",
                re(r"cri-containerd-([0-9a-f]{12,})\.scope|:cri-containerd:([0-9a-f]{12,})"),
            ),
            ("cri-o", re(r"crio-(?:conmon-)?([0-9a-f]{12,})\.scope")),
            ("podman", re(r"libpod-(?:conmon-)?([0-9a-f]{12,})\.scope")),
            (
                "lxc",
                re(r"lxc\.(?:payload|monitor)\.([^/]+)|^/lxc/([^/]+)"),
            ),
        ],
        session: re(r"user-(\d+)\.slice/session-([^/]+)\.scope"),
        user_unit: re(r"user@(\d+)\.service/(?:.*/)?([^/]+\.service)$"),
        user_manager: re(r"user@(\d+)\.service"),
        unit: re(r"([^/]+\.(?:service|scope))(?:/|$)"),
    }
});

fn first_group(caps: &regex::Captures<'_>) -> String {
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

/// The owner named by a cgroup path: the innermost kind first (a pod's
/// container, a Slurm job, a container), then the user's and the system's
/// units.
pub fn owner_from_path(path: &str) -> Owner {
    let p = &*PATTERNS;
    k8s_pod(p, path)
        .or_else(|| slurm_job(p, path))
        .or_else(|| container(p, path))
        .or_else(|| user_owner(p, path))
        .or_else(|| {
            let unit = p.unit.captures_iter(path).last()?[1].to_string();
            Some(owner(OwnerKind::SystemdUnit, unit.clone(), unit))
        })
        .unwrap_or_default()
}

fn owner(kind: OwnerKind, id: String, name: String) -> Owner {
    Owner { kind, id, name }
}

/// A Kubernetes pod, with its container where the path names one.
fn k8s_pod(p: &Patterns, path: &str) -> Option<Owner> {
    let c = p.k8s_pod.captures(path)?;
    let uid = c[1].replace('_', "-");
    let name = match p.k8s_container.captures(path) {
        Some(cc) => format!("pod {uid} container {}", short(&first_group(&cc))),
        None => format!("pod {uid}"),
    };
    Some(owner(OwnerKind::K8sPod, uid, name))
}

/// A Slurm job (and step), by number or by SLUID.
fn slurm_job(p: &Patterns, path: &str) -> Option<Owner> {
    let (job, step) = if let Some(c) = p.slurm_job.captures(path) {
        let job = c
            .get(1)
            .or(c.get(2))
            .map(|m| m.as_str())
            .unwrap_or_default();
        (job.to_string(), c.get(3).map(|m| m.as_str().to_string()))
    } else {
        let c = p.slurm_sluid.captures(path)?;
        (c[1].to_string(), c.get(2).map(|m| m.as_str().to_string()))
    };
    let name = match step {
        Some(step) => format!("slurm job {job} step {step}"),
        None => format!("slurm job {job}"),
    };
    Some(owner(OwnerKind::SlurmJob, job, name))
}

/// A container of one of the known runtimes.
fn container(p: &Patterns, path: &str) -> Option<Owner> {
    p.containers.iter().find_map(|(runtime, re)| {
        let id = first_group(&re.captures(path)?);
        let name = format!("{runtime} {}", short(&id));
        Some(owner(OwnerKind::Container, id, name))
    })
}

/// A login session, a unit of a user's manager, or the manager's apps.
fn user_owner(p: &Patterns, path: &str) -> Option<Owner> {
    if let Some(c) = p.session.captures(path) {
        let id = format!("session-{}", &c[2]);
        let name = format!("{id} (uid {})", &c[1]);
        return Some(owner(OwnerKind::Session, id, name));
    }
    if let Some(c) = p.user_unit.captures(path) {
        let unit = c[2].to_string();
        let name = format!("{unit} (user {})", &c[1]);
        return Some(owner(OwnerKind::SystemdUnit, unit, name));
    }
    let c = p.user_manager.captures(path)?;
    let id = format!("user@{}.service", &c[1]);
    let name = format!("apps of uid {}", &c[1]);
    Some(owner(OwnerKind::Session, id, name))
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
mod tests {
    use super::*;

    const CID: &str = "3f2a1b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7a8";

    fn of(cgroup: &str) -> Owner {
        parse_cgroup(cgroup.as_bytes()).1
    }

    #[test]
    fn systemd_service() {
        let o = of("0::/system.slice/vllm.service\n");
        assert_eq!(
            (o.kind, o.id.as_str()),
            (OwnerKind::SystemdUnit, "vllm.service")
        );
    }

    #[test]
    fn user_session_and_user_apps() {
        let o = of("0::/user.slice/user-1000.slice/session-3.scope\n");
        assert_eq!((o.kind, o.id.as_str()), (OwnerKind::Session, "session-3"));
        let o = of(
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-gnome-code-123.scope\n",
        );
        assert_eq!(o.kind, OwnerKind::Session);
        let o = of("0::/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service\n");
        assert_eq!(
            (o.kind, o.id.as_str()),
            (OwnerKind::SystemdUnit, "jupyter.service")
        );
    }

    #[test]
    fn docker_both_drivers() {
        for cg in [
            format!("0::/system.slice/docker-{CID}.scope\n"),
            format!("12:memory:/docker/{CID}\n"),
        ] {
            let o = of(&cg);
            assert_eq!((o.kind, o.id.as_str()), (OwnerKind::Container, CID), "{cg}");
            assert!(o.name.starts_with("docker 3f2a1b4c5d6e"), "{}", o.name);
        }
    }

    #[test]
    fn containerd_crio_podman_lxc() {
        let o = of(&format!("0::/system.slice/cri-containerd-{CID}.scope\n"));
        assert!(o.name.starts_with("containerd"));
        let o = of(&format!("0::/system.slice:cri-containerd:{CID}\n"));
        assert_eq!((o.kind, o.id.as_str()), (OwnerKind::Container, CID));
        let o = of(&format!("0::/machine.slice/crio-{CID}.scope/container\n"));
        assert!(o.name.starts_with("cri-o"));
        let o = of(&format!("0::/machine.slice/libpod-{CID}.scope/container\n"));
        assert!(o.name.starts_with("podman"));
        let o = of(&format!("0::/machine.slice/libpod-conmon-{CID}.scope\n"));
        assert!(o.name.starts_with("podman"));
        let o = of("0::/lxc.payload.gpubox\n");
        assert_eq!((o.kind, o.id.as_str()), (OwnerKind::Container, "gpubox"));
        let o = of("0::/lxc.payload.proj_inst/system.slice/vllm.service\n");
        assert_eq!(o.id, "proj_inst");
        let o = of("4:memory:/lxc/gpubox\n");
        assert_eq!(o.id, "gpubox");
    }

    #[test]
    fn kubernetes_systemd_and_cgroupfs_drivers() {
        let uid = "1234abcd-5678-90ab-cdef-1234567890ab";
        let uid_ = uid.replace('-', "_");
        let o = of(&format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/cri-containerd-{CID}.scope\n"
        ));
        assert_eq!((o.kind, o.id.as_str()), (OwnerKind::K8sPod, uid));
        assert!(o.name.contains("container 3f2a1b4c5d6e"), "{}", o.name);
        let o = of(&format!(
            "0::/kubepods.slice/kubepods-pod{uid_}.slice/crio-{CID}.scope\n"
        ));
        assert_eq!(o.id, uid);
        let o = of(&format!("11:devices:/kubepods/besteffort/pod{uid}/{CID}\n"));
        assert_eq!((o.kind, o.id.as_str()), (OwnerKind::K8sPod, uid));
        let o = of(&format!("0::/kubepods/pod{uid}/{CID}\n"));
        assert_eq!(o.id, uid);
    }

    #[test]
    fn slurm_v1_v2_and_sluid() {
        let o = of("4:memory:/slurm/uid_1000/job_4242/step_0/task_1\n");
        assert_eq!((o.kind, o.id.as_str()), (OwnerKind::SlurmJob, "4242"));
        assert_eq!(o.name, "slurm job 4242 step 0");
        let o = of("0::/system.slice/slurmstepd.scope/job_3385/step_batch/user/task_0\n");
        assert_eq!((o.kind, o.id.as_str()), (OwnerKind::SlurmJob, "3385"));
        let o = of("0::/system.slice/slurmstepd.scope/sEKNKTV3WPV500/step_0/user/task_0\n");
        assert_eq!(
            (o.kind, o.id.as_str()),
            (OwnerKind::SlurmJob, "sEKNKTV3WPV500")
        );
    }

    #[test]
    fn hybrid_prefers_v2_then_name_systemd() {
        let cg = "12:memory:/docker/abc\n1:name=systemd:/system.slice/a.service\n0::/system.slice/b.service\n";
        assert_eq!(of(cg).id, "b.service");
        let cg = "12:memory:/user.slice\n1:name=systemd:/system.slice/a.service\n";
        assert_eq!(of(cg).id, "a.service");
    }

    #[test]
    fn malformed_and_empty_lines_are_owner_none() {
        assert_eq!(of("garbage\n\n::\n").kind, OwnerKind::None);
        assert_eq!(of("").kind, OwnerKind::None);
        assert_eq!(of("0::/\n").kind, OwnerKind::None);
        assert_eq!(of("0::/init.scope\n").id, "init.scope");
    }
}
