//! Tests of a GPU in MIG mode: what each MIG device and the parent report.

use super::*;
use crate::state::{State, Visibility};
use std::path::Path;

/// Two instances: 1g (gi 9, ci 0) with PID 7 alive and PID 8 gone, 3g
/// (gi 2, ci 0) with PID 9 from another namespace; baseline 10, leak 5.
fn h200() -> Device {
    let state = State::parse(
        br#"{"devices":[{"name":"NVIDIA H200","uuid":"GPU-a","pci_bus_id":"00000000:01:00.0",
        "minor_number":0,"memory_total_bytes":10000,"memory_baseline_bytes":10,"leaked_bytes":5,
        "mig_mode":true,"mig":[
          {"uuid":"MIG-1","gpu_instance_id":9,"compute_instance_id":0,"profile":"1g.18gb",
           "memory_total_bytes":1000,
           "processes":[{"pid":7,"used_bytes":100},{"pid":8,"used_bytes":40}]},
          {"uuid":"MIG-2","gpu_instance_id":2,"profile":"3g.71gb","memory_total_bytes":4000,
           "processes":[{"pid":9,"used_bytes":300,"visible":"always"}]}]}]}"#,
        Path::new("s.json"),
    )
    .unwrap();
    state.devices[0].clone()
}

fn look(d: &Device, t: Target) -> Option<TargetView> {
    let mut log = GoneLog::default();
    let mut changed = false;
    view_target(d, t, 0, &|pid, _| pid == 7, &mut log, &mut changed)
}

#[test]
fn each_mig_device_reports_its_own_processes_and_memory() {
    let d = h200();
    let one = look(&d, Target::Mig(0)).unwrap();
    assert_eq!((one.used_bytes, one.total_bytes), (100, 1000));
    assert_eq!(one.processes.len(), 1, "PID 8 is gone");
    assert_eq!(one.processes[0].pid, 7);
    assert_eq!(
        (
            one.processes[0].gpu_instance_id,
            one.processes[0].compute_instance_id
        ),
        (Some(9), Some(0))
    );
    let three = look(&d, Target::Mig(1)).unwrap();
    assert_eq!((three.used_bytes, three.total_bytes), (300, 4000));
    assert_eq!(three.processes[0].gpu_instance_id, Some(2));
    assert!(look(&d, Target::Mig(2)).is_none(), "no third MIG device");
}

#[test]
fn the_parent_in_mig_mode_reports_every_instance_over_its_baseline() {
    let d = h200();
    let all = look(&d, Target::Whole).unwrap();
    assert_eq!(all.used_bytes, 10 + 5 + 100 + 300);
    assert_eq!(all.total_bytes, 10000);
    let ids: Vec<_> = all
        .processes
        .iter()
        .map(|p| (p.pid, p.gpu_instance_id))
        .collect();
    assert_eq!(ids, [(7, Some(9)), (9, Some(2))]);
}

#[test]
fn a_gpu_out_of_mig_mode_has_no_mig_devices_and_no_instance_ids() {
    let mut d = h200();
    d.mig_mode = Some(false);
    d.mig.clear();
    d.processes = vec![Process {
        pid: 7,
        used_bytes: 50,
        kind: ProcessKind::Compute,
        visible: Visibility::WhileAlive,
        start_time_ticks: None,
        sm_util: None,
        mem_util: None,
    }];
    assert!(look(&d, Target::Mig(0)).is_none());
    let all = look(&d, Target::Whole).unwrap();
    assert_eq!(all.processes[0].gpu_instance_id, None);
    assert_eq!(all.used_bytes, 65);
}

#[test]
fn inconsistent_mig_states_are_refused_naming_the_device() {
    let bad = [
        (
            r#""mig":[{"uuid":"MIG-1","gpu_instance_id":1,"memory_total_bytes":1}]"#,
            "mig_mode",
        ),
        (
            r#""mig_mode":true,"processes":[{"pid":1,"used_bytes":1}]"#,
            "mig[].processes",
        ),
        (
            r#""mig_mode":true,"mig":[{"uuid":"MIG-1","gpu_instance_id":1,"memory_total_bytes":1},
               {"uuid":"MIG-2","gpu_instance_id":1,"memory_total_bytes":1}]"#,
            "repeats",
        ),
        (
            r#""mig_mode":true,"mig":[{"uuid":"","gpu_instance_id":1,"memory_total_bytes":1}]"#,
            "uuid",
        ),
    ];
    for (extra, says) in bad {
        let text = format!(
            r#"{{"devices":[{{"name":"G","uuid":"GPU-1","pci_bus_id":"0","minor_number":0,
            "memory_total_bytes":10,{extra}}}]}}"#
        );
        let e = State::parse(text.as_bytes(), Path::new("s.json")).unwrap_err();
        assert!(e.0.contains("device 0") && e.0.contains(says), "{e}");
    }
    let eight: Vec<String> = (0..8)
        .map(|i| format!(r#"{{"uuid":"MIG-{i}","gpu_instance_id":{i},"memory_total_bytes":1}}"#))
        .collect();
    let text = format!(
        r#"{{"devices":[{{"name":"G","uuid":"GPU-1","pci_bus_id":"0","minor_number":0,
        "memory_total_bytes":10,"mig_mode":true,"mig":[{}]}}]}}"#,
        eight.join(",")
    );
    let e = State::parse(text.as_bytes(), Path::new("s.json")).unwrap_err();
    assert!(e.0.contains("more than 7"), "{e}");
}
