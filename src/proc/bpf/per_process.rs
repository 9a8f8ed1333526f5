//! The per-process walk: its relocation from this boot's cache (cache/)
//! or made afresh from the kernel's BTF and kept there, then loaded by
//! direct.rs.

use super::cache::{self, Maker, Relocated};
use super::direct::{self, Direct};
use super::unavailable::{chain, failed};
use super::{kfunc, object, Globals, Unavailable};
pub use crate::model::Relocation;
use crate::model::{BpfStep, CacheNote, IteratorsWhy};
use aya::Btf;
use aya_obj::btf::BtfKind;
use std::path::Path;

/// Why the per-process walk was not loaded, with the kernel's BTF where it
/// was parsed (the iterator walk needs it).
pub struct NotLoaded {
    /// Why.
    pub why: IteratorsWhy,
    /// The kernel's BTF, if parsed.
    pub btf: Option<Btf>,
}

/// `why`, with `btf`.
fn not_loaded(why: IteratorsWhy, btf: Option<Btf>) -> Box<NotLoaded> {
    Box::new(NotLoaded { why, btf })
}

/// Loads the per-process walk, its constants set to `globals`, with the
/// relocation kept in `cache` if any (one made here is kept there as
/// made `by` it): the walk, and how its relocation was had.
pub fn load(
    globals: &Globals,
    cache: Option<&Path>,
    by: Maker,
) -> Result<(Direct, Relocation), Box<NotLoaded>> {
    let mut notes = Vec::new();
    if let Some(dir) = cache {
        match cache::read(dir, object()) {
            Ok(kept) => match direct::load(&kept.object, kept.attach_btf_id, globals) {
                Ok(d) if kept.by == Maker::Prepare => return Ok((d, Relocation::Prepared)),
                Ok(d) => return Ok((d, Relocation::Kept)),
                // Without the privilege, no relocation would load.
                Err(e @ Unavailable::NotPermitted(_)) => {
                    return Err(not_loaded(IteratorsWhy::Load(e), None))
                }
                // Relocated afresh, and kept in its place if that loads.
                Err(e) => notes.push(CacheNote::KeptDidNotLoad(e)),
            },
            Err(None) => {}
            Err(Some(why)) => notes.push(CacheNote::NotUsed(why)),
        }
    }
    let btf = match Btf::from_sys_fs() {
        Ok(btf) => btf,
        Err(e) => {
            let why = IteratorsWhy::Load(Unavailable::NoBtf(chain(&e)));
            return Err(not_loaded(why, None));
        }
    };
    let relocated = match relocate(&btf, by) {
        Ok(r) => r,
        Err(why) => return Err(not_loaded(why, Some(btf))),
    };
    match direct::load(&relocated.object, relocated.attach_btf_id, globals) {
        Ok(d) => {
            drop(btf);
            if let Some(dir) = cache {
                if let Err(why) = cache::write(dir, object(), &relocated) {
                    notes.push(CacheNote::NotKept(why));
                }
            }
            Ok((d, Relocation::Made(notes)))
        }
        Err(e) => Err(not_loaded(IteratorsWhy::Load(e), Some(btf))),
    }
}

/// The object, its kfunc calls linked and its instructions relocated to
/// the kernel whose BTF is `btf`, to be kept as made `by` it.
fn relocate(btf: &Btf, by: Maker) -> Result<Relocated, IteratorsWhy> {
    let linked = kfunc::link(object(), btf).map_err(IteratorsWhy::Link)?;
    let attach_btf_id = btf
        .id_by_type_name_kind("bpf_iter_task", BtfKind::Func)
        .map_err(|e| IteratorsWhy::Load(failed(BpfStep::FindingIterTask, &e)))?;
    let object = direct::relocate(&linked, btf).map_err(IteratorsWhy::Load)?;
    Ok(Relocated {
        object,
        attach_btf_id,
        by,
    })
}
