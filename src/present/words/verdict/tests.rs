//! Each reason, caveat and blind spot in the words the verdict has always
//! used (tests/it asserts many of them on the binary's output).

use super::*;
use crate::model::{Call, Failure, NvmlProcessKind, Unavailable, Unplaced};

const MIB: u64 = 1 << 20;

fn named(pid: u32, comm: &str) -> Named {
    Named {
        pid,
        comm: comm.into(),
    }
}

fn said(w: Why) -> String {
    reason(&Reason::new(w))
}

#[test]
fn holders_name_each_pid_and_comm_then_how_many_more() {
    assert_eq!(
        said(Why::Holders {
            holders: vec![named(10, "python3")]
        }),
        "1 process holds it: PID 10 (python3)"
    );
    let eight: Vec<Named> = (1..=8).map(|p| named(p, "w")).collect();
    assert_eq!(
        said(Why::Holders { holders: eight }),
        "8 processes hold it: PID 1 (w), PID 2 (w), PID 3 (w), PID 4 (w), PID 5 (w), PID 6 (w) and 2 more"
    );
}

#[test]
fn a_daemons_memory_and_nvml_listed_pids() {
    assert_eq!(
        said(Why::Daemon {
            holder: named(5, "Xorg"),
            bytes: 600 * MIB
        }),
        "driver daemon or display server PID 5 (Xorg) holds 600 MiB on it"
    );
    assert_eq!(
        said(Why::Zombie {
            pid: 20,
            ppid: 7,
            bytes: Some(1024 * MIB)
        }),
        "zombie PID 20 is still listed by NVML with 1,024 MiB: its parent PID 7 must reap it"
    );
    assert_eq!(
        said(Why::OtherNamespace {
            pid: 20,
            bytes: None
        }),
        "NVML lists PID 20 with memory, which this /proc does not have (another PID namespace)"
    );
    assert_eq!(
        said(Why::StalePid { pid: 21, bytes: Some(MIB) }),
        "NVML lists PID 21 with 1 MiB, but that PID here names a process that holds no GPU device node: the memory is kept by a process that had this PID before, or one that inherited its GPU files"
    );
}

#[test]
fn memory_no_process_holds_with_its_blind_spots() {
    assert_eq!(
        said(Why::DriverHeld {
            bytes: 4096 * MIB,
            reported: false
        }),
        "4,096 MiB used that no process holds: the driver's, inferred (not reported by the driver)"
    );
    assert_eq!(
        said(Why::DriverHeld {
            bytes: 4096 * MIB,
            reported: true
        }),
        "4,096 MiB used that no process holds: the driver has not released it, and reports a fault on this GPU"
    );
    let blind = vec![
        BlindSpot::ProcessList {
            unavailable: Unavailable {
                what: Call::Processes {
                    kind: NvmlProcessKind::Compute,
                },
                gpu: Some(0),
                why: Failure::NotSupported,
                unplaced: None,
            },
        },
        BlindSpot::KfdVram {
            unavailable: Unavailable {
                what: Call::KfdVram { pid: 40, gpu_id: 7 },
                gpu: None,
                why: Failure::KfdUnmapped {
                    gpu_id: 7,
                    bytes: 64 * MIB,
                },
                unplaced: Some(Unplaced::KfdVram),
            },
        },
        BlindSpot::Unreadable { pids: vec![1, 2] },
        BlindSpot::Hidepid,
    ];
    assert_eq!(
        said(Why::Unaccounted {
            bytes: 4096 * MIB,
            blind: blind.clone()
        }),
        "4,096 MiB used that NVML attributes to no process gpufree can see, and NVML's compute processes list is unavailable (NOT_SUPPORTED on this GPU or driver); KFD VRAM of PID 40 on KFD GPU id 7: the KFD topology maps GPU id 7 to no PCI device: 64 MiB cannot be placed on a GPU; 2 processes could not be read (PID 1, 2); /proc is mounted with hidepid: other users' processes are hidden"
    );
    // A DRM GPU's: no NVML words.
    let drm = vec![BlindSpot::DrmMemory {
        unavailable: Unavailable {
            what: Call::DrmUsage {
                pid: 40,
                client_id: 7,
            },
            gpu: Some(1),
            why: Failure::DrmNoUsage {
                driver: "amdgpu".into(),
            },
            unplaced: Some(Unplaced::DrmUsage),
        },
    }];
    assert_eq!(
        said(Why::Unaccounted {
            bytes: 4096 * MIB,
            blind: drm
        }),
        "4,096 MiB used that no DRM client or KFD process gpufree read accounts for, and memory of PID 40's DRM client 7: its amdgpu fdinfo has no drm-resident-, drm-total- or drm-memory- key (amdgpu before Linux 5.14, or a driver that reports no memory per client): unknown"
    );
    assert_eq!(
        said(Why::PartlyUnaccounted {
            bytes: 4096 * MIB,
            blind: vec![BlindSpot::Unreadable { pids: vec![1] }]
        }),
        "4,096 MiB unaccounted, and 1 process could not be read (PID 1)"
    );
}

