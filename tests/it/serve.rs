//! `gpufree metrics` and `gpufree serve`: the metrics of the incident, the
//! textfile written atomically, a real HTTP client against the running
//! server (1,000 scrapes on loopback, wrong methods and paths, a malformed
//! request), and the Kubernetes and Prometheus files.

use crate::harness::*;
use gpufree::demo::Incident;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// `metrics` writes only Prometheus's text format: `--json` is refused as
/// a usage error, not answered with text under a JSON flag.
#[test]
fn metrics_refuses_json() {
    let r = Gpufree::new(["metrics", "--json"]).no_nvml().run();
    r.assert_exit(2);
    assert!(r.stdout.is_empty(), "{}", r.report());
    assert!(r.stderr.contains("status --json"), "{}", r.report());
}

#[test]
fn metrics_of_the_incident_name_every_worker_and_write_atomically() {
    let inc = Incident::start(&bin()).unwrap();
    let r = Gpufree::new(["metrics"])
        .dev(&inc.dev)
        .sim(&inc.state)
        .run();
    r.assert_exit(0);
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
    let r = Gpufree::new(["metrics"])
        .dev(&inc.dev)
        .sim(&inc.state)
        .args(["--output", file.to_str().unwrap(), "--label-cmdline"])
        .run();
    r.assert_exit(0);
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
    /// host:port.
    addr: String,
    /// What serve printed on stderr after its first line, as it comes.
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn pid(&self) -> u32 {
        self.child.id()
    }
}

fn serve(dev: &Path, state: &Path, nvml_lib: &Path) -> Server {
    serve_with(&[], dev, state, nvml_lib, &[])
}

/// `gpufree serve` on 127.0.0.1 (an ephemeral port), run through `wrapper`
/// (e.g. prlimit) when given, with `extra` arguments.
fn serve_with(
    wrapper: &[&str],
    dev: &Path,
    state: &Path,
    nvml_lib: &Path,
    extra: &[&str],
) -> Server {
    let serve = Gpufree::new(SERVE).wrapped(wrapper);
    spawn_serve(serve, dev, state, nvml_lib, extra)
}

/// serve's words: an ephemeral port on loopback, a short interval.
const SERVE: [&str; 5] = ["serve", "--listen", "127.0.0.1:0", "--interval", "200ms"];

/// `serve` (gpufree serve, or what runs it) on `dev` and the simulator.
fn spawn_serve(
    serve: Gpufree,
    dev: &Path,
    state: &Path,
    nvml_lib: &Path,
    extra: &[&str],
) -> Server {
    let mut child = serve
        .dev(dev)
        .nvml_lib(nvml_lib)
        .sim_state(state)
        .args(extra)
        .command()
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address: {line}"));
    let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    {
        let stderr = std::sync::Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in err.lines().map_while(Result::ok) {
                let mut s = stderr.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
    }
    let base = url.trim_end_matches("/metrics").to_string();
    Server {
        child,
        addr: base.trim_start_matches("http://").to_string(),
        base,
        stderr,
    }
}

#[test]
fn serve_answers_a_thousand_scrapes_and_refuses_what_is_not_a_scrape() {
    let inc = Incident::start(&bin()).unwrap();
    let srv = serve(&inc.dev, &inc.state, sim_lib());
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
    let srv = serve(&d.dev, &state, sim_lib());
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
    let text = std::fs::read_to_string(repo(path)).unwrap();
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
    // It binds the pod's IP, from the downward API, never every address.
    let args: Vec<&str> = c["args"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.contains(&"--listen=$(POD_IP):9835"), "{args:?}");
    assert!(!args.iter().any(|a| a.contains("0.0.0.0")), "{args:?}");
    let pod_ip = c["env"]
        .as_vec()
        .unwrap()
        .iter()
        .find(|e| e["name"].as_str() == Some("POD_IP"))
        .expect("POD_IP in env");
    assert_eq!(
        pod_ip["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("status.podIP")
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz")
    );
    assert_eq!(
        c["ports"][0]["containerPort"].as_i64(),
        Some(9835),
        "the port it listens on"
    );
    // serve's own default is loopback.
    let help = Gpufree::new(["serve"]).args(["--help"]).run().stdout;
    assert!(help.contains("[default: 127.0.0.1:9835]"), "{help}");
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

    // The alert rules: tests/it/prometheus.rs, in a real Prometheus.
}

/// Sends `request` on a new connection and reads until the server closes
/// it (or 15 s pass): the status code (None when no response came) and the
/// text. A write cut short by the server (a head over its cap) is not an
/// error: what it answered is.
fn exchange(addr: &str, request: &[u8]) -> (Option<u16>, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let _ = s.write_all(request);
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    let text = String::from_utf8_lossy(&reply).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok());
    (status, text)
}

/// A scrape on a new connection: the body when it answered 200 with metrics.
fn scrape(addr: &str) -> Option<String> {
    let (status, text) = exchange(
        addr,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    let body = text.split_once("\r\n\r\n")?.1.to_string();
    (status == Some(200)
        && body.contains("gpufree_gpu_memory_used_bytes")
        && body.ends_with("# EOF\n"))
    .then_some(body)
}

fn header(text: &str, name: &str) -> Option<String> {
    text.split("\r\n\r\n").next()?.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
    })
}

