//! `gpufree status` on the simulator: the seed incident end to end, GPU
//! selection, accounting, bad input and environment errors.

use crate::harness::*;
use gpufree::demo::holder::HoldSpec;
use gpufree::demo::{incident_state, Incident, WORKER_MIB};
use serde_json::Value;

fn incident() -> Incident {
    Incident::start(&bin()).expect("incident starts")
}

/// `gpufree sim exec --state S -- gpufree status --json --dev-dir D`:
/// the incident's status as a program on the simulator sees it (more
/// arguments follow).
fn incident_status(inc: &Incident) -> Gpufree {
    Gpufree::new(["sim", "exec"])
        .arg("--state")
        .arg(&inc.state)
        .arg("--")
        .arg(bin())
        .args(["status", "--json", "--dev-dir"])
        .arg(&inc.dev)
}

#[test]
fn seed_incident_eight_renamed_workers_hold_96610_mib_each_and_launcher_and_tracker_hold_nodes() {
    let inc = incident();
    let r = incident_status(&inc).run();
    r.assert_exit(0);
    let doc = r.json();
    let gpus = doc["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 8);
    for (i, g) in gpus.iter().enumerate() {
        let m = &g["memory"];
        assert_eq!(g["index"], i);
        assert_eq!(m["used_bytes"], WORKER_MIB << 20, "GPU {i}");
        assert_eq!(
            m["accounted_bytes"], m["used_bytes"],
            "GPU {i}: accounted = used"
        );
        assert_eq!(m["unaccounted_bytes"], 0);
        assert_eq!(m["total_bytes"], 102_642_810_880u64);
    }
    for i in 0..8 {
        let pid = inc.pid(&format!("worker{i}")).unwrap();
        let p = process(&doc, pid).unwrap_or_else(|| panic!("worker {i} ({pid}) missing"));
        assert_eq!(p["renamed"], true);
        assert_eq!(p["comm"], "VLLM::Worker_TP");
        assert_eq!(
            p["cmdline"],
            serde_json::json!([format!("VLLM::Worker_TP{i}")])
        );
        assert_eq!(
            p["gpu_memory"],
            serde_json::json!([{"gpu": i, "used_bytes": WORKER_MIB << 20}])
        );
        assert_eq!(via(p, &format!("nvidia{i}")), ["fd", "mmap"]);
        assert_eq!(via(p, "nvidia-uvm"), ["fd", "mmap"]);
        assert_eq!(p["ppid"], inc.pid("launcher").unwrap());
    }
    let launcher = process(&doc, inc.pid("launcher").unwrap()).expect("launcher is a holder");
    assert_eq!(launcher["gpu_memory"], serde_json::json!([]));
    assert_eq!(via(launcher, "nvidia-uvm"), ["fd"]);
    assert_eq!(via(launcher, "nvidia0"), ["fd"]);
    assert_eq!(launcher["renamed"], true);
    let tracker = process(&doc, inc.pid("tracker").unwrap()).expect("tracker is a holder");
    assert_eq!(via(tracker, "nvidia-uvm"), ["fd"]);
    assert_eq!(via(tracker, "nvidia0"), ["fd", "mmap"]);
    assert_eq!(
        tracker["renamed"], false,
        "the tracker kept its python command line"
    );
    assert_eq!(doc["processes"].as_array().unwrap().len(), 10);
    let f = &doc["findings"][0];
    assert_eq!(f["kind"], "live-holders");
    assert_eq!(f["pids"].as_array().unwrap().len(), 8);
    assert!(doc["visibility"]["nvml_pids_not_visible"]
        .as_array()
        .unwrap()
        .is_empty());
}

#[test]
fn seed_incident_table_reads_like_the_answer() {
    let inc = incident();
    let r = Gpufree::new(["status", "--wide"])
        .dev(&inc.dev)
        .sim(&inc.state)
        .run();
    r.assert_exit(0);
    assert!(
        !r.stdout.contains('\x1b'),
        "no colour when stdout is not a terminal"
    );
    assert!(r.stdout.contains("96,610 MiB / 97,887 MiB"), "{}", r.stdout);
    assert!(r.stdout.contains("cmdline: VLLM::Worker_TP3"));
    assert!(
        r.stdout.contains("8 live processes of launcher")
            && r.stdout.contains("hold 754.8 GiB on GPUs 0-7")
    );
    let next = r
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("next: gpufree kill"))
        .unwrap();
    for label in ["launcher", "tracker", "worker0", "worker7"] {
        assert!(
            next.contains(&format!("--pid {}", inc.pid(label).unwrap())),
            "{label}: {next}"
        );
    }
}

