//! Groups that something starts again: `why` names the supervisor, and its
//! `next` line, run by a shell as printed (with a fake `systemctl` where a
//! unit must be stopped), stops it and proves the GPU free.

use crate::harness::*;
use gpufree::demo::holder::{ChildSpec, HoldSpec};
use serde_json::Value;
use std::path::Path;

/// Runs `next` with `sh -c`, gpufree and `bin` first on PATH, aimed at the
/// simulator (with the tests' BPF cache).
fn run_next(next: &str, d: &TestDir, state: &Path, bin_dir: &Path) -> Output {
    let gpufree_dir = bin().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}:{}",
        bin_dir.display(),
        gpufree_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    run_cmd(
        scratch(&mut std::process::Command::new("sh"))
            .args(["-c", next])
            .env("PATH", path)
            .env("GPUFREE_SIM_STATE", state)
            .env("GPUFREE_DEV_DIR", &d.dev)
            .env("GPUFREE_NVML_LIB", sim_lib()),
    )
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
    let ranks = [agent.pid_of("w0"), agent.pid_of("w1")];
    let gpus: Vec<Value> = (0..2)
        .map(|i| sim_gpu(i, &[(ranks[i as usize], 1024, "while-alive")], 0))
        .collect();
    let state = d.state(&sim_state(gpus));
    let r = Gpufree::new(["why"]).json().on(&d, &state).run();
    r.assert_exit(1);
    let doc = r.json();
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
    run_next(next, &d, &state, d.tmp.path()).assert_exit(0);
    assert!(ranks.iter().all(|p| !alive(*p)));
}

/// A test-made cgroup (under the unified hierarchy), removed once its
/// processes are gone; None (skipped off CI) where none can be made.
struct TestCgroup(std::path::PathBuf);

impl TestCgroup {
    fn new(relative: &str) -> Option<TestCgroup> {
        let unified = Path::new("/sys/fs/cgroup/unified");
        let root = if unified.join("cgroup.procs").exists() {
            unified
        } else {
            Path::new("/sys/fs/cgroup")
        };
        let path = root.join(relative);
        if let Err(e) = std::fs::create_dir_all(&path) {
            skip_off_ci("cgroups to make", &e);
            return None;
        }
        Some(TestCgroup(path))
    }

