//! `gpufree bundle`'s listing (the archive's MANIFEST, also printed), its
//! versions file, and the copies of JSON-lines files (the audit log, a
//! recording) with what the bundle does not keep removed.

use super::words::bundle::{content, left_out};
use crate::model::{redact_json, Bundle, Content, Keep, Snapshot, MANIFEST};
use crate::safe::escape;
use std::io::{self, Write};

/// The listing: where and when, itself ([`MANIFEST`], its size not
/// known as it is written) then each of `b`'s files with its size and
/// what it is, then what was left out and why. `name` is the archive's
/// directory.
pub fn write_manifest<W: Write>(w: &mut W, name: &str, b: &Bundle) -> io::Result<()> {
    writeln!(w, "gpufree bundle {}", escape(name))?;
    writeln!(w, "gpufree {}", env!("CARGO_PKG_VERSION"))?;
    writeln!(w)?;
    writeln!(w, "Files:")?;
    let names = b.members.iter().map(|m| m.name.len());
    let width = names.chain([MANIFEST.len()]).max().unwrap_or(0);
    let this = content(&Content::Manifest);
    writeln!(w, "  {MANIFEST:width$}  {:>9}  {this}", "-")?;
    for m in &b.members {
        write!(
            w,
            "  {:width$}  {:>9}  {}",
            escape(&m.name),
            m.bytes.len(),
            content(&m.content)
        )?;
        match m.cut {
            Some(cut) => writeln!(w, " (its last {} of {} bytes)", cut.kept, cut.of)?,
            None => writeln!(w)?,
        }
    }
    if !b.left_out.is_empty() {
        writeln!(w)?;
        writeln!(w, "Left out:")?;
        // Within 100 columns, the width gpufree keeps where no terminal
        // says another: the listing is a file as well as printed.
        for l in &b.left_out {
            for (i, line) in super::columns::wrap(&left_out(l), 96, 94)
                .iter()
                .enumerate()
            {
                writeln!(w, "{}{line}", if i == 0 { "  " } else { "    " })?;
            }
        }
    }
    Ok(())
}

/// The versions file: gpufree's, the NVIDIA driver's as NVML said it,
/// and the host's name and the time of the collection; where the
/// kernel's is (`kernel`, its member), when it was read.
pub fn write_versions<W: Write>(w: &mut W, s: &Snapshot, kernel: Option<&str>) -> io::Result<()> {
    writeln!(w, "gpufree: {}", env!("CARGO_PKG_VERSION"))?;
    let driver = s.nvml.driver_version.as_deref().unwrap_or("unknown");
    writeln!(w, "NVIDIA driver (NVML): {}", escape(driver))?;
    writeln!(w, "NVML available: {}", s.nvml.available)?;
    writeln!(w, "NVML library: {}", escape(&s.nvml.library))?;
    writeln!(
        w,
        "host: {}",
        escape(s.host.as_deref().unwrap_or("unknown"))
    )?;
    if let Some(ms) = s.taken_unix_ms {
        writeln!(w, "taken (unix ms): {ms}")?;
    }
    match kernel {
        Some(member) => writeln!(w, "kernel: see {member}"),
        None => Ok(()),
    }
}

/// Where the archive was written, after the listing.
pub fn write_written<W: Write>(w: &mut W, path: &std::path::Path) -> io::Result<()> {
    writeln!(w)?;
    writeln!(w, "Written: {}", escape(&path.to_string_lossy()))
}

/// `value` written as one line ([`super::from::json_line`]).
pub fn write_line<W: Write, T: serde::Serialize>(w: &mut W, value: &T) -> io::Result<()> {
    w.write_all(&super::from::json_line(value)?)
}

/// `bytes` (JSON lines) written again with what `keep` does not keep
/// removed from each line ([`redact_json`]); a line that is not JSON is
/// skipped: nothing could be removed from it. Returns how many lines
/// were skipped as not JSON.
pub fn write_redacted_lines<W: Write>(w: &mut W, bytes: &[u8], keep: Keep) -> io::Result<u64> {
    let mut dropped = 0;
    let lines = bytes.split(|b| *b == b'\n');
    for line in lines.filter(|l| !l.iter().all(u8::is_ascii_whitespace)) {
        match serde_json::from_slice::<serde_json::Value>(line) {
            Ok(mut v) => {
                redact_json(&mut v, keep);
                write_line(w, &v)?;
            }
            Err(_) => dropped += 1,
        }
    }
    Ok(dropped)
}

#[cfg(test)]
mod tests {
    use super::write_redacted_lines;
    use crate::model::{redact_json, Brief, Invoker, Keep, Kin, NotProtected, Process, Snapshot};
    use crate::present::json::SnapshotDoc;

    const MARK: &str = "MARKER";

    /// The JSON keys `redact_json` empties are the fields the documents a
    /// bundle copies really have: a marker in every command line,
    /// environment and preload value of a snapshot's document and of an
    /// audit record's invoker is gone, and the snapshot's document
    /// redacted as JSON is the document of the snapshot redacted by field.
    #[test]
    fn redact_json_knows_every_field_that_holds_a_command_line_or_an_environment() {
        let p = Process {
            cmdline: vec![MARK.into()],
            environment: [("K".to_string(), MARK.to_string())].into(),
            not_protected: Some(NotProtected::Preload {
                variable: "LD_PRELOAD".into(),
                value: MARK.into(),
            }),
            ..Process::default()
        };
        let mut s = Snapshot {
            processes: vec![p],
            others: vec![Brief {
                cmdline: vec![MARK.into()],
                ..Brief::default()
            }],
            ..Snapshot::default()
        };
        let kin = Kin {
            cmdline: vec![MARK.into()],
            ..Kin::default()
        };
        s.parents.insert(1, kin);
        let mut v = serde_json::to_value(SnapshotDoc::new(&s)).unwrap();
        assert!(v.to_string().contains(MARK));
        redact_json(&mut v, Keep::default());
        assert!(!v.to_string().contains(MARK), "{v}");
        // What stays: the numbers, the names, the typed words.
        assert_eq!(v["snapshot_version"], 1);
        assert_eq!(v["processes"][0]["not_protected"]["variable"], "LD_PRELOAD");
        let invoker = Invoker {
            argv: vec![MARK.into()],
            ..Invoker::default()
        };
        let mut v = serde_json::to_value(invoker).unwrap();
        redact_json(&mut v, Keep::default());
        assert!(!v.to_string().contains(MARK), "{v}");
    }

    /// The listing keeps within 100 columns where its words would not.
    #[test]
    fn the_listing_of_what_was_left_out_fits_100_columns() {
        use crate::model::{Bundle, LeftItem, LeftWhy};
        let mut b = Bundle::default();
        b.leave(LeftItem::Cmdlines, LeftWhy::NotAsked);
        b.leave(LeftItem::JournalRecords, LeftWhy::NotRead);
        let mut out = Vec::new();
        super::write_manifest(&mut out, "bundle-x", &b).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("--with-cmdlines"), "{text}");
        assert!(text.lines().all(|l| crate::safe::width(l) <= 100), "{text}");
    }

    #[test]
    fn redacted_lines_drop_what_is_not_json() {
        let bytes = b"{\"cmdline\":[\"x\",\"--k=S\"]}\nnot json S\n\n";
        let mut out = Vec::new();
        let dropped = write_redacted_lines(&mut out, bytes, Keep::default()).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "{\"cmdline\":[]}\n");
        assert_eq!(dropped, 1);
    }
}
