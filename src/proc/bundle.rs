//! What `gpufree bundle` reads of the host beside the collection: the
//! kernel's and the NVIDIA driver's version files under the proc root,
//! and the holders' systemd unit files and drop-ins in the unit
//! directories. Each read is bounded and never blocks (a FIFO, a device),
//! and nothing is read through a symlink: a unit directory is opened with
//! no link on its path, a file in it only beneath it with no link on the
//! way (a unit that is a link to elsewhere, or to `/etc/shadow`, is named
//! with where it leads, not read).

use crate::model::{LeftWhy, VersionFile};
use rustix::fs::{Mode, OFlags, ResolveFlags};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use crate::model::bundle_limits::{
    DROPINS_PER_DIR, UNIT_FILES_TOTAL_BYTES, UNIT_FILE_BYTES, VERSION_FILE_BYTES,
};

/// The version files under the proc root: the kernel's and the NVIDIA
/// driver's, each with its path, its bytes or why not.
pub fn versions(proc_root: &Path) -> Vec<(VersionFile, FileRead)> {
    VersionFile::ALL
        .iter()
        .map(|&file| {
            let path = proc_root.join(file.rel());
            let read = open_plain(&path).and_then(|f| bounded(f, VERSION_FILE_BYTES));
            (file, (path, read))
        })
        .collect()
}

/// `path` opened to read, never through a final link, never blocking.
fn open_plain(path: &Path) -> Result<OwnedFd, LeftWhy> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    rustix::fs::open(path, flags | OFlags::NOFOLLOW, Mode::empty()).map_err(left)
}

/// Why an open or read failed, as the bundle says it.
fn left(e: rustix::io::Errno) -> LeftWhy {
    match e {
        rustix::io::Errno::NOENT => LeftWhy::Missing,
        e => LeftWhy::Unreadable {
            error: std::io::Error::from(e).to_string(),
        },
    }
}

/// The bytes of an opened regular file, at most `max` (more is refused).
fn bounded(fd: OwnedFd, max: u64) -> Result<Vec<u8>, LeftWhy> {
    let st = rustix::fs::fstat(&fd).map_err(left)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(LeftWhy::NotRegular);
    }
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| LeftWhy::Unreadable {
            error: e.to_string(),
        })?;
    if bytes.len() as u64 > max {
        return Err(LeftWhy::TooLarge { max });
    }
    Ok(bytes)
}

/// A file read (a version file, a unit file): where, and its bytes or why
/// not.
pub type FileRead = (PathBuf, Result<Vec<u8>, LeftWhy>);

/// `unit`'s files in `dirs`: its unit file from the first directory that
/// has it as a file (a template instance falls back to its template), and
/// its drop-ins (`UNIT.d/*.conf`) from every directory; a link met on the
/// way is listed with where it leads. The caller has checked the name
/// (`restart::is_unit_name`). `budget` is what is left of the bytes of
/// all units' files together: each file is read only up to it (never
/// more is held), and what is read is taken from it.
pub fn unit_files(dirs: &[PathBuf], unit: &str, budget: &mut u64) -> Vec<FileRead> {
    let template = unit.split_once('@').and_then(|(head, rest)| {
        let suffix = rest.rsplit_once('.')?.1;
        Some(format!("{head}@.{suffix}"))
    });
    let names: Vec<&str> = std::iter::once(unit).chain(template.as_deref()).collect();
    let opened: Vec<(&PathBuf, OwnedFd)> = dirs
        .iter()
        .filter_map(|d| Some((d, crate::paths::open_dir(d).ok()?)))
        .collect();
    let mut out = Vec::new();
    'main: for name in &names {
        for (dir, fd) in &opened {
            match beneath(fd, Path::new(name), false) {
                Err(LeftWhy::Missing) => {}
                Ok(f) => {
                    out.push((dir.join(name), budgeted(f, budget)));
                    break 'main;
                }
                Err(why) => out.push((dir.join(name), Err(symlink(fd, name, why)))),
            }
        }
    }
    for name in &names {
        for (dir, fd) in &opened {
            out.extend(dropins(dir, fd, name, budget));
        }
    }
    out
}

/// The drop-ins of `name` in one unit directory, in file-name order.
fn dropins(dir: &Path, fd: &OwnedFd, name: &str, budget: &mut u64) -> Vec<FileRead> {
    let sub = format!("{name}.d");
    let Ok(dfd) = beneath(fd, Path::new(&sub), true) else {
        return Vec::new();
    };
    let Ok(listing) = rustix::fs::Dir::read_from(&dfd) else {
        return Vec::new();
    };
    let mut names: Vec<String> = listing
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".conf") && !n.starts_with('.'))
        .collect();
    names.sort();
    names
        .into_iter()
        .take(DROPINS_PER_DIR)
        .map(|n| {
            let read = match beneath(&dfd, Path::new(&n), false) {
                Ok(f) => budgeted(f, budget),
                Err(why) => Err(symlink(&dfd, &n, why)),
            };
            (dir.join(&sub).join(&n), read)
        })
        .collect()
}

