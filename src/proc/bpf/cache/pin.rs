//! The per-process walk `gpufree prepare` loads once and keeps loaded for
//! the rest of the boot, pinned in a BPF file system, so that a one-shot
//! command neither relocates nor verifies it: it opens the pins and walks.
//!
//! The pins are in a directory named by what made the walk (the cache's
//! own key: this gpufree's version, its relocating code and the object;
//! the BPF file system lasts one boot), under `/sys/fs/bpf/gpufree` or the
//! directory `GPUFREE_BPF_PIN` names to root's gpufree (`off`: none). They
//! are trusted by the cache's rules: every directory on the way opened one
//! at a time without following a link, each on a local file system, the
//! last ones on the BPF file system and root's, writable by no one else,
//! and every pin root's. The pinned program shares its maps (the targets,
//! their prefilter, the walk's number and claims) with every command that
//! takes it, so one command at a time takes it: an exclusive lock on its
//! directory, held as long as the command keeps the walk. A command that
//! finds it taken, missing or refused loads its own, as before. A command
//! that takes it writes its own targets in place of the last one's, and
//! numbers its walks on from the last one's (the claims of an earlier
//! walk never hold in a later one).

use super::super::direct::Direct;
use super::super::syscalls;
use super::{io, maker_key, open_dir, root_may_name, shown, NotRead};
use crate::model::CacheRefusal;
use crate::proc::root_only;
use aya::maps::{Map, MapData};
use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags};
use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The environment variable naming the pins' directory (`off` or empty:
/// none).
pub const ENV: &str = "GPUFREE_BPF_PIN";
/// The directory where none is named.
const DEFAULT_DIR: &str = "/sys/fs/bpf/gpufree";
/// The BPF file system's magic (`statfs`).
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;
/// The file systems on the way besides local ones: sysfs (`/sys`) and the
/// BPF file system, both in the kernel's memory.
const PIN_FS: [&[u8]; 2] = [b"sysfs", b"bpf"];
/// The program's pin.
const PROGRAM: &str = "walk";
/// The maps a command writes: their names in the object, and pinned.
const MAPS: [(&str, &str); 4] = [
    ("walk_number", "walk_number"),
    ("by_ident", "by_ident"),
    ("by_rdev", "by_rdev"),
    (".bss", "prefilter"),
];

/// The pins' directory, from the environment's `value`, as the cache's;
/// none for a gpufree whose real user is not root (a setuid copy a user
/// runs): one command at a time takes the pins, and a user's command,
/// stopped while it holds them, would keep every other command from them.
pub fn dir_from(value: Option<std::ffi::OsString>) -> Option<PathBuf> {
    if !rustix::process::getuid().is_root() {
        return None;
    }
    root_may_name(value, DEFAULT_DIR)
}

