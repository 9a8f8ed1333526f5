//! The diagnosis, tested from snapshot values: each finding read in its
//! words, as `why --json` has them.

use super::*;
use crate::model::FindingKind;
use crate::model::OwnerKind;
use crate::model::Role;
use crate::present::json::FindingDoc as Finding;
use crate::present::next::kill_command;

/// The findings of `s`, in words.
fn diagnose(s: &Snapshot) -> Vec<Finding> {
    super::diagnose(s).iter().map(Finding::new).collect()
}

/// The findings of `s` with `opts`, in words.
fn diagnose_with(s: &Snapshot, opts: &Options) -> Vec<Finding> {
    super::diagnose_with(s, opts)
        .iter()
        .map(Finding::new)
        .collect()
}

use crate::model::{
    DeviceUse, Gpu, GpuMemory, Memory, NvmlProcess, NvmlProcessKind, NvmlStatus, Owner, Via,
    Visibility,
};

const W: u64 = 96_610 << 20;

fn is_free(f: &[Finding]) -> bool {
    f.iter().any(|x| x.kind == FindingKind::Free)
}

fn denied(pids: &[u32]) -> Vec<crate::model::Unreadable> {
    pids.iter()
        .map(|&pid| crate::model::Unreadable {
            pid,
            comm: None,
            reason: crate::model::UnreadableReason::Permission,
            why: "permission denied".into(),
        })
        .collect()
}

fn gpu(i: u32, used: u64, accounted: u64) -> Gpu {
    Gpu {
        index: i,
        memory: Memory {
            total_bytes: 102_642_810_880,
            used_bytes: used,
            accounted_bytes: accounted,
            unaccounted_bytes: used - accounted,
            known: true,
            ..Memory::default()
        },
        ..Gpu::default()
    }
}

/// A complete view as root, NVML answering, of `gpus` and `processes`.
pub(super) fn base(gpus: Vec<Gpu>, processes: Vec<Process>) -> Snapshot {
    Snapshot {
        gpus,
        processes,
        nvml: NvmlStatus {
            available: true,
            ..NvmlStatus::default()
        },
        visibility: Visibility {
            root: true,
            ..Visibility::default()
        },
        ..Snapshot::default()
    }
}

fn node(gpu: Option<u32>, name: &str) -> DeviceUse {
    DeviceUse {
        path: format!("/test-dev/{name}"),
        gpu,
        via: vec![Via::Fd],
    }
}

fn worker(pid: u32, ppid: u32, gpu: u32) -> Process {
    Process {
        pid,
        ppid,
        comm: "VLLM::Worker_TP".into(),
        cmdline: vec![format!("VLLM::Worker_TP{gpu}")],
        exe: Some("/usr/bin/python3.12".into()),
        state: "S".into(),
        threads: 40,
        renamed: true,
        gpu_memory: vec![GpuMemory {
            gpu,
            used_bytes: Some(W),
        }],
        devices: vec![
            node(Some(gpu), &format!("nvidia{gpu}")),
            node(None, "nvidia-uvm"),
        ],
        ..Process::default()
    }
}

fn kin(ppid: u32, comm: &str) -> crate::model::Kin {
    crate::model::Kin {
        ppid,
        comm: comm.into(),
        start_time_ticks: 1,
        cmdline: Vec::new(),
    }
}

fn plain(pid: u32, ppid: u32, comm: &str, cmdline: &[&str]) -> Process {
    Process {
        pid,
        ppid,
        comm: comm.into(),
        cmdline: cmdline.iter().map(|s| s.to_string()).collect(),
        exe: Some("/usr/bin/python3.12".into()),
        state: "S".into(),
        threads: 1,
        devices: vec![node(None, "nvidia-uvm"), node(Some(0), "nvidia0")],
        ..Process::default()
    }
}

/// The seed incident as a snapshot value.
fn incident() -> Snapshot {
    let mut procs = vec![
        Process {
            comm: "VLLM::EngineCor".into(),
            cmdline: vec!["VLLM::EngineCore".into()],
            renamed: true,
            ..plain(202_515, 4000, "", &[])
        },
        plain(
            212_437,
            202_515,
            "python3",
            &[
                "/usr/bin/python3",
                "-c",
                "from multiprocessing.resource_tracker import main;main(25)",
            ],
        ),
    ];
    procs.extend((0..8).map(|i| worker(212_702 + i, 202_515, i)));
    base((0..8).map(|i| gpu(i, W, W)).collect(), procs)
}

#[test]
fn seed_incident_live_renamed_workers_first_with_a_kill_of_exactly_the_ten() {
    let f = diagnose(&incident());
    assert_eq!(f[0].kind, FindingKind::LiveHolders);
    assert_eq!(
        f[0].message,
        "8 live processes of launcher 202515 (VLLM::EngineCor) [vLLM engine core] hold 754.8 GiB on GPUs 0-7; the next also stops 2 of its processes without GPU memory: 202515, 212437"
    );
    assert_eq!(f[0].pids.len(), 8);
    let mut ten: Vec<u32> = vec![202_515, 212_437];
    ten.extend(212_702..212_710);
    assert_eq!(f[0].next, kill_command(&ten));
    let kinds: Vec<&str> = f.iter().map(|x| x.kind.as_str()).collect();
    assert!(kinds.contains(&"renamed-holders"));
    assert!(kinds.contains(&"device-holders"));
    assert!(
        !kinds.contains(&"driver-leak"),
        "never a driver leak while live holders exist"
    );
    assert!(!kinds.contains(&"free"));
    let dev = f
        .iter()
        .find(|x| x.kind == FindingKind::DeviceHolders)
        .unwrap();
    assert_eq!(dev.pids, vec![202_515, 212_437]);
    assert!(dev.message.contains("started with the memory holders"));
    assert!(dev
        .details
        .iter()
        .any(|d| d.contains("multiprocessing resource tracker")));
    assert!(!is_free(&f));
}

