//! The kills `kill --audit-log` appends to its file, read as they come:
//! from where the file ended when the recording started (or at its start,
//! once it was replaced or cut short), whole lines only, never through a
//! link and never anything but a regular file.

pub(super) use crate::present::notice::AuditUnread;
use serde::Deserialize;
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

    /// The log, or None where there is none (yet: `kill` creates it).
    fn open(&self) -> Result<Option<(std::fs::File, FileId)>, AuditUnread> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
            .open(&self.path);
        let f = match f {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(AuditUnread::Io(e)),
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

    /// The records appended since the last look, each a JSON object, and
    /// what kept any from being read.
    pub(super) fn new_records(&mut self) -> Read {
        let (records, trouble) = match self.read() {
            Ok((records, 0)) => (records, None),
            Ok((records, bad)) => (records, Some(AuditUnread::NotRecords(bad))),
            Err(e) => (Vec::new(), Some(e)),
        };
        Read { records, trouble }
    }

    /// The new records, and how many new lines are none.
    fn read(&mut self) -> Result<(Vec<Value>, usize), AuditUnread> {
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
            match serde_json::from_slice::<Value>(l) {
                Ok(v) if v.is_object() => {
                    if time_ms(&v).is_none_or(|t| t >= self.since_ms) {
                        records.push(v);
                    }
                }
                _ => bad += 1,
            }
        }
        Ok((records, bad))
    }
}

/// What a look at the log read.
pub(super) struct Read {
    /// The new kills' records.
    pub(super) records: Vec<Value>,
    /// What kept some from being read.
    pub(super) trouble: Option<AuditUnread>,
}

/// The head of a kill's audit record ([`crate::model::AuditRecord`]):
/// when it ended, RFC 3339.
#[derive(Deserialize)]
struct KillHead {
    time: String,
}

/// When the kill of `record` ended (ms since the Unix epoch); None: its
/// `time` is missing or no RFC 3339.
pub(super) fn time_ms(record: &Value) -> Option<u64> {
    let head = KillHead::deserialize(record).ok()?;
    crate::model::rfc3339_ms(&head.time)
}

#[cfg(test)]
mod tests {
    use super::{time_ms, AuditUnread, Tail};
    use std::io::Write;

    #[test]
    fn a_kills_time_is_rfc3339_only() {
        let at = |t: &str| time_ms(&serde_json::json!({ "time": t }));
        assert_eq!(at("1970-01-01T00:00:01.5Z"), Some(1_500));
        for not in ["-5m", "+1s", "1733431420", "yesterday"] {
            assert_eq!(at(not), None, "{not}");
        }
        assert_eq!(time_ms(&serde_json::json!({ "time": 5 })), None);
    }

    #[test]
    fn lines_that_are_no_record_and_a_log_that_is_no_file_are_said() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let mut tail = Tail::start(path.clone());
        assert!(tail.new_records().trouble.is_none(), "no log yet");
        let mut f = std::fs::File::create(&path).unwrap();
        writeln!(f, "{{\"time\":\"x\"}}\nnot json\n\n[1]").unwrap();
        let read = tail.new_records();
        assert_eq!(read.records.len(), 1);
        assert!(matches!(read.trouble, Some(AuditUnread::NotRecords(2))));
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
        std::fs::write(&path, "{\"time\":\"x\"}\n").unwrap();
        let mut tail = Tail::start(path.clone());
        std::fs::write(&path, "{\"time\":\"x\"}\n{\"time\":\"y\"}\n").unwrap();
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
    }

    /// A log that could not be read when the recording started is read
    /// from its start once it can be: the kills that ended before the
    /// recording began are none of its (style39 6).
    #[test]
    fn kills_before_the_recording_began_are_left_out() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        std::fs::write(&path, "{\"time\":\"2020-01-01T00:00:00Z\"}\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let mut tail = Tail::start(path.clone());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let later = "2999-01-01T00:00:00Z";
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        writeln!(f, "{{\"time\":\"{later}\"}}").unwrap();
        let read = tail.new_records();
        assert_eq!(read.records.len(), 1, "only the kill after the start");
        assert_eq!(read.records[0]["time"], later);
    }
}
