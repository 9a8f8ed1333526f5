//! Command-line interface: clap definitions (plain values, no system
//! access), then one fallible step that builds the real objects and runs the
//! command. Errors map to the exit codes of SPEC.md here and nowhere else.

mod act;
mod args;
mod files;

use act::{run_kill, run_wait};
pub use args::{Cli, Command, Common, KillArgs, SimCommand, WaitArgs};
use files::{man_page, man_pages, run_doctor, write_atomically};

use crate::model::VerdictState;
use crate::pipeline::{self, Look};
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
    Ok(pipeline::select(snap, &indexes))
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
