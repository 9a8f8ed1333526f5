//! How a command ends: an [`Outcome`] when it ran to its end (its output
//! says why), an [`Error`] when it could not. [`exit_code`] maps both to
//! the exit codes of SPEC.md, and [`finish`] prints the one-line message:
//! nowhere else is an exit code chosen.

use super::files::WriteError;
use crate::model::{Level, PrepareFailure, Reason};
use crate::present::check::Format;
use crate::present::words::verdict::reasons_line;
use crate::record::RecordError;
use crate::serve::ServeError;
use crate::sim::SimError;
use crate::snapshot::SnapshotError;
use std::io::{self, Write};
use std::path::PathBuf;

/// How a command that ran to its end concluded; what it printed says why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done, free, nothing wrong.
    Done,
    /// The condition was not reached: busy, not free by the timeout,
    /// problems found.
    NotReached,
    /// The verdict is unknown: the output names what could not be seen.
    Unknown,
    /// kill: some targets survived or the memory was not released.
    Survivors,
    /// Refused for safety; the plan shown says why.
    Refused,
    /// `check`: the level of its verdict, for the consumer its format is
    /// for; the exit code is that consumer's own ([`exit_code`]).
    Check(Format, Level),
}

/// Why a command could not run to its end; each names the flag, file or
/// call at fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command line did not parse, or asked for help or the version
    /// (clap renders both).
    #[error("{0}")]
    Args(#[from] clap::Error),
    /// A flag's regular expression does not compile.
    #[error("{flag} '{text}': invalid regular expression: {why}")]
    Regex {
        /// The flag.
        flag: &'static str,
        /// What was given.
        text: String,
        /// regex's reason, its last line.
        why: String,
    },
    /// `--gpu` names no GPU here, or a UUID prefix names several.
    #[error("{}", crate::present::words::selector::gpu_miss(.0))]
    Selector(crate::model::GpuMiss),
    /// `kill --unit` names more than one owner.
    #[error("{}", crate::present::words::selector::unit_miss(.0))]
    Unit(crate::model::UnitMiss),
    /// An environment variable's value is not one the flag takes.
    #[error("{0}: {1}")]
    Variable(&'static str, crate::model::BadValue),
    /// A flag (or command) that would let a less privileged caller steer
    /// gpufree, refused in secure mode.
    #[error("{what}: refused: {}; it takes no paths, libraries or servers from its caller (run it as root)", .why.why())]
    Steering {
        /// The flag or command.
        what: &'static str,
        /// Why gpufree runs in secure mode.
        why: crate::proc::me::Secure,
    },
    /// `--nvml-lib` (or `GPUFREE_NVML_LIB`) names code root may not run.
    #[error("--nvml-lib {}: refused: {why}", path.display())]
    Library {
        /// The library.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The view answered that the command could not run: a usage error
    /// (a bad `--gpu`), or it cannot answer now (no fresh snapshot).
    #[error("{1}")]
    View(crate::model::ViewErrorKind, String),
    /// `kill --user` names no user of this host.
    #[error("--user {0}: no such user (give a name of this host or a UID)")]
    NoSuchUser(String),
    /// `kill` where the proc root may not be signalled through: another
    /// root than /proc (a usage error), or not this PID namespace's proc
    /// file system (refused).
    #[error("kill: {}", crate::present::words::target::not_ours(*.0))]
    KillRefused(crate::model::NotOurProc),
    /// A `--dev-dir` given by hand holds no GPU node while NVML sees GPUs.
    #[error("{}", crate::present::words::front::no_gpu_node(.0))]
    NoGpuNode(PathBuf),
    /// A `--dev-dir` given by hand could not be listed.
    #[error("{0}")]
    DevDir(SnapshotError),
    /// `doctor --unit` could not read the file.
    #[error("--unit {}: {why}", path.display())]
    UnitFile {
        /// The file.
        path: PathBuf,
        /// Why.
        why: crate::model::UnitFileWhy,
    },
    /// A file was not written (`metrics --output`, `man --dir`).
    #[error("{target}: {source}")]
    Write {
        /// The flag and the file.
        target: String,
        /// Why: refused (a path the user chose) or failed.
        source: WriteError,
    },
    /// A file `bundle` was told to read (`--recording`, `--audit-log`)
    /// cannot be read.
    #[error("{flag} {}: {}", crate::safe::escape(&path.to_string_lossy()), crate::present::words::bundle::left_why(why))]
    BundleInput {
        /// The flag.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        why: crate::model::LeftWhy,
    },
    /// The snapshot could not be taken (no GPU, /proc unreadable).
    #[error("{}", snapshot_line(.0))]
    Snapshot(SnapshotError),
    /// `watch` without a terminal.
    #[error("watch: needs a terminal on stdin and stdout; for one look use `gpufree status` (or --json)")]
    NoTerminal,
    /// The live view failed.
    #[error("{}", chain(.0))]
    Watch(#[from] crate::watch::Error),
    /// `serve --label-cmdline` without `--expose-cmdlines-over-http`: it
    /// would serve every holder's command line to whoever connects.
    #[error("--label-cmdline: every holder's command line (tokens and passwords included) would be served to anyone who can connect to {0}; add --expose-cmdlines-over-http to do it anyway")]
    CmdlinesExposed(String),
    /// `fleet --prometheus` is not an http(s) URL of a server.
    #[error("--prometheus {0}: not an http:// or https:// URL of a Prometheus server")]
    FleetUrl(String),
    /// `fleet --prometheus` carries a user or password: every local user
    /// reads a command line, and every error would print it.
    #[error("--prometheus: a URL with a user or password is refused (every local user can read a command line, and errors print the URL); reach an authenticated Prometheus through a local proxy")]
    FleetCredentials,
    /// `fleet --node-label` is not a label name.
    #[error("--node-label {0:?}: not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")]
    FleetLabel(String),
    /// `fleet`: Prometheus could not parse a query made with
    /// `--selector` or `--job`.
    #[error("--selector: {0}")]
    FleetSelector(crate::fleet::FleetError),
    /// `fleet`: no view (Prometheus unreachable, a query failed, no
    /// node).
    #[error(transparent)]
    Fleet(crate::fleet::FleetError),
    /// The metrics server failed.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// The demo failed.
    #[error(transparent)]
    Demo(#[from] crate::demo::Error),
    /// A `sim` command failed.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// `kill`: the plan could not be shown, so nothing was signalled.
    #[error("kill: the plan could not be written ({0}); nothing signalled")]
    PlanNotShown(io::Error),
    /// `kill` without `--yes` and without a terminal to ask on.
    #[error("refusing to signal without --yes: no terminal to confirm on")]
    NoConfirmation,
    /// `kill`: the operator did not say yes.
    #[error("not confirmed; nothing signalled")]
    NotConfirmed,
    /// `kill`: whether the memory came back cannot be told.
    #[error("kill: the release is unknown: {}", reasons_line(.0))]
    ReleaseUnknown(Vec<Reason>),
    /// `wait`: whether the GPUs are free cannot be told.
    #[error("wait: cannot tell whether {which} {} free: {}", if *.several { "are" } else { "is" }, reasons_line(.reasons))]
    WaitUnknown {
        /// "GPU 0", "GPUs 0-3".
        which: String,
        /// More than one GPU.
        several: bool,
        /// What could not be seen.
        reasons: Vec<Reason>,
    },
    /// `prepare` kept nothing: not root, or the walk neither loaded nor kept.
    #[error("prepare: {0}")]
    Prepare(PrepareFailure),
    /// `--from`: the file, or what was asked with it, cannot be used.
    #[error("{}", crate::present::words::from::bad(.0))]
    From(crate::model::FromBad),
    /// `--from REC --at TIME`: the recording (at its path) cannot be read
    /// at that moment.
    #[error("{}", crate::present::words::from::replay_bad(.0, .1))]
    Replay(String, crate::model::RecordBad),
    /// `watch --replay FILE`: the file, or a flag given with it, cannot
    /// be used.
    #[error("{}", crate::present::words::watch::replay_bad(.0))]
    WatchReplay(crate::model::ReplayBad),
    /// `record` could not start or go on.
    #[error(transparent)]
    Record(#[from] crate::record::RecordError),
    /// Reading or writing the terminal or stdout failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Why the snapshot could not be taken, with the next step where a
/// newcomer's first run ends here (no GPU: where gpufree looked and the
/// flags that point it elsewhere).
fn snapshot_line(e: &SnapshotError) -> String {
    match e {
        SnapshotError::NoGpu { nvml, dev_dir } => {
            crate::present::words::front::no_gpu(nvml, dev_dir)
        }
        e => e.to_string(),
    }
}

/// An error and its causes in one line, `: ` between them.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    std::iter::successors(Some(e), |e| e.source())
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(": ")
}

impl Error {
    /// The reader of stdout went away (`| head`): not a failure.
    fn is_broken_pipe(&self) -> bool {
        let source: &(dyn std::error::Error + 'static) = match self {
            Error::Io(e) => e,
            Error::Watch(e) => e,
            // Transparent: its source() is the io::Error's own source, so
            // the io::Error itself is taken out here.
            Error::Demo(crate::demo::Error::Io(e)) => e,
            Error::Demo(e) => e,
            _ => return false,
        };
        std::iter::successors(Some(source), |e| e.source()).any(|e| {
            e.downcast_ref::<io::Error>()
                .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
        })
    }
}

/// The exit code of a command that ended without an error (SPEC.md).
fn outcome_code(outcome: &Outcome) -> u8 {
    match outcome {
        Outcome::Done => 0,
        Outcome::NotReached => 1,
        Outcome::Unknown => 3,
        Outcome::Survivors => 4,
        Outcome::Refused => 5,
        Outcome::Check(format, level) => check_code(*format, *level),
    }
}

/// The exit code of a command's end (SPEC.md): 0 done, 1 not reached,
/// 2 usage, 3 environment or unknown, 4 survivors, 5 refused; 127 when
/// `sim exec` could not run its command (as `env` and shells do).
pub fn exit_code(end: &Result<Outcome, Error>) -> u8 {
    use Error as E;
    let e = match end {
        Ok(outcome) => return outcome_code(outcome),
        Err(e) if e.is_broken_pipe() => return 0,
        Err(e) => e,
    };
    match e {
        E::Args(e) if !e.use_stderr() => 0,
        E::Args(_)
        | E::Regex { .. }
        | E::Selector(_)
        | E::Unit(_)
        | E::NoSuchUser(_)
        | E::Variable(..)
        | E::Library { .. }
        | E::Steering { .. }
        | E::View(crate::model::ViewErrorKind::Usage, _)
        | E::KillRefused(crate::model::NotOurProc::OtherRoot)
        | E::NoGpuNode(_)
        | E::DevDir(_)
        | E::UnitFile { .. }
        | E::BundleInput { .. }
        | E::From(_)
        | E::Replay(..)
        | E::WatchReplay(_)
        | E::Record(RecordError::Refused { .. } | RecordError::Gpu(_))
        | E::CmdlinesExposed(_)
        | E::FleetSelector(_)
        | E::FleetUrl(_)
        | E::FleetCredentials
        | E::FleetLabel(_)
        | E::Write {
            source: WriteError::Refused(_),
            ..
        }
        | E::Serve(ServeError::Address { .. } | ServeError::Gpu(_))
        | E::Sim(SimError::State { .. }) => 2,
        E::Sim(SimError::Exec { .. }) => 127,
        E::NoConfirmation | E::NotConfirmed | E::KillRefused(_) => 5,
        E::Prepare(PrepareFailure::NotRoot) => 5,
        E::Write { .. }
        | E::Snapshot(_)
        | E::NoTerminal
        | E::Watch(_)
        | E::Serve(_)
        | E::Fleet(_)
        | E::Demo(_)
        | E::Sim(_)
        | E::View(..)
        | E::PlanNotShown(_)
        | E::ReleaseUnknown(_)
        | E::WaitUnknown { .. }
        | E::Prepare(_)
        | E::Record(_)
        | E::Io(_) => 3,
    }
}

/// The exit code `format`'s consumer reads for `level`: node-problem-
/// detector 0 ok, 1 problem, 2 unknown; the Nagios plugin API 0/1/2/3;
/// Slurm's health check 1 only for what must drain the node; a person's
/// text and JSON as every other command (0, 1, 3).
fn check_code(format: Format, level: Level) -> u8 {
    match (format, level) {
        (_, Level::Ok) => 0,
        (Format::Nagios, Level::Warning) => 1,
        (Format::Nagios, Level::Critical) => 2,
        (Format::Nagios, Level::Unknown) => 3,
        (Format::Npd, Level::Unknown) => 2,
        // Slurm drains on what breaks the next job; a warning neither
        // drains nor resumes.
        (Format::Slurm, Level::Warning) => 2,
        (Format::Slurm | Format::Text | Format::Json, Level::Unknown) => 3,
        (_, Level::Warning | Level::Critical) => 1,
    }
}

/// Ends a command: says what went wrong in one line on stderr (clap's own
/// text for the command line) and returns the exit code.
pub fn finish(end: Result<Outcome, Error>) -> std::process::ExitCode {
    let code = exit_code(&end);
    match end {
        Err(Error::Args(e)) if e.use_stderr() => {
            // The error quotes what was typed (or pasted): shown, not obeyed.
            // Plain: no printer was built from a command line that did
            // not parse.
            let mut err = crate::present::Printer::default().guard(io::stderr().lock());
            let _ = err.write_all(e.render().to_string().as_bytes());
            let _ = err.flush();
        }
        Err(Error::Args(e)) => {
            let _ = e.print();
        }
        Err(e) if code != 0 => {
            let _ = crate::present::notice::write_error(&mut io::stderr(), &e.to_string());
        }
        _ => {}
    }
    std::process::ExitCode::from(code)
}

#[cfg(test)]
mod tests;
