//! The audit log of kills (SPEC.md, "Audit log"): every kill that signals
//! anything leaves one record of who ran it, what it targeted (with each
//! process's identity) and why, the signals sent and what came of them.
//!
//! The record is a value ([`record`], pure: from the kill's [`Report`]
//! and the [`Context`] of the run); [`write()`] sends it to the systemd
//! journal over its native protocol (`journal.rs`), to syslog where the
//! journal's socket is absent, and as one JSON line to `--audit-log`
//! (`file.rs`). A record that cannot be written is an [`AuditError`] for
//! the caller to show; it never changes what the kill did or its exit
//! code.

mod file;
mod journal;
#[cfg(test)]
mod tests;

use super::kill::{signal_name, Handled, Report};
use crate::model::{
    AuditRecord, AuditTarget, Invoker, KillOutcome, KillResult, Left, Target, TargetOutcome,
    VerdictState,
};
use rustix::process::Signal;
use std::path::PathBuf;
use std::time::SystemTime;

/// The journal's `MESSAGE_ID` of a kill's record (`journalctl
/// MESSAGE_ID=c8f371fd4a354bb8b6b4205c04bdfa2c` lists every kill).
pub const MESSAGE_ID: &str = "c8f371fd4a354bb8b6b4205c04bdfa2c";

/// The journal's native socket.
pub const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// The syslog socket, used where the journal's is absent.
pub const SYSLOG_SOCKET: &str = "/dev/log";

/// Where records go.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sinks {
    /// The journal's socket; None: not written there.
    pub journal: Option<PathBuf>,
    /// The syslog socket, where the journal cannot be reached; None: none.
    pub syslog: Option<PathBuf>,
    /// `--audit-log FILE`: JSON lines, appended.
    pub file: Option<PathBuf>,
}

/// What a record says besides the report: the run that killed.
#[derive(Debug, Clone)]
pub struct Context {
    /// `kill` or `watch`.
    pub command: String,
    /// Who ran it.
    pub invoker: Invoker,
    /// The host's name.
    pub host: String,
    /// The first signal.
    pub signal: Signal,
    /// `--no-wait`: the release was not waited for.
    pub no_wait: bool,
    /// When the kill ended.
    pub time: SystemTime,
    /// The report's reasons in words, made by the command that killed
    /// (act makes no words): the record's `reasons` and the journal's
    /// `GPUFREE_REASONS`.
    pub reasons: Vec<String>,
    /// The words of each target's reason and of why one was left out,
    /// from the command that killed.
    pub words: Words,
}

/// How the command that killed says why a process was a target or left
/// out (act makes no words: `cli` and `watch` pass `present`'s).
#[derive(Debug, Clone, Copy)]
pub struct Words {
    /// A target's reason.
    pub target: fn(&Target) -> String,
    /// Why a process was left out.
    pub left: fn(&Left) -> String,
    /// The record in one line: the journal's `MESSAGE`, syslog's text.
    pub message: fn(&AuditRecord) -> String,
}

impl Context {
    /// The context of this process's kill, now, with the report's reasons
    /// in words.
    pub fn now(
        command: &str,
        signal: Signal,
        no_wait: bool,
        reasons: Vec<String>,
        words: Words,
    ) -> Context {
        Context {
            command: command.into(),
            invoker: crate::proc::me::invoker(),
            host: crate::proc::me::hostname(),
            signal,
            no_wait,
            time: SystemTime::now(),
            reasons,
            words,
        }
    }
}

pub use crate::model::{AuditError, Sink};

/// The record of a kill, or None when it signalled nothing.
pub fn record(ctx: &Context, report: &Report) -> Option<AuditRecord> {
    if report.targets.is_empty() {
        return None;
    }
    Some(AuditRecord {
        version: 1,
        time: rfc3339(ctx.time),
        started: report
            .started_unix_ms
            .map(|ms| rfc3339(SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(ms))),
        host: ctx.host.clone(),
        command: ctx.command.clone(),
        invoker: ctx.invoker.clone(),
        signal: signal_name(ctx.signal).into(),
        targets: report
            .handled
            .iter()
            .map(|h| target(h, report, &ctx.words))
            .collect(),
        outcome: outcome(report, ctx),
    })
}

