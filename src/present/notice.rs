//! The one-line notices a command writes on stderr beside its output:
//! what `-v` measured, where a user's answer came from or why it was not
//! asked, what `check` could not keep, where `serve` listens, a variable
//! not obeyed, a command's error, serve's failures it lives through. Each is one
//! line, `gpufree: ` (or `gpufree serve: `) first.

use crate::model::AuditUnread;
use crate::model::Visibility;
use crate::safe::{escape, fit};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::Path;

/// `-v`: how many processes the snapshot read, in how long, and which
/// walk found the holders (and why).
pub fn write_scanned<W: Write>(w: &mut W, v: &Visibility, millis: f64) -> io::Result<()> {
    writeln!(
        w,
        "gpufree: snapshot of {} processes in {:.1} ms; holders found by the {} walk{}: {}",
        v.processes_scanned,
        millis,
        v.scan.name(),
        match v.scan_reread {
            0 => String::new(),
            n => format!(" ({n} read again through /proc)"),
        },
        fit(&super::words::scan::scan_reason(v), 300)
    )
}

/// `fleet -v`: how many queries, in how long.
pub fn write_queried<W: Write>(w: &mut W, queries: usize, millis: f64) -> io::Result<()> {
    writeln!(
        w,
        "gpufree: {queries} queries to Prometheus in {millis:.1} ms"
    )
}

/// The view at `socket` was not asked (`why`): the command scans itself,
/// as `uid`.
pub fn write_view_unused<W: Write>(
    w: &mut W,
    socket: &Path,
    why: &str,
    uid: u32,
) -> io::Result<()> {
    let socket = escape(&socket.display().to_string()).into_owned();
    writeln!(
        w,
        "gpufree: the view at {socket} is not used ({why}); scanning as uid {uid}"
    )
}

/// Where a user's answer came from: the serve of `server` (its uid) at
/// `socket`, a snapshot `age` seconds old, shown to `uid`.
pub fn write_view_answered<W: Write>(
    w: &mut W,
    server: u32,
    socket: &Path,
    age: f64,
    uid: u32,
) -> io::Result<()> {
    let socket = escape(&socket.display().to_string()).into_owned();
    let whose = if server == 0 {
        "root's gpufree serve".to_string()
    } else {
        format!("gpufree serve (service user uid {server})")
    };
    writeln!(
        w,
        "gpufree: from {whose} at {socket}, a snapshot {age:.0} s old (as uid {uid}: other users' command lines, environments and executables hidden)"
    )
}

/// `check` could not keep its state at `path` (`why`): leaks count at
/// once.
pub fn write_state_not_kept<W: Write>(w: &mut W, path: &Path, why: &str) -> io::Result<()> {
    writeln!(
        w,
        "gpufree: check state {}: {why}; leaks count at once",
        path.display()
    )
}

/// `serve` is ready: where it serves metrics, and where it answers
/// users (`view`).
pub fn write_listening<W: Write>(
    w: &mut W,
    addr: SocketAddr,
    view: Option<&Path>,
) -> io::Result<()> {
    writeln!(w, "gpufree serve: listening on http://{addr}/metrics")?;
    if let Some(v) = view {
        let v = escape(&v.display().to_string()).into_owned();
        writeln!(w, "gpufree serve: answering users' status and why on {v}")?;
    }
    Ok(())
}

/// A command's error or a failure beside its answer (the audit record not
/// written): one line, whatever names it carries.
pub fn write_error<W: Write>(w: &mut W, message: &str) -> io::Result<()> {
    writeln!(w, "gpufree: {}", fit(message, crate::safe::MESSAGE_MAX))
}

/// A variable gpufree does not obey here (secure mode), and why.
pub fn write_ignored<W: Write>(w: &mut W, var: &str, why: &str) -> io::Result<()> {
    writeln!(w, "gpufree: {} ignored: {why}", escape(var))
}

/// `serve` could not take a snapshot and keeps serving its last good one.
pub fn write_serving_last<W: Write>(w: &mut W, message: &str) -> io::Result<()> {
    writeln!(
        w,
        "gpufree serve: snapshot failed, serving the last good one: {}",
        fit(message, crate::safe::MESSAGE_MAX)
    )
}

/// `serve` ran out of descriptors accepting a connection (said at most once
/// a minute) and retries every `backoff_ms`, closing an idle connection.
pub fn write_accept_starved<W: Write>(
    w: &mut W,
    error: &io::Error,
    backoff_ms: u128,
) -> io::Result<()> {
    writeln!(
        w,
        "gpufree serve: accept: {error}; closing the longest idle connection and retrying every {backoff_ms} ms (said at most once a minute)"
    )
}

/// `serve` could not accept a connection and retries.
pub fn write_accept_failed<W: Write>(w: &mut W, error: &io::Error) -> io::Result<()> {
    writeln!(w, "gpufree serve: accept: {error}; retrying")
}

/// `record` skipped a look whose collection failed (the timeline goes on
/// with the next).
pub fn write_record_skipped<W: Write>(w: &mut W, message: &str) -> io::Result<()> {
    writeln!(
        w,
        "gpufree record: snapshot failed, nothing recorded for this look: {}",
        fit(message, crate::safe::MESSAGE_MAX)
    )
}

/// `record`'s `--gpu` named no GPU of a look after its start (said once,
/// until a look finds it again; at the start it is a usage error).
pub fn write_record_gpu_miss<W: Write>(w: &mut W, miss: &crate::model::GpuMiss) -> io::Result<()> {
    let why = super::words::selector::gpu_miss(miss);
    writeln!(
        w,
        "gpufree record: {}; nothing recorded until it is back",
        fit(&why, crate::safe::MESSAGE_MAX)
    )
}

/// `record` could not take (some of) the kills `--audit-log` gained
/// (said once, until a read of it goes well again).
pub fn write_record_audit<W: Write>(w: &mut W, log: &Path, why: &AuditUnread) -> io::Result<()> {
    let log = escape(&log.to_string_lossy()).into_owned();
    let why = match why {
        AuditUnread::Io(e) => fit(&e.to_string(), crate::safe::MESSAGE_MAX),
        AuditUnread::NotAFile => "not a regular file".to_string(),
        AuditUnread::NotRecords(1) => "a line that is no audit record, skipped".to_string(),
        AuditUnread::NotRecords(n) => {
            format!("{n} lines that are no audit record, skipped")
        }
        AuditUnread::NotTrusted => {
            "another user owns it, or others may write it: none of its records is taken".to_string()
        }
    };
    writeln!(
        w,
        "gpufree record: --audit-log {log}: {why}; kills may be missing from the timeline"
    )
}
