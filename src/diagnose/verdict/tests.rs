//! Tests of `verdict`.

use super::*;
use crate::model::{
    BlindSpot, Call, DeviceUse, Failure, GpuMemory, Memory, NvmlProcess, NvmlProcessKind, Process,
    Unavailable, Unreadable, Via,
};

const GIB: u64 = 1 << 30;

fn a_gpu(used: u64, accounted: u64) -> Gpu {
    Gpu {
        index: 0,
        memory: Memory {
            total_bytes: 80 * GIB,
            used_bytes: used,
            accounted_bytes: accounted,
            unaccounted_bytes: used - accounted,
            known: true,
            ..Memory::default()
        },
        ..Gpu::default()
    }
}

fn snap(g: Gpu, processes: Vec<Process>) -> Snapshot {
    crate::diagnose::tests::base(vec![g], processes)
}

fn holder(pid: u32, bytes: Option<u64>) -> Process {
    Process {
        pid,
        ppid: 1,
        comm: "python3".into(),
        state: "S".into(),
        threads: 1,
        gpu_memory: bytes
            .map(|b| {
                vec![GpuMemory {
                    gpu: 0,
                    used_bytes: Some(b),
                }]
            })
            .unwrap_or_default(),
        devices: vec![DeviceUse {
            path: "/test-dev/nvidia0".into(),
            gpu: Some(0),
            via: vec![Via::Fd],
        }],
        ..Process::default()
    }
}

fn listed(pid: u32, bytes: u64) -> NvmlProcess {
    NvmlProcess {
        pid,
        used_bytes: Some(bytes),
        kind: NvmlProcessKind::Compute,
    }
}

fn unreadable(pid: u32, reason: UnreadableReason) -> Unreadable {
    Unreadable {
        pid,
        comm: None,
        reason,
        why: format!("{reason:?}"),
    }
}

fn judge(s: &Snapshot) -> Verdict {
    gpu(s, &s.gpus[0], &Policy::default())
}

#[test]
fn holders_make_a_gpu_busy_and_protected_daemons_do_not() {
    let mut g = a_gpu(GIB, GIB);
    g.nvml_processes = vec![listed(10, GIB)];
    let v = judge(&snap(g, vec![holder(10, Some(GIB))]));
    assert_eq!(v.state, VerdictState::Busy);
    assert_eq!(
        v.reasons[0].why,
        Why::Holders {
            holders: vec![Named {
                pid: 10,
                comm: "python3".into()
            }]
        }
    );
    let mut daemon = holder(11, None);
    daemon.protected = true;
    assert_eq!(
        judge(&snap(a_gpu(0, 0), vec![daemon])).state,
        VerdictState::Free
    );
}

#[test]
fn a_listed_zombie_or_a_pid_of_another_namespace_is_busy() {
    let mut g = a_gpu(GIB, GIB);
    g.nvml_processes = vec![listed(20, GIB)];
    let mut z = holder(20, Some(GIB));
    z.state = "Z".into();
    z.ppid = 7;
    z.devices.clear();
    let v = judge(&snap(g.clone(), vec![z]));
    assert_eq!(v.state, VerdictState::Busy);
    assert_eq!(
        v.reasons[0].why,
        Why::Zombie {
            pid: 20,
            ppid: 7,
            bytes: Some(GIB)
        }
    );
    let mut s = snap(g, vec![]);
    s.visibility.nvml_pids_not_visible = vec![20];
    let v = judge(&s);
    assert_eq!(v.state, VerdictState::Busy);
    assert_eq!(
        v.reasons[0].why,
        Why::OtherNamespace {
            pid: 20,
            bytes: Some(GIB)
        }
    );
}

#[test]
fn no_nvml_or_unknown_memory_is_unknown_unless_holders_only() {
    let mut s = snap(a_gpu(0, 0), vec![]);
    s.nvml.available = false;
    s.nvml.error = Some(crate::model::NvmlDown::NoLibrary {
        library: "libnvidia-ml.so.1".into(),
        error: "no such file".into(),
    });
    let v = judge(&s);
    assert_eq!(v.state, VerdictState::Unknown);
    let no_nvml = MemoryUnknown::NoNvml {
        error: Some("no NVIDIA library (libnvidia-ml.so.1, searched in LD_LIBRARY_PATH, /etc/ld.so.cache, /lib, /usr/lib; name it with --nvml-lib or GPUFREE_NVML_LIB): no such file".into()),
    };
    assert_eq!(
        v.reasons,
        vec![Reason::new(Why::MemoryUnknown {
            memory: no_nvml.clone()
        })]
    );
    let only = Policy {
        holders_only: true,
        ..Policy::default()
    };
    let v = gpu(&s, &s.gpus[0], &only);
    assert_eq!(v.state, VerdictState::Free);
    assert_eq!(
        v.caveats,
        vec![Caveat::MemoryNotChecked { memory: no_nvml }]
    );
    s.processes.push(holder(5, None));
    assert_eq!(gpu(&s, &s.gpus[0], &only).state, VerdictState::Busy);
    // A lost GPU: NVML answers, but not for its memory.
    let mut lost = snap(a_gpu(0, 0), vec![]);
    lost.gpus[0].memory.known = false;
    lost.unavailable.push(Unavailable {
        what: Call::Memory,
        gpu: Some(0),
        why: Failure::GpuIsLost,
        unplaced: None,
    });
    let v = judge(&lost);
    assert_eq!(v.state, VerdictState::Unknown);
    assert_eq!(
        v.reasons[0].why,
        Why::MemoryUnknown {
            memory: MemoryUnknown::Nvml {
                failure: Some(Failure::GpuIsLost)
            }
        }
    );
}