#[test]
fn pattern_says_what_pkill_hits_misses_and_hits_by_accident() {
    let mut s = incident();
    s.others = vec![
        crate::model::Brief {
            pid: 77,
            comm: "python3".into(),
            cmdline: vec![
                "python3".into(),
                "-m".into(),
                "vllm.entrypoints.openai.api_server".into(),
            ],
        },
        crate::model::Brief {
            pid: 78,
            comm: "bash".into(),
            cmdline: vec!["bash".into()],
        },
    ];
    let opts = Options {
        pattern: Some(("python3.*vllm".into(), Regex::new("python3.*vllm").unwrap())),
    };
    let f = diagnose_with(&s, &opts);
    let p = f.iter().find(|x| x.kind == FindingKind::Pattern).unwrap();
    assert_eq!(p.message, "`pkill -f 'python3.*vllm'` would hit 0 of 10 holders and 1 other process; `pkill 'python3.*vllm'` (comm) would hit 0 of 10");
    assert_eq!(p.pids.len(), 10, "every holder is missed");
    assert!(p.details.iter().any(|d| d.starts_with(
        "misses 212702 VLLM::Worker_TP: its cmdline is now 'VLLM::Worker_TP0' (renamed)"
    )));
    assert!(p
        .details
        .iter()
        .any(|d| d.starts_with("also hits 77 python3")));
    let opts = Options {
        pattern: Some(("Worker_TP".into(), Regex::new("Worker_TP").unwrap())),
    };
    let p = diagnose_with(&s, &opts)
        .into_iter()
        .find(|x| x.kind == FindingKind::Pattern)
        .unwrap();
    assert!(
        p.message
            .contains("would hit 8 of 10 holders and 0 other processes"),
        "{}",
        p.message
    );
}

#[test]
fn zombies_stopped_and_uninterruptible_holders() {
    let mut z = worker(10, 9, 0);
    z.state = "Z".into();
    z.threads = 1;
    z.gpu_memory.clear();
    let mut zl = worker(11, 9, 1);
    zl.state = "Z".into();
    let mut t = worker(12, 9, 2);
    t.state = "T".into();
    let mut d = worker(13, 9, 3);
    d.state = "D".into();
    d.wchan = Some("uvm_va_space_destroy".into());
    let s = base(
        (0..4)
            .map(|i| gpu(i, if i == 0 { 0 } else { W }, if i == 0 { 0 } else { W }))
            .collect(),
        vec![z, zl, t, d],
    );
    let f = diagnose(&s);
    let z = f
        .iter()
        .find(|x| x.kind == FindingKind::Zombies && x.pids == [10])
        .unwrap();
    assert!(
        z.message.contains("already released") && z.next == "kill -s CHLD 9",
        "{z:?}"
    );
    let zl = f
        .iter()
        .find(|x| x.kind == FindingKind::Zombies && x.pids == [11])
        .unwrap();
    assert_eq!(zl.severity, Severity::Error);
    assert!(
        zl.message.contains("39 other threads still run"),
        "{}",
        zl.message
    );
    assert!(
        f.iter()
            .any(|x| x.kind == FindingKind::LiveHolders && x.pids.contains(&11)),
        "a zombie leader with threads is live"
    );
    let t = f.iter().find(|x| x.kind == FindingKind::Stopped).unwrap();
    assert!(t.message.contains("SIGCONT"));
    let d = f
        .iter()
        .find(|x| x.kind == FindingKind::Uninterruptible)
        .unwrap();
    assert!(d.message.contains("uvm_va_space_destroy"));
}

#[test]
fn a_gpu_in_mig_mode_is_never_told_to_reset() {
    // A reset ends every MIG instance, other tenants' included.
    let mut leak = base(vec![gpu(0, 40 << 30, 0)], vec![]);
    leak.gpus[0].mig_mode = Some(true);
    let f = diagnose(&leak);
    assert_eq!(f[0].kind, FindingKind::DriverLeak);
    // Looking at the whole GPU is what this diagnosis already did: never
    // `gpufree why --gpu 0` again (a why over one MIG device of it is
    // told to, see below).
    assert_eq!(f[0].next, "");
    assert!(f.iter().all(|x| !x.next.contains("reset")), "{f:?}");
}

#[test]
fn why_is_never_the_next_of_the_why_just_run() {
    let mut leak = base(vec![gpu(0, 40 << 30, 0)], vec![]);
    leak.gpus[0].mig_mode = Some(true);
    let whole = diagnose(&leak);
    assert!(
        whole
            .iter()
            .all(|x| !x.next.starts_with("gpufree why --gpu")),
        "{whole:?}"
    );
    // One MIG device of it selected: the whole GPU is another look.
    leak.gpus[0].mig_only = true;
    leak.gpus[0].mig_devices = vec![Default::default()];
    let part = diagnose(&leak);
    assert_eq!(part[0].next, "gpufree why --gpu 0", "{part:?}");
}

#[test]
fn driver_leak_only_with_no_holder_and_a_complete_view() {
    let leak = base(vec![gpu(0, 40 << 30, 0)], vec![]);
    let f = diagnose(&leak);
    assert_eq!(f[0].kind, FindingKind::DriverLeak);
    assert_eq!(f[0].next, "nvidia-smi --gpu-reset -i 0");
    // With a holder of the node: not a leak.
    let held = base(
        vec![gpu(0, 40 << 30, 0)],
        vec![plain(5, 1, "python3", &["python3"])],
    );
    assert!(diagnose(&held)
        .iter()
        .all(|x| x.kind != FindingKind::DriverLeak));
    // Partial view: not a leak, and not free.
    let mut partial = leak.clone();
    partial.visibility.unreadable = denied(&[7, 8, 9]);
    let f = diagnose(&partial);
    assert!(f.iter().all(|x| x.kind != FindingKind::DriverLeak));
    assert!(f.iter().any(|x| x.kind == FindingKind::PartialView));
    assert!(!is_free(&f), "never free from a partial view");
    // Hidden processes while NVML accounts for all memory: free, with
    // the caveat said (SPEC.md).
    let mut idle = base(vec![gpu(0, 0, 0)], vec![]);
    idle.visibility.hidepid = true;
    idle.visibility.root = false;
    let f = diagnose(&idle);
    assert!(is_free(&f));
    // ... said once: in the free verdict's own words, not again apart.
    let said: Vec<&str> = f
        .iter()
        .filter(|x| x.message.contains("hidepid"))
        .map(|x| x.kind.as_str())
        .collect();
    assert_eq!(said, vec!["free"], "{f:?}");
    // In a nested PID namespace: another namespace's processes, not a leak.
    let mut nested = leak.clone();
    nested.visibility.nested_pid_namespace = true;
    let f = diagnose(&nested);
    assert_eq!(f[0].kind, FindingKind::UnaccountedMemory);
    assert!(f[0].next.starts_with("nsenter"));
}

