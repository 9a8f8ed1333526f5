//! The words of `--from`: the marker of a snapshot shown from a file, and
//! why a file or a command line is refused ([`FromBad`]).

use super::fault::utc;
use crate::model::{FromBad, FromFile, RecordBad, FROM_MAX_BYTES};
use crate::safe::{escape, fit};

/// `from FILE: a snapshot taken at TIME on HOST, not now`.
pub fn marker(from: &FromFile) -> String {
    let when = match from.taken_unix_ms {
        Some(ms) => format!("taken {}", utc(ms / 1000)),
        None => "taken at a time it does not say".to_string(),
    };
    let host = match &from.host {
        Some(h) => format!("on {}", fit(&escape(h), 255)),
        None => "on a host it does not name".to_string(),
    };
    let what = match (from.recorded_ms, from.taken_unix_ms) {
        (Some(record), Some(ms)) if record / 1000 != ms / 1000 => format!(
            "the recording's state at {} (its last record before then: {})",
            utc(ms / 1000),
            utc(record / 1000)
        ),
        (Some(_), Some(ms)) => format!("the recording's state at {}", utc(ms / 1000)),
        _ => format!("a snapshot {when}"),
    };
    format!(
        "from {}: {what} {host}; nothing here is live (the next commands re-check the host when \
         run)",
        shown(&from.path)
    )
}

/// A path as given, escaped, `-` as stdin.
fn shown(path: &str) -> String {
    if path == "-" {
        return "stdin".to_string();
    }
    fit(&escape(path), 1024)
}

/// Why `--from` cannot be used, in one line.
pub fn bad(b: &FromBad) -> String {
    match b {
        FromBad::Unreadable { path, error } => {
            format!("--from {}: cannot be read: {error}", shown(path))
        }
        FromBad::NotRegular { path } => format!(
            "--from {}: not a regular file (give a pipe's document on stdin: --from -)",
            shown(path)
        ),
        FromBad::TooLarge { path } => format!(
            "--from {}: larger than {} MiB, the most read; no snapshot document is that large",
            shown(path),
            FROM_MAX_BYTES >> 20
        ),
        FromBad::NotJson { path, error } => {
            format!("--from {}: not JSON ({})", shown(path), fit(error, 200))
        }
        FromBad::OtherKind { path, error } => {
            format!(
            "--from {}: not a snapshot document as `status --json` or `why --json` write it ({})",
            shown(path),
            error.as_deref().map_or("not a JSON object".to_string(), |e| fit(e, 200))
        )
        }
        FromBad::AnotherCommand { path, command } => format!(
            "--from {}: `{command} --json`'s document, not a snapshot as `status --json` or \
             `why --json` write it",
            shown(path)
        ),
        FromBad::Newer { path, version } => format!(
            "--from {}: a snapshot document of version {version}, written by a newer gpufree \
             (this one reads versions up to {})",
            shown(path),
            crate::model::SNAPSHOT_VERSION
        ),
        FromBad::Command("kill") => "kill --from: refused: a snapshot from a file pins no \
             process, so nothing can be signalled from it; run `gpufree kill` on the host \
             itself (it collects and checks each process again)"
            .to_string(),
        FromBad::Command(cmd) => {
            format!("{cmd} --from: only status, why and check read a snapshot from a file")
        }
        FromBad::Flag(flag) => format!(
            "{flag} with --from: it steers a live collection, and a snapshot from a file \
             collects nothing"
        ),
        FromBad::Secure { path } => format!(
            "--from {}: refused: gpufree runs with privileges its caller lacks, and reads no \
             file its caller names; give the document on stdin (--from - < FILE: your shell \
             opens it with your own rights)",
            shown(path)
        ),
    }
}

/// Why the recording at `path` (`--from`) cannot be read at the moment
/// asked (`--at`), in one line naming the flag and, for the file's own
/// faults, the file.
pub fn replay_bad(path: &str, b: &RecordBad) -> String {
    match b {
        RecordBad::Before {
            first_ms: Some(_), ..
        }
        | RecordBad::NotARecording
        | RecordBad::BadAt(_) => record_bad(b),
        _ => format!("--from {}: {}", shown(path), record_bad(b)),
    }
}

/// Why a recording cannot be read, in words of its own: a line, a
/// version, a change that does not fit, a moment before it (`--at`'s).
pub fn record_bad(b: &RecordBad) -> String {
    match b {
        RecordBad::Line { line, error } => format!(
            "line {line} is no record of `gpufree record` ({})",
            fit(error, 200)
        ),
        RecordBad::Newer { line, version } => format!(
            "line {line} is a record of version {version}, written by a newer gpufree \
             (this one reads versions up to {})",
            crate::model::RECORD_VERSION
        ),
        RecordBad::BackInTime { line } => format!(
            "line {line} is dated before the record before it (gpufree record writes none so: \
             a file joined or edited by hand?)"
        ),
        RecordBad::Misfit { line } => format!(
            "line {line}'s changes do not fit the snapshot before them (a file cut or \
             joined by hand?)"
        ),
        RecordBad::Before {
            at_ms,
            first_ms: Some(first),
        } => format!(
            "--at: {} is before the recording's first full snapshot ({})",
            utc(at_ms / 1000),
            utc(first / 1000)
        ),
        RecordBad::Before { .. } => {
            "the recording holds no full snapshot to start from".to_string()
        }
        RecordBad::NotARecording => "--at: only a recording (`gpufree record --out FILE`) has \
             moments; a snapshot document has one"
            .to_string(),
        RecordBad::BadAt(text) => format!(
            "--at {}: not a time (RFC 3339 like 2026-12-05T20:43:40Z, Unix seconds, -5m before \
             the recording's end or +30s after its start)",
            fit(&escape(text), 100)
        ),
    }
}
