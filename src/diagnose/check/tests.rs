//! Tests of `check`'s `stuck`: what the window saw decides its level.

use super::*;
use crate::model::{Sample, Sampled, Wait, Window, STUCK_SAMPLE_MS};

fn d(wait: Wait) -> Sampled {
    Sampled::State { state: 'D', wait }
}

fn uvm() -> Wait {
    Wait::Driver {
        symbol: "uvm_va_space_mm_shutdown".into(),
        module: Some("nvidia_uvm".into()),
    }
}

/// A window of six samples, one every 200 ms over 1 s.
fn window(seen: [Sampled; 6]) -> Window {
    Window {
        samples: seen
            .into_iter()
            .zip(0..)
            .map(|(seen, i)| Sample {
                at_ms: i * STUCK_SAMPLE_MS,
                seen,
            })
            .collect(),
    }
}

fn all(s: Sampled) -> [Sampled; 6] {
    std::array::from_fn(|_| s.clone())
}

#[test]
fn in_d_across_the_window_in_the_gpu_driver_is_critical() {
    let (level, why) = stuck_one(Some(&window(all(d(uvm())))));
    assert_eq!(level, Level::Critical);
    assert_eq!(
        why,
        "in D for 1.0 s, in the GPU driver: uvm_va_space_mm_shutdown [nvidia_uvm]"
    );
}

#[test]
fn in_d_across_the_window_where_the_kernel_says_nothing_is_critical() {
    let (level, why) = stuck_one(Some(&window(all(d(Wait::Unsaid)))));
    assert_eq!(level, Level::Critical);
    assert_eq!(
        why,
        "in D for 1.0 s; the kernel does not say where it waits"
    );
    // Some samples say the driver, some nothing: still the driver.
    let mut seen = all(d(Wait::Unsaid));
    seen[3] = d(uvm());
    assert_eq!(stuck_one(Some(&window(seen))).0, Level::Critical);
}

#[test]
fn in_d_only_in_the_first_sample_is_a_warning() {
    let mut seen = all(Sampled::State {
        state: 'S',
        wait: Wait::Unsaid,
    });
    seen[0] = d(uvm());
    let (level, why) = stuck_one(Some(&window(seen)));
    assert_eq!(level, Level::Warning);
    assert_eq!(why, "in D in 1 of 6 samples over 1.0 s");
    // Out of D once, in the middle: no longer stuck.
    let mut seen = all(d(uvm()));
    seen[2] = Sampled::State {
        state: 'R',
        wait: Wait::Unsaid,
    };
    assert_eq!(
        stuck_one(Some(&window(seen))),
        (Level::Warning, "in D in 5 of 6 samples over 1.0 s".into())
    );
}

#[test]
fn a_wait_elsewhere_is_a_warning_naming_it() {
    for (symbol, module, said) in [
        ("kernel_clone", None, "kernel_clone"),
        (
            "rpc_wait_bit_killable",
            Some("sunrpc"),
            "rpc_wait_bit_killable [sunrpc]",
        ),
    ] {
        let mut seen = all(d(uvm()));
        seen[4] = d(Wait::Elsewhere {
            symbol: symbol.into(),
            module: module.map(Into::into),
        });
        let (level, why) = stuck_one(Some(&window(seen)));
        assert_eq!(level, Level::Warning);
        assert_eq!(why, format!("waits in {said}, not in the GPU driver"));
    }
}

#[test]
fn exited_unread_short_or_unsampled_is_a_warning() {
    let mut seen = all(d(uvm()));
    seen[5] = Sampled::Gone;
    assert_eq!(
        stuck_one(Some(&window(seen))),
        (
            Level::Warning,
            "in D in 5 of 6 samples over 1.0 s, then exited".into()
        )
    );
    let mut seen = all(d(uvm()));
    seen[1] = Sampled::Unread;
    assert_eq!(
        stuck_one(Some(&window(seen))),
        (
            Level::Warning,
            "in D in 5 of 6 samples over 1.0 s (1 unreadable)".into()
        )
    );
    // Two samples less than a second apart, or one sample: too short.
    let mut short = window(all(d(uvm())));
    short.samples.truncate(5);
    assert_eq!(
        stuck_one(Some(&short)),
        (Level::Warning, "in D in 5 of 5 samples over 0.8 s".into())
    );
    short.samples.truncate(1);
    assert_eq!(stuck_one(Some(&short)).0, Level::Warning);
    assert_eq!(
        stuck_one(None),
        (Level::Warning, "in D in one look, not sampled again".into())
    );
}

