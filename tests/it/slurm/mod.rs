//! gpufree's Slurm scripts inside a real Slurm (22.05, Debian's slurm-wlm):
//! jobs submitted with sbatch on a one-node cluster whose Prolog, Epilog,
//! HealthCheckProgram and UnkillableStepProgram are the contrib scripts, on
//! a node where a root daemon like nvidia-persistenced holds every GPU's
//! device nodes, as on most real hosts. What an operator reads is
//! asserted where the operator reads it: the node's state and Reason in
//! `scontrol show node` and `sinfo -R`, the job's state in `scontrol show
//! job`.

mod cluster;
mod health;
mod prolog;
mod unkillable;

use crate::harness::*;
use cluster::{Cluster, Tuning, GPUS};
use std::time::{Duration, Instant};

/// A persistenced-like root daemon holding every GPU node of the cluster.
fn persistenced_on(c: &Cluster) -> gpufree::demo::holder::Spawned {
    let names: Vec<String> = (0..GPUS).map(|i| format!("nvidia{i}")).collect();
    let mut nodes: Vec<&str> = names.iter().map(String::as_str).collect();
    nodes.extend(["nvidiactl", "nvidia-uvm"]);
    persistenced(&c.d, &nodes)
}

/// The job's part of a script: says `waiting` (its prolog is done), then
/// waits until the test creates `$SCRATCH/NAME`.
fn wait_for_file(name: &str) -> String {
    format!("echo waiting\nwhile [ ! -e \"$SCRATCH/{name}\" ]; do sleep 0.1; done\n")
}

/// Waits until the job named `name` runs its script: Slurm calls a job
/// RUNNING while its prolog still runs.
fn wait_started(c: &Cluster, name: &str) {
    c.wait_for(
        &format!("job {name}'s script"),
        Duration::from_secs(20),
        |c| c.output(name).contains("waiting"),
    );
}

/// PIDs of the `ready PID LABEL` lines whose label starts with `label`.
fn ready_pids(out: &str, label: &str) -> Vec<u32> {
    out.lines()
        .filter_map(|l| l.strip_prefix("ready "))
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, l)| l.starts_with(label))
        .map(|(p, _)| p.parse().unwrap())
        .collect()
}

/// Whether any ancestor of `pid` is a slurmstepd: a process Slurm still
/// tracks as the job's under proctrack/linuxproc.
fn under_slurmstepd(pid: u32) -> bool {
    let mut p = pid;
    while p > 1 {
        let Some(s) = stat(p) else {
            return false;
        };
        if s.comm == "slurmstepd" {
            return true;
        }
        p = s.ppid;
    }
    false
}

