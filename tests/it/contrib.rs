//! The shipped integration files: Slurm prolog and epilog scripts run
//! against the simulator with real holders; the systemd drop-in and the
//! incident's unit through `gpufree doctor`; the units of `serve` and
//! `prepare` through systemd-analyze and as their packages ship them.

use crate::harness::*;
use std::path::{Path, PathBuf};

/// Runs a contrib script as Slurm would, pointed at the simulator, with
/// no `scontrol` (never the machine's: draining the node is tested on a
/// real cluster, tests/it/slurm).
fn slurm(script: &str, d: &TestDir, state: &Path, job_gpus: &str) -> Output {
    let lib = sim_lib();
    run_cmd(
        std::process::Command::new("bash")
            .arg(repo(script))
            .env_clear()
            .env("SCONTROL", "/nonexistent/scontrol")
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
    r.assert_exit_with(0, format_args!("GPU 0 is free: {}", r.stderr));
    let r = slurm("contrib/slurm/prolog.sh", &d, &state, "0,1");
    r.assert_exit_with(1, format_args!("GPU 1 is busy: the node drains"));
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
    r.assert_exit(0);
    assert!(!alive(left.pid()), "the job's leftover is gone");
    assert!(alive(other.pid()), "another job's GPU is untouched");
    let r = slurm("contrib/slurm/epilog.sh", &d, &state, "");
    r.assert_exit_with(0, format_args!("no GPUs: nothing to do"));
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
    r.assert_exit_with(0, "prolog");
    assert_eq!(r.stderr, "", "prolog");
    let r = slurm("contrib/slurm/epilog.sh", &d, &state, "0,1");
    r.assert_exit_with(0, "epilog after a clean job");
    assert_eq!(r.stderr, "", "epilog after a clean job");
    assert!(alive(daemon.pid()), "the daemon is never signalled");
    let left = d.mapper("nvidia1");
    let state = d.state(&sim_state(vec![
        sim_gpu(0, &[], 0),
        sim_gpu(1, &[(left.pid(), 4096, "while-alive")], 0),
    ]));
    let r = slurm("contrib/slurm/epilog.sh", &d, &state, "0,1");
    r.assert_exit(0);
    assert!(!alive(left.pid()), "the job's leftover is freed");
    assert!(alive(daemon.pid()), "and the daemon is not");
}

#[test]
fn systemd_drop_in_is_clean_and_the_incident_unit_is_not() {
    let r = Gpufree::new(["doctor"])
        .args([
            "--unit",
            repo("contrib/systemd/gpufree.conf").to_str().unwrap(),
        ])
        .run();
    r.assert_exit(0);
    let text = std::fs::read_to_string(repo("contrib/systemd/gpufree.conf")).unwrap();
    assert!(text.contains("ExecStartPre=/usr/bin/gpufree wait"));
    assert!(text.contains("ExecStopPost=-/usr/bin/gpufree kill --unit %n --yes"));
    let r = Gpufree::new(["doctor"])
        .json()
        .args([
            "--unit",
            repo("fixtures/seed-incident/vllm.service")
                .to_str()
                .unwrap(),
        ])
        .run();
    r.assert_exit(1);
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
    let r = Gpufree::new(["doctor"])
        .args(["--unit", "/nonexistent/x.service"])
        .run();
    r.assert_exit(2);
    assert!(r.stderr.contains("/nonexistent/x.service"));
}

/// Every contrib file that names gpufree's binary names the one the .deb
/// and the RPM install (newcomer: the drop-in named /usr/local/bin, which
/// no install method gives), and says what to change for another.
#[test]
fn contrib_files_name_the_packaged_binary() {
    let cargo = std::fs::read_to_string(repo("Cargo.toml")).unwrap();
    assert!(cargo.contains(r#"["target/release/gpufree", "usr/bin/", "755"]"#));
    for file in [
        "contrib/systemd/gpufree.conf",
        "contrib/systemd/gpufree-serve.service",
        "contrib/systemd/gpufree-prepare.service",
        "contrib/nhc/gpufree.nhc",
        "contrib/k8s/npd-daemonset-gpufree.yaml",
        "contrib/k8s/npd-gpufree-monitor.json",
    ] {
        let text = std::fs::read_to_string(repo(file)).unwrap();
        assert!(!text.contains("/usr/local/bin/gpufree"), "{file}");
        assert!(text.contains("/usr/bin/gpufree"), "{file}");
        if !file.ends_with(".json") {
            assert!(
                text.contains("~/.cargo/bin"),
                "{file} says what cargo gives"
            );
        }
    }
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
    r.assert_exit(1);
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
            .env("SCONTROL", "/nonexistent/scontrol")
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
    r.assert_exit(0);
    assert!(!alive(mine.pid()), "the job's instance is freed");
    assert!(alive(theirs.pid()), "the other job's instance is untouched");
}

/// Whether systemd-analyze is here (it needs no running systemd); else
/// says so (and fails under CI).
fn systemd_analyze_runs() -> bool {
    let runs = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok();
    if !runs {
        skip_off_ci("systemd-analyze (systemd)", &"to verify the shipped units");
    }
    runs
}

/// Fails unless systemd accepts the shipped unit `name`, with nothing to
/// warn about; its `ExecStart=/usr/bin/gpufree` (the packaged binary) is
/// pointed at the binary under test.
fn verify_unit(name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(repo(&format!("contrib/systemd/{name}"))).unwrap();
    let unit = dir.path().join(name);
    std::fs::write(
        &unit,
        text.replace(
            "ExecStart=/usr/bin/gpufree",
            &format!("ExecStart={}", bin().display()),
        ),
    )
    .unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.trim().is_empty(),
        "{name}: {said}"
    );
}

/// The shipped unit of `serve` is one systemd accepts, with nothing to
/// warn about (where systemd-analyze is installed).
#[test]
fn the_serve_unit_passes_systemd_analyze_verify() {
    let text = std::fs::read_to_string(repo("contrib/systemd/gpufree-serve.service")).unwrap();
    assert!(text.contains("ExecStart=/usr/bin/gpufree serve "), "{text}");
    if systemd_analyze_runs() {
        verify_unit("gpufree-serve.service");
    }
}

/// The shipped unit of `record`: the packaged binary's `record` into its
/// state directory, no network, no capability to signal; the packages
/// carry it; systemd accepts it (where systemd-analyze is installed).
#[test]
fn the_record_unit_records_into_its_state_directory_and_is_packaged() {
    let text = std::fs::read_to_string(repo("contrib/systemd/gpufree-record.service")).unwrap();
    let keys = unit_keys(&text);
    let value = |key: &str| -> Vec<&str> {
        keys.iter()
            .filter(|(s, k, _)| s == "Service" && k == key)
            .map(|(_, _, v)| v.as_str())
            .collect()
    };
    let exec = value("ExecStart").concat();
    assert!(
        exec.starts_with("/usr/bin/gpufree record --out /var/lib/gpufree-record/"),
        "{exec}"
    );
    assert_eq!(value("StateDirectory"), ["gpufree-record"]);
    assert_eq!(value("PrivateNetwork"), ["yes"]);
    assert!(!value("CapabilityBoundingSet").concat().contains("CAP_KILL"));
    let cargo = std::fs::read_to_string(repo("Cargo.toml")).unwrap();
    let shipped =
        r#"["contrib/systemd/gpufree-record.service", "usr/share/gpufree/systemd/", "644"]"#;
    assert!(cargo.contains(shipped), "Cargo.toml lacks {shipped}");
    if systemd_analyze_runs() {
        verify_unit("gpufree-record.service");
    }
}

/// The keys of a unit file, in order, as (section, key, value); comments
/// and blank lines left out.
fn unit_keys(text: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut keys = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
        } else if let Some((k, v)) = line.split_once('=') {
            keys.push((section.clone(), k.trim().to_string(), v.trim().to_string()));
        }
    }
    keys
}

