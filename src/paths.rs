//! Files a caller names for gpufree to write (`metrics --output`, `check
//! --state`, `--audit-log`): their directory is opened with no symlink
//! anywhere on its path, and everything after goes through that
//! directory's fd; a file already there is taken only when it is a regular
//! file of the real user's own with no other link. A root gpufree told a
//! path by someone else (a script, a sudo rule) then writes nothing of
//! theirs: no directory they swapped for a link, no file of root's they
//! hard-linked there.

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use std::os::fd::OwnedFd;
use std::path::Path;

/// Why a named file is not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// A symlink on the way to the directory.
    #[error("a symlink is on the way to it; give the real path of its directory")]
    LinkOnTheWay,
    /// The file itself is a symlink.
    #[error(
        "is a symlink; give the path of a regular file (a symlink would be replaced, not followed)"
    )]
    Symlink,
    /// Not a regular file (a device, FIFO, socket or directory).
    #[error(
        "exists and is not a regular file (a device, FIFO, socket or directory); not replaced"
    )]
    NotRegular,
    /// Another user's file.
    #[error("is another user's file; not written (give a path of your own)")]
    NotOurs,
    /// A file with another link elsewhere.
    #[error("has another link elsewhere (a hard link); not written")]
    Linked,
    /// Something is already there, where only a new file is written.
    #[error("already exists; not replaced (give a new name)")]
    Exists,
    /// A directory another user owns, or others may write (not sticky):
    /// they could rename or replace what is written there.
    #[error(
        "its directory is another user's, or others may write it; give a directory of your own"
    )]
    OthersDirectory,
}

/// Why a named file could not be opened: refused, or an error.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Refused (a usage error: the caller named it).
    #[error("{0}")]
    Refused(#[from] Refused),
    /// Opening failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// `dir` opened as a directory with no symlink on its path (a symlink
/// there is refused, not followed); on a kernel without `openat2` (before
/// 5.6), with its last component not followed.
pub fn open_dir(dir: &Path) -> Result<OwnedFd, OpenError> {
    let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC;
    match rustix::fs::openat2(
        rustix::fs::CWD,
        dir,
        flags,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => Ok(fd),
        Err(rustix::io::Errno::LOOP) => Err(Refused::LinkOnTheWay.into()),
        Err(rustix::io::Errno::NOSYS) => {
            rustix::fs::open(dir, flags | OFlags::NOFOLLOW, Mode::empty())
                .map_err(|e| std::io::Error::from(e).into())
        }
        Err(e) => Err(std::io::Error::from(e).into()),
    }
}

/// The directory of `path` ([`open_dir`]) and its file name.
pub fn dir_of(path: &Path) -> Result<(OwnedFd, &std::ffi::OsStr), OpenError> {
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("not a file name"))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Ok((open_dir(dir)?, name))
}

/// Whether `meta` (a file found at a named path) may be written: a regular
/// file of the real user's own, with no other link.
pub fn writable(st: &rustix::fs::Stat) -> Result<(), Refused> {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Symlink => Err(Refused::Symlink),
        FileType::RegularFile if st.st_uid != rustix::process::getuid().as_raw() => {
            Err(Refused::NotOurs)
        }
        FileType::RegularFile if st.st_nlink > 1 => Err(Refused::Linked),
        FileType::RegularFile => Ok(()),
        _ => Err(Refused::NotRegular),
    }
}

/// What is at `name` in `dir`, if anything, checked ([`writable`]):
/// `Ok(false)` when nothing is there.
pub fn existing(dir: &OwnedFd, name: &std::ffi::OsStr) -> Result<bool, OpenError> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => writable(&st).map(|()| true).map_err(OpenError::from),
        Err(rustix::io::Errno::NOENT) => Ok(false),
        Err(e) => Err(std::io::Error::from(e).into()),
    }
}

