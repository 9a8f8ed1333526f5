//! The demo's incident kept running (`gpufree demo --hold`) for the pages
//! whose commands are shown against it, and the environment `gpufree sim
//! exec` gives a command run against it.

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
        let mut state = None;
        let mut lines = BufReader::new(stdout);
        let mut line = String::new();
        while lines.read_line(&mut line).is_ok_and(|n| n > 0) {
            if state.is_none() {
                state = line
                    .split_once(" sim exec --state ")
                    .and_then(|(_, rest)| rest.split_whitespace().next())
                    .map(PathBuf::from);
            }
            if line.starts_with("Press Enter") {
                break;
            }
            line.clear();
        }
        // What it prints when it ends is read, so that it never meets a
        // closed pipe while it cleans up.
        std::thread::spawn(move || std::io::copy(&mut lines, &mut std::io::sink()));
        let state = state.expect("the demo printed its sim exec line");
        Scene { demo, stdin, state }
    }

    /// What `gpufree sim exec --state STATE` sets, and the demo's device
    /// directory: `gpufree CMD` in a session then is the line the demo
    /// prints.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let lib = Command::new(env!("CARGO_BIN_EXE_gpufree"))
            .args(["sim", "lib"])
            .output()
            .expect("gpufree sim lib");
        let lib = PathBuf::from(String::from_utf8_lossy(&lib.stdout).trim());
        let dev = self.state.with_file_name("dev");
        vec![
            ("GPUFREE_SIM_STATE", self.state.display().to_string()),
            (
                "GPUFREE_NVML_LIB",
                lib.join("libnvidia-ml.so.1").display().to_string(),
            ),
            ("LD_LIBRARY_PATH", lib.display().to_string()),
            ("GPUFREE_DEV_DIR", dev.display().to_string()),
        ]
    }
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
