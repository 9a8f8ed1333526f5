//! A step Slurm cannot kill, on the real cluster: its process reads a file
//! of a FUSE server that never answers the READ (tests/fuse/fusefs.py), so
//! once signalled it waits in D for the server, SIGKILL included, as a
//! process stuck in a driver or on a hung file system does. After
//! UnkillableStepTimeout slurmstepd runs contrib/slurm/unkillable.sh, then
//! drains the node with `Kill task failed`; the Reason an operator reads
//! is gpufree's diagnosis.

use super::cluster::{Cluster, Tuning};
use super::{persistenced_on, ready_pids};
use crate::fuse::Fuse;
use crate::harness::{run_cmd, stat};
use gpufree::demo::holder::Spawned;
use std::time::Duration;

/// A job whose batch script becomes (exec) a process that holds GPU 0's
/// node and then reads the FUSE file `file`; it prints `ready PID stuck`
/// first. It stays slurmstepd's own child: under proctrack/linuxproc a
/// process whose parent died is no longer the step's, and Slurm would
/// call the step ended.
fn stuck_job(c: &Cluster, file: &std::path::Path) -> String {
    format!(
        "GPUFREE_INTERNAL_HOLDER='{{\"label\":\"stuck\",\"fd\":[\"{dev}/nvidia0\"],\"read_after_ready\":\"{file}\"}}' \\\n    exec -a python3 \"$GPUFREE\" train.py\n",
        dev = c.d.dev.display(),
        file = file.display()
    )
}

/// Both tests' start: a cluster, persistenced, and the job `stuck`
/// running, its process holding 8 GiB of GPU 0 and about to read from a
/// FUSE server that never answers. Fields drop in order: the server
/// first, so the stuck process dies before the cluster stops.
struct Stuck {
    _persistenced: Spawned,
    fuse: Fuse,
    c: Cluster,
    job: u32,
    /// The stuck process.
    pid: u32,
    /// Its parent, the step's slurmstepd.
    stepd: u32,
}

impl Stuck {
    /// None where the cluster or the FUSE server cannot run here.
    fn start() -> Option<Stuck> {
        let c = Cluster::start(Tuning::default())?;
        let fuse = Fuse::start("block-read")?;
        let persistenced = persistenced_on(&c);
        let job = c.sbatch("stuck", 1, &stuck_job(&c, &fuse.file()));
        c.wait_for("the stuck process", Duration::from_secs(20), |c| {
            !ready_pids(&c.output("stuck"), "stuck").is_empty()
        });
        let pid = ready_pids(&c.output("stuck"), "stuck")[0];
        let stepd = stat(pid).unwrap().ppid;
        c.memory(&[(0, pid, 8192)], 0);
        Some(Stuck {
            _persistenced: persistenced,
            fuse,
            c,
            job,
            pid,
            stepd,
        })
    }

    /// scancel: slurmstepd signals the process, which stays in D.
    fn cancel(&self) {
        let r = run_cmd(self.c.cmd("scancel").arg(self.job.to_string()));
        r.assert_exit(0);
    }

    /// Stops the FUSE server and waits until the step's slurmstepd has
    /// exited: once the server is gone the stuck process dies and its step
    /// ends, reported to the daemons before the test stops them.
    fn end(mut self) {
        self.fuse.stop();
        self.c
            .wait_for("the step to end", Duration::from_secs(30), |_| {
                !crate::harness::alive(self.stepd)
            });
    }
}

#[test]
fn slurm_unkillable_step_drains_with_gpufree_s_diagnosis_not_kill_task_failed() {
    let Some(s) = Stuck::start() else {
        return;
    };
    let (c, pid) = (&s.c, s.pid);
    s.cancel();
    c.wait_for(
        "slurmstepd to give up and gpufree's reason to stay",
        Duration::from_secs(40),
        |c| {
            c.ctld_log().contains("reason set to: Kill task failed")
                && c.reason().is_some_and(|r| r.starts_with("gpufree: "))
        },
    );
    assert_eq!(stat(pid).unwrap().state, 'D', "SIGKILL did not end it");
    let reason = c.reason().unwrap();
    eprintln!("unkillable reason: {reason}");
    assert!(reason.contains(&pid.to_string()), "{reason}");
    assert!(c.node_state().contains("DRAIN"), "{}", c.show_node());
    assert_eq!(c.sinfo_reason(), reason);
    s.end();
}

/// An admin drained the node while the step ran: the script leaves the
/// node alone. (Slurm's own `Kill task failed` replaces the admin's
/// reason all the same: that is slurmstepd's doing, which gpufree does not
/// undo for anyone but itself.)
#[test]
fn slurm_unkillable_step_on_a_node_an_admin_drained_sets_no_gpufree_reason() {
    let Some(s) = Stuck::start() else {
        return;
    };
    let c = &s.c;
    let node = format!("nodename={}", c.node);
    c.scontrol(&["update", &node, "state=drain", "reason=bad DIMM"]);
    s.cancel();
    let log = c.d.tmp.path().join("unkillable.log");
    c.wait_for("the script to run", Duration::from_secs(40), |c| {
        c.ctld_log().contains("reason set to: Kill task failed")
            && std::fs::read_to_string(&log).is_ok_and(|l| l.contains("keeping it"))
    });
    assert!(
        !c.ctld_log().contains("reason set to: gpufree"),
        "{}",
        c.ctld_log()
    );
    assert_eq!(c.reason().as_deref(), Some("Kill task failed"));
    s.end();
}
