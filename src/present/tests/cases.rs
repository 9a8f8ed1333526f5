//! Snapshot values of the paths the seed incident does not take: memory
//! nobody accounts for, what could not be seen, holders in odd states and
//! launch groups of every kind.

use super::fixtures::{base, gpu, node};
use crate::model::{
    Call, DeviceUse, Failure, Gpu, GpuMemory, Kin, Memory, NvmlDown, NvmlProcessKind, NvmlStatus,
    Owner, OwnerKind, PodName, Process, Snapshot, Unavailable, Unreadable, UnreadableReason, Via,
};

/// A process of `comm` run from `exe` by root, holding `devices`.
fn daemon(pid: u32, comm: &str, exe: &str, devices: Vec<DeviceUse>) -> Process {
    Process {
        pid,
        ppid: 1,
        comm: comm.into(),
        cmdline: vec![exe.into()],
        exe: Some(exe.into()),
        user: "root".into(),
        state: "S".into(),
        start_time_ticks: 5_000 + u64::from(pid),
        threads: 1,
        nspid: vec![pid],
        devices,
        ..Process::default()
    }
}

/// A worker of no unit holding `bytes` on GPU 0 through a mapping.
fn trainer(pid: u32, ppid: u32, bytes: u64) -> Process {
    Process {
        ppid,
        cmdline: vec!["python3".into(), "train.py".into()],
        uid: 1000,
        user: "alice".into(),
        gpu_memory: vec![GpuMemory {
            gpu: 0,
            used_bytes: Some(bytes),
        }],
        ..daemon(
            pid,
            "python3",
            "/usr/bin/python3.12",
            vec![
                node("nvidia0", Some(0), &[Via::Fd, Via::Mmap]),
                node("nvidia-uvm", None, &[Via::Mmap]),
            ],
        )
    }
}

/// One H200, `used` bytes used, NVML listing `listed`.
fn h200(index: u32, used: u64, listed: &[(u32, u64)]) -> Gpu {
    gpu(index, "NVIDIA H200", 143_771 << 20, used, listed)
}

fn unreadable(pid: u32, comm: Option<&str>, reason: UnreadableReason, why: &str) -> Unreadable {
    Unreadable {
        pid,
        comm: comm.map(String::from),
        reason,
        why: why.into(),
    }
}

/// Marks `pids` unreadable for lack of permission.
fn denied(s: &mut Snapshot, pids: &[u32]) {
    for &pid in pids {
        let u = unreadable(pid, None, UnreadableReason::Permission, "permission denied");
        s.visibility.unreadable.push(u);
    }
    s.visibility.unreadable_pids = pids.to_vec();
    s.visibility.processes_unreadable = pids.len() as u32;
}

const LOST: u64 = 20 << 30;

/// Memory nobody visible accounts for, once per way gpufree explains it:
/// a monitor that only opens the nodes, a process that maps them, a
/// nested PID namespace, a partial view as a user, a view as root that
/// misses an outer sandbox's init, and a complete view (a driver leak).
pub(super) fn unaccounted_cases() -> Vec<(&'static str, Snapshot)> {
    let lost = || vec![h200(0, LOST, &[])];
    let persistenced = || persistenced_on(1200);
    let monitor = daemon(
        1300,
        "gpufree",
        "/usr/local/bin/gpufree",
        vec![
            node("nvidiactl", None, &[Via::Fd]),
            node("nvidia0", Some(0), &[Via::Fd]),
        ],
    );
    let mapper = Process {
        gpu_memory: Vec::new(),
        ..trainer(1400, 1399, 0)
    };
    let mut container = base(lost(), Vec::new(), 12);
    container.visibility.nested_pid_namespace = true;
    let mut user = base(lost(), Vec::new(), 180);
    user.visibility.root = false;
    user.visibility.hidepid = true;
    denied(&mut user, &[1, 2201, 2202]);
    let mut sandbox = base(lost(), vec![persistenced()], 200);
    sandbox.visibility.unreadable = vec![unreadable(
        1,
        Some("init"),
        UnreadableReason::Permission,
        "permission denied (an outer sandbox's init, even as root)",
    )];
    sandbox.visibility.unreadable_pids = vec![1];
    sandbox.visibility.processes_unreadable = 1;
    vec![
        ("monitor", base(lost(), vec![monitor], 210)),
        ("mapper", base(lost(), vec![mapper], 210)),
        ("container", container),
        ("user", user),
        ("sandbox", sandbox),
        ("leak", base(lost(), vec![persistenced()], 210)),
    ]
}

