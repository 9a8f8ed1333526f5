//! Why the in-kernel scan cannot run here, from the loader's errors: each
//! is a reason the /proc scan runs instead, named in `visibility`.

use super::{MAX_DEVS, MAX_TARGETS};
use aya::programs::ProgramError;

/// Why the in-kernel scan cannot run here (each is a reason the /proc scan
/// runs instead).
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unavailable {
    /// The kernel publishes no BTF (`/sys/kernel/btf/vmlinux`): the object
    /// cannot be relocated to it.
    #[error("no kernel BTF (/sys/kernel/btf/vmlinux): {0}")]
    NoBtf(String),
    /// No permission to load BPF programs.
    #[error("not permitted to load BPF programs (needs CAP_BPF and CAP_PERFMON, or root): {0}")]
    NotPermitted(String),
    /// The kernel's verifier refused a program (its last words).
    #[error("the kernel's verifier refused {program}: {why}")]
    Refused {
        /// The program.
        program: &'static str,
        /// The verifier's last line.
        why: String,
    },
    /// More distinct superblocks or majors among the nodes than the program
    /// takes.
    #[error("the device nodes span more than {MAX_DEVS} file systems or majors")]
    TooManyDevices,
    /// More nodes than the walk takes.
    #[error("{0} device nodes, more than the walk takes ({max})", max = MAX_TARGETS)]
    TooManyNodes(usize),
    /// A node that is a regular file (test directories only; device nodes
    /// also match by device number) on a file system whose `stat` device
    /// number may not be its superblock's (btrfs subvolumes, overlayfs):
    /// the kernel walk could miss its holders.
    #[error(
        "{0}: a regular file on a file system whose device numbers the kernel walk cannot match"
    )]
    ForeignFs(String),
    /// The walk did not finish within the read timeout (a task's memory
    /// map lock held by a task stuck in the kernel, a starved machine).
    #[error("the walk did not finish within {} ms", .0.as_millis())]
    TimedOut(std::time::Duration),
    /// The command's deadline came before the walk's end.
    #[error("the command's deadline came before the walk's end")]
    DeadlineFirst,
    /// An earlier walk's readers are still blocked.
    #[error("an earlier walk is still blocked in the kernel")]
    StillBlocked,
    /// The start time the kernel gives gpufree is not the one its /proc
    /// shows: no match could be pinned by it.
    #[error(
        "the kernel's start time for gpufree ({kernel} ticks) is not the one /proc shows ({proc})"
    )]
    Calibration {
        /// From the walk, in ticks.
        kernel: u64,
        /// From /proc/self/stat ("unreadable" when it could not be read).
        proc: String,
    },
    /// The walk wrote bytes that make no record this gpufree knows.
    #[error("the walk wrote records this gpufree cannot read")]
    BadRecords,
    /// Reading the walk failed.
    #[error("reading the walk: {0}")]
    Read(String),
    /// Any other failure of a step (an old kernel without an iterator kind,
    /// lockdown, a relocation the kernel's BTF cannot satisfy).
    #[error("{step}: {why}")]
    Failed {
        /// Which step.
        step: &'static str,
        /// Why, in one line.
        why: String,
    },
}

/// One line for an error and its causes.
pub(super) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let c_text = c.to_string();
        if !s.contains(&c_text) {
            s.push_str(": ");
            s.push_str(&c_text);
        }
        cause = c.source();
    }
    s.replace('\n', " ")
}

/// Whether an error, or one of its causes, is EPERM: the bpf() call's
/// answer to a caller without the capabilities (the verifier's refusals
/// are EACCES or EINVAL).
fn denied(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if io.raw_os_error() == Some(libc::EPERM) {
                return true;
            }
        }
        cause = c.source();
    }
    false
}

pub(super) fn failed(step: &'static str, e: &(dyn std::error::Error + 'static)) -> Unavailable {
    if denied(e) {
        Unavailable::NotPermitted(chain(e))
    } else {
        Unavailable::Failed {
            step,
            why: chain(e),
        }
    }
}

/// The object lacks its `what` (a program, a map) `name`.
pub(super) fn missing(what: &str, name: &str) -> Unavailable {
    Unavailable::Failed {
        step: "the BPF object",
        why: format!("has no {what} {name}"),
    }
}

/// A program's load failure (as aya reports it): not permitted (EPERM), refused by the
/// verifier (the line before its statistics says why), or another failure.
pub(super) fn refused_by_aya(program: &'static str, e: ProgramError) -> Unavailable {
    match &e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => refused_by_kernel(program, io_error, &verifier_log.to_string()),
        _ => failed("loading a BPF program", &e),
    }
}

/// The kernel's refusal of `program`: its error and the verifier's `log`
/// (the line before its statistics says why).
pub(super) fn refused_by_kernel(
    program: &'static str,
    e: &std::io::Error,
    log: &str,
) -> Unavailable {
    if e.raw_os_error() == Some(libc::EPERM) {
        return Unavailable::NotPermitted(e.to_string());
    }
    let lines: Vec<&str> = log
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let end = lines
        .iter()
        .position(|l| l.starts_with("verification time"))
        .unwrap_or(lines.len());
    let why = end
        .checked_sub(1)
        .and_then(|i| lines.get(i))
        .map_or_else(|| e.to_string(), |l| (*l).to_string());
    Unavailable::Refused { program, why }
}
