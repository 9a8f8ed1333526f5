//! Why the in-kernel scan cannot run here, from the loader's errors: each
//! is a reason the /proc scan runs instead, named in `visibility`.

use crate::model::{BpfPart, BpfStep};
use aya::programs::ProgramError;

/// Why the in-kernel scan cannot run here (each is a reason the /proc scan
/// runs instead): a value of the model, its words made in `present/`.
pub use crate::model::BpfUnavailable as Unavailable;

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

/// `step` failed with `e`: not permitted (EPERM), or another failure.
pub(super) fn failed(step: BpfStep, e: &(dyn std::error::Error + 'static)) -> Unavailable {
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
pub(super) fn missing(what: BpfPart, name: &str) -> Unavailable {
    Unavailable::Missing {
        what,
        name: name.to_string(),
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
        _ => failed(BpfStep::LoadingProgram, &e),
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
    Unavailable::Refused {
        program: program.to_string(),
        why,
    }
}
