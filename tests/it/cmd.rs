//! The one way tests run the gpufree binary (after ripgrep's `TestCommand`,
//! tests/util.rs): [`Gpufree`] builds the command line and its environment
//! (`.sim(state)`, `.dev(dir)`, `.json()`, ...), [`Gpufree::run`] gives an
//! [`Output`], and [`Output::assert_exit`] fails with everything needed to
//! see why: the command line, the environment the test set, stdout and
//! stderr. Nothing here changes the test process's own environment: each
//! command carries what it needs.

use serde_json::Value;
use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

/// The gpufree binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gpufree"))
}

/// The directory where the gpufree the tests run keep this boot's
/// relocation of the in-kernel walk (`GPUFREE_BPF_CACHE`): in the build's
/// own scratch directory, never the machine's /run.
pub fn bpf_cache() -> &'static str {
    crate::env::BPF_CACHE
}

pub use crate::env::scratch;

/// The simulated libnvidia-ml.so.1, as `gpufree sim lib` gives it: asked
/// once per test binary.
pub fn sim_lib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let r = Gpufree::new(["sim", "lib"]).run();
        r.assert_exit(0);
        PathBuf::from(r.stdout.trim()).join("libnvidia-ml.so.1")
    })
}

/// Where no NVML library is: `--nvml-lib` for a run without NVML.
pub const NO_NVML: &str = "/nonexistent/libnvidia-ml.so.1";

/// A gpufree command line being built. Its arguments are, in order: the
/// words given to [`Gpufree::new`] (the subcommand), the options the
/// builder's methods add (in the order they were called), then
/// [`Gpufree::args`]; so a `--` among the last never swallows an option.
#[derive(Debug, Clone)]
pub struct Gpufree {
    program: PathBuf,
    wrapper: Vec<OsString>,
    head: Vec<OsString>,
    opts: Vec<OsString>,
    tail: Vec<OsString>,
    env: Vec<(OsString, Option<OsString>)>,
}

