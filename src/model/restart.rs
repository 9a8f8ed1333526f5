//! Where a unit's restart policy was read ([`RestartSource`]) and what
//! could not be read of it ([`UnitUnread`]), as values: paths, counts and
//! the system's errors stay data; the words are made in
//! `present/words/proc.rs`. JSON's `units.*.source` and `.unreadable` are
//! those words, `.from` and `.unreadable_causes` these values.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Where a unit's restart policy was read.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RestartSource {
    /// Its unit file and drop-ins, in order.
    Files(Vec<String>),
    /// systemd over D-Bus, with how many times it restarted the unit so
    /// far where it said.
    Systemd {
        /// `NRestarts`.
        restarts: Option<u32>,
    },
}

impl Default for RestartSource {
    fn default() -> RestartSource {
        RestartSource::Files(Vec::new())
    }
}

/// A unit file or drop-in that exists but could not be read, or systemd
/// that could not be asked: the policy may differ from what was read.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum UnitUnread {
    /// Reading `path` failed (the system's error).
    Io {
        /// The file.
        path: String,
        /// The system's error.
        error: String,
    },
    /// `path` is not a regular file.
    NotRegular {
        /// The file.
        path: String,
    },
    /// `path` is larger than a unit file may be.
    TooLarge {
        /// The file.
        path: String,
        /// The most bytes read.
        max: u64,
    },
    /// systemd over D-Bus at `address` could not be asked.
    Bus {
        /// The bus's address.
        address: String,
        /// Why.
        why: BusFailure,
    },
}

/// Why systemd over D-Bus could not be asked.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BusFailure {
    /// No async runtime could be made for the query (the system's error).
    NoRuntime(String),
    /// No answer within this time.
    NoAnswer(Duration),
    /// The bus answered with an error (D-Bus's words).
    Failed(String),
    /// The query's thread panicked.
    Panicked,
}
