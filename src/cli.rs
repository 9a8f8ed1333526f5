//! Command-line interface: clap definitions (plain values, no system
//! access), then one fallible step that builds the real objects and runs the
//! command. Errors map to the exit codes of SPEC.md here and nowhere else.

use crate::model::VerdictState;
use crate::present::{table, write_json, Paint};
use crate::safe::{escape, fit, Guard};
use crate::snapshot::{self, Config, GpuSelector, SnapshotError};
use clap::{Args, Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;

/// Exit codes (SPEC.md).
pub mod exit {
    /// Done / free / nothing wrong.
    pub const OK: i32 = 0;
    /// The condition was not reached.
    pub const NOT_REACHED: i32 = 1;
    /// Usage error.
    pub const USAGE: i32 = 2;
    /// Environment error: no driver/library and no nodes, permission needed.
    pub const ENVIRONMENT: i32 = 3;
    /// kill: some targets survived or the memory was not released.
    pub const SURVIVORS: i32 = 4;
    /// Refused for safety (protected process, no confirmation).
    pub const REFUSED: i32 = 5;
    /// `sim exec`: the command could not be run (as `env` and shells do).
    pub const CANNOT_EXEC: i32 = 127;
}

/// gpufree: who holds my GPU memory, why is it not free, and what exactly frees it.
#[derive(Debug, Parser)]
#[command(name = "gpufree", version, about, max_term_width = 100)]
pub struct Cli {
    /// Options every command takes.
    #[command(flatten)]
    pub common: Common,
    /// The command (default: status).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub struct Common {
    /// GPUs to look at: an index, a UUID or UUID prefix, a PCI bus id, or
    /// `all` (repeatable; default all).
    #[arg(long = "gpu", value_name = "SEL", global = true)]
    pub gpu: Vec<GpuSelector>,
    /// One JSON document on stdout, nothing else.
    #[arg(long, global = true)]
    pub json: bool,
    /// NVML library to load (default: the system's libnvidia-ml.so.1).
    #[arg(long, value_name = "PATH", env = "GPUFREE_NVML_LIB", global = true)]
    pub nvml_lib: Option<PathBuf>,
    /// Directory holding the GPU device nodes.
    #[arg(long, value_name = "DIR", env = "GPUFREE_DEV_DIR", global = true)]
    pub dev_dir: Option<PathBuf>,
    /// The proc filesystem to scan (e.g. the host's /proc mounted at /host/proc).
    #[arg(long, value_name = "DIR", env = "GPUFREE_PROC_ROOT", global = true)]
    pub proc_root: Option<PathBuf>,
    /// No colours (also: NO_COLOR, or stdout not a terminal).
    #[arg(long, global = true)]
    pub no_color: bool,
    /// Print less: status without findings or footer, why without details
    /// or next commands, kill and wait without a report; errors still go to
    /// stderr and the exit code says the outcome.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Print more to stderr (timings).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// How long one read may take (a process's fds and maps, an NVML call)
    /// before it counts as timed out and the verdict as unknown.
    #[arg(long, value_name = "DUR", env = "GPUFREE_READ_TIMEOUT", default_value = "5s",
          value_parser = read_timeout, global = true)]
    pub read_timeout: std::time::Duration,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Per-GPU memory and every process holding GPU memory or a GPU device node.
    Status,
    /// Why memory on the selected GPUs is not free: ordered findings, each
    /// with the exact next command. Exit 0 when free, 1 when something holds them.
    Why {
        /// Also say which holders `pkill -f REGEX` and `pkill REGEX` would hit
        /// and miss, and which other processes they would hit.
        #[arg(long, value_name = "REGEX")]
        pattern: Option<String>,
    },
    /// Free the selected GPUs (or PIDs) safely, then wait until the memory is
    /// really released. Targets are always GPU holders; selectors narrow them.
    Kill(KillArgs),
    /// Block until the selected GPUs are free (systemd ExecStartPre=, Slurm prolog, CI).
    Wait(WaitArgs),
    /// Live terminal view: GPU memory bars, the holders, the top finding; kill from the view.
    Watch {
        /// Screen and memory refresh (at least 100ms).
        #[arg(long, value_name = "DUR", default_value = "1s", value_parser = refresh_interval)]
        interval: std::time::Duration,
        /// A full holder scan at least this often (also on a holder's exit,
        /// a change of NVML's process lists, and the r key; at least 1s).
        #[arg(long, value_name = "DUR", default_value = "60s", value_parser = scan_interval)]
        scan_every: std::time::Duration,
    },
    /// Prometheus metrics over HTTP (read-only; a cached snapshot of the
    /// --gpu selection, refreshed every --interval): GET /metrics, and
    /// GET /healthz (200 while the snapshot is fresh, else 503).
    Serve {
        /// Address to listen on (e.g. a pod's IP and a port; `[::1]:9835` for IPv6).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9835")]
        listen: String,
        /// How often to take a snapshot (at least 100ms).
        #[arg(long, value_name = "DUR", default_value = "10s", value_parser = refresh_interval)]
        interval: std::time::Duration,
        /// Add each holder's command line as a label (may hold secrets).
        #[arg(long)]
        label_cmdline: bool,
        /// At most this many open connections (default 1024, lowered to fit
        /// the open-file limit); past it a new one displaces the longest
        /// idle one, or is refused with 503 when all are answering.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        max_connections: Option<u32>,
        /// A request head must arrive within this long (from the connection's
        /// start, or from the first byte of a later request).
        #[arg(long, value_name = "DUR", default_value = "10s", value_parser = serve_timeout)]
        header_timeout: std::time::Duration,
        /// Close a kept-alive connection idle this long, and one whose client
        /// does not take its response.
        #[arg(long, value_name = "DUR", default_value = "60s", value_parser = serve_timeout)]
        idle_timeout: std::time::Duration,
    },
    /// The same metrics once, on stdout or atomically into FILE (node_exporter's
    /// textfile collector).
    Metrics {
        /// Write here instead of stdout: an exclusively created temporary file
        /// in FILE's directory, mode 0644 (0600 with --label-cmdline), renamed
        /// over FILE. FILE must be absent or a regular file: a symlink, device
        /// or FIFO there is refused (exit 2).
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Add each holder's command line as a label (may hold secrets).
        #[arg(long)]
        label_cmdline: bool,
    },
    /// Check a systemd unit for the mistakes that keep GPUs busy or hidden
    /// ($ and % substitution in Exec lines, KillMode=process, PrivateDevices=yes,
    /// inline nvidia-smi wait loops). Exit 0 when clean, 1 with problems.
    Doctor {
        /// The unit file (or drop-in) to read.
        #[arg(long, value_name = "FILE")]
        unit: PathBuf,
    },
    /// Print shell completions (generated from this command line's definition).
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff, generated from this command line's
    /// definition), or write one page per command into DIR.
    Man {
        /// Write gpufree.1 and one gpufree-COMMAND.1 per command here.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Replay the reference incident on the simulator, with real processes.
    Demo {
        /// Keep the incident running until Enter, to try other tools on it.
        #[arg(long)]
        hold: bool,
    },
    /// The simulated NVML library.
    #[command(subcommand)]
    Sim(SimCommand),
}

