//! The audit record of one kill (SPEC.md, "Audit log"): who ran it, what
//! it targeted and why, the signals it sent and what came of them. Plain
//! values: `act::audit` builds one from the plan's report and writes it
//! to the journal, syslog and `--audit-log`.

use super::{Owner, Reason, VerdictState};
use serde::{Deserialize, Serialize};

/// One kill, as the audit log keeps it (the JSON line of `--audit-log`,
/// and `GPUFREE_RECORD` in the journal).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct AuditRecord {
    /// The record's format (1).
    pub version: u32,
    /// When the kill ended, UTC, RFC 3339 (`2025-01-31T12:00:00.123Z`).
    pub time: String,
    /// When it began (its checks and first signals), UTC, RFC 3339: a
    /// timeline places the release after it, not after `time`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<String>,
    /// The host's name (uname's nodename).
    pub host: String,
    /// What killed: `kill`, or `watch` (its k key).
    pub command: String,
    /// Who ran it.
    pub invoker: Invoker,
    /// The first signal of each target (`TERM` unless `--signal`).
    pub signal: String,
    /// Every process the kill meant to signal (planned, or found by a
    /// rescan), in the order it handled them.
    pub targets: Vec<AuditTarget>,
    /// What came of it.
    pub outcome: KillOutcome,
}

/// Who ran a kill. Everything but the UIDs and `pid` comes from the
/// process's environment or terminal, which its user controls: it names
/// an origin, it proves none.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Invoker {
    /// gpufree's PID.
    pub pid: u32,
    /// Real UID.
    pub uid: u32,
    /// Effective UID.
    pub euid: u32,
    /// The real UID's user name, or the UID as text.
    pub user: String,
    /// The login UID (`/proc/self/loginuid`): the user who logged in, kept
    /// across `sudo` and `su`; None when unset (a process not started from
    /// a login, or no audit support).
    pub login_uid: Option<u32>,
    /// The terminal of stdin (or of stderr), e.g. `/dev/pts/3`.
    pub tty: Option<String>,
    /// The SSH client, `ADDRESS PORT`, from `SSH_CONNECTION` or
    /// `SSH_CLIENT`.
    pub ssh: Option<String>,
    /// `SUDO_USER`, when run through sudo.
    pub sudo_user: Option<String>,
    /// gpufree's own command line.
    pub argv: Vec<String>,
}

/// A process a kill targeted, as the snapshot of its round saw it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct AuditTarget {
    /// PID.
    pub pid: u32,
    /// Start time in clock ticks since boot: with the PID, the identity.
    pub start_time_ticks: u64,
    /// comm (set by the process: hostile).
    pub comm: String,
    /// argv (set by the process: hostile).
    pub cmdline: Vec<String>,
    /// The executable, when readable.
    pub exe: Option<String>,
    /// Real UID; None when the snapshot no longer had the process.
    pub uid: Option<u32>,
    /// Its user name.
    pub user: String,
    /// Who started it (unit, container, pod, job, session).
    pub owner: Owner,
    /// Why it was a target (the plan's reason, or why a rescan added it).
    pub reason: String,
    /// The round of signals it was in (from 1).
    pub round: u32,
    /// The signals sent to end it, in order (`TERM`, then `KILL` for one
    /// that outlived the grace period); empty when none was sent. The
    /// SIGSTOP and SIGCONT that hold a target still while it is checked
    /// are not listed.
    pub signals: Vec<String>,
    /// What became of it.
    pub outcome: TargetOutcome,
    /// Why, for an outcome other than gone or survived.
    pub detail: Option<String>,
}

/// What came of a kill's release (the record's `outcome.result`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum KillResult {
    /// The memory is proven back.
    Released,
    /// The memory is not back.
    NotReleased,
    /// The release could not be proven either way.
    Unknown,
    /// `--no-wait`: the release was not waited for.
    NotWaited,
}

impl KillResult {
    /// The result as the record spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            KillResult::Released => "released",
            KillResult::NotReleased => "not-released",
            KillResult::Unknown => "unknown",
            KillResult::NotWaited => "not-waited",
        }
    }
}

/// What became of one target.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum TargetOutcome {
    /// It exited (signalled, or gone before its signal).
    Gone,
    /// Signalled, still running when the kill ended.
    Survived,
    /// Its PID named another process by the time of the signal: not
    /// signalled.
    IdentityChanged,
    /// It no longer held a GPU when checked right before the signal (it
    /// exec'd or let go): not signalled.
    LetGo,
    /// It could not be checked again right before the signal: not
    /// signalled.
    Unchecked,
    /// Signalling it was refused or failed (permission, a pin that could
    /// not be taken).
    Refused,
}

impl TargetOutcome {
    /// The outcome as the record spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetOutcome::Gone => "gone",
            TargetOutcome::Survived => "survived",
            TargetOutcome::IdentityChanged => "identity-changed",
            TargetOutcome::LetGo => "let-go",
            TargetOutcome::Unchecked => "unchecked",
            TargetOutcome::Refused => "refused",
        }
    }
}

