//! Why a collection's holders were found by the walk that found them, as
//! values ([`ScanReason`]): the choice between the /proc walk and the
//! in-kernel one, how the in-kernel walk was loaded, and why it could not
//! run. Numbers, paths and the kernel's own errors stay data; the words
//! are made in `present/words/scan.rs`. JSON's `visibility.scan_reason`
//! is those words, `visibility.scan_cause` this value.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Why the walk that ran was the one.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ScanReason {
    /// Chosen before any load (the /proc walk ran, or the in-kernel walk
    /// was chosen and no load is known).
    Picked(ScanPick),
    /// The in-kernel walk ran, chosen for `pick`, loaded as `how`.
    Walked {
        /// Why it was chosen.
        pick: ScanPick,
        /// How it was loaded.
        how: WalkHow,
        /// Why the walk `gpufree prepare` pinned was not taken, where one
        /// is pinned (absent: taken, none pinned, or none asked).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pin_not_taken: Option<CacheRefusal>,
    },
    /// The proc root is not this PID namespace's: the in-kernel walk
    /// would number other processes.
    ForeignProc {
        /// The proc root.
        proc_root: String,
    },
    /// The in-kernel walk was chosen and could not run: the /proc walk ran.
    CouldNotRun(BpfUnavailable),
}

/// Why one walk was chosen before any load.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ScanPick {
    /// `--scan procfs`.
    ProcfsAsked,
    /// `--scan bpf`.
    BpfAsked,
    /// A long-running command: loaded once, walked on every refresh.
    LongLived,
    /// Already loaded for this command.
    LoadedOnce,
    /// Fewer open files on the host than the load repays.
    FewFiles {
        /// The host's open files.
        open_files: u64,
        /// From how many the load repays.
        crossover: u64,
    },
    /// Enough open files on the host that the walk repays its load.
    ManyFiles {
        /// The host's open files.
        open_files: u64,
        /// From how many the load repays.
        crossover: u64,
    },
    /// The host's count of open files (`sys/fs/file-nr`) could not be read.
    FilesUnread,
}

/// Which in-kernel walk was loaded, and how.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WalkHow {
    /// The per-process walk, its relocation had so.
    PerProcess(Relocation),
    /// The iterator walk, the per-process one not loaded for this.
    Iterators(IteratorsWhy),
}

/// How the loaded per-process walk's relocation was had.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Relocation {
    /// From this boot's cache, made there by a command.
    Kept,
    /// From this boot's cache, made there by `gpufree prepare`.
    Prepared,
    /// Not loaded at all: the walk `gpufree prepare` loaded, verified and
    /// pinned for this boot.
    Pinned,
    /// Made from the kernel's BTF, with why the cache was not read or not
    /// written (nothing where there was simply none yet).
    Made(Vec<CacheNote>),
}

/// Why this boot's cache of the relocation was not read or not written.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CacheNote {
    /// The relocation kept there did not load.
    KeptDidNotLoad(BpfUnavailable),
    /// The file there was not used.
    NotUsed(CacheRefusal),
    /// The relocation made was not kept there.
    NotKept(CacheRefusal),
}

/// Why a cache file or its directory is not used (or not written).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CacheRefusal {
    /// An operation on `path` failed with the system's `error`.
    Io {
        /// The path.
        path: String,
        /// The system's error.
        error: String,
    },
    /// The kernel names no mount for `path`.
    NoMount {
        /// The path.
        path: String,
    },
    /// `path` is on a file system whose reads may wait on others.
    NotLocal {
        /// The path.
        path: String,
        /// Its file system's type.
        fs: String,
    },
    /// `path`'s mount is not in the mount table.
    MountNotListed {
        /// The path.
        path: String,
        /// Its mount id.
        id: u64,
    },
    /// The directory named is not an absolute path.
    NotAbsolute {
        /// The path.
        path: String,
    },
    /// The directory named goes through `..`.
    ThroughParent {
        /// The path.
        path: String,
    },
    /// A link, or not a directory.
    LinkOrNotDir {
        /// The path.
        path: String,
    },
    /// Not root's, or others may write it.
    NotRootOnly {
        /// The path.
        path: String,
    },
    /// A directory on the way to the pins, on the BPF file system, is not
    /// root's, or others may write it (its owner could rename the pins
    /// away).
    NotRootsOnTheWay {
        /// The path.
        path: String,
    },
    /// Not a regular file.
    NotRegular {
        /// The path.
        path: String,
    },
    /// Larger than a cache file may be.
    TooLarge {
        /// The path.
        path: String,
        /// The most bytes.
        max: u64,
    },
    /// Its SHA-256 differs.
    Damaged,
    /// Made by another gpufree or in another boot.
    OtherMaker,
    /// This boot's id is unreadable.
    NoBootId,
    /// Only root keeps one.
    NotRoot,
    /// Not on a BPF file system (where a loaded walk is pinned).
    NotBpfFs {
        /// The path.
        path: String,
    },
    /// Taken by another command (one uses a pinned walk at a time).
    InUse {
        /// The path.
        path: String,
    },
    /// The loaded walk has no map of this name (a pin is missing it).
    NoSuchMap {
        /// The map's name.
        name: String,
    },
}

