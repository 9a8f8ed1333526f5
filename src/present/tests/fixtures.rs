//! Snapshot values for the golden tests: the seed incident and the
//! hostile-names corpus, with fixed PIDs, start times, paths and sizes, so
//! that every presenter's output is the same on every run. Nothing is read
//! from the system; the device paths name `/test-dev`, never the real one.

use crate::diagnose::{diagnose_with, verdict, Options};
use crate::model::{
    DeviceUse, Gpu, GpuMemory, Kin, Memory, NvmlProcess, NvmlProcessKind, NvmlStatus, Owner,
    OwnerKind, Process, Snapshot, Unavailable, UnitRestart, Unreadable, UnreadableReason, Via,
    Visibility,
};

/// The device directory every fixture names.
const DEV: &str = "/test-dev";
/// Framebuffer of an RTX PRO 6000 Blackwell (97,887 MiB).
const RTX_TOTAL: u64 = 102_642_810_880;
/// What each incident worker holds (nvidia-smi-compute-apps.csv).
const WORKER_BYTES: u64 = 96_610 << 20;
/// What each incident GPU showed used (README.md): the workers' memory
/// and the driver's 9 MiB.
const INCIDENT_USED: u64 = 96_619 << 20;
/// The vLLM engine core that started the workers and the tracker.
pub(super) const LAUNCHER: u32 = 202_515;
/// The multiprocessing resource tracker.
const TRACKER: u32 = 212_437;
/// `VLLM::Worker_TP0`; worker `i` is this plus `i`.
const FIRST_WORKER: u32 = 212_702;
/// The API server, the unit's main process: it holds nothing.
const API_SERVER: u32 = 202_400;
/// The unit that runs it all.
const UNIT: &str = "vllm.service";

/// The verdicts and the findings of `s`, as the collector sets them.
pub(super) fn judged(mut s: Snapshot, opts: &Options) -> Snapshot {
    verdict::apply(&mut s);
    s.findings = diagnose_with(&s, opts);
    s
}

/// A complete view as root with NVML answering.
fn base(gpus: Vec<Gpu>, processes: Vec<Process>, scanned: u32) -> Snapshot {
    Snapshot {
        gpus,
        processes,
        nvml: NvmlStatus {
            available: true,
            library: "libnvidia-ml.so.1".into(),
            driver_version: Some("580.95.05".into()),
            error: None,
        },
        visibility: Visibility {
            processes_scanned: scanned,
            root: true,
            ..Visibility::default()
        },
        dev_dir: DEV.into(),
        uptime_ticks: 8_640_000,
        ticks_per_second: 100,
        ..Snapshot::default()
    }
}

fn node(name: &str, gpu: Option<u32>, via: &[Via]) -> DeviceUse {
    DeviceUse {
        path: format!("{DEV}/{name}"),
        gpu,
        via: via.to_vec(),
    }
}

fn gpu(index: u32, name: &str, total: u64, used: u64, listed: &[(u32, u64)]) -> Gpu {
    let accounted: u64 = listed.iter().map(|(_, b)| b).sum();
    Gpu {
        index,
        uuid: format!("GPU-7f3a{index:04x}-0c1d-4e2f-9a3b-5c6d7e8f{index:04x}"),
        name: name.into(),
        pci_bus_id: format!("00000000:{:02X}:00.0", 0x01 + 0x20 * index),
        minor_number: Some(index),
        memory: Memory {
            total_bytes: total,
            used_bytes: used,
            accounted_bytes: accounted,
            unaccounted_bytes: used - accounted,
            known: true,
            ..Memory::default()
        },
        nvml_processes: listed
            .iter()
            .map(|&(pid, bytes)| NvmlProcess {
                pid,
                used_bytes: Some(bytes),
                kind: NvmlProcessKind::Compute,
            })
            .collect(),
        ..Gpu::default()
    }
}

fn unit(name: &str) -> Owner {
    Owner {
        kind: OwnerKind::SystemdUnit,
        id: name.into(),
        name: name.into(),
    }
}

