//! `--audit-log FILE`: one JSON line per kill, appended to a file opened
//! append-only, created 0600, never through a symlink and never anything
//! but a regular file.

use crate::model::AuditRecord;
use std::io::{self, Write};
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

/// Appends `line` to `path` in one write, the file opened through its
/// directory reached without links, never through a link itself, never
/// waiting on a FIFO, created 0600, and refused unless it is the real
/// user's own regular file with no other link (`crate::paths`): a file
/// someone else made first in a shared directory could be edited by them
/// afterwards, and a root file hard-linked there is not theirs.
pub(super) fn append(path: &Path, line: &[u8]) -> io::Result<()> {
    let mut f = crate::paths::open_append(path, 0o600).map_err(|e| match e {
        crate::paths::OpenError::Io(e) => e,
        refused => io::Error::other(format!("{refused}: refused")),
    })?;
    f.write_all(line)
}