/// What gpufree could not read or reach: NVML down; a lost GPU, a process
/// list NVML cannot give, a read that timed out, PIDs of another namespace
/// and a reused PID NVML still lists.
pub(super) fn blind_cases() -> Vec<(&'static str, Snapshot)> {
    // Without NVML, no memory is attributed to anyone.
    let holder = Process {
        gpu_memory: Vec::new(),
        ..trainer(3100, 3000, 0)
    };
    let mut down = base(vec![h200(0, 0, &[]), h200(1, 0, &[])], vec![holder], 150);
    down.nvml = NvmlStatus {
        available: false,
        library: "libnvidia-ml.so.1".into(),
        driver_version: None,
        error: Some(NvmlDown::NoLibrary {
            library: "libnvidia-ml.so.1".into(),
            error: "libnvidia-ml.so.1: cannot open shared object file".into(),
        }),
    };
    for g in &mut down.gpus {
        g.name = String::new();
        g.memory = Memory::default();
    }
    let stale = 4242;
    let outside = 777_777;
    let mut gpus = vec![
        h200(0, 30 << 30, &[(outside, 8 << 30), (stale, 2 << 30)]),
        h200(1, 0, &[]),
    ];
    // The listed PIDs are not visible here: they account for nothing.
    gpus[0].memory.accounted_bytes = 0;
    gpus[0].memory.unaccounted_bytes = 30 << 30;
    gpus[1].memory = Memory::default();
    let mut partial = base(gpus, vec![persistenced_on(1200)], 300);
    partial.visibility.nvml_pids_not_visible = vec![outside];
    partial.visibility.nvml_pids_stale = vec![stale];
    partial.visibility.unreadable = vec![unreadable(
        3300,
        Some("python3"),
        UnreadableReason::Timeout,
        "reading /proc/3300/maps timed out after 2s",
    )];
    partial.visibility.unreadable_pids = vec![3300];
    partial.visibility.processes_unreadable = 1;
    partial.unavailable = vec![
        Unavailable {
            what: Call::Memory,
            gpu: Some(1),
            why: Failure::GpuIsLost,
            unplaced: None,
        },
        Unavailable {
            what: Call::Processes {
                kind: NvmlProcessKind::Compute,
            },
            gpu: Some(0),
            why: Failure::MissingSymbol {
                symbol: "nvmlDeviceGetComputeRunningProcesses_v3".into(),
            },
            unplaced: None,
        },
    ];
    vec![("nvml-down", down), ("partial", partial)]
}

fn persistenced_on(pid: u32) -> Process {
    let mut p = daemon(
        pid,
        "nvidia-persiste",
        "/usr/bin/nvidia-persistenced",
        vec![node("nvidiactl", None, &[Via::Fd])],
    );
    p.protected = true;
    p
}

/// Holders in every state that matters: a zombie NVML still lists, one in
/// a kernel wait, a stopped one, an orphan holding only a node, a shared
/// node's holder alone, and a driver daemon with memory.
pub(super) fn states() -> Snapshot {
    let zombie = Process {
        state: "Z".into(),
        ..trainer(5100, 5000, 4 << 30)
    };
    let blocked = Process {
        state: "D".into(),
        wchan: Some("uvm_va_space_destroy".into()),
        ..trainer(5200, 5000, 8 << 30)
    };
    let stopped = Process {
        state: "T".into(),
        ..trainer(5300, 5001, 6 << 30)
    };
    let orphan = Process {
        orphaned: true,
        devices: vec![node("nvidia0", Some(0), &[Via::Fd])],
        ..daemon(5400, "nvtop", "/usr/bin/nvtop", Vec::new())
    };
    let shared = daemon(
        5500,
        "nvidia-smi",
        "/usr/bin/nvidia-smi",
        vec![node("nvidiactl", None, &[Via::Fd])],
    );
    let mps = Process {
        protected: true,
        gpu_memory: vec![GpuMemory {
            gpu: 0,
            used_bytes: Some(1 << 30),
        }],
        ..daemon(
            5600,
            "nvidia-cuda-mps",
            "/usr/bin/nvidia-cuda-mps-server",
            vec![node("nvidia0", Some(0), &[Via::Fd, Via::Mmap])],
        )
    };
    let listed = [
        (5100, 4 << 30),
        (5200, 8 << 30),
        (5300, 6 << 30),
        (5600, 1 << 30),
    ];
    let used = listed.iter().map(|(_, b)| b).sum();
    let mut s = base(
        vec![h200(0, used, &listed)],
        vec![zombie, blocked, stopped, orphan, shared, mps],
        420,
    );
    s.parents.insert(
        5000,
        Kin {
            ppid: 1,
            comm: "bash".into(),
            start_time_ticks: 4_000,
            cmdline: vec!["bash".into()],
        },
    );
    s
}

/// `trainer` on `gpu`, owned by `owner`.
fn owned(pid: u32, ppid: u32, gpu: u32, owner: Owner) -> Process {
    let mut p = trainer(pid, ppid, 10 << 30);
    p.gpu_memory[0].gpu = gpu;
    p.devices[0] = node(&format!("nvidia{gpu}"), Some(gpu), &[Via::Fd, Via::Mmap]);
    p.owner = owner;
    p
}

fn owner(kind: OwnerKind, id: &str, name: &str) -> Owner {
    Owner {
        kind,
        id: id.into(),
        name: name.into(),
        claims: None,
    }
}

/// A holder of `gpu` with no owner: a rank of a torchrun agent, a worker
/// of a Python launcher, an orphan.
fn rank(pid: u32, ppid: u32, gpu: u32, comm: &str) -> Process {
    let mut p = owned(pid, ppid, gpu, Owner::default());
    p.comm = comm.into();
    p
}

