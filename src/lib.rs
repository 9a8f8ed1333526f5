//! gpufree: who holds my GPU memory, why is it not free, and what exactly
//! frees it.
//!
//! The crate is a library with a thin binary (`src/main.rs`). Data flows
//! one way (docs/ARCHITECTURE.md; `tests/it/architecture.rs` checks it):
//!
//! - [`model`]: the [`model::Snapshot`] every presenter reads (serde).
//! - collection: [`proc`] (/proc and device-node scanning, pure parsers),
//!   [`nvml`] (the NVML backend over nvml-wrapper), [`sysfs`] (GPUs NVML
//!   does not see: DRM cards, their memory, the KFD's), [`kubelet`] (the
//!   kubelet's pod-resources API), [`snapshot`] (one
//!   collection joined into a snapshot); [`fleet`] (every node's series,
//!   read from Prometheus's HTTP API, for `gpufree fleet`).
//! - [`diagnose`]: verdicts and findings, pure functions of a snapshot;
//!   [`pipeline`] joins it to collection: collect, narrow, judge.
//! - [`act`]: kill and wait, by identity; values out, nothing printed.
//! - [`present`]: table, why, kill, JSON and metrics writers.
//! - front ends: [`watch`] (the live view), [`record`] (the timeline), [`serve`] (the metrics
//!   server), [`doctor`] (the checks of a systemd unit).
//! - [`safe`]: hostile strings made harmless: escaped for a terminal,
//!   quoted for a shell; [`paths`]: files a caller names, written only
//!   through a directory reached without links; [`units`]: sizes and
//!   durations.
//! - [`demo`] (its holder processes and their retitling inside), [`sim`]: the
//!   reference incident on the simulator.
//! - [`test_hooks`]: where the test suite steers gpufree (pause points,
//!   the in-kernel walk's hooks); no-ops without the `test-hooks` feature.
//! - [`cli`]: clap arguments to one command's run, its typed errors and
//!   their exit codes.

#![cfg_attr(test, allow(clippy::too_many_lines))] // Tests are exempt.

pub mod act;
pub mod cli;
pub mod demo;
pub mod diagnose;
pub mod doctor;
pub mod fleet;
pub mod kubelet;
pub mod model;
pub mod nvml;
pub mod paths;
pub mod pipeline;
pub mod present;
pub mod proc;
pub mod record;
pub mod safe;
pub mod serve;
pub mod sim;
pub mod snapshot;
pub mod sysfs;
pub mod test_hooks;
pub mod units;
pub mod watch;
