//! gpufree's Prometheus rules in the real engine (Debian's prometheus 2.42
//! with promtool): the shipped rule file checked and unit-tested by
//! promtool, and the PrometheusRule wrapping the same groups.

use crate::harness::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

const RULES: &str = "contrib/prometheus/gpufree.rules.yml";
const RULE_TESTS: &str = "contrib/prometheus/gpufree.rules.test.yml";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Whether `tool` runs here; under CI it must (`.ci/run` installs it).
fn have(tool: &str, package: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        skip_off_ci(package, &format!("{tool} is not installed"));
    }
    found
}

/// A daemon the test started, its stdout and stderr in `log`; killed and

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
        assert_eq!(r.code, 0, "promtool {args:?}:\n{}{}", r.stdout, r.stderr);
        assert!(r.stdout.contains("SUCCESS"), "{}", r.stdout);
    }
    // Every alert has a unit test that fires it, and a severity.
    let rules = std::fs::read_to_string(repo(RULES)).unwrap();
    let tests = std::fs::read_to_string(repo(RULE_TESTS)).unwrap();
    for alert in alerts() {
        assert!(
            tests.contains(&format!(
                "alertname: {alert}\n        exp_alerts:\n          -"
            )),
            "{alert} is never fired by {RULE_TESTS}"
        );
    }
    assert_eq!(
        rules.matches("- alert: ").count(),
        rules.matches("severity: ").count()
    );
    eprintln!("promtool: {:?}", started.elapsed());
}

fn yaml(path: &str) -> yaml_rust2::Yaml {
    let text = std::fs::read_to_string(repo(path)).unwrap();
    yaml_rust2::YamlLoader::load_from_str(&text)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .remove(0)
}

/// The alert names of the plain rule file.
fn alerts() -> Vec<String> {
    yaml(RULES)["groups"]
        .as_vec()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_vec().unwrap())
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
