//! Daemons a test starts and waits for (Prometheus, node_exporter, `gpufree
//! serve` beside them): each writes to a log file, which says where it
//! listens and is shown when a wait fails; killed and reaped when dropped,
//! so none outlives its test. And what the tests of serve, Prometheus and
//! fleet share: `serve` on a simulated node, a `prometheus` scraping them,
//! its HTTP API (`get`, `query`).

use crate::cmd::Gpufree;
use crate::harness::{skip_off_ci, TestDir};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Daemon {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Daemon {
    /// Spawns `cmd`, its stdout and stderr in `dir/NAME.log`.
    pub fn start(name: &str, cmd: &mut Command, dir: &Path) -> Daemon {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("{name} starts: {e}"));
        Daemon {
            name: name.into(),
            child,
            log,
        }
    }

    /// The log so far, headed by the daemon's name.
    pub fn log(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        format!("--- {} log ---\n{text}", self.name)
    }

    /// What `find` reads from the log, once it is there (`what`, within
    /// `secs`).
    pub fn read_log<T>(&self, what: &str, secs: u64, find: impl Fn(&str) -> Option<T>) -> T {
        until(what, secs, &[self], || {
            find(&std::fs::read_to_string(&self.log).ok()?)
        })
    }

    /// The address a Prometheus engine told to listen on 127.0.0.1:0 took,
    /// from its log (`msg="Listening on" address=127.0.0.1:PORT`): no port
    /// is guessed free, so none is raced for.
    pub fn listening(&self) -> String {
        self.read_log(&format!("{} listens", self.name), 30, |log| {
            let line = log.lines().find(|l| l.contains("msg=\"Listening on\""))?;
            let addr = line.split("address=").nth(1)?.split_whitespace().next()?;
            Some(addr.to_string())
        })
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Calls `f` every 200 ms until it gives a value or `secs` pass; then
/// panics with `what` and the daemons' logs.
pub fn until<T>(what: &str, secs: u64, logs: &[&Daemon], mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = logs.iter().map(|d| d.log()).collect();
            panic!("{what} within {secs} s\n{}", logs.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A file of this repository.
pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Whether `tool` runs here; under CI it must (`.ci/run` installs it).
pub fn have(tool: &str, package: &str) -> bool {
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

/// A GET's body when it answers 200 within 5 s.
pub fn get(url: &str, query: &[(&str, &str)]) -> Option<String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let mut req = agent.get(url);
    for (k, v) in query {
        req = req.query(*k, *v);
    }
    let mut res = req.call().ok()?;
    (res.status() == 200).then(|| res.body_mut().read_to_string().ok())?
}

/// The result vector of an instant query to the Prometheus at `base`, as
/// (labels, value).
pub fn query(base: &str, q: &str) -> Option<Vec<(Value, f64)>> {
    let doc: Value =
        serde_json::from_str(&get(&format!("{base}/api/v1/query"), &[("query", q)])?).ok()?;
    doc["data"]["result"]
        .as_array()?
        .iter()
        .map(|s| Some((s["metric"].clone(), s["value"][1].as_str()?.parse().ok()?)))
        .collect()
}

/// `gpufree serve` on 127.0.0.1 (a port of its choosing) for the
/// simulated node `d` in the simulator state `state`, a snapshot every
/// `interval`; and where it listens (`127.0.0.1:PORT`, read from its log).
pub fn serve(
    name: &str,
    d: &TestDir,
    state: &Path,
    interval: &str,
    extra: &[&str],
) -> (Daemon, String) {
    let mut cmd = Gpufree::new(["serve", "--listen", "127.0.0.1:0", "--interval", interval])
        .on(d, state)
        .args(extra)
        .command();
    let daemon = Daemon::start(name, &mut cmd, d.tmp.path());
    let addr = daemon.read_log("serve says where it listens", 10, |log| {
        let url = log.split_whitespace().find(|w| w.starts_with("http://"))?;
        Some(
            url.trim_start_matches("http://")
                .trim_end_matches("/metrics")
                .to_string(),
        )
    });
    (daemon, addr)
}

/// A Prometheus (its own storage under `dir`, 1 s scrapes and rule
/// evaluations, the rule files `rules`) scraping `targets` as the job
/// `gpufree`, each with its target labels; its base URL.
pub fn prometheus(dir: &Path, targets: &[(&str, Value)], rules: &[PathBuf]) -> (Daemon, String) {
    let static_configs: Vec<Value> = targets
        .iter()
        .map(|(t, labels)| json!({"targets": [t], "labels": labels}))
        .collect();
    let config = json!({
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
        "rule_files": rules,
        "scrape_configs": [{"job_name": "gpufree", "static_configs": static_configs}],
    });
    // JSON is YAML (a label's control characters as \u escapes).
    let file = dir.join("prometheus.yml");
    std::fs::write(&file, config.to_string()).unwrap();
    let daemon = Daemon::start(
        "prometheus",
        Command::new("prometheus")
            .arg(format!("--config.file={}", file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg("--web.listen-address=127.0.0.1:0"),
        dir,
    );
    let base = format!("http://{}", daemon.listening());
    (daemon, base)
}

/// `gpufree metrics --output` of the simulated host `d` (state `state`)
/// written once into a textfile directory, and a real node_exporter
/// serving that directory on 127.0.0.1: the exporter and the file.
pub fn textfile_exporter(d: &TestDir, state: &Path) -> (Daemon, PathBuf) {
    let textfiles = d.tmp.path().join("textfile");
    std::fs::create_dir(&textfiles).unwrap();
    let file = textfiles.join("gpufree.prom");
    let r = Gpufree::new(["metrics"])
        .on(d, state)
        .args(["--output", file.to_str().unwrap()])
        .run();
    r.assert_exit(0);
    let exporter = Daemon::start(
        "node_exporter",
        Command::new("prometheus-node-exporter")
            .arg("--collector.disable-defaults")
            .arg("--collector.textfile")
            .arg(format!(
                "--collector.textfile.directory={}",
                textfiles.display()
            ))
            .arg("--web.listen-address=127.0.0.1:0"),
        d.tmp.path(),
    );
    (exporter, file)
}
