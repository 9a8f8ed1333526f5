//! This boot's relocation of the per-process walk, kept between commands.
//!
//! Relocating the object to the running kernel means parsing the kernel's
//! whole BTF: 40 ms and 30 MiB, more than a one-shot command's whole walk.
//! The result depends only on the object and the running kernel, so the
//! first command of a boot keeps it in a file (default
//! `/run/gpufree/holders-bpf.cache`, `GPUFREE_BPF_CACHE` names another
//! directory, `off` none) and later ones load it: the kernel's verifier
//! still checks every load.
//!
//! What gpufree loads into the kernel must be what it made: the directory
//! and the file must belong to gpufree's own user and be writable by no
//! one else (checked on the descriptors read, never on names), and the file
//! names the object and the boot it was made for, with a SHA-256 of the
//! whole. Anything else is no cache: the relocation is made again.

use rustix::fs::{Mode, OFlags};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

/// The environment variable naming the cache's directory (`off`: none).
pub const ENV: &str = "GPUFREE_BPF_CACHE";
/// The directory where none is named.
const DEFAULT_DIR: &str = "/run/gpufree";
/// The file in it.
const FILE: &str = "holders-bpf.cache";
/// The file's first bytes: its format.
const MAGIC: &[u8; 24] = b"gpufree holders-bpf v1\n\0";
/// The most bytes a cache file may have.
const MAX_BYTES: u64 = 4 << 20;

/// A relocation of the object for this boot's kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relocated {
    /// The object, its instructions relocated (direct.rs).
    pub object: Vec<u8>,
    /// The kernel's id of `bpf_iter_task`.
    pub attach_btf_id: u32,
}