/// Waits (up to 20 s) until `f` holds.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether the server closed `s` (EOF or reset) within 15 s.
fn closed_by_server(s: &mut std::net::TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn serve_answers_only_get_of_metrics_and_healthz_and_refuses_big_heads_and_bodies() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let srv = serve(&d.dev, &state, sim_lib());
    let a = srv.addr.as_str();
    let close = "Host: x\r\nConnection: close\r\n\r\n";

    let (status, text) = exchange(a, format!("GET /healthz HTTP/1.1\r\n{close}").as_bytes());
    assert_eq!(status, Some(200), "{text}");
    assert!(text.ends_with("\r\n\r\nok\n"), "{text}");
    let (status, text) = exchange(a, format!("HEAD /metrics HTTP/1.1\r\n{close}").as_bytes());
    assert_eq!(status, Some(200), "{text}");
    assert!(text.ends_with("\r\n\r\n"), "no body for HEAD: {text}");
    assert!(scrape(a).is_some());

    for path in ["/", "/kill", "/metrics/x", "/../../etc/passwd", "/healthz/"] {
        let (status, text) = exchange(a, format!("GET {path} HTTP/1.1\r\n{close}").as_bytes());
        assert_eq!(status, Some(404), "{path}: {text}");
    }
    for (method, path) in [
        ("POST", "/metrics"),
        ("PUT", "/metrics"),
        ("DELETE", "/healthz"),
        ("OPTIONS", "/healthz"),
    ] {
        let (status, text) = exchange(
            a,
            format!("{method} {path} HTTP/1.1\r\nContent-Length: 0\r\n{close}").as_bytes(),
        );
        assert_eq!(status, Some(405), "{method} {path}: {text}");
        assert_eq!(
            header(&text, "allow").as_deref(),
            Some("GET, HEAD"),
            "{text}"
        );
    }
    // A body is refused, even on GET, and the connection is not kept.
    let (status, text) = exchange(
        a,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
    );
    assert_eq!(status, Some(413), "{text}");
    assert_eq!(header(&text, "connection").as_deref(), Some("close"));
    let (status, text) = exchange(
        a,
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
    );
    assert_eq!(status, Some(405), "{text}");

    // A head just under 16 KiB is read; one over it is refused (431 or
    // closed), never answered.
    let head = |size: usize| {
        let mut r = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: ".to_vec();
        r.resize(size - 4, b'a');
        r.extend_from_slice(b"\r\n\r\n");
        r
    };
    let (status, text) = exchange(a, &head(15 * 1024));
    assert_eq!(
        status,
        Some(200),
        "a 15 KiB head is fine: {}",
        &text[..text.len().min(200)]
    );
    let (status, text) = exchange(a, &head(17 * 1024));
    assert!(
        status.is_none() || status == Some(431),
        "a 17 KiB head is refused: {}",
        &text[..text.len().min(200)]
    );
    let (status, _) = exchange(a, &head(1024 * 1024));
    assert_ne!(status, Some(200), "a 1 MiB head is refused");
    // Garbage gets an error or a closed connection.
    let (status, text) = exchange(a, b"GARBAGE \x00\xff\r\n\r\n");
    assert!(status.is_none() || status == Some(400), "{text}");
    assert!(scrape(a).is_some(), "still serving");
}

