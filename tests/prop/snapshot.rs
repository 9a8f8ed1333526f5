//! The pure half of the pipeline on random snapshots: the verdict, the
//! diagnosis (with and without `--pattern`), `--gpu` selection, the kill
//! plan, and every presenter (status table, why, kill plan, JSON,
//! Prometheus) on values that NVML, /proc and the cgroup tree can hand
//! over: memory sizes up to u64::MAX, zero clock ticks, PIDs NVML lists
//! twice, hostile names. None may panic (a debug build checks every
//! arithmetic overflow), and the JSON reads back as the same snapshot.

use crate::{cases, hostile_bytes, re};
use gpufree::act::kill::{plan, Safety, Selectors};
use gpufree::diagnose::{diagnose, diagnose_with, verdict, Options};
use gpufree::model::FindingKind;
use gpufree::model::{
    Call, Claim, DeviceUse, DrmClient, Failure, Gpu, GpuMemory, Memory, NotProtected, NvmlProcess,
    NvmlProcessKind, NvmlStatus, Owner, OwnerKind, Process, Protection, Snapshot, Unavailable,
    Unreadable, UnreadableReason, Vendor, VerdictState, Via, Visibility,
};
use gpufree::present::json::{FindingDoc, SnapshotDoc};
use gpufree::present::{
    kill::write_plan, metrics, table, why, write_json, Printer, PrinterBuilder,
};
use proptest::prelude::*;

/// Cases of the snapshot test (each runs the whole diagnosis and every
/// presenter, twice: about 3 ms in a debug build).
const SNAPSHOT_CASES: u32 = 1_500;

/// PIDs from a small pool, so processes, NVML lists and visibility lists
/// name the same PIDs.
fn pid() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 1u32..8, 1 => any::<u32>()]
}

/// Byte counts at the edges as well as ordinary ones.
fn bytes_value() -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => 0u64..(200 << 30),
        1 => Just(u64::MAX),
        1 => (u64::MAX - (1 << 40))..=u64::MAX,
        1 => any::<u64>(),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(vec![
            "python3", "VLLM::Worker_TP", "nvidia-persistenced", "Xorg", "", "x y",
            "multiprocessing.resource_tracker", "pt_data_worker",
        ])
        .prop_map(str::to_string),
        1 => hostile_bytes(12).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

fn gpu() -> impl Strategy<Value = Gpu> {
    (
        prop_oneof![3 => 0u32..4, 1 => any::<u32>()],
        text(),
        (
            bytes_value(),
            bytes_value(),
            bytes_value(),
            bytes_value(),
            any::<bool>(),
        ),
        proptest::collection::vec(
            (
                pid(),
                proptest::option::of(bytes_value()),
                proptest::sample::select(vec![
                    NvmlProcessKind::Compute,
                    NvmlProcessKind::Graphics,
                    NvmlProcessKind::Mps,
                ]),
            ),
            0..5,
        ),
    )
        .prop_map(
            |(index, uuid, (total, used, accounted, unaccounted, known), procs)| Gpu {
                index,
                name: uuid.chars().rev().collect(),
                uuid,
                pci_bus_id: format!("00000000:{:02X}:00.0", index % 256),
                vendor: [Vendor::Nvidia, Vendor::Amd, Vendor::Intel, Vendor::Other]
                    [index as usize % 4],
                minor_number: Some(index),
                driver: (index % 4 == 1).then(|| "amdgpu".to_string()),
                memory: Memory {
                    total_bytes: total,
                    used_bytes: used,
                    accounted_bytes: accounted,
                    unaccounted_bytes: unaccounted,
                    reserved_bytes: 0,
                    known,
                    shared_bytes: if index % 4 == 1 { used / 2 } else { 0 },
                },
                nvml_processes: procs
                    .into_iter()
                    .map(|(pid, used_bytes, kind)| NvmlProcess {
                        pid,
                        used_bytes,
                        kind,
                    })
                    .collect(),
                verdict: Default::default(),
                // Every fifth GPU with the driver's evidence.
                driver_evidence: (index % 5 == 3).then(|| gpufree::model::DriverEvidence {
                    recovery_action: gpufree::model::Reading::Value(
                        gpufree::model::RecoveryAction::from_nvml(index % 7),
                    ),
                    retired_pages_pending: gpufree::model::Reading::Failed(
                        gpufree::model::Failure::GpuIsLost,
                    ),
                    ..Default::default()
                }),
                // Every third GPU in MIG mode, with one MIG device.
                mig_mode: (index % 3 == 2).then_some(true),
                mig_devices: (0..u32::from(index % 3 == 2))
                    .map(|i| gpufree::model::MigDevice {
                        index: i,
                        uuid: format!("MIG-{index}"),
                        name: "NVIDIA H200 MIG 1g.18gb".into(),
                        gpu_instance_id: Some(13),
                        compute_instance_id: Some(0),
                        memory: Memory {
                            total_bytes: total / 7,
                            used_bytes: used / 7,
                            known,
                            ..Memory::default()
                        },
                        ..Default::default()
                    })
                    .collect(),
                mig_only: index % 6 == 5,
            },
        )
}

