//! Correctness at scale (issue 30): snapshots of 10,000 holders in the
//! shapes a busy or hostile host makes — one launcher with 10,000
//! workers, 10,000 single holders, a parent chain 5,000 deep (and a loop
//! of parents), 1,000 units and pods — diagnosed and written by every
//! presenter, with the findings each must give. No timing is asserted:
//! what this proves is that every pass over the holders ends and names
//! each holder where it belongs (a quadratic pass here took seconds).

use super::{json, written};
use crate::model::{
    DeviceUse, DriverEvidence, Evidence, FindingKind, Gpu, GpuMemory, GpuUtil, Kin, Lookup, Memory,
    Next, NvmlProcess, NvmlProcessKind, NvmlStatus, Owner, OwnerKind, Process, ProcessUtil,
    Reading, Snapshot, Via, Visibility, DESCENT_STEPS,
};
use crate::present::metrics::render_textfile;
use crate::present::table::write_status;
use crate::present::why::write_why;
use crate::present::Printer;

const GPUS: u32 = 8;
const MIB: u64 = 1 << 20;
/// The first holder's PID.
const FIRST: u32 = 10_000;

fn holder(pid: u32, ppid: u32, comm: &str) -> Process {
    let gpu = pid % GPUS;
    Process {
        pid,
        ppid,
        comm: comm.into(),
        cmdline: vec![comm.into(), format!("--rank={pid}")],
        exe: Some(format!("/usr/bin/{comm}")),
        state: "S".into(),
        threads: 4,
        start_time_ticks: 100 + u64::from(pid),
        user: "alice".into(),
        uid: 1000,
        gpu_memory: vec![GpuMemory {
            gpu,
            used_bytes: Some(MIB),
        }],
        devices: vec![
            DeviceUse {
                path: format!("/dev/nvidia{gpu}"),
                gpu: Some(gpu),
                via: vec![Via::Fd, Via::Mmap],
            },
            DeviceUse {
                path: "/dev/nvidiactl".into(),
                gpu: None,
                via: vec![Via::Fd],
            },
        ],
        ..Process::default()
    }
}

fn kin(ppid: u32, comm: &str, cmdline: &[&str]) -> Kin {
    Kin {
        ppid,
        comm: comm.into(),
        start_time_ticks: 1,
        cmdline: cmdline.iter().map(|w| w.to_string()).collect(),
    }
}

/// Eight GPUs listing every holder's memory, their samples saying the
/// holders of even PIDs are busy and the rest idle.
fn snapshot(processes: Vec<Process>, parents: Vec<(u32, Kin)>) -> Snapshot {
    let gpus = (0..GPUS)
        .map(|index| {
            let mine: Vec<&Process> = processes
                .iter()
                .filter(|p| p.gpu_memory.iter().any(|m| m.gpu == index))
                .collect();
            let listed: Vec<NvmlProcess> = mine
                .iter()
                .map(|p| NvmlProcess {
                    pid: p.pid,
                    used_bytes: Some(MIB),
                    kind: NvmlProcessKind::Compute,
                })
                .collect();
            let samples = mine
                .iter()
                .map(|p| ProcessUtil {
                    pid: p.pid,
                    sm: if p.pid % 2 == 0 { 40 } else { 0 },
                    ..ProcessUtil::default()
                })
                .collect();
            let used = MIB * listed.len() as u64;
            Gpu {
                index,
                uuid: format!("GPU-{index}"),
                minor_number: Some(index),
                memory: Memory {
                    total_bytes: 80 << 30,
                    used_bytes: used,
                    accounted_bytes: used,
                    known: true,
                    ..Memory::default()
                },
                nvml_processes: listed,
                driver_evidence: Some(DriverEvidence {
                    process_utilization: Reading::Value(samples),
                    gpu_utilization: Reading::Value(GpuUtil { gpu: 40, memory: 5 }),
                    ..DriverEvidence::default()
                }),
                ..Gpu::default()
            }
        })
        .collect();
    let s = Snapshot {
        gpus,
        processes,
        parents: parents.into_iter().collect(),
        nvml: NvmlStatus {
            available: true,
            library: "libnvidia-ml.so.1".into(),
            ..NvmlStatus::default()
        },
        visibility: Visibility {
            root: true,
            processes_scanned: 20_000,
            ..Visibility::default()
        },
        dev_dir: "/dev".into(),
        uptime_ticks: 1_000_000,
        ticks_per_second: 100,
        ..Snapshot::default()
    };
    super::judged(s, &crate::diagnose::Options::default())
}

/// Every presenter's output of `s`: the table and `why` written whole,
/// the JSON parsed back with every holder and finding, a memory series
/// per holder in the metrics. Returns the table.
fn presented(s: &Snapshot) -> String {
    let plain = Printer::default();
    let table = written(|w| write_status(w, s, &plain));
    let why = written(|w| write_why(w, s, &plain));
    assert!(!why.is_empty());
    let doc: serde_json::Value = serde_json::from_str(&json(s)).expect("parses back");
    assert_eq!(
        doc["processes"].as_array().map(Vec::len),
        Some(s.processes.len())
    );
    let metrics = render_textfile(s, &Default::default());
    let series = metrics
        .lines()
        .filter(|l| l.starts_with("gpufree_process_gpu_memory_bytes{"))
        .count();
    let held: usize = s.processes.iter().map(|p| p.gpu_memory.len()).sum();
    assert_eq!(series, held, "one memory series per holder and GPU");
    table
}

/// The launch-group findings of `s`, by the evidence.
fn groups(s: &Snapshot) -> Vec<(&crate::model::Finding, &crate::model::LaunchGroup)> {
    s.findings
        .iter()
        .filter_map(|f| match &f.evidence {
            Evidence::Group(g) => Some((f, &**g)),
            _ => None,
        })
        .collect()
}

