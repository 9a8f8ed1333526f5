//! Daemons a test starts and waits for (Prometheus, node_exporter, `gpufree
//! serve` beside them): each writes to a log file, which says where it
//! listens and is shown when a wait fails; killed and reaped when dropped,
//! so none outlives its test.

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
