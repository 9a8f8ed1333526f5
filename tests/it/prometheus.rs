//! gpufree in the real Prometheus and node_exporter (Debian's prometheus
//! 2.42 with promtool, prometheus-node-exporter 1.5): the shipped rule
//! file checked and unit-tested by promtool, the PrometheusRule wrapping
//! the same groups, a live Prometheus scraping three `gpufree serve`s where
//! only the node with a leftover alerts, and `gpufree metrics --output`
//! read by node_exporter's textfile collector.

use crate::daemon::{get, have, prometheus, query, repo, serve, textfile_exporter, until};
use crate::harness::*;
use gpufree::demo::holder::{ChildSpec, HoldSpec};
use gpufree::model::{FindingKind, OwnerKind, RecoveryAction, VerdictState};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

const RULES: &str = "contrib/prometheus/gpufree.rules.yml";
const RULE_TESTS: &str = "contrib/prometheus/gpufree.rules.test.yml";

#[test]
fn promtool_accepts_the_rules_and_their_unit_tests_pass() {
    if !have("promtool", "prometheus (promtool)") {
        return;
    }
    let started = Instant::now();
    for args in [["check", "rules", RULES], ["test", "rules", RULE_TESTS]] {
        let r = run_cmd(
            Command::new("promtool")
                .args(args)
                .current_dir(env!("CARGO_MANIFEST_DIR")),
        );
        r.assert_exit_with(
            0,
            format_args!("promtool {args:?}:\n{}{}", r.stdout, r.stderr),
        );
        assert!(r.stdout.contains("SUCCESS"), "{}", r.stdout);
    }
    eprintln!("promtool: {:?}", started.elapsed());
}

/// A promtool duration (`90s`, `10m`, `1h`) in seconds.
fn seconds(d: &str) -> u64 {
    let (n, unit) = d.split_at(d.len() - 1);
    let n: u64 = n.parse().unwrap_or_else(|_| panic!("duration {d}"));
    n * match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => panic!("duration {d}"),
    }
}

#[test]
fn every_alert_has_a_severity_and_is_tested_before_and_at_its_for() {
    let tests = yaml(RULE_TESTS);
    let step = seconds(tests["evaluation_interval"].as_str().unwrap());
    // (alert, eval_time in s, fires) of every alert_rule_test.
    let cases: Vec<(String, u64, bool)> = tests["tests"]
        .as_vec()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_vec().cloned().unwrap_or_default())
        .map(|c| {
            let fires = !c["exp_alerts"].as_vec().unwrap().is_empty();
            let name = c["alertname"].as_str().unwrap().to_string();
            (name, seconds(c["eval_time"].as_str().unwrap()), fires)
        })
        .collect();
    for r in rules().iter().filter(|r| r["alert"].as_str().is_some()) {
        let alert = r["alert"].as_str().unwrap();
        let severity = r["labels"]["severity"].as_str();
        assert!(
            matches!(severity, Some("warning" | "critical")),
            "{alert}: severity {severity:?}"
        );
        let at = seconds(r["for"].as_str().unwrap());
        for (when, fires) in [(at - step, false), (at, true)] {
            assert!(
                cases.contains(&(alert.to_string(), when, fires)),
                "{RULE_TESTS} has no case where {alert} {} at {when} s (its for: is {at} s)",
                if fires { "fires" } else { "does not fire yet" }
            );
        }
    }
}

/// Every rule of the plain rule file.
fn rules() -> Vec<yaml_rust2::Yaml> {
    yaml(RULES)["groups"]
        .as_vec()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_vec().unwrap().clone())
        .collect()
}

/// Whether gpufree's metrics can give `value` to `label` of `metric`: the
/// finding kinds, owner kinds and verdict states as the library spells
/// them (serde's names are the metrics' names).
fn emitted(metric: &str, label: &str, value: &str) -> Option<bool> {
    fn spelled<T: serde::de::DeserializeOwned>(
        v: &str,
        as_str: impl Fn(T) -> &'static str,
    ) -> bool {
        serde_json::from_value::<T>(json!(v)).is_ok_and(|t| as_str(t) == v)
    }
    Some(match (metric, label) {
        ("gpufree_findings", "kind") => FindingKind::ALL.iter().any(|k| k.as_str() == value),
        ("gpufree_process_gpu_memory_bytes", "owner_kind") => {
            spelled::<OwnerKind>(value, OwnerKind::as_str)
        }
        ("gpufree_process_gpu_memory_bytes", "orphaned" | "renamed") => {
            ["true", "false"].contains(&value)
        }
        ("gpufree_gpu_verdict", "state") => spelled::<VerdictState>(value, VerdictState::as_str),
        // NVML's recovery actions as serde spells them (the metrics' names,
        // as the simulator's state file's), and `other` for newer values.
        ("gpufree_gpu_recovery_action", "action") => {
            value == "other"
                || serde_json::from_value::<RecoveryAction>(json!(value))
                    .is_ok_and(|a| json!(a) == json!(value))
        }
        ("gpufree_gpu_row_remap", "state") => ["pending", "failure"].contains(&value),
        _ => return None,
    })
}

