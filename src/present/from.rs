//! What a snapshot document carries for `--from` (additions to SPEC.md's
//! `status --json`): the holders' ancestors that hold nothing (what the
//! diagnosis reads of them), when and where it was taken, its version;
//! and, for a snapshot shown from a file, where it came from, in values
//! and in words, on stdout's document (`from_file`) and on stderr.

use super::words::from::marker;
use crate::model::{FromFile, Kin, Snapshot, SNAPSHOT_VERSION};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{self, Write};

/// The snapshot document's fields for reading it back.
#[derive(Debug, Serialize)]
pub struct ReadBack<'a> {
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    parents: BTreeMap<u32, &'a Kin>,
    #[serde(skip_serializing_if = "Option::is_none")]
    taken_unix_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    host: &'a Option<String>,
    snapshot_version: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    from_file: Option<FromFileDoc<'a>>,
}

impl<'a> ReadBack<'a> {
    /// Those of `s`.
    pub fn new(s: &'a Snapshot) -> ReadBack<'a> {
        ReadBack {
            parents: s.ancestry(),
            taken_unix_ms: s.taken_unix_ms,
            host: &s.host,
            snapshot_version: SNAPSHOT_VERSION,
            from_file: s.from_file.as_ref().map(|from| FromFileDoc {
                from,
                said: marker(from),
            }),
        }
    }
}

/// Where a snapshot read from a file came from: the values, and the
/// marker in words.
#[derive(Debug, Serialize)]
struct FromFileDoc<'a> {
    #[serde(flatten)]
    from: &'a FromFile,
    said: String,
}

/// The marker on stderr: `gpufree: ` and [`marker`], one line.
pub fn write_marker<W: Write>(w: &mut W, from: &FromFile) -> io::Result<()> {
    writeln!(w, "gpufree: {}", marker(from))
}
