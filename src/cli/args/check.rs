//! The options of `gpufree check`.

use super::help::{LOOK, OUTPUT, TIMING, WHERE};
use clap::Args;
use std::path::PathBuf;

/// Options of `gpufree check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Whose words and exit codes: text, json, npd, nagios or slurm.
    ///
    /// npd: 0 ok, 1 problem, 2 unknown, one line of at most 80
    /// characters; nagios: 0/1/2/3 and performance data; slurm: a drain
    /// reason, 1 only for what breaks the next job.
    #[arg(help_heading = OUTPUT, long, value_enum, default_value = "text")]
    pub format: CheckFormat,
    /// Unaccounted memory below SIZE is no leak.
    #[arg(help_heading = LOOK, long, value_name = "SIZE", default_value = "1GiB", value_parser = crate::units::parse_size)]
    pub leak_min: u64,
    /// A leak counts once it has lasted DUR (kept between runs in the state
    /// file; 0: at once).
    #[arg(help_heading = TIMING, long, value_name = "DUR", default_value = "5m", value_parser = crate::units::parse_duration)]
    pub grace: std::time::Duration,
    /// An idle holder is a warning (`idle`) from SIZE of a GPU.
    ///
    /// An idle holder holds GPU memory with no GPU activity over
    /// --idle-window.
    #[arg(help_heading = LOOK, long, value_name = "SIZE", default_value = "1GiB", value_parser = crate::units::parse_size)]
    pub idle_min: u64,
    /// Leave a condition out (repeatable).
    #[arg(help_heading = LOOK, long, value_name = "CONDITION", value_parser = condition())]
    pub ignore: Vec<crate::model::Condition>,
    /// Where a check remembers since when memory has been unaccounted
    /// (default /run/gpufree/check.json; env GPUFREE_CHECK_STATE).
    #[arg(help_heading = WHERE, long, value_name = "FILE")]
    pub state: Option<PathBuf>,
}

/// `check --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckFormat {
    /// For a person.
    Text,
    /// One JSON document.
    Json,
    /// node-problem-detector.
    Npd,
    /// The Nagios plugin API.
    Nagios,
    /// Slurm's health check.
    Slurm,
}

/// `check --ignore`: one of the model's conditions, by the name it has in
/// JSON (clap lists them in the help and in the error).
fn condition() -> impl clap::builder::TypedValueParser<Value = crate::model::Condition> {
    use crate::model::Condition;
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Condition::ALL.map(Condition::as_str)).map(|name| {
        Condition::ALL
            .into_iter()
            .find(|c| c.as_str() == name)
            .expect("a possible value names a condition")
    })
}