fn process() -> impl Strategy<Value = Process> {
    (
        (
            pid(),
            pid(),
            text(),
            proptest::collection::vec(text(), 0..3),
            proptest::option::of(text()),
        ),
        (
            proptest::sample::select(vec!["S", "R", "D", "Z", "T", "t", "I", ""]),
            any::<u64>(),
            prop_oneof![Just(0u32), Just(1), Just(2), any::<u32>()],
            proptest::collection::vec(any::<u32>(), 0..3),
        ),
        (any::<bool>(), any::<bool>(), any::<bool>()),
        proptest::collection::vec((0u32..4, proptest::option::of(bytes_value())), 0..3),
        proptest::collection::vec(
            (
                proptest::sample::select(vec![
                    "/test-dev/nvidia0",
                    "/test-dev/nvidia-uvm",
                    "/test-dev/dri/card1",
                    "",
                ]),
                proptest::option::of(0u32..4),
                any::<bool>(),
            ),
            0..3,
        ),
        (
            proptest::sample::select(vec![
                OwnerKind::SystemdUnit,
                OwnerKind::Container,
                OwnerKind::K8sPod,
                OwnerKind::SlurmJob,
                OwnerKind::Session,
                OwnerKind::None,
            ]),
            text(),
            text(),
        ),
        proptest::option::of(text()),
    )
        .prop_map(
            |(
                (pid, ppid, comm, cmdline, exe),
                (state, start, threads, nspid),
                (renamed, orphaned, protected),
                memory,
                devices,
                (kind, id, name),
                wchan,
            )| Process {
                pid,
                ppid,
                pgid: ppid,
                sid: ppid,
                comm,
                cmdline,
                exe,
                uid: pid % 3 * 1000,
                user: "root".into(),
                state: state.into(),
                start_time_ticks: start,
                threads,
                nspid,
                renamed,
                orphaned,
                gpu_memory: memory
                    .into_iter()
                    .map(|(gpu, used_bytes)| GpuMemory { gpu, used_bytes })
                    .collect(),
                devices: devices
                    .into_iter()
                    .map(|(path, gpu, both)| DeviceUse {
                        path: path.into(),
                        gpu,
                        via: if both {
                            vec![Via::Fd, Via::Mmap]
                        } else {
                            vec![Via::Fd]
                        },
                    })
                    .collect(),
                drm_clients: if pid % 5 == 0 {
                    vec![DrmClient {
                        gpu: pid % 3,
                        driver: "xe".into(),
                        client_id: u64::from(pid),
                        device_bytes: u64::from(ppid) << 20,
                        memory_unknown: pid % 2 == 0,
                        shared_with: vec![ppid],
                    }]
                } else {
                    Vec::new()
                },
                owner: Owner {
                    kind,
                    // A delegated cgroup's names, as hostile as any.
                    claims: (pid % 4 == 0).then(|| Claim {
                        kind: OwnerKind::Container,
                        id: name.clone(),
                        name: id.clone(),
                    }),
                    id,
                    name,
                },
                cgroup: String::new(),
                wchan,
                protected,
                idle_since_unix_ms: None,
                unselected_activity: None,
                protection: protected.then_some(if pid % 2 == 0 {
                    Protection::System
                } else {
                    Protection::User
                }),
                not_protected: (!protected && pid % 4 == 1).then(|| NotProtected::Preload {
                    variable: "LD_PRELOAD".into(),
                    value: "/tmp/\\xfe.so".into(),
                }),
                environment: Default::default(),
            },
        )
}

