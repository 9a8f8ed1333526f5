//! `gpufree bundle`'s values: what goes into the archive for a bug report
//! or an incident review ([`Member`]), what was left out and why
//! ([`LeftOut`]), and the most it takes of each thing it reads
//! ([`limits`]). What it keeps of command lines and environments is
//! `model/redact.rs`'s and `model/redact_unit.rs`'s.

use serde::Serialize;

/// The most a bundle takes of each thing it reads, in one place (SPEC.md
/// states them for the user).
pub mod limits {
    /// Bytes of a version file (`/proc/version`, the NVIDIA driver's).
    pub const VERSION_FILE_BYTES: u64 = 64 * 1024;
    /// Bytes of one unit file or drop-in.
    pub const UNIT_FILE_BYTES: u64 = 256 * 1024;
    /// Bytes of unit files, all units together.
    pub const UNIT_FILES_TOTAL_BYTES: u64 = 8 << 20;
    /// Units whose files are read.
    pub const UNITS: usize = 32;
    /// Drop-ins read per unit and directory.
    pub const DROPINS_PER_DIR: usize = 16;
    /// Bytes of the audit log copied (its last records).
    pub const AUDIT_TAIL_BYTES: u64 = 1 << 20;
    /// Bytes of a recording copied (its tail).
    pub const RECORDING_TAIL_BYTES: u64 = 16 << 20;
}

/// What a file in the archive is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Content {
    /// The listing of the archive.
    Manifest,
    /// `status --json` (and `why --json`: the same document) of the
    /// collection.
    StatusJson,
    /// `why --json` of the collection (the same document as status's).
    WhyJson,
    /// `status` as a person reads it.
    StatusText,
    /// `why` as a person reads it.
    WhyText,
    /// gpufree's, the driver's and the kernel's versions.
    Versions,
    /// A file of the host as read (`/proc/version`,
    /// `/proc/driver/nvidia/version`).
    HostFile {
        /// Where it was read.
        source: String,
    },
    /// A holder's systemd unit file or drop-in.
    Unit {
        /// The unit.
        unit: String,
        /// Where it was read.
        source: String,
    },
    /// `gpufree doctor` of each unit file copied (as copied).
    Doctor,
    /// The audit records of the `--audit-log` file (its last lines).
    Audit {
        /// The file.
        source: String,
    },
    /// A recording's tail (`--recording`).
    Recording {
        /// The file.
        source: String,
    },
}

/// A version file of the host, under the proc root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionFile {
    /// The kernel's (`version`).
    Kernel,
    /// The NVIDIA driver's (`driver/nvidia/version`).
    NvidiaDriver,
}

impl VersionFile {
    /// Both, the kernel's first.
    pub const ALL: [VersionFile; 2] = [VersionFile::Kernel, VersionFile::NvidiaDriver];

    /// Its path below the proc root.
    pub fn rel(self) -> &'static str {
        match self {
            VersionFile::Kernel => "version",
            VersionFile::NvidiaDriver => "driver/nvidia/version",
        }
    }

    /// Its member's name in the archive.
    pub fn member(self) -> &'static str {
        match self {
            VersionFile::Kernel => "proc-version.txt",
            VersionFile::NvidiaDriver => "nvidia-driver-version.txt",
        }
    }
}

/// A file in the archive: its name under the archive's directory, what it
/// is, its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its path below the archive's directory.
    pub name: String,
    /// What it is.
    pub content: Content,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// What was cut from it: only its last `kept` bytes of `of` are here.
    pub cut: Option<Cut>,
}

/// A file of which only the tail was kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Cut {
    /// The bytes kept.
    pub kept: u64,
    /// The file's size.
    pub of: u64,
}

/// Something a bundle does not contain, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeftOut {
    /// What it is.
    pub what: LeftItem,
    /// Why.
    pub why: LeftWhy,
}

/// What a bundle left out: a file, a unit, or a kind of value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "name", rename_all = "kebab-case")]
pub enum LeftItem {
    /// A file, by its path.
    Path(String),
    /// A unit, by its name.
    Unit(String),
    /// The command lines, in every document.
    Cmdlines,
    /// The environments, in every document.
    Environments,
    /// The audit records in the journal (or syslog).
    JournalRecords,
    /// The holders' unit files.
    UnitFiles,
    /// The records of an audit log file.
    AuditLog,
    /// A recording.
    Recording,
    /// The collection: status and why, the versions, the unit files.
    Collection,
}

/// Why something is not in the bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum LeftWhy {
    /// Not asked for: command lines without `--with-cmdlines`,
    /// environments without `--with-env`, an audit log or a recording
    /// whose flag was not given.
    NotAsked,
    /// There is no such file.
    Missing,
    /// A symlink, not followed out of its directory.
    Symlink {
        /// Where it leads (as read, escaped when shown).
        target: String,
    },
    /// Not a regular file.
    NotRegular,
    /// Larger than a bundle takes of it.
    TooLarge {
        /// The most it takes.
        max: u64,
    },
    /// It could not be read.
    Unreadable {
        /// The error.
        error: String,
    },
    /// A line that is not JSON, which cannot be redacted.
    NotJson {
        /// How many lines.
        lines: u64,
    },
    /// Lines of a recording that are no record, or changes before the
    /// copy's first full snapshot (nothing to apply them to).
    NotReplayable {
        /// How many records.
        records: u64,
    },
    /// Not read in secure mode (setuid, file capabilities).
    Secure,
    /// Not a unit name systemd accepts.
    BadUnitName,
    /// What a bundle never reads (the journal's records).
    NotRead,
    /// More units than a bundle reads.
    TooMany {
        /// The most it reads.
        max: usize,
    },
}

/// The listing's name in the archive.
pub const MANIFEST: &str = "MANIFEST";

/// A bundle: its members and what it left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bundle {
    /// The files, in the archive's order (the manifest first once
    /// [`Bundle::with_manifest`] put it there).
    pub members: Vec<Member>,
    /// What it does not contain.
    pub left_out: Vec<LeftOut>,
}

impl Bundle {
    /// Adds a file.
    pub fn add(&mut self, name: impl Into<String>, content: Content, bytes: Vec<u8>) {
        self.add_tail(name, content, bytes, None);
    }

    /// Adds a file of which only the tail may have been kept (`cut`).
    pub fn add_tail(
        &mut self,
        name: impl Into<String>,
        content: Content,
        bytes: Vec<u8>,
        cut: Option<Cut>,
    ) {
        self.members.push(Member {
            name: name.into(),
            content,
            bytes,
            cut,
        });
    }

    /// The bundle with its listing (`bytes`, made from the members
    /// before) first, as [`MANIFEST`].
    pub fn with_manifest(mut self, bytes: Vec<u8>) -> Bundle {
        let manifest = Member {
            name: MANIFEST.into(),
            content: Content::Manifest,
            bytes,
            cut: None,
        };
        self.members.insert(0, manifest);
        self
    }

    /// Says what was left out.
    pub fn leave(&mut self, what: LeftItem, why: LeftWhy) {
        self.left_out.push(LeftOut { what, why });
    }
}
