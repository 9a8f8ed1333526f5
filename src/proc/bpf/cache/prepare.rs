//! `gpufree prepare`: this boot's relocation of the per-process walk,
//! made and kept in the cache by the cache's own rules (mod.rs), unless a
//! sound one is kept there already; then loaded from the file as the next
//! command will load it, so that the kernel's verifier is known to take
//! what that command will load.

use super::super::{constants, per_process, Globals, TestHooks, MAX_DEVS};
use super::{Maker, FILE};
use crate::model::{
    CacheNote, IteratorsWhy, KeptFile, LinkFailure, NothingToKeep, PrepareFailure, Prepared,
    Relocation,
};
use std::path::Path;
use std::time::Instant;

/// The walk's constants for the loads: every device and major slot
/// filled and every inode bit set, so that no branch of the program is
/// dead to the verifier (a command's own targets take a part of it).
fn widest(hooks: TestHooks) -> Vec<(&'static str, Vec<u8>)> {
    let mut all = [0u32; MAX_DEVS];
    for (slot, v) in all.iter_mut().zip((1..).map(|i: u32| u32::MAX - i)) {
        *slot = v;
    }
    let n = u32::try_from(MAX_DEVS).unwrap_or(0);
    constants((all, n), (all, n), u64::MAX, hooks)
}

/// Milliseconds since `t`, to the microsecond.
fn ms(t: Instant) -> f64 {
    (t.elapsed().as_secs_f64() * 1e6).round() / 1000.0
}

/// Keeps this boot's relocation of the per-process walk in `dir` (None:
/// the cache is off): a sound one kept there is kept, anything else is
/// made again and written; then loaded from the file, as the next command
/// loads it. Only root (its real and effective ids), as only root writes
/// the cache.
pub fn prepare(dir: Option<&Path>) -> Result<Prepared, PrepareFailure> {
    use rustix::process::{geteuid, getuid};
    if !(getuid().is_root() && geteuid().is_root()) {
        return Err(PrepareFailure::NotRoot);
    }
    let Some(dir) = dir else {
        return Ok(Prepared::Nothing(NothingToKeep::Off));
    };
    let globals = widest(TestHooks::from_env());
    let started = Instant::now();
    let found = match per_process::load(&globals, Some(dir), Maker::Prepare) {
        Ok((_walk, found)) => found,
        Err(not) => match not.why {
            IteratorsWhy::Link(LinkFailure::NoKfunc(name)) => {
                return Ok(Prepared::Nothing(NothingToKeep::NoKfunc(name)))
            }
            why => return Err(PrepareFailure::NotLoaded(why)),
        },
    };
    let load_ms = ms(started);
    if let Relocation::Made(notes) = &found {
        for note in notes {
            if let CacheNote::NotKept(why) = note {
                return Err(PrepareFailure::NotKept(why.clone()));
            }
        }
    }
    // Where the file was there, that load was from it.
    let check_ms = match found {
        Relocation::Made(_) => check(&globals, dir)?,
        _ => load_ms,
    };
    Ok(Prepared::Kept(KeptFile {
        file: dir.join(FILE).display().to_string(),
        found,
        load_ms,
        check_ms,
    }))
}

/// Loads the walk from the file in `dir`, as the next command will: its
/// milliseconds, or why it was not taken from the file.
fn check(globals: &Globals, dir: &Path) -> Result<f64, PrepareFailure> {
    let started = Instant::now();
    match per_process::load(globals, Some(dir), Maker::Prepare) {
        Ok((_walk, Relocation::Kept | Relocation::Prepared)) => Ok(ms(started)),
        Ok((_walk, other)) => Err(PrepareFailure::NotReadBack(other)),
        Err(not) => Err(PrepareFailure::NotLoaded(not.why)),
    }
}
