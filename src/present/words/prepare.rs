//! `gpufree prepare` as it prints: what it did with this boot's
//! relocation of the in-kernel walk (`model::Prepared`), or why it kept
//! nothing (`model::PrepareFailure`, the one-line error), in words; and
//! its JSON document, the value beside its words.

use crate::model::{KeptFile, NothingToKeep, PrepareFailure, Prepared, Relocation, WalkPin};
use crate::present::{write_json, Printer};
use crate::safe::escape;
use serde::Serialize;
use std::fmt;
use std::io::{self, Write};

/// `prepare --json`'s document.
#[derive(Debug, Serialize)]
pub struct PrepareDoc<'a> {
    /// `made` (made from the kernel's BTF and written), `kept` (a sound
    /// file was there) or `nothing` (nothing to keep).
    pub state: &'static str,
    /// The cache file (null: nothing to keep).
    pub file: Option<&'a str>,
    /// Who made the file now kept: `prepare` or `command` (null: none).
    pub made_by: Option<&'static str>,
    /// The first load, in milliseconds (the relocation's cost where made).
    pub load_ms: Option<f64>,
    /// The load from the file, as the next command loads it.
    pub check_ms: Option<f64>,
    /// The directory where the walk is kept loaded for the boot's
    /// one-shot commands (null: not pinned; `cause` says why).
    pub pinned: Option<&'a str>,
    /// What was done, in words.
    pub reason: String,
    /// What was done, typed.
    pub cause: &'a Prepared,
}

/// `prepared`'s document.
pub fn doc(prepared: &Prepared) -> PrepareDoc<'_> {
    let pinned = match prepared {
        Prepared::Kept(KeptFile {
            pin: WalkPin::Pinned(dir),
            ..
        }) => Some(dir.as_str()),
        _ => None,
    };
    let (state, file, made_by, load_ms, check_ms) = match prepared {
        Prepared::Kept(k) => {
            let (state, by) = match k.found {
                Relocation::Kept => ("kept", "command"),
                Relocation::Prepared | Relocation::Pinned => ("kept", "prepare"),
                Relocation::Made(_) => ("made", "prepare"),
            };
            let file = Some(k.file.as_str());
            (state, file, Some(by), Some(k.load_ms), Some(k.check_ms))
        }
        Prepared::Nothing(_) => ("nothing", None, None, None, None),
    };
    PrepareDoc {
        state,
        file,
        made_by,
        load_ms,
        check_ms,
        pinned,
        reason: prepared.to_string(),
        cause: prepared,
    }
}

/// Writes what `prepare` did: its JSON document, or one line (nothing
/// where quiet).
pub fn write_prepare<W: Write>(
    w: &mut W,
    prepared: &Prepared,
    printer: &Printer,
) -> io::Result<()> {
    if printer.json() {
        return write_json(w, &doc(prepared));
    }
    if printer.quiet() {
        return Ok(());
    }
    writeln!(w, "{prepared}")
}

impl fmt::Display for Prepared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Prepared::Kept(k) => write!(f, "{k}"),
            Prepared::Nothing(why) => write!(f, "{why}"),
        }
    }
}

impl fmt::Display for KeptFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Relocated(self))?;
        match &self.pin {
            WalkPin::Pinned(dir) => write!(
                f,
                "; loaded and pinned in {} for this boot's one-shot commands",
                escape(dir)
            ),
            WalkPin::Off => Ok(()),
            WalkPin::NotPinned(why) => write!(
                f,
                "; NOT pinned for one-shot commands (each loads its own walk, slower): {why}"
            ),
        }
    }
}

/// What `prepare` did with the relocation, in words.
struct Relocated<'a>(&'a KeptFile);

impl fmt::Display for Relocated<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Relocated(kept) = self;
        let file = escape(&kept.file);
        let (load, check) = (kept.load_ms, kept.check_ms);
        match &kept.found {
            Relocation::Made(notes) => {
                write!(
                    f,
                    "Relocated the in-kernel walk to this kernel from its BTF ({load:.1} ms) \
                     and kept it in {file}; loaded back from there ({check:.1} ms): the \
                     commands of this boot load it from there"
                )?;
                let notes: Vec<String> = notes.iter().map(ToString::to_string).collect();
                if !notes.is_empty() {
                    write!(f, " (boot cache: {})", notes.join("; "))?;
                }
                Ok(())
            }
            kept => {
                let by = match kept {
                    Relocation::Prepared => "gpufree prepare",
                    _ => "a command",
                };
                write!(
                    f,
                    "This boot's relocation of the in-kernel walk is already kept in {file} \
                     (made by {by}) and loads ({load:.1} ms): kept as it is"
                )
            }
        }
    }
}

impl fmt::Display for NothingToKeep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NothingToKeep::Off => f.write_str(
                "GPUFREE_BPF_CACHE is off: nothing to keep (each command relocates the \
                 in-kernel walk itself)",
            ),
            NothingToKeep::NoKfunc(name) => write!(
                f,
                "Nothing to keep: this kernel has no {name} (kernel 6.7 and later), so \
                 commands load the iterator walk, which keeps no relocation"
            ),
        }
    }
}

impl fmt::Display for PrepareFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrepareFailure::NotRoot => f.write_str(
                "only root keeps this boot's relocation of the in-kernel walk (run it as root)",
            ),
            PrepareFailure::NotLoaded(why) => {
                write!(
                    f,
                    "the in-kernel walk does not load here: {why}; nothing kept"
                )
            }
            PrepareFailure::NotKept(why) => {
                write!(f, "the relocation loads, but was not kept: {why}")
            }
            PrepareFailure::NotReadBack(how) => write!(
                f,
                "kept, but the load after it did not take it from the file: {how}"
            ),
        }
    }
}
