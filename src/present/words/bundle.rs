//! The words of `gpufree bundle`: what each file in the archive is, and
//! why something was left out.

use crate::model::{Content, LeftWhy};
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

/// Why something is not in the archive.
pub fn left_why(w: &LeftWhy) -> String {
    match w {
        LeftWhy::Cmdlines => "left out everywhere; --with-cmdlines keeps them".into(),
        LeftWhy::Environments => "left out everywhere; --with-env keeps them".into(),
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
        LeftWhy::Secure => {
            "not read: gpufree runs with privileges its caller lacks (setuid, capabilities)".into()
        }
        LeftWhy::Journal => {
            "not read; journalctl SYSLOG_IDENTIFIER=gpufree shows them (or syslog's file)".into()
        }
        LeftWhy::BadUnitName => "not a unit name systemd accepts".into(),
        LeftWhy::NotGiven { flag } => format!("not asked ({flag} FILE copies them)"),
        LeftWhy::TooMany { max } => format!("more than {max} units; the rest not read"),
    }
}
