//! Tests of `owner.rs`.

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
    let o =
        of("0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-gnome-code-123.scope\n");
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

/// The claim of `o`, as (kind, id).
fn claim_of(o: &Owner) -> Option<(OwnerKind, &str)> {
    o.claims.as_ref().map(|c| (c.kind, c.id.as_str()))
}

#[test]
fn root_made_layouts_claim_nothing() {
    let uid = "1234abcd-5678-90ab-cdef-1234567890ab";
    let uid_ = uid.replace('-', "_");
    for cg in [
        "0::/system.slice/vllm.service".to_string(),
        "0::/user.slice/user-1000.slice/session-3.scope".into(),
        format!("0::/system.slice/docker-{CID}.scope"),
        format!("12:memory:/docker/{CID}"),
        format!("0::/machine.slice/crio-{CID}.scope/container"),
        format!("0::/machine.slice/libpod-{CID}.scope/container"),
        format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/cri-containerd-{CID}.scope"),
        format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/crio-conmon-{CID}.scope"),
        format!("11:devices:/kubepods/besteffort/pod{uid}/{CID}"),
        "4:memory:/slurm/uid_1000/job_4242/step_0/task_1".into(),
        "0::/system.slice/slurmstepd.scope/job_3385/step_batch/user/task_0".into(),
        "0::/system.slice/slurmstepd.scope/sEKNKTV3WPV500/step_0/user/task_0".into(),
        "0::/lxc.payload.proj_inst/system.slice/vllm.service".into(),
    ] {
        let o = of(&cg);
        assert_ne!(o.kind, OwnerKind::None, "{cg}");
        assert_eq!(o.claims, None, "{cg}");
    }
    // The runtime's monitor beside a pod's containers is the pod's.
    let o = of(&format!(
        "0::/kubepods.slice/kubepods-pod{uid_}.slice/crio-conmon-{CID}.scope\n"
    ));
    assert_eq!((o.kind, o.id.as_str()), (OwnerKind::K8sPod, uid));
}

/// A user's delegated subtree is the user's, whatever its leaves are
/// named: a container, pod or job named there is only claimed.
#[test]
fn a_users_delegated_cgroup_only_claims_containers_pods_and_jobs() {
    let uid = "1234abcd-5678-90ab-cdef-1234567890ab";
    let uid_ = uid.replace('-', "_");
    let user = "0::/user.slice/user-65534.slice/user@65534.service";
    for (below, claimed) in [
        (
            format!("app.slice/docker-{CID}.scope"),
            (OwnerKind::Container, CID),
        ),
        (format!("docker/{CID}"), (OwnerKind::Container, CID)),
        (
            format!("user.slice/libpod-{CID}.scope/container"),
            (OwnerKind::Container, CID),
        ),
        (
            format!("app.slice/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid_}.slice/cri-containerd-{CID}.scope"),
            (OwnerKind::K8sPod, uid),
        ),
        (
            format!("kubepods/besteffort/pod{uid}/{CID}"),
            (OwnerKind::K8sPod, uid),
        ),
        (
            "app.slice/slurmstepd.scope/job_3385/step_0/user/task_0".into(),
            (OwnerKind::SlurmJob, "3385"),
        ),
        (
            "slurm/uid_0/job_4242/step_0".into(),
            (OwnerKind::SlurmJob, "4242"),
        ),
        ("lxc.payload.gpubox".into(), (OwnerKind::Container, "gpubox")),
    ] {
        let o = of(&format!("{user}/{below}\n"));
        assert_eq!(
            (o.kind, o.id.as_str(), o.name.as_str()),
            (OwnerKind::Session, "user@65534.service", "apps of uid 65534"),
            "{below}"
        );
        assert_eq!(claim_of(&o), Some(claimed), "{below}");
    }
    let o = of(&format!("{user}/app.slice/docker-{CID}.scope\n"));
    assert_eq!(
        o.described(),
        "apps of uid 65534, claims docker 3f2a1b4c5d6e"
    );
    // The user's unit is the first unit below the manager; a leaf
    // named like a unit below a claimed scope is the user's too.
    let o = of(&format!(
        "{user}/app.slice/jupyter.service/docker-{CID}.scope\n"
    ));
    assert_eq!(
        (o.kind, o.id.as_str(), o.name.as_str()),
        (
            OwnerKind::SystemdUnit,
            "jupyter.service",
            "jupyter.service (user 65534)"
        )
    );
    assert_eq!(claim_of(&o), Some((OwnerKind::Container, CID)));
    let o = of(&format!(
        "{user}/app.slice/docker-{CID}.scope/evil.service\n"
    ));
    assert_eq!(
        (o.kind, o.id.as_str()),
        (OwnerKind::Session, "user@65534.service")
    );
    assert_eq!(claim_of(&o), Some((OwnerKind::Container, CID)));
    // A system unit's name below the manager is the user's unit.
    let o = of(&format!("{user}/app.slice/vllm.service\n"));
    assert_eq!(o.name, "vllm.service (user 65534)");
    assert_eq!(o.claims, None);
}

