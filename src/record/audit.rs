//! The kills `kill --audit-log` appends to its file, read as they come:
//! from where the file ended when the recording started (or at its start,
//! once it was replaced or cut short), whole lines only, never through a
//! link and never anything but a regular file.

pub(super) use crate::model::AuditUnread;
use serde_json::Value;
use std::io::{Read as _, Seek, SeekFrom};
use std::path::PathBuf;

/// At most this much of the log is read per look.
const MAX_READ: u64 = 4 << 20;

/// Where the log was read to.
pub(super) struct Tail {
    path: PathBuf,
    /// The file and the offset read to.
    at: Option<(FileId, u64)>,
    /// When the recording started (ms since the epoch): a kill that ended
    /// before is none of its (a log unreadable at the start is read from
    /// its beginning once it can be).
    since_ms: u64,
}

/// A file's device and inode.
type FileId = (u64, u64);

impl Tail {
    /// From the log's end now: kills from now on.
    pub(super) fn start(path: PathBuf) -> Tail {
        let mut t = Tail {
            path,
            at: None,
            since_ms: crate::units::unix_now_ms(),
        };
        if let Ok(Some((f, id))) = t.open() {
            let end = f.metadata().map_or(0, |m| m.len());
            t.at = Some((id, end));
        }
        t
    }

    /// The log, or None where there is none (yet: `kill` creates it):
    /// through its directory reached with no symlink on the way, root's
    /// or this user's and writable by no one else (as `--out`'s), never
    /// through a symlink.
    fn open(&self) -> Result<Option<(std::fs::File, FileId)>, AuditUnread> {
        use crate::paths::OpenError;
        use rustix::fs::{Mode, OFlags};
        use std::os::unix::fs::MetadataExt;
        let unread = |e: OpenError| match e {
            OpenError::Refused(_) => AuditUnread::NotTrusted,
            OpenError::Io(e) => AuditUnread::Io(e),
        };
        let (dir, name) = match crate::paths::dir_of(&self.path) {
            Ok(found) => found,
            Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(unread(e)),
        };
        crate::paths::trusted_dir(&dir).map_err(unread)?;
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let f = match rustix::fs::openat(&dir, name, flags | OFlags::NOCTTY, Mode::empty()) {
            Ok(fd) => std::fs::File::from(fd),
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(AuditUnread::Io(e.into())),
        };
        let m = f.metadata().map_err(AuditUnread::Io)?;
        if !m.is_file() {
            return Err(AuditUnread::NotAFile);
        }
        // Written by `kill` as root (or as this user): a log another user
        // could append to would put kills that never happened in the
        // timeline.
        let owner_ok = m.uid() == 0 || m.uid() == rustix::process::geteuid().as_raw();
        if !owner_ok || m.mode() & 0o022 != 0 {
            return Err(AuditUnread::NotTrusted);
        }
        Ok(Some((f, (m.dev(), m.ino()))))
    }

    /// The kills' records appended since the last look, each with when it
    /// ended, and what kept any from being read.
    pub(super) fn new_records(&mut self) -> Read {
        let (records, trouble) = match self.read() {
            Ok((records, 0)) => (records, None),
            Ok((records, bad)) => (records, Some(AuditUnread::NotRecords(bad))),
            Err(e) => (Vec::new(), Some(e)),
        };
        Read { records, trouble }
    }

    /// The new records, and how many new lines are none.
    fn read(&mut self) -> Result<(Vec<Kill>, usize), AuditUnread> {
        let Some((mut f, id)) = self.open()? else {
            return Ok((Vec::new(), 0));
        };
        let len = f.metadata().map_err(AuditUnread::Io)?.len();
        let from = match self.at {
            Some((was, pos)) if was == id && pos <= len => pos,
            _ => 0,
        };
        let mut bytes = Vec::new();
        f.seek(SeekFrom::Start(from))
            .and_then(|_| f.take(MAX_READ).read_to_end(&mut bytes))
            .map_err(AuditUnread::Io)?;
        // Whole lines only: a line being written is read next time.
        let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        self.at = Some((id, from + whole as u64));
        let lines = bytes[..whole]
            .split(|&b| b == b'\n')
            .filter(|l| !l.trim_ascii().is_empty());
        let mut bad = 0;
        let mut records = Vec::new();
        for l in lines {
            match kill_of(l) {
                Some((v, ended)) => {
                    if ended.is_none_or(|t| t >= self.since_ms) {
                        records.push((v, ended));
                    }
                }
                None => bad += 1,
            }
        }
        Ok((records, bad))
    }
}