/// Issue 32: text within `COLUMNS` (100 without it, stdout being no
/// terminal) but the `next:` commands, whole with `--wide`; JSON whole
/// whatever the width.
#[test]
fn text_fits_columns_and_wide_cuts_nothing() {
    let inc = incident();
    let run = |extra: &[&str], columns: Option<&str>| {
        let mut g = Gpufree::new(["status"]).args(extra.iter().copied());
        if let Some(c) = columns {
            g = g.env("COLUMNS", c);
        }
        let r = g.dev(&inc.dev).sim(&inc.state).run();
        r.assert_exit(0);
        r.stdout
    };
    let fits = |text: &str, columns: usize| {
        text.lines()
            .filter(|l| !l.trim_start().starts_with("next:"))
            .all(|l| l.chars().count() <= columns)
    };
    let plain = run(&[], None);
    assert!(fits(&plain, 100), "{plain}");
    let narrow = run(&[], Some("80"));
    assert!(fits(&narrow, 80), "{narrow}");
    // The footer counts the host's processes, which come and go.
    let body = |t: &str| {
        t.lines()
            .filter(|l| !l.starts_with("scanned "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        body(&run(&[], Some("wide"))),
        body(&plain),
        "a bad COLUMNS is ignored"
    );
    let wide = run(&["--wide"], Some("80"));
    assert!(!wide.contains('…'), "{wide}");
    assert!(!fits(&wide, 100), "{wide}");
    let json = run(&["--json"], Some("40"));
    assert!(
        !json.contains('…') && json.contains("resource_tracker import main"),
        "{json}"
    );
}

#[test]
fn gpu_selection_by_index_uuid_prefix_and_pci_bus_id() {
    let inc = incident();
    let w3 = inc.pid("worker3").unwrap();
    for sel in ["3", "GPU-7f3a0003", "61:00.0", "00000000:61:00.0"] {
        let doc = incident_status(&inc).args(["--gpu", sel]).run().json();
        let gpus: Vec<&Value> = doc["gpus"].as_array().unwrap().iter().collect();
        assert_eq!(gpus.len(), 1, "--gpu {sel}");
        assert_eq!(gpus[0]["index"], 3);
        let pids: Vec<u64> = doc["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["pid"].as_u64().unwrap())
            .collect();
        assert_eq!(
            pids,
            vec![w3 as u64],
            "--gpu {sel}: only worker 3 touches GPU 3"
        );
    }
    let doc = incident_status(&inc)
        .args(["--gpu", "0", "--gpu", "1"])
        .run()
        .json();
    assert_eq!(doc["gpus"].as_array().unwrap().len(), 2);
    assert_eq!(
        doc["processes"].as_array().unwrap().len(),
        4,
        "workers 0, 1, launcher and tracker"
    );
}

#[test]
fn unknown_gpu_is_a_usage_error_in_one_line() {
    let inc = incident();
    let r = incident_status(&inc).args(["--gpu", "9"]).run();
    r.assert_exit(2);
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("--gpu 9: no such GPU"), "{}", r.stderr);
    assert!(r.stdout.is_empty());
}

#[test]
fn bad_flags_are_usage_errors() {
    let r = Gpufree::new(["status"]).args(["--gpu", "nonsense"]).run();
    r.assert_exit(2);
    assert!(r.stderr.contains("nonsense"));
    let r = Gpufree::new(["status"])
        .dev("/nonexistent/gpufree-dev")
        .run();
    r.assert_exit(2);
    assert!(
        r.stderr.contains("--dev-dir") && r.stderr.contains("/nonexistent/gpufree-dev"),
        "{}",
        r.stderr
    );
    Gpufree::new(["frobnicate"]).run().assert_exit(2);
}

#[test]
fn no_library_and_no_device_nodes_exits_3_in_one_line() {
    let d = tempfile::tempdir().unwrap();
    let r = Gpufree::new(["status"]).dev(d.path()).no_nvml().run();
    r.assert_exit(3);
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("no GPU here") && r.stderr.contains("/nonexistent/libnvidia-ml.so.1"),
        "{}",
        r.stderr
    );
}

#[test]
fn no_library_still_reports_device_node_holders() {
    let d = TestDir::new(2);
    let h = hold(
        &["gpufree"],
        HoldSpec {
            fd: vec![d.node("nvidia1")],
            ..HoldSpec::default()
        },
    );
    let r = Gpufree::new(["status"]).dev(&d.dev).no_nvml().run();
    r.assert_exit(0);
    assert!(r.stdout.contains("NVML unavailable"), "{}", r.stdout);
    assert!(r.stdout.contains(&h.pid().to_string()));
    let doc = Gpufree::new(["status"]).json().dev(&d.dev).no_nvml().doc();
    assert_eq!(doc["nvml"]["available"], false);
    assert_eq!(
        doc["gpus"].as_array().unwrap().len(),
        2,
        "GPUs known from their nodes"
    );
    assert_eq!(process(&doc, h.pid()).unwrap()["devices"][0]["gpu"], 1);
    assert!(doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["kind"] == "partial-view"));
}

