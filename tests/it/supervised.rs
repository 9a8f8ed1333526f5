//! Groups that something starts again: `why` names the supervisor, and its
//! `next` line, run by a shell as printed (with a fake `systemctl` where a
//! unit must be stopped), stops it and proves the GPU free.

use crate::harness::*;
use gpufree::holder::{ChildSpec, HoldSpec, Spawned};
use serde_json::Value;
use std::path::Path;

/// `why --json` on the simulator.
fn why(d: &TestDir, state: &Path, env: &[(&str, &str)]) -> Value {
    let lib = sim_lib();
    let mut all = vec![("GPUFREE_SIM_STATE", state.to_str().unwrap())];
    all.extend_from_slice(env);
    let r = gpufree(
        &[
            "why",
            "--json",
            "--dev-dir",
            d.dev.to_str().unwrap(),
            "--nvml-lib",
            lib.to_str().unwrap(),
        ],
        &all,
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
    r.json()
}

/// Runs `next` with `sh -c`, gpufree and `bin` first on PATH, aimed at the
/// simulator; returns its exit code.
fn run_next(next: &str, d: &TestDir, state: &Path, bin_dir: &Path) -> i32 {
    let gpufree_dir = bin().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}:{}",
        bin_dir.display(),
        gpufree_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    std::process::Command::new("sh")
        .args(["-c", next])
        .env("PATH", path)
        .env("GPUFREE_SIM_STATE", state)
        .env("GPUFREE_DEV_DIR", &d.dev)
        .env("GPUFREE_NVML_LIB", sim_lib())
        .status()
        .unwrap()
        .code()
        .unwrap_or(-1)
}

fn pid_of(s: &Spawned, label: &str) -> u32 {
    s.pids.iter().find(|(_, l)| l == label).unwrap().0
}

/// A worker that maps GPU `i`'s node, with `env`.
fn worker(d: &TestDir, i: u32, env: &[(&str, &str)]) -> ChildSpec {
    ChildSpec {
        argv: vec!["python3".into(), "-u".into(), "train.py".into()],
        spec: HoldSpec {
            label: format!("w{i}"),
            comm: Some("pt_main_thread".into()),
            mmap: vec![d.node(&format!("nvidia{i}")), d.node("nvidia-uvm")],
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..HoldSpec::default()
        },
    }
}

/// A torchrun agent with restarts left (as its ranks' environment says):
/// the agent is stopped first, by TERM, and that frees both GPUs.
#[test]
fn a_torchrun_agent_with_restarts_left_is_stopped_first() {
    let d = TestDir::new(2);
    let env = [
        ("TORCHELASTIC_RESTART_COUNT", "0"),
        ("TORCHELASTIC_MAX_RESTARTS", "3"),
    ];
    let agent = hold(
        &["/usr/bin/python3", "/usr/local/bin/torchrun", "train.py"],
        HoldSpec {
            label: "agent".into(),
            comm: Some("pt_elastic".into()),
            children: (0..2).map(|i| worker(&d, i, &env)).collect(),
            ..HoldSpec::default()
        },
    );
    let ranks = [pid_of(&agent, "w0"), pid_of(&agent, "w1")];
    let gpus: Vec<Value> = (0..2)
        .map(|i| sim_gpu(i, &[(ranks[i as usize], 1024, "while-alive")], 0))
        .collect();
    let state = d.state(&sim_state(gpus));
    let doc = why(&d, &state, &[]);
    let f = &doc["findings"][0];
    let a = agent.pid();
    assert!(
        f["message"].as_str().unwrap().contains(&format!(
            "torchrun agent {a} starts its ranks again when one dies (3 of 3 restarts left)"
        )),
        "{f}"
    );
    let next = f["next"].as_str().unwrap();
    assert_eq!(
        next,
        format!("kill -s TERM {a} && gpufree wait --gpu 0 --gpu 1")
    );
    assert_eq!(run_next(next, &d, &state, d.tmp.path()), 0);
    assert!(ranks.iter().all(|p| !alive(*p)));
}

/// The cgroup of a test-made system unit, removed (after its processes
/// are gone) on drop.
struct UnitCgroup(std::path::PathBuf);

impl Drop for UnitCgroup {
    fn drop(&mut self) {
        for _ in 0..100 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// A systemd unit with `Restart=always` (its unit file in a test unit
/// directory, its processes in a real cgroup of that name): `why` says
/// systemd restarts it, and `systemctl stop UNIT && gpufree wait` (the
/// fake systemctl kills the unit's cgroup, as systemd does) frees the GPU.
#[test]
fn a_unit_that_restarts_is_stopped_with_systemctl() {
    let unified = Path::new("/sys/fs/cgroup/unified");
    let root = if unified.join("cgroup.procs").exists() {
        unified
    } else {
        Path::new("/sys/fs/cgroup")
    };
    let unit = format!("gpufree-test-{}.service", std::process::id());
    let cg = root.join("system.slice").join(&unit);
    if std::fs::create_dir_all(&cg).is_err() {
        assert!(std::env::var_os("CI").is_none(), "CI can make cgroups");
        eprintln!("skipped: cannot make a cgroup here");
        return;
    }
    let cg = UnitCgroup(cg);
    let d = TestDir::new(1);
    let units = d.tmp.path().join("units");
    std::fs::create_dir(&units).unwrap();
    std::fs::write(
        units.join(&unit),
        "[Service]\nExecStart=/usr/bin/python3 serve.py\nRestart=always\nRestartSec=2\n",
    )
    .unwrap();
    let h = hold(
        &["python3", "serve.py"],
        HoldSpec {
            mmap: vec![d.node("nvidia0")],
            ..HoldSpec::default()
        },
    );
    std::fs::write(cg.0.join("cgroup.procs"), h.pid().to_string()).unwrap();
    let bin_dir = d.tmp.path().join("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    let log = d.tmp.path().join("systemctl.log");
    let fake = format!(
        "#!/bin/sh\necho \"$@\" >> {log}\n[ \"$1\" = stop ] || exit 1\nfor p in $(cat {procs}); do kill -9 $p; done\n",
        log = log.display(),
        procs = cg.0.join("cgroup.procs").display()
    );
    let systemctl = bin_dir.join("systemctl");
    std::fs::write(&systemctl, fake).unwrap();
    std::fs::set_permissions(
        &systemctl,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let state = d.one_gpu(&[(h.pid(), 1024, "while-alive")], 0);
    let doc = why(
        &d,
        &state,
        &[("GPUFREE_UNIT_PATH", units.to_str().unwrap())],
    );
    let f = &doc["findings"][0];
    assert_eq!(f["pids"], serde_json::json!([h.pid()]), "{doc}");
    assert!(
        f["message"].as_str().unwrap().contains(&format!(
            "systemd starts {unit} again when it dies (Restart=always, RestartSec=2)"
        )),
        "{f}"
    );
    let next = f["next"].as_str().unwrap();
    assert_eq!(
        next,
        format!("systemctl stop {unit} && gpufree wait --gpu 0")
    );
    assert_eq!(run_next(next, &d, &state, &bin_dir), 0);
    assert!(!alive(h.pid()));
    assert_eq!(
        std::fs::read_to_string(&log).unwrap().trim(),
        format!("stop {unit}")
    );
}