#[test]
fn unaccounted_memory_names_holders_first_and_never_offers_sudo_to_root() {
    // Root, no readable holder, PID 1 unreadable even to root (an outer
    // sandbox's init): the driver's memory first, PID 1 the caveat, and
    // a reset plan with its blockers in order.
    let mut blind = base(vec![gpu(0, 40 << 30, 0)], vec![]);
    blind.visibility.unreadable = denied(&[1]);
    let mut daemon = plain(900, 1, "nvidia-persiste", &["nvidia-persistenced"]);
    daemon.exe = Some("/usr/bin/nvidia-persistenced".into());
    daemon.protected = true;
    daemon.devices = vec![node(None, "nvidiactl")];
    let mut with_daemon = blind.clone();
    with_daemon.processes.push(daemon);
    let f = diagnose(&blind);
    assert_eq!(f[0].kind, FindingKind::DriverHeldMemory, "{f:#?}");
    assert_eq!(f[0].next, "nvidia-smi --gpu-reset -i 0");
    assert!(f[0].details[0].contains("PID 1"), "{:?}", f[0].details);
    assert!(f.iter().all(|x| !x.next.contains("sudo")), "{f:#?}");
    // Not root: sudo is the way to see more.
    let mut user = blind.clone();
    user.visibility.root = false;
    assert!(diagnose(&user).iter().any(|x| x.next == "sudo gpufree why"));
    // A holder of the nodes comes first, and its kill is the next step.
    let mut held = blind.clone();
    let mut trainer = plain(77, 1, "python3", &["python3", "train.py"]);
    trainer.devices[1].via = vec![Via::Fd, Via::Mmap];
    held.processes.push(trainer);
    let f = diagnose(&held);
    let u = f
        .iter()
        .find(|x| x.kind == FindingKind::UnaccountedMemory)
        .unwrap();
    assert_eq!(u.next, "gpufree kill --pid 77");
    // A monitor that only opens the nodes (NVML does) owns no context:
    // never the next kill, and the reset plan names it.
    let mut watched = blind.clone();
    watched.processes.push(plain(78, 1, "nvtop", &["nvtop"]));
    let f = diagnose(&watched);
    let u = f
        .iter()
        .find(|x| x.kind == FindingKind::UnaccountedMemory)
        .unwrap();
    assert_eq!(u.next, "nvidia-smi --gpu-reset -i 0");
    assert!(
        u.details.iter().any(|d| d.contains("stop 78")),
        "{:?}",
        u.details
    );
    assert!(f.iter().all(|x| !x.next.contains("sudo")), "{f:#?}");
    // The reset plan: work first, the persistence daemon last, then
    // the reset.
    let mut leak = base(vec![gpu(0, 40 << 30, 0)], vec![]);
    let mut d = plain(900, 1, "nvidia-persiste", &["nvidia-persistenced"]);
    d.exe = Some("/usr/bin/nvidia-persistenced".into());
    d.protected = true;
    d.devices = vec![node(None, "nvidiactl")];
    leak.processes.push(d);
    let f = diagnose(&leak);
    let plan = &f
        .iter()
        .find(|x| x.kind == FindingKind::DriverLeak)
        .unwrap()
        .details;
    let n = plan.len();
    assert!(
        plan[n - 2].contains("systemctl stop nvidia-persistenced"),
        "{plan:?}"
    );
    assert!(
        plan[n - 1].contains("reset: `nvidia-smi --gpu-reset -i 0`"),
        "{plan:?}"
    );
    // A daemon holding the control node does not hide the driver's
    // memory from a root that cannot read PID 1 either.
    assert_eq!(
        diagnose(&with_daemon)[0].kind,
        FindingKind::DriverHeldMemory
    );
}

#[test]
fn a_launcher_groups_siblings_of_one_kind_only() {
    let rank = |pid: u32, comm: &str| Process {
        comm: comm.into(),
        cmdline: vec![comm.into()],
        ..worker(pid, 50, pid % 2)
    };
    let mut s = base(
        vec![gpu(0, 2 << 30, 2 << 30), gpu(1, 2 << 30, 2 << 30)],
        vec![rank(60, "pt_main_thread"), rank(61, "pt_main_thread")],
    );
    s.parents.insert(50, kin(1, "torchrun"));
    let f = diagnose(&s);
    let live: Vec<&Finding> = f
        .iter()
        .filter(|x| x.kind == FindingKind::LiveHolders)
        .collect();
    assert_eq!(live.len(), 1, "{live:#?}");
    assert!(live[0]
        .message
        .contains("launcher 50 (torchrun) [torchrun elastic agent]"));
    assert_eq!(live[0].next, "gpufree kill --tree 50");
    // Two different programs under one parent are two jobs.
    let mut two = s.clone();
    two.processes[1] = rank(61, "other_job");
    let f = diagnose(&two);
    assert_eq!(
        f.iter()
            .filter(|x| x.kind == FindingKind::LiveHolders)
            .count(),
        2
    );
    assert!(f.iter().all(|x| !x.next.contains("--tree")), "{f:#?}");
    // A shell is never a launcher.
    let mut shell = s.clone();
    shell.parents.insert(50, kin(1, "bash"));
    assert_eq!(
        diagnose(&shell)
            .iter()
            .filter(|x| x.kind == FindingKind::LiveHolders)
            .count(),
        2
    );
}

#[test]
fn framework_shapes_are_named() {
    for (comm, cmd, want) in [
        ("VLLM::Worker_TP", "VLLM::Worker_TP3", Role::VllmWorker),
        ("VLLM::EngineCor", "VLLM::EngineCore", Role::VllmEngineCore),
        (
            "python3",
            "/usr/bin/python3 -c from multiprocessing.resource_tracker import main;main(25)",
            Role::ResourceTracker,
        ),
        ("pt_data_worker", "python3 train.py", Role::DataLoaderWorker),
        (
            "sglang::schedu",
            "sglang::scheduler_TP0",
            Role::SglangProcess,
        ),
        ("ray::IDLE", "ray::IDLE", Role::RayWorker),
        (
            "raylet",
            "/usr/lib/python3/site-packages/ray/core/src/ray/raylet/raylet --node",
            Role::RayRaylet,
        ),
        (
            "python3",
            "/usr/bin/python3 -m torch.distributed.run --nproc-per-node 8 train.py",
            Role::TorchrunAgent,
        ),
        ("torchrun", "", Role::TorchrunAgent),
        (
            "python3",
            "python3 -m deepspeed.launcher.launch --world_info=x",
            Role::DeepspeedLauncher,
        ),
        ("mpirun", "mpirun -np 8 python3 train.py", Role::MpiLauncher),
        (
            "python3",
            "python3 -m ipykernel_launcher -f kernel.json",
            Role::JupyterKernel,
        ),
    ] {
        assert_eq!(shape(comm, cmd), Some(want), "{comm} {cmd}");
    }
    assert_eq!(shape("python3", "python3 train.py"), None);
    assert_eq!(shape("bash", "bash"), None);
}

