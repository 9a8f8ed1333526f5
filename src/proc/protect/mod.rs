//! Which processes are protected: driver daemons and display servers that
//! no kill includes by default. A protected process is the daemon's own
//! executable (a file only root could have placed), run by the account it
//! runs as on real hosts, with no one else's code loaded into it: a
//! preload in its environment, or an executable mapping of a file outside
//! the system's library directories, makes it any holder. A display
//! server or MPS daemon run by a person's account is that person's, and
//! protected only within that person's own kills.
//!
//! Pure rules over what the scan read; `scan/details.rs` reads the
//! evidence (environment, memory map, user namespace) through the
//! process's pinned directory fd, and only for a candidate ([`named`]).

use super::{base, parse};
use crate::model::{NotProtected, Protection};

/// Processes that are never part of a kill by default: NVIDIA's driver
/// daemons (persistence, fabric manager, DCGM host engine, MPS) and display
/// servers. A GPU reset fails while they hold the GPU. (gpufree itself
/// never opens a GPU node; the kill path protects its own PID and ancestors.)
pub const PROTECTED: &[&str] = &[
    "nvidia-persistenced",
    "nv-fabricmanager",
    "nv-hostengine",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-powerd",
    "dcgm-exporter",
    "Xorg",
    "X",
    "Xwayland",
    "gnome-shell",
    "kwin_wayland",
];

/// Lowest UID of a person's account: the host's `UID_MIN` from
/// `/etc/login.defs` (500 on older Red Hat hosts), else 1000; daemons run
/// below it.
pub fn uid_min() -> u32 {
    static MIN: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *MIN.get_or_init(|| {
        std::fs::read("/etc/login.defs")
            .ok()
            .and_then(|b| login_defs_uid_min(&b))
            .unwrap_or(1000)
    })
}

/// `UID_MIN` of a `login.defs` text, if set.
pub fn login_defs_uid_min(text: &[u8]) -> Option<u32> {
    String::from_utf8_lossy(text).lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some("UID_MIN")).then(|| words.next()?.parse().ok())?
    })
}

/// Protected programs that people run under their own accounts: a desktop
/// session, a user's MPS daemon. The others are system daemons: run by a
/// person's account (the real binary with LD_PRELOAD, say), they are that
/// person's code, not the daemon.
const RUN_BY_USERS: &[&str] = &[
    "Xorg",
    "X",
    "Xwayland",
    "gnome-shell",
    "kwin_wayland",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
];

/// The directories a protected process may map executable code from
/// besides its own executable: where distributions install shared
/// libraries and the programs' private ones (Debian's multiarch
/// `/usr/lib/x86_64-linux-gnu`, Fedora's `/usr/lib64`, 32-bit and x32
/// variants, Xorg's modules under `/usr/lib/xorg`, `/usr/libexec`), each
/// root's and writable by no one else on a sound host, and the site's
/// `/usr/local/lib*` (root's by the FHS). Not `/opt`, home directories,
/// `/tmp`, or the Nix and Guix stores (any user may add files to those
/// through their daemons).
pub const SYSTEM_LIB_DIRS: &[&str] = &[
    "/usr/lib",
    "/usr/lib64",
    "/usr/lib32",
    "/usr/libx32",
    "/lib",
    "/lib64",
    "/lib32",
    "/libx32",
    "/usr/libexec",
    "/usr/local/lib",
    "/usr/local/lib64",
];

/// What a process's executable, comm and account say of its protection,
/// before any evidence of the code it runs is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    /// Not a protected program.
    Other,
    /// A protected program's name, and not protected: why.
    Not(NotProtected),
    /// Named like a protected program by comm (its executable unreadable:
    /// another user's process, for a gpufree that is not root) and run by
    /// a system account, as which no person's code runs: protected.
    ByComm,
    /// A protected program run from a file only root could have placed:
    /// protected with this reach unless the evidence ([`judge`]) says
    /// someone else's code runs in it.
    Candidate(Protection),
}

/// Whether an executable's path names a protected program (by its
/// file name): only then does it matter who could have placed it.
pub fn is_protected_exe(exe: &str) -> bool {
    PROTECTED.contains(&base(exe))
}

