//! `gpufree fleet` against a real Prometheus (Debian's `prometheus`, its
//! own storage in a temporary directory, on 127.0.0.1) scraping real
//! `gpufree serve` instances on simulated hosts, one of them with a real
//! leftover holder: the view finds exactly that node and that PID, says
//! nothing of the others and calls the fleet free once the holder is
//! gone; it calls a node stale when its snapshot is old or its target
//! down; a selector Prometheus cannot parse is a usage error. Without
//! Prometheus: an unreachable URL ends within `--timeout`.

use crate::daemon::{have, prometheus, query, serve, textfile_exporter, Daemon};
use crate::harness::*;
use gpufree::demo::holder::HoldSpec;
use serde_json::{json, Value};
use std::net::TcpListener;
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
        let state = self.dir.tmp.path().join("state.json");
        self.serve = Some(serve("serve", &self.dir, &state, interval, &[]));
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
        if !have("prometheus", "prometheus (Debian's package)") {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let labelled: Vec<(&str, Value)> = targets
            .iter()
            .map(|(t, node)| (*t, json!({ "node": node })))
            .collect();
        let (daemon, url) = prometheus(dir.path(), &labelled, &[]);
        let p = Prometheus {
            url,
            daemon,
            _dir: dir,
        };
        // Every target scraped with its gpufree series.
        let want = targets.len() as f64;
        let q = "count(count by (instance) (gpufree_gpu_verdict))";
        p.until("Prometheus scrapes every target", 60, || {
            query(&p.url, q).and_then(|v| v.first().map(|(_, n)| *n)) == Some(want)
        });
        Some(p)
    }

    /// `gpufree fleet` asking this Prometheus.
    fn fleet(&self, extra: &[&str]) -> Output {
        Gpufree::new(["fleet", "--prometheus", &self.url, "--no-color"])
            .args(extra)
            .run()
    }

    /// Polls `ok` every 200 ms until it holds or `secs` pass (then fails,
    /// saying `what`, with Prometheus's log).
    fn until(&self, what: &str, secs: u64, mut ok: impl FnMut() -> bool) {
        crate::daemon::until(what, secs, &[&self.daemon], || ok().then_some(()));
    }
}

/// The hostile `node` label of the busy host.
const HOSTILE: &str = "gpu-a\x1b[31m\u{202e}evil";

/// Fresh data and a short history (the look back steps by 5s and 1s).
const FRESH: [&str; 4] = ["--max-age", "1h", "--history", "2m"];
/// The same, as JSON.
const FRESH_JSON: [&str; 5] = ["--max-age", "1h", "--history", "2m", "--json"];

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
    let (a_addr, b_addr) = (a.addr(), b.addr());
    let Some(prom) = Prometheus::start(&[(&a_addr, HOSTILE), (&b_addr, "gpu-b")]) else {
        return;
    };
    // The holder's series has been scraped for a few seconds: the look
    // back says so.
    prom.until("the holder held for 3s", 30, || {
        prom.fleet(&FRESH_JSON).json()["nodes"][0]["holders"][0]["held_seconds"]
            .as_f64()
            .is_some_and(|s| s >= 3.0)
    });

    // Text: that node, that PID, the command to run there.
    let r = prom.fleet(&FRESH);
    r.assert_exit(1);
    let text = &r.stdout;
    assert!(
        text.starts_with("1 of 2 nodes have GPUs that are not free"),
        "{text}"
    );
    assert!(
        text.contains(&format!("\n{a_addr}  busy  4,096 MiB held for ")),
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
    assert!(!text.contains(b_addr.as_str()), "B is free: {text}");

    // JSON: the same, as values.
    let doc = prom.fleet(&FRESH_JSON).json();
    assert_eq!(doc["nodes_seen"], 2, "{doc}");
    assert_eq!(doc["nodes_free"], 1, "{doc}");
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
    let own = Gpufree::new(["status"])
        .json()
        .dev(&a.dir.dev)
        .sim(a.dir.tmp.path().join("state.json"))
        .doc();
    let p = process(&own, pid).unwrap();
    for field in ["user", "orphaned", "renamed"] {
        assert_eq!(h[0][field], p[field], "{field}");
    }
    assert_eq!(h[0]["owner_kind"], p["owner"]["kind"]);
    // A leftover where the test runs owned by no unit, container, pod or
    // job (as `check` counts one): then `--leftovers` lists it too.
    let leftover = matches!(p["owner"]["kind"].as_str(), Some("none" | "session"));
    assert_eq!(h[0]["leftover"], leftover);
    let r = prom.fleet(&[&FRESH[..], &["--leftovers"]].concat());
    r.assert_exit(if leftover { 1 } else { 0 });
    assert_eq!(r.stdout.contains(&a_addr), leftover, "{}", r.stdout);

    // A hostile node label: escaped in text, whole in JSON, no command.
    let r = prom.fleet(&[&FRESH[..], &["--node-label", "node"]].concat());
    r.assert_exit(1);
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
    let doc = prom.fleet(&[&FRESH_JSON[..], &["--node-label", "node"]].concat());
    assert!(!doc.stdout.contains('\x1b') && !doc.stdout.contains('\u{202e}'));
    let doc = doc.json();
    assert_eq!(doc["nodes"][0]["node"], HOSTILE);
    assert_eq!(doc["nodes"][0]["command"], Value::Null);

    // The holder ends: its memory goes, and the fleet is free.
    drop(holder);
    prom.until("the fleet is free", 20, || prom.fleet(&FRESH).code == 0);
    let r = prom.fleet(&FRESH);
    assert_eq!(
        r.stdout.trim(),
        format!(
            "All 2 nodes' GPUs are free (Prometheus {}, {{job=\"gpufree\"}}).",
            prom.url
        )
    );
}

