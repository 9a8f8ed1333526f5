//! What a process changed of the name it was started with: its comm
//! (`prctl(PR_SET_NAME)`, what plain `pkill` and `ps -e` see), its
//! command line (setproctitle, what `pkill -f` and `ps aux` see), or
//! both; and the name it was started with, which a user's pattern is
//! written for. The scan marks a process renamed by it
//! (`proc::looks_renamed`) and the diagnosis tells the two kinds apart
//! with it, so both read the same rule.

use serde::{Deserialize, Serialize};

/// Which of its names a process changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rename {
    /// Only its comm (`prctl(PR_SET_NAME)`): the command line still names
    /// the program.
    Comm,
    /// Its command line (setproctitle), its comm unchanged.
    Cmdline,
    /// Both (setproctitle sets the comm too).
    Both,
}

impl Rename {
    /// Whether the command line was rewritten.
    pub fn cmdline(self) -> bool {
        matches!(self, Rename::Cmdline | Rename::Both)
    }

    /// Whether the comm was changed.
    pub fn comm(self) -> bool {
        matches!(self, Rename::Comm | Rename::Both)
    }
}

/// The file name of a path, without a trailing " (deleted)".
pub fn base(path: &str) -> &str {
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    path.rsplit('/').next().unwrap_or(path)
}

/// Whether `name` (a comm or an `argv[0]` base name) plausibly names the
/// program `exe_base`: equal, a prefix either way (`python3` runs
/// `python3.11`; comm is cut at 15 bytes), or a login shell's `-bash`.
pub fn names_program(name: &str, exe_base: &str) -> bool {
    let name = name.strip_prefix('-').unwrap_or(name);
    !name.is_empty() && (exe_base.starts_with(name) || name.starts_with(exe_base))
}

/// Which names a process changed: its `argv[0]` no longer names its
/// executable (the command line), or its comm names neither the
/// executable nor its first two arguments (a script run by an interpreter
/// has comm = the script's name; a comm that names only a rewritten
/// command line was changed with it). None for kernel threads, processes
/// whose exe cannot be read and ones that changed nothing: there is
/// nothing to compare, or nothing changed.
pub fn rename_of(comm: &str, cmdline: &[String], exe: Option<&str>) -> Option<Rename> {
    let exe_base = base(exe.filter(|e| !e.is_empty())?);
    let argv0 = cmdline.first()?; // zombies and kernel threads have none
    let argv0_base = base(argv0.split(' ').next().unwrap_or(argv0));
    let cmdline_changed = !names_program(argv0_base, exe_base);
    // A rewritten command line says nothing of what comm was.
    let comm_ok = names_program(comm, exe_base)
        || !cmdline_changed
            && cmdline.iter().take(2).any(|a| {
                let b = base(a);
                b.starts_with(comm)
                    || (comm.len() >= 15 && b.as_bytes().starts_with(comm.as_bytes()))
            });
    match (!comm_ok, cmdline_changed) {
        (true, true) => Some(Rename::Both),
        (true, false) => Some(Rename::Comm),
        (false, true) => Some(Rename::Cmdline),
        (false, false) => None,
    }
}

/// The program's name as a user writes it in a pattern: `argv[0]`'s base
/// name while the command line still names the program (`python3`), else
/// the executable's base name without a version suffix (`python3.12` is
/// `python3`). None when neither is known.
pub fn started_as(cmdline: &[String], exe: Option<&str>) -> Option<String> {
    let exe_base = exe.filter(|e| !e.is_empty()).map(base);
    if let (Some(argv0), Some(e)) = (cmdline.first(), exe_base) {
        let a = base(argv0.split(' ').next().unwrap_or(argv0));
        if names_program(a, e) {
            return Some(a.strip_prefix('-').unwrap_or(a).to_string());
        }
    }
    let e = exe_base?;
    // "python3.12" -> "python3": a dot followed only by digits and dots.
    let cut = match e.find('.') {
        Some(i) if i > 0 && e[i..].chars().all(|c| c == '.' || c.is_ascii_digit()) => &e[..i],
        _ => e,
    };
    (!cut.is_empty()).then(|| cut.to_string())
}