#[test]
fn the_rules_and_their_tests_match_only_label_values_gpufree_emits() {
    let selector = regex::Regex::new(r"(gpufree_\w+)\{([^}]*)\}").unwrap();
    let matcher = regex::Regex::new(r#"(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)""#).unwrap();
    let enumerated = [
        "kind",
        "owner_kind",
        "orphaned",
        "renamed",
        "state",
        "action",
    ];
    let exprs: Vec<String> = rules()
        .iter()
        .map(|r| r["expr"].as_str().unwrap().to_string())
        .collect();
    let series: Vec<String> = yaml(RULE_TESTS)["tests"]
        .as_vec()
        .unwrap()
        .iter()
        .flat_map(|t| t["input_series"].as_vec().unwrap().clone())
        .map(|s| s["series"].as_str().unwrap().to_string())
        .collect();
    let mut checked = 0;
    for text in exprs.iter().chain(&series) {
        for sel in selector.captures_iter(text) {
            for m in matcher.captures_iter(&sel[2]) {
                let (metric, label) = (&sel[1], &m[1]);
                if !enumerated.contains(&label) {
                    continue;
                }
                // A regular expression here is a list of values.
                for value in m[3].split('|') {
                    let ok = emitted(metric, label, value)
                        .unwrap_or_else(|| panic!("{metric}'s {label} is not known here: {text}"));
                    assert!(
                        ok,
                        "gpufree never emits {metric}{{{label}=\"{value}\"}}: {text}"
                    );
                    checked += 1;
                }
            }
        }
    }
    // The regexes above still reach the rules' values: a change to the
    // rules' syntax cannot leave this test checking nothing.
    for v in [
        "gone-pod",
        "uninterruptible",
        "unallocated-memory",
        "session",
        "none",
        "unknown",
    ] {
        assert!(
            exprs.iter().any(|e| e.contains(v)),
            "{v} no longer in the rules"
        );
    }
    assert!(checked >= 20, "only {checked} values checked");
}

fn yaml(path: &str) -> yaml_rust2::Yaml {
    let text = std::fs::read_to_string(repo(path)).unwrap();
    yaml_rust2::YamlLoader::load_from_str(&text)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .remove(0)
}

/// The alert names of the plain rule file.
fn alerts() -> Vec<String> {
    rules()
        .iter()
        .filter_map(|r| r["alert"].as_str().map(String::from))
        .collect()
}

#[test]
fn the_prometheus_rule_for_kubernetes_has_the_plain_rule_files_groups() {
    let wrapped = yaml("contrib/k8s/alerts.yaml");
    assert_eq!(wrapped["kind"].as_str(), Some("PrometheusRule"));
    assert_eq!(
        wrapped["spec"]["groups"],
        yaml(RULES)["groups"],
        "contrib/k8s/alerts.yaml's spec.groups differ from {RULES}"
    );
    // The names other files and dashboards refer to stay.
    let names = alerts();
    for kept in ["GPUMemoryHeldByOrphan", "GPUMemoryUnaccounted"] {
        assert!(names.iter().any(|n| n == kept), "{kept} renamed: {names:?}");
    }
    // The plain scrape config loads the rule file where the .deb puts it.
    let scrape = yaml("contrib/k8s/prometheus-scrape.yaml");
    assert_eq!(
        scrape["rule_files"][0].as_str(),
        Some("/usr/share/gpufree/prometheus/gpufree.rules.yml")
    );
}

/// A holder of `node` whose parent exited at once (an orphan, where the
/// reaper is init), with a pidfd: it is no longer the test's child, and is
/// killed through that reference to it when dropped.
struct Leftover {
    pid: u32,
    pidfd: rustix::fd::OwnedFd,
}

impl Leftover {
    fn start(d: &TestDir, node: &str) -> Leftover {
        let tree = hold(
            &["gpufree"],
            HoldSpec {
                exit_after_ms: Some(0),
                children: vec![ChildSpec {
                    argv: vec!["python3".into(), "train.py".into()],
                    spec: HoldSpec {
                        label: "leftover".into(),
                        comm: Some("python3".into()),
                        survive_parent: true,
                        mmap: vec![d.node(node)],
                        ..HoldSpec::default()
                    },
                }],
                ..HoldSpec::default()
            },
        );
        let pid = tree.pid_of("leftover");
        let pidfd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(pid as i32).unwrap(),
            rustix::process::PidfdFlags::empty(),
        )
        .unwrap();
        let parent = tree.pid();
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::read(format!("/proc/{pid}/stat"))
            .map(|b| gpufree::proc::parse::parse_stat(&b).unwrap().ppid == parent)
            .unwrap()
        {
            assert!(Instant::now() < deadline, "{pid} never reparented");
            std::thread::sleep(Duration::from_millis(10));
        }
        Leftover { pid, pidfd }
    }
}

