//! The timeline's file: appended to through its directory (reached
//! without links, and one nobody else controls), never through a link,
//! 0600, the real user's own; a new file past a size or an age, the older
//! ones renamed `FILE.1`, `FILE.2`, ... through the same directory.

use crate::paths::{self, OpenError};
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::Path;

/// The mode a timeline is created with: it names holders' command lines.
const MODE: u32 = 0o600;

/// When a new file starts.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Past this many bytes (0: never).
    pub max_size: u64,
    /// When its first record is this old (ms; None: never).
    pub max_age_ms: Option<u64>,
    /// How many earlier files are kept.
    pub keep: u32,
}

/// The file being written.
pub(super) struct Sink {
    dir: OwnedFd,
    name: OsString,
    file: std::fs::File,
    size: u64,
    /// When the file was opened or started (ms).
    started_ms: u64,
    bounds: Bounds,
}

impl Sink {
    /// `path` opened to append, or refused.
    pub(super) fn open(path: &Path, bounds: Bounds) -> Result<Sink, OpenError> {
        let (dir, name) = paths::dir_of(path)?;
        paths::trusted_dir(&dir)?;
        let file = paths::open_append_at(&dir, name, MODE)?;
        let size = file.metadata()?.len();
        let mut sink = Sink {
            name: name.to_os_string(),
            dir,
            file,
            size,
            started_ms: crate::units::unix_now_ms(),
            bounds,
        };
        sink.end_cut_line()?;
        Ok(sink)
    }

    /// A file whose last line was cut (a recorder stopped mid-write) ended
    /// with a newline, so that this recorder's first record, a full
    /// snapshot, is a line of its own: a reader passes over a cut line a
    /// full snapshot follows, and would refuse the two glued together.
    fn end_cut_line(&mut self) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        let mut last = [0u8];
        if self.size > 0 && self.file.read_at(&mut last, self.size - 1)? == 1 && last[0] != b'\n' {
            self.append(b"\n")?;
        }
        Ok(())
    }

    /// Whether `more` bytes written at `now_ms` go into a new file.
    pub(super) fn due(&self, more: u64, now_ms: u64) -> bool {
        let b = &self.bounds;
        let big = b.max_size > 0 && self.size > 0 && self.size + more > b.max_size;
        let old = b
            .max_age_ms
            .is_some_and(|age| self.size > 0 && now_ms.saturating_sub(self.started_ms) >= age);
        big || old
    }

    /// `bytes` appended in one write.
    pub(super) fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.file.write_all(bytes)?;
        self.size += bytes.len() as u64;
        Ok(())
    }

    /// The file made `FILE.1` (the earlier ones moved up one, the last
    /// beyond `keep` removed) and a new one started.
    pub(super) fn rotate(&mut self, now_ms: u64) -> Result<(), OpenError> {
        use rustix::fs::{renameat, unlinkat, AtFlags};
        let numbered = |n: u32| -> OsString {
            let mut s = self.name.clone();
            s.push(".");
            s.push(n.to_string());
            s
        };
        let gone = |r: rustix::io::Result<()>| match r {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(std::io::Error::from(e)),
        };
        let keep = self.bounds.keep;
        if keep > 0 {
            gone(unlinkat(
                &self.dir,
                numbered(keep).as_os_str(),
                AtFlags::empty(),
            ))?;
            for n in (1..keep).rev() {
                gone(renameat(&self.dir, numbered(n), &self.dir, numbered(n + 1)))?;
            }
            renameat(&self.dir, &self.name, &self.dir, numbered(1))
                .map_err(std::io::Error::from)?;
        } else {
            unlinkat(&self.dir, &self.name, AtFlags::empty()).map_err(std::io::Error::from)?;
        }
        let _ = self.file.sync_data();
        self.file = paths::open_append_at(&self.dir, OsStr::new(&self.name), MODE)?;
        self.size = 0;
        self.started_ms = now_ms;
        Ok(())
    }

    /// What was written, on the disk.
    pub(super) fn sync(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::{Bounds, Sink};

    #[test]
    fn a_file_whose_last_line_was_cut_is_ended_before_the_first_record() {
        let t = tempfile::tempdir().unwrap();
        let bounds = Bounds {
            max_size: 0,
            max_age_ms: None,
            keep: 0,
        };
        for (was, now) in [
            ("{\"cut", "{\"cut\nfull\n"),
            ("whole\n", "whole\nfull\n"),
            ("", "full\n"),
        ] {
            let path = t.path().join("t.jsonl");
            std::fs::write(&path, was).unwrap();
            let mut sink = Sink::open(&path, bounds).unwrap();
            sink.append(b"full\n").unwrap();
            assert_eq!(std::fs::read_to_string(&path).unwrap(), now, "{was:?}");
        }
    }
}
