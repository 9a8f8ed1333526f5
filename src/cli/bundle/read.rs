//! The files a caller names for `gpufree bundle` to copy (`--audit-log`,
//! `--recording`): a regular file's last bytes, read as the caller, never
//! blocking on a FIFO or acting on a device (its lines are redacted by
//! `present::bundle::write_redacted_lines`).

use crate::model::{Content, Cut, LeftItem, LeftWhy};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use crate::model::bundle_limits::{AUDIT_TAIL_BYTES, RECORDING_TAIL_BYTES};

/// A file the caller names for the bundle to copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Copied {
    /// `--audit-log`: its last records.
    AuditLog,
    /// `--recording`: its tail.
    Recording,
}

impl Copied {
    /// The flag that names it.
    pub fn flag(self) -> &'static str {
        match self {
            Copied::AuditLog => "--audit-log",
            Copied::Recording => "--recording",
        }
    }

    /// The most of it copied, in bytes.
    pub fn max(self) -> u64 {
        match self {
            Copied::AuditLog => AUDIT_TAIL_BYTES,
            Copied::Recording => RECORDING_TAIL_BYTES,
        }
    }

    /// Its member's name in the archive.
    pub fn member(self) -> &'static str {
        match self {
            Copied::AuditLog => "audit.jsonl",
            Copied::Recording => "recording.jsonl",
        }
    }

    /// What its member is, copied from `source`.
    pub fn content(self, source: String) -> Content {
        match self {
            Copied::AuditLog => Content::Audit { source },
            Copied::Recording => Content::Recording { source },
        }
    }

    /// What is left out when it is not named.
    pub fn left(self) -> LeftItem {
        match self {
            Copied::AuditLog => LeftItem::AuditLog,
            Copied::Recording => LeftItem::Recording,
        }
    }
}

/// The last `max` bytes of the regular file at `path` (looked at before
/// it is opened: opening a device can act, opening a FIFO releases its
/// writer), and what was cut when it is larger.
pub fn tail(path: &Path, max: u64) -> Result<(Vec<u8>, Option<Cut>), LeftWhy> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let why = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::NotFound => LeftWhy::Missing,
        _ => LeftWhy::Unreadable {
            error: e.to_string(),
        },
    };
    let looked = std::fs::symlink_metadata(path).map_err(why)?;
    if looked.file_type().is_symlink() {
        let target = std::fs::read_link(path).map_err(why)?;
        return Err(LeftWhy::Symlink {
            target: target.to_string_lossy().into_owned(),
        });
    }
    if !looked.is_file() {
        return Err(LeftWhy::NotRegular);
    }
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(why)?;
    let meta = f.metadata().map_err(why)?;
    if !meta.is_file() || (meta.dev(), meta.ino()) != (looked.dev(), looked.ino()) {
        return Err(LeftWhy::NotRegular);
    }
    let len = meta.len();
    let cut = (len > max).then_some(Cut { kept: max, of: len });
    if cut.is_some() {
        f.seek(SeekFrom::Start(len - max)).map_err(why)?;
    }
    let mut bytes = Vec::new();
    f.take(max).read_to_end(&mut bytes).map_err(why)?;
    Ok((bytes, cut))
}

/// The whole lines of `bytes`: past its first line when `cut` (the tail
/// began inside it, so it may be a piece).
pub fn whole_lines(bytes: &[u8], cut: bool) -> &[u8] {
    match (cut, bytes.iter().position(|&b| b == b'\n')) {
        (true, Some(end)) => &bytes[end + 1..],
        (true, None) => &[],
        (false, _) => bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::{tail, whole_lines};
    use crate::model::{Cut, LeftWhy};

    #[test]
    fn tail_keeps_the_last_bytes_and_refuses_links_fifos_and_directories() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("log");
        std::fs::write(&f, b"0123456789").unwrap();
        assert_eq!(
            tail(&f, 4).unwrap(),
            (b"6789".to_vec(), Some(Cut { kept: 4, of: 10 }))
        );
        assert_eq!(tail(&f, 40).unwrap(), (b"0123456789".to_vec(), None));
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert!(matches!(tail(&link, 4), Err(LeftWhy::Symlink { .. })));
        assert_eq!(tail(t.path(), 4), Err(LeftWhy::NotRegular));
        let fifo = t.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success(), "mkfifo");
        // Refused without waiting for a writer.
        assert_eq!(tail(&fifo, 4), Err(LeftWhy::NotRegular));
        assert_eq!(tail(&t.path().join("none"), 4), Err(LeftWhy::Missing));
    }

    #[test]
    fn a_cut_tail_loses_its_first_piece() {
        let bytes = b"ece\"]}\n{\"a\":1}\n";
        assert_eq!(whole_lines(bytes, true), b"{\"a\":1}\n");
        assert_eq!(whole_lines(bytes, false), bytes);
        assert_eq!(whole_lines(b"no newline", true), b"");
    }
}