#[test]
fn outside_namespace_pids_are_named() {
    let mut s = base(vec![gpu(0, 5000 << 20, 0)], vec![]);
    s.gpus[0].nvml_processes = vec![NvmlProcess {
        pid: 4_194_304,
        used_bytes: Some(5000 << 20),
        kind: NvmlProcessKind::Compute,
    }];
    s.visibility.nvml_pids_not_visible = vec![4_194_304];
    let f = diagnose(&s);
    assert_eq!(f[0].kind, FindingKind::OutsideNamespace);
    assert!(f
        .iter()
        .all(|x| x.kind != FindingKind::DriverLeak && x.kind != FindingKind::UnaccountedMemory));
}

#[test]
fn protected_daemons_are_named_and_left_out_of_kills() {
    let mut pd = plain(900, 1, "nvidia-persiste", &["/usr/bin/nvidia-persistenced"]);
    pd.exe = Some("/usr/bin/nvidia-persistenced".into());
    pd.protected = true;
    let mut w = worker(901, 1, 0);
    w.owner = Owner {
        kind: OwnerKind::None,
        ..Owner::default()
    };
    let s = base(vec![gpu(0, W, W)], vec![pd, w]);
    let f = diagnose(&s);
    let p = f
        .iter()
        .find(|x| x.kind == FindingKind::ProtectedHolders)
        .unwrap();
    assert_eq!(p.next, "systemctl stop nvidia-persistenced");
    let live = f
        .iter()
        .find(|x| x.kind == FindingKind::LiveHolders)
        .unwrap();
    assert!(!live.next.contains("900"), "{}", live.next);
}

#[test]
fn units_are_freed_by_unit_and_orphans_named() {
    let mut a = worker(1, 1, 0);
    a.owner = Owner {
        kind: OwnerKind::SystemdUnit,
        id: "vllm.service".into(),
        name: "vllm.service".into(),
        claims: None,
    };
    a.orphaned = true;
    let s = base(vec![gpu(0, W, W)], vec![a]);
    let f = diagnose(&s);
    assert_eq!(
        f[0].message,
        "1 live process of vllm.service holds 94.3 GiB on GPU 0"
    );
    assert_eq!(f[0].next, "gpufree kill --unit vllm.service");
    assert!(f
        .iter()
        .any(|x| x.kind == FindingKind::Orphans
            && x.message.contains("restart will find the GPU full")));
}

#[test]
fn a_daemon_that_detached_is_no_orphan() {
    // MPS's control daemon forks itself away from its parent (seen on an
    // H200): reparented to init, protected, never "a restart will find
    // the GPU full".
    let mut d = worker(7, 1, 0);
    d.comm = "nvidia-cuda-mps".into();
    d.protected = true;
    d.orphaned = true;
    d.gpu_memory.clear();
    let mut o = worker(8, 1, 0);
    o.orphaned = true;
    o.gpu_memory.clear();
    let s = base(vec![gpu(0, W, W)], vec![d, o]);
    let f = diagnose(&s);
    let orphans: Vec<_> = f
        .iter()
        .filter(|x| x.kind == FindingKind::Orphans)
        .collect();
    assert_eq!(orphans.len(), 1, "{f:?}");
    assert_eq!(orphans[0].pids, [8]);
}

#[test]
fn supervisors_are_stopped_first() {
    use crate::model::{Kin, PodName, UnitRestart};
    let owned = |kind, id: &str| {
        let mut w = worker(10, 1, 0);
        w.owner = Owner {
            kind,
            id: id.into(),
            name: id.into(),
            claims: None,
        };
        w
    };
    // A unit that restarts: systemctl stop, then the wait that proves it.
    let mut s = base(
        vec![gpu(0, W, W)],
        vec![owned(OwnerKind::SystemdUnit, "vllm.service")],
    );
    let restart = |r: &str| UnitRestart {
        restart: r.into(),
        restart_sec: None,
        source: crate::model::RestartSource::Files(vec!["/etc/systemd/system/vllm.service".into()]),
        unreadable: Vec::new(),
    };
    s.units.insert("vllm.service".into(), restart("always"));
    let f = &diagnose(&s)[0];
    assert_eq!(
        f.next,
        "systemctl stop vllm.service && gpufree wait --gpu 0"
    );
    assert!(
        f.message
            .contains("systemd starts vllm.service again when it dies (Restart=always)"),
        "{}",
        f.message
    );
    s.units.insert("vllm.service".into(), restart("no"));
    assert_eq!(diagnose(&s)[0].next, "gpufree kill --unit vllm.service");
    // A pod named by a Deployment's ReplicaSet: scale the Deployment.
    let uid = "1234abcd-5678-90ab-cdef-1234567890ab";
    let mut s = base(vec![gpu(0, W, W)], vec![owned(OwnerKind::K8sPod, uid)]);
    s.pods.insert(
        uid.into(),
        PodName {
            namespace: "ml".into(),
            name: "vllm-7d9c5b6f4-x2x9k".into(),
        },
    );
    assert_eq!(
        diagnose(&s)[0].next,
        "kubectl -n ml scale deployment/vllm --replicas 0 && gpufree wait --gpu 0"
    );
    // Another name says nothing sure of a controller (worker-3 may be
    // bare or a StatefulSet's): the lookup of its owner, no stop.
    s.pods.get_mut(uid).unwrap().name = "worker-3".into();
    let f = &diagnose(&s)[0];
    assert!(
        f.next
            .starts_with("kubectl -n ml get pod worker-3 -o 'jsonpath="),
        "{}",
        f.next
    );
    assert!(
        f.message.contains("`kubectl -n ml delete pod worker-3`"),
        "{}",
        f.message
    );
    // Not named by the kubelet: the lookup by UID.
    s.pods.clear();
    assert!(diagnose(&s)[0].next.ends_with(&format!("| grep {uid}")));
    // torchrun with restarts left: the agent goes first.
    let ranks: Vec<Process> = (0..2)
        .map(|i| {
            let mut w = worker(20 + i, 50, i);
            w.environment
                .insert("TORCHELASTIC_RESTART_COUNT".into(), "1".into());
            w.environment
                .insert("TORCHELASTIC_MAX_RESTARTS".into(), "3".into());
            w
        })
        .collect();
    let mut s = base(vec![gpu(0, W, W), gpu(1, W, W)], ranks);
    s.parents.insert(
        50,
        Kin {
            cmdline: vec!["/usr/bin/python3".into(), "/usr/local/bin/torchrun".into()],
            ..kin(1, "pt_elastic")
        },
    );
    let f = &diagnose(&s)[0];
    assert_eq!(f.next, "kill -s TERM 50 && gpufree wait --gpu 0 --gpu 1");
    assert!(
        f.message.contains("(2 of 3 restarts left)"),
        "{}",
        f.message
    );
    // None left: the agent gives up when a rank dies; the tree is freed.
    for p in &mut s.processes {
        p.environment
            .insert("TORCHELASTIC_RESTART_COUNT".into(), "3".into());
    }
    assert_eq!(diagnose(&s)[0].next, "gpufree kill --tree 50");
}