#[test]
fn unreadable_processes_refused_nodes_and_unplaced_caps() {
    assert_eq!(
        said(Why::Unreadable {
            processes: vec![Failed {
                pid: 99,
                error: "timed out".into()
            }]
        }),
        "1 process could not be read, so what it may hold is unknown: PID 99: timed out"
    );
    assert_eq!(
        said(Why::Unreadable {
            processes: vec![
                Failed {
                    pid: 1,
                    error: "EIO".into()
                },
                Failed {
                    pid: 2,
                    error: "EIO".into()
                }
            ]
        }),
        "2 processes could not be read, so what they may hold is unknown: PID 1: EIO, PID 2: EIO"
    );
    assert_eq!(
        said(Why::RefusedNode {
            path: "/test-dev/nvidia0".into(),
            what: crate::model::NodeRefusal::NotDevice(crate::model::FileKind::Directory)
        }),
        "/test-dev/nvidia0 is not a GPU node (a directory, not a character device): holders of the real node may be unseen"
    );
    assert_eq!(
        said(Why::UnplacedMigCaps {
            unavailable: Unavailable {
                what: Call::MigCaps { pids: vec![3] },
                gpu: None,
                why: Failure::MigMinorsSilent,
                unplaced: Some(Unplaced::MigCaps),
            }
        }),
        "MIG capability nodes held by PID 3: the driver's mig-minors table does not name them; any of them may be on it"
    );
}

#[test]
fn memory_unknown_over_max_and_no_gpu() {
    let memory = |m| said(Why::MemoryUnknown { memory: m });
    assert_eq!(
        memory(MemoryUnknown::Sysfs {
            pci_bus_id: "0000:03:00.0".into()
        }),
        "its memory could not be read from sysfs (mem_info_vram_total and mem_info_vram_used of 0000:03:00.0)"
    );
    assert_eq!(
        memory(MemoryUnknown::NoNvml { error: None }),
        "NVML is unavailable, so its memory cannot be read (unknown error)"
    );
    assert_eq!(
        memory(MemoryUnknown::Nvml {
            failure: Some(crate::model::Failure::GpuIsLost)
        }),
        "its memory could not be read: GPU_IS_LOST: the GPU fell off the bus"
    );
    assert_eq!(
        memory(MemoryUnknown::Nvml { failure: None }),
        "its memory could not be read: NVML did not report it"
    );
    assert_eq!(
        said(Why::OverMaxUsed {
            used: 2048 * MIB,
            max: 1024 * MIB
        }),
        "2,048 MiB used, more than the 1,024 MiB allowed"
    );
    assert_eq!(said(Why::NoGpu), "no GPU to look at");
}

#[test]
fn the_releases_reasons() {
    let over = Reason::new(Why::MemoryOver {
        used: 900 * MIB,
        limit: 512 * MIB,
        listed: vec![7, 8],
    })
    .on(GpuName {
        index: 0,
        mig: Vec::new(),
    });
    assert_eq!(
        reason(&over),
        "GPU 0: 900 MiB used (expected at most 512 MiB), NVML still lists [7, 8]"
    );
    assert_eq!(
        said(Why::ReleaseUnproven {
            gpu: 1,
            reported: false,
            error: Some("no NVIDIA library".into())
        }),
        "the release cannot be proven: GPU 1: NVML did not report it (no NVIDIA library); --holders-only accepts the holders alone"
    );
    assert_eq!(
        said(Why::ReleaseUnproven {
            gpu: 1,
            reported: true,
            error: None
        }),
        "the release cannot be proven: GPU 1: its memory could not be read; --holders-only accepts the holders alone"
    );
    assert_eq!(
        said(Why::Unchecked {
            pid: 4,
            why: "could not be read again (EIO)".into()
        }),
        "PID 4 could not be read again (EIO); it was not signalled"
    );
    assert_eq!(
        said(Why::ChangedListed { pid: 4 }),
        "PID 4 changed before the signal (it exec'd or let go) and was not signalled, but NVML still lists it with memory"
    );
    assert_eq!(
        said(Why::ZombieStillListed { pid: 4, ppid: 3 }),
        "zombie PID 4 is still listed by NVML with its memory: its parent PID 3 must reap it"
    );
    assert_eq!(
        said(Why::NoFinalSnapshot {
            error: "EMFILE".into()
        }),
        "no final snapshot: EMFILE"
    );
    assert_eq!(said(Why::NotWaited), "not waited for (--no-wait)");
    assert_eq!(
        said(Why::Said {
            text: "as is".into()
        }),
        "as is"
    );
}

#[test]
fn a_reason_names_its_gpu_or_its_mig_devices() {
    let r = Reason::new(Why::NoGpu);
    let on = |mig: Vec<u32>| reason(&r.clone().on(GpuName { index: 2, mig }));
    assert_eq!(on(Vec::new()), "GPU 2: no GPU to look at");
    assert_eq!(on(vec![1, 3]), "GPU 2:1, 2:3: no GPU to look at");
    assert_eq!(
        reasons_line(&[r.clone(), r]),
        "no GPU to look at; no GPU to look at"
    );
}