/// One process of the incident's unit, run as `vllm` (UID 998).
fn vllm_process(pid: u32, ppid: u32, comm: &str, cmdline: &[&str]) -> Process {
    Process {
        pid,
        ppid,
        pgid: API_SERVER,
        sid: API_SERVER,
        comm: comm.into(),
        cmdline: cmdline.iter().map(|s| s.to_string()).collect(),
        exe: Some("/opt/vllm/bin/python3.12".into()),
        uid: 998,
        user: "vllm".into(),
        state: "S".into(),
        start_time_ticks: 8_000_000 + u64::from(pid - API_SERVER),
        threads: 1,
        nspid: vec![pid],
        cgroup: "/user.slice/user-998.slice/session-4.scope".into(),
        ..Process::default()
    }
}

/// Worker `i`: renamed to `VLLM::Worker_TP{i}`, mapping its GPU and
/// nvidia-uvm, with nvidiactl open.
fn worker(i: u32) -> Process {
    Process {
        threads: 48,
        renamed: true,
        gpu_memory: vec![GpuMemory {
            gpu: i,
            used_bytes: Some(WORKER_BYTES),
        }],
        devices: vec![
            node(&format!("nvidia{i}"), Some(i), &[Via::Mmap]),
            node("nvidiactl", None, &[Via::Fd]),
            node("nvidia-uvm", None, &[Via::Mmap]),
        ],
        ..vllm_process(
            FIRST_WORKER + i,
            LAUNCHER,
            "VLLM::Worker_TP",
            &[&format!("VLLM::Worker_TP{i}")],
        )
    }
}

/// The seed incident (fixtures/seed-incident) as the manual launch left
/// it: eight renamed workers with 96,610 MiB each, their launcher (the
/// engine core) and the resource tracker holding nvidia0 and nvidia-uvm,
/// started by an API server that holds nothing.
pub(super) fn incident() -> Snapshot {
    let mut procs = vec![
        Process {
            renamed: true,
            threads: 12,
            devices: vec![
                node("nvidia0", Some(0), &[Via::Fd]),
                node("nvidia-uvm", None, &[Via::Fd]),
            ],
            ..vllm_process(
                LAUNCHER,
                API_SERVER,
                "VLLM::EngineCor",
                &["VLLM::EngineCore"],
            )
        },
        Process {
            devices: vec![
                node("nvidia0", Some(0), &[Via::Mmap]),
                node("nvidia-uvm", None, &[Via::Fd]),
            ],
            ..vllm_process(
                TRACKER,
                LAUNCHER,
                "python3",
                &[
                    "/opt/vllm/bin/python3",
                    "-c",
                    "from multiprocessing.resource_tracker import main;main(25)",
                ],
            )
        },
    ];
    procs.extend((0..8).map(worker));
    let name = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition";
    let gpus = (0..8)
        .map(|i| {
            gpu(
                i,
                name,
                RTX_TOTAL,
                INCIDENT_USED,
                &[(FIRST_WORKER + i, WORKER_BYTES)],
            )
        })
        .collect();
    let mut s = base(gpus, procs, 412);
    s.parents.insert(
        API_SERVER,
        Kin {
            ppid: 1,
            comm: "python3".into(),
            start_time_ticks: 7_990_000,
            cmdline: [
                "/opt/vllm/bin/python3",
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                "/models/kimi-k2",
                "--tensor-parallel-size",
                "8",
            ]
            .map(String::from)
            .to_vec(),
        },
    );
    s
}

/// The incident once moved into `vllm.service` (Restart=on-failure): the
/// same processes, owned by the unit.
pub(super) fn incident_under_unit() -> Snapshot {
    let mut s = incident();
    for p in &mut s.processes {
        p.owner = unit(UNIT);
        p.cgroup = format!("/system.slice/{UNIT}");
    }
    s.units.insert(
        UNIT.into(),
        UnitRestart {
            restart: "on-failure".into(),
            restart_sec: None,
            source: format!("/etc/systemd/system/{UNIT}"),
            unreadable: Vec::new(),
        },
    );
    s
}

/// The hostile names of tests/it/evil.rs: terminal escapes, line breaks,
/// bidi overrides and isolates, quotes and shell syntax, invalid UTF-8, DEL
/// and C1, invisible characters, and a 64 KiB name.
pub(super) fn corpus() -> Vec<Vec<u8>> {
    let mut c: Vec<Vec<u8>> = [
        &b"\x1b]0;pwned\x07title"[..],
        b"\x1b[2J\x1b[Hcleared",
        b"\x1b[31mred\x1b[0m",
        b"two\nlines\rback\ttab",
        "\u{202e}gnp.exe".as_bytes(),
        "\u{2066}iso\u{2069} \u{200f}rlm".as_bytes(),
        b"it's \"quoted\"",
        b"$(touch /tmp/gpufree-pwned)",
        b"`id` ; rm -rf ~ #",
        b"\xff\xfe not utf-8",
        b"\x7fdel \xc2\x85c1 \xc2\x9bcsi",
        "py\u{200b}thon\u{feff} \u{e0041}tag".as_bytes(),
    ]
    .iter()
    .map(|s| s.to_vec())
    .collect();
    c.push(vec![b'A'; 64 * 1024]);
    c
}

