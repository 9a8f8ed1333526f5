//! `--from FILE` (`status`, `why`, `check`): the snapshot document a
//! `status --json` or `why --json` wrote, read back and judged again by
//! the same pipeline as a live collection, so the findings, the verdict
//! and the next commands are those the live command showed when it was
//! taken. A document pins no process: `kill` refuses `--from`, and the
//! flags that steer a live collection are refused with it. In secure mode
//! only stdin (`-`) is read: the caller's shell opened it with the
//! caller's own rights, so a setuid gpufree reads no file its caller
//! could not. A recording (`gpufree record`) is read at the moment
//! `--at` names, or at its end.

use super::args::{CheckArgs, Command};
use super::{Cli, Error, Outcome, Settings};
use crate::diagnose::Options;
use crate::model::{is_recording, state_at, At, RecordBad};
use crate::model::{FromBad, FromFile, Snapshot, FROM_MAX_BYTES, SNAPSHOT_VERSION};
use crate::present::Printer;
use crate::{pipeline, snapshot};
use serde::de::IgnoredAny;
use std::io::Read;
use std::path::Path;

/// Refuses `--from` where it cannot be used: a command that acts or
/// watches, a flag that steers a live collection, a path in secure mode.
pub(super) fn refuse(cli: &Cli, secure: bool) -> Result<(), Error> {
    refuse_replay(cli)?;
    let Some(path) = &cli.common.from else {
        return Ok(());
    };
    let bad = |b: FromBad| Err(Error::From(b));
    let command = match &cli.command {
        None | Some(Command::Status | Command::Why { .. }) => None,
        Some(Command::Check(CheckArgs { state: Some(_), .. })) => {
            return bad(FromBad::Flag("check --state"))
        }
        Some(Command::Check(_)) => None,
        Some(Command::Kill(_)) => Some("kill"),
        Some(Command::Wait(_)) => Some("wait"),
        Some(Command::Watch { .. }) => Some("watch"),
        Some(Command::Serve(_)) => Some("serve"),
        Some(Command::Metrics { .. }) => Some("metrics"),
        Some(Command::Fleet(_)) => Some("fleet"),
        Some(Command::Doctor { .. }) => Some("doctor"),
        Some(Command::Completions { .. }) => Some("completions"),
        Some(Command::Man { .. }) => Some("man"),
        Some(Command::Demo { .. }) => Some("demo"),
        Some(Command::Sim(_)) => Some("sim"),
        Some(Command::Prepare) => Some("prepare"),
        Some(Command::Bundle(_)) => Some("bundle"),
        Some(Command::Record(_)) => Some("record"),
    };
    if let Some(command) = command {
        return bad(FromBad::Command(command));
    }
    let c = &cli.common;
    let collection = [
        (c.scan.is_some(), "--scan"),
        (c.read_timeout.is_some(), "--read-timeout"),
        (c.idle_window.is_some(), "--idle-window"),
    ];
    for (given, flag) in c.host_paths().into_iter().chain(collection) {
        if given {
            return bad(FromBad::Flag(flag));
        }
    }
    if secure && path.as_os_str() != "-" {
        return bad(FromBad::Secure { path: shown(path) });
    }
    Ok(())
}

/// Refuses, with `watch --replay`, a flag that needs the live host: the
/// ones `--from` refuses, `--from` itself and `--audit-log` (nothing is
/// killed from a file).
fn refuse_replay(cli: &Cli) -> Result<(), Error> {
    let Some(Command::Watch {
        replay: Some(_),
        audit_log,
        ..
    }) = &cli.command
    else {
        return Ok(());
    };
    let c = &cli.common;
    let live = [
        (c.from.is_some(), "--from"),
        (audit_log.is_some(), "--audit-log"),
        (c.scan.is_some(), "--scan"),
        (c.read_timeout.is_some(), "--read-timeout"),
        (c.idle_window.is_some(), "--idle-window"),
    ];
    match c
        .host_paths()
        .into_iter()
        .chain(live)
        .find(|(given, _)| *given)
    {
        Some((_, flag)) => Err(Error::WatchReplay(crate::model::ReplayBad::Flag(flag))),
        None => Ok(()),
    }
}

/// `gpufree watch --replay FILE`: the recording read and indexed, its first
/// moment built (a file that cannot be replayed fails here, before the
/// terminal is taken), then stepped through in the live view's frame.
pub(super) fn replay(s: &Settings, path: &Path, printer: &Printer) -> Result<Outcome, Error> {
    use crate::model::{ReplayBad, ReplayWhy};
    use std::io::IsTerminal;
    let bad = |why| {
        Error::WatchReplay(ReplayBad::File {
            path: shown(path),
            why,
        })
    };
    let bytes = read(path).map_err(|e| bad(ReplayWhy::File(e)))?;
    if !is_recording(&bytes) {
        return Err(bad(ReplayWhy::NotARecording));
    }
    let rec = crate::watch::Recording::open(bytes).map_err(|e| bad(ReplayWhy::Record(e)))?;
    let gpus = if s.common.gpu.is_empty() {
        None
    } else {
        let first = rec.state(0).map_err(|e| bad(ReplayWhy::Record(e)))?;
        Some(snapshot::resolve(&first.gpus, &s.common.gpu).map_err(Error::Selector)?)
    };
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(Error::NoTerminal);
    }
    let opts = crate::watch::ReplayOptions {
        diagnose: Options::default(),
        gpus,
        color: printer.color(),
    };
    crate::watch::replay(&rec, &opts)?;
    Ok(Outcome::Done)
}