/// Why the iterator walk, not the per-process one, is loaded.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum IteratorsWhy {
    /// A test asked for it.
    TestHook,
    /// The per-process walk's kfunc calls could not be linked.
    Link(LinkFailure),
    /// The kernel refused the per-process walk.
    Load(BpfUnavailable),
}

/// Why the per-process walk's kfunc calls could not be linked.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LinkFailure {
    /// The kernel has no such kfunc (older than 6.7, or built without it).
    NoKfunc(String),
    /// The object could not be parsed (the parser's error).
    Object(String),
    /// A code section past the object's end.
    CodePastEnd,
    /// The object calls no kfunc.
    NoKfuncCall,
    /// A call of a placeholder this loader does not know.
    Placeholder(u32),
}

/// Why the in-kernel walk cannot run here (each is a reason the /proc
/// walk runs instead). The kernel's and the loader's errors are kept as
/// they gave them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BpfUnavailable {
    /// The kernel publishes no BTF (`/sys/kernel/btf/vmlinux`).
    NoBtf(String),
    /// No permission to load BPF programs.
    NotPermitted(String),
    /// The kernel's verifier refused a program (its last words).
    Refused {
        /// The program.
        program: String,
        /// The verifier's last line.
        why: String,
    },
    /// More nodes than the walk takes.
    TooManyNodes {
        /// The nodes.
        nodes: usize,
        /// The most it takes.
        max: usize,
    },
    /// A node that is a regular file on a file system whose device
    /// numbers the kernel walk cannot match.
    ForeignFs(String),
    /// The walk did not finish within the read timeout.
    TimedOut(Duration),
    /// The command's deadline came before the walk's end.
    DeadlineFirst,
    /// An earlier walk's readers are still blocked.
    StillBlocked,
    /// The start time the kernel gives gpufree is not the one /proc shows.
    Calibration {
        /// From the walk, in ticks.
        kernel: u64,
        /// From /proc/self/stat (None: unreadable).
        proc: Option<u64>,
    },
    /// The walk wrote bytes that make no record this gpufree knows.
    BadRecords,
    /// Reading the walk failed (the system's error).
    Read(String),
    /// A walk's reader ended without its records.
    ReaderEnded,
    /// The BPF object lacks its `what` (a program, a map) `name`.
    Missing {
        /// A program or a map.
        what: BpfPart,
        /// Its name.
        name: String,
    },
    /// A function of the object lies outside its section.
    OutsideSection {
        /// The function.
        function: String,
    },
    /// The kernel takes no BTF for the object.
    NoObjectBtf,
    /// A map's value is not the size the map takes.
    MapSize {
        /// The value's bytes.
        bytes: usize,
        /// The map's value size.
        value_size: usize,
    },
    /// Any other failure of a step (an old kernel without an iterator
    /// kind, lockdown, a relocation the kernel's BTF cannot satisfy).
    Failed {
        /// Which step.
        step: BpfStep,
        /// The error and its causes, in one line.
        why: String,
    },
}

/// A part of the BPF object.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BpfPart {
    /// A program.
    Program,
    /// A map.
    Map,
}

/// A step of loading or walking that failed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BpfStep {
    /// Reading the BPF object.
    Object,
    /// Relocating it.
    Relocating,
    /// Loading its BTF.
    LoadingBtf,
    /// Finding the kernel's `bpf_iter_task`.
    FindingIterTask,
    /// Its maps.
    Maps,
    /// Creating a map.
    CreatingMap,
    /// Filling a map.
    FillingMap,
    /// Loading it (aya).
    LoadingObject,
    /// Loading a program (aya).
    LoadingProgram,
    /// Creating an iterator.
    CreatingIterator,
    /// The named map (`walk_number`, `by_ident`, `by_rdev`).
    Map(String),
}