/// `gpufree kill` flags.
#[derive(Debug, Args)]
pub struct KillArgs {
    /// A holder's PID (repeatable).
    #[arg(long, value_name = "PID")]
    pub pid: Vec<u32>,
    /// Holders whose comm, whole command line or exe path matches REGEX.
    #[arg(long = "match", value_name = "REGEX")]
    pub matcher: Option<String>,
    /// Holders of this user (name or UID).
    #[arg(long, value_name = "NAME|UID")]
    pub user: Option<String>,
    /// Holders of this systemd unit, container id, pod UID or Slurm job.
    #[arg(long, value_name = "NAME")]
    pub unit: Option<String>,
    /// Holders that are PID or descend from it (a launcher and its
    /// workers), through parents that hold no GPU themselves.
    #[arg(long, value_name = "PID")]
    pub tree: Option<u32>,
    /// Print the plan and stop.
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask (without a terminal and without --yes, gpufree refuses).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// First signal: TERM, INT, HUP, QUIT, USR1, USR2 or KILL.
    #[arg(long, value_name = "SIG", default_value = "TERM", value_parser = parse_signal)]
    pub signal: (String, rustix::process::Signal),
    /// How long to wait after the first signal before SIGKILL.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = crate::units::parse_duration)]
    pub grace: std::time::Duration,
    /// The whole kill after confirmation (signals, grace, the wait for the
    /// memory) ends within DUR; a grace longer than that is cut to it.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = kill_timeout)]
    pub timeout: std::time::Duration,
    /// Do not wait for the memory.
    #[arg(long)]
    pub no_wait: bool,
    /// Once the memory is back, watch DUR for a holder that a supervisor
    /// starts again (up to 5s more while a process the targets' parent
    /// started meanwhile has not opened a GPU yet); 0: do not watch.
    #[arg(long, value_name = "DUR", default_value = "1s", value_parser = crate::units::parse_duration)]
    pub settle: std::time::Duration,
    /// Without NVML, call the memory released once no holder is left
    /// (otherwise the release is unknown: exit 3).
    #[arg(long)]
    pub holders_only: bool,
    /// Also signal protected daemons (nvidia-persistenced, DCGM, MPS, Xorg...). Never implied.
    #[arg(long)]
    pub force_protected: bool,
    /// Also signal holders of only shared nodes (nvidia-uvm, nvidiactl) that
    /// belong to no targeted group.
    #[arg(long)]
    pub include_shared: bool,
}

/// `gpufree wait` flags.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Free means at most SIZE used (512MiB, 2GiB, 0). Default: no holder
    /// processes and used memory at the idle baseline.
    #[arg(long, value_name = "SIZE", value_parser = crate::units::parse_size)]
    pub max_used: Option<u64>,
    /// Give up after DUR (0 = check once).
    #[arg(long, value_name = "DUR", default_value = "300s", value_parser = crate::units::parse_duration)]
    pub timeout: std::time::Duration,
    /// How often to look (at least 10ms).
    #[arg(long, value_name = "DUR", default_value = "200ms", value_parser = wait_interval)]
    pub interval: std::time::Duration,
    /// Without NVML, call the GPUs free when no process holds them
    /// (otherwise the verdict is unknown: exit 3).
    #[arg(long)]
    pub holders_only: bool,
}