#[test]
fn serve_closes_silent_connections_slow_heads_and_idle_keepalives() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let srv = serve_with(
        &[],
        &d.dev,
        &state,
        sim_lib(),
        &["--header-timeout", "1s", "--idle-timeout", "1s"],
    );
    let a = srv.addr.as_str();
    // A connection that never sends a byte.
    let mut silent = std::net::TcpStream::connect(a).unwrap();
    // A head that trickles in, a byte every 100 ms, for up to 15 s: the
    // deadline counts from its first byte, so bytes do not extend it.
    let trickle = std::thread::spawn({
        let a = a.to_string();
        move || {
            let mut s = std::net::TcpStream::connect(&a).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\nX-Slow: ").unwrap();
            for _ in 0..150 {
                std::thread::sleep(Duration::from_millis(100));
                if s.write_all(b"a").is_err() {
                    return true; // cut off
                }
            }
            false
        }
    });
    // A kept-alive connection, idle after its answer.
    let mut kept = std::net::TcpStream::connect(a).unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 512];
    let n = kept.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    assert!(
        closed_by_server(&mut silent),
        "a silent connection is closed"
    );
    assert!(
        closed_by_server(&mut kept),
        "an idle kept-alive connection is closed"
    );
    assert!(trickle.join().unwrap(), "a trickling head is cut off");
    assert!(scrape(a).is_some());
}

/// A pipelining client's next request head, begun in the same packet as
/// the request before it, is timed by --header-timeout from its first
/// byte (SPEC), not left to --idle-timeout once the first is answered.
#[test]
fn serve_times_a_partial_second_head_sent_with_the_first_request_by_the_header_timeout() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let srv = serve_with(
        &[],
        &d.dev,
        &state,
        sim_lib(),
        &["--header-timeout", "500ms", "--idle-timeout", "30s"],
    );
    let mut s = std::net::TcpStream::connect(&srv.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let sent = Instant::now();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /met")
        .unwrap();
    // The first response, then the close (the rest of the second head
    // never comes).
    let mut reply = Vec::new();
    let closed = match s.read_to_end(&mut reply) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    let after = sent.elapsed();
    let text = String::from_utf8_lossy(&reply);
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "the first is answered: {text}"
    );
    assert!(text.contains("gpufree_gpu_memory_used_bytes"), "{text}");
    assert!(
        closed && after < Duration::from_secs(5),
        "closed about the header timeout after the second head began, not after the idle timeout: closed {closed} after {after:?}"
    );
    assert!(scrape(&srv.addr).is_some());
}

/// `serve --label-cmdline` would show every holder's argv to whoever can
/// connect: refused (exit 2, one line saying what and to whom) unless
/// --expose-cmdlines-over-http says yes to it.
#[test]
fn serve_label_cmdline_is_refused_without_the_flag_that_names_the_exposure() {
    let d = TestDir::new(1);
    let h = d.mapper("nvidia0");
    let state = d.one_gpu(&[(h.pid(), 512, "while-alive")], 0);
    let lib = sim_lib();
    // Under timeout: a serve that starts anyway is stopped, not waited on.
    let r = Gpufree::new(["serve", "--listen", "127.0.0.1:0", "--label-cmdline"])
        .on(&d, &state)
        .wrapped(["timeout", "20"])
        .run();
    r.assert_exit(2);
    assert_eq!(
        r.stderr,
        "gpufree: --label-cmdline: every holder's command line (tokens and passwords included) \
         would be served to anyone who can connect to 127.0.0.1:0; \
         add --expose-cmdlines-over-http to do it anyway\n"
    );
    let srv = serve_with(
        &[],
        &d.dev,
        &state,
        lib,
        &["--label-cmdline", "--expose-cmdlines-over-http"],
    );
    let body = scrape(&srv.addr).unwrap();
    let line = body
        .lines()
        .find(|l| {
            l.starts_with("gpufree_process_gpu_memory_bytes")
                && l.contains(&format!("pid=\"{}\"", h.pid()))
        })
        .unwrap_or_else(|| panic!("no sample for the holder: {body}"));
    assert!(line.contains("cmdline=\"gpufree\""), "{line}");
}

#[test]
fn serve_at_its_connection_cap_lets_a_scrape_displace_the_longest_idle_connection() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let srv = serve_with(&[], &d.dev, &state, sim_lib(), &["--max-connections", "20"]);
    let a = srv.addr.as_str();
    let mut idle: Vec<std::net::TcpStream> = Vec::new();
    for i in 0..20 {
        let mut s = std::net::TcpStream::connect(a).unwrap();
        if i % 2 == 1 {
            s.write_all(b"GET /metrics HTTP/1.1\r\nX-Slow: ").unwrap();
        }
        idle.push(s);
        // Accepted in this order (the oldest is the first).
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..5 {
        assert!(scrape(a).is_some(), "a scrape at the cap is answered");
    }
    assert!(
        closed_by_server(&mut idle[0]),
        "the longest idle connection made room"
    );
}