#[test]
fn idle_gpus_with_no_holders_are_free() {
    let s = base(vec![gpu(0, 0, 0), gpu(1, 300 << 20, 0)], vec![]);
    let f = diagnose(&s);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].message, "GPUs 0, 1 free: no process holds memory or a device node, used memory at the idle baseline");
    assert!(is_free(&f));
}

#[test]
fn findings_are_ordered_by_severity_then_memory() {
    let mut s = incident();
    s.gpus.push(gpu(8, 0, 0));
    let mut small = worker(5, 1, 8);
    small.gpu_memory = vec![GpuMemory {
        gpu: 8,
        used_bytes: Some(1 << 30),
    }];
    small.renamed = false;
    s.processes.push(small);
    let f = diagnose(&s);
    assert_eq!(
        f[0].bytes,
        8 * W,
        "the group explaining the most memory first"
    );
    assert_eq!(f[1].bytes, 1 << 30);
    for w in f.windows(2) {
        assert!(w[0].severity >= w[1].severity);
    }
}

/// Root's Docker container and a user's process whose delegated cgroup
/// (`user@65534.service/app.slice/docker-<id>.scope`) names the same id,
/// as the owner reading gives them.
mod claims {
    use super::*;
    use crate::model::{CheckMemory, Claim, Condition, Level, PodName};

    const CID: &str = "3f2a1b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7a8";
    const POD: &str = "1234abcd-5678-90ab-cdef-1234567890ab";

    fn roots_container(pid: u32) -> Process {
        let mut w = worker(pid, 1, 0);
        w.owner = Owner {
            kind: OwnerKind::Container,
            id: CID.into(),
            name: "docker 3f2a1b4c5d6e".into(),
            claims: None,
        };
        w
    }

    /// Nobody's process whose cgroup claims `kind` `id`.
    fn claiming(pid: u32, kind: OwnerKind, id: &str, name: &str) -> Process {
        let mut w = worker(pid, 2, 0);
        w.uid = 65534;
        w.user = "nobody".into();
        w.owner = Owner {
            kind: OwnerKind::Session,
            id: "user@65534.service".into(),
            name: "apps of uid 65534".into(),
            claims: Some(Claim {
                kind,
                id: id.into(),
                name: name.into(),
            }),
        };
        w
    }

    #[test]
    fn a_claimed_container_is_another_group_never_freed_by_its_unit() {
        let s = base(
            vec![gpu(0, 2 * W, 2 * W)],
            vec![
                roots_container(10),
                claiming(20, OwnerKind::Container, CID, "docker 3f2a1b4c5d6e"),
            ],
        );
        let live: Vec<Finding> = diagnose(&s)
            .into_iter()
            .filter(|f| f.kind == FindingKind::LiveHolders)
            .collect();
        assert_eq!(live.len(), 2, "{live:?}");
        let roots = live.iter().find(|f| f.pids == [10]).unwrap();
        assert_eq!(roots.next, format!("gpufree kill --unit {CID}"));
        let users = live.iter().find(|f| f.pids == [20]).unwrap();
        assert!(!users.next.contains(CID), "{}", users.next);
        assert!(!users.next.contains("--unit"), "{}", users.next);
        let groups = Groups::new(&s);
        assert_ne!(groups.key(&s.processes[0]), groups.key(&s.processes[1]));
    }

    #[test]
    fn a_claimed_pod_is_never_scaled_nor_looked_up() {
        let mut real = worker(10, 1, 0);
        real.owner = Owner {
            kind: OwnerKind::K8sPod,
            id: POD.into(),
            name: format!("pod {POD}"),
            claims: None,
        };
        let user = claiming(20, OwnerKind::K8sPod, POD, &format!("pod {POD}"));
        let mut s = base(vec![gpu(0, W, W)], vec![user.clone()]);
        s.pods.insert(
            POD.into(),
            PodName {
                namespace: "prod".into(),
                name: "web-7d9c5b6f4-x2x9k".into(),
            },
        );
        for f in diagnose(&s) {
            assert!(!f.next.contains("kubectl"), "{f:?}");
            assert!(!f.message.contains("prod"), "{f:?}");
        }
        // Beside the real pod, only the real pod's holder is scaled.
        s.processes = vec![real, user];
        s.gpus = vec![gpu(0, 2 * W, 2 * W)];
        let live: Vec<Finding> = diagnose(&s)
            .into_iter()
            .filter(|f| f.kind == FindingKind::LiveHolders)
            .collect();
        assert_eq!(live.len(), 2, "{live:?}");
        let real = live.iter().find(|f| f.pids == [10]).unwrap();
        assert!(real
            .next
            .starts_with("kubectl -n prod scale deployment/web"));
        let users = live.iter().find(|f| f.pids == [20]).unwrap();
        assert!(!users.next.contains("kubectl"), "{}", users.next);
    }

    /// `check` says OK while a user holds memory under a claimed
    /// container, pod or job: no more. A user's unit whose cgroup claims
    /// one is no owner either; root's container and a system unit are.
    #[test]
    fn check_counts_a_claimed_holder_as_a_leftover() {
        let check = |s: &Snapshot| {
            super::super::check::check(
                s,
                &Default::default(),
                &CheckMemory::default(),
                &Default::default(),
                0,
            )
            .0
        };
        let mut user_unit = claiming(21, OwnerKind::SlurmJob, "3385", "slurm job 3385");
        user_unit.owner.kind = OwnerKind::SystemdUnit;
        user_unit.owner.id = "x.service".into();
        user_unit.owner.name = "x.service (user 65534)".into();
        let s = base(
            vec![gpu(0, 3 * W, 3 * W)],
            vec![
                roots_container(10),
                claiming(20, OwnerKind::Container, CID, "docker 3f2a1b4c5d6e"),
                user_unit,
            ],
        );
        let out = check(&s);
        assert_eq!(out.level, Level::Critical);
        let left: Vec<_> = out
            .problems
            .iter()
            .filter(|p| p.condition == Condition::Leftover)
            .collect();
        assert_eq!(left.len(), 1, "{:?}", out.problems);
        assert_eq!((left[0].level, left[0].gpu), (Level::Critical, Some(0)));
        assert_eq!(left[0].bytes, 2 * W);
        let pids: Vec<u32> = left[0].processes.iter().map(|(pid, _)| *pid).collect();
        assert_eq!(pids, [20, 21]);
        // Root's container alone is no leftover.
        let s = base(vec![gpu(0, W, W)], vec![roots_container(10)]);
        let out = check(&s);
        assert!(
            out.problems
                .iter()
                .all(|p| p.condition != Condition::Leftover),
            "{:?}",
            out.problems
        );
    }
}

