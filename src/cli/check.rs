//! `gpufree check`: one look, judged for monitors; what it remembers
//! between runs (since when memory has been unaccounted) in a small state
//! file.

use super::args::CheckFormat;
use super::{files, shown, take_selected_by};
use crate::cli::args::CheckArgs;
use crate::cli::config::Settings;
use crate::cli::error::{Error, Outcome};
use crate::diagnose::check::{check, CheckPolicy};
use crate::model::{CheckMemory, CheckOutcome, Condition, Level, Problem, Snapshot};
use crate::present::check::{write, Format};
use crate::present::notice::write_state_not_kept;
use crate::present::Printer;
use std::io::Write;

/// `gpufree check`: the verdict in `--format`, with its consumer's exit
/// code. What stops the look itself (no GPU, /proc unreadable) is an
/// unknown verdict in the same format, never a silent OK.
pub(super) fn run_check(
    s: &Settings,
    args: &CheckArgs,
    printer: &Printer,
) -> Result<Outcome, Error> {
    let format = if printer.json() {
        Format::Json
    } else {
        format_of(args.format)
    };
    let mut policy = CheckPolicy {
        leak_min: args.leak_min,
        grace_secs: args.grace.as_secs(),
        ignore: args.ignore.clone(),
        idle_min: args.idle_min,
    };
    let taken = match &s.common.from {
        Some(path) => {
            super::from::take_from(path, s, &Default::default(), printer).map(|snap| (None, snap))
        }
        None => take_selected_by(s, &Default::default()).map(|(c, snap)| (Some(c), snap)),
    };
    let (outcome, snap) = match taken {
        Ok((Some(collector), snap)) => (judged(s, &mut policy, &collector, &snap), snap),
        // A snapshot from a file: no second look (its processes are not
        // here to sample) and no state (it is not now): judged as a first
        // check at the time it was taken.
        Ok((None, snap)) => {
            let now = snap.taken_unix_ms.map_or_else(unix_now, |ms| ms / 1000);
            let none = Default::default();
            let (outcome, _) = check(&snap, &policy, &CheckMemory::default(), &none, now);
            (outcome, snap)
        }
        Err(e @ (Error::Selector(_) | Error::From(_))) => return Err(e),
        Err(e) => (could_not_look(&e), Snapshot::default()),
    };
    // Other programs read it: never coloured.
    let mut out = printer.plain().guard(std::io::stdout().lock());
    let written = write(&mut out, format, &outcome, &snap, args.leak_min);
    shown(
        written.and_then(|()| out.flush()),
        Outcome::Check(format, outcome.level),
    )
}

/// The check of a live snapshot: its holders in D sampled again, and
/// what the last check remembered.
fn judged(
    s: &Settings,
    policy: &mut CheckPolicy,
    collector: &crate::snapshot::Collector,
    snap: &Snapshot,
) -> CheckOutcome {
    let state = &s.check_state;
    // Holders in D sampled again over a window (no holder in D, no wait).
    let windows = crate::snapshot::windows(collector, snap);
    // In secure mode (setuid, file capabilities) no state is read or
    // kept: the caller could time root's leaks as they like.
    let keep = s.privilege.secure.is_none();
    let remembered = if keep {
        read_state(state)
    } else {
        CheckMemory::default()
    };
    let now = unix_now();
    let (mut outcome, next) = check(snap, policy, &remembered, &windows, now);
    let kept = if keep {
        write_state(state, &next)
    } else {
        Err("not kept where gpufree runs with privileges its caller lacks".into())
    };
    if let Err(why) = kept {
        // Without the state no leak can be timed: each counts at once
        // rather than never.
        let _ = write_state_not_kept(&mut std::io::stderr(), state, &why);
        policy.grace_secs = 0;
        outcome = check(snap, policy, &remembered, &windows, now).0;
    }
    outcome
}

fn format_of(f: CheckFormat) -> Format {
    match f {
        CheckFormat::Text => Format::Text,
        CheckFormat::Json => Format::Json,
        CheckFormat::Npd => Format::Npd,
        CheckFormat::Nagios => Format::Nagios,
        CheckFormat::Slurm => Format::Slurm,
    }
}

/// The verdict when no snapshot could be taken: unknown, saying why.
fn could_not_look(e: &Error) -> CheckOutcome {
    CheckOutcome {
        level: Level::Unknown,
        problems: vec![Problem {
            condition: Condition::Unknown,
            level: Level::Unknown,
            gpu: None,
            processes: Vec::new(),
            bytes: 0,
            seconds: None,
            why: Some(e.to_string()),
            causes: Vec::new(),
            stuck: None,
            finding: None,
            xid: None,
        }],
        pending: Vec::new(),
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What the last check remembered; nothing when the file is absent, not a
/// regular file of the real user's own (a symlink or FIFO is never followed or waited
/// on), larger than a state can be, or not the state's JSON (a fresh
/// start: leaks are timed from now).
fn read_state(path: &std::path::Path) -> CheckMemory {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    const MAX: u64 = 1 << 20;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()
        // The real user's own file only: another's (a service user's in a
        // shared directory) could fake since when a leak has lasted.
        .filter(|f| {
            f.metadata().is_ok_and(|m| {
                m.is_file()
                    && m.len() <= MAX
                    && std::os::unix::fs::MetadataExt::uid(&m) == rustix::process::getuid().as_raw()
            })
        });
    let mut bytes = Vec::new();
    match file.map(|f| f.take(MAX).read_to_end(&mut bytes)) {
        Some(Ok(_)) => serde_json::from_slice(&bytes).unwrap_or_default(),
        _ => CheckMemory::default(),
    }
}

/// Keeps what this check saw for the next, atomically, creating the
/// directory (for `/run/gpufree`) when missing, 0755 whatever the umask.
fn write_state(path: &std::path::Path, memory: &CheckMemory) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)
                .and_then(|()| {
                    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
                })
                .map_err(|e| e.to_string())?;
        }
    }
    let bytes = serde_json::to_vec(memory).map_err(|e| e.to_string())?;
    files::write_atomically(path, &bytes, 0o644).map_err(|e| e.to_string())
}
