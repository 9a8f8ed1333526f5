//! Test hooks: moments where a test harness steers gpufree through its
//! environment — a pause point where gpufree stops itself (SIGSTOP) so that
//! the harness can change the world exactly there, five hooks of the
//! in-kernel walk, one of `--scan auto` and one of device-node discovery.
//! They change nothing gpufree decides from what it reads: each stands in
//! for a moment or a machine the tests cannot make on demand.
//!
//! They exist only in a build with the `test-hooks` cargo feature, which
//! the test suite turns on (Cargo.toml: gpufree is its own dev-dependency
//! with the feature), and never in a release build (`cargo build
//! --release`, the .deb, the RPM): there each hook below is an inline
//! no-op that reads nothing, and the binary holds none of their variables'
//! names (scripts/check-deb.sh checks the packaged one;
//! tests/it/hooks.rs checks that only `on.rs` names them). Even
//! where built, they never run in secure mode (setuid, file capabilities).
//!
//! Pause points (one at a time, the variable's value names it):
//! [`after_holder_scan`] (`scan:PID`: the scan has read PID's fd table and
//! maps and found it a holder, and has not yet read its identity and
//! details again), [`before_signals`] (`signal`: a kill was confirmed; no
//! target has been pinned or stopped yet) and [`while_held`] (`held`: the
//! first round's targets are frozen or stopped, not yet checked or
//! signalled). The in-kernel walk's hooks: [`break_verifier`],
//! [`iterator_walk`], [`report_unread`], [`slow_walk`], and
//! [`walk_reread`], which only tells the test what the walk read again;
//! `--scan auto`'s:
//! [`open_files`]; device-node discovery's: [`gpu_majors`]; `--from`'s:
//! [`snapshot_copy`]. docs/SPEC.md names each variable.

#[cfg(feature = "test-hooks")]
mod on;
#[cfg(feature = "test-hooks")]
pub use on::*;

#[cfg(not(feature = "test-hooks"))]
mod off;
#[cfg(not(feature = "test-hooks"))]
pub use off::*;
