//! The view's answers from snapshot values: what each user sees of whom.

use super::*;
use crate::model::{
    DeviceUse, Gpu, GpuMemory, Memory, NvmlProcess, NvmlProcessKind, NvmlStatus, Process, Via,
};

/// One GPU held by a process of each of `uids`, each with a token on its
/// command line, an environment and an executable.
fn host(uids: &[u32]) -> Snapshot {
    let processes: Vec<Process> = uids
        .iter()
        .enumerate()
        .map(|(i, &uid)| Process {
            pid: 100 + u32::try_from(i).unwrap(),
            ppid: 1,
            comm: "python3".into(),
            cmdline: vec!["python3".into(), format!("--token=secret-of-{uid}")],
            exe: Some(format!("/home/u{uid}/bin/python3")),
            uid,
            user: format!("u{uid}"),
            state: "S".into(),
            threads: 1,
            gpu_memory: vec![GpuMemory {
                gpu: 0,
                used_bytes: Some(1 << 30),
            }],
            devices: vec![DeviceUse {
                path: "/dev/nvidia0".into(),
                gpu: Some(0),
                via: vec![Via::Fd],
            }],
            environment: [("TORCHELASTIC_RUN_ID".to_string(), format!("run-of-{uid}"))].into(),
            ..Process::default()
        })
        .collect();
    let used = (processes.len() as u64) << 30;
    Snapshot {
        gpus: vec![Gpu {
            index: 0,
            uuid: "GPU-0".into(),
            memory: Memory {
                total_bytes: 80 << 30,
                used_bytes: used,
                known: true,
                ..Memory::default()
            },
            nvml_processes: processes
                .iter()
                .map(|p| NvmlProcess {
                    pid: p.pid,
                    used_bytes: Some(1 << 30),
                    kind: NvmlProcessKind::Compute,
                })
                .collect(),
            ..Gpu::default()
        }],
        processes,
        nvml: NvmlStatus {
            available: true,
            ..NvmlStatus::default()
        },
        ..Snapshot::default()
    }
}

fn ask(snap: &Snapshot, uid: u32, command: ViewCommand, json: bool) -> (ViewAnswer, String) {
    let req = ViewRequest {
        version: VIEW_VERSION,
        command,
        gpu: Vec::new(),
        json,
        quiet: false,
        color: false,
    };
    let (answer, body) = render(
        (snap, std::time::Duration::ZERO),
        Path::new("/run/gpufree/view.sock"),
        uid,
        &req,
    );
    (answer, String::from_utf8(body).unwrap())
}

#[test]
fn each_user_sees_every_holder_but_only_their_own_secrets() {
    let mut snap = host(&[0, 1000, 1001]);
    crate::pipeline::judge_with(&mut snap, &crate::diagnose::Options::default());
    for uid in [1000, 1001] {
        let (answer, text) = ask(&snap, uid, ViewCommand::Status, true);
        assert_eq!(
            answer,
            ViewAnswer {
                verdict: Some(crate::model::VerdictState::Busy),
                age_seconds: Some(0.0),
                error: None
            }
        );
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["processes"].as_array().unwrap().len(), 3);
        assert_eq!(doc["visibility"]["view"]["uid"], uid);
        assert_eq!(doc["visibility"]["hidden"].as_array().unwrap().len(), 5);
        assert!(text.contains(&format!("secret-of-{uid}")), "{text}");
        assert!(text.contains(&format!("run-of-{uid}")), "{text}");
        for other in [0, 1000, 1001].into_iter().filter(|o| *o != uid) {
            for secret in [
                format!("secret-of-{other}"),
                format!("run-of-{other}"),
                format!("/home/u{other}"),
            ] {
                assert!(!text.contains(&secret), "uid {uid} sees {secret}: {text}");
            }
        }
        // why, in words: the findings are made again from what is left.
        let (answer, words) = ask(&snap, uid, ViewCommand::Why, false);
        assert_eq!(answer.verdict, Some(crate::model::VerdictState::Busy));
        assert!(
            !words.contains("secret-of-0") && !words.contains("/home/u0"),
            "{words}"
        );
    }
    // Root sees everything, and nothing is said hidden.
    let (_, text) = ask(&snap, 0, ViewCommand::Status, true);
    assert!(text.contains("secret-of-1000") && text.contains("run-of-1001"));
    assert!(!text.contains("\"hidden\""), "{text}");
}

#[test]
fn a_bad_request_is_the_commands_usage_error() {
    let snap = host(&[1000]);
    let req = ViewRequest {
        version: VIEW_VERSION,
        command: ViewCommand::Status,
        gpu: vec!["7".into()],
        json: false,
        quiet: false,
        color: false,
    };
    let (answer, body) = render(
        (&snap, std::time::Duration::ZERO),
        Path::new("/s"),
        1000,
        &req,
    );
    let e = answer.error.unwrap();
    assert_eq!(e.kind, ViewErrorKind::Usage);
    assert!(e.message.contains("--gpu 7"), "{}", e.message);
    assert!(body.is_empty());
    let req = ViewRequest {
        version: VIEW_VERSION + 1,
        ..req
    };
    let e = render(
        (&snap, std::time::Duration::ZERO),
        Path::new("/s"),
        1000,
        &req,
    )
    .0
    .error
    .unwrap();
    assert_eq!(e.kind, ViewErrorKind::Usage);
}
