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

/// The document `gpufree record` keeps of judged snapshot `s`: `status
/// --json`'s without its findings in words (a reader judges the snapshot
/// again, as `--from` does; the words quote holders' command lines where
/// no key says so).
pub fn recorded_document(s: &Snapshot) -> Result<serde_json::Value, serde_json::Error> {
    let mut doc = super::json::SnapshotDoc::new(s);
    doc.findings_left_out();
    serde_json::to_value(doc)
}

/// `value` as one line of compact JSON (a recording's record, a line a
/// bundle copies), ended by a newline, with the characters a terminal
/// would act on escaped: `cat` of the file shows them, never obeys them.
pub fn json_line<T: Serialize>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Escaping);
    value.serialize(&mut ser)?;
    out.push(b'\n');
    Ok(out)
}

/// serde_json's compact layout, with [`crate::safe::json_fragment`]'s
/// escapes.
struct Escaping;

impl serde_json::ser::Formatter for Escaping {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        crate::safe::json_fragment(w, fragment)
    }
}

#[cfg(test)]
mod tests {
    use crate::model::{DriverEvidence, Failure, FromFile, Gpu, KernelLog, Reading, Snapshot};

    /// A recording's moment is said as its state then, with the record it
    /// comes from where that is earlier: nothing was looked at at that
    /// moment (newuser38 8).
    #[test]
    fn a_recordings_moment_is_said_a_state_not_a_snapshot_taken_then() {
        let marker = |recorded_ms| {
            crate::present::words::from::marker(&FromFile {
                path: "t.jsonl".into(),
                taken_unix_ms: Some(1_764_936_181_000),
                host: Some("vm".into()),
                recorded_ms,
            })
        };
        assert!(marker(None)
            .starts_with("from t.jsonl: a snapshot taken 2025-12-05 12:03:01 UTC on vm;"));
        assert!(marker(Some(1_764_936_170_500)).starts_with(
            "from t.jsonl: the recording's state at 2025-12-05 12:03:01 UTC (its last record before then: 2025-12-05 12:02:50 UTC) on vm;"
        ));
        assert!(marker(Some(1_764_936_181_000))
            .starts_with("from t.jsonl: the recording's state at 2025-12-05 12:03:01 UTC on vm;"));
    }

    #[test]
    fn failed_readings_and_a_refused_kernel_log_read_back_as_they_were() {
        let evidence = DriverEvidence {
            recovery_action: Reading::Failed(Failure::Timeout),
            process_utilization: Reading::Failed(Failure::Nvml {
                error: "Unknown Error".into(),
            }),
            remapped_rows: Reading::NotSupported,
            ..Default::default()
        };
        let s = Snapshot {
            gpus: vec![Gpu {
                driver_evidence: Some(evidence),
                ..Default::default()
            }],
            kernel_log: Some(KernelLog {
                path: "/dev/kmsg".into(),
                xids: Reading::Failed("Operation not permitted (os error 1)".into()),
                denied: true,
                ..Default::default()
            }),
            taken_unix_ms: Some(1_764_936_181_000),
            host: Some("node-1".into()),
            ..Default::default()
        };
        let json = serde_json::to_vec(&crate::present::json::SnapshotDoc::new(&s)).unwrap();
        let back: Snapshot = serde_json::from_slice(&json).unwrap();
        assert_eq!(back.gpus[0].driver_evidence, s.gpus[0].driver_evidence);
        assert_eq!(back.kernel_log, s.kernel_log);
        assert_eq!((back.taken_unix_ms, back.host), (s.taken_unix_ms, s.host));
        // An older document (no causes beside the words) still reads back
        // failed, for a reason it does not say.
        let mut doc: serde_json::Value = serde_json::from_slice(&json).unwrap();
        doc["gpus"][0]["driver_evidence"]
            .as_object_mut()
            .unwrap()
            .remove("failed_causes");
        let old: Snapshot = serde_json::from_value(doc).unwrap();
        let e = old.gpus[0].driver_evidence.as_ref().unwrap();
        assert!(matches!(e.recovery_action, Reading::Failed(_)));
        assert!(e.remapped_rows.not_supported());
    }
}
