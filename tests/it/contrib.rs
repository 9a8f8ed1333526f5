//! The shipped integration files: Slurm prolog and epilog scripts run
//! against the simulator with real holders; the systemd drop-in and the
//! incident's unit through `gpufree doctor`.

use crate::harness::*;
use std::path::{Path, PathBuf};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Runs a contrib script as Slurm would, pointed at the simulator.
fn slurm(script: &str, d: &TestDir, state: &Path, job_gpus: &str) -> Run {
    let lib = sim_lib();
    run_cmd(
        std::process::Command::new("bash")
            .arg(repo(script))
            .env_clear()
            .env("GPUFREE", bin())
            .env("GPUFREE_BPF_CACHE", crate::harness::bpf_cache())
            .env("SLURM_JOB_ID", "4242")
            .env("SLURM_JOB_GPUS", job_gpus)
            .env("GPUFREE_PROLOG_TIMEOUT", "300ms")
            .env("GPUFREE_EPILOG_GRACE", "1s")
            .env("GPUFREE_EPILOG_TIMEOUT", "10s")
            .env("GPUFREE_DEV_DIR", &d.dev)
            .env("GPUFREE_NVML_LIB", lib)
            .env("GPUFREE_SIM_STATE", state),
    )
}

#[test]
fn slurm_prolog_passes_free_gpus_and_drains_busy_ones_with_the_reason() {
    let d = TestDir::new(2);
    let h = d.mapper("nvidia1");
    let state = d.state(&sim_state(vec![
        sim_gpu(0, &[], 0),
        sim_gpu(1, &[(h.pid(), 4096, "while-alive")], 0),
    ]));
    let r = slurm("contrib/slurm/prolog.sh", &d, &state, "0");
    assert_eq!(r.code, 0, "GPU 0 is free: {}", r.stderr);
    let r = slurm("contrib/slurm/prolog.sh", &d, &state, "0,1");
    assert_eq!(r.code, 1, "GPU 1 is busy: the node drains");
    assert!(
        r.stderr.contains("GPUs 0,1 of job 4242 not free"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains(&h.pid().to_string()) || r.stderr.contains("live process"),
        "the reason names the holder: {}",
        r.stderr
    );
    assert!(alive(h.pid()), "the prolog signals nothing");
}

#[test]
fn slurm_epilog_frees_the_jobs_gpus_only() {
    let d = TestDir::new(2);
    let left = d.mapper("nvidia0");
    let other = d.mapper("nvidia1");
    let state = d.state(&sim_state(vec![
        sim_gpu(0, &[(left.pid(), 4096, "while-alive")], 300),
        sim_gpu(1, &[(other.pid(), 4096, "while-alive")], 0),
    ]));
    let r = slurm("contrib/slurm/epilog.sh", &d, &state, "0");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!alive(left.pid()), "the job's leftover is gone");
    assert!(alive(other.pid()), "another job's GPU is untouched");
    let r = slurm("contrib/slurm/epilog.sh", &d, &state, "");
    assert_eq!(r.code, 0, "no GPUs: nothing to do");
}

/// On a node where a root `nvidia-persistenced` holds every GPU node, as
/// on most real hosts, a job that leaves nothing behind leaves the node
/// up: the prolog passes, the epilog exits 0 and says nothing (a non-zero
/// epilog drains the node), and the daemon is never signalled. A job's
/// leftover beside it is still freed.
#[test]
fn slurm_scripts_leave_a_node_up_where_nvidia_persistenced_holds_the_gpus() {
    let d = TestDir::new(2);
    let daemon = persistenced(&d, &["nvidia0", "nvidia1", "nvidiactl"]);
    let state = d.state(&sim_state(vec![sim_gpu(0, &[], 0), sim_gpu(1, &[], 0)]));
    let r = slurm("contrib/slurm/prolog.sh", &d, &state, "0,1");
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "prolog");
    let r = slurm("contrib/slurm/epilog.sh", &d, &state, "0,1");
    assert_eq!(
        (r.code, r.stderr.as_str()),
        (0, ""),
        "epilog after a clean job"
    );
    assert!(alive(daemon.pid()), "the daemon is never signalled");
    let left = d.mapper("nvidia1");
    let state = d.state(&sim_state(vec![
        sim_gpu(0, &[], 0),
        sim_gpu(1, &[(left.pid(), 4096, "while-alive")], 0),
    ]));
    let r = slurm("contrib/slurm/epilog.sh", &d, &state, "0,1");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!alive(left.pid()), "the job's leftover is freed");
    assert!(alive(daemon.pid()), "and the daemon is not");
}

