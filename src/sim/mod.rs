//! `gpufree sim lib` and `gpufree sim exec`: find the simulated NVML library
//! built from this repository (`libgpufree_nvml_sim.so`, beside the gpufree
//! binary in a checkout; else the copy the binary carries, written out once
//! to a private cache directory, for an installed gpufree), give it the
//! name every NVML client loads (`libnvidia-ml.so.1`) in a directory of its
//! own, and run any program against it. Both directories are trusted
//! along their whole path (`dirs`).

mod dirs;

pub use dirs::{Refusal, Refused};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// The file cargo builds for the simulator crate.
pub const SIM_FILE: &str = "libgpufree_nvml_sim.so";
/// The name NVML clients load.
pub const NVML_SONAME: &str = "libnvidia-ml.so.1";

/// Errors of the `sim` commands; each names the file or command.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The simulator library was not found.
    #[error("simulated NVML library {SIM_FILE} not found beside {exe} (build it with `cargo build --workspace`)")]
    NotBuilt {
        /// The gpufree binary.
        exe: String,
    },
    /// The library directory could not be prepared.
    #[error("cannot prepare {path}: {why}")]
    Dir {
        /// The directory or link.
        path: String,
        /// Why.
        why: String,
    },
    /// No directory to keep the library or its link in is trusted along
    /// its whole path: why each was refused.
    #[error("no safe directory for the simulated NVML library: {}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    NoDir(Vec<Refused>),
    /// The state file is missing or not a simulator state.
    #[error("--state {path}: {why}")]
    State {
        /// The state file.
        path: String,
        /// Why.
        why: String,
    },
    /// The command could not be started.
    #[error("sim exec: cannot run {cmd}: {source}")]
    Exec {
        /// The command.
        cmd: String,
        /// Why.
        source: std::io::Error,
    },
}

/// The simulated library this binary carries (built by `build.rs`).
static EMBEDDED: &[u8] = include_bytes!(env!("GPUFREE_SIM_EMBED"));

/// Finds `libgpufree_nvml_sim.so`: at `GPUFREE_SIM_LIBRARY`, beside the
/// running binary (or one level up, where cargo puts test binaries), else
/// the copy this binary carries, written out to a private cache directory.
pub fn find_library() -> Result<PathBuf, SimError> {
    let exe = std::env::current_exe().unwrap_or_default();
    if let Some(p) = std::env::var_os("GPUFREE_SIM_LIBRARY") {
        let p = PathBuf::from(p);
        // Root runs (the demo) or hands on (sim exec) only code root
        // chose, by the resolved path it checked.
        if rustix::process::geteuid().is_root() {
            return crate::paths::root_loadable(&p).map_err(|why| dir_err(&p, why));
        }
        return Ok(p);
    }
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let built = [
        dir.join(SIM_FILE),
        dir.join("..").join(SIM_FILE),
        dir.join("../lib").join(SIM_FILE),
    ]
    .into_iter()
    .filter(|p| p.is_file())
    .filter_map(|p| p.canonicalize().ok())
    .find(|p| trusted(p));
    match built {
        Some(p) => Ok(p),
        None => write_embedded(),
    }
}

/// Whether the file `path` and its directory belong to this user or root
/// and nobody else may write them: a library beside the binary in a
/// directory others can write (the binary copied to /tmp) could be
/// anyone's, and is never loaded.
fn trusted(path: &Path) -> bool {
    let ok = |p: &Path| {
        std::fs::metadata(p)
            .is_ok_and(|m| (m.uid() == uid() || m.uid() == 0) && m.mode() & 0o022 == 0)
    };
    ok(path) && path.parent().is_some_and(ok)
}

/// Writes the carried library once into the private cache directory
/// (`$XDG_CACHE_HOME/gpufree`, `~/.cache/gpufree`, or a per-user directory
/// in the temp dir), named by a hash of its bytes so that two versions of
/// gpufree never share one; a file there that differs is replaced. Read,
/// written and renamed through the directory's descriptor.
fn write_embedded() -> Result<PathBuf, SimError> {
    let dir = cache_dir()?;
    let name = format!("libgpufree_nvml_sim-{:016x}.so", fnv1a(EMBEDDED));
    let path = dir.path.join(&name);
    if holds_embedded(&dir.fd, &name) {
        return Ok(path);
    }
    let aside = aside_name(SIM_FILE);
    // One of this name, left by a gpufree of this PID that died writing it.
    let _ = rustix::fs::unlinkat(&dir.fd, aside.as_str(), AtFlags::empty());
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let written = rustix::fs::openat(&dir.fd, aside.as_str(), flags, Mode::from_raw_mode(0o644))
        .map_err(std::io::Error::from)
        .and_then(|fd| std::fs::File::from(fd).write_all(EMBEDDED))
        .and_then(|()| {
            rustix::fs::renameat(&dir.fd, aside.as_str(), &dir.fd, name.as_str())
                .map_err(std::io::Error::from)
        });
    if let Err(e) = written {
        let _ = rustix::fs::unlinkat(&dir.fd, aside.as_str(), AtFlags::empty());
        return Err(dir_err(&path, e));
    }
    Ok(path)
}