/// Builds the record of a kill and writes it to `sinks`; nothing when it
/// signalled nothing.
pub fn log(sinks: &Sinks, ctx: &Context, report: &Report) -> Result<(), AuditError> {
    match record(ctx, report) {
        Some(r) => write(sinks, &r, &(ctx.words.message)(&r)),
        None => Ok(()),
    }
}

/// Writes `record` (in one line, `message`) to the journal (or, where its
/// socket is absent or refuses, syslog) and to the file. Every sink is
/// tried; the error names those that failed.
pub fn write(sinks: &Sinks, record: &AuditRecord, message: &str) -> Result<(), AuditError> {
    let mut failed = Vec::new();
    let line = file::json_line(record);
    let journal = sinks.journal.as_ref().map(|p| {
        journal::send(
            p,
            &journal::encode(&journal::fields(record, &line, message)),
        )
        .map_err(|e| (Sink::Journal(p.clone()), e))
    });
    if !matches!(journal, Some(Ok(()))) {
        if let Some(p) = &sinks.syslog {
            match journal::syslog(p, record, &line, message) {
                Ok(()) => {}
                Err(e) => {
                    failed.extend(journal.and_then(Result::err));
                    failed.push((Sink::Syslog(p.clone()), e));
                }
            }
        } else {
            failed.extend(journal.and_then(Result::err));
        }
    }
    if let Some(p) = &sinks.file {
        if let Err(e) = file::append(p, line.as_bytes()) {
            failed.push((Sink::File(p.clone()), e));
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(AuditError { failed })
    }
}

/// One target of the record: who it was, and what became of it.
fn target(h: &Handled, report: &Report, words: &Words) -> AuditTarget {
    let (outcome, detail) = target_outcome(h, report, words);
    AuditTarget {
        pid: h.pid,
        start_time_ticks: h.start_time_ticks,
        comm: h.comm.clone(),
        cmdline: h.cmdline.clone(),
        exe: h.exe.clone(),
        uid: h.uid,
        user: h.user.clone(),
        owner: h.owner.clone(),
        reason: (words.target)(&h.why),
        round: h.round,
        signals: h.signals.clone(),
        outcome,
        detail,
    }
}

/// What became of a handled target: signalled, it survived or is gone;
/// otherwise the report says why it was not signalled (or it was gone
/// before its signal).
fn target_outcome(h: &Handled, r: &Report, words: &Words) -> (TargetOutcome, Option<String>) {
    let pid = h.pid;
    if !h.signals.is_empty() {
        return if r.survivors.contains(&pid) {
            (TargetOutcome::Survived, None)
        } else {
            (TargetOutcome::Gone, None)
        };
    }
    if r.identity_changed.contains(&pid) {
        return (TargetOutcome::IdentityChanged, None);
    }
    if let Some(c) = r.changed.iter().find(|c| c.pid == pid) {
        return (TargetOutcome::LetGo, Some(c.why.to_string()));
    }
    if let Some(c) = r.unchecked.iter().find(|c| c.pid == pid) {
        return (TargetOutcome::Unchecked, Some(c.why.to_string()));
    }
    if let Some(k) = r.skipped.iter().find(|k| k.pid == pid) {
        return (TargetOutcome::Refused, Some((words.left)(&k.why)));
    }
    (TargetOutcome::Gone, Some("exited before its signal".into()))
}

/// The kill's outcome.
fn outcome(r: &Report, ctx: &Context) -> KillOutcome {
    let result = match (ctx.no_wait, r.verdict) {
        (true, _) => KillResult::NotWaited,
        (false, VerdictState::Free) => KillResult::Released,
        (false, VerdictState::Busy) => KillResult::NotReleased,
        (false, VerdictState::Unknown) => KillResult::Unknown,
    };
    KillOutcome {
        result,
        released: r.released,
        verdict: r.verdict,
        reasons: ctx.reasons.clone(),
        causes: r.reasons.clone(),
        seconds_to_release: r.seconds_to_release,
        seconds_after_exit: r.seconds_after_exit,
        signalled: r.targets.clone(),
        survivors: r.survivors.clone(),
        killed_hard: r.killed_hard.clone(),
        identity_changed: r.identity_changed.clone(),
        rounds: r.rounds,
    }
}

/// `t` in UTC as RFC 3339 with milliseconds (`2025-01-31T12:00:00.123Z`);
/// a time before 1970 is written as 1970's start.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    crate::model::rfc3339_of_ms(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