/// A unit file's bytes: at most [`UNIT_FILE_BYTES`], and at most what is
/// left of `budget` (then refused as beyond the total), taken from it.
fn budgeted(fd: OwnedFd, budget: &mut u64) -> Result<Vec<u8>, LeftWhy> {
    let max = UNIT_FILE_BYTES.min(*budget);
    let bytes = bounded(fd, max).map_err(|why| match why {
        LeftWhy::TooLarge { .. } if max < UNIT_FILE_BYTES => LeftWhy::TooLarge {
            max: UNIT_FILES_TOTAL_BYTES,
        },
        why => why,
    })?;
    *budget -= bytes.len() as u64;
    Ok(bytes)
}

/// `name` opened beneath `dir` with no link on the way (a directory when
/// `directory`), never blocking; a link is refused, not followed.
fn beneath(dir: &OwnedFd, name: &Path, directory: bool) -> Result<OwnedFd, LeftWhy> {
    let mut flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    if directory {
        flags |= OFlags::DIRECTORY;
    }
    let how = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    match rustix::fs::openat2(dir, name, flags, Mode::empty(), how) {
        Ok(fd) => Ok(fd),
        // Before 5.6: the last component alone not followed.
        Err(rustix::io::Errno::NOSYS) => {
            rustix::fs::openat(dir, name, flags | OFlags::NOFOLLOW, Mode::empty()).map_err(left)
        }
        Err(e) => Err(left(e)),
    }
}

/// Why `name` in `dir` was not read: where it leads when it is a link,
/// else `why`.
fn symlink(dir: &OwnedFd, name: &str, why: LeftWhy) -> LeftWhy {
    match rustix::fs::readlinkat(dir, name, Vec::new()) {
        Ok(target) => LeftWhy::Symlink {
            target: target.to_string_lossy().into_owned(),
        },
        Err(_) => why,
    }
}

#[cfg(test)]
mod tests {
    use super::{unit_files, versions, UNIT_FILES_TOTAL_BYTES, UNIT_FILE_BYTES};
    use crate::model::LeftWhy;

    #[test]
    fn unit_files_read_the_first_and_every_dropin_and_follow_no_link() {
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        std::fs::create_dir_all(a.join("x.service.d")).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(t.path().join("secret"), "root's").unwrap();
        std::os::unix::fs::symlink(t.path().join("secret"), a.join("x.service")).unwrap();
        std::fs::write(b.join("x.service"), "[Service]\n").unwrap();
        std::fs::write(a.join("x.service.d/10-a.conf"), "[Service]\nRestart=no\n").unwrap();
        std::os::unix::fs::symlink("../../secret", a.join("x.service.d/20-b.conf")).unwrap();
        let mut unbounded = u64::MAX;
        let got = unit_files(&[a.clone(), b.clone()], "x.service", &mut unbounded);
        assert!(
            matches!(&got[0].1, Err(LeftWhy::Symlink { target }) if target.ends_with("secret"))
        );
        assert_eq!(got[1], (b.join("x.service"), Ok(b"[Service]\n".to_vec())));
        assert_eq!(got[2].0, a.join("x.service.d/10-a.conf"));
        assert!(matches!(&got[3].1, Err(LeftWhy::Symlink { .. })));
        assert_eq!(got.len(), 4);
        std::fs::write(
            b.join("big.service"),
            vec![b'#'; UNIT_FILE_BYTES as usize + 1],
        )
        .unwrap();
        let big = unit_files(std::slice::from_ref(&b), "big.service", &mut unbounded);
        assert_eq!(
            big[0].1,
            Err(LeftWhy::TooLarge {
                max: UNIT_FILE_BYTES
            })
        );
        // The total is spent while reading: a file past it is not held.
        let mut budget = 12;
        let got = unit_files(&[a, b], "x.service", &mut budget);
        assert_eq!(got[1].1, Ok(b"[Service]\n".to_vec()));
        assert_eq!(
            got[2].1,
            Err(LeftWhy::TooLarge {
                max: UNIT_FILES_TOTAL_BYTES
            })
        );
        assert_eq!(budget, 2);
    }

    #[test]
    fn versions_are_read_under_the_root() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("version"), "Linux 6.1\n").unwrap();
        let v = versions(t.path());
        assert_eq!(v[0].1 .1, Ok(b"Linux 6.1\n".to_vec()));
        assert_eq!(v[1].1 .1, Err(LeftWhy::Missing));
    }
}
