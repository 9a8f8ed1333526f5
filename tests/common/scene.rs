//! The demo's incident kept running (`gpufree demo --hold`) for the pages
//! whose commands are shown against it, and the environment `gpufree sim
//! exec` gives a command run against it (`gpufree::sim::client_env`, the
//! function `sim exec` itself calls).

use crate::env::scratch;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// A held demo: its processes live until this is dropped.
pub struct Scene {
    demo: Child,
    stdin: Option<ChildStdin>,
    state: PathBuf,
    dev: PathBuf,
}

impl Scene {
    /// Starts `gpufree demo --hold` (in the tests' environment,
    /// [`scratch`]) and waits until it holds the incident.
    pub fn start() -> Scene {
        let mut demo = scratch(&mut Command::new(env!("CARGO_BIN_EXE_gpufree")))
            .args(["demo", "--hold"])
            .env("NO_COLOR", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("gpufree demo --hold");
        let stdin = demo.stdin.take();
        let stdout = demo.stdout.take().expect("the demo's stdout");
        let (mut state, mut dev) = (None, None);
        let mut lines = BufReader::new(stdout);
        let mut line = String::new();
        while lines.read_line(&mut line).is_ok_and(|n| n > 0) {
            // Its `sim exec --state STATE -- gpufree status --dev-dir DEV`.
            state = state.or_else(|| word_after(&line, " sim exec --state "));
            dev = dev.or_else(|| word_after(&line, " --dev-dir "));
            if line.starts_with("Press Enter") {
                break;
            }
            line.clear();
        }
        // What it prints when it ends is read, so that it never meets a
        // closed pipe while it cleans up.
        std::thread::spawn(move || std::io::copy(&mut lines, &mut std::io::sink()));
        let state = state.expect("the demo printed its sim exec line");
        let dev = dev.expect("the demo printed its device directory");
        Scene {
            demo,
            stdin,
            state,
            dev,
        }
    }

    /// What `gpufree sim exec --state STATE` sets (the same function
    /// makes it), and the device directory the demo printed: `gpufree
    /// CMD` in a session then is the line the demo prints.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = gpufree::sim::client_env(&self.state).expect("the simulator's environment");
        env.push(("GPUFREE_DEV_DIR".into(), self.dev.display().to_string()));
        env
    }
}

/// The word after `marker` in `line`, as a path.
fn word_after(line: &str, marker: &str) -> Option<PathBuf> {
    let (_, rest) = line.split_once(marker)?;
    rest.split_whitespace().next().map(PathBuf::from)
}

impl Drop for Scene {
    /// Enter (its input closed) ends the demo and everything it started;
    /// a demo still there after 10 s is killed (this test started it).
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.demo.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.demo.kill();
        let _ = self.demo.wait();
    }
}
