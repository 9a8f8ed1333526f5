//! A holder's details read through its pinned directory fd: stat, status,
//! argv, exe (and whether only root could have put it there), cgroup,
//! wchan, the environment variables that tell who restarts it, and
//! whether it is protected (for a protected program's process only: its
//! memory map and user namespace, read as the rest is, on the scan's
//! workers under their deadline).

use super::{open_dir, read_at, read_one_at};
use crate::model::{NotProtected, Protection};
use crate::proc::parse::{self, Stat, Status};
use crate::proc::protect::{self, Named};
use crate::proc::root_only;
use crate::proc::scan::task::read_stat;
use rustix::fs::Dir;
use std::os::fd::OwnedFd;

/// What gpufree shows of a process, read through its /proc directory fd.
#[derive(Debug, Clone)]
pub struct Details {
    /// /proc/PID/stat.
    pub stat: Stat,
    /// /proc/PID/status (default when unreadable).
    pub status: Status,
    /// argv now.
    pub cmdline: Vec<String>,
    /// The executable; None when unreadable (permission, kernel thread).
    pub exe: Option<String>,
    /// Whether the executable is a file only root could have put there:
    /// owned by root, writable by nobody else, in a directory owned by root
    /// and writable by nobody else (seen through the process's own root).
    /// A daemon's name is believed only from such a file. Only looked
    /// at for a file named like one ([`protect::is_protected_exe`]):
    /// false for every other.
    pub exe_trusted: bool,
    /// Raw /proc/PID/cgroup.
    pub cgroup: Vec<u8>,
    /// /proc/PID/wchan when the process waits (not R), if readable and not "0".
    pub wchan: Option<String>,
    /// The variables of /proc/PID/environ that tell who restarts it
    /// ([`parse::SUPERVISION_ENV`]), when readable.
    pub environment: std::collections::BTreeMap<String, String>,
    /// How far its protection reaches, when it is protected
    /// ([`crate::proc::protect`]).
    pub protection: Option<Protection>,
    /// Why a protected program's process is not protected.
    pub not_protected: Option<NotProtected>,
}

/// Reads a process's details through its directory fd; Err(ESRCH/ENOENT)
/// when it is gone.
pub fn read_details(dir: &OwnedFd) -> rustix::io::Result<Details> {
    let mut stat = read_stat(dir)?;
    if stat.state == 'Z' {
        // A dead leader no longer counts itself in num_threads; its live
        // threads still show in task/. Count the tasks, leader included.
        if let Some(n) = open_dir(dir, "task")
            .ok()
            .and_then(|t| Dir::new(t).ok())
            .map(|d| {
                d.flatten()
                    .filter(|e| !e.file_name().to_bytes().starts_with(b"."))
                    .count()
            })
        {
            stat.threads = n as u32;
        }
    }
    // Without a readable status, the owner of the /proc directory is the
    // process's effective UID: never "root" by default.
    let status = read_one_at(dir, "status")
        .ok()
        .and_then(|b| parse::parse_status(&b).ok())
        .unwrap_or_else(|| Status {
            uid: rustix::fs::fstat(dir).map_or(u32::MAX, |st| st.st_uid),
            nspid: Vec::new(),
        });
    let cmdline = read_one_at(dir, "cmdline")
        .map(|b| parse::parse_cmdline(&b))
        .unwrap_or_default();
    let exe_raw = rustix::fs::readlinkat(dir, "exe", Vec::new()).ok();
    let exe = exe_raw.as_ref().map(|c| parse::escape_bytes(c.as_bytes()));
    // Two path walks, asked only where the answer is used: of a file
    // named like a protected program.
    let exe_trusted = exe_raw.as_ref().is_some_and(|raw| {
        exe.as_deref().is_some_and(protect::is_protected_exe) && exe_is_trusted(dir, raw.as_bytes())
    });
    let cgroup = read_one_at(dir, "cgroup").unwrap_or_default();
    let wchan = (stat.state != 'R')
        .then(|| read_one_at(dir, "wchan").ok())
        .flatten()
        .map(|w| parse::escape_bytes(w.trim_ascii()))
        .filter(|w| !w.is_empty() && w != "0");
    let environ = read_one_at(dir, "environ").ok();
    let environment = environ
        .as_deref()
        .map(parse::supervision_env)
        .unwrap_or_default();
    let (protection, not_protected) = protection(
        dir,
        (&stat.comm, status.uid),
        exe_raw.as_ref().map(|r| r.as_bytes()),
        exe.as_deref(),
        exe_trusted,
        environ.as_deref(),
    );
    Ok(Details {
        protection,
        not_protected,
        environment,
        wchan,
        stat,
        status,
        cmdline,
        exe,
        exe_trusted,
        cgroup,
    })
}

/// Whether the process (its comm and UID, its `exe` link raw and escaped)
/// is protected, and if it runs a protected program but is not, why not.
fn protection(
    dir: &OwnedFd,
    (comm, uid): (&str, u32),
    exe_raw: Option<&[u8]>,
    exe: Option<&str>,
    exe_trusted: bool,
    environ: Option<&[u8]>,
) -> (Option<Protection>, Option<NotProtected>) {
    match protect::named(comm, exe, exe_trusted, uid) {
        Named::Other => (None, None),
        Named::Not(why) => (None, Some(why)),
        // A name alone is believed only by a gpufree that cannot read
        // other users' executables at all: one that can (root, ptrace)
        // and could not read this one has no proof it is the daemon.
        Named::ByComm if crate::proc::me::reads_others() => (
            None,
            Some(NotProtected::Unverified {
                unread: "executable".into(),
            }),
        ),
        Named::ByComm => (Some(Protection::System), None),
        Named::Candidate(reach) => match judged(dir, reach, exe_raw.unwrap_or_default(), environ) {
            Ok(p) => (Some(p), None),
            Err(why) => (None, Some(why)),
        },
    }
}

/// A protection candidate judged on its evidence: its environment (read
/// already), its memory map, and, for a person's process, its user
/// namespace, each read through its directory fd.
fn judged(
    dir: &OwnedFd,
    reach: Protection,
    exe: &[u8],
    environ: Option<&[u8]>,
) -> Result<Protection, NotProtected> {
    let maps = read_at(dir, "maps").ok();
    let own_user_ns = (reach == Protection::User)
        .then(|| {
            let theirs = rustix::fs::readlinkat(dir, "ns/user", Vec::new()).ok()?;
            let ours = crate::proc::me::user_namespace()?;
            Some(theirs.as_bytes() == ours.as_encoded_bytes())
        })
        .flatten();
    let evidence = protect::Evidence {
        environ,
        maps: maps.as_deref(),
        own_user_ns,
    };
    protect::judge(reach, exe, &evidence)
}

/// See [`Details::exe_trusted`]. The file is the one the process runs
/// (through the `exe` link, so a path replaced since does not count); its
/// directory is looked up under the process's `root` link.
pub(super) fn exe_is_trusted(dir: &OwnedFd, path: &[u8]) -> bool {
    use rustix::fs::{statat, AtFlags};
    let Ok(file) = statat(dir, "exe", AtFlags::empty()) else {
        return false;
    };
    let Some(slash) = path.iter().rposition(|b| *b == b'/') else {
        return false;
    };
    let mut parent = b"root".to_vec();
    parent.extend_from_slice(if slash == 0 { b"/" } else { &path[..slash] });
    let Ok(parent) = std::ffi::CString::new(parent) else {
        return false;
    };
    root_only(&file)
        && statat(dir, parent.as_c_str(), AtFlags::empty()).is_ok_and(|d| root_only(&d))
}