// The driver's own evidence (issue 29).

use crate::model::{
    DriverEvidence, FaultCode, FaultReturn, KernelLog, Reading, RecoveryAction, XidReport,
};

fn xid(n: u32, pid: Option<u32>) -> XidReport {
    XidReport {
        xid: n,
        pci: "0000:18:00".into(),
        gpu: Some(0),
        pid,
        comm: pid.map(|_| "python3".into()),
        since_boot_us: 7_200_000_000,
        at_unix_ms: Some(1_764_936_181_000),
        ..XidReport::default()
    }
}

/// The seed incident with the kernel log read to its end and `xids` on
/// GPU 0, and NVML's recovery action on every GPU.
fn heard_incident(xids: Vec<XidReport>, action: Reading<RecoveryAction>) -> Snapshot {
    let mut s = incident();
    s.ticks_per_second = 100;
    s.kernel_log = Some(KernelLog {
        path: "/dev/kmsg".into(),
        xids: Reading::Value(xids.clone()),
        ..KernelLog::default()
    });
    for g in &mut s.gpus {
        g.driver_evidence = Some(DriverEvidence {
            recovery_action: action.clone(),
            xids: if g.index == 0 { xids.clone() } else { vec![] },
            ..DriverEvidence::default()
        });
    }
    s
}

#[test]
fn a_gpu_reset_the_driver_asks_for_comes_first_with_the_workers_as_blockers() {
    let mut s = heard_incident(vec![xid(48, None)], Reading::Value(RecoveryAction::None));
    s.gpus[0].driver_evidence.as_mut().unwrap().recovery_action =
        Reading::Value(RecoveryAction::GpuReset);
    let f = diagnose(&s);
    assert_eq!(f[0].kind, FindingKind::DriverFault, "{f:#?}");
    assert_eq!(
        f[0].message,
        "GPU 0 needs a reset: NVML recovery action GPU_RESET; Xid 48 (double-bit (uncorrectable) ECC error) at 2025-12-05 12:03:01 UTC; its memory comes back only after it"
    );
    assert_eq!(f[0].next, "nvidia-smi --gpu-reset -i 0");
    // The workers still run: listed as what must stop first.
    assert!(f[0].pids.contains(&212_702), "{:?}", f[0].pids);
    assert!(
        f[0].details.iter().any(|d| d.contains("stop 212702")),
        "{:?}",
        f[0].details
    );
    // The other GPUs: nothing reported, said in one line.
    let quiet = f
        .iter()
        .find(|x| x.kind == FindingKind::NoDriverFault)
        .unwrap();
    assert_eq!(
        quiet.message,
        "GPUs 1-7: no driver fault reported since boot: a reset is not the fix"
    );
    assert_eq!(f[1].kind, FindingKind::LiveHolders);
}

#[test]
fn a_gpu_fallen_off_the_bus_needs_a_reboot_and_no_kill_of_what_cannot_release() {
    let mut s = heard_incident(vec![xid(79, None)], Reading::NotSupported);
    // Only GPU 0's holder, so its group is GPU 0's alone.
    s.processes.retain(|p| p.pid == 212_702);
    s.gpus.truncate(1);
    s.gpus[0].driver_evidence.as_mut().unwrap().fault_returns = vec![FaultReturn {
        call: "memory".into(),
        code: FaultCode::GpuIsLost,
    }];
    let f = diagnose(&s);
    assert_eq!(f[0].kind, FindingKind::DriverFault);
    assert!(
        f[0].message.starts_with("GPU 0 needs a reboot of the node: NVML's memory read returned GPU_IS_LOST; Xid 79 (GPU has fallen off the bus)"),
        "{}",
        f[0].message
    );
    assert_eq!(f[0].next, "systemctl reboot");
    assert!(
        f[0].details
            .iter()
            .any(|d| d.contains("212702") && d.contains("cannot release")),
        "{:?}",
        f[0].details
    );
    assert!(
        f.iter().all(|x| !x.next.contains("kill")),
        "no kill on a lost GPU: {f:#?}"
    );
}

#[test]
fn an_application_xid_names_its_process_and_whether_it_still_holds() {
    let mut s = heard_incident(vec![xid(31, Some(212_702))], Reading::NotSupported);
    s.processes
        .iter_mut()
        .for_each(|p| p.start_time_ticks = 100);
    let f = diagnose(&s);
    let a = f
        .iter()
        .find(|x| x.kind == FindingKind::ApplicationFault)
        .unwrap();
    assert!(
        a.message.starts_with("GPU 0: Xid 31 (GPU memory page fault (illegal address)) at 2025-12-05 12:03:01 UTC by PID 212702 (python3): the application's fault, not the driver's"),
        "{}",
        a.message
    );
    assert!(a.message.contains("still holds the GPU"), "{}", a.message);
    assert_eq!(a.next, "gpufree kill --pid 212702");
    assert!(f.iter().all(|x| x.kind != FindingKind::DriverFault));
    assert!(f.iter().all(|x| !x.next.contains("reset")), "{f:#?}");
    // A process that started after the report only reuses the PID.
    s.processes
        .iter_mut()
        .for_each(|p| p.start_time_ticks = 800_000);
    let f = diagnose(&s);
    let a = f
        .iter()
        .find(|x| x.kind == FindingKind::ApplicationFault)
        .unwrap();
    assert!(a.message.contains("no longer runs"), "{}", a.message);
    assert!(a.next.is_empty());
    // Not seen because it could not be read: never "no longer runs".
    s.processes.retain(|p| p.pid != 212_702);
    s.visibility.unreadable_pids = vec![212_702];
    let f = diagnose(&s);
    let a = f
        .iter()
        .find(|x| x.kind == FindingKind::ApplicationFault)
        .unwrap();
    assert!(
        a.message
            .ends_with("PID 212702 could not be read: whether it still runs is unknown"),
        "{}",
        a.message
    );
}

#[test]
fn the_seed_incident_with_no_xid_says_no_driver_fault_and_no_reset_anywhere() {
    let s = heard_incident(vec![], Reading::NotSupported);
    let f = diagnose(&s);
    let quiet: Vec<&Finding> = f
        .iter()
        .filter(|x| x.kind == FindingKind::NoDriverFault)
        .collect();
    assert_eq!(quiet.len(), 1, "{f:#?}");
    assert_eq!(
        quiet[0].message,
        "GPUs 0-7: no driver fault reported since boot: a reset is not the fix"
    );
    assert!(quiet[0]
        .details
        .contains(&"NVML recovery action: not supported by this driver or GPU".to_string()));
    assert!(f
        .iter()
        .all(|x| !x.next.contains("reset") && x.details.iter().all(|d| !d.contains("reset -i"))));
    assert_eq!(f[0].kind, FindingKind::LiveHolders);
}