/// Launch groups of every kind on eight GPUs: a user's unit, a container,
/// a pod of a Deployment, a Slurm job, two torchrun ranks with restarts
/// left, two Ray workers under one launcher, and two orphans of a dead
/// launcher under a subreaper.
pub(super) fn groups() -> Snapshot {
    let elastic = |mut p: Process| {
        p.environment
            .insert("TORCHELASTIC_RESTART_COUNT".into(), "1".into());
        p.environment
            .insert("TORCHELASTIC_MAX_RESTARTS".into(), "3".into());
        p
    };
    let pod_uid = "1234abcd-5678-90ab-cdef-1234567890ab";
    let procs = vec![
        owned(
            6100,
            6000,
            0,
            owner(
                OwnerKind::SystemdUnit,
                "vllm.service",
                "vllm.service (user 1000)",
            ),
        ),
        owned(
            6200,
            6000,
            1,
            owner(
                OwnerKind::Container,
                &"3f2a1b4c5d6e".repeat(5)[..60],
                "docker 3f2a1b4c5d6e",
            ),
        ),
        owned(
            6300,
            6000,
            2,
            owner(OwnerKind::K8sPod, pod_uid, "k8s pod 1234abcd"),
        ),
        owned(
            6400,
            6000,
            3,
            owner(OwnerKind::SlurmJob, "3385", "slurm job 3385"),
        ),
        elastic(rank(6501, 6500, 4, "python3")),
        elastic(rank(6502, 6500, 5, "python3")),
        rank(6601, 6600, 6, "ray::IDLE"),
        rank(6602, 6600, 6, "ray::Trainer.fit"),
        Process {
            orphaned: true,
            ..rank(6701, 6700, 7, "python3")
        },
        Process {
            orphaned: true,
            ..rank(6702, 6700, 7, "python3")
        },
    ];
    let listed = |g: u32| -> Vec<(u32, u64)> {
        procs
            .iter()
            .filter(|p| p.gpu_memory[0].gpu == g)
            .map(|p| (p.pid, 10 << 30))
            .collect()
    };
    let gpus = (0..8)
        .map(|i| {
            let l = listed(i);
            h200(i, (10 << 30) * l.len() as u64, &l)
        })
        .collect();
    let mut s = base(gpus, procs, 640);
    let kin = |ppid: u32, comm: &str, cmdline: &[&str]| Kin {
        ppid,
        comm: comm.into(),
        start_time_ticks: 3_000,
        cmdline: cmdline.iter().map(|a| a.to_string()).collect(),
    };
    s.parents.insert(6000, kin(1, "bash", &["bash"]));
    s.parents.insert(
        6500,
        kin(
            1,
            "pt_elastic",
            &["/usr/bin/python3", "/usr/local/bin/torchrun", "train.py"],
        ),
    );
    s.parents
        .insert(6600, kin(1, "raylet", &["/usr/lib/ray/raylet"]));
    s.parents
        .insert(6700, kin(1, "systemd", &["/lib/systemd/systemd", "--user"]));
    s.pods.insert(
        pod_uid.into(),
        PodName {
            namespace: "ml".into(),
            name: "vllm-7d9c5b6f4-x2x9k".into(),
        },
    );
    s
}

/// One GPU under NVIDIA MPS: the control daemon (a shared node only), the
/// server (its own 64 MiB, the clients' memory in its context) and two
/// clients of alice's that NVML lists with the MPS call.
pub(super) fn mps() -> Snapshot {
    let control = Process {
        protected: true,
        cmdline: vec!["nvidia-cuda-mps-control".into(), "-d".into()],
        ..daemon(
            7000,
            "nvidia-cuda-mps",
            "/usr/bin/nvidia-cuda-mps-control",
            vec![node("nvidiactl", None, &[Via::Fd])],
        )
    };
    let server = Process {
        protected: true,
        ppid: 7000,
        gpu_memory: vec![GpuMemory {
            gpu: 0,
            used_bytes: Some(64 << 20),
        }],
        ..daemon(
            7001,
            "nvidia-cuda-mps",
            "/usr/bin/nvidia-cuda-mps-server",
            vec![
                node("nvidia0", Some(0), &[Via::Fd, Via::Mmap]),
                node("nvidiactl", None, &[Via::Fd]),
            ],
        )
    };
    let client = |pid, bytes| Process {
        devices: vec![
            node("nvidiactl", None, &[Via::Fd]),
            node("nvidia-uvm", None, &[Via::Fd, Via::Mmap]),
        ],
        ..trainer(pid, 7099, bytes)
    };
    let listed = [(7001, 64 << 20), (7100, 4 << 30), (7101, 6 << 30)];
    let used = listed.iter().map(|(_, b)| b).sum();
    let mut g = h200(0, used, &listed);
    for n in &mut g.nvml_processes {
        if n.pid != 7001 {
            n.kind = crate::model::NvmlProcessKind::Mps;
        }
    }
    base(
        vec![g],
        vec![
            control,
            server,
            client(7100, 4 << 30),
            client(7101, 6 << 30),
        ],
        300,
    )
}
