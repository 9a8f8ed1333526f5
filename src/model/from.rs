//! A snapshot read back from a file (`why`, `status`, `check --from`):
//! where it came from, and why a file or a command line is refused (their
//! words are `present/words/from.rs`).

use serde::Serialize;

/// The version of the snapshot document `status --json` writes
/// (`snapshot_version`); a reader refuses a newer one. A document without
/// one is of version 1.
pub const SNAPSHOT_VERSION: u32 = 1;

/// The largest document `--from` reads.
pub const FROM_MAX_BYTES: u64 = 256 << 20;

/// A snapshot read back from a file (`--from`): the file as given (`-`:
/// stdin), and when and where the document says it was taken.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct FromFile {
    /// The path as given.
    pub path: String,
    /// When its collection began (ms since the epoch), where it says.
    pub taken_unix_ms: Option<u64>,
    /// The host it was taken on, where it says.
    pub host: Option<String>,
    /// A recording's moment: when its last record at or before that
    /// moment was written (the state is that record's; nothing was looked
    /// at since). None: a snapshot document.
    pub recorded_ms: Option<u64>,
}

/// Why `--from` cannot be used: the file, or what else was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromBad {
    /// The file could not be opened or read (the system's reason).
    Unreadable {
        /// The path as given.
        path: String,
        /// The system's reason.
        error: String,
    },
    /// Not a regular file (a directory, a FIFO, a device).
    NotRegular {
        /// The path as given.
        path: String,
    },
    /// Larger than [`FROM_MAX_BYTES`].
    TooLarge {
        /// The path as given.
        path: String,
    },
    /// Not JSON at all.
    NotJson {
        /// The path as given.
        path: String,
        /// The parser's reason (with line and column).
        error: String,
    },
    /// JSON, but no snapshot document (another command's, or not ours).
    OtherKind {
        /// The path as given.
        path: String,
        /// The parser's reason (the field missing or of the wrong type);
        /// None: not a JSON object.
        error: Option<String>,
    },
    /// Another command's document (`kill --json`, `wait --json`): a
    /// snapshot after something was done, not one a diagnosis was shown.
    AnotherCommand {
        /// The path as given.
        path: String,
        /// The command whose document it is.
        command: &'static str,
    },
    /// A snapshot document newer than this gpufree reads.
    Newer {
        /// The path as given.
        path: String,
        /// Its `snapshot_version`.
        version: u64,
    },
    /// A command that cannot run from a file (`kill`: a file pins
    /// nothing; the others watch or serve the live host).
    Command(&'static str),
    /// A flag that steers a live collection, given with `--from`.
    Flag(&'static str),
    /// A path in secure mode: a setuid gpufree reads no file its caller
    /// names (stdin, `-`, was opened with the caller's own rights).
    Secure {
        /// The path as given.
        path: String,
    },
}

/// Why `watch --replay FILE` cannot run: its file, or a flag given with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayBad {
    /// The file cannot be stepped through.
    File {
        /// The path as given.
        path: String,
        /// What is wrong.
        why: ReplayWhy,
    },
    /// A flag that needs the live host.
    Flag(&'static str),
}

/// What is wrong with a file given to `watch --replay`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayWhy {
    /// It could not be read (`Unreadable`, `NotRegular`, `TooLarge`; the
    /// path inside is the same).
    File(FromBad),
    /// It is no recording (a snapshot document, or not ours).
    NotARecording,
    /// It is a recording that cannot be read back.
    Record(super::RecordBad),
}
