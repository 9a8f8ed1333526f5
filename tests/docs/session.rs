//! One bash per page, fed the page's commands in order, so that what one
//! command sets (a variable, a holder started with `&`) is there for the
//! next, as in a reader's terminal.

use crate::env::scratch;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

/// The longest one command of a page may take (a kill waits for the
/// release; the demo runs a whole kill).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// A running bash and the directory its commands' outputs go through.
pub struct Session {
    bash: Child,
    stdin: ChildStdin,
    done: Receiver<String>,
    dir: tempfile::TempDir,
    count: usize,
}

/// The directory of the gpufree `cargo test` built, first on the PATH.
pub fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_gpufree"))
        .parent()
        .expect("the binary's directory")
        .to_path_buf()
}

impl Session {
    /// A bash in the repository's root with gpufree on its PATH and `env`
    /// set, writing nothing outside its own temporary directory (check's
    /// state, an empty kernel log) and the build's ([`scratch`]: the BPF
    /// cache), taking no pin, reading not the host's kernel log, and
    /// sending no kill's record to the host's journal.
    pub fn start(env: &[(String, String)]) -> Session {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = format!(
            "{}:{}",
            bin_dir().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        // The pages show a host whose kernel log holds no Xid: an empty
        // log of the session's own, never the machine's (`scratch` has
        // none at all, which prints no kernel log line).
        let kmsg = dir.path().join("kmsg");
        std::fs::write(&kmsg, "").expect("write the empty kernel log");
        let mut cmd = Command::new("bash");
        scratch(&mut cmd)
            .env("GPUFREE_KMSG", kmsg)
            .args(["--noprofile", "--norc"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("PATH", path)
            .env("COLUMNS", "100")
            .env("NO_COLOR", "1")
            .env("GPUFREE_CHECK_STATE", dir.path().join("check.json"))
            .env("GPUFREE_JOURNAL_SOCKET", "")
            .env("GPUFREE_SYSLOG_SOCKET", "")
            .env_remove("GPUFREE_NVML_LIB")
            .env_remove("GPUFREE_DEV_DIR")
            .env_remove("GPUFREE_SIM_STATE")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut bash = cmd.spawn().expect("bash");
        let stdin = bash.stdin.take().expect("bash's stdin");
        let stdout = bash.stdout.take().expect("bash's stdout");
        let (tx, done) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Session {
            bash,
            stdin,
            done,
            dir,
            count: 0,
        }
    }

    /// Runs `command` as typed at a prompt; its stdout and stderr together
    /// (as a terminal shows them) and its exit status.
    pub fn run(&mut self, command: &str) -> (String, i32) {
        self.count += 1;
        let n = self.count;
        let script = self.dir.path().join(format!("cmd-{n}.sh"));
        let out = self.dir.path().join(format!("out-{n}"));
        std::fs::write(&script, format!("{command}\n")).expect("write the command");
        writeln!(
            self.stdin,
            "{{ . '{}'; }} > '{}' 2>&1 < /dev/null; echo \"@@done {n} $?\"",
            script.display(),
            out.display()
        )
        .expect("bash takes the command");
        let rc = loop {
            let line = self
                .done
                .recv_timeout(COMMAND_TIMEOUT)
                .unwrap_or_else(|e| panic!("`{command}` did not end in {COMMAND_TIMEOUT:?}: {e}"));
            if let Some(rc) = line.strip_prefix(&format!("@@done {n} ")) {
                break rc.parse().unwrap_or(-1);
            }
        };
        let text = std::fs::read_to_string(&out).expect("the command's output");
        (text, rc)
    }
}

impl Drop for Session {
    /// Ends the holders the page's commands started (only this bash's
    /// jobs), then bash itself.
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "kill $(jobs -p) 2>/dev/null; wait; exit 0");
        let _ = self.stdin.flush();
        let _ = self.bash.wait();
    }
}
