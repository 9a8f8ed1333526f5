//! Command-line interface: clap definitions (plain values, no system
//! access), then one function per command that builds the real objects and
//! runs it to an [`Outcome`] or a typed [`Error`]. Both map to the exit
//! codes of SPEC.md in [`exit_code`] and nowhere else.
//!
//! - `args`: the clap definitions; `config`: the one configuration step
//!   (privilege context, environment, flags → [`Settings`]); `show`:
//!   status, why, metrics; `act`: kill, wait; `live`: watch, serve, demo,
//!   sim, record; `fleet`: the fleet view from Prometheus; `files`: doctor, man,
//!   completions and the atomic writes; `from`: a snapshot document read
//!   back (`--from`); `bundle`: the archive for a bug report; `error`: the outcomes, the errors and their exit
//!   codes.

mod act;
mod args;
mod bundle;
mod check;
mod config;
mod error;
mod files;
mod fleet;
mod from;
mod live;
mod prepare;
mod show;
mod spinner;
mod view;

pub use args::{
    CheckArgs, Cli, Command, Common, FleetArgs, KillArgs, RecordArgs, ServeArgs, SimCommand,
    WaitArgs,
};
pub use config::{settings, Settings};
pub use error::{exit_code, finish, Error, Outcome};
pub use files::WriteError;

use crate::model::VerdictState;
use crate::pipeline;
use crate::present::notice::write_scanned;
use crate::present::{Printer, PrinterBuilder};
use crate::snapshot::{self, Config, SnapshotError};
use clap::Parser;

/// Compiles a regular expression given to `flag`; a bad one is a usage
/// error in one line (regex's own message spans several).
fn regex_flag(flag: &'static str, text: &str) -> Result<regex::Regex, Error> {
    regex::Regex::new(text).map_err(|e| {
        let why = e
            .to_string()
            .lines()
            .last()
            .unwrap_or("")
            .trim()
            .to_string();
        Error::Regex {
            flag,
            text: text.to_string(),
            why,
        }
    })
}

/// A snapshot's failure; a device directory given by hand that cannot be
/// listed is the user's (a typo), any other the environment's.
fn snapshot_error(s: &Settings, e: SnapshotError) -> Error {
    match e {
        SnapshotError::DevDir(_) if s.dev_dir_given => Error::DevDir(e),
        e => Error::Snapshot(e),
    }
}

/// A collector for `cfg` (the settings' [`Config`], with what the
/// command adds), refusing a `--dev-dir` given by hand that holds no GPU
/// node.
fn collector(
    s: &Settings,
    cfg: Config,
    deadline: Option<std::time::Instant>,
) -> Result<snapshot::Collector, Error> {
    let dir = cfg.dev_dir.clone();
    let c = snapshot::Collector::new(cfg, deadline).map_err(|e| snapshot_error(s, e))?;
    // A device directory given by hand that holds no GPU node, while NVML
    // sees GPUs, is a typo, not an idle machine: every holder of a node
    // would go unseen. (With no NVML either, the error above already said
    // there is no GPU.)
    if s.dev_dir_given && c.nodes().is_empty() {
        return Err(Error::NoGpuNode(dir));
    }
    Ok(c)
}

/// One snapshot, narrowed to the `--gpu` selection.
fn take_selected(
    s: &Settings,
    opts: &crate::diagnose::Options,
) -> Result<crate::model::Snapshot, Error> {
    take_selected_by(s, opts).map(|(_, snap)| snap)
}

/// One snapshot, narrowed to the `--gpu` selection, and the collector
/// that took it (for a second look through its pins).
fn take_selected_by(
    s: &Settings,
    opts: &crate::diagnose::Options,
) -> Result<(snapshot::Collector, crate::model::Snapshot), Error> {
    let common = &s.common;
    let started = std::time::Instant::now();
    let cfg = Config {
        // Also the titles of every other process, for `why --pattern`.
        others: opts.pattern.is_some(),
        ..s.collect.clone()
    };
    let c = collector(s, cfg, None)?;
    let taken = crate::units::unix_now_ms();
    let mut snap = pipeline::judged_with(&c, None, opts).map_err(|e| snapshot_error(s, e))?;
    // When and where, for whoever reads its document back (`--from`).
    snap.taken_unix_ms = Some(taken);
    snap.host = Some(crate::proc::me::hostname());
    if common.verbose > 0 {
        let millis = started.elapsed().as_secs_f64() * 1000.0;
        let _ = write_scanned(&mut std::io::stderr(), &snap.visibility, millis);
    }
    let indexes = snapshot::resolve(&snap.gpus, &common.gpu).map_err(Error::Selector)?;
    let snap = pipeline::select_with(snap, &indexes, opts);
    if let Some(copy) = crate::test_hooks::snapshot_copy() {
        let doc = serde_json::to_vec(&crate::present::json::SnapshotDoc::new(&snap));
        let _ = std::fs::write(copy, doc.unwrap_or_default());
    }
    Ok((c, snap))
}