#[test]
fn each_caveat() {
    assert_eq!(
        caveat(&Caveat::HoldersOnly {
            driver: Some("i915".into())
        }),
        "i915 publishes no used memory: free means that no process holds the GPU"
    );
    assert_eq!(
        caveat(&Caveat::HoldersOnly { driver: None }),
        "its driver publishes no used memory: free means that no process holds the GPU"
    );
    assert_eq!(
        caveat(&Caveat::MemoryNotChecked {
            memory: MemoryUnknown::NoNvml {
                error: Some("no NVIDIA library".into())
            }
        }),
        "memory not checked (--holders-only): NVML is unavailable, so its memory cannot be read (no NVIDIA library)"
    );
    assert_eq!(
        caveat(&Caveat::PermissionDenied {
            pids: vec![1],
            root: true,
            accounted: true
        }),
        "1 process could not be read (permission denied: PID 1); NVML accounts for the memory"
    );
    assert_eq!(
        caveat(&Caveat::PermissionDenied {
            pids: vec![1, 2],
            root: false,
            accounted: false
        }),
        "2 processes could not be read (permission denied: PID 1, 2); reading their fd tables and maps (/proc/PID/fd, /proc/PID/maps) needs root, or CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH: run gpufree with sudo"
    );
    assert_eq!(
        caveat(&Caveat::Hidepid { accounted: true }),
        "/proc is mounted with hidepid: other users' processes are hidden; NVML accounts for the memory"
    );
    assert_eq!(
        caveat(&Caveat::Hidepid { accounted: false }),
        "/proc is mounted with hidepid: other users' processes are hidden"
    );
}

#[test]
fn what_a_target_still_holds_and_who_started_it_again() {
    let memory = Holds::Memory {
        on: vec![
            crate::model::OnGpu {
                gpu: 0,
                bytes: Some(1024 * MIB),
            },
            crate::model::OnGpu {
                gpu: 1,
                bytes: None,
            },
        ],
    };
    let nodes = Holds::Nodes {
        nodes: vec!["nvidia0".into(), "nvidiactl".into()],
    };
    assert_eq!(holds(&memory), "1,024 MiB on GPU 0, n/a on GPU 1");
    assert_eq!(
        said(Why::StillHolds {
            holder: named(7, "python3"),
            holds: nodes.clone(),
            asleep: false,
            wchan: None
        }),
        "PID 7 (python3) still holds nvidia0, nvidiactl"
    );
    assert_eq!(
        said(Why::StillHolds {
            holder: named(7, "python3"),
            holds: memory.clone(),
            asleep: true,
            wchan: Some("os_wait".into())
        }),
        "PID 7 (python3) still holds 1,024 MiB on GPU 0, n/a on GPU 1, in uninterruptible sleep in os_wait: SIGKILL acts when that kernel wait ends (usually seconds); one that lasts minutes is a hung driver call, which only a reset ends (`gpufree why` prints the plan)"
    );
    let again = |how| {
        said(Why::Restarted {
            holder: named(9, "python3"),
            holds: nodes.clone(),
            how,
        })
    };
    let free = Selection::whole(vec![0]);
    assert_eq!(
        again(Restart::Child { parent: 7 }),
        "PID 9 (python3), a child of target 7, still holds nvidia0, nvidiactl; it was not a target (free the GPU with --gpu, or name it)"
    );
    assert_eq!(
        again(Restart::ByParent {
            target: 7,
            parent: 2,
            parent_comm: Some("sup".into()),
            free: free.clone()
        }),
        "PID 9 (python3) holds nvidia0, nvidiactl: target 7's parent, PID 2 (sup), started it again during the kill; a supervisor restarts what dies: stop PID 2 first, then free the GPU: `gpufree kill --gpu 0`"
    );
    assert_eq!(
        again(Restart::ByUnit {
            target: 7,
            unit: "vllm.service".into(),
            stop: None,
            parent: 1,
            free: free.clone()
        }),
        "PID 9 (python3) holds nvidia0, nvidiactl: target 7's unit vllm.service started it again during the kill; a supervisor restarts what dies: stop PID 1 first, then free the GPU: `gpufree kill --gpu 0`"
    );
    assert_eq!(
        again(Restart::ByUnit {
            target: 7,
            unit: "vllm.service".into(),
            stop: Some("systemctl stop vllm.service".into()),
            parent: 1,
            free
        }),
        "PID 9 (python3) holds nvidia0, nvidiactl: target 7's unit vllm.service started it again during the kill; a supervisor restarts what dies: `systemctl stop vllm.service`"
    );
    assert_eq!(
        again(Restart::Beside { target: 7 }),
        "PID 9 (python3), started during the kill beside target 7, holds nvidia0, nvidiactl"
    );
}
