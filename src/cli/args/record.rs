//! The options of `gpufree record`.

use super::help::{OUTPUT, TIMING, WHERE};
use super::{duration_at_least, refresh_interval};
use crate::model::{BadValue, Floor};
use clap::Args;
use std::path::PathBuf;

/// `gpufree record` flags.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// The timeline: JSON lines, appended to (created 0600).
    ///
    /// Never written through a symlink, never another user's file, never in a directory another
    /// user owns or may write (unless sticky); refused with exit 2.
    #[arg(help_heading = OUTPUT, long, value_name = "FILE")]
    pub out: PathBuf,
    /// How often to look (at least 100ms).
    #[arg(help_heading = TIMING, long, value_name = "DUR", default_value = "1s", value_parser = refresh_interval)]
    pub interval: std::time::Duration,
    /// A full snapshot at least this often (at least 1s); only changes between.
    #[arg(help_heading = TIMING, long, value_name = "DUR", default_value = "10m", value_parser = at_least_a_second)]
    pub full_every: std::time::Duration,
    /// A full holder scan at least this often (at least 1s); between, NVML alone.
    ///
    /// NVML's memory on every look; a change of its process lists scans at once. A holder of a
    /// device node alone is seen at the next scan.
    #[arg(help_heading = TIMING, long, value_name = "DUR", default_value = "10s", value_parser = at_least_a_second)]
    pub scan_every: std::time::Duration,
    /// Start a new file past this size: FILE becomes FILE.1, FILE.1 FILE.2, ... (0: never).
    #[arg(help_heading = OUTPUT, long, value_name = "SIZE", default_value = "64MiB", value_parser = size)]
    pub max_size: u64,
    /// Start a new file once this long has passed since it was started or opened (default: never).
    #[arg(help_heading = OUTPUT, long, value_name = "DUR", value_parser = at_least_a_second)]
    pub max_age: Option<std::time::Duration>,
    /// How many earlier files to keep (FILE.1 to FILE.N; 0: none; at most 1000).
    #[arg(help_heading = OUTPUT, long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub keep: u32,
    /// The audit log `kill --audit-log` appends to: each kill recorded there from now on goes into
    /// the timeline.
    #[arg(help_heading = WHERE, long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
}

/// `--full-every`, `--scan-every`, `--max-age`: at least a second.
fn at_least_a_second(s: &str) -> Result<std::time::Duration, BadValue> {
    duration_at_least(s, 1000, Floor::Spins)
}

/// `--max-size`.
fn size(s: &str) -> Result<u64, crate::units::Error> {
    crate::units::parse_size(s)
}
