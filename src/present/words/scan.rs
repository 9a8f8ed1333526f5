//! The words of why the holders were found by the walk that found them
//! (`model::ScanReason`): the choice between the /proc walk and the
//! in-kernel one, how the in-kernel walk was loaded and its boot cache
//! used, and why it could not run. JSON's `visibility.scan_reason` and
//! `-v`'s line are these words.

use crate::model::{
    BpfPart, BpfStep, BpfUnavailable, CacheNote, CacheRefusal, IteratorsWhy, LinkFailure,
    Relocation, ScanPick, ScanReason, Visibility, WalkHow,
};
use std::fmt;

/// Why `v`'s holders were found by the walk that found them, in one line
/// (empty where no scan was made).
pub fn scan_reason(v: &Visibility) -> String {
    v.scan_reason
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default()
}

impl fmt::Display for ScanReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScanReason::Picked(pick) => write!(f, "{pick}"),
            ScanReason::Walked {
                pick,
                how,
                pin_not_taken,
            } => {
                write!(f, "{pick}; {how}")?;
                match pin_not_taken {
                    Some(why) => write!(f, " (the walk gpufree prepare pinned not taken: {why})"),
                    None => Ok(()),
                }
            }
            ScanReason::ForeignProc { proc_root } => write!(
                f,
                "{proc_root} is not this PID namespace's /proc: the in-kernel walk would number other processes"
            ),
            ScanReason::CouldNotRun(e) => write!(f, "the in-kernel walk could not run: {e}"),
        }
    }
}

impl fmt::Display for ScanPick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScanPick::ProcfsAsked => f.write_str("--scan procfs"),
            ScanPick::BpfAsked => f.write_str("--scan bpf"),
            ScanPick::LongLived => {
                f.write_str("a long-running command: loaded once, walked on every refresh")
            }
            ScanPick::LoadedOnce => f.write_str("loaded once for this command"),
            ScanPick::FewFiles {
                open_files,
                crossover,
            } => write!(
                f,
                "{open_files} open files on the host: below {crossover}, loading the in-kernel walk costs more than it saves"
            ),
            ScanPick::ManyFiles {
                open_files,
                crossover,
            } => write!(
                f,
                "{open_files} open files on the host (from {crossover} the walk repays its load)"
            ),
            ScanPick::FilesUnread => {
                f.write_str("the host's count of open files (sys/fs/file-nr) could not be read")
            }
        }
    }
}

impl fmt::Display for WalkHow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WalkHow::PerProcess(relocation) => write!(f, "{relocation}"),
            WalkHow::Iterators(why) => {
                write!(f, "the iterator walk, not the per-process one: {why}")
            }
        }
    }
}

impl fmt::Display for Relocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Relocation::Kept => f.write_str("relocated to this kernel from this boot's cache"),
            Relocation::Prepared => f.write_str(
                "relocated to this kernel from this boot's cache, kept there by gpufree prepare",
            ),
            Relocation::Pinned => {
                f.write_str("loaded and verified once this boot by gpufree prepare, kept pinned")
            }
            Relocation::Made(notes) if notes.is_empty() => {
                f.write_str("relocated to this kernel from its BTF")
            }
            Relocation::Made(notes) => {
                let notes: Vec<String> = notes.iter().map(ToString::to_string).collect();
                write!(
                    f,
                    "relocated to this kernel from its BTF (boot cache: {})",
                    notes.join("; ")
                )
            }
        }
    }
}

impl fmt::Display for CacheNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheNote::KeptDidNotLoad(e) => write!(f, "the one kept did not load: {e}"),
            CacheNote::NotUsed(why) => write!(f, "not used: {why}"),
            CacheNote::NotKept(why) => write!(f, "not kept: {why}"),
        }
    }
}

impl fmt::Display for CacheRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheRefusal::Io { path, error } => write!(f, "{path}: {error}"),
            CacheRefusal::NoMount { path } => {
                write!(f, "{path}: the kernel names no mount for it")
            }
            CacheRefusal::NotLocal { path, fs } => write!(
                f,
                "{path}: on a {fs} file system, whose reads may wait on others"
            ),
            CacheRefusal::MountNotListed { path, id } => {
                write!(f, "{path}: mount {id} is not in /proc/self/mountinfo")
            }
            CacheRefusal::NotAbsolute { path } => write!(f, "{path}: not an absolute path"),
            CacheRefusal::ThroughParent { path } => write!(f, "{path}: a path through .."),
            CacheRefusal::LinkOrNotDir { path } => {
                write!(f, "{path}: a link, or not a directory")
            }
            CacheRefusal::NotRootOnly { path } => {
                write!(f, "{path} is not root's, or others may write it")
            }
            CacheRefusal::NotRootsOnTheWay { path } => write!(
                f,
                "{path}, on the way to the pins, is not root's, or others may write it"
            ),
            CacheRefusal::NotRegular { path } => write!(f, "{path} is not a regular file"),
            CacheRefusal::TooLarge { path, max } => {
                write!(f, "{path} is larger than {max} bytes")
            }
            CacheRefusal::Damaged => f.write_str("damaged (its SHA-256 differs)"),
            CacheRefusal::OtherMaker => f.write_str("made by another gpufree or in another boot"),
            CacheRefusal::NoBootId => f.write_str("this boot's id is unreadable"),
            CacheRefusal::NotRoot => f.write_str("only root keeps it"),
            CacheRefusal::NotBpfFs { path } => write!(
                f,
                "{path} is not on a BPF file system (mount one: mount -t bpf bpf /sys/fs/bpf)"
            ),
            CacheRefusal::InUse { path } => write!(f, "{path} is in use by another command"),
            CacheRefusal::NoSuchMap { name } => write!(f, "the walk has no map {name}"),
        }
    }
}