/// Whether `name` in `dir` is this user's regular file, writable by no
/// one else, holding the carried library (checked on the descriptor
/// read).
fn holds_embedded(dir: &OwnedFd, name: &str) -> bool {
    let regular = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode).is_file());
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let Some(fd) = regular
        .then(|| rustix::fs::openat(dir, name, flags, Mode::empty()).ok())
        .flatten()
    else {
        return false;
    };
    let ours = rustix::fs::fstat(&fd).is_ok_and(|st| {
        FileType::from_raw_mode(st.st_mode).is_file()
            && st.st_uid == uid()
            && st.st_mode & 0o022 == 0
            && u64::try_from(st.st_size).ok() == u64::try_from(EMBEDDED.len()).ok()
    });
    let mut bytes = Vec::with_capacity(EMBEDDED.len());
    ours && std::fs::File::from(fd)
        .take(EMBEDDED.len() as u64 + 1)
        .read_to_end(&mut bytes)
        .is_ok()
        && bytes == EMBEDDED
}

/// 64-bit FNV-1a: a name for the library's bytes (not a security check:
/// the directory is private, and the content is compared in full).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The per-user cache directory for the written-out library
/// (`$XDG_CACHE_HOME/gpufree` or `~/.cache/gpufree`, created 0700),
/// trusted along its whole path (`dirs`); where it is not (root given
/// another user's `XDG_CACHE_HOME` or `HOME`, a link on the way, a
/// directory others may write), this user's own directory in the temp
/// dir. Why each was refused is said only when none is taken.
fn cache_dir() -> Result<dirs::Trusted, SimError> {
    // XDG's rule: a relative (or empty) path is ignored.
    let absolute = |p: PathBuf| p.is_absolute().then_some(p);
    let base = std::env::var_os("XDG_CACHE_HOME")
        .and_then(|p| absolute(p.into()))
        .or_else(|| {
            std::env::var_os("HOME").and_then(|h| absolute(PathBuf::from(h).join(".cache")))
        });
    let dirs = base
        .map(|b| b.join("gpufree"))
        .into_iter()
        .chain(fallback());
    dirs::first(dirs, uid(), 0o700, true).map_err(SimError::NoDir)
}

/// The directory of last resort: this user's own, 0700, in the temp dir.
fn fallback() -> Option<PathBuf> {
    Some(std::env::temp_dir().join(format!("gpufree-sim-{}", uid())))
}

fn uid() -> u32 {
    rustix::process::getuid().as_raw()
}

fn dir_err(path: &Path, why: impl ToString) -> SimError {
    SimError::Dir {
        path: path.display().to_string(),
        why: why.to_string(),
    }
}

/// A directory safe to put our link in: `nvml-sim/` beside the library
/// where it is trusted along its whole path and writable, else this
/// user's own directory in the temp dir (no symlink games in /tmp).
fn link_dir(lib: &Path) -> Result<dirs::Trusted, SimError> {
    let beside = lib.parent().map(|p| p.join("nvml-sim"));
    dirs::first(beside.into_iter().chain(fallback()), uid(), 0o755, true).map_err(SimError::NoDir)
}

/// Prepares (once) and returns the directory holding `libnvidia-ml.so.1`,
/// a symlink to the simulator library, made and replaced through the
/// directory's descriptor.
pub fn library_dir() -> Result<PathBuf, SimError> {
    let lib = find_library()?;
    let dir = link_dir(&lib)?;
    link_into(&dir, &lib)?;
    Ok(dir.path)
}

