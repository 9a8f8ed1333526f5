//! The words of what collection read from /proc and /dev and could not
//! use: an entry of the device directory that is not a GPU node
//! (`model::NodeRefusal`), a device directory that cannot be listed, a
//! `--gpu` selector that does not parse (`model::BadSelector`), where a
//! unit's restart policy was read and what of it could not be
//! (`model::RestartSource`, `model::UnitUnread`).

use crate::model::{
    BadSelector, BusFailure, DevDirUnlisted, FileKind, LinkEnd, LinkTarget, MajorsUnread,
    NodeRefusal, RestartSource, UnitUnread, Wanted, WrongDevice,
};
use std::fmt;

/// Why the kernel log could not be read: the system's `error`, and where
/// the log `denied` the read, what it needs.
pub fn kmsg_failed(error: &str, denied: bool) -> String {
    if denied {
        format!("{error} (reading the kernel log needs CAP_SYSLOG where dmesg_restrict is set)")
    } else {
        error.to_string()
    }
}

/// What could not be read of a unit's policy, one list: `a: why, b: why`.
pub fn unit_unread(unread: &[UnitUnread]) -> String {
    let each: Vec<String> = unread.iter().map(ToString::to_string).collect();
    each.join(", ")
}

impl fmt::Display for RestartSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestartSource::Files(paths) => f.write_str(&paths.join(", ")),
            RestartSource::Systemd { restarts: Some(n) } => {
                write!(f, "systemd over D-Bus (restarted {n} times so far)")
            }
            RestartSource::Systemd { restarts: None } => f.write_str("systemd over D-Bus"),
        }
    }
}

impl fmt::Display for UnitUnread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnitUnread::Io { path, error } => write!(f, "{path}: {error}"),
            UnitUnread::NotRegular { path } => write!(f, "{path}: not a regular file"),
            UnitUnread::TooLarge { path, max } => write!(f, "{path}: larger than {max} bytes"),
            UnitUnread::Bus { address, why } => write!(f, "systemd over D-Bus ({address}): {why}"),
        }
    }
}

impl fmt::Display for BusFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BusFailure::NoRuntime(e) => write!(f, "no runtime for D-Bus: {e}"),
            BusFailure::NoAnswer(t) => write!(f, "no answer within {t:?}"),
            BusFailure::Failed(e) => f.write_str(e),
            BusFailure::Panicked => f.write_str("the D-Bus query panicked"),
        }
    }
}

impl fmt::Display for NodeRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeRefusal::Unexamined(e) => write!(f, "could not be examined: {e}"),
            NodeRefusal::Device(wrong) => write!(f, "{wrong}"),
            NodeRefusal::NotDevice(kind) => write!(f, "{kind}, not a character device"),
            NodeRefusal::Link { target, to } => write!(f, "a link to {target}, {to}"),
        }
    }
}

impl fmt::Display for LinkTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkTarget::Path(path) => f.write_str(path),
            LinkTarget::Unreadable(e) => write!(f, "somewhere unreadable ({e})"),
        }
    }
}

impl fmt::Display for LinkEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkEnd::Device(wrong) => write!(f, "{wrong}"),
            LinkEnd::NotDevice { kind, driver } => write!(
                f,
                "{kind} (a link is followed only to the {driver} driver's character device)"
            ),
            LinkEnd::Unfollowed(e) => write!(f, "which cannot be followed ({e})"),
        }
    }
}

impl fmt::Display for WrongDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a character device of major {}", self.major)?;
        if !self.names.is_empty() {
            write!(f, " ({})", self.names.join(", "))?;
        }
        let d = &self.driver;
        match &self.wanted {
            Wanted::Majors(want) => {
                let want: Vec<String> = want.iter().map(u32::to_string).collect();
                write!(f, ", not the {d} driver's {}", want.join(" or "))
            }
            Wanted::NoneRegistered => write!(f, ", and the kernel registered no {d} driver"),
            Wanted::Unknown(why) => {
                write!(f, ", and the {d} driver's major is not known: {why}")
            }
        }
    }
}

impl fmt::Display for MajorsUnread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MajorsUnread::NoCharacterSection { path } => {
                write!(f, "{path} is unreadable: no \"Character devices:\" section")
            }
            MajorsUnread::Unread { path, error } => write!(f, "{path} could not be read: {error}"),
        }
    }
}

impl fmt::Display for FileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileKind::Regular => "a regular file",
            FileKind::Directory => "a directory",
            FileKind::Block => "a block device",
            FileKind::Fifo => "a FIFO",
            FileKind::Socket => "a socket",
            FileKind::Link => "a link",
            FileKind::Other => "not a device",
        })
    }
}

impl fmt::Display for DevDirUnlisted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot list {}: {}", self.dir, self.error)
    }
}

impl fmt::Display for BadSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadSelector::Empty => f.write_str("empty GPU selector"),
            BadSelector::NotPci(s) => write!(f, "'{s}' is not a PCI bus id (like 0000:01:00.0)"),
            BadSelector::Unknown(s) => write!(
                f,
                "'{s}' is not a GPU index, UUID, PCI bus id, MIG device (GPU:MIG or MIG-UUID) or 'all'"
            ),
        }
    }
}