/// Now and then one field longer than a format width may be (65,535):
/// a comm, a GPU name, an owner's name or a command line.
fn long_field(mut s: Snapshot, which: u8, len: usize) -> Snapshot {
    let long = "w".repeat(len);
    let first = s.processes.first_mut();
    match which {
        0 => first.into_iter().for_each(|p| p.comm = long.clone()),
        1 => s
            .gpus
            .iter_mut()
            .take(1)
            .for_each(|g| g.name = long.clone()),
        2 => first.into_iter().for_each(|p| p.owner.name = long.clone()),
        3 => first
            .into_iter()
            .for_each(|p| p.cmdline = vec![long.clone()]),
        _ => {}
    }
    s
}

fn snapshot() -> impl Strategy<Value = Snapshot> {
    (snapshot_values(), 0u8..64, 65_530usize..66_000)
        .prop_map(|(s, which, len)| long_field(s, which, len))
}

fn snapshot_values() -> impl Strategy<Value = Snapshot> {
    (
        proptest::collection::vec(gpu(), 0..4),
        proptest::collection::vec(process(), 0..6),
        (
            proptest::collection::vec((pid(), 0u8..3), 0..3),
            proptest::collection::vec(pid(), 0..3),
            proptest::collection::vec(pid(), 0..3),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        ),
        (any::<bool>(), proptest::option::of(text())),
        proptest::collection::vec((text(), proptest::option::of(0u32..4)), 0..2),
        (
            any::<u64>(),
            prop_oneof![Just(0u64), Just(100), any::<u64>()],
        ),
    )
        .prop_map(
            |(
                gpus,
                processes,
                (unread, hidden, stale, hidepid, root, nested),
                (available, error),
                unavailable,
                (uptime, ticks),
            )| {
                let unreadable: Vec<Unreadable> = unread
                    .into_iter()
                    .map(|(pid, r)| Unreadable {
                        pid,
                        comm: None,
                        reason: [
                            UnreadableReason::Permission,
                            UnreadableReason::Timeout,
                            UnreadableReason::Error,
                        ][r as usize],
                        why: "why".into(),
                    })
                    .collect();
                Snapshot {
                    gpus,
                    processes,
                    findings: Vec::new(),
                    visibility: Visibility {
                        processes_scanned: 10,
                        processes_unreadable: unreadable.len() as u32,
                        unreadable_pids: unreadable.iter().map(|u| u.pid).collect(),
                        unreadable,
                        vanished_pids: Vec::new(),
                        nvml_pids_not_visible: hidden,
                        nvml_pids_stale: stale,
                        hidepid,
                        root,
                        nested_pid_namespace: nested,
                        scan: if hidepid {
                            gpufree::model::ScanMethod::Bpf
                        } else {
                            gpufree::model::ScanMethod::Procfs
                        },
                        scan_reason: Some(gpufree::model::ScanReason::CouldNotRun(
                            gpufree::model::BpfUnavailable::Read("why \"\n".into()),
                        )),
                        scan_reread: u32::from(nested),
                        scan_kept: u32::from(hidepid),
                        view: None,
                        hidden: Vec::new(),
                        refused_nodes: Vec::new(),
                    },
                    nvml: NvmlStatus {
                        available,
                        library: "libnvidia-ml.so.1".into(),
                        driver_version: None,
                        error: error.map(|error| gpufree::model::NvmlDown::NoLibrary {
                            library: "libnvidia-ml.so.1".into(),
                            error,
                        }),
                    },
                    unavailable: unavailable
                        .into_iter()
                        .map(|(error, gpu)| Unavailable {
                            what: Call::Memory,
                            gpu,
                            why: Failure::Nvml { error },
                            unplaced: None,
                        })
                        .collect(),
                    dev_dir: "/dev".into(),
                    uptime_ticks: uptime,
                    ticks_per_second: ticks,
                    ..Snapshot::default()
                }
            },
        )
}

