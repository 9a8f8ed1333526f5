//! `gpufree fleet` against a real Prometheus (Debian's `prometheus`, its
//! own storage in a temporary directory, on 127.0.0.1) scraping three real
//! `gpufree serve` instances on simulated hosts, one of them with a real
//! leftover holder: the view finds exactly that node and that PID, says
//! nothing of the others, calls the fleet free once the holder is gone,
//! and calls a node stale when its target is down or its snapshot old.
//! Without Prometheus: an unreachable URL ends within `--timeout`.

use crate::daemon::Daemon;
use crate::harness::*;
use gpufree::demo::holder::HoldSpec;
use serde_json::{json, Value};
use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

/// A simulated host: its device directory, its state, its serve.
struct Node {
    dir: TestDir,
    gpus: u32,
    /// serve, once started, and where it listens.
    serve: Option<(Daemon, String)>,
}

impl Node {
    /// A host of `gpus` GPUs, not yet served.
    fn new(gpus: u32) -> Node {
        let node = Node {
            dir: TestDir::new(gpus),
            gpus,
            serve: None,
        };
        node.set(&[]);
        node
    }

    /// Its simulator state: `procs` on GPU 0, nothing on the others.
    fn set(&self, procs: &[(u32, u64, &str)]) {
        let devices = (0..self.gpus)
            .map(|i| sim_gpu(i, if i == 0 { procs } else { &[] }, 0))
            .collect();
        self.dir.state(&sim_state(devices));
    }

    /// Served on 127.0.0.1 (a port of its choosing), a snapshot every
    /// `interval`.
    fn serve(mut self, interval: &str) -> Node {
        let mut cmd = Command::new(bin());
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--interval", interval])
            .arg("--dev-dir")
            .arg(&self.dir.dev)
            .arg("--nvml-lib")
            .arg(sim_lib())
            .env("GPUFREE_SIM_STATE", self.dir.tmp.path().join("state.json"))
            .env("GPUFREE_BPF_CACHE", bpf_cache());
        let daemon = Daemon::start("serve", &mut cmd, self.dir.tmp.path());
        let addr = daemon.read_log("serve says where it listens", 10, |log| {
            let url = log.split_whitespace().find(|w| w.starts_with("http://"))?;
            let url = url.trim_start_matches("http://");
            Some(url.trim_end_matches("/metrics").to_string())
        });
        self.serve = Some((daemon, addr));
        self
    }

    /// Where its serve listens (`127.0.0.1:PORT`: the `instance` label).
    fn addr(&self) -> String {
        self.serve
            .as_ref()
            .map(|(_, a)| a.clone())
            .unwrap_or_default()
    }
}

