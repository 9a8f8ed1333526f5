//! Command-line interface: clap definitions (plain values, no system
//! access), then one fallible step that builds the real objects and runs the
//! command. Errors map to the exit codes of SPEC.md here and nowhere else.

use crate::present::{table, write_json, Paint};
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
    /// Print less: no findings or footer.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Print more to stderr (timings).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
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
}

impl Failure {
    fn new(code: i32, message: impl ToString) -> Failure {
        Failure {
            code,
            message: message.to_string(),
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        Failure::new(exit::ENVIRONMENT, e)
    }
}

fn config(common: &Common) -> Config {
    let d = Config::default();
    Config {
        proc_root: common.proc_root.clone().unwrap_or(d.proc_root),
        dev_dir: common.dev_dir.clone().unwrap_or(d.dev_dir),
        nvml_lib: common.nvml_lib.clone(),
        others: false,
    }
}

fn take_selected(common: &Common, others: bool) -> Result<crate::model::Snapshot, Failure> {
    let cfg = Config {
        others,
        ..config(common)
    };
    let started = std::time::Instant::now();
    let snap = snapshot::take(&cfg).map_err(|e| match e {
        SnapshotError::DevDir(_) if common.dev_dir.is_some() => Failure::new(exit::USAGE, e),
        e => Failure::new(exit::ENVIRONMENT, e),
    })?;
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
    let mut out = std::io::stdout().lock();
    match cli.command.unwrap_or(Command::Status) {
        Command::Status => {
            let mut snap = take_selected(common, false)?;
            if common.json {
                write_json(&mut out, &snap)?;
            } else {
                if common.quiet {
                    snap.findings.clear();
                }
                table::write_status(&mut out, &snap, &paint)?;
            }
            Ok(exit::OK)
        }
        Command::Why { pattern } => {
            let pattern = match pattern {
                Some(p) => {
                    let re = regex::Regex::new(&p).map_err(|e| {
                        let why = e
                            .to_string()
                            .lines()
                            .last()
                            .unwrap_or("")
                            .trim()
                            .to_string();
                        Failure::new(
                            exit::USAGE,
                            format!("--pattern '{p}': invalid regular expression: {why}"),
                        )
                    })?;
                    Some((p, re))
                }
                None => None,
            };
            let mut snap = take_selected(common, pattern.is_some())?;
            snap.findings =
                crate::diagnose::diagnose_with(&snap, &crate::diagnose::Options { pattern });
            if common.json {
                write_json(&mut out, &snap)?;
            } else {
                crate::present::why::write_why(&mut out, &snap, &paint)?;
            }
            Ok(if crate::diagnose::is_free(&snap.findings) {
                exit::OK
            } else {
                exit::NOT_REACHED
            })
        }
        Command::Demo { hold } => {
            drop(out);
            let opts = crate::demo::Options {
                json: common.json,
                hold,
                paint,
            };
            crate::demo::run(&opts).map_err(|e| Failure::new(exit::ENVIRONMENT, format!("{e:#}")))
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

/// The binary's main: parse, run, report. A closed stdout (`| head`) is success.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            };
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(f) if f.message.contains("Broken pipe") => exit::OK,
        Err(f) => {
            eprintln!("gpufree: {}", f.message);
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