/// A duration of at least `min_ms` milliseconds; a shorter one is refused
/// with `why` (the floors below).
fn duration_at_least(s: &str, min_ms: u64, why: &str) -> Result<std::time::Duration, String> {
    let d = crate::units::parse_duration(s)?;
    if d < std::time::Duration::from_millis(min_ms) {
        let min = if min_ms.is_multiple_of(1000) {
            format!("{}s", min_ms / 1000)
        } else {
            format!("{min_ms}ms")
        };
        return Err(format!("'{s}' is below {min}: {why}"));
    }
    Ok(d)
}

/// `kill --timeout`: it must leave time to signal, wait and check.
fn kill_timeout(s: &str) -> Result<std::time::Duration, String> {
    duration_at_least(s, 100, "too short to signal, wait and check the release")
}

/// `--read-timeout`: a shorter one would call every read hung.
fn read_timeout(s: &str) -> Result<std::time::Duration, String> {
    duration_at_least(s, 10, "every read would time out")
}

/// `serve`'s connection deadlines: no request could arrive in less.
fn serve_timeout(s: &str) -> Result<std::time::Duration, String> {
    duration_at_least(s, 100, "no request could arrive in time")
}

const SPINS: &str = "an interval that short only spins";

/// `wait --interval`: how often to look.
fn wait_interval(s: &str) -> Result<std::time::Duration, String> {
    duration_at_least(s, 10, SPINS)
}

/// `watch --interval` and `serve --interval`: a screen or a snapshot.
fn refresh_interval(s: &str) -> Result<std::time::Duration, String> {
    duration_at_least(s, 100, SPINS)
}

/// `watch --scan-every`: a full holder scan.
fn scan_interval(s: &str) -> Result<std::time::Duration, String> {
    duration_at_least(s, 1000, SPINS)
}

fn parse_signal(s: &str) -> Result<(String, rustix::process::Signal), String> {
    use rustix::process::Signal;
    // `term`, `SIGTERM`, `sigterm`, `15`; "SIG" stripped once.
    let up = s.trim().to_ascii_uppercase();
    let name = up.strip_prefix("SIG").unwrap_or(&up);
    let sig = match name {
        "TERM" | "15" => Signal::TERM,
        "INT" | "2" => Signal::INT,
        "HUP" | "1" => Signal::HUP,
        "QUIT" | "3" => Signal::QUIT,
        "USR1" | "10" => Signal::USR1,
        "USR2" | "12" => Signal::USR2,
        "KILL" | "9" => Signal::KILL,
        _ => {
            return Err(format!(
                "'{s}' is not one of TERM, INT, HUP, QUIT, USR1, USR2, KILL"
            ))
        }
    };
    let canonical = match sig {
        Signal::TERM => "TERM",
        Signal::INT => "INT",
        Signal::HUP => "HUP",
        Signal::QUIT => "QUIT",
        Signal::USR1 => "USR1",
        Signal::USR2 => "USR2",
        _ => "KILL",
    };
    Ok((canonical.to_string(), sig))
}

/// `gpufree sim ...`.
#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Print the directory holding the simulated libnvidia-ml.so.1.
    Lib,
    /// Run a program (gpufree, pynvml, gpustat, nvitop...) against the simulated GPUs in FILE.
    Exec {
        /// The simulator's state file.
        #[arg(long, value_name = "FILE")]
        state: PathBuf,
        /// The command and its arguments.
        #[arg(last = true, required = true, value_name = "CMD")]
        cmd: Vec<String>,
    },
}

/// An error with its exit code; the message is one line.
#[derive(Debug)]
pub struct Failure {
    /// Exit code (SPEC.md).
    pub code: i32,
    /// What went wrong, naming the flag, file or call.
    pub message: String,
    /// The reader of stdout went away (`| head`): not a failure.
    pub broken_pipe: bool,
}

impl Failure {
    fn new(code: i32, message: impl ToString) -> Failure {
        Failure {
            code,
            message: message.to_string(),
            broken_pipe: false,
        }
    }

    /// An error of a whole command (watch, demo), told by its I/O kind
    /// whether it is only a closed pipe.
    fn from_anyhow(code: i32, e: &anyhow::Error) -> Failure {
        Failure {
            broken_pipe: e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }),
            ..Failure::new(code, format!("{e:#}"))
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        Failure {
            broken_pipe: e.kind() == std::io::ErrorKind::BrokenPipe,
            ..Failure::new(exit::ENVIRONMENT, e)
        }
    }
}

fn config(common: &Common) -> Config {
    let d = Config::default();
    Config {
        proc_root: common.proc_root.clone().unwrap_or(d.proc_root),
        dev_dir: common.dev_dir.clone().unwrap_or(d.dev_dir),
        nvml_lib: common.nvml_lib.clone(),
        others: false,
        read_timeout: common.read_timeout,
        ..d
    }
}