/// `path` opened to append (created `mode` when absent), never through a
/// link, never blocking on a FIFO, and checked after opening
/// ([`writable`]): the file the caller named, and theirs.
pub fn open_append(path: &Path, mode: u32) -> Result<std::fs::File, OpenError> {
    let (dir, name) = dir_of(path)?;
    open_append_at(&dir, name, mode)
}

/// Whether a directory opened by [`open_dir`] is one nobody else controls:
/// the real user's own or root's, and writable by no one else unless
/// sticky (where only an entry's owner may rename or remove it).
pub fn trusted_dir(dir: &OwnedFd) -> Result<(), OpenError> {
    let st = rustix::fs::fstat(dir).map_err(std::io::Error::from)?;
    let owner_ok = st.st_uid == rustix::process::getuid().as_raw() || st.st_uid == 0;
    let others_write = st.st_mode & 0o022 != 0 && st.st_mode & 0o1000 == 0;
    if !owner_ok || others_write {
        return Err(Refused::OthersDirectory.into());
    }
    Ok(())
}

/// `name` in `dir` opened as [`open_append`] opens a path, and readable
/// (a recorder reads how its file ends).
pub fn open_append_at(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    mode: u32,
) -> Result<std::fs::File, OpenError> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDWR
            | OFlags::APPEND
            | OFlags::CREATE
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::NOCTTY
            | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP => OpenError::Refused(Refused::Symlink),
        e => OpenError::Io(e.into()),
    })?;
    writable(&rustix::fs::fstat(&fd).map_err(std::io::Error::from)?)?;
    Ok(std::fs::File::from(fd))
}

/// Why root may not load the library a caller named (its words are
/// present's).
#[derive(Debug)]
pub enum Unloadable {
    /// A file or directory on the way could not be read.
    Unread {
        /// It.
        path: std::path::PathBuf,
        /// The error.
        error: std::io::Error,
    },
    /// A file or directory on the way is not root's, or others may write
    /// it.
    NotRoots {
        /// It.
        path: std::path::PathBuf,
    },
}

/// `path` created new (`O_EXCL`, `mode`) through its directory reached
/// without links, in a directory nobody else controls ([`trusted_dir`],
/// the rule `record --out` keeps): whatever is there already, a file or a
/// FIFO, is refused ([`Refused::Exists`]; a symlink, [`Refused::Symlink`]),
/// never opened or replaced.
pub fn create_new(path: &Path, mode: u32) -> Result<std::fs::File, OpenError> {
    let (dir, name) = dir_of(path)?;
    trusted_dir(&dir)?;
    let fd = rustix::fs::openat(
        &dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP => OpenError::Refused(Refused::Symlink),
        rustix::io::Errno::EXIST => OpenError::Refused(what_is_there(&dir, name)),
        e => OpenError::Io(e.into()),
    })?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(std::io::Error::from)?;
    Ok(std::fs::File::from(fd))
}

/// Why `name` in `dir`, found there already, is not created: a symlink
/// (`O_EXCL` says `EEXIST` for one, not `ELOOP`) or anything else.
fn what_is_there(dir: &OwnedFd, name: &std::ffi::OsStr) -> Refused {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => Refused::Symlink,
        _ => Refused::Exists,
    }
}

