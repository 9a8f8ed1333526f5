//! The seed incident (fixtures/seed-incident) as snapshot values: as the
//! manual launch left it, and once moved into its systemd unit.

use super::fixtures::{base, gpu, node, unit};
use crate::model::{Brief, GpuMemory, Kin, Process, Snapshot, UnitRestart, Via};

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
            source: crate::model::RestartSource::Files(vec![format!("/etc/systemd/system/{UNIT}")]),
            unreadable: Vec::new(),
        },
    );
    s
}

/// Processes that hold nothing but match a pattern for the incident.
pub(super) fn bystanders() -> Vec<Brief> {
    vec![Brief {
        pid: 300,
        comm: "tail".into(),
        cmdline: ["tail", "-f", "/var/log/VLLM::Worker_TP.log"]
            .map(String::from)
            .to_vec(),
    }]
}

/// The seed incident with a forgotten Jupyter kernel holding 8 GiB of
/// GPU 0, every GPU answering the utilisation read: the workers busy,
/// the kernel at 0 % (issue 29's idle holders).
pub(super) fn incident_with_idle_kernel() -> Snapshot {
    use crate::model::{DriverEvidence, ProcessUtil, Reading, UtilCall, UtilWindow};
    const KERNEL: u32 = 301_200;
    let mut s = incident();
    let kernel = Process {
        uid: 1000,
        user: "alice".into(),
        exe: Some("/home/alice/.venv/bin/python3.12".into()),
        cgroup: "/user.slice/user-1000.slice/session-7.scope".into(),
        threads: 9,
        gpu_memory: vec![GpuMemory {
            gpu: 0,
            used_bytes: Some(8 << 30),
        }],
        devices: vec![
            node("nvidia0", Some(0), &[Via::Mmap]),
            node("nvidia-uvm", None, &[Via::Mmap]),
        ],
        ..vllm_process(
            KERNEL,
            1,
            "python3",
            &[
                "/home/alice/.venv/bin/python3",
                "-m",
                "ipykernel_launcher",
                "-f",
                "/home/alice/.local/share/jupyter/runtime/kernel-4f1c.json",
            ],
        )
    };
    s.processes.push(kernel);
    s.gpus[0].memory.used_bytes += 8 << 30;
    s.gpus[0].memory.accounted_bytes += 8 << 30;
    s.gpus[0].nvml_processes.push(crate::model::NvmlProcess {
        pid: KERNEL,
        used_bytes: Some(8 << 30),
        kind: crate::model::NvmlProcessKind::Compute,
    });
    for g in &mut s.gpus {
        let busy = ProcessUtil {
            pid: FIRST_WORKER + g.index,
            sm: 97,
            mem: 61,
            timestamp_us: 1_764_936_181_000_000,
            ..ProcessUtil::default()
        };
        g.driver_evidence = Some(DriverEvidence {
            process_utilization: Reading::Value(vec![busy]),
            utilization_window: Some(UtilWindow {
                call: UtilCall::ProcessUtilization,
                since_unix_us: 1_764_936_176_000_000,
                window_ms: 5000,
            }),
            ..DriverEvidence::default()
        });
    }
    s
}
