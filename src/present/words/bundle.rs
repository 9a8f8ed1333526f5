//! The words of `gpufree bundle`: what each file in the archive is, what
//! was left out and why, and the mark a unit file's removed value reads.

use crate::model::{Content, LeftItem, LeftOut, LeftWhy};
use crate::safe::escape;

/// What a file in the archive is, in a few words.
pub fn content(c: &Content) -> String {
    match c {
        Content::Manifest => "this listing".into(),
        Content::StatusJson => "status --json of the collection (why --from reads it)".into(),
        Content::WhyJson => "why --json of the same collection (the same document)".into(),
        Content::StatusText => "status as printed, from the same collection".into(),
        Content::WhyText => "why as printed, from the same collection".into(),
        Content::Versions => "gpufree's, the NVIDIA driver's and the kernel's versions".into(),
        Content::HostFile { source } => format!("{} as read", escape(source)),
        Content::Unit { unit, source } => {
            format!("unit {}: {}", escape(unit), escape(source))
        }
        Content::Doctor => "gpufree doctor of each unit file, as copied here".into(),
        Content::Audit { source } => format!("audit records from {}", escape(source)),
        Content::Recording { source } => format!("recording from {}", escape(source)),
    }
}

/// What a unit file's `Exec*=` or `Environment=` line reads once its
/// value is removed (`model::redact_unit`).
pub const LEFT_OUT_MARK: &str = "(left out)";

/// What was left out, and why: one line of the listing.
pub fn left_out(l: &LeftOut) -> String {
    format!("{}: {}", left(&l.what), left_why_of(&l.what, &l.why))
}

/// What was left out, in a few words.
pub fn left(what: &LeftItem) -> String {
    match what {
        LeftItem::Path(path) => escape(path).into_owned(),
        LeftItem::Unit(unit) => escape(unit).into_owned(),
        LeftItem::Cmdlines => "command lines".into(),
        LeftItem::Environments => "environments".into(),
        LeftItem::JournalRecords => "the journal's audit records".into(),
        LeftItem::Collection => "the collection (status, why, versions, unit files)".into(),
        LeftItem::UnitFiles => "the holders' unit files".into(),
        LeftItem::AuditLog => "the audit log's records".into(),
        LeftItem::Recording => "a recording".into(),
    }
}

/// Why `what` is not in the archive: what asks for it, where not asked;
/// where to read it, where never read; else [`left_why`].
fn left_why_of(what: &LeftItem, why: &LeftWhy) -> String {
    match (what, why) {
        (LeftItem::Cmdlines, LeftWhy::NotAsked) => {
            "left out everywhere, with the copied lines' free text and every unit key not on \
             the allowlist; --with-cmdlines keeps them"
                .into()
        }
        (LeftItem::Environments, LeftWhy::NotAsked) => {
            "left out everywhere; --with-env keeps them".into()
        }
        (LeftItem::AuditLog, LeftWhy::NotAsked) => {
            "not asked (--audit-log FILE copies them)".into()
        }
        (LeftItem::Recording, LeftWhy::NotAsked) => {
            "not asked (--recording FILE copies them)".into()
        }
        (LeftItem::JournalRecords, LeftWhy::NotRead) => {
            "not read; journalctl SYSLOG_IDENTIFIER=gpufree shows them (or syslog's file)".into()
        }
        _ => left_why(why),
    }
}

/// Why something is not in the archive, whatever it is.
pub fn left_why(w: &LeftWhy) -> String {
    match w {
        LeftWhy::NotAsked => "not asked".into(),
        LeftWhy::NotRead => "not read".into(),
        LeftWhy::Missing => "not there".into(),
        LeftWhy::Symlink { target } => {
            format!("a symlink to {}, not followed", escape(target))
        }
        LeftWhy::NotRegular => "not a regular file".into(),
        LeftWhy::TooLarge { max } => format!("larger than {max} bytes"),
        LeftWhy::Unreadable { error } => format!("unreadable: {}", escape(error)),
        LeftWhy::NotJson { lines } => {
            format!("{lines} line(s) that are not JSON (they could not be redacted)")
        }
        LeftWhy::NotReplayable { records } => format!(
            "{records} line(s) that are no record, or changes before the copy's first full snapshot"
        ),
        LeftWhy::Secure => {
            "not read: gpufree runs with privileges its caller lacks (setuid, capabilities)".into()
        }
        LeftWhy::BadUnitName => "not a unit name systemd accepts".into(),
        LeftWhy::TooMany { max } => format!("more than {max} units; the rest not read"),
    }
}