/// The name of the pins' directory for `object`.
fn key_name(object: &[u8]) -> String {
    maker_key(object)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `name` for the kernel.
fn c_name(name: &str) -> CString {
    // Our own constant names and hex: never a NUL inside.
    CString::new(name).unwrap_or_default()
}

/// `dir`, opened by the cache's rules and on a BPF file system, every
/// directory on the way below the BPF file system's mount root's and
/// writable by no one else ([`owned_on_the_way`]).
fn open_root(dir: &Path, create: bool) -> Result<OwnedFd, NotRead> {
    let mut on_bpf = false;
    let mut each = |fd: &OwnedFd, at: &Path| owned_on_the_way(fd, at, &mut on_bpf);
    let fd = open_dir(dir, create, &PIN_FS, &mut each)?;
    match rustix::fs::fstatfs(&fd) {
        // f_type's type differs between targets (i64 on x86-64).
        #[allow(clippy::unnecessary_cast)]
        Ok(st) if st.f_type as i64 == BPF_FS_MAGIC => Ok(fd),
        Ok(_) => Err(Some(CacheRefusal::NotBpfFs { path: shown(dir) })),
        Err(e) => Err(Some(io(dir, e))),
    }
}

/// Whether `fd` (a directory at `at` on the way to the pins) is one no
/// user controls, where it is on a BPF file system (`on_bpf`: whether the
/// one above it was): root's and writable by no one else, so that no user
/// can rename the pins away; a mount root may be sticky and writable by
/// all (a plain `mount -t bpf` makes it 1777), where only the owner of an
/// entry may rename it. Directories above the BPF file system are the
/// cache's to judge.
fn owned_on_the_way(fd: &OwnedFd, at: &Path, on_bpf: &mut bool) -> Result<(), NotRead> {
    let above = *on_bpf;
    // f_type's type differs between targets (i64 on x86-64).
    #[allow(clippy::unnecessary_cast)]
    let bpf = rustix::fs::fstatfs(fd).map_err(|e| Some(io(at, e)))?.f_type as i64 == BPF_FS_MAGIC;
    *on_bpf = bpf;
    if !bpf {
        return Ok(());
    }
    let st = rustix::fs::fstat(fd).map_err(|e| Some(io(at, e)))?;
    let sticky_root = !above && st.st_uid == 0 && st.st_mode & 0o1000 != 0;
    if root_only(&st) || sticky_root {
        return Ok(());
    }
    Err(Some(CacheRefusal::NotRootsOnTheWay { path: shown(at) }))
}

/// The directory `name` in `root`, opened and trusted.
fn open_key(root: &OwnedFd, name: &str, at: &Path) -> Result<OwnedFd, NotRead> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(root, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Err(None),
        Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
            return Err(Some(CacheRefusal::LinkOrNotDir { path: shown(at) }))
        }
        Err(e) => return Err(Some(io(at, e))),
    };
    match rustix::fs::fstat(&fd) {
        Ok(st) if root_only(&st) => Ok(fd),
        Ok(_) => Err(Some(CacheRefusal::NotRootOnly { path: shown(at) })),
        Err(e) => Err(Some(io(at, e))),
    }
}

/// The object pinned as `name` in `dir`: root's, then opened.
fn get(dir: &OwnedFd, name: &str, at: &Path) -> Result<OwnedFd, NotRead> {
    let path = at.join(name);
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if root_only(&st) => {}
        Ok(_) => return Err(Some(CacheRefusal::NotRootOnly { path: shown(&path) })),
        Err(rustix::io::Errno::NOENT) => return Err(None),
        Err(e) => return Err(Some(io(&path, e))),
    }
    syscalls::obj_get(dir.as_fd(), &c_name(name)).map_err(|e| Some(io(&path, e)))
}

/// The walk pinned in `dir` for `object`, taken by this command alone
/// until the lock is dropped; `Err(None)`: none is pinned.
pub struct Taken {
    /// The walk: its program and the maps a command writes.
    pub walk: Direct,
    /// The lock on its directory.
    pub lock: OwnedFd,
}

/// Takes the walk pinned in `dir` for `object`; else why not (`None`:
/// none is pinned).
pub fn take(dir: &Path, object: &[u8]) -> Result<Taken, NotRead> {
    let root = open_root(dir, false)?;
    let name = key_name(object);
    let at = dir.join(&name);
    let key = open_key(&root, &name, &at)?;
    match rustix::fs::flock(&key, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => {
            return Err(Some(CacheRefusal::InUse { path: shown(&at) }))
        }
        Err(e) => return Err(Some(io(&at, e))),
    }
    let program = get(&key, PROGRAM, &at)?;
    let mut maps = HashMap::new();
    for (object_name, pinned) in MAPS {
        let fd = get(&key, pinned, &at)?;
        let map = MapData::from_fd(fd)
            .and_then(Map::from_map_data)
            .map_err(|e| Some(io(&at.join(pinned), e)))?;
        maps.insert(object_name.to_string(), map);
    }
    Ok(Taken {
        walk: Direct { maps, program },
        lock: key,
    })
}