#[test]
fn holders_in_d_are_one_problem_per_level_and_reason() {
    let holder = |pid| Process {
        pid,
        comm: "python3".into(),
        state: "D".into(),
        ..Process::default()
    };
    let s = crate::diagnose::tests::base(Vec::new(), vec![holder(10), holder(11), holder(12)]);
    let policy = CheckPolicy {
        ignore: vec![Condition::Leftover],
        ..CheckPolicy::default()
    };
    let vfork = Wait::Elsewhere {
        symbol: "kernel_clone".into(),
        module: None,
    };
    let mut windows = BTreeMap::from([
        (10, window(all(d(vfork.clone())))),
        (11, window(all(d(vfork)))),
    ]);
    let (o, _) = check(&s, &policy, &CheckMemory::default(), &windows, 0);
    // 12 was never sampled: a warning of its own.
    assert_eq!(o.level, Level::Warning, "{o:?}");
    assert_eq!(o.problems.len(), 2, "{o:?}");
    assert_eq!(
        o.problems[0].processes,
        [(10, "python3".into()), (11, "python3".into())]
    );
    assert_eq!(
        o.problems[0].why.as_deref(),
        Some("waits in kernel_clone, not in the GPU driver")
    );
    windows.insert(12, window(all(d(uvm()))));
    let (o, _) = check(&s, &policy, &CheckMemory::default(), &windows, 0);
    assert_eq!(o.level, Level::Critical, "{o:?}");
    assert_eq!(o.problems[0].level, Level::Critical);
    assert_eq!(o.problems[0].processes, [(12, "python3".into())]);
    assert_eq!(o.problems[1].level, Level::Warning);
    // The window sees nothing where nothing is in D: no problem.
    let calm = crate::diagnose::tests::base(Vec::new(), Vec::new());
    let (o, _) = check(&calm, &policy, &CheckMemory::default(), &windows, 0);
    assert_eq!(o.level, Level::Ok);
}

/// A check narrowed to one GPU keeps what it remembered of the others: it
/// never restarts another GPU's grace period.
#[test]
fn a_narrower_check_keeps_the_other_gpus_leak_times() {
    use crate::model::{CheckMemory, Gpu};
    let s = Snapshot {
        gpus: vec![Gpu {
            index: 0,
            uuid: "GPU-a".into(),
            ..Gpu::default()
        }],
        ..Snapshot::default()
    };
    let mut memory = CheckMemory::default();
    memory.unaccounted_since.insert("GPU-a".into(), 100);
    memory.unaccounted_since.insert("GPU-b".into(), 50);
    let (_, next) = check(
        &s,
        &CheckPolicy::default(),
        &memory,
        &Default::default(),
        1000,
    );
    assert_eq!(next.unaccounted_since.get("GPU-b"), Some(&50));
    // GPU-a was looked at and holds no leak now: forgotten.
    assert_eq!(next.unaccounted_since.get("GPU-a"), None);
}

/// A protected daemon holding more than the idle slack is a critical
/// `daemon` problem: a service account running the real binary with GPU
/// files it opened before is spared by kill, but the node is not healthy.
#[test]
fn a_protected_daemon_beyond_the_idle_slack_is_critical() {
    use crate::model::{Gpu, GpuMemory, Process, Protection};
    let daemon = |bytes: u64| Process {
        pid: 7,
        comm: "nvidia-persiste".into(),
        state: "S".into(),
        protected: true,
        protection: Some(Protection::System),
        gpu_memory: vec![GpuMemory {
            gpu: 0,
            used_bytes: Some(bytes),
        }],
        ..Process::default()
    };
    let on = |p: Process| Snapshot {
        gpus: vec![Gpu {
            index: 0,
            ..Gpu::default()
        }],
        processes: vec![p],
        ..Snapshot::default()
    };
    let run = |s: &Snapshot| {
        check(
            s,
            &CheckPolicy::default(),
            &Default::default(),
            &Default::default(),
            0,
        )
        .0
    };
    let out = run(&on(daemon(20 << 30)));
    let p = out
        .problems
        .iter()
        .find(|p| p.condition == Condition::Daemon)
        .unwrap();
    assert_eq!(
        (p.level, p.bytes, p.gpu),
        (Level::Critical, 20 << 30, Some(0))
    );
    let out = run(&on(daemon(8 << 20)));
    assert!(out
        .problems
        .iter()
        .all(|p| p.condition != Condition::Daemon));
}