#[test]
fn memory_nobody_holds_is_a_leak_only_when_everything_was_seen() {
    let leak = snap(a_gpu(4 * GIB, 0), vec![]);
    let v = judge(&leak);
    assert_eq!(v.state, VerdictState::Busy);
    assert_eq!(
        v.reasons[0].why,
        Why::DriverHeld {
            bytes: 4 * GIB,
            reported: false
        }
    );
    let mut denied = leak.clone();
    denied.visibility.unreadable = vec![unreadable(1, UnreadableReason::Permission)];
    let v = judge(&denied);
    assert_eq!(v.state, VerdictState::Unknown);
    assert_eq!(
        v.reasons[0].why,
        Why::Unaccounted {
            bytes: 4 * GIB,
            blind: vec![BlindSpot::Unreadable { pids: vec![1] }]
        }
    );
    let mut no_lists = leak.clone();
    no_lists.unavailable.push(Unavailable {
        what: Call::Processes {
            kind: NvmlProcessKind::Compute,
        },
        gpu: Some(0),
        why: Failure::NotSupported,
        unplaced: None,
    });
    assert_eq!(judge(&no_lists).state, VerdictState::Unknown);
    // Within the idle slack it is the baseline, not a leak.
    assert_eq!(
        judge(&snap(a_gpu(IDLE_SLACK_BYTES, 0), vec![])).state,
        VerdictState::Free
    );
}

#[test]
fn unreadable_processes_are_caveats_but_failed_reads_make_it_unknown() {
    let mut s = snap(a_gpu(0, 0), vec![]);
    s.visibility.unreadable = vec![unreadable(1, UnreadableReason::Permission)];
    let v = judge(&s);
    assert_eq!(v.state, VerdictState::Free);
    assert_eq!(
        v.caveats,
        vec![Caveat::PermissionDenied {
            pids: vec![1],
            root: true,
            accounted: true
        }]
    );
    s.visibility
        .unreadable
        .push(unreadable(99, UnreadableReason::Timeout));
    let v = judge(&s);
    assert_eq!(v.state, VerdictState::Unknown);
    assert_eq!(
        v.reasons[0].why,
        Why::Unreadable {
            processes: vec![Failed {
                pid: 99,
                error: "Timeout".into()
            }]
        }
    );
    let mut hidden = snap(a_gpu(0, 0), vec![]);
    hidden.visibility.hidepid = true;
    hidden.visibility.root = false;
    let v = judge(&hidden);
    assert_eq!(v.state, VerdictState::Free);
    assert_eq!(v.caveats, vec![Caveat::Hidepid { accounted: true }]);
}

#[test]
fn max_used_decides_by_memory_alone() {
    let s = snap(a_gpu(GIB, GIB), vec![holder(10, Some(GIB))]);
    let at = |max| Policy {
        max_used: Some(max),
        ..Policy::default()
    };
    assert_eq!(gpu(&s, &s.gpus[0], &at(2 * GIB)).state, VerdictState::Free);
    assert_eq!(gpu(&s, &s.gpus[0], &at(GIB / 2)).state, VerdictState::Busy);
    let mut blind = s.clone();
    blind.gpus[0].memory.known = false;
    assert_eq!(
        gpu(&blind, &blind.gpus[0], &at(2 * GIB)).state,
        VerdictState::Unknown
    );
}

#[test]
fn overall_busy_beats_unknown_beats_free_and_no_gpu_is_unknown() {
    let mut s = snap(a_gpu(0, 0), vec![]);
    let mut lost = a_gpu(0, 0);
    lost.index = 1;
    lost.memory.known = false;
    s.gpus.push(lost);
    let v = overall(&s, &Policy::default());
    assert_eq!(v.state, VerdictState::Unknown);
    assert_eq!(
        v.reasons[0].gpu,
        Some(GpuName {
            index: 1,
            mig: Vec::new()
        })
    );
    s.processes.push(holder(3, None));
    assert_eq!(overall(&s, &Policy::default()).state, VerdictState::Busy);
    s.gpus.clear();
    assert_eq!(overall(&s, &Policy::default()).state, VerdictState::Unknown);
}

#[test]
fn a_refused_node_makes_the_gpus_it_names_unknown_even_holders_only() {
    let mut s = snap(a_gpu(0, 0), vec![]);
    let mut other = a_gpu(0, 0);
    other.index = 1;
    s.gpus.push(other);
    s.visibility.refused_nodes.push(crate::model::RefusedNode {
        path: "/test-dev/nvidia0".into(),
        why: crate::model::NodeRefusal::NotDevice(crate::model::FileKind::Directory),
        gpus: vec![0],
    });
    let only = Policy {
        holders_only: true,
        ..Policy::default()
    };
    for policy in [Policy::default(), only] {
        let v = gpu(&s, &s.gpus[0], &policy);
        assert_eq!(v.state, VerdictState::Unknown, "{v:?}");
        assert_eq!(
            v.reasons[0].why,
            Why::RefusedNode {
                path: "/test-dev/nvidia0".into(),
                what: crate::model::NodeRefusal::NotDevice(crate::model::FileKind::Directory)
            }
        );
        assert_eq!(gpu(&s, &s.gpus[1], &policy).state, VerdictState::Free);
    }
    // A holder seen through another node still makes it busy.
    s.processes.push(holder(5, None));
    assert_eq!(judge(&s).state, VerdictState::Busy);
    // `--max-used` judges the memory alone, whoever holds it.
    let max = Policy {
        max_used: Some(0),
        ..Policy::default()
    };
    assert_eq!(gpu(&s, &s.gpus[0], &max).state, VerdictState::Free);
}
