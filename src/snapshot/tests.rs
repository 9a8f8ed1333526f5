//! Selectors and the memory refresh, tested from values.

use super::*;
use crate::model::Gpu;
use crate::model::Memory;

fn gpu(index: u32, uuid: &str, bus: &str) -> Gpu {
    Gpu {
        index,
        uuid: uuid.into(),
        pci_bus_id: bus.into(),
        ..Gpu::default()
    }
}

#[test]
fn refresh_memory_folds_nvml_into_the_snapshot_until_the_process_set_changes() {
    use crate::model::{GpuMemory, NvmlProcess, NvmlProcessKind, Process};
    let nvml = |pid: u32, used: u64| NvmlProcess {
        pid,
        used_bytes: Some(used),
        kind: NvmlProcessKind::Compute,
    };
    let mut g = gpu(0, "GPU-0", "00000000:01:00.0");
    g.memory = Memory {
        total_bytes: 1000,
        used_bytes: 100,
        accounted_bytes: 100,
        known: true,
        ..Memory::default()
    };
    g.nvml_processes = vec![nvml(5, 100)];
    let up = crate::model::NvmlStatus {
        available: true,
        ..crate::model::NvmlStatus::default()
    };
    let mut snap = Snapshot {
        gpus: vec![g.clone()],
        processes: vec![Process {
            pid: 5,
            state: "S".into(),
            gpu_memory: vec![GpuMemory {
                gpu: 0,
                used_bytes: Some(100),
            }],
            ..Process::default()
        }],
        nvml: up.clone(),
        ..Snapshot::default()
    };
    let mut later = g.clone();
    later.memory.used_bytes = 300;
    later.nvml_processes = vec![nvml(5, 250)];
    let report = NvmlReport {
        gpus: vec![later.clone()],
        status: up.clone(),
        ..NvmlReport::default()
    };
    assert!(fold_memory(&mut snap, &report));
    assert_eq!(snap.gpus[0].memory.used_bytes, 300);
    assert_eq!(snap.gpus[0].memory.accounted_bytes, 250);
    assert_eq!(snap.gpus[0].memory.unaccounted_bytes, 50);
    assert_eq!(snap.processes[0].gpu_memory[0].used_bytes, Some(250));
    later.nvml_processes.push(nvml(6, 10));
    let before = snap.clone();
    assert!(
        !fold_memory(
            &mut snap,
            &NvmlReport {
                gpus: vec![later.clone()],
                status: up.clone(),
                ..NvmlReport::default()
            }
        ),
        "a new PID needs a full snapshot"
    );
    assert_eq!(snap, before);
    let hung = NvmlReport {
        status: crate::model::NvmlStatus {
            available: false,
            error: Some("NVML did not answer within 5.0 s".into()),
            ..up.clone()
        },
        ..NvmlReport::default()
    };
    assert!(
        !fold_memory(&mut snap, &hung),
        "NVML failing now needs a full snapshot, not the old memory"
    );
}