/// Bytes as the collector keeps them: UTF-8 as it is, any other byte as
/// `\xNN` text.
fn text(bytes: &[u8]) -> String {
    bytes
        .utf8_chunks()
        .map(|c| {
            let bad: String = c.invalid().iter().map(|b| format!("\\x{b:02x}")).collect();
            format!("{}{bad}", c.valid())
        })
        .collect()
}

/// PID of the first hostile holder; the others follow.
pub(super) const FIRST_EVIL: u32 = 4100;
/// Each hostile holder's memory.
const EVIL_BYTES: u64 = 1 << 30;

/// One hostile holder: its comm (the first 15 bytes), its command line
/// and its unit all carry the name; a name with a line break breaks its
/// cgroup line, so that one has no unit and is an orphan of PID 1.
fn evil_holder(i: u32, name: &[u8]) -> Process {
    let whole = text(name);
    let unit_name: String = String::from_utf8_lossy(name)
        .chars()
        .filter(|c| *c != '/')
        .take(200)
        .collect();
    let owned = !name.contains(&b'\n');
    let root = i.is_multiple_of(2);
    Process {
        pid: FIRST_EVIL + i,
        ppid: 1,
        comm: text(&name[..name.len().min(15)]),
        cmdline: vec![whole.clone(), "--serve".into(), whole],
        exe: Some("/usr/bin/python3".into()),
        uid: if root { 0 } else { 65534 },
        user: if root { "root" } else { "nobody" }.into(),
        state: "S".into(),
        start_time_ticks: 1000 + u64::from(FIRST_EVIL + i),
        threads: 1,
        nspid: vec![FIRST_EVIL + i],
        renamed: true,
        orphaned: !owned,
        gpu_memory: vec![GpuMemory {
            gpu: 0,
            used_bytes: Some(EVIL_BYTES),
        }],
        devices: vec![node("nvidia0", Some(0), &[Via::Fd])],
        owner: if owned {
            unit(&format!("{unit_name}.service"))
        } else {
            Owner::default()
        },
        ..Process::default()
    }
}

/// One H200 with a hostile name, held by one process per corpus entry.
pub(super) fn evil() -> Snapshot {
    let names = corpus();
    let procs: Vec<Process> = (0u32..)
        .zip(&names)
        .map(|(i, n)| evil_holder(i, n))
        .collect();
    let listed: Vec<(u32, u64)> = procs.iter().map(|p| (p.pid, EVIL_BYTES)).collect();
    let used = EVIL_BYTES * listed.len() as u64;
    let mut g = gpu(
        0,
        "NVIDIA \u{1b}[5mH200\u{202e}",
        143_771 << 20,
        used,
        &listed,
    );
    g.uuid = "GPU-\u{1b}]0;uuid\u{7}\u{202e}".into();
    base(vec![g], procs, 57)
}

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
        error: Some("libnvidia-ml.so.1: cannot open shared object file".into()),
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
            what: "memory".into(),
            gpu: Some(1),
            why: "GPU_IS_LOST".into(),
        },
        Unavailable {
            what: "compute processes".into(),
            gpu: Some(0),
            why: "missing symbol nvmlDeviceGetComputeRunningProcesses_v3 (driver too old)".into(),
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
        crate::model::PodName {
            namespace: "ml".into(),
            name: "vllm-7d9c5b6f4-x2x9k".into(),
        },
    );
    s
}

/// Processes that hold nothing but match a pattern for the incident.
pub(super) fn bystanders() -> Vec<crate::model::Brief> {
    vec![crate::model::Brief {
        pid: 300,
        comm: "tail".into(),
        cmdline: ["tail", "-f", "/var/log/VLLM::Worker_TP.log"]
            .map(String::from)
            .to_vec(),
    }]
}