/// Idle connections (half stopped in the middle of a head) and a header
/// flood, with scrapes meanwhile: every scrape is answered, and after.
#[test]
fn serve_under_idle_connections_and_a_header_flood_still_answers_scrapes() {
    let d = TestDir::new(1);
    let h = d.mapper("nvidia0");
    let state = d.one_gpu(&[(h.pid(), 4096, "while-alive")], 0);
    let srv = serve(&d.dev, &state, sim_lib());
    let a = srv.addr.clone();
    let mut idle = Vec::new();
    for i in 0..300 {
        let mut s = std::net::TcpStream::connect(&a).unwrap();
        if i % 2 == 1 {
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                .unwrap();
        }
        idle.push(s);
    }
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let total = 2 << 20;
    let flooders: Vec<_> = (0..4)
        .map(|k| {
            let (a, sent) = (a.clone(), std::sync::Arc::clone(&sent));
            std::thread::spawn(move || {
                use std::sync::atomic::Ordering;
                let chunk = vec![b'a'; 16 * 1024];
                // Bounded: at most 2,000 connections.
                for _ in 0..2000 {
                    if sent.load(Ordering::Relaxed) >= total {
                        return;
                    }
                    let Ok(mut s) = std::net::TcpStream::connect(&a) else {
                        continue;
                    };
                    let _ =
                        s.write_all(format!("GET /metrics HTTP/1.1\r\nX-Flood-{k}: ").as_bytes());
                    while sent.load(Ordering::Relaxed) < total {
                        if s.write_all(&chunk).is_err() {
                            break; // cut off: connect again
                        }
                        sent.fetch_add(chunk.len(), Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let mut answered = 0;
    while flooders.iter().any(|f| !f.is_finished()) {
        let body = scrape(&a).expect("a scrape under abuse is answered");
        assert!(body.contains(&format!("pid=\"{}\"", h.pid())));
        answered += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    for f in flooders {
        f.join().unwrap();
    }
    assert!(sent.load(std::sync::atomic::Ordering::Relaxed) >= total);
    assert!(
        scrape(&a).is_some(),
        "answered with the idle connections still open"
    );
    drop(idle);
    assert!(scrape(&a).is_some(), "answered after");
    eprintln!("{answered} scrapes answered during the flood");
    assert!(alive(h.pid()), "nothing signalled");
    assert!(alive(srv.pid()));
}

#[test]
fn serve_keeps_serving_after_accept_runs_out_of_file_descriptors() {
    // 48 descriptors and a cap far above them: accept fails with EMFILE
    // while the idle connections hold them all.
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let srv = serve_with(
        &["prlimit", "--nofile=48:48", "--"],
        &d.dev,
        &state,
        sim_lib(),
        &["--max-connections", "1000"],
    );
    let a = srv.addr.clone();
    let idle: Vec<_> = (0..100)
        .map(|_| std::net::TcpStream::connect(&a).unwrap())
        .collect();
    eventually("accept reports running out of descriptors", || {
        srv.stderr.lock().unwrap().contains("Too many open files")
    });
    assert!(
        scrape(&a).is_some(),
        "answered while idle connections hold every descriptor"
    );
    drop(idle);
    eventually("a scrape is answered after", || scrape(&a).is_some());
    assert!(alive(srv.pid()));
}

#[test]
fn serve_healthz_is_ok_while_snapshots_are_fresh_and_503_once_they_fail() {
    // A fake /proc that serve may not read any more: every snapshot after
    // that fails. As root, serve runs as nobody (root reads it anyway).
    let d = TestDir::new(1);
    let fake = FakeProc::idle(d.tmp.path());
    let state = d.one_gpu(&[], 0);
    let extra = [
        "--proc-root",
        fake.root.to_str().unwrap(),
        "--read-timeout",
        "200ms",
    ];
    let srv = if rustix::process::geteuid().is_root() {
        let lib = d.tmp.path().join("kit/libnvidia-ml.so.1");
        spawn_serve(as_nobody(&d, &SERVE), &d.dev, &state, &lib, &extra)
    } else {
        serve_with(&[], &d.dev, &state, sim_lib(), &extra)
    };
    let a = srv.addr.as_str();
    let get = |path: &str| {
        exchange(
            a,
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
    };
    eventually("healthz answers 200 ok", || {
        let (status, text) = get("/healthz");
        status == Some(200) && text.ends_with("ok\n")
    });
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake.root, std::fs::Permissions::from_mode(0o000)).unwrap();
    }
    eventually("healthz answers 503 once the snapshot is stale", || {
        get("/healthz").0 == Some(503)
    });
    let (status, text) = get("/healthz");
    assert!(text.contains("stale"), "{status:?} {text}");
    // The last good snapshot is still served, with the failures counted.
    let body = scrape(a).expect("metrics of the last good snapshot");
    let errors: u64 = body
        .lines()
        .find_map(|l| l.strip_prefix("gpufree_collection_errors_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(errors > 0, "{body}");
    assert!(srv.stderr.lock().unwrap().contains("snapshot failed"));
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake.root, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

#[test]
fn serve_reports_only_the_gpus_of_gpu() {
    let d = TestDir::new(2);
    let h0 = d.mapper("nvidia0");
    let h1 = d.mapper("nvidia1");
    let state = d.state(&sim_state(vec![
        sim_gpu(0, &[(h0.pid(), 1024, "while-alive")], 0),
        sim_gpu(1, &[(h1.pid(), 2048, "while-alive")], 0),
    ]));
    let uuid1 = "GPU-aa01bb00-1111-2222-3333-444455556666";
    for sel in ["1", uuid1, "00000000:19:00.0"] {
        let srv = serve_with(&[], &d.dev, &state, sim_lib(), &["--gpu", sel]);
        let body = scrape(&srv.addr).unwrap();
        assert!(
            body.contains(&format!(
                "gpufree_gpu_memory_used_bytes{{gpu=\"1\",uuid=\"{uuid1}\""
            )),
            "{sel}: {body}"
        );
        assert!(
            !body.contains("gpu=\"0\""),
            "{sel}: GPU 0 is not reported: {body}"
        );
        assert!(body.contains(&format!("pid=\"{}\"", h1.pid())));
        assert!(!body.contains(&format!("pid=\"{}\"", h0.pid())), "{body}");
    }
    // All of them without --gpu.
    let srv = serve(&d.dev, &state, sim_lib());
    let body = scrape(&srv.addr).unwrap();
    assert!(body.contains("gpu=\"0\"") && body.contains("gpu=\"1\""));
    // A selector that names no GPU is a usage error, in one line.
    let r = Gpufree::new(["serve"])
        .on(&d, &state)
        .args(["--listen", "127.0.0.1:0", "--gpu", "7"])
        .run();
    r.assert_exit(2);
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("--gpu 7"), "{}", r.stderr);
    // So is an address that is not one; one already taken is the environment's.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    for (listen, code) in [
        ("nonsense".to_string(), 2),
        (taken.local_addr().unwrap().to_string(), 3),
    ] {
        let r = Gpufree::new(["serve"])
            .on(&d, &state)
            .args(["--listen", &listen])
            .run();
        r.assert_exit_with(code, format_args!("{listen}: {}", r.stderr));
        assert!(
            r.stderr.contains(&format!("--listen {listen}")),
            "{}",
            r.stderr
        );
        assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
    }
}

/// Mode bits of `path` (not following a symlink).
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn metrics_output_never_writes_through_a_symlink_planted_at_a_guessable_name() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let out = tempfile::tempdir().unwrap();
    let victim_dir = tempfile::tempdir().unwrap();
    let victim = victim_dir.path().join("shadow");
    std::fs::write(&victim, "root:secret\n").unwrap();
    let file = out.path().join("gpufree.prom");
    // The names a writer might use: the one the old code used
    // (.NAME.tmpPID, with the PID of the process that writes, which the
    // shell below keeps through exec), and others.
    let planted = [
        ".gpufree.prom.tmp$$",
        ".gpufree.prom.tmp",
        "gpufree.prom.tmp",
        "gpufree.prom~",
        ".gpufree.prom.swp",
        "gpufree.prom.new",
        ".tmp",
    ];
    let script = format!(
        "cd '{dir}' && for n in {names}; do ln -s '{victim}' \"$n\"; done && exec \"$@\"",
        dir = out.path().display(),
        names = planted.map(|n| format!("\"{n}\"")).join(" "),
        victim = victim.display(),
    );
    let r = Gpufree::new(["metrics", "--output", file.to_str().unwrap()])
        .on(&d, &state)
        .wrapped(["sh", "-c", &script, "sh"])
        .run();
    r.assert_exit(0);
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "root:secret\n",
        "the victim is untouched"
    );
    let meta = std::fs::symlink_metadata(&file).unwrap();
    assert!(meta.file_type().is_file(), "FILE is a regular file");
    assert_eq!(mode(&file), 0o644);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("gpufree_gpu_memory_used_bytes{gpu=\"0\""),
        "{text}"
    );
    // The planted links are still links to the victim, and nothing else
    // was left in the directory.
    let mut names: Vec<String> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), planted.len() + 1, "{names:?}");
    for n in names.iter().filter(|n| *n != "gpufree.prom") {
        let link = out.path().join(n);
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink(),
            "{n}"
        );
        assert_eq!(std::fs::read_link(&link).unwrap(), victim, "{n}");
    }
}

#[test]
fn metrics_output_replaces_only_a_regular_file() {
    let d = TestDir::new(1);
    let state = d.one_gpu(&[], 0);
    let out = tempfile::tempdir().unwrap();
    let victim = out.path().join("victim");
    std::fs::write(&victim, "keep me\n").unwrap();
    // A symlink at FILE (as /dev/stdout is one), a device node (as
    // /dev/null), a FIFO: refused, left as they are.
    let link = out.path().join("link.prom");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let fifo = out.path().join("fifo.prom");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let mut refused = vec![link.clone(), fifo.clone()];
    let null = out.path().join("null");
    if rustix::process::geteuid().is_root() {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &null,
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::from_raw_mode(0o666),
            rustix::fs::makedev(1, 3),
        )
        .unwrap();
        refused.push(null.clone());
    }
    for path in &refused {
        let before = std::fs::symlink_metadata(path).unwrap().file_type();
        let r = Gpufree::new(["metrics"])
            .on(&d, &state)
            .args(["--output", path.to_str().unwrap()])
            .run();
        r.assert_exit_with(2, format_args!("{}: {}", path.display(), r.stderr));
        assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
        assert_eq!(std::fs::symlink_metadata(path).unwrap().file_type(), before);
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
    // A regular file is replaced, mode 0644, and again over itself.
    let file = out.path().join("gpufree.prom");
    std::fs::write(&file, "old\n").unwrap();
    for _ in 0..2 {
        let r = Gpufree::new(["metrics"])
            .on(&d, &state)
            .args(["--output", file.to_str().unwrap()])
            .run();
        r.assert_exit(0);
        assert_eq!(mode(&file), 0o644);
        assert!(std::fs::read_to_string(&file)
            .unwrap()
            .contains("gpufree_nvml_up 1"));
    }
    // A directory that does not exist: one line, exit 3.
    let r = Gpufree::new(["metrics"])
        .on(&d, &state)
        .args(["--output", "/nonexistent/dir/gpufree.prom"])
        .run();
    r.assert_exit(3);
    assert_eq!(r.stderr.trim().lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("--output /nonexistent/dir/gpufree.prom"));
}

/// One sample of an OpenMetrics text: name, labels (unescaped), value.
type Sample = (String, Vec<(String, String)>, f64);

fn is_metric_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
}

/// Checks `text` line by line against the OpenMetrics text grammar (the
/// parts an exporter emits: `# HELP`, `# TYPE`, `# UNIT`, samples with
/// escaped label values, and `# EOF` as the last line when `eof`); panics
/// naming the first bad line; returns the samples.
fn parse_openmetrics(text: &str, eof: bool) -> Vec<Sample> {
    assert!(text.ends_with('\n'), "text ends with a newline");
    let lines: Vec<&str> = text[..text.len() - 1].split('\n').collect();
    let mut samples = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let bad = |why: &str| -> ! { panic!("line {}: {why}: {line:?}\n{text}", i + 1) };
        if *line == "# EOF" {
            if !(eof && i == lines.len() - 1) {
                bad("# EOF before the end");
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let (kind, rest) = rest.split_once(' ').unwrap_or_else(|| bad("comment"));
            let (name, arg) = rest.split_once(' ').unwrap_or_else(|| bad("comment"));
            if !is_metric_name(name) {
                bad("metric name");
            }
            match kind {
                "TYPE" => {
                    if ![
                        "counter",
                        "gauge",
                        "histogram",
                        "gaugehistogram",
                        "stateset",
                        "info",
                        "summary",
                        "unknown",
                    ]
                    .contains(&arg)
                    {
                        bad("type");
                    }
                }
                "HELP" => {
                    let mut esc = false;
                    for c in arg.chars() {
                        match (esc, c) {
                            (false, '\\') => esc = true,
                            (true, '\\' | 'n' | '"') => esc = false,
                            (true, _) => bad("escape in HELP"),
                            _ => {}
                        }
                    }
                }
                "UNIT" => {}
                _ => bad("comment kind"),
            }
            continue;
        }
        // name{label="value",...} value
        let name_end = line.find(['{', ' ']).unwrap_or_else(|| bad("sample"));
        let name = &line[..name_end];
        if !is_metric_name(name) {
            bad("metric name");
        }
        let mut rest = &line[name_end..];
        let mut labels = Vec::new();
        if let Some(mut r) = rest.strip_prefix('{') {
            loop {
                if let Some(after) = r.strip_prefix('}') {
                    r = after;
                    break;
                }
                let (lname, after) = r.split_once("=\"").unwrap_or_else(|| bad("label"));
                if !is_metric_name(lname) || lname.contains(':') {
                    bad("label name");
                }
                let mut value = String::new();
                let mut chars = after.char_indices();
                let end = loop {
                    match chars.next() {
                        Some((j, '"')) => break j,
                        Some((_, '\\')) => match chars.next() {
                            Some((_, '\\')) => value.push('\\'),
                            Some((_, '"')) => value.push('"'),
                            Some((_, 'n')) => value.push('\n'),
                            _ => bad("escape in a label value"),
                        },
                        Some((_, c)) => value.push(c),
                        None => bad("unterminated label value"),
                    }
                };
                labels.push((lname.to_string(), value));
                r = &after[end + 1..];
                if let Some(after) = r.strip_prefix(',') {
                    r = after;
                } else if !r.starts_with('}') {
                    bad("label separator");
                }
            }
            rest = r;
        }
        let value = rest.strip_prefix(' ').unwrap_or_else(|| bad("value"));
        let value: f64 = value.parse().unwrap_or_else(|_| bad("number"));
        samples.push((name.to_string(), labels, value));
    }
    if eof {
        assert_eq!(lines.last(), Some(&"# EOF"), "ends with # EOF");
    }
    samples
}

#[test]
fn metrics_of_hostile_names_stay_valid_openmetrics_and_keep_command_lines_out() {
    let d = TestDir::new(1);
    let fake = FakeProc::new(d.tmp.path());
    let n0 = d.node("nvidia0");
    let pid = 4242;
    fake.add(&FakeProcess {
        pid,
        ppid: 1,
        comm: "placeholder",
        state: 'S',
        start: 100,
        cmdline: &["placeholder"],
        exe: "/usr/bin/python3.12",
        uid: 0,
        cgroup: "0::/system.slice/ev\"}il\\x.service\n",
        fds: &[&n0],
        maps: &[],
    });
    // Bytes no &str can hold: quotes, a backslash, a newline, `"}`, and
    // invalid UTF-8 in comm and in the command line.
    let comm: &[u8] = b"ev\"}\\il\n\x1b\xff";
    let dir = fake.root.join(pid.to_string());
    let mut stat = format!("{pid} (").into_bytes();
    stat.extend_from_slice(comm);
    let fields: Vec<String> = (3..=52)
        .map(|i| match i {
            3 => "S".into(),
            4 => "1".into(),
            20 => "1".into(),
            22 => "100".into(),
            _ => "0".into(),
        })
        .collect();
    stat.extend_from_slice(format!(") {}\n", fields.join(" ")).as_bytes());
    std::fs::write(dir.join("stat"), &stat).unwrap();
    let mut c = comm.to_vec();
    c.push(b'\n');
    std::fs::write(dir.join("comm"), &c).unwrap();
    let cmdline: &[u8] =
        b"python3\0--x=\"} 1\n# EOF\ninjected_metric{a=\"b\"} 1\0\\\0\xfe\xff\"}\0";
    std::fs::write(dir.join("cmdline"), cmdline).unwrap();
    let mut gpu = sim_gpu(0, &[(pid, 4096, "always")], 0);
    gpu["name"] = serde_json::json!("H200\"} 1\n# EOF\\");
    let state = d.state(&sim_state(vec![gpu]));
    let on_host = |words: &[&str]| Gpufree::new(words).proc_root(&fake.root).on(&d, &state);
    let doc = on_host(&["status", "--json"]).run().json();
    let p = process(&doc, pid).unwrap_or_else(|| panic!("{doc}"));
    let want_comm = p["comm"].as_str().unwrap().to_string();
    let want_cmdline: Vec<&str> = p["cmdline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        want_comm.contains("\"}") && want_comm.contains('\n'),
        "{want_comm:?}"
    );
    // Label values carry names as a terminal would be shown them: control
    // characters written out (`\n` as two characters), then encoded.
    let want_comm = gpufree::safe::escape(&want_comm).into_owned();
    let label = |samples: &[Sample], key: &str| -> Option<String> {
        samples
            .iter()
            .find(|(n, l, _)| {
                n == "gpufree_process_gpu_memory_bytes"
                    && l.iter().any(|(k, v)| k == "pid" && v == &pid.to_string())
            })
            .unwrap_or_else(|| panic!("no sample for {pid}"))
            .1
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };

    // metrics (the textfile: no # EOF), without and with --label-cmdline.
    let metrics = on_host(&["metrics"]);
    let r = metrics.run();
    r.assert_exit(0);
    let samples = parse_openmetrics(&r.stdout, false);
    assert!(
        !r.stdout
            .chars()
            .any(|c| (c < ' ' && c != '\n') || ('\x7f'..='\u{9f}').contains(&c)),
        "a control character reaches the exposition: {:?}",
        r.stdout
    );
    assert_eq!(label(&samples, "comm").as_deref(), Some(want_comm.as_str()));
    assert_eq!(
        label(&samples, "cmdline"),
        None,
        "no command line unless asked"
    );
    assert!(!r.stdout.contains("injected_metric"), "{}", r.stdout);
    let name = samples
        .iter()
        .find(|(n, _, _)| n == "gpufree_gpu_memory_total_bytes")
        .and_then(|(_, l, _)| l.iter().find(|(k, _)| k == "name"))
        .map(|(_, v)| v.clone());
    assert_eq!(name.as_deref(), Some("H200\"} 1\\n# EOF\\"));
    let metrics = metrics.arg("--label-cmdline");
    let r = metrics.run();
    r.assert_exit(0);
    let samples = parse_openmetrics(&r.stdout, false);
    assert_eq!(
        label(&samples, "cmdline"),
        Some(gpufree::safe::escape(&want_cmdline.join(" ")).into_owned())
    );
    assert!(
        !r.stdout.lines().any(|l| l.starts_with("injected_metric")),
        "{}",
        r.stdout
    );

    // serve's scrape: OpenMetrics, one # EOF at the end.
    let srv = serve_with(
        &[],
        &d.dev,
        &state,
        sim_lib(),
        &["--proc-root", fake.root.to_str().unwrap()],
    );
    let body = scrape(&srv.addr).unwrap();
    let samples = parse_openmetrics(&body, true);
    assert_eq!(label(&samples, "comm").as_deref(), Some(want_comm.as_str()));
    assert_eq!(label(&samples, "cmdline"), None);
    assert!(!body.contains("injected_metric"));
}

#[test]
fn openmetrics_checker_rejects_what_is_not_openmetrics() {
    let ok = "# HELP a_b A \\\\ help.\n# TYPE a_b gauge\na_b{x=\"q\\\"}\\n\\\\\",y=\"\"} 1\na_b 2.5\n# EOF\n";
    let samples = parse_openmetrics(ok, true);
    assert_eq!(samples[0].1[0].1, "q\"}\n\\");
    for bad in [
        "a{x=\"q\"}\"} 1\n# EOF\n",      // a quote not escaped
        "a{x=\"q\n\"} 1\n# EOF\n",       // a raw newline
        "a{x=\"q\\t\"} 1\n# EOF\n",      // an escape OpenMetrics lacks
        "a{x=\"q\"} one\n# EOF\n",       // not a number
        "a 1\n# EOF\nb 2\n# EOF\n",      // # EOF in the middle
        "a 1\n",                         // no # EOF
        "1a 1\n# EOF\n",                 // not a metric name
        "# TYPE a gauges\na 1\n# EOF\n", // not a type
    ] {
        let r = std::panic::catch_unwind(|| parse_openmetrics(bad, true));
        assert!(r.is_err(), "accepted {bad:?}");
    }
}