/// The cache's directory: from the environment, the default, or none.
pub fn dir_from_env() -> Option<PathBuf> {
    match std::env::var_os(ENV) {
        None => Some(PathBuf::from(DEFAULT_DIR)),
        Some(v) if v.is_empty() || v == "off" => None,
        Some(v) => Some(PathBuf::from(v)),
    }
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`).
fn boot_id() -> Option<[u8; 36]> {
    let text = std::fs::read("/proc/sys/kernel/random/boot_id").ok()?;
    text.get(..36)?.try_into().ok()
}

/// The file's contents for `relocated` of `object` in boot `boot`.
fn encode(object: &[u8], boot: &[u8; 36], relocated: &Relocated) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&Sha256::digest(object));
    out.extend_from_slice(boot);
    out.extend_from_slice(&relocated.attach_btf_id.to_le_bytes());
    out.extend_from_slice(&relocated.object);
    let sum = Sha256::digest(&out);
    out.extend_from_slice(&sum);
    out
}

/// The relocation in `bytes`, if they are a whole cache file for `object`
/// in boot `boot`.
fn decode(bytes: &[u8], object: &[u8], boot: &[u8; 36]) -> Option<Relocated> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(32)?)?;
    if Sha256::digest(body).as_slice() != sum {
        return None;
    }
    let rest = body.strip_prefix(MAGIC)?;
    let rest = rest.strip_prefix(Sha256::digest(object).as_slice())?;
    let rest = rest.strip_prefix(boot.as_slice())?;
    let (id, relocated) = rest.split_first_chunk::<4>()?;
    Some(Relocated {
        object: relocated.to_vec(),
        attach_btf_id: u32::from_le_bytes(*id),
    })
}

/// Whether `fd` belongs to this process's effective user and no one else
/// may write it.
fn ours(fd: impl AsFd) -> Option<rustix::fs::Stat> {
    let st = rustix::fs::fstat(fd).ok()?;
    let others_write = st.st_mode & 0o022 != 0;
    (st.st_uid == rustix::process::geteuid().as_raw() && !others_write).then_some(st)
}

/// The directory `dir`, opened, if it is ours; `create`: make it (0700)
/// where it is missing.
fn open_dir(dir: &std::path::Path, create: bool) -> Option<OwnedFd> {
    let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::RDONLY;
    let fd = match rustix::fs::open(dir, flags, Mode::empty()) {
        Err(rustix::io::Errno::NOENT) if create => {
            rustix::fs::mkdir(dir, Mode::RWXU).ok()?;
            rustix::fs::open(dir, flags, Mode::empty()).ok()?
        }
        other => other.ok()?,
    };
    ours(&fd)?;
    Some(fd)
}

/// The relocation of `object` kept in `dir` for this boot, if there is a
/// sound one.
pub fn read(dir: &std::path::Path, object: &[u8]) -> Option<Relocated> {
    let boot = boot_id()?;
    let dir = open_dir(dir, false)?;
    // Only a regular file is opened (opening a device may act on it).
    let seen = rustix::fs::statat(&dir, FILE, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).ok()?;
    if !rustix::fs::FileType::from_raw_mode(seen.st_mode).is_file() {
        return None;
    }
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let fd = rustix::fs::openat(&dir, FILE, flags, Mode::empty()).ok()?;
    let st = ours(&fd)?;
    let size = u64::try_from(st.st_size).ok()?;
    let same = (st.st_dev, st.st_ino) == (seen.st_dev, seen.st_ino);
    if !same || size > MAX_BYTES {
        return None;
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).ok()?);
    std::fs::File::from(fd)
        .take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    decode(&bytes, object, &boot)
}

/// Whether `dir` keeps a relocation (of some object, for some boot: read
/// checks which) that this process would read: a cheap look, no read.
pub fn kept(dir: &std::path::Path) -> bool {
    let flags = rustix::fs::AtFlags::SYMLINK_NOFOLLOW;
    open_dir(dir, false)
        .and_then(|d| rustix::fs::statat(&d, FILE, flags).ok())
        .is_some_and(|st| {
            let file = rustix::fs::FileType::from_raw_mode(st.st_mode).is_file();
            file && st.st_uid == rustix::process::geteuid().as_raw() && st.st_mode & 0o022 == 0
        })
}

/// Keeps `relocated` of `object` in `dir` for the rest of this boot
/// (written aside, then renamed into place). Best effort: a cache that
/// cannot be written only costs the next command the relocation.
pub fn write(dir: &std::path::Path, object: &[u8], relocated: &Relocated) {
    let (Some(boot), Some(dir)) = (boot_id(), open_dir(dir, true)) else {
        return;
    };
    let aside = format!("{FILE}.{}", std::process::id());
    // One left by a gpufree of this PID that died writing it.
    let _ = rustix::fs::unlinkat(&dir, aside.as_str(), rustix::fs::AtFlags::empty());
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::openat(&dir, aside.as_str(), flags, Mode::RUSR | Mode::WUSR) else {
        return;
    };
    let written = std::fs::File::from(fd).write_all(&encode(object, &boot, relocated));
    let placed = written
        .is_ok()
        .then(|| rustix::fs::renameat(&dir, aside.as_str(), &dir, FILE).is_ok());
    if placed != Some(true) {
        let _ = rustix::fs::unlinkat(&dir, aside.as_str(), rustix::fs::AtFlags::empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Relocated {
        Relocated {
            object: b"relocated instructions".to_vec(),
            attach_btf_id: 4242,
        }
    }

    #[test]
    fn a_file_is_read_back_only_for_its_object_and_boot() {
        let boot = [b'a'; 36];
        let bytes = encode(b"object", &boot, &sample());
        assert_eq!(decode(&bytes, b"object", &boot), Some(sample()));
        assert_eq!(decode(&bytes, b"another object", &boot), None);
        assert_eq!(decode(&bytes, b"object", &[b'b'; 36]), None);
        for cut in [0, 1, 32, bytes.len() - 1] {
            assert_eq!(
                decode(&bytes[..cut], b"object", &boot),
                None,
                "cut at {cut}"
            );
        }
        for at in [0, 30, 60, 100, bytes.len() - 40, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 1;
            assert_eq!(
                decode(&bad, b"object", &boot),
                None,
                "a bit flipped at {at}"
            );
        }
    }

    #[test]
    fn only_a_directory_and_file_of_its_own_are_trusted() {
        let base = std::env::temp_dir().join(format!("gpufree-cache-test-{}", std::process::id()));
        let dir = base.join("cache");
        std::fs::create_dir_all(&base).unwrap();
        write(&dir, b"object", &sample());
        assert_eq!(
            read(&dir, b"object"),
            Some(sample()),
            "written and read back"
        );
        assert_eq!(read(&dir, b"other"), None);
        use std::os::unix::fs::PermissionsExt;
        let file = dir.join(FILE);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o622)).unwrap();
        assert_eq!(read(&dir, b"object"), None, "a file others may write");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(read(&dir, b"object"), None, "a directory others may write");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = base.join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert_eq!(read(&link, b"object"), None, "a directory through a link");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