/// The path root loads for the library named `path` (`--nvml-lib`, a
/// simulator's library), or why root may not: the file it names, links
/// followed, and every directory above it are root's and writable by no
/// one else (a sticky directory like /tmp may be world-writable: only the
/// owner of an entry may replace it, and each entry here is root's). The
/// path returned is that resolved one, so what is loaded later is what was
/// checked: nobody else can change where it leads. A missing file loads
/// nothing; its deepest existing directory is checked alike.
pub fn root_loadable(path: &Path) -> Result<std::path::PathBuf, Unloadable> {
    use std::os::unix::fs::MetadataExt;
    // The deepest part of the path that exists, resolved, and the rest.
    let mut rest = Vec::new();
    let mut at = path;
    let real = loop {
        match std::fs::canonicalize(at) {
            Ok(real) => break real,
            Err(_) => {
                rest.push(at.file_name().map(std::ffi::OsStr::to_os_string));
                at = match at.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
            }
        }
    };
    for p in real.ancestors() {
        let m = std::fs::metadata(p).map_err(|error| Unloadable::Unread {
            path: p.to_path_buf(),
            error,
        })?;
        let others_write = m.mode() & 0o022 != 0;
        let sticky_dir = m.is_dir() && m.mode() & 0o1000 != 0;
        if m.uid() != 0 || (others_write && !sticky_dir) {
            return Err(Unloadable::NotRoots {
                path: p.to_path_buf(),
            });
        }
    }
    Ok(rest
        .into_iter()
        .rev()
        .flatten()
        .fold(real, |p, part| p.join(part)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_directory_behind_a_link_and_a_hard_linked_file_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, tmp.path().join("link")).unwrap();
        let through = tmp.path().join("link/audit.log");
        assert!(matches!(
            open_append(&through, 0o600),
            Err(OpenError::Refused(Refused::LinkOnTheWay))
        ));
        assert!(!real.join("audit.log").exists());
        let file = real.join("audit.log");
        open_append(&file, 0o600)
            .unwrap()
            .write_all(b"one\n")
            .unwrap();
        std::fs::hard_link(&file, tmp.path().join("other")).unwrap();
        assert!(matches!(
            open_append(&file, 0o600),
            Err(OpenError::Refused(Refused::Linked))
        ));
        std::os::unix::fs::symlink(&file, real.join("sym")).unwrap();
        assert!(matches!(
            open_append(&real.join("sym"), 0o600),
            Err(OpenError::Refused(Refused::Symlink))
        ));
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "one\n");
    }

    #[test]
    fn create_new_calls_a_link_a_link_and_a_file_there_already_there() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("b.tgz");
        create_new(&file, 0o600).unwrap();
        assert!(matches!(
            create_new(&file, 0o600),
            Err(OpenError::Refused(Refused::Exists))
        ));
        let link = tmp.path().join("link.tgz");
        std::os::unix::fs::symlink(tmp.path().join("nowhere"), &link).unwrap();
        assert!(matches!(
            create_new(&link, 0o600),
            Err(OpenError::Refused(Refused::Symlink))
        ));
        assert!(!tmp.path().join("nowhere").exists());
    }

    #[test]
    fn create_new_refuses_a_directory_others_may_write() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            create_new(&open.join("b.tgz"), 0o600),
            Err(OpenError::Refused(Refused::OthersDirectory))
        ));
        assert!(!open.join("b.tgz").exists());
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        create_new(&open.join("b.tgz"), 0o600).unwrap();
    }

    #[test]
    fn root_loads_only_a_library_only_root_may_write() {
        use std::os::unix::fs::PermissionsExt;
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let lib = tmp.path().join("libnvidia-ml.so.1");
        std::fs::write(&lib, b"\x7fELF").unwrap();
        assert_eq!(root_loadable(&lib).unwrap(), lib.canonicalize().unwrap());
        // Through a link: the resolved path is what is loaded.
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(tmp.path(), &link).unwrap();
        let through = link.join("libnvidia-ml.so.1");
        assert_eq!(
            root_loadable(&through).unwrap(),
            lib.canonicalize().unwrap()
        );
        std::os::unix::fs::chown(&lib, Some(65534), None).unwrap();
        assert!(root_loadable(&lib).is_err(), "another user's file");
        std::os::unix::fs::chown(&lib, Some(0), None).unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(root_loadable(&lib).is_err(), "a directory others may write");
        assert_eq!(
            root_loadable(Path::new("/nonexistent/libnvidia-ml.so.1")).unwrap(),
            Path::new("/nonexistent/libnvidia-ml.so.1")
        );
    }
}
