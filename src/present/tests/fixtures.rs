//! Builders of snapshot values for the golden tests: fixed PIDs, start
//! times, paths and sizes, so that every presenter's output is the same on
//! every run. Nothing is read from the system; the device paths name
//! `/test-dev`, never the real one.

use crate::diagnose::Options;
use crate::model::{
    DeviceUse, Gpu, Memory, NvmlProcess, NvmlProcessKind, NvmlStatus, Owner, OwnerKind, Process,
    Snapshot, Via, Visibility,
};

/// The device directory every fixture names.
const DEV: &str = "/test-dev";
/// The verdicts and the findings of `s`, as the pipeline sets them.
pub(super) fn judged(mut s: Snapshot, opts: &Options) -> Snapshot {
    crate::pipeline::judge_with(&mut s, opts);
    s
}

/// A complete view as root with NVML answering.
pub(super) fn base(gpus: Vec<Gpu>, processes: Vec<Process>, scanned: u32) -> Snapshot {
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

pub(super) fn node(name: &str, gpu: Option<u32>, via: &[Via]) -> DeviceUse {
    DeviceUse {
        path: format!("{DEV}/{name}"),
        gpu,
        via: via.to_vec(),
    }
}

pub(super) fn gpu(index: u32, name: &str, total: u64, used: u64, listed: &[(u32, u64)]) -> Gpu {
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

pub(super) fn unit(name: &str) -> Owner {
    Owner {
        kind: OwnerKind::SystemdUnit,
        id: name.into(),
        name: name.into(),
        claims: None,
    }
}
