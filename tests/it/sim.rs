//! The simulated libnvidia-ml.so.1: `sim lib`, `sim exec`, liveness and
//! release delay, and unmodified NVML clients (pynvml, gpustat, nvitop).

use crate::harness::*;
use gpufree::demo::{Incident, WORKER_MIB};
use std::time::{Duration, Instant};

#[test]
fn sim_lib_is_a_directory_holding_libnvidia_ml() {
    let lib = sim_lib();
    assert!(lib.exists(), "{}", lib.display());
    assert!(std::fs::canonicalize(lib)
        .unwrap()
        .ends_with("libgpufree_nvml_sim.so"));
}

/// Root given a user's cache directory (`sudo -E` keeps `XDG_CACHE_HOME`
/// and `HOME`), whose owner could swap any directory on the way after a
/// check: `sim lib` writes and links nothing there and names no path in
/// it; the carried library goes to root's own directory in the temp dir.
/// A cache reached through a link is refused alike.
#[test]
fn sim_lib_as_root_never_uses_a_cache_directory_of_another_user() {
    use std::os::unix::fs::symlink;
    if !rustix::process::getuid().is_root() {
        skip_off_ci("root", &"a directory is given to nobody");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // Private, as a directory in /tmp must be for a cache's path to pass.
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let theirs = tmp.path().join("theirs");
    let cache = theirs.join(".cache");
    std::fs::create_dir_all(&cache).unwrap();
    for d in [&theirs, &cache] {
        std::os::unix::fs::chown(d, Some(65534), Some(65534)).unwrap();
    }
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = tmp.path().join("link");
    symlink(&real, &link).unwrap();
    let temp = tmp.path().join("temp");
    std::fs::create_dir(&temp).unwrap();
    // gpufree as installed: no library beside it, so the one it carries is
    // written out (a hard link in the build's scratch directory).
    let kit = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let installed = kit.path().join("gpufree");
    if std::fs::hard_link(bin(), &installed).is_err() {
        std::fs::copy(bin(), &installed).unwrap();
    }
    for (var, value) in [
        ("XDG_CACHE_HOME", &cache),
        ("HOME", &theirs),
        ("XDG_CACHE_HOME", &link),
    ] {
        let r = run_cmd(
            std::process::Command::new(&installed)
                .args(["sim", "lib"])
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .env("TMPDIR", &temp)
                .env(var, value),
        );
        r.assert_exit_with(0, format_args!("{var}={}: {}", value.display(), r.stderr));
        assert!(r.stderr.is_empty(), "said only on error: {}", r.stderr);
        let dir = std::path::PathBuf::from(r.stdout.trim());
        assert_eq!(dir, temp.join("gpufree-sim-0/nvml-sim"), "{var}");
        let lib = std::fs::read_link(dir.join("libnvidia-ml.so.1")).unwrap();
        assert!(
            lib.starts_with(temp.join("gpufree-sim-0")),
            "{}",
            lib.display()
        );
        assert_eq!(
            std::fs::read_dir(&cache).unwrap().count(),
            0,
            "nothing made in their cache"
        );
        assert_eq!(
            std::fs::read_dir(&real).unwrap().count(),
            0,
            "nor through the link"
        );
    }
}

#[test]
fn sim_exec_of_a_missing_program_exits_127_naming_it() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let r = Gpufree::new(["sim", "exec"])
        .args([
            "--state",
            state.to_str().unwrap(),
            "--",
            "/nonexistent/tool",
        ])
        .run();
    r.assert_exit(127);
    assert!(r.stderr.contains("/nonexistent/tool"), "{}", r.stderr);
}