/// Runs a parsed command line to its end: first its settings (the
/// privilege context, the environment, the flags), then the command.
pub fn run(cli: Cli) -> Result<Outcome, Error> {
    let s = &settings(&cli)?;
    let printer = printer(&s.common);
    match cli.command.unwrap_or(Command::Status) {
        Command::Status => show::status(s, &printer),
        Command::Why { format, .. } => show::why(s, format, &printer),
        Command::Kill(args) => act::run_kill(s, &args, &printer),
        Command::Wait(args) => act::run_wait(s, &args, &printer),
        Command::Check(args) => check::run_check(s, &args, &printer),
        Command::Fleet(args) => fleet::run_fleet(s, &args, &printer),
        Command::Watch {
            replay: Some(path), ..
        } => from::replay(s, &path, &printer),
        Command::Watch {
            interval,
            scan_every,
            ..
        } => live::watch(s, (interval, scan_every), &printer),
        Command::Serve(args) => live::serve(s, &args),
        Command::Record(args) => live::record(s, &args),
        Command::Metrics {
            output,
            label_cmdline,
        } => show::metrics(s, output.as_deref(), label_cmdline, &printer),
        Command::Prepare => prepare::run_prepare(s, &printer),
        Command::Bundle(args) => bundle::run_bundle(s, &args, &printer),
        Command::Doctor { unit } => files::run_doctor(&unit, &printer),
        Command::Completions { shell } => files::completions(shell),
        Command::Man { dir } => files::man(dir.as_deref()),
        Command::Demo { hold } => live::demo(s, hold, &printer),
        Command::Sim(cmd) => live::sim(cmd, &printer),
    }
}

/// The one [`Printer`] of a command: colour for a terminal that wants it
/// (not with `--no-color`, not when `NO_COLOR` is set and non-empty, not
/// when stdout is not a terminal), `--quiet`, `--json`. Every writer the
/// command calls, and the guard on its output, take it.
fn printer(common: &Common) -> Printer {
    use std::io::IsTerminal;
    let env_off = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    PrinterBuilder::new()
        .color(!common.no_color && !env_off && std::io::stdout().is_terminal())
        .quiet(common.quiet)
        .json(common.json)
        .width((!common.wide).then(columns))
        .build()
}

/// The columns a text line may take: the terminal's on stdout, else
/// `COLUMNS` (a positive integer), else 100.
fn columns() -> usize {
    let tty = rustix::termios::tcgetwinsize(std::io::stdout())
        .ok()
        .map(|w| usize::from(w.ws_col))
        .filter(|&c| c > 0);
    let env = || {
        std::env::var("COLUMNS")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&c| c > 0)
    };
    tty.or_else(env).unwrap_or(100)
}

/// Parses `args` (the program's name first) and runs the command; the
/// exit code and the one-line message come from [`finish`].
pub fn run_from<I, T>(args: I) -> std::process::ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    finish(Cli::try_parse_from(args).map_err(Error::from).and_then(run))
}

/// The binary's main: parse, run, report. A closed stdout (`| head`) is
/// not a failure of its own: the outcome stays what it was.
pub fn main() -> std::process::ExitCode {
    run_from(std::env::args_os())
}

/// The outcome, also when the reader of stdout went away (`| head`): a
/// closed pipe never turns "busy" or "not released" into success.
fn shown(written: std::io::Result<()>, outcome: Outcome) -> Result<Outcome, Error> {
    match written {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(outcome),
    }
}

/// The outcome of a verdict: free done, busy not reached, unknown unknown.
fn verdict_outcome(state: VerdictState) -> Outcome {
    match state {
        VerdictState::Free => Outcome::Done,
        VerdictState::Busy => Outcome::NotReached,
        VerdictState::Unknown => Outcome::Unknown,
    }
}