#[test]
fn pid_from_another_namespace_is_not_visible_and_its_memory_unaccounted() {
    let d = TestDir::new(1);
    let h = d.mapper("nvidia0");
    // PID 4194304 is above any pid_max: it cannot exist in this namespace.
    let state = d.one_gpu(
        &[(h.pid(), 1000, "while-alive"), (4_194_304, 5000, "always")],
        0,
    );
    let doc = Gpufree::new(["status"]).json().on(&d, &state).doc();
    let m = &doc["gpus"][0]["memory"];
    assert_eq!(m["used_bytes"], 6000u64 << 20);
    assert_eq!(m["accounted_bytes"], 1000u64 << 20);
    assert_eq!(m["unaccounted_bytes"], 5000u64 << 20);
    assert_eq!(
        doc["visibility"]["nvml_pids_not_visible"],
        serde_json::json!([4_194_304])
    );
    assert!(doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["kind"] == "outside-namespace"));
}

#[test]
fn corrupt_state_file_is_named_in_one_line() {
    let d = TestDir::new(1);
    let state = d.tmp.path().join("state.json");
    std::fs::write(&state, b"{\"devices\": [ {").unwrap();
    let r = Gpufree::new(["sim", "exec"])
        .args(["--state", state.to_str().unwrap(), "--", "true"])
        .run();
    r.assert_exit(2);
    assert!(r.stderr.contains(state.to_str().unwrap()), "{}", r.stderr);
    assert_eq!(r.stderr.trim().lines().count(), 1);
    // Loaded anyway, the simulated library names the file and status
    // still reports the device nodes.
    let r = Gpufree::new(["status"]).json().on(&d, &state).run();
    r.assert_exit(0);
    assert!(r.stderr.contains(state.to_str().unwrap()), "{}", r.stderr);
    assert_eq!(r.json()["nvml"]["available"], false);
}

#[test]
fn state_json_of_the_demo_is_a_valid_simulator_state() {
    let s = incident_state(&[1, 2, 3, 4, 5, 6, 7, 8]);
    let p: gpufree_nvml_sim::state::State = serde_json::from_value(s).unwrap();
    assert_eq!(p.devices.len(), 8);
}

