//! The per-process walk: its relocation from this boot's cache (cache.rs)
//! or made afresh from the kernel's BTF and kept there, then loaded by
//! direct.rs.

use super::cache::{self, Relocated};
use super::direct::{self, Direct, Globals};
use super::unavailable::{chain, failed};
use super::{kfunc, object, IteratorsWhy, Unavailable};
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
/// relocation kept in `cache` if any: the walk, and whether its relocation
/// came from the cache.
pub fn load(globals: &Globals, cache: Option<&Path>) -> Result<(Direct, bool), Box<NotLoaded>> {
    if let Some(dir) = cache {
        if let Some(kept) = cache::read(dir, object()) {
            // Where the kernel refuses it, a fresh relocation is tried (and
            // kept in its place if the kernel takes that); without the
            // privilege, none would load.
            match direct::load(&kept.object, kept.attach_btf_id, globals) {
                Ok(d) => return Ok((d, true)),
                Err(e @ Unavailable::NotPermitted(_)) => {
                    return Err(not_loaded(IteratorsWhy::Load(e), None))
                }
                Err(_) => {}
            }
        }
    }
    let btf = match Btf::from_sys_fs() {
        Ok(btf) => btf,
        Err(e) => {
            return Err(not_loaded(
                IteratorsWhy::Load(Unavailable::NoBtf(chain(&e))),
                None,
            ))
        }
    };
    let relocated = match relocate(&btf) {
        Ok(r) => r,
        Err(why) => return Err(not_loaded(why, Some(btf))),
    };
    drop(btf);
    let loaded = direct::load(&relocated.object, relocated.attach_btf_id, globals);
    match loaded {
        Ok(d) => {
            if let Some(dir) = cache {
                cache::write(dir, object(), &relocated);
            }
            Ok((d, false))
        }
        Err(e) => Err(not_loaded(IteratorsWhy::Load(e), None)),
    }
}

/// The object, its kfunc calls linked and its instructions relocated to
/// the kernel whose BTF is `btf`.
fn relocate(btf: &Btf) -> Result<Relocated, IteratorsWhy> {
    let linked = kfunc::link(object(), btf)?;
    let attach_btf_id = btf
        .id_by_type_name_kind("bpf_iter_task", BtfKind::Func)
        .map_err(|e| IteratorsWhy::Load(failed("the kernel's bpf_iter_task", &e)))?;
    let object = direct::relocate(&linked, btf).map_err(IteratorsWhy::Load)?;
    Ok(Relocated {
        object,
        attach_btf_id,
    })
}
