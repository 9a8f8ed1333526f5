//! NVIDIA MPS on the simulator with real processes: a control daemon and
//! a server (the gpufree binary under their names, hard-linked, so their
//! exe says so) and two clients that the simulated driver lists with
//! `nvmlDeviceGetMPSComputeRunningProcesses`. The server holds the
//! clients' memory: status shows the clients as its clients, why explains
//! that and the order to stop things in, kill --gpu targets the clients
//! and never the daemons.

use crate::harness::*;
use gpufree::demo::holder::{ChildSpec, HoldSpec, Spawned};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// One GPU under MPS: the daemons, the clients and the state file.
struct MpsHost {
    d: TestDir,
    control: Spawned,
    server: Spawned,
    clients: [Spawned; 2],
    state: PathBuf,
}

/// Starts the gpufree binary as `name` (a hard link in the test's own
/// directory): a process whose exe is that daemon's file name.
fn daemon(d: &TestDir, name: &str, argv: &[&str], spec: HoldSpec) -> Spawned {
    let bin_dir = d.tmp.path().join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let link = bin_dir.join(name);
    if !link.exists() && std::fs::hard_link(bin(), &link).is_err() {
        std::fs::copy(bin(), &link).unwrap();
    }
    gpufree::demo::holder::spawn(
        &link,
        &ChildSpec {
            argv: argv.iter().map(|a| a.to_string()).collect(),
            spec,
        },
    )
    .unwrap()
}

impl MpsHost {
    fn start() -> MpsHost {
        let d = TestDir::new(1);
        let control = daemon(
            &d,
            "nvidia-cuda-mps-control",
            &["nvidia-cuda-mps-control", "-d"],
            HoldSpec {
                fd: vec![d.node("nvidiactl")],
                ..HoldSpec::default()
            },
        );
        let server = daemon(
            &d,
            "nvidia-cuda-mps-server",
            &["nvidia-cuda-mps-server"],
            HoldSpec {
                fd: vec![d.node("nvidiactl")],
                mmap: vec![d.node("nvidia0"), d.node("nvidia-uvm")],
                ..HoldSpec::default()
            },
        );
        // The clients run python3 (the binary under that name, as the demo
        // does): MPS is invisible to them, they hold the shared nodes.
        let client = |n: usize| {
            daemon(
                &d,
                "python3",
                &["python3", "train.py", &format!("--rank={n}")],
                HoldSpec {
                    mmap: vec![d.node("nvidia-uvm")],
                    fd: vec![d.node("nvidiactl")],
                    ..HoldSpec::default()
                },
            )
        };
        let clients = [client(0), client(1)];
        let mut g = sim_gpu(0, &[], 0);
        g["processes"] = json!([
            {"pid": server.pid(), "used_bytes": 64u64 << 20, "type": "compute"},
            {"pid": clients[0].pid(), "used_bytes": 4u64 << 30, "type": "mps"},
            {"pid": clients[1].pid(), "used_bytes": 6u64 << 30, "type": "mps"},
        ]);
        g["mps_server_pid"] = json!(server.pid());
        let state = d.state(&sim_state(vec![g]));
        MpsHost {
            d,
            control,
            server,
            clients,
            state,
        }
    }

    fn dev(&self) -> &Path {
        &self.d.dev
    }

    fn client_pids(&self) -> Vec<u32> {
        let mut p: Vec<u32> = self.clients.iter().map(Spawned::pid).collect();
        p.sort_unstable();
        p
    }
}

impl MpsHost {
    /// `gpufree CMD --json EXTRA` on the host, which neither fails (2) nor
    /// is unknown (3).
    fn json(&self, cmd: &str, extra: &[&str]) -> Output {
        let r = Gpufree::new([cmd])
            .json()
            .dev(self.dev())
            .sim(&self.state)
            .args(extra)
            .run();
        r.assert_exit_not(2).assert_exit_not(3);
        r
    }