/// The idle holders the diagnosis names: the odd PIDs (their samples
/// show no use), each once.
fn idle_pids(s: &Snapshot) -> Vec<u32> {
    let mut idle: Vec<u32> = s
        .findings
        .iter()
        .filter(|f| f.kind() == FindingKind::IdleHolders)
        .flat_map(|f| f.pids.iter().copied())
        .collect();
    idle.sort_unstable();
    idle
}

#[test]
fn one_launcher_with_ten_thousand_workers_is_one_group_naming_every_worker() {
    let workers: Vec<Process> = (0..10_000)
        .map(|i| holder(FIRST + i, 500, "pt_worker"))
        .collect();
    let agent = kin(1, "python3", &["python3", "-m", "torch.distributed.run"]);
    let s = snapshot(workers, vec![(500, agent), (1, kin(0, "systemd", &[]))]);
    let groups = groups(&s);
    assert_eq!(groups.len(), 1, "one launcher, one group");
    let (f, g) = groups[0];
    assert_eq!(g.launcher, Some(500));
    assert!(matches!(
        g.name,
        crate::model::GroupName::Launcher { pid: 500, .. }
    ));
    assert_eq!(g.holders.len(), 10_000);
    assert_eq!(f.pids.len(), 10_000);
    assert_eq!(f.bytes, 10_000 * MIB);
    // Nothing else is below the launcher: the whole tree is the group.
    assert_eq!(f.next, Next::KillTree(500));
    let odd: Vec<u32> = (0..10_000)
        .map(|i| FIRST + i)
        .filter(|p| p % 2 == 1)
        .collect();
    assert_eq!(idle_pids(&s), odd);
    let table = presented(&s);
    assert!(table.contains("GPU 0: 1250 holding memory, 0 holding its device node"));
}

#[test]
fn ten_thousand_single_holders_are_each_their_own_group() {
    let holders: Vec<Process> = (0..10_000)
        .map(|i| holder(FIRST + i, 1, &format!("job{i}")))
        .collect();
    let s = snapshot(holders, vec![(1, kin(0, "systemd", &[]))]);
    let groups = groups(&s);
    assert_eq!(groups.len(), 10_000);
    for (f, g) in &groups {
        let [pid] = f.pids[..] else {
            panic!("one holder per group: {:?}", f.pids)
        };
        assert!(matches!(&g.name, crate::model::GroupName::Process { pid: p, .. } if *p == pid));
        assert_eq!(f.next, Next::Kill(vec![pid]));
    }
    assert_eq!(idle_pids(&s).len(), 5_000);
    presented(&s);
}

#[test]
fn a_parent_chain_five_thousand_deep_ends_and_names_every_holder_once() {
    const DEPTH: u32 = 5_000;
    let chain: Vec<Process> = (0..DEPTH)
        .map(|i| holder(FIRST + i, if i == 0 { 500 } else { FIRST + i - 1 }, "chain"))
        .collect();
    // A loop of parents beside it (600 ↔ 601, a holder below): no walk
    // may go round it for ever.
    let mut looped = holder(700, 600, "looped");
    looped.gpu_memory.clear();
    let mut processes = chain;
    processes.push(looped);
    let parents = vec![
        (500, kin(1, "bash", &["bash"])),
        (1, kin(0, "systemd", &[])),
        (600, kin(601, "a", &[])),
        (601, kin(600, "b", &[])),
    ];
    let s = snapshot(processes, parents);
    let mut named: Vec<u32> = groups(&s)
        .iter()
        .flat_map(|(f, _)| f.pids.iter().copied())
        .collect();
    named.sort_unstable();
    let all: Vec<u32> = (0..DEPTH).map(|i| FIRST + i).collect();
    assert_eq!(named, all, "each holder of the chain in exactly one group");
    // The top's group: the top and what reaches it within the walk's 64
    // steps up through holders.
    let (top, _) = groups(&s)
        .into_iter()
        .find(|(f, _)| f.pids.contains(&FIRST))
        .expect("the top's group");
    assert_eq!(top.pids.len(), 65);
    // Descent is bounded as `descends_from` bounds it, loops included.
    let look = Lookup::new(&s);
    let below = look.subtree(FIRST);
    assert_eq!(below.len(), DESCENT_STEPS as usize);
    let last = FIRST + DEPTH - 1;
    assert!(!s.descends_from(last, FIRST));
    assert!(s.descends_from(FIRST + DESCENT_STEPS - 1, FIRST));
    assert!(!below.contains(&last));
    assert!(below.contains(&(FIRST + DESCENT_STEPS - 1)));
    assert!(!s.descends_from(700, 1));
    let mut round = look.subtree(600);
    round.sort_unstable();
    assert_eq!(round, [600, 601, 700]);
    presented(&s);
}

#[test]
fn a_thousand_units_and_pods_are_a_group_each() {
    let holders: Vec<Process> = (0..10_000)
        .map(|i| {
            let mut p = holder(FIRST + i, 1, "svc");
            let (kind, id) = if i % 2 == 0 {
                (OwnerKind::SystemdUnit, format!("u{}.service", i % 1_000))
            } else {
                (OwnerKind::K8sPod, format!("pod-{}", i % 1_000))
            };
            p.cgroup = format!("/system.slice/{id}");
            p.owner = Owner {
                kind,
                name: id.clone(),
                id,
                claims: None,
            };
            p
        })
        .collect();
    let s = snapshot(holders, vec![(1, kin(0, "systemd", &[]))]);
    let groups = groups(&s);
    assert_eq!(groups.len(), 1_000);
    assert!(groups.iter().all(|(f, _)| f.pids.len() == 10));
    let table = presented(&s);
    assert!(table.contains("u0.service"));
}
