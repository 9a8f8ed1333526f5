//! Actions: freeing GPUs by identity ([`kill`]), waiting for them to be
//! free ([`wait`]), the identity-checked signalling both use
//! ([`identity`]) and the one loop every wait runs ([`monitor`]). They
//! read snapshots and act; they print nothing, and report their progress
//! as [`progress::Event`]s to a callback. [`audit`] keeps the record of
//! every kill (journal, syslog, `--audit-log`).

pub mod audit;
pub mod identity;
pub mod kill;
pub mod monitor;
pub mod progress;
pub mod quiesce;
pub mod wait;
