//! This boot's relocation of the per-process walk, kept between commands.
//!
//! Relocating the object to the running kernel means parsing the kernel's
//! whole BTF (docs/guide/07-performance.md: about 40 ms and 15 MiB), more
//! than a one-shot command's whole walk. The result depends only on the
//! object and the running kernel, so the first command of a boot keeps it
//! in a file (`holders-bpf.cache` in `/run/gpufree`, or the directory
//! `GPUFREE_BPF_CACHE` names to root's gpufree: an absolute path, each
//! directory on a local file system; `off`: none) and later ones load it:
//! the kernel's verifier still checks every load.
//!
//! What gpufree loads into the kernel must be what a gpufree made. Its
//! SHA-256 only tells a whole file from a damaged one, so the file is
//! trusted only where no one but root can have written it: the directory
//! and the file root's and writable by no one else (checked on the
//! descriptors read, never on names), whatever user gpufree runs as (a
//! user given CAP_BPF must not hand it a program of their own). Only root
//! writes one. The file also names the object and the boot it was made
//! for, and who made it (`gpufree prepare`, or a command that found
//! none: a byte inside the SHA-256, so as trusted as the rest; a file of
//! the format before it is not used, and made again). Anything else is
//! not used, and the relocation is made again.

pub mod pin;
pub mod prepare;

use crate::model::CacheRefusal;
use crate::proc::root_only;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The environment variable naming the cache's directory (`off` or
/// empty: none).
pub const ENV: &str = "GPUFREE_BPF_CACHE";
/// The directory where none is named.
const DEFAULT_DIR: &str = "/run/gpufree";
/// The file in it.
const FILE: &str = "holders-bpf.cache";
/// The file's first bytes: its format (v2: who made it, after the
/// attach id).
const MAGIC: &[u8; 24] = b"gpufree holders-bpf v2\n\0";
/// The header: the format, the SHA-256 of what made the relocation, the
/// boot id.
const HEADER: usize = MAGIC.len() + 32 + 36;
/// What, beside the object and [`RELOCATOR`], decides the relocation:
/// this gpufree's version and a revision raised with a change to what the
/// key does not hold (aya-obj's relocation), so that a gpufree that
/// relocates otherwise never loads another's.
const MAKER: &str = concat!("gpufree ", env!("CARGO_PKG_VERSION"), "; relocation 1");
/// The code that makes the relocation, in the key too: an edit to it
/// under the same version never loads a relocation it did not make.
const RELOCATOR: [&[u8]; 3] = [
    include_bytes!("../direct.rs"),
    include_bytes!("../kfunc.rs"),
    include_bytes!("../per_process.rs"),
];
/// File systems where a cache may be: local ones, whose reads do not wait
/// on a server or another process (a stuck FUSE or NFS mount would hang
/// every command).
const LOCAL_FS: [&[u8]; 11] = [
    b"tmpfs", b"ramfs", b"rootfs", b"ext2", b"ext3", b"ext4", b"xfs", b"btrfs", b"overlay", b"zfs",
    b"f2fs",
];
/// The most bytes a cache file may have.
const MAX_BYTES: u64 = 4 << 20;

/// A relocation of the object for this boot's kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relocated {
    /// The object, its instructions relocated (direct.rs).
    pub object: Vec<u8>,
    /// The kernel's id of `bpf_iter_task`.
    pub attach_btf_id: u32,
    /// Who made it.
    pub by: Maker,
}

/// Who made a kept relocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Maker {
    /// A command whose first in-kernel walk of the boot found none.
    Command,
    /// `gpufree prepare`.
    Prepare,
}

impl Maker {
    /// Its byte in the file.
    fn byte(self) -> u8 {
        match self {
            Maker::Command => 1,
            Maker::Prepare => 2,
        }
    }

    /// The maker whose byte is `b`.
    fn of(b: u8) -> Option<Maker> {
        [Maker::Command, Maker::Prepare]
            .into_iter()
            .find(|m| m.byte() == b)
    }
}

/// Why no relocation was read: none kept (`None`), or why the one there
/// was not used.
pub type NotRead = Option<CacheRefusal>;

