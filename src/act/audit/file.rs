//! `--audit-log FILE`: one JSON line per kill, appended to a file opened
//! append-only, created 0600, never through a symlink and never anything
//! but a regular file.

use crate::model::AuditRecord;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// serde_json's compact layout, with the characters
/// [`crate::safe::is_unsafe`] names written as `\uXXXX`: one line that
/// nothing in it can break or turn live on a terminal. Inside strings the
/// characters a reader downstream may take for code or structure are
/// escaped too ([`CODE`]): a target's argv holding `GPUFREE_RECORD={...}`
/// cannot end a syslog line with a record of its own (readers take the
/// last `GPUFREE_RECORD=`), nor `$(...)` or a quote reach a shell or a
/// log viewer as such. JSON readers decode them back.
struct Compact;

/// What [`Compact`] escapes besides [`crate::safe::is_unsafe`]: `=` (the
/// syslog line's `GPUFREE_RECORD=` marker, key=value parsers), shell and
/// markup metacharacters.
const CODE: &[char] = &['=', '$', '`', '\'', '<', '>', '&', ';', '|'];

impl serde_json::ser::Formatter for Compact {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if CODE.contains(&c) {
                crate::safe::json_fragment(w, &fragment[start..i])?;
                write!(w, "\\u{:04x}", u32::from(c))?;
                start = i + c.len_utf8();
            }
        }
        crate::safe::json_fragment(w, &fragment[start..])
    }
}

/// The record as one JSON line, newline included.
pub(super) fn json_line(r: &AuditRecord) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Compact);
    // A record of strings, numbers and lists always serializes; should it
    // not, the line says so rather than being lost.
    if serde::Serialize::serialize(r, &mut ser).is_err() {
        out = br#"{"version":1,"error":"the record could not be serialized"}"#.to_vec();
    }
    out.push(b'\n');
    String::from_utf8_lossy(&out).into_owned()
}

/// Appends `line` to `path` in one write: opened with O_APPEND|O_CREAT,
/// mode 0600 when created, O_NOFOLLOW (a symlink is refused) and
/// O_NONBLOCK (a FIFO cannot hold the open); anything but a regular file
/// is refused.
pub(super) fn append(path: &Path, line: &[u8]) -> io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => io::Error::other("a symlink: refused"),
            _ => e,
        })?;
    let meta = f.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::other("not a regular file: refused"));
    }
    // A file someone else made (first, in a shared directory) could be
    // edited by them after gpufree wrote to it; and a file of root's is
    // not its caller's to append to (a setuid gpufree, should one ever be
    // given a path): the real user's own file only.
    if std::os::unix::fs::MetadataExt::uid(&meta) != rustix::process::getuid().as_raw() {
        return Err(io::Error::other("not this user's file: refused"));
    }
    f.write_all(line)
}