/// Every presenter of `s`, into memory.
pub fn present_all(s: &Snapshot) -> Result<(), TestCaseError> {
    for printer in [
        Printer::default(),
        PrinterBuilder::new().color(true).build(),
        PrinterBuilder::new().quiet(true).build(),
    ] {
        let mut out = Vec::new();
        table::write_status(&mut out, s, &printer).unwrap();
        why::write_why(&mut out, s, &printer).unwrap();
        let sel = Selectors {
            gpus: Some(gpufree::model::Selection::whole(
                s.gpus.iter().map(|g| g.index).collect(),
            )),
            ..Selectors::default()
        };
        let safety = Safety {
            me: 1,
            ancestors: Vec::new(),
            uid: 0,
            force_protected: false,
            include_shared: true,
        };
        let p = plan(s, &sel, &safety);
        write_plan(&mut out, s, &p, "TERM", 10.0, &printer).unwrap();
        prop_assert!(String::from_utf8(out).is_ok());
    }
    let mut json = Vec::new();
    write_json(&mut json, &SnapshotDoc::new(s)).unwrap();
    let back: Snapshot = serde_json::from_value(unfailed(&json)).unwrap();
    // (A snapshot read back pins nothing, and knows no parents beyond
    // its processes': neither is serialized. Its findings are written in
    // words, which read back as those words, not as the evidence; so is
    // a failed driver reading, read back here as not supported.)
    let mut unpinned = Snapshot {
        pins: Default::default(),
        parents: Default::default(),
        findings: Vec::new(),
        ..s.clone()
    };
    for e in unpinned
        .gpus
        .iter_mut()
        .filter_map(|g| g.driver_evidence.as_mut())
    {
        unfail(&mut e.recovery_action);
        unfail(&mut e.remapped_rows);
        unfail(&mut e.retired_pages_pending);
        unfail(&mut e.volatile_uncorrectable_ecc);
        unfail(&mut e.process_utilization);
    }
    prop_assert_eq!(&back, &unpinned, "the JSON reads back as the snapshot");
    let doc: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let worded: Vec<FindingDoc> = s.findings.iter().map(FindingDoc::new).collect();
    prop_assert_eq!(
        &doc["findings"],
        &serde_json::to_value(&worded).unwrap(),
        "the JSON has every finding in its words"
    );
    let m = metrics::render(s, &metrics::Extra::default());
    prop_assert!(m.ends_with("# EOF\n"), "{}", m);
    Ok(())
}

/// The snapshot document `json` with each failed driver reading
/// (`{"failed": "why"}`, its words) as not supported: words do not read
/// back as the failure.
fn unfailed(json: &[u8]) -> serde_json::Value {
    let mut doc: serde_json::Value = serde_json::from_slice(json).unwrap();
    let gpus = doc.get_mut("gpus").and_then(|g| g.as_array_mut());
    for g in gpus.into_iter().flatten() {
        let evidence = g.get_mut("driver_evidence").and_then(|e| e.as_object_mut());
        for (_, r) in evidence.into_iter().flatten() {
            let why = r.get("failed").and_then(|w| w.as_str());
            if why.is_some_and(|w| !w.is_empty()) {
                *r = "not_supported".into();
            }
        }
    }
    doc
}

/// A failed reading as [`unfailed`] reads it back.
fn unfail<T>(r: &mut gpufree::model::Reading<T>) {
    if matches!(r, gpufree::model::Reading::Failed(_)) {
        *r = gpufree::model::Reading::NotSupported;
    }
}

proptest! {
    #![proptest_config(cases(SNAPSHOT_CASES))]

    #[test]
    fn any_snapshot_is_judged_diagnosed_and_presented(mut s in snapshot(), pattern in re("[a-z.*]{0,6}")) {
        verdict::apply(&mut s);
        s.findings = diagnose(&s);
        // The verdict of the whole: busy if one GPU is, else unknown if
        // one is, else free (and unknown without GPUs).
        let states: Vec<VerdictState> = s.gpus.iter().map(|g| g.verdict.state).collect();
        let whole = [VerdictState::Busy, VerdictState::Unknown, VerdictState::Free]
            .into_iter()
            .find(|v| states.contains(v))
            .unwrap_or(VerdictState::Unknown);
        prop_assert_eq!(s.verdict.state, whole);
        for g in &s.gpus {
            for p in [verdict::Policy::default(), verdict::Policy { max_used: Some(1 << 30), holders_only: true }] {
                let _ = verdict::gpu(&s, g, &p);
            }
        }
        if let Ok(re) = regex::Regex::new(&pattern) {
            let f = diagnose_with(&s, &Options { pattern: Some((pattern.clone(), re)) });
            prop_assert!(f.iter().any(|x| x.kind() == FindingKind::Pattern));
        }
        present_all(&s)?;
        let some: Vec<u32> = s.gpus.iter().take(1).map(|g| g.index).collect();
        let narrowed = gpufree::pipeline::select(s, &gpufree::model::Selection::whole(some));
        present_all(&narrowed)?;
    }
}