/// A job whose vLLM-like workers escape it: for each of its GPUs a
/// launcher starts a child in a session of its own, which starts the
/// worker (renamed `VLLM::Worker_TPn`, holding and mapping the GPU's
/// node) and exits; the launcher exits too. The workers are orphans,
/// outside the job's process tree. The job then waits for `go`.
const ESCAPING_JOB: &str = r#"i=0
for g in ${SLURM_JOB_GPUS//,/ }; do
    worker='{"survive_parent":true,"label":"worker'$g'","title":"VLLM::Worker_TP'$i'","mmap":["'$GPUFREE_DEV_DIR'/nvidia'$g'"]}'
    GPUFREE_INTERNAL_HOLDER='{"survive_parent":true,"new_session":true,"exit_after_ms":0,"label":"daemonized","children":[{"argv":["python3","-m","vllm.entrypoints.openai.api_server"],"spec":'$worker'}]}' \
        bash -c 'exec -a python3 "$GPUFREE" -m vllm.entrypoints.openai.api_server'
    i=$((i + 1))
done
echo "gpus $SLURM_JOB_GPUS"
"#;

#[test]
fn slurm_epilog_kills_a_job_s_escaped_renamed_workers_and_the_node_stays_up() {
    let Some(c) = Cluster::start(Tuning::default()) else {
        return;
    };
    eprintln!("cluster started in {:?}", c.startup());
    let _persistenced = persistenced_on(&c);
    let t0 = Instant::now();
    let job = c.sbatch(
        "escape",
        2,
        &format!("{ESCAPING_JOB}{}", wait_for_file("go")),
    );
    c.wait_for("the workers", Duration::from_secs(20), |c| {
        ready_pids(&c.output("escape"), "worker").len() == 2
    });
    let out = c.output("escape");
    assert!(out.contains("gpus 0,1"), "{out}");
    let workers = ready_pids(&out, "worker");
    for &w in &workers {
        assert!(alive(w));
        assert!(!under_slurmstepd(w), "worker {w} escaped the job");
        let comm = std::fs::read_to_string(format!("/proc/{w}/comm")).unwrap();
        assert!(comm.starts_with("VLLM::Worker_TP"), "{comm}");
    }
    c.memory(&[(0, workers[0], 20_000), (1, workers[1], 20_000)], 0);
    std::fs::write(c.d.tmp.path().join("go"), "").unwrap();
    c.wait_job(job, "COMPLETED", Duration::from_secs(30));
    // Renamed: their command lines are their titles.
    let left = survivors_reaped(&workers, "VLLM::Worker_TP");
    assert!(left.is_empty(), "the epilog left {left:?} alive");
    assert_eq!(c.node_state(), "IDLE", "{}", c.show_node());
    assert_eq!(c.reason(), None, "{}", c.show_node());

    // The next job runs on the same GPUs.
    let next = c.sbatch("next", 2, "echo ran on $SLURM_JOB_GPUS\n");
    c.wait_job(next, "COMPLETED", Duration::from_secs(30));
    assert_eq!(c.output("next").trim(), "ran on 0,1");
    assert_eq!(c.node_state(), "IDLE", "{}", c.show_node());
    eprintln!("escaped workers scenario: {:?} after startup", t0.elapsed());
}

#[test]
fn slurm_memory_left_after_the_epilog_drains_with_gpufree_s_reason_not_epilog_error() {
    let Some(c) = Cluster::start(Tuning::default()) else {
        return;
    };
    let _persistenced = persistenced_on(&c);
    let job = c.sbatch("leak", 2, &wait_for_file("go"));
    wait_started(&c, "leak");
    // 8 GiB on GPU 0 that no process holds, from the job on: nothing to
    // kill, nothing comes back.
    c.memory(&[], 8192);
    std::fs::write(c.d.tmp.path().join("go"), "").unwrap();
    c.wait_job(job, "COMPLETED", Duration::from_secs(30));
    c.wait_for("the drain", Duration::from_secs(10), |c| {
        c.node_state().contains("DRAIN")
    });
    // The Reason is `gpufree why --format slurm`'s: the memory no
    // process accounts for.
    let reason = c.reason().unwrap();
    assert!(reason.starts_with("gpufree: "), "{}", c.show_node());
    assert!(reason.contains("GPU 0"), "{reason}");
    assert!(reason.len() <= 100, "{reason}");
    assert_eq!(c.sinfo_reason(), reason);
    let log = c.ctld_log();
    assert!(
        log.contains("epilog error"),
        "Slurm saw the epilog fail: {log}"
    );

    // An admin's drain, made while a job runs, outlives the epilog's.
    c.memory(&[], 0);
    c.scontrol(&["update", &format!("nodename={}", c.node), "state=resume"]);
    c.wait_for("the resume", Duration::from_secs(10), |c| {
        c.node_state() == "IDLE"
    });
    let job = c.sbatch("admin", 2, &wait_for_file("go2"));
    wait_started(&c, "admin");
    c.scontrol(&[
        "update",
        &format!("nodename={}", c.node),
        "state=drain",
        "reason=bad DIMM",
    ]);
    c.memory(&[], 8192);
    std::fs::write(c.d.tmp.path().join("go2"), "").unwrap();
    c.wait_job(job, "COMPLETED", Duration::from_secs(30));
    assert!(
        c.ctld_log().contains(&format!("JobId={job} epilog error")),
        "the epilog failed: {}",
        c.ctld_log()
    );
    assert!(c.node_state().contains("DRAIN"), "{}", c.show_node());
    assert_eq!(c.reason().as_deref(), Some("bad DIMM"), "{}", c.show_node());
}