/// Whether the process is a protected program, from its comm, its
/// executable (`None` when unreadable), whether only root could have
/// placed that file, and its UID. comm is cut at 15 bytes, so names are
/// compared on their first 15 bytes there.
pub fn named(comm: &str, exe: Option<&str>, exe_trusted: bool, uid: u32) -> Named {
    match exe.filter(|e| !e.is_empty()) {
        Some(exe) => {
            let name = base(exe);
            if !is_protected_exe(exe) {
                Named::Other
            } else if !exe_trusted {
                Named::Not(NotProtected::UntrustedExe)
            } else if uid < uid_min() {
                Named::Candidate(Protection::System)
            } else if RUN_BY_USERS.contains(&name) {
                Named::Candidate(Protection::User)
            } else {
                Named::Not(NotProtected::PersonsAccount)
            }
        }
        None => {
            let named = PROTECTED
                .iter()
                .any(|p| *p == comm || (comm.len() == 15 && p.starts_with(comm)));
            match (named, uid < uid_min()) {
                (false, _) => Named::Other,
                (true, true) => Named::ByComm,
                (true, false) => Named::Not(NotProtected::Unverified {
                    unread: "executable".into(),
                }),
            }
        }
    }
}

/// What a candidate's /proc directory showed of the code it runs; `None`
/// where it could not be read.
#[derive(Debug, Clone, Copy, Default)]
pub struct Evidence<'a> {
    /// Its environment (`environ`).
    pub environ: Option<&'a [u8]>,
    /// Its memory map (`maps`).
    pub maps: Option<&'a [u8]>,
    /// Whether it runs in gpufree's user namespace (read only for a
    /// person's process).
    pub own_user_ns: Option<bool>,
}

/// The protection of a candidate of reach `reach` whose executable is
/// `exe` (its `exe` link, raw), given the evidence: a preload or foreign
/// code disqualifies any candidate. A system account's candidate whose
/// evidence cannot be read keeps its protection (a gpufree that is not
/// root cannot read root's daemon, and no person's code runs as a system
/// account); a person's candidate must show all of it, and run in
/// gpufree's user namespace (in another, it could mount its own library
/// directories over the system's).
pub fn judge(reach: Protection, exe: &[u8], e: &Evidence) -> Result<Protection, NotProtected> {
    if let Some((variable, value)) = e.environ.and_then(parse::preload_env) {
        return Err(NotProtected::Preload { variable, value });
    }
    if let Some(path) = e.maps.and_then(|m| foreign_code(m, exe)) {
        return Err(NotProtected::ForeignCode {
            path: parse::escape_bytes(path),
        });
    }
    if reach == Protection::System {
        return Ok(reach);
    }
    let unread = |what: &str| {
        Err(NotProtected::Unverified {
            unread: what.to_string(),
        })
    };
    match e {
        Evidence { environ: None, .. } => unread("environment"),
        Evidence { maps: None, .. } => unread("memory map"),
        Evidence {
            own_user_ns: None, ..
        } => unread("user namespace"),
        Evidence {
            own_user_ns: Some(false),
            ..
        } => Err(NotProtected::UserNamespace),
        _ => Ok(reach),
    }
}

/// The first executable mapping of `maps` (a whole /proc/PID/maps) of a
/// file other than the executable `exe` and outside [`SYSTEM_LIB_DIRS`].
/// Anonymous executable memory does not count: JIT compilers make it
/// (gnome-shell's JavaScript engine), and so do the vDSO (`[vdso]`) and
/// shared anonymous memory (`/dev/zero (deleted)`); code a process writes
/// there itself is its own program's doing, unlike a file someone else
/// chose.
pub fn foreign_code<'a>(maps: &'a [u8], exe: &[u8]) -> Option<&'a [u8]> {
    maps.split(|&b| b == b'\n')
        .filter_map(parse::parse_maps_line)
        .filter(|m| m.exec && m.path.first() == Some(&b'/'))
        .map(|m| m.path)
        .find(|path| {
            *path != exe
                && !matches!(*path, b"/dev/zero" | b"/dev/zero (deleted)")
                && !in_system_dirs(path)
        })
}

/// Whether a mapped file's path (as maps writes it) is under one of
/// [`SYSTEM_LIB_DIRS`]. A memfd (`/memfd:NAME`) has no directory: never.
/// A deleted file keeps its place: a package upgrade replaces the
/// libraries of running daemons, and only root could have put a file
/// there (another user namespace's mounts are refused before this counts
/// for a person's process, and a system account's are root's).
pub fn in_system_dirs(path: &[u8]) -> bool {
    if path.starts_with(b"/memfd:") {
        return false;
    }
    let path = path.strip_suffix(b" (deleted)").unwrap_or(path);
    SYSTEM_LIB_DIRS.iter().any(|dir| {
        path.strip_prefix(dir.as_bytes())
            .is_some_and(|rest| rest.len() > 1 && rest[0] == b'/')
    })
}

#[cfg(test)]
mod tests;
