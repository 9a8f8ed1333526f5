//! The kills `kill --audit-log` appends to its file, read as they come:
//! from where the file ended when the recording started (or at its start,
//! once it was replaced or cut short), whole lines only, never through a
//! link and never anything but a regular file.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

/// At most this much of the log is read per look.
const MAX_READ: u64 = 4 << 20;

/// Where the log was read to.
pub(super) struct Tail {
    path: PathBuf,
    /// The file (device, inode) and the offset read to.
    at: Option<((u64, u64), u64)>,
}

impl Tail {
    /// From the log's end now: kills from now on.
    pub(super) fn start(path: PathBuf) -> Tail {
        let mut t = Tail { path, at: None };
        if let Some((f, id)) = t.open() {
            let end = f.metadata().map_or(0, |m| m.len());
            t.at = Some((id, end));
        }
        t
    }

    fn open(&self) -> Option<(std::fs::File, (u64, u64))> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
            .open(&self.path)
            .ok()?;
        let m = f.metadata().ok()?;
        m.is_file().then_some((f, (m.dev(), m.ino())))
    }

    /// The records appended since the last look, each a JSON object.
    pub(super) fn new_records(&mut self) -> Vec<serde_json::Value> {
        let Some((mut f, id)) = self.open() else {
            return Vec::new();
        };
        let len = f.metadata().map_or(0, |m| m.len());
        let from = match self.at {
            Some((was, pos)) if was == id && pos <= len => pos,
            _ => 0,
        };
        let mut bytes = Vec::new();
        if f.seek(SeekFrom::Start(from)).is_err()
            || f.take(MAX_READ).read_to_end(&mut bytes).is_err()
        {
            return Vec::new();
        }
        // Whole lines only: a line being written is read next time.
        let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        self.at = Some((id, from + whole as u64));
        bytes[..whole]
            .split(|&b| b == b'\n')
            .filter_map(|l| serde_json::from_slice::<serde_json::Value>(l).ok())
            .filter(serde_json::Value::is_object)
            .collect()
    }
}
