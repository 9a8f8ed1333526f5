//! `units` as JSON has it: each unit's restart policy with where it was
//! read and what of it could not be, in words (`source`, `unreadable`)
//! and as values beside them (`from`, `unreadable_causes`).

use crate::model::{RestartSource, UnitRestart, UnitUnread};
use serde::Serialize;
use std::collections::BTreeMap;

/// One unit's restart policy as `status --json` prints it.
#[derive(Debug, Serialize)]
pub struct UnitRestartDoc<'a> {
    restart: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    restart_sec: &'a Option<String>,
    source: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    unreadable: Vec<String>,
    from: &'a RestartSource,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    unreadable_causes: &'a [UnitUnread],
}

impl<'a> UnitRestartDoc<'a> {
    /// The document of `r`.
    fn new(r: &'a UnitRestart) -> UnitRestartDoc<'a> {
        // Every field named: a field added fails to compile here until
        // the document says whether JSON has it.
        let UnitRestart {
            restart,
            restart_sec,
            source,
            unreadable,
        } = r;
        UnitRestartDoc {
            restart,
            restart_sec,
            source: source.to_string(),
            unreadable: unreadable.iter().map(ToString::to_string).collect(),
            from: source,
            unreadable_causes: unreadable,
        }
    }
}

/// The documents of `units`, by unit.
pub fn units_doc(units: &BTreeMap<String, UnitRestart>) -> BTreeMap<&str, UnitRestartDoc<'_>> {
    (units.iter())
        .map(|(unit, r)| (unit.as_str(), UnitRestartDoc::new(r)))
        .collect()
}