fn huge(pid: u32, gpu: u32) -> Process {
    Process {
        pid,
        ppid: 1,
        comm: "python3".into(),
        cmdline: vec!["python3".into()],
        state: "S".into(),
        threads: 1,
        renamed: true,
        orphaned: true,
        protected: pid.is_multiple_of(2),
        gpu_memory: vec![GpuMemory {
            gpu,
            used_bytes: Some(u64::MAX),
        }],
        owner: Owner {
            kind: OwnerKind::SystemdUnit,
            id: "vllm.service".into(),
            name: "vllm.service".into(),
            claims: None,
        },
        ..Process::default()
    }
}

/// Memory sizes near u64::MAX from NVML: the holders' sums (live, renamed,
/// orphaned, protected, pattern misses), the memory of PIDs from another
/// namespace and of stale PIDs, and the verdict's unexplained memory all
/// overflowed `u64` in a debug build ("attempt to add with overflow").
#[test]
fn huge_memory_values_do_not_overflow_the_diagnosis() {
    let listed = |pid| NvmlProcess {
        pid,
        used_bytes: Some(u64::MAX),
        kind: NvmlProcessKind::Compute,
    };
    let mut s = Snapshot {
        gpus: vec![Gpu {
            index: 0,
            memory: Memory {
                total_bytes: u64::MAX,
                used_bytes: u64::MAX,
                unaccounted_bytes: u64::MAX,
                known: true,
                ..Memory::default()
            },
            nvml_processes: vec![listed(1), listed(2), listed(7), listed(8), listed(9)],
            ..Gpu::default()
        }],
        processes: vec![huge(1, 0), huge(2, 0), huge(3, 0), huge(4, 0)],
        visibility: Visibility {
            nvml_pids_not_visible: vec![7, 8],
            nvml_pids_stale: vec![9, 7],
            root: true,
            ..Visibility::default()
        },
        nvml: NvmlStatus {
            available: true,
            ..NvmlStatus::default()
        },
        ..Snapshot::default()
    };
    verdict::apply(&mut s);
    s.findings = diagnose(&s);
    assert_eq!(s.verdict.state, VerdictState::Busy);
    let f = diagnose_with(
        &s,
        &Options {
            pattern: Some(("nomatch".into(), regex::Regex::new("nomatch").unwrap())),
        },
    );
    assert!(f
        .iter()
        .any(|x| x.kind() == FindingKind::Pattern && x.bytes == u64::MAX));
    present_all(&s).unwrap();
}

/// A field longer than 65,535 characters (a comm in a fake /proc, a GPU
/// name from the driver) panicked the status table: "Formatting argument
/// out of range" (a format width is at most u16::MAX).
#[test]
fn a_65536_character_field_does_not_panic_the_status_table() {
    let mut s = Snapshot {
        gpus: vec![Gpu {
            index: 0,
            name: "n".repeat(65_536),
            ..Gpu::default()
        }],
        processes: vec![Process {
            comm: "c".repeat(65_536),
            devices: vec![DeviceUse {
                path: "/test-dev/nvidia0".into(),
                gpu: Some(0),
                via: vec![Via::Fd],
            }],
            ..huge(3, 0)
        }],
        ..Snapshot::default()
    };
    verdict::apply(&mut s);
    let mut out = Vec::new();
    table::write_status(&mut out, &s, &Printer::default()).unwrap();
    // (Whether the field is printed whole or cut is the table's choice.)
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("ccc") && text.contains("nnn"),
        "{}",
        &text[..200]
    );
}