/// Makes `dir`'s `libnvidia-ml.so.1` a link to `lib`, unless it already
/// is one: atomically replaces whatever is there (a link under a name of
/// this call's, renamed).
fn link_into(dir: &dirs::Trusted, lib: &Path) -> Result<(), SimError> {
    let target = lib.as_os_str().as_bytes();
    let now = rustix::fs::readlinkat(&dir.fd, NVML_SONAME, Vec::new());
    if now.is_ok_and(|t| t.as_bytes() == target) {
        return Ok(());
    }
    let tmp = aside_name(NVML_SONAME);
    // One of this name, left by a gpufree of this PID that died making it.
    let _ = rustix::fs::unlinkat(&dir.fd, tmp.as_str(), AtFlags::empty());
    rustix::fs::symlinkat(lib, &dir.fd, tmp.as_str())
        .map_err(|e| dir_err(&dir.path.join(&tmp), e))?;
    rustix::fs::renameat(&dir.fd, tmp.as_str(), &dir.fd, NVML_SONAME)
        .map_err(|e| dir_err(&dir.path.join(NVML_SONAME), e))
}

/// A name to write `name` under before renaming it into place: this
/// process's own (its PID) and this call's (a count), so that two threads
/// preparing the library at once (the tests do) never take each other's.
fn aside_name(name: &str) -> String {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(".{name}.{}.{call}", std::process::id())
}

/// Checks that `path` is readable JSON with a `devices` array, so a typo
/// fails here, naming the file, instead of inside the client.
pub fn check_state(path: &Path) -> Result<PathBuf, SimError> {
    let err = |why: String| SimError::State {
        path: path.display().to_string(),
        why,
    };
    let bytes = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| err(format!("not JSON: {e}")))?;
    if !value.get("devices").is_some_and(|d| d.is_array()) {
        return Err(err("no \"devices\" array: not a simulator state".into()));
    }
    path.canonicalize().map_err(|e| err(e.to_string()))
}

/// The environment that points an NVML client at the simulator.
pub fn client_env(state: &Path) -> Result<Vec<(String, String)>, SimError> {
    let dir = library_dir()?;
    let mut ld = dir.display().to_string();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|v| !v.is_empty()) {
        ld = format!("{ld}:{}", old.to_string_lossy());
    }
    Ok(vec![
        ("GPUFREE_SIM_STATE".into(), state.display().to_string()),
        (
            "GPUFREE_NVML_LIB".into(),
            dir.join(NVML_SONAME).display().to_string(),
        ),
        ("LD_LIBRARY_PATH".into(), ld),
    ])
}

/// Replaces this process with `cmd` running against the simulated GPUs of
/// `state`. Returns only on failure.
pub fn exec(state: &Path, cmd: &[String]) -> SimError {
    let state = match check_state(state) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let env = match client_env(&state) {
        Ok(e) => e,
        Err(e) => return e,
    };
    let Some((program, args)) = cmd.split_first() else {
        return SimError::Exec {
            cmd: String::new(),
            source: std::io::Error::other("no command given after --"),
        };
    };
    let source = std::process::Command::new(program)
        .args(args)
        .envs(env)
        .exec();
    SimError::Exec {
        cmd: program.clone(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads that find the link missing at once each make their own and
    /// rename it into place: none fails on another's half-made link (a
    /// name by PID alone made one fail with EEXIST in CI).
    #[test]
    fn threads_making_the_link_at_once_all_succeed() {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let lib = tmp.path().join("libgpufree_nvml_sim.so");
        std::fs::write(&lib, b"not a library: only linked to").expect("the target");
        let open = || {
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
            dirs::Trusted {
                fd: rustix::fs::open(tmp.path(), flags, Mode::empty()).expect("the dir"),
                path: tmp.path().to_path_buf(),
            }
        };
        for _ in 0..20 {
            let _ = std::fs::remove_file(tmp.path().join(NVML_SONAME));
            let gate = std::sync::Barrier::new(4);
            let made: Vec<Result<(), SimError>> = std::thread::scope(|s| {
                let workers: Vec<_> = (0..4)
                    .map(|_| {
                        let dir = open();
                        let (gate, lib) = (&gate, &lib);
                        s.spawn(move || {
                            gate.wait();
                            link_into(&dir, lib)
                        })
                    })
                    .collect();
                workers
                    .into_iter()
                    .map(|w| w.join().expect("no panic"))
                    .collect()
            });
            for m in made {
                m.expect("each thread's link made or found");
            }
            let now = std::fs::read_link(tmp.path().join(NVML_SONAME)).expect("the link");
            assert_eq!(now, lib);
        }
        let left: Vec<_> = std::fs::read_dir(tmp.path())
            .expect("the dir")
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .filter(|n| n.to_string_lossy().starts_with('.'))
            .collect();
        assert!(left.is_empty(), "names left aside: {left:?}");
    }
}