#[test]
fn fleet_calls_a_node_stale_when_its_snapshot_ages_then_down_when_its_target_stops() {
    let b = Node::new(1).serve("200ms");
    // A host whose snapshot is taken once: its data ages.
    let c = Node::new(1).serve("10m");
    let (b_addr, c_addr) = (b.addr(), c.addr());
    let Some(prom) = Prometheus::start(&[(&b_addr, "gpu-b"), (&c_addr, "gpu-c")]) else {
        return;
    };
    // Past --max-age, C is stale: nothing busy, so unknown (3).
    let old = ["--max-age", "4s", "--json"];
    prom.until("C's snapshot is 4s old", 20, || {
        prom.fleet(&old).json()["stale"][0]["node"] == c_addr.as_str()
    });
    let r = prom.fleet(&old);
    r.assert_exit(3);
    let stale = r.json()["stale"].clone();
    assert_eq!(stale.as_array().unwrap().len(), 1, "{stale}");
    assert_eq!(stale[0]["reason"], "old", "{stale}");
    assert!(stale[0]["age_seconds"].as_f64().unwrap() > 4.0, "{stale}");
    assert!(
        (stale[0]["why"].as_str().unwrap()).ends_with(" old, over --max-age 4s"),
        "{stale}"
    );
    let r = prom.fleet(&["--max-age", "4s"]);
    r.assert_exit(3);
    assert!(r.stdout.contains(&format!("  {c_addr} (")), "{}", r.stdout);

    // B's exporter stops: its target is down, so the fleet is unknown.
    drop(b);
    prom.until("B is down", 20, || {
        let doc = prom.fleet(&FRESH_JSON);
        let down = (doc.json()["stale"].as_array().into_iter().flatten())
            .any(|s| s["node"] == b_addr.as_str() && s["reason"] == "down");
        doc.code == 3 && down
    });
    let r = prom.fleet(&FRESH);
    assert!(
        r.stdout.contains("its target is down (up is 0)"),
        "{}",
        r.stdout
    );
}

#[test]
fn fleet_with_a_selector_prometheus_cannot_parse_is_a_usage_error() {
    let b = Node::new(1).serve("200ms");
    let Some(prom) = Prometheus::start(&[(&b.addr(), "gpu-b")]) else {
        return;
    };
    let r = prom.fleet(&["--selector", "job=~\"(\""]);
    r.assert_exit(2);
    assert!(
        r.stderr.starts_with("gpufree: --selector: ") && r.stderr.lines().count() == 1,
        "{}",
        r.stderr
    );
}

