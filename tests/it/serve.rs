//! `gpufree metrics` and `gpufree serve`: the metrics of the incident, the
//! textfile written atomically, a real HTTP client against the running
//! server (1,000 scrapes on loopback, wrong methods and paths, a malformed
//! request), and the Kubernetes and Prometheus files.

use crate::harness::*;
use gpufree::demo::Incident;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn metrics(inc: &Incident, extra: &[&str]) -> Run {
    let lib = sim_lib();
    let mut args = vec![
        "metrics",
        "--dev-dir",
        inc.dev.to_str().unwrap(),
        "--nvml-lib",
        lib.to_str().unwrap(),
    ];
    args.extend(extra);
    gpufree(&args, &[("GPUFREE_SIM_STATE", inc.state.to_str().unwrap())])
}

#[test]
fn metrics_of_the_incident_name_every_worker_and_write_atomically() {
    let inc = Incident::start(&bin()).unwrap();
    let r = metrics(&inc, &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for i in 0..8 {
        let pid = inc.pid(&format!("worker{i}")).unwrap();
        let line = r
            .stdout
            .lines()
            .find(|l| {
                l.starts_with("gpufree_process_gpu_memory_bytes")
                    && l.contains(&format!("pid=\"{pid}\""))
            })
            .unwrap();
        assert!(
            line.contains(&format!("gpu=\"{i}\""))
                && line.contains("comm=\"VLLM::Worker_TP\"")
                && line.contains("renamed=\"true\""),
            "{line}"
        );
        assert!(line.ends_with(" 101302927360"), "{line}");
    }
    assert!(r.stdout.contains("gpufree_nvml_up 1"));
    // One verdict per GPU, one-hot over its three states.
    for i in 0..8 {
        let state = |s: &str| {
            r.stdout
                .lines()
                .find(|l| {
                    l.starts_with("gpufree_gpu_verdict")
                        && l.contains(&format!("gpu=\"{i}\""))
                        && l.contains(&format!("state=\"{s}\""))
                })
                .unwrap_or_else(|| panic!("no {s} verdict line for GPU {i}"))
                .to_string()
        };
        assert!(state("busy").ends_with(" 1"));
        assert!(state("free").ends_with(" 0") && state("unknown").ends_with(" 0"));
    }
    assert!(!r.stdout.contains("# EOF"), "textfile format");
    assert!(!r.stdout.contains("cmdline="));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gpufree.prom");
    let r = metrics(
        &inc,
        &["--output", file.to_str().unwrap(), "--label-cmdline"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.is_empty());
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("cmdline=\"VLLM::Worker_TP0\""));
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
}

struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dev: &Path, state: &Path, nvml_lib: &Path) -> Server {
    let mut child = Command::new(bin())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--interval",
            "200ms",
            "--dev-dir",
            dev.to_str().unwrap(),
            "--nvml-lib",
            nvml_lib.to_str().unwrap(),
        ])
        .env("GPUFREE_SIM_STATE", state)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address: {line}"));
    Server {
        child,
        base: url.trim_end_matches("/metrics").to_string(),
    }
}

#[test]
fn serve_answers_a_thousand_scrapes_and_refuses_what_is_not_a_scrape() {
    let inc = Incident::start(&bin()).unwrap();
    let srv = serve(&inc.dev, &inc.state, &sim_lib());
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut res = agent.get(format!("{}/metrics", srv.base)).call().unwrap();
    assert_eq!(res.status(), 200);
    assert!(res
        .headers()
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("application/openmetrics-text"));
    let body = res.body_mut().read_to_string().unwrap();
    assert!(body.contains(&format!("pid=\"{}\"", inc.pid("worker7").unwrap())));
    assert!(body.contains("gpufree_snapshot_age_seconds "));
    assert!(body.contains("gpufree_collection_errors_total 0"));

    // 1,000 scrapes from 4 clients on loopback, bounded in count and time.
    let started = Instant::now();
    let base = srv.base.clone();
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let base = base.clone();
            std::thread::spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .build()
                    .into();
                let mut ok = 0;
                for _ in 0..250 {
                    let mut r = agent.get(format!("{base}/metrics")).call().unwrap();
                    let b = r.body_mut().read_to_string().unwrap();
                    if r.status() == 200 && b.contains("gpufree_gpu_memory_used_bytes") {
                        ok += 1;
                    }
                }
                ok
            })
        })
        .collect();
    let ok: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(ok, 1000, "every scrape answered");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );

    assert_eq!(
        agent
            .post(format!("{}/metrics", srv.base))
            .send("x")
            .unwrap()
            .status(),
        405
    );
    assert_eq!(
        agent
            .delete(format!("{}/metrics", srv.base))
            .call()
            .unwrap()
            .status(),
        405
    );
    assert_eq!(
        agent
            .get(format!("{}/kill", srv.base))
            .call()
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        agent
            .get(format!("{}/../../etc/passwd", srv.base))
            .call()
            .unwrap()
            .status(),
        404
    );
    // A malformed request gets an error or a closed connection, and the
    // server goes on serving.
    let addr = srv.base.trim_start_matches("http://");
    let mut raw = std::net::TcpStream::connect(addr).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    raw.write_all(b"GARBAGE \x00\xff\r\n\r\n").unwrap();
    let mut reply = Vec::new();
    let _ = raw.read_to_end(&mut reply);
    let reply = String::from_utf8_lossy(&reply);
    assert!(
        reply.is_empty() || reply.starts_with("HTTP/1.1 4") || reply.starts_with("HTTP/1.1 5"),
        "{reply}"
    );
    assert_eq!(
        agent
            .get(format!("{}/metrics", srv.base))
            .call()
            .unwrap()
            .status(),
        200
    );
    // Nothing was signalled by any of it.
    for (pid, _) in &inc.spawned.pids {
        assert!(alive(*pid));
    }
}