/// `gpufree prepare`'s unit: once at boot, after the local file systems,
/// the packaged binary's `prepare` (the path the .deb installs it at), no
/// network; systemd accepts it; both packages install it in the unit
/// directory and enable it (scripts/check-deb.sh and check-rpm.sh check
/// the packages built); and prepare keeps the relocation with only the
/// capabilities the unit leaves it.
#[test]
fn the_prepare_unit_runs_the_packaged_prepare_at_boot() {
    let text = std::fs::read_to_string(repo("contrib/systemd/gpufree-prepare.service")).unwrap();
    let keys = unit_keys(&text);
    let value = |section: &str, key: &str| -> Vec<&str> {
        keys.iter()
            .filter(|(s, k, _)| s == section && k == key)
            .map(|(_, _, v)| v.as_str())
            .collect()
    };
    let cargo = std::fs::read_to_string(repo("Cargo.toml")).unwrap();
    // The .deb (and the RPM, from the same list) installs the binary here.
    assert!(
        cargo.contains(r#"["target/release/gpufree", "usr/bin/", "755"]"#),
        "the packaged binary is /usr/bin/gpufree"
    );
    assert_eq!(value("Service", "ExecStart"), ["/usr/bin/gpufree prepare"]);
    assert_eq!(value("Service", "Type"), ["oneshot"]);
    assert_eq!(value("Service", "PrivateNetwork"), ["yes"]);
    assert_eq!(
        value("Service", "ReadWritePaths"),
        ["-/sys/fs/bpf"],
        "where it pins the walk (read-only otherwise)"
    );
    assert_eq!(
        value("Service", "SuccessExitStatus"),
        ["1"],
        "nothing to keep"
    );
    assert!(
        value("Service", "User").is_empty(),
        "root: only root writes the cache"
    );
    assert!(value("Unit", "After")
        .iter()
        .any(|v| v.split_whitespace().any(|u| u == "local-fs.target")));
    assert_eq!(value("Install", "WantedBy"), ["multi-user.target"]);
    for shipped in [
        r#"["contrib/systemd/gpufree-prepare.service", "usr/share/gpufree/systemd/", "644"]"#,
        r#"systemd-units = { unit-scripts = "contrib/systemd/", unit-name = "gpufree-prepare", enable = true"#,
    ] {
        assert!(cargo.contains(shipped), "Cargo.toml lacks {shipped}");
    }
    if systemd_analyze_runs() {
        verify_unit("gpufree-prepare.service");
    }

    // With only the unit's capabilities (its bounding set, no new
    // privileges), as root: kept.
    let d = TestDir::new(1);
    if !rustix::process::geteuid().is_root() || !crate::bpf::per_process_walk_runs(&d) {
        return;
    }
    let caps: Vec<String> = value("Service", "CapabilityBoundingSet")
        .concat()
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_ascii_lowercase()))
        .collect();
    assert_eq!(caps, ["+bpf", "+perfmon"]);
    let bounding = format!("--bounding-set=-all,{}", caps.join(","));
    let cache = d.tmp.path().join("cache");
    let r = Gpufree::new(["prepare", "--json"])
        .wrapped([
            "setpriv",
            &bounding,
            "--inh-caps=-all",
            "--no-new-privs",
            "--",
        ])
        .env("GPUFREE_BPF_CACHE", &cache)
        .run();
    r.assert_exit(0);
    assert_eq!(r.json()["state"], "made", "{}", r.report());
    assert!(cache.join("holders-bpf.cache").exists());
}