    /// `gpufree CMD EXTRA` on the host: its stdout.
    fn text(&self, cmd: &str, extra: &[&str]) -> String {
        Gpufree::new([cmd])
            .dev(self.dev())
            .sim(&self.state)
            .args(extra)
            .run()
            .stdout
    }
}

fn finding<'a>(doc: &'a Value, kind: &str) -> &'a Value {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} finding in {doc}"))
}

#[test]
fn status_shows_the_clients_as_the_server_s_and_protects_the_daemons() {
    let h = MpsHost::start();
    let (control, server) = (h.control.pid(), h.server.pid());
    let r = h.json("status", &[]);
    let doc = r.json_or_null();
    let mps = &doc["mps"];
    assert_eq!(u32s(&mps["controls"]), [control]);
    let g = &mps["gpus"][0];
    assert_eq!(g["gpu"], 0);
    assert_eq!(u32s(&g["servers"]), [server]);
    assert_eq!(u32s(&g["clients"]), h.client_pids());
    assert_eq!(g["client_bytes"], 10u64 << 30);
    // The driver lists each client in the compute list as well as the MPS
    // list (as a real H200 does): its memory is counted once.
    let listings = doc["gpus"][0]["nvml_processes"].as_array().unwrap();
    let compute = listings.iter().filter(|n| n["kind"] == "compute").count();
    assert_eq!(compute, 3, "{listings:?}");
    for (c, gib) in h.clients.iter().zip([4u64, 6]) {
        let p = process(&doc, c.pid()).unwrap();
        assert_eq!(
            p["gpu_memory"],
            json!([{"gpu": 0, "used_bytes": gib << 30}])
        );
    }
    let memory = &doc["gpus"][0]["memory"];
    assert_eq!(memory["accounted_bytes"], (64u64 << 20) + (10u64 << 30));
    assert_eq!(memory["unaccounted_bytes"], 0, "{memory}");
    assert_eq!(process(&doc, control).unwrap()["protected"], true);
    assert_eq!(process(&doc, server).unwrap()["protected"], true);
    for c in h.client_pids() {
        assert_eq!(process(&doc, c).unwrap()["protected"], false);
    }
    let out = h.text("status", &[]);
    assert_eq!(
        out.matches(&format!("mps: client of server {server} on GPU 0"))
            .count(),
        2,
        "{out}"
    );
    assert!(out.contains("mps: server of GPU 0: holds the memory of its 2 clients (10,240 MiB)"));
    assert!(out.contains("mps: control daemon"));
}

#[test]
fn why_says_the_server_holds_the_clients_memory_stop_them_first_then_quit_mps() {
    let h = MpsHost::start();
    let server = h.server.pid();
    let r = h.json("why", &[]);
    let doc = r.json_or_null();
    r.assert_exit_with(1, format_args!("the clients hold the GPU"));
    let f = finding(&doc, "mps");
    assert_eq!(f["gpus"], json!([0]));
    let msg = f["message"].as_str().unwrap();
    for says in [
        &format!("MPS server {server}") as &str,
        "holds the memory of its 2 clients (10,240 MiB)",
        "stop the clients first",
        "`echo quit | nvidia-cuda-mps-control`",
        "killing the server instead ends the CUDA contexts of every client",
    ] {
        assert!(msg.contains(says), "{says}: {msg}");
    }
    let clients = h.client_pids();
    let kill = format!("gpufree kill --pid {} --pid {}", clients[0], clients[1]);
    assert_eq!(f["next"], kill, "the clients first");
    let protected = finding(&doc, "protected-holders");
    assert_eq!(protected["next"], "echo quit | nvidia-cuda-mps-control");
    // No finding suggests killing a daemon.
    for f in doc["findings"].as_array().unwrap() {
        let next = f["next"].as_str().unwrap();
        for daemon in [server, h.control.pid()] {
            assert!(!next.contains(&format!("--pid {daemon}")), "{f}");
        }
        assert!(!next.contains("--force-protected"), "{f}");
    }
}

