//! The options of `gpufree check`.

use super::*;

/// Options of `gpufree check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Whose words and exit codes: text, json, npd (0 ok, 1 problem, 2
    /// unknown; one line of at most 80 characters), nagios (0/1/2/3 and
    /// performance data), slurm (a drain reason; 1 only for what breaks
    /// the next job).
    #[arg(long, value_enum, default_value = "text")]
    pub format: CheckFormat,
    /// Unaccounted memory below SIZE is no leak.
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = crate::units::parse_size)]
    pub leak_min: u64,
    /// A leak counts once it has lasted DUR (kept between runs in the state
    /// file; 0: at once).
    #[arg(long, value_name = "DUR", default_value = "5m", value_parser = crate::units::parse_duration)]
    pub grace: std::time::Duration,
    /// Leave a condition out (repeatable): nvml, stuck, leak, leftover,
    /// zombie, unknown.
    #[arg(long, value_enum, value_name = "CONDITION")]
    pub ignore: Vec<CheckCondition>,
    /// Where a check remembers since when memory has been unaccounted.
    #[arg(
        long,
        value_name = "FILE",
        env = "GPUFREE_CHECK_STATE",
        default_value = "/run/gpufree/check.json"
    )]
    pub state: PathBuf,
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

/// `check --ignore`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckCondition {
    /// NVML failing or a GPU lost.
    Nvml,
    /// Holders stuck in the driver (D state).
    Stuck,
    /// Unaccounted memory past its grace period.
    Leak,
    /// Holders of no job, unit, container or pod.
    Leftover,
    /// Kubernetes: gone pods, another pod's GPU, unallocated memory.
    Pod,
    /// Zombie holders.
    Zombie,
    /// Unknown verdicts.
    Unknown,
}