/// The path as the words show it.
fn shown(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// The snapshot of the document at `path`, judged with `opts` and
/// narrowed to `--gpu` as a live collection is
/// ([`super::take_selected_by`]); where it came from said on stderr
/// (unless quiet).
pub(super) fn take_from(
    path: &Path,
    s: &Settings,
    opts: &Options,
    printer: &Printer,
) -> Result<Snapshot, Error> {
    let at = match &s.common.at {
        Some(text) => Some(
            At::parse(text)
                .ok_or_else(|| Error::Replay(shown(path), RecordBad::BadAt(text.clone())))?,
        ),
        None => None,
    };
    let bytes = read(path).map_err(Error::From)?;
    let (mut snap, recorded_ms) = if is_recording(&bytes) {
        // A recording: the state at `--at` (its end without).
        let (snap, record) = state_at(&bytes, at).map_err(|e| Error::Replay(shown(path), e))?;
        (snap, Some(record))
    } else if at.is_some() {
        return Err(Error::Replay(shown(path), RecordBad::NotARecording));
    } else {
        (parse(path, &bytes).map_err(Error::From)?, None)
    };
    let from = FromFile {
        path: shown(path),
        taken_unix_ms: snap.taken_unix_ms,
        host: snap.host.clone(),
        recorded_ms,
    };
    pipeline::judge_with(&mut snap, opts);
    let indexes = snapshot::resolve(&snap.gpus, &s.common.gpu).map_err(Error::Selector)?;
    if !printer.quiet() {
        let _ = crate::present::from::write_marker(&mut std::io::stderr(), &from);
    }
    snap.from_file = Some(from);
    Ok(pipeline::select_with(snap, &indexes, opts))
}

/// The bytes of `path` (`-`: stdin), at most [`FROM_MAX_BYTES`]: a
/// regular file opened as the caller (a FIFO or a device is refused,
/// never opened), or stdin, whatever it is.
fn read(path: &Path) -> Result<Vec<u8>, FromBad> {
    use std::os::unix::fs::OpenOptionsExt;
    let unreadable = |e: std::io::Error| FromBad::Unreadable {
        path: shown(path),
        error: e.to_string(),
    };
    let mut bytes = Vec::new();
    let source: Box<dyn Read> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        use std::os::unix::fs::MetadataExt;
        // Looked at before it is opened: opening a device can act (a
        // tape rewinds, a watchdog arms) and opening a FIFO releases its
        // writer. The file opened must be the one looked at.
        let looked = std::fs::metadata(path).map_err(unreadable)?;
        if !looked.is_file() {
            return Err(FromBad::NotRegular { path: shown(path) });
        }
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
            .open(path)
            .map_err(unreadable)?;
        let meta = f.metadata().map_err(unreadable)?;
        if !meta.is_file() || (meta.dev(), meta.ino()) != (looked.dev(), looked.ino()) {
            return Err(FromBad::NotRegular { path: shown(path) });
        }
        if meta.len() > FROM_MAX_BYTES {
            return Err(FromBad::TooLarge { path: shown(path) });
        }
        Box::new(f)
    };
    source
        .take(FROM_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > FROM_MAX_BYTES {
        return Err(FromBad::TooLarge { path: shown(path) });
    }
    Ok(bytes)
}

/// What a document says of itself, read before the whole of it.
#[derive(serde::Deserialize)]
struct Head {
    #[serde(default)]
    snapshot_version: Option<u64>,
    #[serde(default)]
    kill: Option<IgnoredAny>,
    #[serde(default)]
    wait: Option<IgnoredAny>,
}

/// The snapshot in `bytes`: JSON, a snapshot document (not another
/// command's), of a version this gpufree reads.
fn parse(path: &Path, bytes: &[u8]) -> Result<Snapshot, FromBad> {
    use serde_json::error::Category;
    let wrong = |e: serde_json::Error| match e.classify() {
        Category::Data => FromBad::OtherKind {
            path: shown(path),
            error: Some(e.to_string()),
        },
        _ => FromBad::NotJson {
            path: shown(path),
            error: e.to_string(),
        },
    };
    // Not an object: no document of ours (serde would read an array's
    // items as a struct's fields).
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        serde_json::from_slice::<IgnoredAny>(bytes).map_err(wrong)?;
        return Err(FromBad::OtherKind {
            path: shown(path),
            error: None,
        });
    }
    let head: Head = serde_json::from_slice(bytes).map_err(wrong)?;
    let another = |command| FromBad::AnotherCommand {
        path: shown(path),
        command,
    };
    if head.kill.is_some() {
        return Err(another("kill"));
    }
    if head.wait.is_some() {
        return Err(another("wait"));
    }
    match head.snapshot_version {
        Some(version) if version > u64::from(SNAPSHOT_VERSION) => Err(FromBad::Newer {
            path: shown(path),
            version,
        }),
        _ => serde_json::from_slice(bytes).map_err(wrong),
    }
}