/// Compiles a regular expression given to `flag`; a bad one is a usage
/// error in one line (regex's own message spans several).
fn regex_flag(flag: &str, text: &str) -> Result<regex::Regex, Failure> {
    regex::Regex::new(text).map_err(|e| {
        let why = e
            .to_string()
            .lines()
            .last()
            .unwrap_or("")
            .trim()
            .to_string();
        Failure::new(
            exit::USAGE,
            format!("{flag} '{text}': invalid regular expression: {why}"),
        )
    })
}

fn snapshot_failure(common: &Common, e: SnapshotError) -> Failure {
    match e {
        SnapshotError::DevDir(_) if common.dev_dir.is_some() => Failure::new(exit::USAGE, e),
        e => Failure::new(exit::ENVIRONMENT, e),
    }
}

fn collector(
    common: &Common,
    others: bool,
    deadline: Option<std::time::Instant>,
) -> Result<snapshot::Collector, Failure> {
    let cfg = Config {
        others,
        ..config(common)
    };
    let c = snapshot::Collector::new(cfg, deadline).map_err(|e| snapshot_failure(common, e))?;
    if let Some(dir) = &common.dev_dir {
        // A device directory given by hand that holds no GPU node, while
        // NVML sees GPUs, is a typo, not an idle machine: every holder of a
        // node would go unseen. (With no NVML either, the error above
        // already said there is no GPU.)
        if crate::proc::nodes::NodeSet::discover(dir).is_ok_and(|n| n.is_empty()) {
            return Err(Failure::new(
                exit::USAGE,
                format!(
                    "--dev-dir {}: no GPU device node there (nvidia*, dri/card*, dri/renderD*, kfd)",
                    dir.display()
                ),
            ));
        }
    }
    Ok(c)
}

fn take_selected(common: &Common, others: bool) -> Result<crate::model::Snapshot, Failure> {
    let started = std::time::Instant::now();
    let snap = collector(common, others, None)?
        .snapshot()
        .map_err(|e| snapshot_failure(common, e))?;
    if common.verbose > 0 {
        eprintln!(
            "gpufree: snapshot of {} processes in {:.1} ms",
            snap.visibility.processes_scanned,
            started.elapsed().as_secs_f64() * 1000.0
        );
    }
    let indexes =
        snapshot::resolve(&snap.gpus, &common.gpu).map_err(|e| Failure::new(exit::USAGE, e))?;
    Ok(snapshot::select(snap, &indexes))
}