/// `path`'s operation failed with `e`.
fn io(path: &Path, e: impl std::fmt::Display) -> CacheRefusal {
    CacheRefusal::Io {
        path: path.display().to_string(),
        error: e.to_string(),
    }
}

/// `path`, shown in a refusal.
fn shown(path: &Path) -> String {
    path.display().to_string()
}

/// The cache's directory, from the environment's value `value` (`off` or
/// empty: none; unset: the default). Another directory is taken only
/// from root: a user's gpufree (one given CAP_BPF, say) reads root's
/// cache where root keeps it, or none; so does a setuid one run by a
/// user (root only by its effective id).
pub fn dir_from(value: Option<std::ffi::OsString>) -> Option<PathBuf> {
    root_may_name(value, DEFAULT_DIR)
}

/// A directory from the environment's `value`, as [`dir_from`] takes it,
/// `default` where unset or not root's.
fn root_may_name(value: Option<std::ffi::OsString>, default: &str) -> Option<PathBuf> {
    match value {
        Some(v) if v.is_empty() || v == "off" => None,
        Some(v) if rustix::process::getuid().is_root() && rustix::process::geteuid().is_root() => {
            Some(PathBuf::from(v))
        }
        _ => Some(PathBuf::from(default)),
    }
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`).
fn boot_id() -> Option<[u8; 36]> {
    let text = std::fs::read("/proc/sys/kernel/random/boot_id").ok()?;
    text.get(..36)?.try_into().ok()
}

/// What made a relocation of `object`: the SHA-256 of [`MAKER`],
/// [`RELOCATOR`] and the object.
fn maker_key(object: &[u8]) -> [u8; 32] {
    let mut maker = Sha256::new().chain_update(MAKER.as_bytes());
    for code in RELOCATOR {
        maker.update(code);
    }
    maker.chain_update(object).finalize().into()
}

/// The header of a file for `object` in boot `boot`.
fn header(object: &[u8], boot: &[u8; 36]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&maker_key(object));
    out.extend_from_slice(boot);
    out
}

/// The file's contents for `relocated` of `object` in boot `boot`.
fn encode(object: &[u8], boot: &[u8; 36], relocated: &Relocated) -> Vec<u8> {
    let mut out = header(object, boot);
    out.extend_from_slice(&relocated.attach_btf_id.to_le_bytes());
    out.push(relocated.by.byte());
    out.extend_from_slice(&relocated.object);
    let sum = Sha256::digest(&out);
    out.extend_from_slice(&sum);
    out
}

/// The relocation in `bytes`, if they are a whole cache file for `object`
/// in boot `boot`; else why not.
fn decode(bytes: &[u8], object: &[u8], boot: &[u8; 36]) -> Result<Relocated, CacheRefusal> {
    let cut = bytes.len().checked_sub(32).ok_or(CacheRefusal::Damaged)?;
    let (body, sum) = bytes.split_at(cut);
    if Sha256::digest(body).as_slice() != sum {
        return Err(CacheRefusal::Damaged);
    }
    let rest = body
        .strip_prefix(header(object, boot).as_slice())
        .ok_or(CacheRefusal::OtherMaker)?;
    let (id, rest) = rest.split_first_chunk::<4>().ok_or(CacheRefusal::Damaged)?;
    let (by, relocated) = rest.split_first().ok_or(CacheRefusal::Damaged)?;
    Ok(Relocated {
        object: relocated.to_vec(),
        attach_btf_id: u32::from_le_bytes(*id),
        by: Maker::of(*by).ok_or(CacheRefusal::Damaged)?,
    })
}

/// Whether the mount `fd` is on is a local file system (or one of
/// `also`), found without a request to any file system (its mount id from
/// `/proc/self/fdinfo`, which the kernel's VFS writes itself, then the
/// mount table): else why not. `at`: the path, for the reason.
fn local(fd: &OwnedFd, table: &[u8], at: &Path, also: &[&[u8]]) -> Result<(), NotRead> {
    let info = format!("/proc/self/fdinfo/{}", fd.as_raw_fd());
    let info = std::fs::read(&info).map_err(|e| Some(io(Path::new(&info), e)))?;
    let path = || shown(at);
    let id = crate::proc::mounts::mnt_id_of_fdinfo(&info)
        .ok_or_else(|| Some(CacheRefusal::NoMount { path: path() }))?;
    match crate::proc::mounts::fstype_of(table, id) {
        Some(fs) if LOCAL_FS.contains(&fs) || also.contains(&fs) => Ok(()),
        Some(fs) => Err(Some(CacheRefusal::NotLocal {
            path: path(),
            fs: String::from_utf8_lossy(fs).into_owned(),
        })),
        None => Err(Some(CacheRefusal::MountNotListed { path: path(), id })),
    }
}

/// The check of every directory on the way ([`open_dir`]).
type Each<'a> = &'a mut dyn FnMut(&OwnedFd, &Path) -> Result<(), NotRead>;

/// The directory `dir`, opened one component at a time from `/`, none of
/// them a link or `..`, each found on a local file system (or one of
/// `also`) and passing `each` (given it and its path) before anything in
/// it is looked up, and the last trusted; `create`:
/// make the last (0755) where it is missing. `Err(None)`: it is missing. Each component
/// is opened as a path only (O_PATH without O_DIRECTORY: no automount is
/// set off, no file system's open is called), so no FUSE, NFS or autofs
/// server is asked. Walked by hand: openat2's RESOLVE_NO_XDEV would refuse
/// `/run` itself (a mount point), and no crate checks each mount.
fn open_dir(dir: &Path, create: bool, also: &[&[u8]], each: Each<'_>) -> Result<OwnedFd, NotRead> {
    use std::path::Component;
    if !dir.is_absolute() {
        return Err(Some(CacheRefusal::NotAbsolute { path: shown(dir) }));
    }
    let table = std::fs::read("/proc/self/mountinfo")
        .map_err(|e| Some(io(Path::new("/proc/self/mountinfo"), e)))?;
    let walk = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut fd =
        rustix::fs::open("/", walk, Mode::empty()).map_err(|e| Some(io(Path::new("/"), e)))?;
    local(&fd, &table, Path::new("/"), also)?;
    each(&fd, Path::new("/"))?;
    let mut at = PathBuf::from("/");
    let names: Vec<_> = dir.components().collect();
    for (i, part) in names.iter().enumerate() {
        let name = match part {
            Component::Normal(name) => *name,
            Component::ParentDir => {
                return Err(Some(CacheRefusal::ThroughParent { path: shown(dir) }))
            }
            _ => continue,
        };
        at.push(name);
        let not_dir = || Some(CacheRefusal::LinkOrNotDir { path: shown(&at) });
        fd = match rustix::fs::openat(&fd, name, walk, Mode::empty()) {
            Ok(next) => next,
            Err(rustix::io::Errno::NOENT) if create && i + 1 == names.len() => {
                // Explicit modes: the caller's umask (a setuid copy's is
                // its user's) must not leave a cache no CAP_BPF copy reads.
                let mode = Mode::from_raw_mode(0o755);
                rustix::fs::mkdirat(&fd, name, mode)
                    .and_then(|()| rustix::fs::chmodat(&fd, name, mode, AtFlags::empty()))
                    .and_then(|()| rustix::fs::openat(&fd, name, walk, Mode::empty()))
                    .map_err(|e| Some(io(&at, e)))?
            }
            Err(rustix::io::Errno::NOENT) if !create => return Err(None),
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => return Err(not_dir()),
            Err(e) => return Err(Some(io(&at, e))),
        };
        local(&fd, &table, &at, also)?;
        each(&fd, &at)?;
    }
    let read = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(&fd, ".", read, Mode::empty()) {
        Err(rustix::io::Errno::NOTDIR) => {
            return Err(Some(CacheRefusal::LinkOrNotDir { path: shown(dir) }))
        }
        other => other.map_err(|e| Some(io(dir, e)))?,
    };
    match rustix::fs::fstat(&fd) {
        Ok(st) if root_only(&st) => Ok(fd),
        Ok(_) => Err(Some(CacheRefusal::NotRootOnly { path: shown(dir) })),
        Err(e) => Err(Some(io(dir, e))),
    }
}

/// The cache file in `dir`, opened and checked: a regular file, trusted,
/// not too large (only a regular file is opened: opening a device may act
/// on it).
fn open_file(dir: &Path) -> Result<(std::fs::File, u64), NotRead> {
    let dir_fd = open_dir(dir, false, &[], &mut |_, _| Ok(()))?;
    let file = dir.join(FILE);
    let seen = match rustix::fs::statat(&dir_fd, FILE, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Err(None),
        Err(e) => return Err(Some(io(&file, e))),
    };
    if !FileType::from_raw_mode(seen.st_mode).is_file() {
        return Err(Some(CacheRefusal::NotRegular { path: shown(&file) }));
    }
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let fd =
        rustix::fs::openat(&dir_fd, FILE, flags, Mode::empty()).map_err(|e| Some(io(&file, e)))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| Some(io(&file, e)))?;
    let size = u64::try_from(st.st_size).unwrap_or(u64::MAX);
    if (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino) || !root_only(&st) {
        return Err(Some(CacheRefusal::NotRootOnly { path: shown(&file) }));
    }
    if size > MAX_BYTES {
        return Err(Some(CacheRefusal::TooLarge {
            path: shown(&file),
            max: MAX_BYTES,
        }));
    }
    Ok((std::fs::File::from(fd), size))
}

/// The relocation of `object` kept in `dir` for this boot; else why not.
pub fn read(dir: &Path, object: &[u8]) -> Result<Relocated, NotRead> {
    let boot = boot_id().ok_or(Some(CacheRefusal::NoBootId))?;
    let (file, size) = open_file(dir)?;
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Some(io(&dir.join(FILE), e)))?;
    decode(&bytes, object, &boot).map_err(Some)
}

/// Whether `dir` keeps a relocation of `object` for this boot, from its
/// header alone (read checks the rest).
pub fn kept(dir: &Path, object: &[u8]) -> bool {
    let mut head = [0u8; HEADER];
    let read = open_file(dir).is_ok_and(|(mut f, _)| f.read_exact(&mut head).is_ok());
    read && boot_id().is_some_and(|boot| head[..] == header(object, &boot)[..])
}

/// Keeps `relocated` of `object` in `dir` for the rest of this boot;
/// else why not (a cache that is not written only costs the next command
/// the relocation). Written beside and renamed into place, both relative
/// to the directory's descriptor (no crate does both by descriptor): a
/// directory swapped meanwhile cannot redirect either.
pub fn write(dir: &Path, object: &[u8], relocated: &Relocated) -> Result<(), CacheRefusal> {
    if !rustix::process::geteuid().is_root() {
        return Err(CacheRefusal::NotRoot);
    }
    let boot = boot_id().ok_or(CacheRefusal::NoBootId)?;
    // (Made where missing: never None.)
    let dir_fd = open_dir(dir, true, &[], &mut |_, _| Ok(()))
        .map_err(|e| e.unwrap_or_else(|| CacheRefusal::LinkOrNotDir { path: shown(dir) }))?;
    let aside = format!("{FILE}.{}", std::process::id());
    // One left by a gpufree of this PID that died writing it.
    let _ = rustix::fs::unlinkat(&dir_fd, aside.as_str(), AtFlags::empty());
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(&dir_fd, aside.as_str(), flags, Mode::from_raw_mode(0o644))
        .and_then(|f| rustix::fs::fchmod(&f, Mode::from_raw_mode(0o644)).map(|()| f))
        .map_err(|e| io(&dir.join(&aside), e))?;
    let written = std::fs::File::from(fd)
        .write_all(&encode(object, &boot, relocated))
        .map_err(|e| e.to_string())
        .and_then(|()| {
            rustix::fs::renameat(&dir_fd, aside.as_str(), &dir_fd, FILE).map_err(|e| e.to_string())
        });
    if written.is_err() {
        let _ = rustix::fs::unlinkat(&dir_fd, aside.as_str(), AtFlags::empty());
    }
    written.map_err(|e| io(&dir.join(FILE), e))
}

#[cfg(test)]
mod tests;