impl Drop for Leftover {
    fn drop(&mut self) {
        let _ = rustix::process::pidfd_send_signal(&self.pidfd, rustix::process::Signal::KILL);
    }
}

/// When the alerts' group was last evaluated, as Prometheus says it.
fn last_evaluation(base: &str) -> Option<String> {
    let doc: Value = serde_json::from_str(&get(&format!("{base}/api/v1/rules"), &[])?).ok()?;
    let group = doc["data"]["groups"]
        .as_array()?
        .iter()
        .find(|g| g["name"] == "gpufree")?;
    Some(group["lastEvaluation"].as_str()?.to_string())
}

/// Per instance, the value of an instant query keyed by `instance`.
fn by_instance(base: &str, q: &str) -> Option<BTreeMap<String, f64>> {
    query(base, q)?
        .into_iter()
        .map(|(m, v)| Some((m["instance"].as_str()?.to_string(), v)))
        .collect()
}

#[test]
fn a_real_prometheus_alerts_on_the_node_with_a_leftover_and_nowhere_else() {
    if !have("prometheus", "prometheus") {
        return;
    }
    let started = Instant::now();
    // Node A: GPU 0 held by a leftover (4 GiB), GPU 1 free.
    let a = TestDir::new(2);
    let leftover = Leftover::start(&a, "nvidia0");
    let state_a = a.state(&sim_state(vec![
        sim_gpu(0, &[(leftover.pid, 4096, "while-alive")], 0),
        sim_gpu(1, &[], 0),
    ]));
    // Node B: GPU 0 held (8 GiB) by its service's main process, a stand-in
    // in a fake /proc (no systemd as PID 1 here).
    let b = TestDir::new(1);
    let fake = FakeProc::new(b.tmp.path());
    let n0 = b.node("nvidia0");
    fake.add(&FakeProcess {
        pid: 300,
        ppid: 1,
        comm: "vllm",
        state: 'S',
        start: 100,
        cmdline: &[
            "/usr/bin/python3",
            "-m",
            "vllm.entrypoints.openai.api_server",
        ],
        exe: "/usr/bin/python3.12",
        uid: 0,
        cgroup: "0::/system.slice/vllm.service\n",
        fds: &[&n0],
        maps: &[&n0],
    });
    let mut g = sim_gpu(0, &[], 0);
    g["processes"] = json!([{"pid": 300, "used_bytes": 8u64 << 30, "visible": "always"}]);
    let state_b = b.state(&sim_state(vec![g]));
    // Node C: two free GPUs whose driver reports no recovery action and no
    // remap (the driver-evidence alerts read these series, and stay quiet).
    let c = TestDir::new(2);
    let healthy = |i| {
        let mut g = sim_gpu(i, &[], 0);
        g["recovery_action"] = json!("none");
        g["remapped_rows"] =
            json!({"pending": false, "failure": false, "correctable": 0, "uncorrectable": 0});
        g
    };
    let state_c = c.state(&sim_state(vec![healthy(0), healthy(1)]));

    let (serve_a, node_a) = serve("serve-a", &a, &state_a, "200ms", &[]);
    let (serve_b, node_b) = serve(
        "serve-b",
        &b,
        &state_b,
        "200ms",
        &["--proc-root", fake.root.to_str().unwrap()],
    );
    let (serve_c, node_c) = serve("serve-c", &c, &state_c, "200ms", &[]);
    let scratch = tempfile::tempdir().unwrap();
    // Node A is scraped as on Kubernetes, its name in `node` (its
    // `instance` would be a pod's IP there): the alert names it so.
    let (prom, base) = prometheus(
        scratch.path(),
        &[
            (&node_a, json!({"node": "node-a"})),
            (&node_b, json!({})),
            (&node_c, json!({})),
        ],
        &[repo(RULES)],
    );
    let logs = [&prom, &serve_a, &serve_b, &serve_c];
    until("Prometheus ready", 30, &logs, || {
        get(&format!("{base}/-/ready"), &[])
    });
    let ready = started.elapsed();

    // The dashboard's rules have evaluated all three nodes: A's leftover,
    // no leftover on B (its service's) nor C (free); one GPU not free on
    // A and B, none on C.
    let leftover_bytes = until(
        "the leftover rule covers the three nodes",
        30,
        &logs,
        || {
            by_instance(&base, "instance:gpufree_leftover_memory_bytes:sum")
                .filter(|m| m.len() == 3)
        },
    );
    let recorded = started.elapsed();
    let expected = [
        (node_a.clone(), 4096.0 * 1048576.0),
        (node_b.clone(), 0.0),
        (node_c.clone(), 0.0),
    ];
    assert_eq!(
        leftover_bytes,
        expected.into_iter().collect(),
        "{}",
        serve_a.log()
    );
    let not_free = by_instance(&base, "instance:gpufree_gpus_not_free:sum").unwrap();
    let expected = [
        (node_a.clone(), 1.0),
        (node_b.clone(), 1.0),
        (node_c.clone(), 0.0),
    ];
    assert_eq!(not_free, expected.into_iter().collect());

    // The leftover's alert is active (pending: its `for:` is minutes) for
    // node A's GPU 0 and that PID, with the command to run there.
    let pid = leftover.pid.to_string();
    let active = until("the leftover's alert", 30, &logs, || {
        let doc: Value = serde_json::from_str(&get(&format!("{base}/api/v1/alerts"), &[])?).ok()?;
        let alerts = doc["data"]["alerts"].as_array()?.clone();
        (!alerts.is_empty()).then_some(alerts)
    });
    let evaluated = started.elapsed();
    // The alerts are evaluated again, on what the three nodes said (the
    // leftover rule above saw all three): nothing else fires.
    let seen = last_evaluation(&base).unwrap();
    until("the alerts evaluated again", 30, &logs, || {
        last_evaluation(&base).filter(|t| *t != seen)
    });
    let doc: Value =
        serde_json::from_str(&get(&format!("{base}/api/v1/alerts"), &[]).unwrap()).unwrap();
    let alerts = doc["data"]["alerts"].as_array().unwrap();
    assert_eq!(
        alerts.len(),
        1,
        "one alert only: {alerts:#?}\nfirst seen: {active:#?}"
    );
    let alert = &alerts[0];
    let l = &alert["labels"];
    // The leftover is an orphan by construction (Leftover::start waits for
    // its reparenting).
    assert_eq!(l["alertname"], "GPUMemoryHeldByOrphan", "{alert:#}");
    assert_eq!(l["instance"], node_a.as_str(), "{alert:#}");
    assert_eq!(l["node"], "node-a", "{alert:#}");
    assert_eq!(l["gpu"], "0", "{alert:#}");
    assert_eq!(l["pid"], pid.as_str(), "{alert:#}");
    assert_eq!(l["comm"], "python3", "{alert:#}");
    assert_eq!(l["severity"], "warning", "{alert:#}");
    // Pending: it fires only once it has lasted its `for:` (minutes).
    assert_eq!(alert["state"], "pending", "{alert:#}");
    let description = alert["annotations"]["description"].as_str().unwrap();
    assert!(
        description.contains(&format!(
            "On node-a run `gpufree why --gpu 0`; `gpufree kill --pid {pid}`"
        )),
        "{description}"
    );
    let summary = alert["annotations"]["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("GPU 0 on node-a: 4GiB held by"),
        "{summary}"
    );
    rules_name_what_gpufree_exports(&base);
    eprintln!(
        "{} ({}): prometheus ready after {ready:?}, rules recorded after {recorded:?}, alert active after {evaluated:?}, test {:?}",
        l["alertname"],
        alert["state"],
        started.elapsed()
    );
}