/// The descriptor of `map`, of the kinds the walk's maps are.
fn map_fd(map: &Map) -> Option<BorrowedFd<'_>> {
    match map {
        Map::Array(d) | Map::HashMap(d) => Some(d.fd().as_fd()),
        _ => None,
    }
}

/// Pins `walk` (loaded for `object`) in `dir` for the rest of the boot,
/// unless a whole set of its pins is there already: the directory of its
/// pins. Only root.
pub fn keep(dir: &Path, object: &[u8], walk: &Direct) -> Result<PathBuf, CacheRefusal> {
    if !rustix::process::geteuid().is_root() {
        return Err(CacheRefusal::NotRoot);
    }
    let made = |e: NotRead| e.unwrap_or_else(|| CacheRefusal::LinkOrNotDir { path: shown(dir) });
    let root = open_root(dir, true).map_err(made)?;
    let name = key_name(object);
    let at = dir.join(&name);
    if let Ok(key) = open_key(&root, &name, &at) {
        let whole = std::iter::once(PROGRAM)
            .chain(MAPS.iter().map(|m| m.1))
            .all(|pin| get(&key, pin, &at).is_ok());
        if whole {
            return Ok(at);
        }
        remove(&root, &name);
    }
    // (The BPF file system refuses a name with a dot.)
    let aside = format!("{name}_{}", std::process::id());
    remove(&root, &aside);
    let pinned = pin_all(&root, &aside, &dir.join(&aside), walk).and_then(|()| {
        rustix::fs::renameat(&root, aside.as_str(), &root, name.as_str()).map_err(|e| io(&at, e))
    });
    if pinned.is_err() {
        remove(&root, &aside);
    }
    pinned.map(|()| {
        remove_others(&root, &name);
        at
    })
}

/// Removes the pins of other gpufree versions or builds in `root` (every
/// directory named like a key, or a key's directory being made, but
/// `ours` and ours being made by another prepare): their walks stay
/// loaded until their pins go.
fn remove_others(root: &OwnedFd, ours: &str) {
    let Ok(dir) = rustix::fs::Dir::read_from(root) else {
        return;
    };
    let names: Vec<String> = dir
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().ok().map(str::to_string))
        .collect();
    for name in names {
        let key = name.split('_').next().unwrap_or_default();
        let like_a_key = key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit());
        if like_a_key && key != ours {
            remove(root, &name);
        }
    }
}

/// Makes the directory `name` in `root` (0700) and pins `walk` in it.
fn pin_all(root: &OwnedFd, name: &str, at: &Path, walk: &Direct) -> Result<(), CacheRefusal> {
    let mode = Mode::from_raw_mode(0o700);
    rustix::fs::mkdirat(root, name, mode).map_err(|e| io(at, e))?;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dir = rustix::fs::openat(root, name, flags, Mode::empty()).map_err(|e| io(at, e))?;
    let pin = |fd: BorrowedFd<'_>, pin: &str| {
        syscalls::obj_pin(fd, dir.as_fd(), &c_name(pin)).map_err(|e| io(&at.join(pin), e))
    };
    pin(walk.program.as_fd(), PROGRAM)?;
    for (object_name, pinned) in MAPS {
        let fd = walk.maps.get(object_name).and_then(map_fd);
        let fd = fd.ok_or_else(|| CacheRefusal::NoSuchMap {
            name: object_name.to_string(),
        })?;
        pin(fd, pinned)?;
    }
    Ok(())
}

/// Removes the directory `name` in `root` and our pins in it (what else
/// is there stays, and so does the directory).
fn remove(root: &OwnedFd, name: &str) {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    if let Ok(dir) = rustix::fs::openat(root, name, flags, Mode::empty()) {
        for pin in std::iter::once(PROGRAM).chain(MAPS.iter().map(|m| m.1)) {
            let _ = rustix::fs::unlinkat(&dir, pin, AtFlags::empty());
        }
    }
    let _ = rustix::fs::unlinkat(root, name, AtFlags::REMOVEDIR);
}
