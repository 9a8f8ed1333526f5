//! `gpufree prepare`: this boot's relocation of the per-process walk,
//! made and kept in the cache by the cache's own rules (mod.rs), unless a
//! sound one is kept there already; then loaded from the file as the next
//! command will load it, so that the kernel's verifier is known to take
//! what that command will load.

use super::super::direct::Direct;
use super::super::object;
use super::super::{constants, per_process, Globals, TestHooks};
use super::{pin, Maker, FILE};
use crate::model::{
    CacheNote, IteratorsWhy, KeptFile, LinkFailure, NothingToKeep, PrepareFailure, Prepared,
    Relocation, WalkPin,
};
use std::path::Path;
use std::time::Instant;

/// Milliseconds since `t`, to the microsecond.
fn ms(t: Instant) -> f64 {
    (t.elapsed().as_secs_f64() * 1e6).round() / 1000.0
}

/// Keeps this boot's relocation of the per-process walk in `dir` (None:
/// the cache is off): a sound one kept there is kept, anything else is
/// made again and written; then loaded from the file, as the next command
/// loads it, and that load pinned in `pins` (None: off) for the boot's
/// one-shot commands. Only root (its real and effective ids), as only
/// root writes the cache.
pub fn prepare(dir: Option<&Path>, pins: Option<&Path>) -> Result<Prepared, PrepareFailure> {
    use rustix::process::{geteuid, getuid};
    if !(getuid().is_root() && geteuid().is_root()) {
        return Err(PrepareFailure::NotRoot);
    }
    let Some(dir) = dir else {
        return Ok(Prepared::Nothing(NothingToKeep::Off));
    };
    let hooks = TestHooks::from_env();
    let globals = constants(hooks);
    let started = Instant::now();
    let (walk, found) = match per_process::load(&globals, Some(dir), Maker::Prepare) {
        Ok(loaded) => loaded,
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
    let (walk, check_ms) = match found {
        Relocation::Made(_) => check(&globals, dir)?,
        _ => (walk, load_ms),
    };
    let pin = match pins {
        Some(pins) if hooks == TestHooks::default() => match pin::keep(pins, object(), &walk) {
            Ok(at) => WalkPin::Pinned(at.display().to_string()),
            Err(why) => WalkPin::NotPinned(why),
        },
        _ => WalkPin::Off,
    };
    Ok(Prepared::Kept(KeptFile {
        file: dir.join(FILE).display().to_string(),
        found,
        load_ms,
        check_ms,
        pin,
    }))
}

/// Loads the walk from the file in `dir`, as the next command will: the
/// walk and its milliseconds, or why it was not taken from the file.
fn check(globals: &Globals, dir: &Path) -> Result<(Direct, f64), PrepareFailure> {
    let started = Instant::now();
    match per_process::load(globals, Some(dir), Maker::Prepare) {
        Ok((walk, Relocation::Kept | Relocation::Prepared)) => Ok((walk, ms(started))),
        Ok((_walk, other)) => Err(PrepareFailure::NotReadBack(other)),
        Err(not) => Err(PrepareFailure::NotLoaded(not.why)),
    }
}