#[test]
fn serve_stays_up_without_nvml_and_with_failing_calls() {
    let d = TestDir::new(2);
    let mut g1 = sim_gpu(1, &[], 0);
    g1["errors"] = serde_json::json!({"memory_info": 15});
    let state = d.state(&sim_state(vec![sim_gpu(0, &[], 0), g1]));
    let srv = serve(&d.dev, &state, &sim_lib());
    let mut r = ureq::get(format!("{}/metrics", srv.base)).call().unwrap();
    let body = r.body_mut().read_to_string().unwrap();
    assert!(body.contains("gpufree_nvml_up 1"));
    assert!(body.contains("gpufree_gpu_memory_total_bytes{gpu=\"0\""));
    assert!(
        !body.contains("gpufree_gpu_memory_total_bytes{gpu=\"1\""),
        "no number for a GPU whose memory is unknown"
    );
    assert!(body.contains("gpufree_findings{kind=\"partial-view\""));
    let srv = serve(&d.dev, &state, Path::new("/nonexistent/libnvidia-ml.so.1"));
    let mut r = ureq::get(format!("{}/metrics", srv.base)).call().unwrap();
    assert!(r
        .body_mut()
        .read_to_string()
        .unwrap()
        .contains("gpufree_nvml_up 0"));
}

fn yaml(path: &str) -> Vec<yaml_rust2::Yaml> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap();
    yaml_rust2::YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn kubernetes_and_prometheus_files_parse_and_name_real_metrics() {
    let ds = yaml("contrib/k8s/daemonset.yaml");
    let daemonset = ds
        .iter()
        .find(|d| d["kind"].as_str() == Some("DaemonSet"))
        .expect("a DaemonSet");
    let pod = &daemonset["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"].as_bool(), Some(true));
    let c = &pod["containers"][0];
    assert_eq!(c["args"][0].as_str(), Some("serve"));
    assert_eq!(c["securityContext"]["privileged"].as_bool(), Some(false));
    let caps: Vec<&str> = c["securityContext"]["capabilities"]["add"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|y| y.as_str().unwrap())
        .collect();
    assert!(
        !caps.contains(&"KILL") && !caps.contains(&"SYS_ADMIN"),
        "no privileged kill: {caps:?}"
    );
    for m in c["volumeMounts"].as_vec().unwrap() {
        assert_eq!(m["readOnly"].as_bool(), Some(true), "read-only mounts");
    }
    let sm = &yaml("contrib/k8s/servicemonitor.yaml")[0];
    assert_eq!(sm["kind"].as_str(), Some("ServiceMonitor"));
    assert_eq!(
        sm["spec"]["endpoints"][0]["path"].as_str(),
        Some("/metrics")
    );
    assert!(
        yaml("contrib/k8s/prometheus-scrape.yaml")[0]["scrape_configs"][0]["job_name"]
            .as_str()
            .is_some()
    );

    // The alerts use metrics and labels that gpufree really exports.
    let inc = Incident::start(&bin()).unwrap();
    let exported = metrics(&inc, &[]).stdout;
    let rules = &yaml("contrib/k8s/alerts.yaml")[0]["spec"]["groups"][0]["rules"];
    let rules = rules.as_vec().unwrap();
    assert_eq!(rules.len(), 2);
    for r in rules {
        let expr = r["expr"].as_str().unwrap();
        let metric = expr.split(['{', ' ']).next().unwrap();
        assert!(
            exported.contains(&format!("\n{metric}{{")),
            "{metric} is not exported"
        );
        if let Some(sel) = expr
            .split_once('{')
            .map(|(_, rest)| rest.split('}').next().unwrap())
        {
            let label = sel.split('=').next().unwrap();
            assert!(
                exported.contains(&format!("{label}=")),
                "label {label} is not exported"
            );
        }
        assert!(r["annotations"]["summary"].as_str().is_some());
    }
}