/// Runs a parsed command line; returns the exit code.
pub fn run(cli: Cli) -> Result<i32, Failure> {
    let common = &cli.common;
    let paint = Paint::for_stdout(common.no_color);
    let mut out = Guard::new(std::io::stdout().lock(), paint.color);
    match cli.command.unwrap_or(Command::Status) {
        Command::Status => {
            let mut snap = take_selected(common, false)?;
            if common.json {
                write_json(&mut out, &snap)?;
            } else {
                if common.quiet {
                    snap.findings.clear();
                }
                table::write_status_with(&mut out, &snap, &paint, !common.quiet)?;
            }
            Ok(exit::OK)
        }
        Command::Why { pattern } => {
            let pattern = match pattern {
                Some(p) => Some((p.clone(), regex_flag("--pattern", &p)?)),
                None => None,
            };
            let mut snap = take_selected(common, pattern.is_some())?;
            snap.findings =
                crate::diagnose::diagnose_with(&snap, &crate::diagnose::Options { pattern });
            let code = verdict_exit(snap.verdict.state);
            let shown = if common.json {
                write_json(&mut out, &snap)
            } else {
                if common.quiet {
                    for f in &mut snap.findings {
                        f.details.clear();
                        f.next.clear();
                    }
                }
                crate::present::why::write_why(&mut out, &snap, &paint)
            };
            with_outcome(shown.and_then(|()| out.flush()), code)
        }
        Command::Kill(args) => run_kill(common, &args, &paint),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            // Scripts, not data: tabs and all, written as generated.
            drop(out);
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "gpufree",
                &mut std::io::stdout(),
            );
            Ok(exit::OK)
        }
        Command::Man { dir } => {
            drop(out);
            match dir {
                Some(dir) => man_pages(&dir).map_err(|(code, why)| {
                    Failure::new(code, format!("--dir {}: {why}", dir.display()))
                })?,
                None => man_page(&mut std::io::stdout())?,
            }
            Ok(exit::OK)
        }
        Command::Watch {
            interval,
            scan_every,
        } => {
            drop(out);
            use std::io::IsTerminal;
            if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
                return Err(Failure::new(
                    exit::ENVIRONMENT,
                    "watch: needs a terminal on stdin and stdout; for one look use `gpufree status` (or --json)",
                ));
            }
            let first = take_selected(common, false)?;
            let opts = crate::watch::Options {
                interval,
                scan_every,
                gpus: if common.gpu.is_empty() {
                    Vec::new()
                } else {
                    first.gpus.iter().map(|g| g.index).collect()
                },
            };
            crate::watch::run(config(common), opts)
                .map_err(|e| Failure::from_anyhow(exit::ENVIRONMENT, &e))?;
            Ok(exit::OK)
        }
        Command::Serve {
            listen,
            interval,
            label_cmdline,
            max_connections,
            header_timeout,
            idle_timeout,
        } => {
            drop(out);
            let c = collector(common, false, None)?;
            let opts = crate::serve::Options {
                listen,
                interval,
                label_cmdline,
                gpus: common.gpu.clone(),
                max_connections: max_connections.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
                header_timeout,
                idle_timeout,
            };
            let quiet = common.quiet;
            crate::serve::serve(c, &opts, |addr| {
                if !quiet {
                    eprintln!("gpufree serve: listening on http://{addr}/metrics")
                }
            })
            .map_err(|e| {
                use crate::serve::ServeError;
                let code = match e {
                    ServeError::Address { .. } | ServeError::Gpu(_) => exit::USAGE,
                    ServeError::Bind { .. } | ServeError::Runtime(_) => exit::ENVIRONMENT,
                };
                Failure::new(code, e)
            })?;
            Ok(exit::OK)
        }
        Command::Metrics {
            output,
            label_cmdline,
        } => {
            let started = std::time::Instant::now();
            let snap = take_selected(common, false)?;
            let extra = crate::present::metrics::Extra {
                label_cmdline,
                snapshot_duration_seconds: Some(started.elapsed().as_secs_f64()),
                ..Default::default()
            };
            let text = crate::present::metrics::render_textfile(&snap, &extra);
            match output {
                None => out.write_all(text.as_bytes())?,
                // With command lines (which may hold secrets), for the
                // owner only.
                Some(path) => write_atomically(
                    &path,
                    text.as_bytes(),
                    if label_cmdline { 0o600 } else { 0o644 },
                )
                .map_err(|e| Failure::new(e.code(), format!("--output {}: {e}", path.display())))?,
            }
            Ok(exit::OK)
        }
        Command::Doctor { unit } => run_doctor(common, &unit, &paint),
        Command::Wait(args) => run_wait(common, &args, &paint),
        Command::Demo { hold } => {
            drop(out);
            let opts = crate::demo::Options {
                json: common.json,
                hold,
                paint,
            };
            crate::demo::run(&opts).map_err(|e| Failure::from_anyhow(exit::ENVIRONMENT, &e))
        }
        Command::Sim(SimCommand::Lib) => {
            let dir = crate::sim::library_dir().map_err(|e| Failure::new(exit::ENVIRONMENT, e))?;
            writeln!(out, "{}", dir.display())?;
            Ok(exit::OK)
        }
        Command::Sim(SimCommand::Exec { state, cmd }) => {
            drop(out);
            let e = crate::sim::exec(&state, &cmd);
            let code = match e {
                crate::sim::SimError::State { .. } => exit::USAGE,
                crate::sim::SimError::Exec { .. } => exit::CANNOT_EXEC,
                _ => exit::ENVIRONMENT,
            };
            Err(Failure::new(code, e))
        }
    }
}

/// `gpufree doctor --unit FILE`: exit 0 clean, 1 with problems (also when
/// the reader of stdout went away).
fn run_doctor(common: &Common, unit: &std::path::Path, paint: &Paint) -> Result<i32, Failure> {
    let text = read_unit_file(unit)
        .map_err(|why| Failure::new(exit::USAGE, format!("--unit {}: {why}", unit.display())))?;
    let problems = crate::doctor::check(&text);
    let code = if problems.is_empty() {
        exit::OK
    } else {
        exit::NOT_REACHED
    };
    let mut out = Guard::new(std::io::stdout().lock(), paint.color);
    let shown = escape(&unit.to_string_lossy()).into_owned();
    let written = (|| -> std::io::Result<()> {
        if common.json {
            return write_json(
                &mut out,
                &serde_json::json!({ "unit": unit, "problems": problems }),
            );
        }
        if problems.is_empty() && !common.quiet {
            writeln!(out, "{shown}: no problems found")?;
        }
        for p in &problems {
            let sev = if p.severity == "error" {
                paint.error("error")
            } else {
                paint.warn("warning")
            };
            writeln!(
                out,
                "{shown}:{}: {sev}: {}",
                p.line,
                fit(&p.message, crate::safe::MESSAGE_MAX)
            )?;
            if !common.quiet {
                writeln!(
                    out,
                    "    {} {}",
                    paint.dim("fix:"),
                    fit(&p.fix, crate::safe::MESSAGE_MAX)
                )?;
            }
        }
        Ok(())
    })();
    with_outcome(written.and_then(|()| out.flush()), code)
}

/// The largest unit file `doctor` reads (real ones are a few KiB).
const UNIT_FILE_MAX: u64 = 1 << 20;