/// Below a container's own cgroup (its namespace, Delegate), names are
/// the container's: Kubernetes in Docker is the container's, claiming
/// its inner pod; Docker in Docker claims the inner container.
#[test]
fn a_containers_cgroup_only_claims_what_it_names_inside() {
    let uid = "1234abcd-5678-90ab-cdef-1234567890ab";
    let uid_ = uid.replace('-', "_");
    let inner = "9".repeat(64);
    let o = of(&format!(
        "0::/system.slice/docker-{CID}.scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{uid_}.slice/cri-containerd-{inner}.scope\n"
    ));
    assert_eq!((o.kind, o.id.as_str()), (OwnerKind::Container, CID));
    assert_eq!(claim_of(&o), Some((OwnerKind::K8sPod, uid)));
    assert_eq!(
        o.described(),
        format!("docker 3f2a1b4c5d6e, claims pod {uid} container 999999999999")
    );
    let o = of(&format!("0::/docker/{CID}/docker/{inner}\n"));
    assert_eq!((o.kind, o.id.as_str()), (OwnerKind::Container, CID));
    assert_eq!(claim_of(&o), Some((OwnerKind::Container, inner.as_str())));
    let o = of(&format!(
        "0::/lxc.payload.gpubox/system.slice/docker-{inner}.scope\n"
    ));
    assert_eq!((o.kind, o.id.as_str()), (OwnerKind::Container, "gpubox"));
    assert_eq!(claim_of(&o), Some((OwnerKind::Container, inner.as_str())));
    // A pod's container is a container too: a pod nested in it is a
    // claim, the real pod the owner.
    let o = of(&format!(
        "0::/kubepods/besteffort/pod{uid}/{CID}/kubepods/pod{}/{inner}\n",
        "5".repeat(32)
    ));
    assert_eq!((o.kind, o.id.as_str()), (OwnerKind::K8sPod, uid));
    assert_eq!(claim_of(&o).map(|c| c.0), Some(OwnerKind::K8sPod));
}

/// A unit's subtree is its processes' (systemd never makes a unit in a
/// unit): the first unit is the owner, a Slurm job its steps' owner.
#[test]
fn units_and_jobs_own_what_is_made_below_them() {
    let o = of(&format!(
        "0::/system.slice/ci-runner.service/docker-{CID}.scope\n"
    ));
    assert_eq!(
        (o.kind, o.id.as_str(), o.name.as_str()),
        (
            OwnerKind::SystemdUnit,
            "ci-runner.service",
            "ci-runner.service"
        )
    );
    assert_eq!(claim_of(&o), Some((OwnerKind::Container, CID)));
    assert_eq!(o.system_unit(), Some("ci-runner.service"));
    let o = of("0::/machine.slice/systemd-nspawn@box.service/payload/system.slice/vllm.service\n");
    assert_eq!(o.id, "systemd-nspawn@box.service");
    let o = of(&format!(
        "0::/system.slice/slurmstepd.scope/job_3385/step_0/user/task_0/docker-{CID}.scope\n"
    ));
    assert_eq!((o.kind, o.id.as_str()), (OwnerKind::SlurmJob, "3385"));
    assert_eq!(claim_of(&o), Some((OwnerKind::Container, CID)));
    // A user's job folder of its own making inside its job is a claim.
    let o = of("4:memory:/slurm/uid_1000/job_4242/step_0/slurm/uid_0/job_1\n");
    assert_eq!(
        (o.id.as_str(), claim_of(&o)),
        ("4242", Some((OwnerKind::SlurmJob, "1")))
    );
}