#[test]
fn systemd_drop_in_is_clean_and_the_incident_unit_is_not() {
    let r = gpufree(
        &[
            "doctor",
            "--unit",
            repo("contrib/systemd/gpufree.conf").to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(r.code, 0, "{}", r.stdout);
    let text = std::fs::read_to_string(repo("contrib/systemd/gpufree.conf")).unwrap();
    assert!(text.contains("ExecStartPre=/usr/local/bin/gpufree wait"));
    assert!(text.contains("ExecStopPost=-/usr/local/bin/gpufree kill --unit %n --yes"));
    let r = gpufree(
        &[
            "doctor",
            "--json",
            "--unit",
            repo("fixtures/seed-incident/vllm.service")
                .to_str()
                .unwrap(),
        ],
        &[],
    );
    assert_eq!(r.code, 1);
    let doc = r.json();
    let messages: Vec<&str> = doc["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["message"].as_str().unwrap())
        .collect();
    assert!(
        messages.iter().any(|m| m.contains("${free}")),
        "{messages:?}"
    );
    assert!(
        messages.iter().any(|m| m.contains("nvidia-smi")),
        "{messages:?}"
    );
    let r = gpufree(&["doctor", "--unit", "/nonexistent/x.service"], &[]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("/nonexistent/x.service"));
}

#[test]
fn slurm_epilog_never_frees_a_whole_gpu_split_by_mig() {
    let d = TestDir::new(1);
    let (mine, theirs) = (d.mapper("nvidia0"), d.mapper("nvidia0"));
    let mut g = crate::mig::mig_gpu(
        0,
        2,
        "3g.71gb",
        71,
        &[(0, mine.pid(), 1024), (1, theirs.pid(), 2048)],
    );
    g["mig_mode"] = serde_json::json!(true);
    let state = d.state(&sim_state(vec![g]));
    // Slurm's "0" is a MIG gres here, not GPU 0: nothing is signalled.
    let r = slurm("contrib/slurm/epilog.sh", &d, &state, "0");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("split by MIG") && r.stderr.contains("nothing signalled"),
        "{}",
        r.stderr
    );
    assert!(alive(mine.pid()) && alive(theirs.pid()));
    // Given the job's MIG UUID, it frees exactly that instance.
    let lib = sim_lib();
    let r = run_cmd(
        std::process::Command::new("bash")
            .arg(repo("contrib/slurm/epilog.sh"))
            .env_clear()
            .env("GPUFREE", bin())
            .env("GPUFREE_BPF_CACHE", crate::harness::bpf_cache())
            .env("GPUFREE_JOB_GPUS", crate::mig::mig_uuid(0, 0))
            .env("SLURM_JOB_GPUS", "0")
            .env("GPUFREE_EPILOG_GRACE", "1s")
            .env("GPUFREE_EPILOG_TIMEOUT", "10s")
            .env("GPUFREE_DEV_DIR", &d.dev)
            .env("GPUFREE_NVML_LIB", lib)
            .env("GPUFREE_SIM_STATE", &state),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!alive(mine.pid()), "the job's instance is freed");
    assert!(alive(theirs.pid()), "the other job's instance is untouched");
}
