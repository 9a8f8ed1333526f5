//! The options of `gpufree fleet`.

use super::duration_at_least;
use super::help::{LOOK, TIMING, WHERE};
use crate::model::{BadValue, Floor};
use clap::Args;

/// `gpufree fleet` flags.
#[derive(Debug, Args)]
pub struct FleetArgs {
    /// The Prometheus server, e.g. http://prometheus:9090.
    ///
    /// The one that scrapes the nodes' `gpufree serve` (or their
    /// node_exporter's textfile).
    #[arg(help_heading = WHERE, long, value_name = "URL")]
    pub prometheus: String,
    /// Read the targets of this scrape job.
    #[arg(help_heading = WHERE, long, value_name = "NAME", default_value = "gpufree")]
    pub job: String,
    /// Instead of --job: label matchers that pick gpufree's targets.
    ///
    /// As inside PromQL's braces (`cluster="a",job=~"gpufree|node"`).
    #[arg(help_heading = WHERE, long, value_name = "MATCHERS", conflicts_with = "job")]
    pub selector: Option<String>,
    /// The label that names a node (e.g. `nodename`, `node`).
    ///
    /// The command to run there is `ssh` to its value without a `:port`.
    #[arg(help_heading = WHERE, long, value_name = "LABEL", default_value = "instance")]
    pub node_label: String,
    /// How far back to look for when each holder began to hold memory.
    ///
    /// At least 1m. A time held is right to within a 24th of it (a fifth of
    /// that for a holder younger than that), at the same cost for any
    /// history.
    #[arg(help_heading = TIMING, long, value_name = "DUR", default_value = "6h", value_parser = history)]
    pub history: std::time::Duration,
    /// A node whose data is older than this is stale.
    ///
    /// Its data's age is counted since its snapshot was taken (from an
    /// older exporter, the sample's age plus the snapshot's age when it
    /// was scraped); an answer evaluated further than this from now is
    /// stale too.
    #[arg(help_heading = TIMING, long, value_name = "DUR", default_value = "3m", value_parser = crate::units::parse_duration)]
    pub max_age: std::time::Duration,
    /// The whole view, every request to Prometheus included, ends within
    /// DUR (exit 3 past it).
    #[arg(help_heading = TIMING, long, value_name = "DUR", default_value = "10s", value_parser = fleet_timeout)]
    pub timeout: std::time::Duration,
    /// List only nodes with a leftover holder or an unknown verdict.
    ///
    /// A leftover holder is owned by no unit, container, pod or job. Exit 0 then means no leftover anywhere (GPUs held by owned
    /// processes may be busy), 1 a listed node has a busy GPU, 3 a
    /// listed verdict unknown or a node stale.
    #[arg(help_heading = LOOK, long)]
    pub leftovers: bool,
}

/// `fleet --history`: at least one step of the look back.
fn history(s: &str) -> Result<std::time::Duration, BadValue> {
    duration_at_least(s, 60_000, Floor::LookBack)
}

/// `fleet --timeout`: room for one round trip.
fn fleet_timeout(s: &str) -> Result<std::time::Duration, BadValue> {
    duration_at_least(s, 100, Floor::Answer)
}