/// What a kill came to.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KillOutcome {
    /// What came of the release.
    pub result: KillResult,
    /// The memory is proven back.
    pub released: bool,
    /// The end verdict on the GPUs freed.
    pub verdict: VerdictState,
    /// Why not released, or why unknown, in words (made by the command
    /// that killed: act makes no words).
    pub reasons: Vec<String>,
    /// The same, typed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<Reason>,
    /// From the first signal to the release (0 when not released).
    pub seconds_to_release: f64,
    /// From the moment every target had exited to the release.
    pub seconds_after_exit: Option<f64>,
    /// Every PID signalled.
    pub signalled: Vec<u32>,
    /// Targets still running at the end.
    pub survivors: Vec<u32>,
    /// Targets that needed SIGKILL.
    pub killed_hard: Vec<u32>,
    /// Targets whose PID had come to name another process.
    pub identity_changed: Vec<u32>,
    /// Rounds of signals.
    pub rounds: u32,
}

/// What a replay reads of a kill's audit record (a recording's `"kill"`
/// line): the typed fields it shows, nothing else. A record without one
/// of them, or with one of another type, is not read at all
/// ([`KillSeen::read`]); its strings are as hostile as the record's.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct KillSeen {
    /// When it ended (RFC 3339; read as a time only by [`KillSeen::ended_ms`]).
    pub time: String,
    /// When it began (RFC 3339; read as a time only by [`KillSeen::started_ms`]).
    #[serde(default)]
    pub started: Option<String>,
    /// Who ran it: `invoker.user` and `invoker.pid`.
    pub invoker: InvokerSeen,
    /// The first signal of each target (`TERM`).
    pub signal: String,
    /// The targets, for their comm.
    pub targets: Vec<TargetSeen>,
    /// What came of it.
    pub outcome: OutcomeSeen,
}

/// Who ran a kill, as a replay reads it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct InvokerSeen {
    /// gpufree's PID.
    pub pid: u32,
    /// The real UID's user name.
    pub user: String,
}

/// A kill's target, as a replay reads it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct TargetSeen {
    /// PID.
    pub pid: u32,
    /// comm (set by the process: hostile).
    pub comm: String,
}

/// What a kill came to, as a replay reads it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct OutcomeSeen {
    /// What came of the release.
    pub result: KillResult,
    /// From the first signal to the release.
    pub seconds_to_release: f64,
    /// Every PID signalled.
    pub signalled: Vec<u32>,
    /// Targets still running at the end.
    pub survivors: Vec<u32>,
}

impl KillSeen {
    /// The fields a replay shows of `record`, or None where it lacks one.
    pub fn read(record: &serde_json::Value) -> Option<KillSeen> {
        KillSeen::deserialize(record).ok()
    }

    /// When the kill ended (ms since the Unix epoch); None where the
    /// record does not say it as RFC 3339.
    pub fn ended_ms(&self) -> Option<u64> {
        super::rfc3339_ms(&self.time)
    }

    /// When the kill began (ms since the Unix epoch); None where the
    /// record does not say it as RFC 3339.
    pub fn started_ms(&self) -> Option<u64> {
        self.started.as_deref().and_then(super::rfc3339_ms)
    }
}

/// Why `record` could not take the kills of its `--audit-log`.
#[derive(Debug)]
pub enum AuditUnread {
    /// Opening, seeking or reading it failed.
    Io(std::io::Error),
    /// It is no regular file.
    NotAFile,
    /// This many of its lines are no kill's record: skipped.
    NotRecords(usize),
    /// Another user owns it, or others may write it: its records could be
    /// anyone's, so none is taken.
    NotTrusted,
}

/// Where a record is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sink {
    /// The journal's native socket.
    Journal(std::path::PathBuf),
    /// The syslog socket, where the journal's is absent or refuses.
    Syslog(std::path::PathBuf),
    /// `--audit-log`'s file.
    File(std::path::PathBuf),
}

/// A record that could not be written, to some or all of its sinks: each
/// sink with why. Its words: `present/words/front.rs`.
#[derive(Debug)]
pub struct AuditError {
    /// The sink and the error.
    pub failed: Vec<(Sink, std::io::Error)>,
}

impl std::error::Error for AuditError {}

impl AuditError {
    /// Whether the only failures are log daemons' sockets that do not
    /// exist: a host that keeps no journal or syslog (a container, a
    /// minimal image), the same on every kill, not this record's failure.
    pub fn no_logger_here(&self) -> bool {
        self.failed.iter().all(|(sink, e)| {
            matches!(sink, Sink::Journal(_) | Sink::Syslog(_))
                && e.kind() == std::io::ErrorKind::NotFound
        })
    }
}