#[test]
fn memory_of_an_exited_process_is_released_after_the_delay() {
    let d = TestDir::new(1);
    let mut h = d.mapper("nvidia0");
    let state = d.one_gpu(&[(h.pid(), 2048, "while-alive")], 1500);
    let used = || {
        Gpufree::new(["status"]).json().on(&d, &state).doc()["gpus"][0]["memory"]["used_bytes"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(used(), 2048 << 20, "held while alive");
    h.kill();
    let gone = Instant::now();
    assert_eq!(
        used(),
        2048 << 20,
        "still held just after the exit (release delay)"
    );
    let deadline = gone + Duration::from_secs(10);
    while used() != 0 {
        assert!(Instant::now() < deadline, "never released");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        gone.elapsed() >= Duration::from_millis(1400),
        "released only after the delay: {:?}",
        gone.elapsed()
    );
}

/// The simulator keeps the moment a holder is first seen gone in a log
/// beside the state file; the NVML client that notices writes it (here
/// gpufree, as root where the tests run as root). A link planted at the
/// temporary name it used before (`state.json.tmp<PID>`, the client's PID:
/// the shell's, which `exec` keeps) is never written through, nor is one
/// at the log's own name.
#[test]
fn simulator_never_writes_its_state_through_a_planted_symlink() {
    use std::os::unix::fs::symlink;
    let d = TestDir::new(1);
    let mut h = d.mapper("nvidia0");
    let state = d.one_gpu(&[(h.pid(), 2048, "while-alive")], 60_000);
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let log = d.tmp.path().join("state.json.gone");
    symlink(&victim, &log).unwrap();
    h.kill();
    let lib = sim_lib();
    let r = run_cmd(
        std::process::Command::new("sh")
            .args([
                "-c",
                r#"ln -s "$1" "$2.tmp$$" && exec "$3" status --json --dev-dir "$4" --nvml-lib "$5""#,
                "sh",
            ])
            .arg(&victim)
            .arg(&state)
            .arg(bin())
            .arg(&d.dev)
            .arg(lib)
            .env("GPUFREE_SIM_STATE", &state)
            .env("GPUFREE_BPF_CACHE", bpf_cache()),
    );
    r.assert_exit(0);
    assert_eq!(
        r.json()["gpus"][0]["memory"]["used_bytes"],
        2048u64 << 20,
        "held for the release delay, so the moment was logged"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let links: Vec<_> = std::fs::read_dir(d.tmp.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| std::fs::symlink_metadata(p).unwrap().is_symlink())
        .collect();
    assert_eq!(
        links.len(),
        1,
        "the planted temporary link stays: {links:?}"
    );
    let kept: serde_json::Value = serde_json::from_slice(&std::fs::read(&log).unwrap()).unwrap();
    assert!(
        kept["first_gone_ms"].get(h.pid().to_string()).is_some(),
        "the log, a file of its own, names the holder: {kept}"
    );
}

#[test]
fn zombie_holder_memory_is_released_by_the_simulator() {
    let d = TestDir::new(1);
    let z = d.zombie("nvidia0");
    let state = d.one_gpu(&[(z.pid(), 512, "while-alive")], 0);
    let doc = Gpufree::new(["status"]).json().on(&d, &state).doc();
    assert_eq!(
        doc["gpus"][0]["memory"]["used_bytes"], 0,
        "a zombie is not alive: {doc}"
    );
}

fn python_has(modules: &str) -> bool {
    std::process::Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Unmodified NVML clients see the same GPUs, memory and processes as gpufree.
/// Required in CI (which installs them); elsewhere skipped when missing.
#[test]
fn pynvml_gpustat_and_nvitop_see_what_gpufree_sees() {
    if !python_has("pynvml, gpustat, nvitop") {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install nvidia-ml-py, gpustat and nvitop"
        );
        eprintln!("skipped: pip install nvidia-ml-py gpustat nvitop");
        return;
    }
    let inc = Incident::start(&bin()).unwrap();
    let st = inc.state.to_str().unwrap();
    let exec = |cmd: &[&str]| {
        let r = Gpufree::new(["sim", "exec", "--state", st, "--"])
            .args(cmd)
            .run();
        r.assert_exit(0);
        r.stdout.clone()
    };
    let b = bin();
    let ours: serde_json::Value = serde_json::from_str(&exec(&[
        b.to_str().unwrap(),
        "status",
        "--json",
        "--dev-dir",
        inc.dev.to_str().unwrap(),
    ]))
    .unwrap();

    let py = exec(&["python3", "-c", "import pynvml as n, json\nn.nvmlInit()\nout=[]\nfor i in range(n.nvmlDeviceGetCount()):\n  h=n.nvmlDeviceGetHandleByIndex(i)\n  m=n.nvmlDeviceGetMemoryInfo(h)\n  out.append({'uuid':n.nvmlDeviceGetUUID(h),'used':m.used,'total':m.total,'bus':n.nvmlDeviceGetPciInfo(h).busId,'pids':[p.pid for p in n.nvmlDeviceGetComputeRunningProcesses(h)]})\nn.nvmlShutdown()\nprint(json.dumps(out))"]);
    let py: Vec<serde_json::Value> = serde_json::from_str(&py).unwrap();
    assert_eq!(py.len(), 8);
    for (i, g) in py.iter().enumerate() {
        let o = &ours["gpus"][i];
        assert_eq!(g["uuid"], o["uuid"]);
        assert_eq!(g["bus"], o["pci_bus_id"]);
        assert_eq!(g["used"], o["memory"]["used_bytes"]);
        assert_eq!(g["total"], o["memory"]["total_bytes"]);
        assert_eq!(
            g["pids"],
            serde_json::json!([inc.pid(&format!("worker{i}")).unwrap()])
        );
    }

    let gs: serde_json::Value = serde_json::from_str(&exec(&["gpustat", "--json"])).unwrap();
    let gpus = gs["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 8);
    for (i, g) in gpus.iter().enumerate() {
        assert_eq!(g["uuid"], ours["gpus"][i]["uuid"]);
        assert_eq!(g["memory.used"], WORKER_MIB);
        assert_eq!(g["memory.total"], 97_887);
        assert_eq!(
            g["processes"][0]["pid"],
            inc.pid(&format!("worker{i}")).unwrap()
        );
        assert_eq!(g["processes"][0]["command"], format!("VLLM::Worker_TP{i}"));
    }

    let nv = exec(&["nvitop", "-1"]);
    assert_eq!(nv.matches("94.35GiB / 95.59GiB").count(), 8, "{nv}");
    for i in 0..8 {
        assert!(
            nv.contains(&inc.pid(&format!("worker{i}")).unwrap().to_string()),
            "{nv}"
        );
    }
}