#[test]
fn selectors_parse_and_resolve() {
    let mut gpus = [
        gpu(0, "GPU-7f3a0000-aaaa", "00000000:01:00.0"),
        gpu(1, "GPU-7f3b0000-bbbb", "00000000:C1:00.0"),
    ];
    gpus[1].mig_mode = Some(true);
    gpus[1].mig_devices = [
        "MIG-5c1e0000-1111",
        "MIG-5c2f0000-2222",
        "MIG-5c2f0000-3333",
    ]
    .iter()
    .zip(0..)
    .map(|(uuid, index)| crate::model::MigDevice {
        index,
        uuid: uuid.to_string(),
        ..Default::default()
    })
    .collect();
    let r = |s: &[&str]| {
        let sels: Vec<GpuSelector> = s.iter().map(|x| x.parse().unwrap()).collect();
        resolve(&gpus, &sels)
            .map(|sel| sel.gpus)
            .map_err(|e| crate::present::words::selector::gpu_miss(&e))
    };
    let mig = |s: &[&str]| {
        let sels: Vec<GpuSelector> = s.iter().map(|x| x.parse().unwrap()).collect();
        resolve(&gpus, &sels)
            .map(|sel| sel.names())
            .map_err(|e| crate::present::words::selector::gpu_miss(&e))
    };
    // MIG devices by GPU:MIG and by UUID (or a unique prefix); a GPU
    // named whole as well is whole.
    assert_eq!(mig(&["1:2"]).unwrap(), ["1:2"]);
    assert_eq!(r(&["1:2"]).unwrap(), [1]);
    assert_eq!(mig(&["MIG-5c1e", "1:2"]).unwrap(), ["1:0", "1:2"]);
    assert_eq!(mig(&["mig-5c2f0000-3333"]).unwrap(), ["1:2"]);
    assert_eq!(mig(&["1:0", "1"]).unwrap(), ["1"]);
    assert!(mig(&["MIG-5c2f"])
        .unwrap_err()
        .contains("several MIG devices"));
    // Only plain decimal is GPU:MIG: `01:00` is a PCI address cut short.
    for odd in ["01:00", "0:01", "+0:1", "1:+2"] {
        assert!(!matches!(odd.parse(), Ok(GpuSelector::Mig(..))), "{odd}");
    }
    assert!(mig(&["1:3"])
        .unwrap_err()
        .contains("--gpu 1:3: no such GPU or MIG device (MIG devices here: 1:0, 1:1, 1:2)"));
    assert!(mig(&["0:0"]).unwrap_err().contains("--gpu 0:0"));
    assert!(mig(&["MIG-ffff"]).is_err());
    assert_eq!(r(&[]).unwrap(), vec![0, 1]);
    assert_eq!(r(&["all"]).unwrap(), vec![0, 1]);
    assert_eq!(r(&["1"]).unwrap(), vec![1]);
    assert_eq!(r(&["GPU-7f3b"]).unwrap(), vec![1]);
    assert_eq!(r(&["gpu-7f3b"]).unwrap(), vec![1]);
    assert_eq!(r(&["7f3a"]).unwrap(), vec![0]);
    assert_eq!(r(&["c1:00.0"]).unwrap(), vec![1]);
    assert_eq!(r(&["0000:01:00.0", "1"]).unwrap(), vec![0, 1]);
    assert!(r(&["GPU-7f3"]).unwrap_err().contains("several"));
    assert!(r(&["5"]).unwrap_err().contains("--gpu 5: no such GPU"));
    assert!("".parse::<GpuSelector>().is_err());
    assert!("zz:1".parse::<GpuSelector>().is_err());
    assert!("lots".parse::<GpuSelector>().is_err());
}

#[test]
fn a_refused_node_names_the_gpus_whose_holders_it_may_hide() {
    use crate::model::Vendor;
    use crate::proc::nodes::Refused;
    use std::path::PathBuf;
    let refused = |rel: &str| Refused {
        rel: rel.into(),
        path: PathBuf::from("/d").join(rel),
        kind: crate::proc::nodes::classify(rel).unwrap(),
        why: crate::model::NodeRefusal::NotDevice(crate::model::FileKind::Directory),
    };
    let mut nodes = NodeSet::default();
    nodes.refused = ["nvidia1", "nvidia7", "nvidia-uvm", "kfd", "dri/renderD128"]
        .map(refused)
        .to_vec();
    // NVML numbers GPUs apart from their minors; GPU 2's minor is unknown;
    // GPU 3 is an AMD GPU.
    let mut gpus = vec![
        gpu(0, "GPU-0", "00000000:01:00.0"),
        gpu(1, "GPU-1", "00000000:02:00.0"),
        gpu(2, "GPU-2", "00000000:03:00.0"),
        gpu(3, "", "0000:c3:00.0"),
    ];
    gpus[0].minor_number = Some(1);
    gpus[1].minor_number = Some(0);
    gpus[3].vendor = Vendor::Amd;
    let drm = drm::add_gpus(&mut gpus.clone(), &drm::DrmHost::default(), &nodes);
    let by_path: BTreeMap<String, Vec<u32>> = refused::refused_nodes(&nodes, &gpus, &drm)
        .into_iter()
        .map(|r| (r.path, r.gpus))
        .collect();
    assert_eq!(
        by_path["/d/nvidia1"],
        [0, 2],
        "minor 1, and the unknown minor"
    );
    assert_eq!(by_path["/d/nvidia7"], [2], "no GPU has minor 7");
    assert_eq!(by_path["/d/nvidia-uvm"], [0, 1, 2], "every NVIDIA GPU");
    assert_eq!(by_path["/d/kfd"], [3], "every AMD GPU");
    assert_eq!(by_path["/d/dri/renderD128"], [0, 1, 2, 3], "placed nowhere");
}
