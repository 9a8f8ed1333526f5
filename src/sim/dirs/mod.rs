//! The directories `sim` keeps the carried library and its
//! `libnvidia-ml.so.1` link in, trusted along their whole path.
//!
//! Every NVML client that `sim exec` or `sim lib`'s directory points at
//! loads the library found there, root's too, so whoever may change any
//! directory on the way could have it load their own. A directory is used
//! only when it is opened one component at a time from `/` (each opened
//! with `O_NOFOLLOW|O_DIRECTORY`: no link on the way, no `..`), each one
//! root's or this user's and writable by no one else; a world-writable
//! sticky directory (`/tmp`) is passed only into this user's own 0700
//! directory, whose entries no one else may rename. The files in it are
//! then made and checked through the descriptor (`openat` with `O_EXCL`,
//! `fstat`), never through a name looked up again, so a directory swapped
//! after the walk redirects nothing; and since no one else may change the
//! path, the path handed to the client still names what was checked.

use rustix::fs::{Access, AtFlags, Mode, OFlags, Stat};
use rustix::io::Errno;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

/// A directory opened along a trusted path.
pub(super) struct Trusted {
    /// The directory (opened as a path only: for the `*at` calls).
    pub(super) fd: OwnedFd,
    /// Its path, as walked.
    pub(super) path: PathBuf,
}

/// A directory refused, and the component at fault (its words are
/// present's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The component at fault, as walked (the whole path where it is
    /// refused whole).
    pub at: PathBuf,
    /// Why.
    pub why: Refusal,
}

/// Why a directory is not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not an absolute path.
    Relative,
    /// A path through `..`.
    DotDot,
    /// A link, or not a directory.
    Link,
    /// The last component is not this user's, or others may write it.
    NotPrivate,
    /// The last component is not writable by this process.
    NotWritable,
    /// Under a world-writable sticky directory, and not this user's own
    /// 0700 directory.
    InSticky,
    /// Neither root's nor this user's, or others may write it.
    NotOurs,
    /// The call on it failed.
    Errno(Errno),
}

impl Refused {
    fn at(at: &Path, why: Refusal) -> Refused {
        Refused {
            at: at.to_path_buf(),
            why,
        }
    }
}

/// How each component is opened: no link followed, a directory only,
/// nothing of the file system's own asked (`O_PATH`).
const WALK: OFlags = OFlags::PATH
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// The sticky bit.
const STICKY: u32 = 0o1000;

/// Opens `dir` along a trusted path for the user `uid`, creating what is
/// missing (the last component with `mode`, the others 0755, any
/// directly under a sticky directory 0700); the last must be `uid`'s and
/// writable by no one else, and, with `writable`, writable by this
/// process. Else why not, naming the component at fault.
pub(super) fn open(dir: &Path, uid: u32, mode: u32, writable: bool) -> Result<Trusted, Refused> {
    if !dir.is_absolute() {
        return Err(Refused::at(dir, Refusal::Relative));
    }
    let names = dir
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(Ok(name)),
            Component::ParentDir => Some(Err(())),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect::<Result<Vec<_>, ()>>()
        .map_err(|()| Refused::at(dir, Refusal::DotDot))?;
    let mut at = PathBuf::from("/");
    let mut fd = rustix::fs::open("/", WALK, Mode::empty())
        .map_err(|e| Refused::at(Path::new("/"), Refusal::Errno(e)))?;
    let mut st = stat(&fd, &at)?;
    let mut in_sticky = check(&st, &at, uid, false)?;
    for (i, name) in names.iter().enumerate() {
        at.push(name);
        let create = if in_sticky {
            0o700
        } else if i + 1 == names.len() {
            mode
        } else {
            0o755
        };
        fd = step(&fd, name, &at, create)?;
        st = stat(&fd, &at)?;
        in_sticky = check(&st, &at, uid, in_sticky)?;
    }
    if st.st_uid != uid || st.st_mode & 0o022 != 0 {
        return Err(Refused::at(&at, Refusal::NotPrivate));
    }
    if writable && rustix::fs::accessat(&fd, ".", Access::WRITE_OK, AtFlags::empty()).is_err() {
        return Err(Refused::at(&at, Refusal::NotWritable));
    }
    Ok(Trusted { fd, path: at })
}

/// The directory `name` in `parent`, made (`mode`) where it is missing;
/// `at` names it in errors.
fn step(
    parent: &OwnedFd,
    name: &std::ffi::OsStr,
    at: &Path,
    mode: u32,
) -> Result<OwnedFd, Refused> {
    let open = || rustix::fs::openat(parent, name, WALK, Mode::empty());
    let opened = match open() {
        Err(Errno::NOENT) => match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(mode)) {
            // Made by another gpufree meanwhile: checked all the same.
            Ok(()) | Err(Errno::EXIST) => open(),
            Err(e) => Err(e),
        },
        other => other,
    };
    opened.map_err(|e| match e {
        Errno::LOOP | Errno::NOTDIR => Refused::at(at, Refusal::Link),
        e => Refused::at(at, Refusal::Errno(e)),
    })
}

fn stat(fd: &OwnedFd, at: &Path) -> Result<Stat, Refused> {
    rustix::fs::fstat(fd).map_err(|e| Refused::at(at, Refusal::Errno(e)))
}

/// Whether the directory `st` (at `at`) may be on the path: root's or
/// `uid`'s and writable by no one else, or a sticky directory of either
/// (then what is opened in it must be `uid`'s own 0700 directory:
/// `Ok(true)`); `in_sticky`: its parent was such a sticky directory.
fn check(st: &Stat, at: &Path, uid: u32, in_sticky: bool) -> Result<bool, Refused> {
    let ours = st.st_uid == 0 || st.st_uid == uid;
    if in_sticky && (st.st_uid != uid || st.st_mode & 0o077 != 0) {
        return Err(Refused::at(at, Refusal::InSticky));
    }
    if ours && st.st_mode & 0o022 == 0 {
        return Ok(false);
    }
    if ours && st.st_mode & STICKY != 0 {
        return Ok(true);
    }
    Err(Refused::at(at, Refusal::NotOurs))
}

/// The first of `dirs` that [`open`] takes; else each one's reason.
pub(super) fn first(
    dirs: impl IntoIterator<Item = PathBuf>,
    uid: u32,
    mode: u32,
    writable: bool,
) -> Result<Trusted, Vec<Refused>> {
    let mut why = Vec::new();
    for dir in dirs {
        match open(&dir, uid, mode, writable) {
            Ok(t) => return Ok(t),
            Err(e) => why.push(e),
        }
    }
    Err(why)
}

#[cfg(test)]
mod tests;