#[test]
fn failing_nvml_calls_are_reported_unavailable_with_why() {
    let d = TestDir::new(2);
    let mut g0 = sim_gpu(0, &[], 0);
    g0["errors"] = serde_json::json!({"graphics_processes": 3, "compute_processes": 4});
    let mut g1 = sim_gpu(1, &[], 0);
    g1["errors"] = serde_json::json!({"memory_info": 15, "name": 15});
    let state = d.state(&sim_state(vec![g0, g1]));
    let doc = Gpufree::new(["status"]).json().on(&d, &state).doc();
    let un: Vec<(Option<u64>, String, String)> = doc["unavailable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            (
                u["gpu"].as_u64(),
                u["what"].as_str().unwrap().to_string(),
                u["why"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let has = |gpu: u64, what: &str, why: &str| {
        un.iter()
            .any(|u| u.0 == Some(gpu) && u.1 == what && u.2.contains(why))
    };
    assert!(has(0, "graphics processes", "NOT_SUPPORTED"), "{un:?}");
    assert!(has(0, "compute processes", "NO_PERMISSION"), "{un:?}");
    assert!(has(1, "memory", "GPU_IS_LOST"), "{un:?}");
    assert!(has(1, "name", "GPU_IS_LOST"), "{un:?}");
    assert_eq!(doc["gpus"][1]["memory"]["known"], false);
    assert_eq!(doc["gpus"][0]["memory"]["known"], true);
    let r = Gpufree::new(["status"]).on(&d, &state).run();
    r.assert_exit(0);
    assert!(
        r.stdout.contains("GPU 1 memory: unavailable: GPU_IS_LOST"),
        "{}",
        r.stdout
    );
}

/// Every field SPEC.md fixes for `gpufree status --json`, with its JSON type.
#[test]
fn status_json_has_every_field_of_the_spec() {
    let inc = incident();
    let doc = incident_status(&inc).run().json();
    let is = |v: &Value, t: &str| match t {
        "n" => v.is_u64(),
        "s" => v.is_string(),
        "b" => v.is_boolean(),
        "a" => v.is_array(),
        "o" => v.is_object(),
        "s?" => v.is_string() || v.is_null(),
        "n?" => v.is_u64() || v.is_null(),
        _ => unreachable!(),
    };
    let check = |v: &Value, fields: &[(&str, &str)], what: &str| {
        for (k, t) in fields {
            assert!(
                v.get(k).is_some_and(|x| is(x, t)),
                "{what}.{k} missing or not {t}: {v}"
            );
        }
    };
    check(
        &doc,
        &[
            ("gpus", "a"),
            ("processes", "a"),
            ("findings", "a"),
            ("visibility", "o"),
        ],
        "doc",
    );
    let g = &doc["gpus"][0];
    check(
        g,
        &[
            ("index", "n"),
            ("uuid", "s"),
            ("name", "s"),
            ("pci_bus_id", "s"),
            ("vendor", "s"),
            ("memory", "o"),
        ],
        "gpu",
    );
    // NVML reports NVIDIA's GPUs only.
    assert_eq!(g["vendor"], "nvidia");
    check(
        &g["memory"],
        &[
            ("total_bytes", "n"),
            ("used_bytes", "n"),
            ("accounted_bytes", "n"),
            ("unaccounted_bytes", "n"),
        ],
        "memory",
    );
    for p in doc["processes"].as_array().unwrap() {
        check(
            p,
            &[
                ("pid", "n"),
                ("ppid", "n"),
                ("comm", "s"),
                ("cmdline", "a"),
                ("exe", "s?"),
                ("uid", "n"),
                ("user", "s"),
                ("state", "s"),
                ("start_time_ticks", "n"),
                ("renamed", "b"),
                ("orphaned", "b"),
                ("gpu_memory", "a"),
                ("devices", "a"),
                ("owner", "o"),
            ],
            "process",
        );
        for m in p["gpu_memory"].as_array().unwrap() {
            check(m, &[("gpu", "n"), ("used_bytes", "n?")], "gpu_memory");
        }
        for d in p["devices"].as_array().unwrap() {
            check(d, &[("path", "s"), ("gpu", "n?"), ("via", "a")], "device");
            for v in d["via"].as_array().unwrap() {
                assert!(v == "fd" || v == "mmap", "{v}");
            }
        }
        check(
            &p["owner"],
            &[("kind", "s"), ("id", "s"), ("name", "s")],
            "owner",
        );
        let kind = p["owner"]["kind"].as_str().unwrap();
        assert!(
            [
                "systemd-unit",
                "container",
                "k8s-pod",
                "slurm-job",
                "session",
                "none"
            ]
            .contains(&kind),
            "{kind}"
        );
    }
    for f in doc["findings"].as_array().unwrap() {
        check(
            f,
            &[
                ("kind", "s"),
                ("severity", "s"),
                ("message", "s"),
                ("pids", "a"),
                ("gpus", "a"),
                ("next", "s"),
            ],
            "finding",
        );
        assert!(["info", "warning", "error"].contains(&f["severity"].as_str().unwrap()));
    }
    check(
        &doc["visibility"],
        &[
            ("processes_scanned", "n"),
            ("processes_unreadable", "n"),
            ("nvml_pids_not_visible", "a"),
        ],
        "visibility",
    );
    // Shared control nodes have a null gpu.
    let uvm = doc["processes"][0]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["path"].as_str().unwrap().ends_with("/nvidia-uvm"))
        .unwrap();
    assert!(uvm["gpu"].is_null());
}

#[test]
fn man_page_and_completions_come_from_the_command_definition() {
    let r = Gpufree::new(["man"]).run();
    r.assert_exit(0);
    assert!(
        r.stdout.contains(".TH gpufree") && r.stdout.contains("kill"),
        "{}",
        &r.stdout[..200.min(r.stdout.len())]
    );
    let r = Gpufree::new(["completions", "bash"]).run();
    r.assert_exit(0);
    assert!(r.stdout.contains("--force-protected") && r.stdout.contains("--max-used"));
    Gpufree::new(["completions", "tcsh"]).run().assert_exit(2);
}

/// Colour on a terminal; none with NO_COLOR, with --no-color, or when piped.
#[test]
fn colour_only_on_a_terminal_and_never_with_no_color() {
    let d = TestDir::new(1);
    let _h = d.mapper("nvidia0");
    let base = format!(
        "{} status --dev-dir {} --nvml-lib /nonexistent/libnvidia-ml.so.1",
        bin().display(),
        d.dev.display()
    );
    for (name, cmd, coloured) in [
        ("tty", format!("env -u NO_COLOR {base}"), true),
        ("no-color-env", format!("env NO_COLOR=1 {base}"), false),
        (
            "no-color-flag",
            format!("env -u NO_COLOR {base} --no-color"),
            false,
        ),
    ] {
        let Some(t) = Tmux::start(name, &cmd) else {
            return;
        };
        t.wait_exit();
        let screen =
            String::from_utf8_lossy(&t.cmd(&["capture-pane", "-p", "-e"]).stdout).into_owned();
        assert!(screen.contains("NVML unavailable"), "{screen}");
        assert_eq!(screen.contains("\x1b["), coloured, "{name}: {screen:?}");
    }
}