#[test]
fn kill_gpu_targets_the_clients_not_the_server_and_says_so() {
    let h = MpsHost::start();
    let server = h.server.pid();
    let r = h.json("kill", &["--gpu", "0", "--dry-run"]);
    let doc = r.json_or_null();
    r.assert_exit(0);
    let planned = doc["plan"]["targets"].as_array().unwrap();
    let mut targets: Vec<u32> = planned
        .iter()
        .map(|t| t["pid"].as_u64().unwrap() as u32)
        .collect();
    targets.sort_unstable();
    assert_eq!(targets, h.client_pids(), "the clients, never the daemons");
    for t in planned {
        let why = t["reason"].as_str().unwrap();
        assert!(
            why.ends_with(&format!(
                "; an MPS client of server {server}: its memory is freed when it exits"
            )),
            "{why}"
        );
    }
    let left = doc["plan"]["skipped"].as_array().unwrap();
    let s = left.iter().find(|k| k["pid"] == server).unwrap();
    let why = s["reason"].as_str().unwrap();
    assert!(
        why.starts_with("the MPS server: protected, left running"),
        "{why}"
    );
    assert!(why.contains("echo quit | nvidia-cuda-mps-control"), "{why}");
    let plan = h.text("kill", &["--gpu", "0", "--dry-run"]);
    assert_eq!(
        plan.matches(&format!("an MPS client of server {server}"))
            .count(),
        2,
        "{plan}"
    );
    // Forcing the server alone says what it does to the clients.
    let out = h.json(
        "kill",
        &[
            "--pid",
            &server.to_string(),
            "--force-protected",
            "--dry-run",
        ],
    );
    let doc = out.json_or_null();
    assert_eq!(doc["plan"]["targets"][0]["pid"], server);
    let why = doc["plan"]["targets"][0]["reason"].as_str().unwrap();
    let clients = h.client_pids();
    assert!(
        why.contains(&format!(
            "killing it ends the CUDA contexts of its clients {}, {}",
            clients[0], clients[1]
        )),
        "{why}"
    );
}

#[test]
fn kill_gpu_kills_exactly_the_clients_and_the_memory_is_released() {
    let h = MpsHost::start();
    let r = h.json("kill", &["--gpu", "0", "--yes", "--timeout", "30s"]);
    let doc = r.json_or_null();
    r.assert_exit_with(0, format_args!("{doc}"));
    let mut targets = u32s(&doc["kill"]["targets"]);
    targets.sort_unstable();
    assert_eq!(targets, h.client_pids());
    assert_eq!(doc["kill"]["released"], true);
    for c in h.client_pids() {
        assert!(!alive(c), "client {c} still runs");
    }
    assert!(alive(h.server.pid()), "the server is left running");
    assert!(alive(h.control.pid()), "the control daemon is left running");
    // What is left on the GPU is the server's own context.
    let out = h.json("status", &[]);
    let doc = out.json_or_null();
    assert_eq!(doc["gpus"][0]["memory"]["used_bytes"], 64u64 << 20);
    assert_eq!(doc["gpus"][0]["verdict"]["state"], "free");
    assert_eq!(
        finding(&doc, "mps")["next"],
        "echo quit | nvidia-cuda-mps-control"
    );
}

#[test]
fn the_clients_memory_goes_with_the_server() {
    // What killing the server does: the simulated driver drops its
    // clients' contexts while the client processes run on.
    let h = MpsHost::start();
    let server = h.server.pid();
    let r = h.json(
        "kill",
        &[
            "--pid",
            &server.to_string(),
            "--force-protected",
            "--yes",
            "--timeout",
            "30s",
        ],
    );
    let doc = r.json_or_null();
    r.assert_exit_with(0, format_args!("{doc}"));
    assert!(!alive(server));
    let out = h.json("status", &[]);
    let doc = out.json_or_null();
    assert_eq!(doc["gpus"][0]["memory"]["used_bytes"], 0);
    for c in h.client_pids() {
        assert!(alive(c), "client {c} runs on, without its GPU context");
    }
    assert!(
        doc.get("mps")
            .is_none_or(|m| m["gpus"].as_array().unwrap().is_empty()),
        "{doc}"
    );
}
