//! Actions: freeing GPUs by identity ([`kill`]), waiting for them to be
//! free ([`wait`]), and the identity-checked signalling both use
//! ([`identity`]). They read snapshots and act; they print nothing.

pub mod identity;
pub mod kill;
pub mod quiesce;
pub mod wait;
