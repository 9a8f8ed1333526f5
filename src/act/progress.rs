//! What an action reports while it runs: typed events for the caller to
//! show as it likes (a spinner, a log line, nothing). Actions print
//! nothing themselves.

use rustix::process::Signal;
use std::time::Duration;

/// One step of a kill's execution, as it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A round of signals went out: its number (from 1), the signal, and
    /// the PIDs it reached (after their identity and holding checks).
    Signalled {
        /// The round, from 1.
        round: u32,
        /// The signal sent first.
        signal: Signal,
        /// The PIDs signalled.
        pids: Vec<u32>,
    },
    /// The wait for the targets' memory to come back began.
    ReleaseWaitStarted,
    /// The memory is not back yet, `elapsed` into the wait: what still
    /// holds it, one line per GPU.
    MemoryHeld {
        /// Time since the wait began.
        elapsed: Duration,
        /// What holds the memory, per GPU.
        held: Vec<super::kill::Held>,
    },
    /// The wait for the memory ended (it came back, or the deadline
    /// passed); the verdict follows.
    ReleaseWaitEnded,
}