#[test]
fn could_not_hear_the_driver_is_never_no_fault() {
    let mut s = heard_incident(vec![], Reading::NotSupported);
    s.kernel_log.as_mut().unwrap().xids = Reading::Failed("permission denied".into());
    let f = diagnose(&s);
    assert!(f.iter().all(|x| x.kind != FindingKind::NoDriverFault));
    let u = f
        .iter()
        .find(|x| x.kind == FindingKind::DriverUnheard)
        .unwrap();
    assert!(
        u.message.contains("whether the driver reported a fault is unknown (kernel log could not be read (permission denied); NVML recovery action not supported by this driver or GPU)"),
        "{}",
        u.message
    );
    // Nothing asked (the log not read, NVML silent): nothing said.
    s.kernel_log = None;
    let f = diagnose(&s);
    assert!(f
        .iter()
        .all(|x| x.kind != FindingKind::DriverUnheard && x.kind != FindingKind::NoDriverFault));
}

#[test]
fn leaked_memory_with_no_evidence_is_inferred_and_with_evidence_reported() {
    let mut leak = base(vec![gpu(0, 40 << 30, 0)], vec![]);
    let f = diagnose(&leak);
    assert_eq!(f[0].kind, FindingKind::DriverLeak);
    assert!(
        f[0].message
            .ends_with("(inferred, not reported by the driver)"),
        "{}",
        f[0].message
    );
    assert!(
        f[0].details[0].contains("nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT -i 0"),
        "{:?}",
        f[0].details
    );
    leak.gpus[0].driver_evidence = Some(DriverEvidence {
        remapped_rows: Reading::Value(crate::model::Remap {
            pending: true,
            ..crate::model::Remap::default()
        }),
        ..DriverEvidence::default()
    });
    let f = diagnose(&leak);
    assert_eq!(f[0].kind, FindingKind::DriverFault);
    let l = f
        .iter()
        .find(|x| x.kind == FindingKind::DriverLeak)
        .unwrap();
    assert!(l.message.contains("(reported: "), "{}", l.message);
    assert_eq!(
        l.details[0],
        "reported by the driver: a row remap pending (nvmlDeviceGetRemappedRows)"
    );
}

/// Utilisation samples on GPU 0 as the driver answered them: `(pid, sm)`.
fn sampled(s: &mut Snapshot, samples: &[(u32, u32)]) {
    use crate::model::{ProcessUtil, UtilCall, UtilWindow};
    let e = s.gpus[0]
        .driver_evidence
        .get_or_insert_with(Default::default);
    e.process_utilization = Reading::Value(
        samples
            .iter()
            .map(|&(pid, sm)| ProcessUtil {
                pid,
                sm,
                ..ProcessUtil::default()
            })
            .collect(),
    );
    e.utilization_window = Some(UtilWindow {
        call: UtilCall::ProcessUtilization,
        since_unix_us: 1,
        window_ms: 5000,
    });
}

/// Two busy workers and an idle Jupyter kernel on GPU 0.
pub(super) fn jupyter_among_workers() -> Snapshot {
    let kernel = Process {
        gpu_memory: vec![GpuMemory {
            gpu: 0,
            used_bytes: Some(8 << 30),
        }],
        ..plain(
            300,
            1,
            "python3",
            &[
                "/usr/bin/python3",
                "-m",
                "ipykernel_launcher",
                "-f",
                "/run/k.json",
            ],
        )
    };
    let mut s = base(
        vec![gpu(0, 2 * W + (8 << 30), 2 * W + (8 << 30))],
        vec![worker(100, 50, 0), worker(101, 50, 0), kernel],
    );
    sampled(&mut s, &[(100, 80), (101, 0), (300, 0)]);
    // 101's sample is zero but its memory bandwidth is not.
    if let Some(Reading::Value(v)) = s.gpus[0]
        .driver_evidence
        .as_mut()
        .map(|e| &mut e.process_utilization)
    {
        v[1].mem = 12;
    }
    s
}

#[test]
fn an_idle_jupyter_kernel_among_busy_workers_is_named_alone_with_a_kill_of_it() {
    let s = jupyter_among_workers();
    let f = diagnose(&s);
    let idle: Vec<&Finding> = f
        .iter()
        .filter(|x| x.kind == FindingKind::IdleHolders)
        .collect();
    assert_eq!(idle.len(), 1, "{f:#?}");
    let i = idle[0];
    assert_eq!(i.severity, Severity::Warning);
    assert_eq!(i.pids, vec![300]);
    assert_eq!(i.next, "gpufree kill --pid 300");
    assert_eq!(
        i.message,
        "1 idle holder holds 8.0 GiB on GPU 0 with no GPU activity (SM, memory, encoder, decoder) in the last 5s; the 2 busy holders there are not in this kill"
    );
    assert!(
        i.details[0].starts_with("300 python3 (")
            && i.details[0].ends_with(
                " [Jupyter kernel]: 8,192 MiB on GPU 0, idle (its notebook keeps the memory until the kernel is shut down)"
            ),
        "{:?}",
        i.details
    );
    // The busy workers' findings are still there.
    for pid in [100, 101] {
        assert!(
            f.iter()
                .any(|x| x.kind == FindingKind::LiveHolders && x.pids.contains(&pid)),
            "{f:#?}"
        );
    }
    assert!(f.iter().all(|x| x.kind != FindingKind::IdleUnknown));
    // The verdict is the same: memory is held.
    let overall = verdict::overall(&s, &verdict::Policy::default());
    assert_eq!(overall.state, VerdictState::Busy);
}

#[test]
fn a_ray_idle_worker_and_a_notebook_server_have_their_shapes() {
    let mut s = jupyter_among_workers();
    s.processes[2].cmdline = vec!["ray::IDLE".into()];
    s.processes[2].comm = "ray::IDLE".into();
    let f = diagnose(&s);
    let i = f
        .iter()
        .find(|x| x.kind == FindingKind::IdleHolders)
        .unwrap();
    assert!(i.details[0].contains("(a Ray worker the raylet keeps idle (ray::IDLE)"));
    s.processes[2].comm = "jupyter-lab".into();
    s.processes[2].cmdline = vec!["/usr/bin/python3".into(), "/usr/bin/jupyter-lab".into()];
    let f = diagnose(&s);
    let i = f
        .iter()
        .find(|x| x.kind == FindingKind::IdleHolders)
        .unwrap();
    assert!(i.details[0].ends_with("idle (a notebook server)"), "{i:?}");
}