impl Gpufree {
    /// `gpufree WORDS...` with the tests' environment: [`scratch`]'s, which
    /// [`Gpufree::command`] gives first (the build's BPF cache, no pins, no
    /// kernel log, no process root or read timeout from the caller); no
    /// `NO_COLOR`, `GPUFREE_DEV_DIR` or `GPUFREE_NVML_LIB` from the caller;
    /// and a kill's audit record going nowhere (the journal and syslog
    /// sockets set empty) unless a test names a socket: tests never write
    /// to the machine's logs.
    pub fn new<I, S>(words: I) -> Gpufree
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Gpufree {
            program: bin(),
            wrapper: Vec::new(),
            head: words.into_iter().map(|w| w.as_ref().to_owned()).collect(),
            opts: Vec::new(),
            tail: Vec::new(),
            env: Vec::new(),
        }
        .env_remove("NO_COLOR")
        .env_remove("GPUFREE_DEV_DIR")
        .env_remove("GPUFREE_NVML_LIB")
        .env("GPUFREE_JOURNAL_SOCKET", "")
        .env("GPUFREE_SYSLOG_SOCKET", "")
    }

    /// Runs `program` (a copy of gpufree, a link to it) instead of the
    /// built binary.
    pub fn program(mut self, program: impl AsRef<Path>) -> Gpufree {
        self.program = program.as_ref().to_owned();
        self
    }

    /// Runs it through `wrapper` (`WRAPPER... gpufree ARGS...`: nsenter,
    /// setpriv, timeout), which passes the environment on.
    pub fn wrapped<I, S>(mut self, wrapper: I) -> Gpufree
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.wrapper = wrapper.into_iter().map(|w| w.as_ref().to_owned()).collect();
        self
    }

    /// Adds an option of the builder's own (after the subcommand).
    pub fn opt(mut self, opt: impl AsRef<OsStr>) -> Gpufree {
        self.opts.push(opt.as_ref().to_owned());
        self
    }

    /// Adds an option and its value.
    pub fn opt_value(self, opt: &str, value: impl AsRef<OsStr>) -> Gpufree {
        self.opt(opt).opt(value)
    }

    /// Adds arguments after every option the builder adds.
    pub fn args<I, S>(mut self, args: I) -> Gpufree
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.tail
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Adds one argument after every option the builder adds.
    pub fn arg(self, arg: impl AsRef<OsStr>) -> Gpufree {
        self.args([arg])
    }

    /// `--json`.
    pub fn json(self) -> Gpufree {
        self.opt("--json")
    }

    /// `--dev-dir DIR`.
    pub fn dev(self, dir: impl AsRef<Path>) -> Gpufree {
        self.opt_value("--dev-dir", dir.as_ref())
    }

    /// `--proc-root ROOT`.
    pub fn proc_root(self, root: impl AsRef<Path>) -> Gpufree {
        self.opt_value("--proc-root", root.as_ref())
    }

    /// `--nvml-lib LIB`.
    pub fn nvml_lib(self, lib: impl AsRef<Path>) -> Gpufree {
        self.opt_value("--nvml-lib", lib.as_ref())
    }

    /// `--nvml-lib` naming no library: a run without NVML.
    pub fn no_nvml(self) -> Gpufree {
        self.nvml_lib(NO_NVML)
    }

    /// A host with no GPU to find: no device node in the empty directory
    /// `empty`, and NVIDIA's library looked for only where it is not (no
    /// `GPUFREE_NVML_LIB`, `LD_LIBRARY_PATH` on `empty`).
    pub fn no_gpu_at(self, empty: impl AsRef<Path>) -> Gpufree {
        let empty = empty.as_ref();
        self.dev(empty)
            .env_remove("GPUFREE_NVML_LIB")
            .env("LD_LIBRARY_PATH", empty)
    }

    /// The simulated NVML library (`--nvml-lib`) over the simulator state
    /// `state` (`GPUFREE_SIM_STATE`).
    pub fn sim(self, state: impl AsRef<Path>) -> Gpufree {
        self.nvml_lib(sim_lib()).sim_state(state)
    }

    /// The kernel log read for Xids (`GPUFREE_KMSG`): a fixture's path,
    /// or `off` (the builder's default: never the machine's own log).
    pub fn kmsg(self, kmsg: impl AsRef<OsStr>) -> Gpufree {
        self.env("GPUFREE_KMSG", kmsg)
    }

    /// Only `GPUFREE_SIM_STATE`, for a library given another way.
    pub fn sim_state(self, state: impl AsRef<Path>) -> Gpufree {
        self.env("GPUFREE_SIM_STATE", state.as_ref())
    }

    /// Sets a variable in the command's environment.
    /// A test hook's variable (`GPUFREE_TEST_*`) is checked to be one the
    /// binary under test reads ([`hook`]): a binary built without the
    /// `test-hooks` feature fails the test instead of ignoring the hook.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Gpufree {
        if let Some(name) = key.as_ref().to_str() {
            if name.starts_with(HOOK_PREFIX) {
                hook(name);
            }
        }
        self.env
            .push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Sets each of `vars`.
    pub fn envs<K: AsRef<OsStr>, V: AsRef<OsStr>>(
        self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Gpufree {
        vars.into_iter().fold(self, |c, (k, v)| c.env(k, v))
    }

    /// Removes a variable from the command's environment.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Gpufree {
        self.env.push((key.as_ref().to_owned(), None));
        self
    }

    /// The command, stdin closed, to run or spawn as the test needs:
    /// [`scratch`]'s environment, then the builder's.
    pub fn command(&self) -> Command {
        let mut cmd = match self.wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&self.program);
                c
            }
            None => Command::new(&self.program),
        };
        scratch(&mut cmd)
            .args(&self.head)
            .args(&self.opts)
            .args(&self.tail)
            .stdin(Stdio::null());
        for (k, v) in &self.env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd
    }

    /// Runs it to the end.
    pub fn run(&self) -> Output {
        run_cmd(&mut self.command())
    }

    /// Runs it, asserts exit code 0 ([`Output::assert_exit`]) and gives
    /// stdout's JSON document.
    #[track_caller]
    pub fn doc(&self) -> Value {
        self.run().assert_exit(0).json()
    }

    /// Runs it with its stdout going to `stdout` (a file, `/dev/full`).
    pub fn run_stdout_to(&self, stdout: impl Into<Stdio>) -> Output {
        let mut command = self.command();
        command.stdout(stdout);
        let out = command
            .output()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", command_line(&command)));
        Output::ended(&command, out)
    }

    /// Runs it with its stdout a pipe nobody reads (closed before it
    /// writes).
    pub fn run_stdout_closed(&self) -> Output {
        let mut command = self.command();
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", command_line(&command)));
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("waiting for gpufree");
        Output::ended(&command, out)
    }

    /// Starts it, stdout and stderr piped, for a test that acts while it
    /// runs; [`Running::finish`] gives its [`Output`].
    #[track_caller]
    pub fn spawn(&self) -> Running {
        let mut command = self.command();
        let child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", command_line(&command)));
        Running { child, command }
    }
}

/// A gpufree the test started and has not waited for.
#[derive(Debug)]
pub struct Running {
    pub child: Child,
    command: Command,
}

impl Running {
    /// Waits for it to end; what it printed and how it ended.
    pub fn finish(self) -> Output {
        let out = self.child.wait_with_output().expect("waiting for gpufree");
        Output::ended(&self.command, out)
    }
}

/// What a run printed and how it ended, with the command line and the
/// environment it was given (for the failure message). `stdout` and
/// `stderr` are the bytes read as UTF-8 (lossily); `*_bytes` are the bytes.
#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub stdout_bytes: Vec<u8>,
    pub stderr_bytes: Vec<u8>,
    pub command: String,
    pub env: Vec<String>,
}