    fn procs(&self) -> std::path::PathBuf {
        self.0.join("cgroup.procs")
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        for _ in 0..100 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// A holder of GPU 0 moved into `cg`, on the simulator; the state file.
fn held_in(d: &TestDir, cg: &TestCgroup) -> (gpufree::demo::holder::Spawned, std::path::PathBuf) {
    let h = hold(
        &["python3", "serve.py"],
        HoldSpec {
            mmap: vec![d.node("nvidia0")],
            ..HoldSpec::default()
        },
    );
    std::fs::write(cg.procs(), h.pid().to_string()).unwrap();
    let state = d.one_gpu(&[(h.pid(), 1024, "while-alive")], 0);
    (h, state)
}

/// A fake `tool` in `d`'s `bin/` that logs its argv and, when its first
/// argument is `verb`, kills every process of `cg` (the ones the test put
/// there), as systemd or the kubelet would. Returns the bin dir and log.
fn fake_tool(
    d: &TestDir,
    tool: &str,
    verb: &str,
    cg: &TestCgroup,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let bin_dir = d.tmp.path().join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let log = d.tmp.path().join(format!("{tool}.log"));
    let script = format!(
        "#!/bin/sh\nprintf '%s\\n' \"$*\" >> {log}\ncase \" $* \" in *\" {verb} \"*) ;; *) exit 1;; esac\nfor p in $(cat {procs}); do kill -9 $p; done\n",
        log = log.display(),
        procs = cg.procs().display()
    );
    let path = bin_dir.join(tool);
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (bin_dir, log)
}

/// A systemd unit with `Restart=always` (its unit file in a test unit
/// directory, its processes in a real cgroup of that name): `why` says
/// systemd restarts it, and `systemctl stop UNIT && gpufree wait` (the
/// fake systemctl kills the unit's cgroup, as systemd does) frees the GPU.
#[test]
fn a_unit_that_restarts_is_stopped_with_systemctl() {
    let unit = format!("gpufree-test-{}.service", std::process::id());
    let Some(cg) = TestCgroup::new(&format!("system.slice/{unit}")) else {
        return;
    };
    let d = TestDir::new(1);
    let units = d.tmp.path().join("units");
    std::fs::create_dir(&units).unwrap();
    std::fs::write(
        units.join(&unit),
        "[Service]\nExecStart=/usr/bin/python3 serve.py\nRestart=always\nRestartSec=2\n",
    )
    .unwrap();
    let (h, state) = held_in(&d, &cg);
    let (bin_dir, log) = fake_tool(&d, "systemctl", "stop", &cg);
    let r = Gpufree::new(["why"])
        .json()
        .on(&d, &state)
        .envs([("GPUFREE_UNIT_PATH", units.to_str().unwrap())])
        .run();
    r.assert_exit(1);
    let doc = r.json();
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
    // kill's plan says so before anything is signalled.
    let plan = Gpufree::new(["kill"])
        .on(&d, &state)
        .args(["--pid", &h.pid().to_string(), "--dry-run", "--no-color"])
        .env("GPUFREE_UNIT_PATH", units.to_str().unwrap())
        .run();
    assert!(
        plan.stdout.contains(&format!(
            "restarts: systemd starts {unit} again when it dies (Restart=always, RestartSec=2): stop the unit"
        )) && plan.stdout.contains(&format!("first: `{next}`")),
        "{}",
        plan.stdout
    );
    assert!(alive(h.pid()), "a dry run signals nothing");
    run_next(next, &d, &state, &bin_dir).assert_exit(0);
    assert!(!alive(h.pid()));
    assert_eq!(
        std::fs::read_to_string(&log).unwrap().trim(),
        format!("stop {unit}")
    );
}

/// A pod of a Deployment (its name and namespace from the kubelet's log
/// directory, never from the container): `why` says its ReplicaSet starts
/// it again, and `kubectl -n NS scale deployment/D --replicas 0 && gpufree
/// wait` (the fake kubectl kills the pod's cgroup) frees the GPU.
#[test]
fn a_deployments_pod_is_scaled_down() {
    let uid = format!("{:08x}-5678-90ab-cdef-1234567890ab", std::process::id());
    let Some(cg) = TestCgroup::new(&format!(
        "kubepods.slice/kubepods-pod{}.slice/cri-containerd-{}.scope",
        uid.replace('-', "_"),
        "ab".repeat(32)
    )) else {
        return;
    };
    let d = TestDir::new(1);
    let logs = d.tmp.path().join("pods");
    std::fs::create_dir_all(logs.join(format!("ml_vllm-7d9c5b6f4-x2x9k_{uid}"))).unwrap();
    let (h, state) = held_in(&d, &cg);
    let (bin_dir, log) = fake_tool(&d, "kubectl", "scale", &cg);
    let r = Gpufree::new(["why"])
        .json()
        .on(&d, &state)
        .envs([("GPUFREE_POD_LOG_DIR", logs.to_str().unwrap())])
        .run();
    r.assert_exit(1);
    let doc = r.json();
    let f = &doc["findings"][0];
    assert_eq!(f["pids"], serde_json::json!([h.pid()]), "{doc}");
    let next = f["next"].as_str().unwrap();
    assert_eq!(
        next,
        "kubectl -n ml scale deployment/vllm --replicas 0 && gpufree wait --gpu 0"
    );
    run_next(next, &d, &state, &bin_dir).assert_exit(0);
    assert!(!alive(h.pid()));
    assert_eq!(
        std::fs::read_to_string(&log).unwrap().trim(),
        "-n ml scale deployment/vllm --replicas 0"
    );
}

/// systemd's side of the bus, as much as gpufree asks: the Manager's
/// `GetUnit` and each unit's Service properties.
struct Manager {
    unit: String,
}

#[zbus::interface(name = "org.freedesktop.systemd1.Manager")]
impl Manager {
    fn get_unit(&self, name: &str) -> zbus::fdo::Result<zbus::zvariant::OwnedObjectPath> {
        if name != self.unit {
            return Err(zbus::fdo::Error::Failed(format!("no unit {name}")));
        }
        zbus::zvariant::OwnedObjectPath::try_from("/org/freedesktop/systemd1/unit/test")
            .map_err(|e| zbus::fdo::Error::Failed(e.to_string()))
    }
}

struct Service;

#[zbus::interface(name = "org.freedesktop.systemd1.Service")]
impl Service {
    #[zbus(property)]
    fn restart(&self) -> String {
        "on-failure".into()
    }
    #[zbus(property, name = "RestartUSec")]
    fn restart_usec(&self) -> u64 {
        3_000_000
    }
    #[zbus(property, name = "NRestarts")]
    fn n_restarts(&self) -> u32 {
        7
    }
}

/// A private D-Bus daemon with a fake systemd on it; both end on drop.
struct FakeSystemd {
    daemon: std::process::Child,
    address: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    service: Option<std::thread::JoinHandle<()>>,
}

impl FakeSystemd {
    fn start(dir: &Path, unit: &str) -> Option<FakeSystemd> {
        let socket = dir.join("bus");
        let config = dir.join("bus.conf");
        std::fs::write(
            &config,
            format!(
                "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\" \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n<busconfig><type>session</type><listen>unix:path={}</listen><auth>EXTERNAL</auth><policy context=\"default\"><allow send_destination=\"*\" eavesdrop=\"true\"/><allow eavesdrop=\"true\"/><allow own=\"*\"/></policy></busconfig>\n",
                socket.display()
            ),
        )
        .unwrap();
        let daemon = std::process::Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"])
            .stdout(std::process::Stdio::piped())
            .spawn();
        let mut daemon = match daemon {
            Ok(d) => d,
            Err(e) => {
                skip_off_ci("dbus-daemon", &e);
                return None;
            }
        };
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(daemon.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let address = line.trim().to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, is_ready) = std::sync::mpsc::channel();
        let (addr, unit) = (address.clone(), unit.to_string());
        let service = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let _conn = zbus::connection::Builder::address(addr.as_str())
                    .unwrap()
                    .name("org.freedesktop.systemd1")
                    .unwrap()
                    .serve_at("/org/freedesktop/systemd1", Manager { unit })
                    .unwrap()
                    .serve_at("/org/freedesktop/systemd1/unit/test", Service)
                    .unwrap()
                    .build()
                    .await
                    .unwrap();
                ready.send(()).unwrap();
                let _ = stopped.await;
            });
        });
        is_ready.recv().unwrap();
        Some(FakeSystemd {
            daemon,
            address,
            stop: Some(stop),
            service: Some(service),
        })
    }
}

