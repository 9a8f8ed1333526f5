//! Why a kill's GPU memory does not count as back (yet): what the release
//! wait shows as it waits, what the end verdict sorts into busy and
//! unknown, and what the report lists.

use crate::units::mib;

/// Why a GPU's memory does not count as back (yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// NVML did not report the GPU: whether it is back is unknown.
    NotReported {
        /// The GPU.
        gpu: u32,
    },
    /// NVML reported the GPU but not its memory: unknown too.
    Unreadable {
        /// The GPU.
        gpu: u32,
    },
    /// More memory is used than the targets left behind, or NVML still
    /// lists one of the watched PIDs.
    Over {
        /// The GPU.
        gpu: u32,
        /// Bytes used now.
        used: u64,
        /// The most that counts as released (the expected baseline plus
        /// slack).
        limit: u64,
        /// Watched PIDs NVML still lists on it.
        listed: Vec<u32>,
    },
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Held::NotReported { gpu } => write!(f, "GPU {gpu}: NVML did not report it"),
            Held::Unreadable { gpu } => write!(f, "GPU {gpu}: its memory could not be read"),
            Held::Over {
                gpu,
                used,
                limit,
                listed,
            } => {
                write!(
                    f,
                    "GPU {gpu}: {} used (expected at most {})",
                    mib(*used),
                    mib(*limit)
                )?;
                if !listed.is_empty() {
                    write!(f, ", NVML still lists {listed:?}")?;
                }
                Ok(())
            }
        }
    }
}