#[test]
fn utilisation_not_supported_or_failed_is_never_idle_and_is_said_once() {
    let mut s = jupyter_among_workers();
    let busy = |s: &Snapshot| verdict::overall(s, &verdict::Policy::default()).state;
    let before = busy(&s);
    s.gpus[0]
        .driver_evidence
        .as_mut()
        .unwrap()
        .process_utilization = Reading::NotSupported;
    s.gpus.push(gpu(1, W, W));
    s.gpus[1].driver_evidence = Some(DriverEvidence::default());
    s.processes.push(worker(102, 50, 1));
    let f = diagnose(&s);
    assert!(
        f.iter().all(|x| x.kind != FindingKind::IdleHolders),
        "{f:#?}"
    );
    let unknown: Vec<&Finding> = f
        .iter()
        .filter(|x| x.kind == FindingKind::IdleUnknown)
        .collect();
    assert_eq!(unknown.len(), 1, "once for both GPUs: {f:#?}");
    assert_eq!(unknown[0].severity, Severity::Info);
    assert_eq!(
        unknown[0].message,
        "GPUs 0, 1: whether the holders are idle is unknown: nvmlDeviceGetProcessUtilization is not supported by this driver or GPU, so none is called idle"
    );
    assert_eq!(busy(&s), before);
    // A failure is unknown too, with why.
    s.gpus[1]
        .driver_evidence
        .as_mut()
        .unwrap()
        .process_utilization = Reading::Failed(crate::model::Failure::NoPermission);
    let f = diagnose(&s);
    assert!(f.iter().all(|x| x.kind != FindingKind::IdleHolders));
    assert!(f.iter().any(|x| x.kind == FindingKind::IdleUnknown
        && x.message
            .contains("failed (NO_PERMISSION (run as root to see it))")));
    // A GPU NVML did not read says nothing.
    let mut quiet = jupyter_among_workers();
    quiet.gpus[0].driver_evidence = None;
    let f = diagnose(&quiet);
    assert!(f
        .iter()
        .all(|x| x.kind != FindingKind::IdleHolders && x.kind != FindingKind::IdleUnknown));
}

#[test]
fn a_holder_busy_on_one_gpu_is_not_idle_on_another() {
    let mut s = jupyter_among_workers();
    s.gpus.push(gpu(1, W, W));
    s.processes[2].gpu_memory.push(GpuMemory {
        gpu: 1,
        used_bytes: Some(1 << 30),
    });
    s.gpus[1].driver_evidence = Some(DriverEvidence {
        process_utilization: Reading::Value(vec![crate::model::ProcessUtil {
            pid: 300,
            enc: 4,
            ..Default::default()
        }]),
        ..DriverEvidence::default()
    });
    let f = diagnose(&s);
    assert!(
        f.iter().all(|x| x.kind != FindingKind::IdleHolders),
        "{f:#?}"
    );
    // Unknown on the other GPU: unknown, not idle.
    s.gpus[1].driver_evidence = Some(DriverEvidence::default());
    let f = diagnose(&s);
    assert!(
        f.iter().all(|x| x.kind != FindingKind::IdleHolders),
        "{f:#?}"
    );
}

#[test]
fn a_protected_holder_at_zero_percent_is_never_called_idle() {
    let mut s = jupyter_among_workers();
    s.processes[2].protected = true;
    s.processes[2].protection = Some(crate::model::Protection::User);
    let f = diagnose(&s);
    assert!(
        f.iter().all(|x| x.kind != FindingKind::IdleHolders),
        "{f:#?}"
    );
}

#[test]
fn renamed_holders_are_told_apart_by_what_they_changed_and_said_when_it_cannot_be_told() {
    let mut comm_only = plain(5, 1, "worker", &["python3", "train.py"]);
    comm_only.renamed = true;
    let mut rewritten = plain(6, 1, "python3", &["trainer: rank 0"]);
    rewritten.renamed = true;
    // Another user's process in serve's view: no exe, no command line.
    let mut hidden = plain(7, 1, "worker", &[]);
    hidden.exe = None;
    hidden.renamed = true;
    // A bundle's: its command line left out, its executable kept; what
    // `pkill -f` would do to it is not said (newuser38 4: "hits", from
    // the empty command line, where the live answer was "misses").
    let mut redacted = plain(8, 1, "worker", &[]);
    redacted.renamed = true;
    let f = diagnose(&base(
        vec![gpu(0, 0, 0)],
        vec![comm_only, rewritten, hidden, redacted],
    ));
    let renamed: Vec<(&str, Vec<u32>)> = f
        .iter()
        .filter(|x| x.kind == FindingKind::RenamedHolders)
        .map(|x| (x.message.as_str(), x.pids.clone()))
        .collect();
    let untold = f
        .iter()
        .find(|x| x.kind == FindingKind::RenamedHolders && x.pids.contains(&8))
        .map(|x| x.details.clone())
        .unwrap();
    assert!(
        untold.iter().any(|d| d.contains("`pkill python3` misses"))
            && untold.iter().all(|d| !d.contains("pkill -f")),
        "{untold:?}"
    );
    assert_eq!(renamed.len(), 3, "{renamed:?}");
    assert!(renamed[0].0.starts_with("1 holder rewrote its command line (setproctitle), comm unchanged: `pkill -f python3` and `ps aux | grep python3` miss it; plain `pkill python3` (comm) misses none"), "{renamed:?}");
    assert_eq!(renamed[0].1, vec![6]);
    assert!(renamed[1].0.starts_with("1 holder changed only its comm (prctl PR_SET_NAME), its command line untouched: plain `pkill python3` (comm) and `ps -e` miss it; `pkill -f python3` and `ps aux | grep python3` miss none"), "{renamed:?}");
    assert_eq!(renamed[1].1, vec![5]);
    assert!(
        renamed[2].0.contains("which is not shown here"),
        "{renamed:?}"
    );
    assert_eq!(renamed[2].1, vec![7, 8]);
}

/// NVML unread: a holder of an NVIDIA node with no memory listed holds an
/// unknown amount, so no finding says it holds none.
#[test]
fn with_nvml_unread_no_holder_of_an_nvidia_node_is_said_to_hold_no_memory() {
    let mut p = worker(4_242, 1, 0);
    p.gpu_memory.clear();
    p.renamed = false;
    let mut s = base(vec![gpu(0, W, W)], vec![p]);
    let said = |s: &Snapshot| {
        diagnose(s)
            .iter()
            .any(|f| f.kind == FindingKind::DeviceHolders)
    };
    assert!(said(&s), "NVML read: it holds no memory");
    s.nvml.available = false;
    assert!(!said(&s), "NVML unread: unknown, never none");
}