impl Drop for FakeSystemd {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.service.take() {
            let _ = t.join();
        }
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

/// Where systemd runs, its own answer over D-Bus wins over the unit files
/// (a `systemctl set-property` or a drop-in not yet reloaded): here the
/// file says Restart=no, systemd says on-failure.
#[test]
fn systemd_over_d_bus_answers_for_its_units() {
    let unit = format!("gpufree-bus-{}.service", std::process::id());
    let Some(cg) = TestCgroup::new(&format!("system.slice/{unit}")) else {
        return;
    };
    let d = TestDir::new(1);
    let Some(bus) = FakeSystemd::start(d.tmp.path(), &unit) else {
        return;
    };
    let units = d.tmp.path().join("units");
    std::fs::create_dir(&units).unwrap();
    std::fs::write(units.join(&unit), "[Service]\nRestart=no\n").unwrap();
    let (h, state) = held_in(&d, &cg);
    let env = [
        ("GPUFREE_UNIT_PATH", units.to_str().unwrap()),
        ("GPUFREE_SYSTEMD_BUS", bus.address.as_str()),
    ];
    let r = Gpufree::new(["why"])
        .json()
        .on(&d, &state)
        .envs(env.iter().copied())
        .run();
    r.assert_exit(1);
    let doc = r.json();
    let f = &doc["findings"][0];
    assert_eq!(f["pids"], serde_json::json!([h.pid()]), "{doc}");
    assert!(
        f["message"].as_str().unwrap().contains(&format!(
            "systemd starts {unit} again when it dies (Restart=on-failure, RestartSec=3s)"
        )),
        "{f}"
    );
    assert!(
        f["details"][0]
            .as_str()
            .unwrap()
            .contains("systemd over D-Bus (restarted 7 times so far)"),
        "{f}"
    );
    assert_eq!(
        f["next"],
        format!("systemctl stop {unit} && gpufree wait --gpu 0")
    );
    // A bus that does not answer: the unit file decides, and the failure
    // is named.
    drop(bus);
    let gone = d.tmp.path().join("bus").display().to_string();
    let r = Gpufree::new(["why"])
        .json()
        .on(&d, &state)
        .envs([
            ("GPUFREE_UNIT_PATH", units.to_str().unwrap()),
            ("GPUFREE_SYSTEMD_BUS", &format!("unix:path={gone}")),
        ])
        .run();
    r.assert_exit(1);
    let doc = r.json();
    let f = &doc["findings"][0];
    assert_eq!(
        f["next"],
        format!("systemctl stop {unit} && gpufree wait --gpu 0"),
        "{f}"
    );
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("some could not be read"),
        "{f}"
    );
    assert!(
        doc["units"][&unit]["unreadable"][0]
            .as_str()
            .unwrap()
            .starts_with("systemd over D-Bus"),
        "{doc}"
    );
}
