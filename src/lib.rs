//! gpufree: who holds my GPU memory, why is it not free, and what exactly
//! frees it.
//!
//! The crate is a library with a thin binary (`src/main.rs`). Modules, each
//! depending only on those above it:
//!
//! - [`model`]: the [`model::Snapshot`] every presenter reads (serde).
//! - [`proc`]: /proc and device-node scanning, pure parsers.
//! - [`safe`]: hostile strings made harmless: escaped for a terminal,
//!   quoted for a shell.
//! - [`nvml`]: the NVML backend over nvml-wrapper.
//! - [`snapshot`]: takes one snapshot from the scan and NVML.
//! - [`diagnose`]: findings, a pure function of a snapshot.
//! - [`present`]: table and JSON output of a snapshot.
//! - [`act`]: the kill plan, identity-checked signals, the release wait.
//! - [`watch`], [`serve`]: the live view and the metrics server.
//! - [`doctor`]: the checks of a systemd unit.
//! - [`demo`] (its holder processes and their retitling inside), [`sim`]: the
//!   reference incident on the simulator.
//! - [`cli`]: clap arguments to one command's run, its typed errors and
//!   their exit codes.

pub mod act;
pub mod cli;
pub mod demo;
pub mod diagnose;
pub mod doctor;
pub mod model;
pub mod nvml;
pub mod pause;
pub mod present;
pub mod proc;
pub mod safe;
pub mod serve;
pub mod sim;
pub mod snapshot;
pub mod units;
pub mod watch;
