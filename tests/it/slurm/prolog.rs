//! The prolog on the real cluster: it waits for GPUs that the previous
//! job left busy and lets the job start once they are free; past its
//! timeout the node drains with gpufree's reason and Slurm requeues the
//! job held.

use super::cluster::{field, Cluster, Tuning};
use super::persistenced_on;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Seconds of the day of Slurm's `2026-12-05T09:52:31`.
fn clock(time: &str) -> i64 {
    let (_, hms) = time.split_once('T').unwrap();
    hms.split(':')
        .fold(0, |acc, part| acc * 60 + part.parse::<i64>().unwrap())
}

const STARTED: &str = "echo \"started $(date +%s.%N) on $SLURM_JOB_GPUS\"\n";

#[test]
fn slurm_prolog_waits_for_a_busy_gpu_and_starts_the_job_once_it_is_free() {
    let Some(c) = Cluster::start(Tuning {
        prolog_timeout: "30s",
        ..Tuning::default()
    }) else {
        return;
    };
    let _persistenced = persistenced_on(&c);
    // What the previous job left on GPU 0: a live holder with memory.
    let mut left = c.d.mapper("nvidia0");
    c.memory(&[(0, left.pid(), 8192)], 0);
    let job = c.sbatch("waits", 1, STARTED);
    c.wait_for("the job's allocation", Duration::from_secs(20), |c| {
        c.job_state(job) == "RUNNING"
    });
    // The prolog holds the job back while the GPU is busy.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(c.output("waits"), "", "the job started on a busy GPU");
    assert!(!c.node_state().contains("DRAIN"), "{}", c.show_node());
    left.kill();
    let freed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    c.wait_job(job, "COMPLETED", Duration::from_secs(20));
    let out = c.output("waits");
    let (at, on) = out
        .trim()
        .strip_prefix("started ")
        .and_then(|s| s.split_once(" on "))
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(on, "0");
    let at: f64 = at.parse().unwrap();
    assert!(
        at >= freed.as_secs_f64(),
        "started at {at}, freed at {freed:?}"
    );
    assert_eq!(c.node_state(), "IDLE", "{}", c.show_node());
    assert_eq!(c.reason(), None);
}

#[test]
fn slurm_prolog_timeout_requeues_the_job_held_and_drains_with_gpufree_s_reason() {
    let Some(c) = Cluster::start(Tuning {
        prolog_timeout: "2s",
        ..Tuning::default()
    }) else {
        return;
    };
    let _persistenced = persistenced_on(&c);
    let mut left = c.d.mapper("nvidia0");
    c.memory(&[(0, left.pid(), 8192)], 0);
    let job = c.sbatch("refused", 1, STARTED);
    c.wait_for("the job's requeue", Duration::from_secs(30), |c| {
        c.job_state(job) == "PENDING" && c.node_state().contains("DRAIN")
    });
    let show = c.show_job(job);
    let why = field(&show, "Reason").unwrap();
    assert!(why.contains("held"), "{show}");
    let out = c.output("refused");
    assert!(!out.contains("started"), "the job never started: {out}");
    // The Reason is `gpufree why --format slurm`'s: the holder named.
    let reason = c.reason().unwrap();
    assert!(
        reason.starts_with("gpufree: ")
            && reason.contains("GPU 0")
            && reason.contains(&left.pid().to_string()),
        "{}",
        c.show_node()
    );
    assert!(reason.len() <= 100, "{reason}");
    assert_eq!(c.sinfo_reason(), reason);

    // The operator's way back: the GPU freed, the node resumed, the job
    // released. Slurm lets a requeued job start again only once its launch
    // credential expired (AuthInfo's cred_expire, 120 s by default): no
    // longer held, it is eligible 121 s after its requeue.
    left.kill();
    c.scontrol(&["update", &format!("nodename={}", c.node), "state=resume"]);
    c.scontrol(&["release", &job.to_string()]);
    let show = c.show_job(job);
    assert_eq!(
        field(&show, "JobState").as_deref(),
        Some("PENDING"),
        "{show}"
    );
    assert!(!field(&show, "Reason").unwrap().contains("held"), "{show}");
    let at = |key: &str| clock(&field(&show, key).unwrap());
    let wait = (at("EligibleTime") - at("SubmitTime")).rem_euclid(86_400);
    assert!(wait >= 120, "eligible {wait} s after its requeue: {show}");
    c.wait_for("the node back", Duration::from_secs(10), |c| {
        c.node_state() == "IDLE" && c.reason().is_none()
    });
}

/// An admin drained the node while the prolog waited: past its timeout
/// the job is requeued held all the same, and the admin's reason stays.
#[test]
fn slurm_prolog_timeout_on_a_node_an_admin_drained_keeps_the_admin_s_reason() {
    let Some(c) = Cluster::start(Tuning {
        prolog_timeout: "3s",
        ..Tuning::default()
    }) else {
        return;
    };
    let _persistenced = persistenced_on(&c);
    let left = c.d.mapper("nvidia0");
    c.memory(&[(0, left.pid(), 8192)], 0);
    let job = c.sbatch("refused", 1, STARTED);
    c.wait_for("the job's allocation", Duration::from_secs(20), |c| {
        c.job_state(job) == "RUNNING"
    });
    let node = format!("nodename={}", c.node);
    c.scontrol(&["update", &node, "state=drain", "reason=bad DIMM"]);
    c.wait_for("the job's requeue", Duration::from_secs(30), |c| {
        c.job_state(job) == "PENDING"
    });
    let show = c.show_job(job);
    assert!(field(&show, "Reason").unwrap().contains("held"), "{show}");
    assert!(c.node_state().contains("DRAIN"), "{}", c.show_node());
    assert_eq!(c.reason().as_deref(), Some("bad DIMM"), "{}", c.show_node());
}