/// A real Prometheus scraping `targets` (address, `node` label) every
/// second as the job `gpufree`, its storage in a temporary directory.
struct Prometheus {
    url: String,
    daemon: Daemon,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(targets: &[(&str, &str)]) -> Option<Prometheus> {
        if Command::new("prometheus")
            .arg("--version")
            .output()
            .is_err()
        {
            skip_off_ci("prometheus (Debian's package)", &"not installed");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let static_configs: Vec<Value> = targets
            .iter()
            .map(|(t, node)| json!({"targets": [t], "labels": {"node": node}}))
            .collect();
        let config = json!({
            "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
            "scrape_configs": [{"job_name": "gpufree", "static_configs": static_configs}],
        });
        // JSON is YAML (a label's control characters as \u escapes).
        let file = dir.path().join("prometheus.yml");
        std::fs::write(&file, config.to_string()).unwrap();
        let daemon = Daemon::start(
            "prometheus",
            Command::new("prometheus")
                .arg(format!("--config.file={}", file.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join("data").display()
                ))
                .arg("--web.listen-address=127.0.0.1:0"),
            dir.path(),
        );
        let url = format!("http://{}", daemon.listening());
        let p = Prometheus {
            url,
            daemon,
            _dir: dir,
        };
        // Every target scraped with its gpufree series.
        let want = targets.len().to_string();
        let q = "count(count by (instance) (gpufree_gpu_verdict))";
        p.until("Prometheus scrapes every target", 60, || {
            p.scalar(q).as_deref() == Some(&want)
        });
        Some(p)
    }

    /// The value of a query that answers one sample.
    fn scalar(&self, q: &str) -> Option<String> {
        let mut res = ureq::get(format!("{}/api/v1/query", self.url))
            .query("query", q)
            .call()
            .ok()?;
        let doc: Value = serde_json::from_str(&res.body_mut().read_to_string().ok()?).ok()?;
        doc["data"]["result"][0]["value"][1]
            .as_str()
            .map(str::to_string)
    }

    fn fleet(&self, extra: &[&str]) -> Run {
        let mut args = vec!["fleet", "--prometheus", &self.url, "--no-color"];
        args.extend(extra);
        gpufree(&args, &[])
    }

    /// Polls `ok` every 200 ms until it holds or `secs` pass (then fails,
    /// saying `what`, with Prometheus's log).
    fn until(&self, what: &str, secs: u64, mut ok: impl FnMut() -> bool) {
        crate::daemon::until(what, secs, &[&self.daemon], || ok().then_some(()));
    }
}

/// The hostile `node` label of the busy host.
const HOSTILE: &str = "gpu-a\x1b[31m\u{202e}evil";

#[test]
fn fleet_finds_the_one_node_with_a_leftover_and_its_pid_then_calls_the_fleet_free() {
    let a = Node::new(2);
    // The leftover: a real process holding GPU 0's node, its comm
    // hostile, with 4 GiB of simulated memory.
    let holder = hold(
        &["gpufree"],
        HoldSpec {
            comm: Some("ev\x1b[2Jil".into()),
            mmap: vec![a.dir.node("nvidia0")],
            ..HoldSpec::default()
        },
    );
    let pid = holder.pid();
    a.set(&[(pid, 4096, "while-alive")]);
    let a = a.serve("200ms");
    let served = Instant::now();
    let b = Node::new(2).serve("200ms");
    // A host whose snapshot is taken once: its data ages.
    let c = Node::new(1).serve("10m");
    let (a_addr, b_addr, c_addr) = (a.addr(), b.addr(), c.addr());
    let Some(prom) =
        Prometheus::start(&[(&a_addr, HOSTILE), (&b_addr, "gpu-b"), (&c_addr, "gpu-c")])
    else {
        return;
    };
    // A short history: the look back steps by 5s and 1s.
    let fresh = ["--max-age", "1h", "--history", "2m"];
    // The holder's series has been scraped for a few seconds: the look
    // back says so.
    prom.until("the holder held for 3s", 30, || {
        let doc = prom.fleet(&["--json", "--max-age", "1h", "--history", "2m"]);
        doc.json()["nodes"][0]["holders"][0]["held_seconds"]
            .as_f64()
            .is_some_and(|s| s >= 3.0)
    });

    // Text: that node, that PID, the command to run there.
    let r = prom.fleet(&fresh);
    assert_eq!(r.code, 1, "{r:?}");
    let text = &r.stdout;
    assert!(
        text.starts_with("1 of 3 nodes have GPUs that are not free"),
        "{text}"
    );
    assert!(
        text.contains(&format!("\n{}  busy  4,096 MiB held for ", a_addr)),
        "{text}"
    );
    assert!(text.contains(&format!("PID {pid}  ")), "{text}");
    assert!(
        text.contains("ev\\e[2Jil"),
        "comm as serve escaped it: {text}"
    );
    assert!(
        text.contains("next: ssh 127.0.0.1 gpufree why --gpu 0\n"),
        "{text}"
    );
    for other in [&b_addr, &c_addr] {
        assert!(!text.contains(other.as_str()), "{other} is free: {text}");
    }

    // JSON: the same, as values.
    let doc = prom
        .fleet(&["--json", "--max-age", "1h", "--history", "2m"])
        .json();
    assert_eq!(doc["nodes_seen"], 3, "{doc}");
    assert_eq!(doc["nodes_free"], 2, "{doc}");
    assert_eq!(doc["stale"].as_array().unwrap().len(), 0, "{doc}");
    let nodes = doc["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{doc}");
    let n = &nodes[0];
    assert_eq!(n["node"], a_addr.as_str());
    assert_eq!(n["state"], "busy");
    assert_eq!(n["held_bytes"], 4096u64 << 20);
    assert_eq!(n["command"], "ssh 127.0.0.1 gpufree why --gpu 0");
    let gpus: Vec<u64> = n["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["gpu"].as_u64().unwrap())
        .collect();
    assert_eq!(gpus, [0]);
    let h = &n["holders"].as_array().unwrap()[..];
    assert_eq!(h.len(), 1, "{doc}");
    assert_eq!(h[0]["pid"], pid);
    assert_eq!(h[0]["bytes"], 4096u64 << 20);
    assert_eq!(h[0]["comm"], "ev\\e[2Jil");
    let held = h[0]["held_seconds"].as_f64().unwrap();
    // Since the first sample, which came after A was served.
    assert!(
        held >= 3.0 && held <= served.elapsed().as_secs_f64() + 1.0,
        "{held}"
    );
    // Who the holder is, as the node itself says.
    let own = status_json(&a.dir, &a.dir.tmp.path().join("state.json"), &[]);
    let p = process(&own, pid).unwrap();
    for field in ["user", "orphaned", "renamed"] {
        assert_eq!(h[0][field], p[field], "{field}");
    }
    assert_eq!(h[0]["owner_kind"], p["owner"]["kind"]);
    // A leftover where the test runs owned by no unit, container, pod or
    // job (as `check` counts one): then `--leftovers` lists it too.
    let leftover = matches!(p["owner"]["kind"].as_str(), Some("none" | "session"));
    assert_eq!(h[0]["leftover"], leftover);
    let r = prom.fleet(&["--leftovers", "--max-age", "1h"]);
    assert_eq!(r.code, if leftover { 1 } else { 0 }, "{r:?}");
    assert_eq!(r.stdout.contains(&a_addr), leftover, "{}", r.stdout);

    // A hostile node label: escaped in text, whole in JSON, no command.
    let r = prom.fleet(&["--node-label", "node", "--max-age", "1h"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        !r.stdout.contains('\x1b') && !r.stdout.contains('\u{202e}'),
        "{:?}",
        r.stdout
    );
    assert!(
        r.stdout.contains("gpu-a\\e[31m\\u{202e}evil  busy"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("(its name is not a safe ssh host)"),
        "{}",
        r.stdout
    );
    let doc = prom.fleet(&["--node-label", "node", "--json", "--max-age", "1h"]);
    assert!(!doc.stdout.contains('\x1b') && !doc.stdout.contains('\u{202e}'));
    let doc = doc.json();
    assert_eq!(doc["nodes"][0]["node"], HOSTILE);
    assert_eq!(doc["nodes"][0]["command"], Value::Null);

    // A selector Prometheus cannot parse: a usage error naming the flag.
    let r = prom.fleet(&["--selector", "job=~\"(\""]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.starts_with("gpufree: --selector: ") && r.stderr.lines().count() == 1,
        "{}",
        r.stderr
    );

    // C's snapshot is taken once: past --max-age it is stale. A busy
    // node outranks a stale one (as in `check`): exit 1, with C said.
    let stale_c = ["--max-age", "4s", "--json"];
    prom.until("C's snapshot is 4s old", 20, || {
        prom.fleet(&stale_c).json()["stale"][0]["node"] == c_addr.as_str()
    });
    let r = prom.fleet(&stale_c);
    assert_eq!(r.code, 1, "{r:?}");
    let stale = r.json()["stale"].clone();
    assert_eq!(stale.as_array().unwrap().len(), 1, "{stale}");
    assert_eq!(stale[0]["reason"], "old", "{stale}");
    assert!(stale[0]["age_seconds"].as_f64().unwrap() > 4.0, "{stale}");

    // The holder ends: its memory goes, and the fleet is free.
    drop(holder);
    prom.until("the fleet is free", 20, || prom.fleet(&fresh).code == 0);
    let r = prom.fleet(&fresh);
    assert_eq!(
        r.stdout.trim(),
        format!(
            "All 3 nodes' GPUs are free (Prometheus {}, {{job=\"gpufree\"}}).",
            prom.url
        )
    );

    // Nothing busy, C stale: unknown (3).
    let r = prom.fleet(&["--max-age", "4s"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stdout.contains(&format!("  {} (", c_addr)),
        "{}",
        r.stdout
    );

    // B's exporter stops: its target is down, so the fleet is unknown.
    drop(b);
    prom.until("B is down", 20, || {
        let r = prom.fleet(&fresh);
        r.code == 3 && r.stdout.contains("its target is down (up is 0)")
    });
}

#[test]
fn fleet_without_an_answer_exits_3_within_its_timeout() {
    // A listener that accepts and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let started = Instant::now();
    let r = gpufree(&["fleet", "--prometheus", &url, "--timeout", "1s"], &[]);
    let took = started.elapsed();
    assert_eq!(r.code, 3, "{r:?}");
    assert!(took < Duration::from_millis(2500), "took {took:?}");
    assert!(
        r.stderr.starts_with(&format!(
            "gpufree: --prometheus {url}: unreachable (no answer within --timeout 1s) asking "
        )),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);

    // Nothing listens (port 0 is no one's): refused at once.
    let r = gpufree(&["fleet", "--prometheus", "http://127.0.0.1:0"], &[]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("unreachable"), "{}", r.stderr);

    // A server whose answer never ends (JSON's whitespace, without end):
    // cut at the bound, in one line, exit 3.
    let endless = TcpListener::bind("127.0.0.1:0").unwrap();
    let url_endless = format!("http://{}", endless.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in endless.incoming().take(8) {
            std::thread::spawn(move || {
                let mut conn = conn.unwrap();
                let mut head = [0u8; 4096];
                let _ = std::io::Read::read(&mut conn, &mut head);
                let start = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{\"status\":\"success\",";
                let spaces = vec![b' '; 1 << 20];
                let _ = std::io::Write::write_all(&mut conn, start);
                for _ in 0..100 {
                    if std::io::Write::write_all(&mut conn, &spaces).is_err() {
                        break;
                    }
                }
            });
        }
    });
    let r = gpufree(
        &["fleet", "--prometheus", &url_endless, "--timeout", "30s"],
        &[],
    );
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr.contains("is unusable: the answer is over 64 MiB"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);

    // Not a URL, not a label: usage errors.
    let r = gpufree(&["fleet", "--prometheus", "localhost:9090"], &[]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr
            .starts_with("gpufree: --prometheus localhost:9090: "),
        "{}",
        r.stderr
    );
    let r = gpufree(
        &["fleet", "--prometheus", &url, "--node-label", "no-de"],
        &[],
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("--node-label"), "{}", r.stderr);
    drop(silent);
}