/// Runs `cmd` (stdin closed) to the end.
pub fn run_cmd(cmd: &mut Command) -> Output {
    let out = cmd.stdin(Stdio::null()).output().unwrap_or_else(|e| {
        panic!("{} does not start: {e}", command_line(cmd));
    });
    Output::ended(cmd, out)
}

/// `cmd`'s program and arguments, as a shell would read them back.
pub fn command_line(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(shell_word)
        .collect::<Vec<_>>()
        .join(" ")
}

/// `word` as a shell would need it to read it back (for messages only).
fn shell_word(word: &OsStr) -> String {
    let w = word.to_string_lossy();
    let plain = !w.is_empty()
        && w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-=:,@+%".contains(&b));
    if plain {
        w.into_owned()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

impl Output {
    /// What `cmd` printed and how it ended, from the standard library's
    /// record of it.
    pub fn ended(cmd: &Command, out: std::process::Output) -> Output {
        Output::of(cmd, out.status.code().unwrap_or(-1), out.stdout, out.stderr)
    }

    /// What `cmd` (spawned by the test itself) printed and how it ended.
    pub fn of(cmd: &Command, code: i32, stdout: Vec<u8>, stderr: Vec<u8>) -> Output {
        let command = command_line(cmd);
        let env = cmd
            .get_envs()
            .map(|(k, v)| match v {
                Some(v) => format!("{}={}", k.to_string_lossy(), shell_word(v)),
                None => format!("unset {}", k.to_string_lossy()),
            })
            .collect();
        Output {
            code,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
            stdout_bytes: stdout,
            stderr_bytes: stderr,
            command,
            env,
        }
    }

    /// The command line, its environment, exit code, stdout and stderr.
    pub fn report(&self) -> String {
        format!(
            "command: {}\nenvironment set: {}\nexit code: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.command,
            self.env.join(" "),
            self.code,
            self.stdout,
            self.stderr
        )
    }

    /// Fails the test, with [`Output::report`], unless it exited with
    /// `code`.
    #[track_caller]
    pub fn assert_exit(&self, code: i32) -> &Output {
        assert!(
            self.code == code,
            "expected exit code {code}, got {}\n{}",
            self.code,
            self.report()
        );
        self
    }

    /// [`Output::assert_exit`], with what the test says of this run.
    #[track_caller]
    pub fn assert_exit_with(&self, code: i32, context: impl std::fmt::Display) -> &Output {
        assert!(
            self.code == code,
            "expected exit code {code}, got {}: {context}\n{}",
            self.code,
            self.report()
        );
        self
    }

    /// Fails the test, with [`Output::report`], if it exited with `code`.
    #[track_caller]
    pub fn assert_exit_not(&self, code: i32) -> &Output {
        assert!(
            self.code != code,
            "expected any exit code but {code}\n{}",
            self.report()
        );
        self
    }

    /// Stdout as one JSON document.
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.stdout_bytes)
            .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e})\n{}", self.report()))
    }

    /// Stdout as one JSON document, or null when it printed nothing.
    #[track_caller]
    pub fn json_or_null(&self) -> Value {
        if self.stdout.trim().is_empty() {
            Value::Null
        } else {
            self.json()
        }
    }
}

/// What every test hook's variable begins with.
pub const HOOK_PREFIX: &str = "GPUFREE_TEST_";

/// The one file that names the hooks' variables, built only with the
/// `test-hooks` feature.
pub const HOOKS_GATED: &str = "src/test_hooks/on.rs";

/// The hooks' variable names, as the gated file names them.
pub fn hook_names() -> BTreeSet<String> {
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let source = std::fs::read_to_string(top.join(HOOKS_GATED)).unwrap();
    let re = regex::Regex::new(&format!("\"({HOOK_PREFIX}[A-Z_]+)\"")).unwrap();
    re.captures_iter(&source)
        .map(|c| c[1].to_string())
        .collect()
}

/// Those of [`hook_names`] the binary under test holds (read once: a debug
/// binary is some 200 MB).
fn in_binary() -> &'static BTreeSet<String> {
    static FOUND: OnceLock<BTreeSet<String>> = OnceLock::new();
    FOUND.get_or_init(|| {
        let bytes = std::fs::read(bin()).unwrap();
        let any: Vec<String> = hook_names().iter().map(|n| regex::escape(n)).collect();
        let re = regex::bytes::Regex::new(&any.join("|")).unwrap();
        re.find_iter(&bytes)
            .map(|m| String::from_utf8_lossy(m.as_bytes()).into_owned())
            .collect()
    })
}

/// `name`, a test hook's variable, once the binary under test is known to
/// read it; panics where it was built without the `test-hooks` feature.
pub fn hook(name: &str) -> &str {
    assert!(
        in_binary().contains(name),
        "{} does not know the test hook {name}: it was built without the \
         test-hooks feature (cargo test turns it on: gpufree is its own \
         dev-dependency with it in Cargo.toml)",
        bin().display()
    );
    name
}