/// Every `gpufree_*` series a rule reads is one the three serves exported
/// to this Prometheus, and every label an alert's annotations name is a
/// target's (`job`, `instance`, `node`) or on a series its expression reads.
fn rules_name_what_gpufree_exports(base: &str) {
    let mut exported: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, _) in query(base, r#"{__name__=~"gpufree_.*"}"#).unwrap() {
        let labels = exported
            .entry(m["__name__"].as_str().unwrap().into())
            .or_default();
        labels.extend(m.as_object().unwrap().keys().cloned());
    }
    // Only with a kubelet (tests/it/k8s.rs reads it from `gpufree serve`).
    exported
        .entry("gpufree_unallocated_used_bytes".into())
        .or_insert_with(|| ["gpu", "uuid"].map(String::from).into());
    // A name of gpufree's, not a recording rule's (`instance:gpufree_...`).
    let name = regex::Regex::new(r"(?:^|[^:\w])(gpufree_\w+)").unwrap();
    let label = regex::Regex::new(r"\$labels\.([a-z_]+)").unwrap();
    for r in rules() {
        let expr = r["expr"].as_str().unwrap();
        let mut known: BTreeSet<String> = ["job", "instance", "node"].map(String::from).into();
        for n in name.captures_iter(expr).map(|c| c[1].to_string()) {
            let labels = exported
                .get(&n)
                .unwrap_or_else(|| panic!("{n} is not exported: {:?}", exported.keys()));
            known.extend(labels.iter().cloned());
        }
        let Some(annotations) = r["annotations"].as_hash() else {
            continue;
        };
        for text in annotations.values().map(|v| v.as_str().unwrap()) {
            for l in label.captures_iter(text).map(|c| c[1].to_string()) {
                assert!(
                    known.contains(&l),
                    "{}: the label {l} is on none of its series: {known:?}",
                    r["alert"].as_str().unwrap()
                );
            }
        }
    }
}