/// What a look at the log read.
pub(super) struct Read {
    /// The new kills' records.
    pub(super) records: Vec<Kill>,
    /// What kept some from being read.
    pub(super) trouble: Option<AuditUnread>,
}

/// A kill's audit record, and when it ended (ms since the Unix epoch;
/// None where its `time` is no RFC 3339).
pub(super) type Kill = (Value, Option<u64>);

/// The kill's record on `line`, read once; None where the line is none,
/// as a replay reads one (a recording's own line, a log of something
/// else).
fn kill_of(line: &[u8]) -> Option<Kill> {
    let v: Value = serde_json::from_slice(line).ok()?;
    let ended = crate::model::KillSeen::read(&v)?.ended_ms();
    Some((v, ended))
}

#[cfg(test)]
mod tests {
    use super::{kill_of, AuditUnread, Tail};
    use std::io::Write;

    /// A kill's audit record ending at `time`, as small as a reader takes.
    fn kill(time: &str) -> String {
        serde_json::json!({
            "time": time, "invoker": {"pid": 1, "user": "root"}, "signal": "TERM",
            "targets": [], "outcome": {"result": "released", "seconds_to_release": 0.5,
                "signalled": [], "survivors": []}
        })
        .to_string()
    }

    #[test]
    fn a_kills_time_is_rfc3339_only() {
        let at = |t: &str| kill_of(kill(t).as_bytes()).unwrap().1;
        assert_eq!(at("1970-01-01T00:00:01.5Z"), Some(1_500));
        for not in ["-5m", "+1s", "1733431420", "yesterday"] {
            assert_eq!(at(not), None, "{not}");
        }
        assert_eq!(kill_of(br#"{ "time": "1970-01-01T00:00:01Z" }"#), None);
    }

    #[test]
    fn lines_that_are_no_record_and_a_log_that_is_no_file_are_said() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let mut tail = Tail::start(path.clone());
        assert!(tail.new_records().trouble.is_none(), "no log yet");
        let mut f = std::fs::File::create(&path).unwrap();
        // A recording's own line is no kill (attack39 3: a recorder given
        // its own file read its lines back as kills).
        let own = "{\"record\":1,\"t\":5,\"full\":{}}";
        writeln!(f, "{}\nnot json\n\n[1]\n{own}", kill("x")).unwrap();
        let read = tail.new_records();
        assert_eq!(read.records.len(), 1);
        assert!(matches!(read.trouble, Some(AuditUnread::NotRecords(3))));
        let mut tail = Tail::start(dir.path().to_path_buf());
        assert!(matches!(
            tail.new_records().trouble,
            Some(AuditUnread::NotAFile)
        ));
    }

    /// A log another user owns, or others may write, gives no record: a
    /// user could append a kill that never happened (attack38 3).
    #[test]
    fn a_log_anyone_else_could_write_gives_no_record() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        std::fs::write(&path, kill("x") + "\n").unwrap();
        let mut tail = Tail::start(path.clone());
        std::fs::write(&path, kill("x") + "\n" + &kill("y") + "\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let read = tail.new_records();
        assert!(read.records.is_empty());
        assert!(matches!(read.trouble, Some(AuditUnread::NotTrusted)));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
            let read = tail.new_records();
            assert!(matches!(read.trouble, Some(AuditUnread::NotTrusted)));
            std::os::unix::fs::chown(&path, Some(0), None).unwrap();
        }
        assert_eq!(tail.new_records().records.len(), 1, "its own again");
        // In a directory others may write: none taken either.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::write(&path, kill("z") + "\n").unwrap();
        let read = tail.new_records();
        assert!(matches!(read.trouble, Some(AuditUnread::NotTrusted)));
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    }

    /// A log that could not be read when the recording started is read
    /// from its start once it can be: the kills that ended before the
    /// recording began are none of its (style39 6).
    #[test]
    fn kills_before_the_recording_began_are_left_out() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        std::fs::write(&path, kill("2020-01-01T00:00:00Z") + "\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let mut tail = Tail::start(path.clone());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let later = "2999-01-01T00:00:00Z";
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        writeln!(f, "{}", kill(later)).unwrap();
        let read = tail.new_records();
        assert_eq!(read.records.len(), 1, "only the kill after the start");
        assert_eq!(read.records[0].0["time"], later);
    }
}
