//! Why an entry of the device directory with a GPU node's name is not a
//! GPU node ([`NodeRefusal`]), and why the directory could not be listed
//! ([`DevDirUnlisted`]), as values: paths, majors and the system's errors
//! stay data; the words are made in `present/words/proc.rs`. JSON's
//! `visibility.refused_nodes[].why` is those words, `.cause` this value.

use serde::{Deserialize, Serialize};

/// What an entry with a GPU node's name is instead of a GPU node.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum NodeRefusal {
    /// Its `lstat` failed (the system's error).
    Unexamined(String),
    /// A character device of another driver.
    Device(WrongDevice),
    /// Not a character device, nor a link.
    NotDevice(FileKind),
    /// A link to something that is not its driver's character device.
    Link {
        /// Where it leads.
        target: LinkTarget,
        /// What is there.
        to: LinkEnd,
    },
}

/// Where a refused link leads.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LinkTarget {
    /// This path.
    Path(String),
    /// It could not be read (the system's error).
    Unreadable(String),
}

/// What a refused link leads to.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LinkEnd {
    /// A character device of another driver.
    Device(WrongDevice),
    /// Not a character device: a link is followed only to `driver`'s.
    NotDevice {
        /// What it is.
        kind: FileKind,
        /// The driver whose character device it should be.
        driver: String,
    },
    /// It cannot be followed (the system's error).
    Unfollowed(String),
}

/// A character device that is not its name's driver's.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct WrongDevice {
    /// Its major.
    pub major: u32,
    /// The names the kernel registered that major for.
    pub names: Vec<String>,
    /// The driver its name says.
    pub driver: String,
    /// That driver's majors, as known.
    pub wanted: Wanted,
}

/// The majors a driver has, as known.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Wanted {
    /// These.
    Majors(Vec<u32>),
    /// The kernel registered none for it.
    NoneRegistered,
    /// Not known: the kernel's table could not be read.
    Unknown(MajorsUnread),
}

/// Why the kernel's table of majors (`<proc root>/devices`) could not be
/// read: then only the fixed majors are known.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MajorsUnread {
    /// Read, but it has no "Character devices:" section: not the
    /// kernel's table.
    NoCharacterSection {
        /// The table's path.
        path: String,
    },
    /// It could not be read (the system's error).
    Unread {
        /// The table's path.
        path: String,
        /// The system's error.
        error: String,
    },
}

/// What a file that is not a character device is.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// A regular file.
    Regular,
    /// A directory.
    Directory,
    /// A block device.
    Block,
    /// A FIFO.
    Fifo,
    /// A socket.
    Socket,
    /// A link.
    Link,
    /// Anything else.
    Other,
}

/// The device directory (or one of its subdirectories) could not be
/// listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevDirUnlisted {
    /// The directory.
    pub dir: String,
    /// The system's error.
    pub error: String,
}

impl std::error::Error for DevDirUnlisted {}