#[test]
fn node_exporters_textfile_collector_serves_gpufree_metrics_output() {
    if !have("prometheus-node-exporter", "prometheus-node-exporter") {
        return;
    }
    let started = Instant::now();
    let d = TestDir::new(2);
    let holder = d.mapper("nvidia1");
    let state = d.state(&sim_state(vec![
        sim_gpu(0, &[], 0),
        sim_gpu(1, &[(holder.pid(), 3072, "while-alive")], 0),
    ]));
    let (exporter, _) = textfile_exporter(&d, &state);
    let url = format!("http://{}/metrics", exporter.listening());
    let body = until("node_exporter answers", 15, &[&exporter], || get(&url, &[]));
    // Labels are matched as substrings: a check names only those it means.
    let sample = |name: &str, labels: &[&str]| -> Option<f64> {
        body.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.rsplit_once(' '))
            .find(|(series, _)| {
                (*series == name || series.starts_with(&format!("{name}{{")))
                    && labels.iter().all(|x| series.contains(x))
            })
            .and_then(|(_, v)| v.parse().ok())
    };
    let fail = || format!("{body}\n{}", exporter.log());
    assert_eq!(
        sample("node_textfile_scrape_error", &[]),
        Some(0.0),
        "{}",
        fail()
    );
    let pid = format!("pid=\"{}\"", holder.pid());
    assert_eq!(
        sample("gpufree_process_gpu_memory_bytes", &[&pid, "gpu=\"1\""]),
        Some(3072.0 * 1048576.0),
        "{}",
        fail()
    );
    assert_eq!(
        sample("gpufree_gpu_verdict", &["gpu=\"1\"", "state=\"busy\""]),
        Some(1.0),
        "{}",
        fail()
    );
    assert_eq!(
        sample("gpufree_gpu_verdict", &["gpu=\"0\"", "state=\"free\""]),
        Some(1.0),
        "{}",
        fail()
    );
    assert_eq!(sample("gpufree_nvml_up", &[]), Some(1.0), "{}", fail());
    // The stale alert's textfile arm finds this file by its label.
    let mtime = body
        .lines()
        .find(|l| l.starts_with("node_textfile_mtime_seconds{"))
        .unwrap_or_else(|| panic!("no mtime: {}", fail()));
    assert!(mtime.contains("gpufree.prom\"}"), "{mtime}");
    eprintln!("node_exporter test: {:?}", started.elapsed());
}