#[test]
fn a_reset_the_driver_asks_for_is_critical_and_xids_go_by_the_catalog() {
    use crate::model::{DriverEvidence, Gpu, Reading, RecoveryAction, XidReport};
    let x = |xid: u32, pid: Option<u32>| XidReport {
        xid,
        gpu: Some(0),
        pid,
        comm: pid.map(|_| "python3".into()),
        at_unix_ms: Some(1_764_936_181_000),
        ..XidReport::default()
    };
    let mut s = Snapshot {
        gpus: vec![Gpu {
            index: 0,
            driver_evidence: Some(DriverEvidence {
                recovery_action: Reading::Value(RecoveryAction::GpuReset),
                xids: vec![x(31, Some(5)), x(48, None), x(31, Some(5)), x(45, Some(5))],
                ..DriverEvidence::default()
            }),
            ..Gpu::default()
        }],
        ..Snapshot::default()
    };
    s.findings = crate::diagnose::diagnose(&s);
    let out = check(
        &s,
        &CheckPolicy::default(),
        &Default::default(),
        &Default::default(),
        0,
    )
    .0;
    assert_eq!(out.level, Level::Critical);
    let ours = |o: &CheckOutcome| -> Vec<Problem> {
        o.problems
            .iter()
            .filter(|p| matches!(p.condition, Condition::ResetRequired | Condition::Xid))
            .cloned()
            .collect()
    };
    let problems = ours(&out);
    let conds: Vec<(Condition, Level, Option<u32>)> = problems
        .iter()
        .map(|p| (p.condition, p.level, p.xid))
        .collect();
    assert_eq!(
        conds,
        vec![
            (Condition::ResetRequired, Level::Critical, None),
            (Condition::Xid, Level::Critical, Some(48)),
            (Condition::Xid, Level::Warning, Some(31)),
        ],
        "45 is NVIDIA's to ignore"
    );
    let said = |p: &Problem| crate::present::check::said(p, &s);
    assert!(
        said(&problems[0])
            .starts_with("GPU 0 needs a reset: NVML recovery action GPU_RESET; Xid 48"),
        "{}",
        said(&problems[0])
    );
    assert_eq!(
        said(&problems[2]),
        "GPU 0: Xid 31 (GPU memory page fault (illegal address)) at 2025-12-05 12:03:01 UTC (PID 5 python3), 2 reports in the kernel log; NVIDIA's action: restart the application"
    );
    assert_eq!(problems[2].processes, vec![(5, "python3".to_string())]);
    // Ignored by name, as every condition.
    let policy = CheckPolicy {
        ignore: vec![Condition::ResetRequired, Condition::Xid],
        ..CheckPolicy::default()
    };
    let quiet = check(&s, &policy, &Default::default(), &Default::default(), 0).0;
    assert!(ours(&quiet).is_empty(), "{:?}", quiet.problems);
}

#[test]
fn an_idle_holder_past_idle_min_is_a_warning_naming_it_alone() {
    let mut s = crate::diagnose::tests::jupyter_among_workers();
    s.findings = crate::diagnose::diagnose(&s);
    // The workers are leftovers of no unit: leave that condition out.
    let policy = CheckPolicy {
        ignore: vec![Condition::Leftover],
        ..CheckPolicy::default()
    };
    let out = check(&s, &policy, &Default::default(), &Default::default(), 0).0;
    let idle: Vec<&Problem> = out
        .problems
        .iter()
        .filter(|p| p.condition == Condition::Idle)
        .collect();
    assert_eq!(idle.len(), 1, "{:?}", out.problems);
    assert_eq!(idle[0].level, Level::Warning);
    assert_eq!(idle[0].gpu, Some(0));
    assert_eq!(idle[0].bytes, 8 << 30);
    assert_eq!(idle[0].processes, vec![(300, "python3".to_string())]);
    assert_eq!(
        crate::present::check::said(idle[0], &s),
        "GPU 0: 8.0 GiB held by 1 idle holder, no GPU activity in the window (PID 300 python3)"
    );
    // Below --idle-min: no problem.
    let policy = CheckPolicy {
        idle_min: 9 << 30,
        ..policy
    };
    let out = check(&s, &policy, &Default::default(), &Default::default(), 0).0;
    assert!(out.problems.iter().all(|p| p.condition != Condition::Idle));
}
