//! The log of when `while-alive` PIDs were first seen gone, kept beside
//! the state file and replaced through an exclusively created new file.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The moments at which `while-alive` PIDs were first seen gone, kept in a
/// file beside the state file so that every client process agrees on them.
#[derive(Debug, Default, Deserialize, Serialize)]
pub struct GoneLog {
    /// PID -> milliseconds since the Unix epoch.
    pub first_gone_ms: BTreeMap<u32, u64>,
}

/// The file beside `state_path` that holds the [`GoneLog`].
pub fn gone_log_path(state_path: &Path) -> PathBuf {
    let mut name = state_path.file_name().unwrap_or_default().to_os_string();
    name.push(".gone");
    state_path.with_file_name(name)
}

impl GoneLog {
    /// Reads the log; a missing or unreadable log is an empty one.
    pub fn load(path: &Path) -> GoneLog {
        std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Writes the log atomically, with permission bits `mode` (the state
    /// file's, so that every client that may read the state may read the
    /// log): see [`replace`]. A log that cannot be written is not kept
    /// (the next client records the moment again).
    pub fn store(&self, path: &Path, mode: u32) {
        if let Ok(bytes) = serde_json::to_vec(self) {
            let _ = replace(path, &bytes, mode, &mut random_name);
        }
    }
}

/// Names tried for a temporary file before giving up.
const TRIES: usize = 16;

/// Replaces `path` with a file holding `bytes`: written to a new file
/// beside it, then renamed over it. The new file is created exclusively
/// (`O_CREAT|O_EXCL|O_NOFOLLOW`, permission bits `mode`) in `path`'s
/// directory under a name from `name` (given `path`'s file name; another
/// is tried where one exists), so that nothing already there, a link
/// someone planted included, is ever followed, truncated or written; the
/// rename replaces a link at `path` itself, never its target. The
/// library runs inside any NVML client, root's too: it must never write
/// where a name it did not create points.
pub fn replace(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    name: &mut dyn FnMut(&std::ffi::OsStr) -> std::ffi::OsString,
) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let base = path.file_name().unwrap_or_default();
    let mut last = std::io::Error::from(std::io::ErrorKind::AlreadyExists);
    for _ in 0..TRIES {
        let tmp = dir.join(name(base));
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode & 0o666)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp);
        let mut file = match created {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                last = e;
                continue;
            }
            Err(e) => return Err(e),
        };
        let written = file
            .write_all(bytes)
            .and_then(|()| std::fs::rename(&tmp, path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        return written;
    }
    Err(last)
}

/// `.NAME.` and 16 random hex digits: a name no one can plant a link at
/// beforehand. The bytes come from getrandom(2), not from a crate's
/// thread-local generator: this library is unloaded by its clients
/// (dlclose), and a thread-local destructor left behind would run after
/// it is gone.
fn random_name(base: &std::ffi::OsStr) -> std::ffi::OsString {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most `bytes.len()` bytes into `bytes`,
    // which outlives the call.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), libc::GRND_NONBLOCK) };
    let random = if usize::try_from(n).ok() == Some(bytes.len()) {
        u64::from_ne_bytes(bytes)
    } else {
        // No entropy yet (early boot): unpredictable enough together
        // with O_EXCL, which alone keeps the write from following a link.
        static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        nanos
            ^ (u64::from(std::process::id()) << 32)
            ^ COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    };
    let mut name = std::ffi::OsString::from(".");
    name.push(base);
    name.push(format!(".{random:016x}"));
    name
}
