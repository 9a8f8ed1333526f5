//! What `gpufree bundle` reads of the host beside a collection, through
//! the collector's own roots (its proc root, its unit directories): the
//! version files and the unit files of the holders' system units.

use super::Collector;
use crate::model::VersionFile;
use crate::model::{LeftItem, LeftOut, LeftWhy, Snapshot};
use crate::proc::bundle::FileRead;

use crate::model::bundle_limits::{UNITS, UNIT_FILES_TOTAL_BYTES};

impl Collector {
    /// The kernel's and the NVIDIA driver's version files under the proc
    /// root, each with its bytes or why not.
    pub fn version_files(&self) -> Vec<(VersionFile, FileRead)> {
        crate::proc::bundle::versions(&self.config().proc_root)
    }

    /// The unit files and drop-ins of the system units that own `snap`'s
    /// holders (each unit once, at most [`UNITS`], at most
    /// [`UNIT_FILES_TOTAL_BYTES`] all together, bounded while reading),
    /// by unit; and the units not read, with why.
    pub fn unit_files(&self, snap: &Snapshot) -> (Vec<(String, FileRead)>, Vec<LeftOut>) {
        let units: std::collections::BTreeSet<&str> = snap
            .processes
            .iter()
            .filter_map(|p| p.owner.system_unit())
            .collect();
        let mut read = Vec::new();
        let mut left = Vec::new();
        let mut budget = UNIT_FILES_TOTAL_BYTES;
        for (i, unit) in units.into_iter().enumerate() {
            let why = if i >= UNITS {
                LeftWhy::TooMany { max: UNITS }
            } else if !crate::proc::restart::is_unit_name(unit) {
                LeftWhy::BadUnitName
            } else {
                let files =
                    crate::proc::bundle::unit_files(&self.config().unit_dirs, unit, &mut budget);
                if files.is_empty() {
                    LeftWhy::Missing
                } else {
                    read.extend(files.into_iter().map(|f| (unit.to_string(), f)));
                    continue;
                }
            };
            left.push(LeftOut {
                what: LeftItem::Unit(unit.to_string()),
                why,
            });
        }
        (read, left)
    }
}
