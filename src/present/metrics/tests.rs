//! The metrics of a snapshot value: base units, labels, no command line unless asked.

use super::*;
use crate::model::{
    Evidence, Finding, Gpu, GpuMemory, Memory, Next, Owner, OwnerKind, Process, Severity,
};

#[test]
fn gpus_holders_and_findings_in_base_units() {
    let s = Snapshot {
        gpus: vec![Gpu {
            index: 3,
            uuid: "GPU-3".into(),
            name: "H200".into(),
            memory: Memory {
                total_bytes: 100,
                used_bytes: 60,
                accounted_bytes: 40,
                unaccounted_bytes: 20,
                known: true,
                ..Memory::default()
            },
            ..Gpu::default()
        }],
        processes: vec![Process {
            pid: 77,
            comm: "python3".into(),
            cmdline: vec!["python3".into(), "--token=secret".into()],
            user: "alice".into(),
            orphaned: true,
            owner: Owner {
                kind: OwnerKind::SystemdUnit,
                id: "vllm.service".into(),
                name: "vllm.service".into(),
                claims: None,
            },
            gpu_memory: vec![GpuMemory {
                gpu: 3,
                used_bytes: Some(40),
            }],
            ..Process::default()
        }],
        findings: vec![Finding {
            severity: Severity::Warning,
            pids: vec![77],
            gpus: vec![3],
            bytes: 40,
            next: Next::Nothing,
            evidence: Evidence::Orphans(Vec::new()),
        }],
        ..Snapshot::default()
    };
    let text = render(&s, &Extra::default());
    assert!(
        text.contains(
            r#"gpufree_gpu_memory_unaccounted_bytes{gpu="3",uuid="GPU-3",name="H200"} 20"#
        ),
        "{text}"
    );
    assert!(text.contains(r#"gpufree_process_gpu_memory_bytes{gpu="3",uuid="GPU-3",pid="77",comm="python3",user="alice",owner_kind="systemd-unit",owner="vllm.service",orphaned="true",renamed="false"} 40"#), "{text}");
    assert!(text.contains(r#"gpufree_findings{kind="orphans",gpu="3"} 1"#));
    assert!(text.contains(r#"gpufree_gpu_holders{gpu="3",uuid="GPU-3",kind="memory"} 1"#));
    assert!(!text.contains("secret"), "no command line unless asked");
    assert!(text.ends_with("# EOF\n"));
    let with = render(
        &s,
        &Extra {
            label_cmdline: true,
            ..Extra::default()
        },
    );
    assert!(with.contains(r#"cmdline="python3 --token=secret""#));
    assert!(!render_textfile(&s, &Extra::default()).contains("# EOF"));
}

#[test]
fn the_drivers_evidence_per_gpu_and_nothing_where_not_supported() {
    use crate::model::{DriverEvidence, Reading, RecoveryAction, Remap, XidReport};
    let x = |xid: u32| XidReport {
        xid,
        ..XidReport::default()
    };
    let s = Snapshot {
        gpus: vec![
            Gpu {
                index: 0,
                uuid: "GPU-0".into(),
                driver_evidence: Some(DriverEvidence {
                    recovery_action: Reading::Value(RecoveryAction::GpuReset),
                    remapped_rows: Reading::Value(Remap {
                        pending: true,
                        ..Remap::default()
                    }),
                    xids: vec![x(48), x(31), x(48)],
                    ..DriverEvidence::default()
                }),
                ..Gpu::default()
            },
            Gpu {
                index: 1,
                uuid: "GPU-1".into(),
                driver_evidence: Some(DriverEvidence::default()),
                ..Gpu::default()
            },
        ],
        ..Snapshot::default()
    };
    let text = render(&s, &Extra::default());
    for line in [
        r#"gpufree_gpu_recovery_action{gpu="0",uuid="GPU-0",action="gpu_reset"} 1"#,
        r#"gpufree_gpu_recovery_action{gpu="0",uuid="GPU-0",action="none"} 0"#,
        r#"gpufree_gpu_row_remap{gpu="0",uuid="GPU-0",state="pending"} 1"#,
        r#"gpufree_gpu_row_remap{gpu="0",uuid="GPU-0",state="failure"} 0"#,
        r#"gpufree_gpu_xid_reports{gpu="0",uuid="GPU-0",xid="48"} 2"#,
        r#"gpufree_gpu_xid_reports{gpu="0",uuid="GPU-0",xid="31"} 1"#,
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
    assert!(
        text.lines()
            .filter(|l| l.contains(r#"gpu="1""#))
            .all(|l| !l.contains("recovery") && !l.contains("remap")),
        "not supported is no series: {text}"
    );
}

#[test]
fn holders_export_their_sm_utilisation_and_idleness_only_where_answered() {
    use crate::model::{DriverEvidence, ProcessUtil, Reading};
    let holder = |pid: u32, gpu: u32| Process {
        pid,
        comm: "python3".into(),
        state: "S".into(),
        threads: 1,
        gpu_memory: vec![GpuMemory {
            gpu,
            used_bytes: Some(1 << 30),
        }],
        ..Process::default()
    };
    let s = Snapshot {
        gpus: vec![
            Gpu {
                index: 0,
                uuid: "GPU-0".into(),
                driver_evidence: Some(DriverEvidence {
                    process_utilization: Reading::Value(vec![ProcessUtil {
                        pid: 10,
                        sm: 42,
                        ..ProcessUtil::default()
                    }]),
                    ..DriverEvidence::default()
                }),
                ..Gpu::default()
            },
            Gpu {
                index: 1,
                uuid: "GPU-1".into(),
                driver_evidence: Some(DriverEvidence::default()),
                ..Gpu::default()
            },
        ],
        processes: vec![holder(10, 0), holder(11, 0), holder(12, 1)],
        ..Snapshot::default()
    };
    let mut s = s;
    s.findings = crate::diagnose::diagnose(&s);
    let text = render(&s, &Extra::default());
    for line in [
        r#"gpufree_process_sm_util_percent{gpu="0",uuid="GPU-0",pid="10",comm="python3"} 42"#,
        r#"gpufree_process_idle{gpu="0",uuid="GPU-0",pid="10",comm="python3"} 0"#,
        r#"gpufree_process_sm_util_percent{gpu="0",uuid="GPU-0",pid="11",comm="python3"} 0"#,
        r#"gpufree_process_idle{gpu="0",uuid="GPU-0",pid="11",comm="python3"} 1"#,
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
    assert!(
        text.lines()
            .filter(|l| l.contains(r#"pid="12""#))
            .all(|l| !l.contains("sm_util") && !l.contains("process_idle")),
        "unknown: no series: {text}"
    );
}
