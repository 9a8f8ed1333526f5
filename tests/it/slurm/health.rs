//! The health check against the real slurmctld: it drains on a leftover
//! holder with gpufree's reason, resumes only its own drain, and never
//! takes over an admin's.

use super::cluster::{field, Cluster, Tuning};
use super::persistenced_on;
use std::time::Duration;

#[test]
fn slurm_health_check_drains_on_a_leftover_resumes_its_own_drain_and_keeps_an_admin_s() {
    let Some(c) = Cluster::start(Tuning::default()) else {
        return;
    };
    let _persistenced = persistenced_on(&c);
    let node = format!("nodename={}", c.node);
    let check = || {
        let r = c.run_as_slurmd("healthcheck");
        r.assert_exit(0);
        r
    };

    // A leftover on GPU 0: drained with gpufree's reason.
    let mut left = c.d.mapper("nvidia0");
    c.memory(&[(0, left.pid(), 8192)], 0);
    check();
    assert!(c.node_state().contains("DRAIN"), "{}", c.show_node());
    let reason = c.reason().unwrap();
    assert_eq!(
        reason,
        format!(
            "gpufree: GPU 0: 8.0 GiB held by 1 leftover process (PID {} gpufree)",
            left.pid()
        )
    );
    assert_eq!(c.sinfo_reason(), reason);
    // Jobs wait while it is drained, and Slurm says so: the job's Reason
    // is the drained node, not a scheduler that has yet to look.
    let job = c.sbatch("held-back", 1, "echo ran\n");
    c.wait_for(
        "the job to wait for the drained node",
        Duration::from_secs(10),
        |c| {
            let show = c.show_job(job);
            field(&show, "JobState").as_deref() == Some("PENDING")
                && field(&show, "Reason")
                    .is_some_and(|r| r.contains("DRAINED") || r.contains(&c.node))
        },
    );

    // Gone: the node it drained is resumed, and the job runs.
    left.kill();
    check();
    c.wait_job(job, "COMPLETED", Duration::from_secs(20));
    assert_eq!(c.node_state(), "IDLE", "{}", c.show_node());
    assert_eq!(c.reason(), None);

    // An admin's drain is never taken over, and never resumed.
    c.scontrol(&["update", &node, "state=drain", "reason=bad DIMM"]);
    let left = c.d.mapper("nvidia0");
    c.memory(&[(0, left.pid(), 8192)], 0);
    let r = check();
    assert!(r.stderr.contains("not taking it over"), "{}", r.stderr);
    assert_eq!(c.reason().as_deref(), Some("bad DIMM"));
    drop(left);
    check();
    assert!(c.node_state().contains("DRAIN"), "{}", c.show_node());
    assert_eq!(c.reason().as_deref(), Some("bad DIMM"));

    // Drained by gpufree, then an admin's reason: the admin's drain stays.
    c.scontrol(&["update", &node, "state=resume"]);
    let left = c.d.mapper("nvidia0");
    c.memory(&[(0, left.pid(), 8192)], 0);
    check();
    assert!(c.reason().unwrap().starts_with("gpufree: "));
    c.scontrol(&["update", &node, "state=drain", "reason=swap the riser"]);
    drop(left);
    check();
    assert!(c.node_state().contains("DRAIN"), "{}", c.show_node());
    assert_eq!(c.reason().as_deref(), Some("swap the riser"));
}

/// Slurm runs the health check itself (HealthCheckInterval): a leftover
/// drains the node with gpufree's reason, and once it is gone the node
/// comes back by itself.
#[test]
fn slurm_runs_the_health_check_which_drains_on_a_leftover_and_resumes_when_it_is_gone() {
    let Some(c) = Cluster::start(Tuning {
        health_interval: 2,
        ..Tuning::default()
    }) else {
        return;
    };
    let _persistenced = persistenced_on(&c);
    let mut left = c.d.mapper("nvidia0");
    c.memory(&[(0, left.pid(), 8192)], 0);
    c.wait_for(
        "slurmd's health check to drain",
        Duration::from_secs(20),
        |c| {
            c.reason()
                .is_some_and(|r| r.starts_with("gpufree: GPU 0: 8.0 GiB held by 1 leftover"))
        },
    );
    assert!(c.node_state().contains("DRAIN"), "{}", c.show_node());
    left.kill();
    c.wait_for(
        "slurmd's health check to resume",
        Duration::from_secs(20),
        |c| c.node_state() == "IDLE" && c.reason().is_none(),
    );
}