/// Paths seen from another cgroup namespace start with `..`; a
/// session's scope outside `user-UID.slice` is a plain unit.
#[test]
fn odd_components_are_not_boundaries() {
    let o = of(&format!("0::/../../system.slice/docker-{CID}.scope\n"));
    assert_eq!((o.kind, o.id.as_str()), (OwnerKind::Container, CID));
    let o = of("0::/system.slice/session-3.scope\n");
    assert_eq!(
        (o.kind, o.id.as_str()),
        (OwnerKind::SystemdUnit, "session-3.scope")
    );
    let o = of(&format!("0::/system.slice/x-docker-{CID}.scope\n"));
    assert_eq!(o.kind, OwnerKind::SystemdUnit);
}

/// A uid or job number is ASCII digits, as systemd and Slurm write them: one
/// in other digits (Arabic-Indic, fullwidth, Devanagari) names no job or
/// user, and the component is read as any other name.
#[test]
fn numbers_in_other_digits_name_no_job_or_user() {
    let o = of("0::/system.slice/slurmstepd.scope/job_\u{661}\u{662}\u{663}/step_0\n");
    assert_eq!(
        (o.kind, o.id.as_str()),
        (OwnerKind::SystemdUnit, "slurmstepd.scope")
    );
    let o = of("4:memory:/slurm/uid_\u{967}\u{966}\u{966}\u{966}/job_78/step_0\n");
    assert_eq!(o.kind, OwnerKind::None);
    let o = of("0::/user.slice/user-\u{ff11}\u{ff10}\u{ff10}\u{ff10}.slice/session-3.scope\n");
    assert_eq!(
        (o.kind, o.id.as_str()),
        (OwnerKind::SystemdUnit, "session-3.scope")
    );
    let o = of("0::/user.slice/user-1000.slice/user@\u{ff11}\u{ff10}.service/x\n");
    assert_eq!(o.kind, OwnerKind::SystemdUnit);
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

/// A directory handed to a user (the first on the path not root's) is
/// theirs, whatever they name below it: `docker-<root's id>.scope` there
/// only claims root's container. A boundary root made at or above it
/// (`user@UID.service` itself, a container's own directory root handed to
/// a remapped uid, a Slurm job directory given to its user) still decides.
#[test]
fn a_directory_handed_to_a_user_is_theirs_whatever_they_name_below() {
    let path = format!("/mine/docker-{CID}.scope");
    let o = owner_delegated(&path, Some((0, "uid 4242")));
    assert_eq!(
        (o.kind, o.id.as_str()),
        (OwnerKind::Session, "cgroup:/mine")
    );
    assert_eq!(o.name, "cgroup /mine of uid 4242");
    let c = o.claims.unwrap();
    assert_eq!((c.kind, c.id.as_str()), (OwnerKind::Container, CID));
    // Without the kernel's word it reads as root's container.
    assert_eq!(owner_delegated(&path, None).kind, OwnerKind::Container);
    // Root's boundaries at or above the handed-over directory decide.
    let o = owner_delegated(
        "/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope",
        Some((2, "uid 1000")),
    );
    assert_eq!(o.id, "user@1000.service");
    let o = owner_delegated(
        &format!("/system.slice/docker-{CID}.scope"),
        Some((1, "uid 100000")),
    );
    assert_eq!((o.kind, o.id.as_str()), (OwnerKind::Container, CID));
    let o = owner_delegated(
        "/system.slice/slurmstepd.scope/job_42/step_0/user/task_0",
        Some((2, "uid 1000")),
    );
    assert_eq!((o.kind, o.id.as_str()), (OwnerKind::SlurmJob, "42"));
    // Nothing named at all below a handed-over directory: still the user's.
    let o = owner_delegated("/mine/work", Some((0, "uid 4242")));
    assert_eq!((o.kind, o.claims), (OwnerKind::Session, None));
}
