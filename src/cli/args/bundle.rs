//! The options of `gpufree bundle`.

use super::help::{OUTPUT, WHERE};
use clap::Args;
use std::path::PathBuf;

/// `gpufree bundle` flags.
#[derive(Debug, Args)]
pub struct BundleArgs {
    /// Write the archive here (`-`: stdout); default bundle-HOST-TIME.tar.gz in
    /// the current directory.
    ///
    /// Created new, mode 0600, never through a symlink: an existing file or link there is
    /// refused (exit 2). In secure mode (setuid, file capabilities) only `-` is taken.
    #[arg(long, value_name = "FILE", help_heading = OUTPUT)]
    pub out: Option<PathBuf>,
    /// Keep the holders' command lines (may hold secrets: `--api-key=...`).
    ///
    /// Without it every command line is left out of every file in the archive (the
    /// snapshot, the audit records, the recording, unit files' Exec lines).
    #[arg(long, help_heading = OUTPUT)]
    pub with_cmdlines: bool,
    /// Keep the holders' environments (may hold secrets).
    ///
    /// Without it every environment is left out (the snapshot's `environment`, unit files'
    /// Environment= lines).
    #[arg(long, help_heading = OUTPUT)]
    pub with_env: bool,
    /// A recording (`gpufree record`'s JSON lines) whose tail goes into the
    /// archive, each line redacted.
    #[arg(long, value_name = "FILE", help_heading = WHERE)]
    pub recording: Option<PathBuf>,
    /// The audit log (`kill --audit-log`'s file) whose last records go into the archive.
    #[arg(long, value_name = "FILE", help_heading = WHERE)]
    pub audit_log: Option<PathBuf>,
}