/// The capabilities of the shipped unit's `AmbientCapabilities=`, as
/// setpriv takes them (`+sys_ptrace,+dac_read_search,...`).
fn unit_capabilities() -> Vec<String> {
    let text = std::fs::read_to_string(repo("contrib/systemd/gpufree-serve.service")).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("AmbientCapabilities="))
        .expect("the unit sets AmbientCapabilities=");
    line.split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_ascii_lowercase()))
        .collect()
}

/// A directory of `uid`'s directly under /run, 0755: what the unit's
/// RuntimeDirectory= makes for the view's socket. Removed when dropped.
struct RunDir(PathBuf);

impl RunDir {
    fn new(uid: u32) -> RunDir {
        use std::os::unix::fs::PermissionsExt;
        let dir = PathBuf::from(format!("/run/gpufree-it-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&dir, Some(uid), Some(uid)).unwrap();
        RunDir(dir)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `serve` as the unit runs it: a user of its own (4243), exactly the
/// unit's capabilities (ambient, and the bounding set), no new privileges.
/// Returns the child once its view answers.
fn serve_as_the_unit(
    d: &TestDir,
    caps: &[String],
    socket: &Path,
    state: &Path,
) -> std::process::Child {
    let Kit { gpufree: exe, lib } = nobody_kit(d);
    let caps = caps.join(",");
    let inh = format!("--inh-caps=-all,{caps}");
    let ambient = format!("--ambient-caps=-all,{caps}");
    let bounding = format!("--bounding-set=-all,{caps}");
    let setpriv = ["setpriv", "--reuid=4243", "--regid=4243", "--clear-groups"];
    let serve = Gpufree::new(["serve", "--listen", "127.0.0.1:0", "--interval", "200ms"])
        .program(exe)
        .wrapped(
            setpriv
                .into_iter()
                .chain([&*inh, &ambient, &bounding, "--no-new-privs", "--"]),
        )
        .dev(&d.dev)
        .nvml_lib(lib)
        .opt_value("--view-socket", socket)
        .sim_state(state);
    serve_listening(&mut serve.command())
}

/// Root's look through the view at `socket`: the JSON document of status.
fn view_status(socket: &Path) -> serde_json::Value {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    s.write_all(b"{\"version\":1,\"command\":\"status\",\"json\":true}\n")
        .unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).unwrap();
    let (head, body) = all.split_once('\n').unwrap();
    assert!(head.starts_with("{\"verdict\":"), "{all}");
    serde_json::from_str(body).unwrap()
}

/// Least privilege, tested: `serve` run as the shipped unit runs it (a user
/// of its own with only the unit's capabilities) sees what root sees —
/// root's holder, its fd and its executable — and answers a user's view;
/// without CAP_DAC_READ_SEARCH it would not see that holder at all, and
/// without CAP_SYS_PTRACE not its executable.
#[test]
fn serve_with_only_the_units_capabilities_sees_what_root_sees() {
    use std::os::unix::fs::PermissionsExt;
    if !rustix::process::geteuid().is_root() {
        skip_off_ci("root", &"to run serve as another user with capabilities");
        return;
    }
    let d = TestDir::new(1);
    std::fs::set_permissions(&d.dev, std::fs::Permissions::from_mode(0o755)).unwrap();
    let holder = hold(
        &["python3", "-m", "vllm", "--api-key", "sk-unit-secret"],
        gpufree::demo::holder::HoldSpec {
            fd: vec![d.node("nvidia0")],
            ..Default::default()
        },
    );
    let state = d.one_gpu(&[(holder.pid(), 1024, "while-alive")], 0);
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o644)).unwrap();
    let run = RunDir::new(4243);
    let caps = unit_capabilities();
    let socket = run.0.join("view.sock");
    let mut serve = serve_as_the_unit(&d, &caps, &socket, &state);
    let doc = view_status(&socket);
    let _ = serve.kill();
    let _ = serve.wait();
    let p = process(&doc, holder.pid()).unwrap_or_else(|| panic!("root's holder unseen: {doc}"));
    assert_eq!(via(p, "nvidia0"), ["fd"]);
    // CAP_BPF and CAP_PERFMON load the in-kernel walk (where this kernel
    // runs it at all: never refused for want of privilege).
    let reason = doc["visibility"]["scan_reason"].as_str().unwrap();
    assert!(
        doc["visibility"]["scan"] == "bpf" || !reason.contains("not permitted"),
        "{reason}"
    );
    assert!(
        p["exe"].as_str().is_some_and(|e| e.ends_with("gpufree")),
        "{p}"
    );
    assert_eq!(p["user"], "root");
    // A user asks the same view: trusted (the service user's socket in a
    // directory no one else may write), every holder there.
    let mut serve = serve_as_the_unit(&d, &caps, &socket, &state);
    let r = as_nobody(&d, &["status"])
        .json()
        .env_remove("GPUFREE_NVML_LIB")
        .env("GPUFREE_VIEW_SOCKET", &socket)
        .run();
    let _ = serve.kill();
    let _ = serve.wait();
    r.assert_exit(0);
    assert!(
        r.stderr
            .contains("from gpufree serve (service user uid 4243)"),
        "{}",
        r.stderr
    );
    assert!(process(&r.json(), holder.pid()).is_some(), "{}", r.stdout);
    assert!(!r.stdout.contains("sk-unit-secret"));
    // Each capability is needed: without CAP_DAC_READ_SEARCH (and the
    // in-kernel walk, which would see the fd) root's holder's fd on the GPU
    // is unseen (it is listed for NVML's memory alone, unreadable); without
    // CAP_SYS_PTRACE its executable is unread.
    for (drop, check) in [("+dac_read_search", "fd"), ("+sys_ptrace", "exe")] {
        let fewer: Vec<String> = caps
            .iter()
            .filter(|c| c.as_str() != drop && c.as_str() != "+bpf")
            .cloned()
            .collect();
        let mut serve = serve_as_the_unit(&d, &fewer, &socket, &state);
        let doc = view_status(&socket);
        let _ = serve.kill();
        let _ = serve.wait();
        let p = process(&doc, holder.pid());
        let p = p.unwrap_or_else(|| panic!("NVML lists it: {doc}"));
        match check {
            "fd" => {
                assert_eq!(p["devices"], serde_json::json!([]), "without {drop}");
                assert!(u32s(&doc["visibility"]["unreadable_pids"]).contains(&holder.pid()));
            }
            _ => assert!(p["exe"].is_null(), "without {drop}: {p}"),
        }
    }
}