/// A unit file's text: a regular file of at most [`UNIT_FILE_MAX`] bytes
/// (not /dev/zero, not a FIFO that never ends); bytes that are not UTF-8
/// become U+FFFD, so the rest is still checked.
fn read_unit_file(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // Non-blocking: opening a FIFO without a writer must not hang.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > UNIT_FILE_MAX {
        return Err(format!(
            "{} bytes: larger than any unit file ({} at most)",
            meta.len(),
            UNIT_FILE_MAX
        ));
    }
    let mut bytes = Vec::new();
    f.take(UNIT_FILE_MAX)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The one-page manual: the main page, with the commands listed in it
/// (clap_mangen's own list names a page per command, which exists only
/// where `man --dir` wrote them).
fn man_page(w: &mut dyn Write) -> std::io::Result<()> {
    use clap::CommandFactory;
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    man.render_options_section(w)?;
    writeln!(w, ".SH COMMANDS")?;
    for sub in cmd.get_subcommands() {
        let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
        writeln!(
            w,
            ".TP\n\\fBgpufree {}\\fR\n{}",
            sub.get_name(),
            roff_text(&about)
        )?;
    }
    writeln!(
        w,
        ".PP\nOne page per command: \\fBgpufree man \\-\\-dir\\fR \\fIDIR\\fR."
    )?;
    man.render_version_section(w)
}

/// Text for a roff line: backslashes and dashes escaped, no line starting
/// with a control character.
fn roff_text(s: &str) -> String {
    let t = s.replace('\\', "\\e").replace('-', "\\-");
    if t.starts_with(['.', '\'']) {
        format!("\\&{t}")
    } else {
        t
    }
}

/// One page per command into `dir`, each naming only pages written beside
/// it (the pages clap_mangen's `generate_to` writes, but each through
/// [`write_atomically`]: a symlink planted at a page's name is refused, not
/// followed).
fn man_pages(dir: &std::path::Path) -> Result<(), (i32, String)> {
    use clap::CommandFactory;
    fn pages(cmd: clap::Command, out: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            pages(sub.clone(), out)?;
        }
        let man = clap_mangen::Man::new(cmd);
        let mut page = Vec::new();
        man.render(&mut page)?;
        out.push((man.get_filename(), page));
        Ok(())
    }
    let env = |e: std::io::Error| (exit::ENVIRONMENT, e.to_string());
    std::fs::create_dir_all(dir).map_err(env)?;
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut out = Vec::new();
    pages(cmd, &mut out).map_err(env)?;
    for (name, page) in out {
        let path = dir.join(&name);
        write_atomically(&path, &page, 0o644).map_err(|e| (e.code(), format!("{name}: {e}")))?;
    }
    Ok(())
}

/// Why a file was not written.
#[derive(Debug, thiserror::Error)]
enum WriteError {
    /// Something other than a regular file is at the path: refused.
    #[error("{0}")]
    Refused(&'static str),
    /// Writing failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl WriteError {
    /// A refusal is the caller's choice of path (2); a failed write, the
    /// environment's (3).
    fn code(&self) -> i32 {
        match self {
            WriteError::Refused(_) => exit::USAGE,
            WriteError::Io(_) => exit::ENVIRONMENT,
        }
    }
}

/// Writes `bytes` to `path` so that a reader (node_exporter) never sees
/// half a file, and nothing planted is written through. Only a new file or
/// a regular file is replaced: a symlink, device node or FIFO at `path`
/// (`/dev/stdout`, `/dev/null`) is refused, never turned into a file. The
/// bytes go to an exclusively created temporary file of a random name in
/// `path`'s directory (`O_EXCL`: whatever is already at that name makes it
/// try another, never open it), of `mode`, synced, then renamed over `path`
/// (a rename opens and follows nothing it replaces, so a swap after the
/// check is harmless), and the directory synced.
fn write_atomically(path: &std::path::Path, bytes: &[u8], mode: u32) -> Result<(), WriteError> {
    use std::os::unix::fs::PermissionsExt;
    if path.file_name().is_none() {
        return Err(WriteError::Refused("not a file name"));
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(WriteError::Refused(
                "is a symlink; give the path of a regular file (a symlink would be replaced, not followed)",
            ))
        }
        Ok(m) if !m.file_type().is_file() => {
            return Err(WriteError::Refused(
                "exists and is not a regular file (a device, FIFO, socket or directory); not replaced",
            ))
        }
        _ => {}
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".gpufree-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(std::fs::File::open(dir)?.sync_all()?)
}

/// The document `kill --json` prints: the status after, the plan, the outcome.
#[derive(serde::Serialize)]
struct KillDoc<'a> {
    #[serde(flatten)]
    snapshot: &'a crate::model::Snapshot,
    plan: &'a crate::act::kill::Plan,
    kill: &'a crate::act::kill::Report,
}

/// The outcome's exit code, also when the reader of stdout went away
/// (`| head`): a closed pipe never turns "busy" or "not released" into 0.
fn with_outcome(shown: std::io::Result<()>, code: i32) -> Result<i32, Failure> {
    match shown {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(code),
    }
}

