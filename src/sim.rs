//! `gpufree sim lib` and `gpufree sim exec`: find the simulated NVML library
//! built from this repository (`libgpufree_nvml_sim.so`, beside the gpufree
//! binary in a checkout; else the copy the binary carries, written out once
//! to a private cache directory, for an installed gpufree), give it the
//! name every NVML client loads (`libnvidia-ml.so.1`) in a directory of its
//! own, and run any program against it.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
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
        return Ok(PathBuf::from(p));
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

/// Whether `path` (a file, or a directory) and, for a file, its directory
/// belong to this user or root and nobody else may write them: a library
/// beside the binary in a directory others can write (the binary copied
/// to /tmp) could be anyone's, and is never loaded.
fn trusted(path: &Path) -> bool {
    let ok = |p: &Path| {
        std::fs::metadata(p)
            .is_ok_and(|m| (m.uid() == uid() || m.uid() == 0) && m.mode() & 0o022 == 0)
    };
    ok(path) && (path.is_dir() || path.parent().is_some_and(ok))
}

/// Writes the carried library once into the private cache directory
/// (`$XDG_CACHE_HOME/gpufree`, `~/.cache/gpufree`, or a per-user directory
/// in the temp dir), named by a hash of its bytes so that two versions of
/// gpufree never share one; a file there that differs is replaced.
fn write_embedded() -> Result<PathBuf, SimError> {
    let dir = cache_dir()?;
    let path = dir.join(format!("libgpufree_nvml_sim-{:016x}.so", fnv1a(EMBEDDED)));
    let ours = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file() && m.uid() == uid());
    if ours && std::fs::read(&path).is_ok_and(|b| b == EMBEDDED) {
        return Ok(path);
    }
    let tmp = dir.join(format!(".{SIM_FILE}.{}", std::process::id()));
    std::fs::write(&tmp, EMBEDDED)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| dir_err(&path, e))?;
    Ok(path)
}

/// 64-bit FNV-1a: a name for the library's bytes (not a security check:
/// the directory is private, and the content is compared in full).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The per-user cache directory for the written-out library: created
/// private (0700), and refused unless it is this user's and not writable
/// by others.
fn cache_dir() -> Result<PathBuf, SimError> {
    let uid = uid();
    // XDG's rule: a relative (or empty) path is ignored.
    let absolute = |p: PathBuf| p.is_absolute().then_some(p);
    let base = std::env::var_os("XDG_CACHE_HOME")
        .and_then(|p| absolute(p.into()))
        .or_else(|| {
            std::env::var_os("HOME").and_then(|h| absolute(PathBuf::from(h).join(".cache")))
        });
    let dir = match base {
        Some(b) => b.join("gpufree"),
        None => std::env::temp_dir().join(format!("gpufree-sim-{uid}")),
    };
    private_dir(&dir, uid)?;
    Ok(dir)
}

/// Creates `dir` (0700) if missing and checks that it is a directory of
/// `uid` that nobody else may write.
fn private_dir(dir: &Path, uid: u32) -> Result<(), SimError> {
    if !dir.exists() {
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)))
            .map_err(|e| dir_err(dir, e))?;
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| dir_err(dir, e))?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(dir_err(dir, "not a private directory of this user"));
    }
    Ok(())
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

/// A directory safe to put our link in: `nvml-sim/` beside the library when
/// writable, else a per-user directory in the temp dir that must be ours and
/// not writable by others (no symlink games in /tmp).
fn link_dir(lib: &Path) -> Result<PathBuf, SimError> {
    if let Some(parent) = lib.parent() {
        let beside = parent.join("nvml-sim");
        let is_dir = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
        if std::fs::create_dir_all(&beside).is_ok()
            && is_dir(&beside)
            && trusted(&beside)
            && rustix::fs::access(&beside, rustix::fs::Access::WRITE_OK).is_ok()
        {
            return Ok(beside);
        }
    }
    let dir = std::env::temp_dir().join(format!("gpufree-sim-{}", uid()));
    private_dir(&dir, uid())?;
    Ok(dir)
}

/// Prepares (once) and returns the directory holding `libnvidia-ml.so.1`,
/// a symlink to the simulator library.
pub fn library_dir() -> Result<PathBuf, SimError> {
    let lib = find_library()?;
    let dir = link_dir(&lib)?;
    let link = dir.join(NVML_SONAME);
    if std::fs::read_link(&link).ok().as_deref() == Some(lib.as_path()) {
        return Ok(dir);
    }
    // Atomically replace whatever is there: link under a temp name, rename.
    let tmp = dir.join(format!(".{NVML_SONAME}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&lib, &tmp).map_err(|e| dir_err(&tmp, e))?;
    std::fs::rename(&tmp, &link).map_err(|e| dir_err(&link, e))?;
    Ok(dir)
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