#[test]
fn fleet_without_an_answer_exits_3_within_its_timeout() {
    // A listener that accepts and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let started = Instant::now();
    let r = Gpufree::new(["fleet"])
        .args(["--prometheus", &url, "--timeout", "1s"])
        .run();
    let took = started.elapsed();
    r.assert_exit(3);
    assert!(took < Duration::from_millis(2500), "took {took:?}");
    assert!(
        r.stderr.starts_with(&format!(
            "gpufree: --prometheus {url}: unreachable (no answer within --timeout 1s) asking "
        )),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);

    // Nothing listens (port 0 is no one's): refused at once, long
    // before the default --timeout (10s).
    let started = Instant::now();
    let r = Gpufree::new(["fleet"])
        .args(["--prometheus", "http://127.0.0.1:0"])
        .run();
    let took = started.elapsed();
    r.assert_exit(3);
    assert!(took < Duration::from_secs(3), "took {took:?}");
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
    let r = Gpufree::new(["fleet"])
        .args(["--prometheus", &url_endless, "--timeout", "30s"])
        .run();
    r.assert_exit(3);
    assert!(
        r.stderr
            .contains("is unusable: the answers are over 64 MiB together"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);

    // Not a URL, not a label: usage errors.
    let r = Gpufree::new(["fleet"])
        .args(["--prometheus", "localhost:9090"])
        .run();
    r.assert_exit(2);
    assert!(
        r.stderr
            .starts_with("gpufree: --prometheus localhost:9090: "),
        "{}",
        r.stderr
    );
    let r = Gpufree::new(["fleet"])
        .args(["--prometheus", &url, "--node-label", "no-de"])
        .run();
    r.assert_exit(2);
    assert!(r.stderr.contains("--node-label"), "{}", r.stderr);
    drop(silent);
}

#[test]
fn fleet_calls_a_node_stale_whose_textfile_node_exporter_still_serves_is_old() {
    if !have("prometheus-node-exporter", "prometheus-node-exporter") {
        return;
    }
    // A host whose `gpufree metrics --output` ran once (its timer then
    // stopped): node_exporter serves that file on every scrape.
    let d = TestDir::new(1);
    let state = d.state(&sim_state(vec![sim_gpu(0, &[], 0)]));
    let (exporter, file) = textfile_exporter(&d, &state);
    let addr = exporter.listening();
    let Some(prom) = Prometheus::start(&[(&addr, "gpu-t")]) else {
        return;
    };
    // Fresh within an hour: its one GPU is free.
    let r = prom.fleet(&["--max-age", "1h"]);
    r.assert_exit(0);
    // Past a 3s --max-age, however fresh node_exporter's scrapes are.
    let old = ["--max-age", "3s", "--json"];
    prom.until("the textfile's snapshot is 3s old", 30, || {
        prom.fleet(&old).json()["stale"][0]["node"] == addr.as_str()
    });
    let r = prom.fleet(&old);
    r.assert_exit(3);
    let stale = r.json()["stale"].clone();
    assert_eq!(stale[0]["reason"], "old", "{stale}");
    assert!(stale[0]["age_seconds"].as_f64().unwrap() > 3.0, "{stale}");
    // An older gpufree's file has no snapshot timestamp: the age is since
    // node_exporter saw it written (its mtime), never since the scrape.
    let text = std::fs::read_to_string(&file).unwrap();
    let older: String = text
        .lines()
        .filter(|l| !l.contains("gpufree_snapshot_timestamp_seconds"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&file, older).unwrap();
    let days = std::time::Duration::from_secs(3 * 86400);
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - days)
        .unwrap();
    let hour = ["--max-age", "1h", "--json"];
    prom.until("the older file is days old", 30, || {
        prom.fleet(&hour).json()["stale"][0]["age_seconds"]
            .as_f64()
            .is_some_and(|a| a > 2.0 * 86400.0)
    });
    prom.fleet(&hour).assert_exit(3);
}