/// The exit code of a verdict: free 0, busy 1, unknown 3.
fn verdict_exit(state: VerdictState) -> i32 {
    match state {
        VerdictState::Free => exit::OK,
        VerdictState::Busy => exit::NOT_REACHED,
        VerdictState::Unknown => exit::ENVIRONMENT,
    }
}

fn run_kill(common: &Common, args: &KillArgs, paint: &Paint) -> Result<i32, Failure> {
    use crate::act::kill::{self, Selectors, UserSel};
    if common
        .proc_root
        .as_ref()
        .is_some_and(|p| p != std::path::Path::new("/proc"))
    {
        return Err(Failure::new(
            exit::USAGE,
            "--proc-root: kill signals only processes of this PID namespace's /proc",
        ));
    }
    let matcher = match &args.matcher {
        Some(m) => Some(regex_flag("--match", m)?),
        None => None,
    };
    let c = collector(common, false, None)?;
    let snap = c.snapshot().map_err(|e| snapshot_failure(common, e))?;
    let indexes =
        snapshot::resolve(&snap.gpus, &common.gpu).map_err(|e| Failure::new(exit::USAGE, e))?;
    if let Some(unit) = &args.unit {
        kill::check_unit(&snap, unit).map_err(|e| Failure::new(exit::USAGE, e))?;
    }
    let user = match &args.user {
        None => None,
        Some(u) => Some(match u.parse() {
            Ok(uid) => UserSel::Uid(uid),
            Err(_) if uzers::get_user_by_name(u).is_none() => {
                return Err(Failure::new(
                    exit::USAGE,
                    format!("--user {u}: no such user (give a name of this host or a UID)"),
                ))
            }
            Err(_) => UserSel::Name(u.clone()),
        }),
    };
    let nothing_else = args.pid.is_empty()
        && args.matcher.is_none()
        && args.user.is_none()
        && args.unit.is_none()
        && args.tree.is_none();
    let sel = Selectors {
        gpus: (!common.gpu.is_empty() || nothing_else).then(|| indexes.clone()),
        pids: args.pid.clone(),
        matcher,
        user,
        unit: args.unit.clone(),
        tree: args.tree,
    };
    let safety = kill::Safety {
        force_protected: args.force_protected,
        include_shared: args.include_shared,
        ..kill::Safety::current()
    };
    let plan = kill::plan(&snap, &sel, &safety);
    let mut out = Guard::new(std::io::stdout().lock(), paint.color);
    // Not locked: the progress bar draws on stderr from its own thread.
    let mut err = Guard::new(std::io::stderr(), paint.color);
    // The plan goes to stdout, or to stderr when stdout carries JSON.
    let mut plan_shown = Ok(());
    {
        let w: &mut dyn Write = if common.json { &mut err } else { &mut out };
        if !common.quiet || args.dry_run {
            plan_shown = crate::present::kill::write_plan(
                w,
                &snap,
                &plan,
                &args.signal.0,
                args.grace.min(args.timeout).as_secs_f64(),
                paint,
            )
            .and_then(|()| w.flush());
        }
    }
    // Nothing will be signalled: the plan is the answer.
    let refused = plan.targets.is_empty() && plan.skipped.iter().any(|k| k.refused);
    if args.dry_run || refused {
        let shown = plan_shown.and_then(|()| {
            if !common.json {
                return Ok(());
            }
            let report = kill::Report {
                skipped: plan.skipped.clone(),
                ..kill::Report::default()
            };
            write_json(
                &mut out,
                &KillDoc {
                    snapshot: &snap,
                    plan: &plan,
                    kill: &report,
                },
            )
            .and_then(|()| out.flush())
        });
        let code = if args.dry_run {
            exit::OK
        } else {
            exit::REFUSED
        };
        return with_outcome(shown, code);
    }
    // Never signal what the operator could not be shown.
    plan_shown.map_err(|e| {
        Failure::new(
            exit::ENVIRONMENT,
            format!("kill: the plan could not be written ({e}); nothing signalled"),
        )
    })?;
    if !plan.targets.is_empty() && !args.yes {
        use std::io::IsTerminal;
        if !std::io::stdin().is_terminal() {
            return Err(Failure::new(
                exit::REFUSED,
                "refusing to signal without --yes: no terminal to confirm on",
            ));
        }
        write!(err, "Signal these {} processes? [y/N] ", plan.targets.len())?;
        err.flush()?;
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            return Err(Failure::new(
                exit::REFUSED,
                "not confirmed; nothing signalled",
            ));
        }
    }
    let opts = kill::Options {
        signal: args.signal.1,
        grace: args.grace,
        timeout: args.timeout,
        no_wait: args.no_wait,
        progress: !common.quiet
            && !common.json
            && std::io::IsTerminal::is_terminal(&std::io::stderr()),
        holders_only: args.holders_only,
        settle: args.settle,
    };
    let (report, end) = kill::execute(&c, &snap, plan.clone(), &sel, &safety, &opts);
    let shown = if common.json {
        // The snapshot the verdict was made from (with --no-wait, the plan's).
        let after = end.map_or(snap, |s| snapshot::select(s, &indexes));
        write_json(
            &mut out,
            &KillDoc {
                snapshot: &after,
                plan: &plan,
                kill: &report,
            },
        )
    } else if !common.quiet {
        crate::present::kill::write_report(&mut out, &report, !args.no_wait, paint)
    } else {
        Ok(())
    };
    let code = if !report.survivors.is_empty() {
        exit::SURVIVORS
    } else if args.no_wait {
        exit::OK
    } else {
        match report.verdict {
            VerdictState::Free => exit::OK,
            VerdictState::Busy => exit::SURVIVORS,
            VerdictState::Unknown => exit::ENVIRONMENT,
        }
    };
    if code == exit::ENVIRONMENT {
        return Err(Failure::new(
            code,
            format!(
                "kill: the release is unknown: {}",
                report.reasons.join("; ")
            ),
        ));
    }
    with_outcome(shown.and_then(|()| out.flush()), code)
}