impl fmt::Display for IteratorsWhy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IteratorsWhy::TestHook => f.write_str("a test hook asked for it"),
            IteratorsWhy::Link(e) => write!(f, "{e}"),
            IteratorsWhy::Load(e) => write!(f, "{e}"),
        }
    }
}

impl fmt::Display for LinkFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkFailure::NoKfunc(name) => write!(f, "the kernel has no {name}"),
            LinkFailure::Object(e) => write!(f, "the BPF object: {e}"),
            LinkFailure::CodePastEnd => f.write_str("the BPF object: a code section past its end"),
            LinkFailure::NoKfuncCall => f.write_str("the BPF object: it calls no kfunc"),
            LinkFailure::Placeholder(imm) => {
                write!(f, "the BPF object: a call of placeholder {imm:#x}")
            }
        }
    }
}

impl fmt::Display for BpfUnavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BpfUnavailable::NoBtf(e) => {
                write!(f, "no kernel BTF (/sys/kernel/btf/vmlinux): {e}")
            }
            BpfUnavailable::NotPermitted(e) => write!(
                f,
                "not permitted to load BPF programs (needs CAP_BPF and CAP_PERFMON, or root): {e}"
            ),
            BpfUnavailable::Refused { program, why } => {
                write!(f, "the kernel's verifier refused {program}: {why}")
            }
            BpfUnavailable::TooManyNodes { nodes, max } => {
                write!(f, "{nodes} device nodes, more than the walk takes ({max})")
            }
            BpfUnavailable::ForeignFs(path) => write!(
                f,
                "{path}: a regular file on a file system whose device numbers the kernel walk cannot match"
            ),
            BpfUnavailable::TimedOut(d) => {
                write!(f, "the walk did not finish within {} ms", d.as_millis())
            }
            BpfUnavailable::DeadlineFirst => {
                f.write_str("the command's deadline came before the walk's end")
            }
            BpfUnavailable::StillBlocked => {
                f.write_str("an earlier walk is still blocked in the kernel")
            }
            BpfUnavailable::Calibration { kernel, proc } => write!(
                f,
                "the kernel's start time for gpufree ({kernel} ticks) is not the one /proc shows ({})",
                proc.map_or_else(|| "unreadable".into(), |p| p.to_string())
            ),
            BpfUnavailable::BadRecords => {
                f.write_str("the walk wrote records this gpufree cannot read")
            }
            BpfUnavailable::Read(e) => write!(f, "reading the walk: {e}"),
            BpfUnavailable::ReaderEnded => {
                f.write_str("reading the walk: a walk's reader ended without its records")
            }
            BpfUnavailable::Missing { what, name } => {
                write!(f, "the BPF object: has no {what} {name}")
            }
            BpfUnavailable::OutsideSection { function } => write!(
                f,
                "relocating the BPF object: function {function} lies outside its section"
            ),
            BpfUnavailable::NoObjectBtf => {
                f.write_str("the BPF object: the kernel takes no BTF for it")
            }
            BpfUnavailable::MapSize { bytes, value_size } => write!(
                f,
                "filling a BPF map: {bytes} bytes for a map of {value_size}-byte values"
            ),
            BpfUnavailable::Failed { step, why } => write!(f, "{step}: {why}"),
        }
    }
}

impl fmt::Display for BpfPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BpfPart::Program => "program",
            BpfPart::Map => "map",
        })
    }
}

impl fmt::Display for BpfStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BpfStep::Object => "the BPF object",
            BpfStep::Relocating => "relocating the BPF object",
            BpfStep::LoadingBtf => "loading the object's BTF",
            BpfStep::Maps => "the BPF object's maps",
            BpfStep::CreatingMap => "creating a BPF map",
            BpfStep::FillingMap => "filling a BPF map",
            BpfStep::FindingIterTask => "finding the kernel's bpf_iter_task",
            BpfStep::LoadingObject => "loading the BPF object",
            BpfStep::LoadingProgram => "loading a BPF program",
            BpfStep::CreatingIterator => "creating an iterator",
            BpfStep::Map(name) => name,
        })
    }
}