/// The document `wait --json` prints.
#[derive(serde::Serialize)]
struct WaitDoc<'a> {
    #[serde(flatten)]
    snapshot: &'a crate::model::Snapshot,
    wait: WaitResult,
}

#[derive(serde::Serialize)]
struct WaitResult {
    free: bool,
    verdict: VerdictState,
    seconds: f64,
    snapshots: u32,
}

fn run_wait(common: &Common, args: &WaitArgs, paint: &Paint) -> Result<i32, Failure> {
    use crate::act::wait::LAST_LOOK;
    let deadline = std::time::Instant::now() + args.timeout;
    let c = collector(common, false, Some(deadline + LAST_LOOK))?;
    let first = c
        .snapshot_until(Some(deadline + LAST_LOOK))
        .map_err(|e| snapshot_failure(common, e))?;
    let gpus =
        snapshot::resolve(&first.gpus, &common.gpu).map_err(|e| Failure::new(exit::USAGE, e))?;
    let opts = crate::act::wait::Options {
        gpus: gpus.clone(),
        policy: crate::diagnose::verdict::Policy {
            max_used: args.max_used,
            holders_only: args.holders_only,
        },
        deadline,
        interval: args.interval,
    };
    let outcome =
        crate::act::wait::wait(&c, &opts, first).map_err(|e| snapshot_failure(common, e))?;
    let state = outcome.verdict.state;
    let mut out = Guard::new(std::io::stdout().lock(), paint.color);
    let which = format!(
        "GPU{} {}",
        if gpus.len() == 1 { "" } else { "s" },
        crate::diagnose::gpu_list(&gpus)
    );
    let shown = if common.json {
        let mut last = outcome.last.clone();
        last.verdict = outcome.verdict.clone();
        let doc = WaitDoc {
            snapshot: &last,
            wait: WaitResult {
                free: state == VerdictState::Free,
                verdict: state,
                seconds: outcome.seconds,
                snapshots: outcome.snapshots,
            },
        };
        write_json(&mut out, &doc)
    } else if !common.quiet {
        (|| -> std::io::Result<()> {
            match state {
                VerdictState::Free => {
                    writeln!(out, "{which} free after {:.2} s", outcome.seconds)?;
                    for c in &outcome.verdict.caveats {
                        writeln!(
                            out,
                            "  {} {}",
                            paint.warn("caveat:"),
                            fit(c, crate::safe::MESSAGE_MAX)
                        )?;
                    }
                }
                VerdictState::Busy => writeln!(
                    out,
                    "{} {which} not free after {:.1} s: {}",
                    paint.error("timeout:"),
                    outcome.seconds,
                    fit(
                        &outcome.verdict.reasons.join("; "),
                        crate::safe::MESSAGE_MAX
                    )
                )?,
                VerdictState::Unknown => {}
            }
            Ok(())
        })()
    } else {
        Ok(())
    };
    if state == VerdictState::Unknown {
        return Err(Failure::new(
            exit::ENVIRONMENT,
            format!(
                "wait: cannot tell whether {which} {} free: {}",
                if gpus.len() == 1 { "is" } else { "are" },
                outcome.verdict.reasons.join("; ")
            ),
        ));
    }
    with_outcome(shown.and_then(|()| out.flush()), verdict_exit(state))
}

/// The binary's main: parse, run, report. A closed stdout (`| head`) is success.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if e.use_stderr() => {
            // The error quotes what was typed (or pasted): shown, not obeyed.
            let mut err = Guard::new(std::io::stderr().lock(), false);
            let _ = err.write_all(e.render().to_string().as_bytes());
            let _ = err.flush();
            return exit::USAGE;
        }
        Err(e) => {
            let _ = e.print();
            return exit::OK;
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(f) if f.broken_pipe => exit::OK,
        Err(f) => {
            // One line, whatever names it carries.
            eprintln!("gpufree: {}", fit(&f.message, crate::safe::MESSAGE_MAX));
            f.code
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn bad_gpu_selector_is_a_usage_error() {
        let e = Cli::try_parse_from(["gpufree", "status", "--gpu", "lots"]).unwrap_err();
        assert!(e.to_string().contains("lots"));
        assert!(e.use_stderr());
    }
}
