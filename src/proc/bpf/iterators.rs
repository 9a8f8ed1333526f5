//! The iterator walk, loaded by aya: where the per-process walk cannot run
//! (a kernel before 6.7, without its kfuncs, or one whose verifier refuses
//! it), and where a test asks for it. aya 0.14's loader parses the
//! kernel's BTF itself and relocates the object against it on every load;
//! the attach needs the BTF once more (`btf`, parsed here when not given).

use super::direct::aligned;
use super::loaded::iter_mut;
use super::unavailable::{chain, failed, refused_by_aya};
use super::{kfunc, object, Globals, Unavailable, ITERATORS};
use crate::model::BpfStep;
use aya::{Btf, Ebpf, EbpfLoader};

/// Loads and verifies the iterator walk's programs, its constants set to
/// `globals`.
pub fn load(globals: &Globals, btf: Option<Btf>) -> Result<Box<Ebpf>, Unavailable> {
    let btf = match btf {
        Some(btf) => btf,
        None => Btf::from_sys_fs().map_err(|e| Unavailable::NoBtf(chain(&e)))?,
    };
    // Its programs call kfuncs where the kernel has them (kfunc.rs).
    let linked = kfunc::link(object(), &btf).map(|code| aligned(&code));
    let code = linked.as_ref().map_or(object(), |(buf, at)| &buf[*at..]);
    let mut loader = EbpfLoader::new();
    loader.btf(Some(&btf));
    // aya 0.14 has no type for a task-storage map (the per-process walk's
    // kept_maps); it makes it with the object's other maps, and this walk
    // never uses it (task storage is kernel 5.12's, as this walk is).
    loader.allow_unsupported_maps();
    for (name, bytes) in globals {
        loader.override_global(name, bytes.as_slice(), true);
    }
    let loaded = loader.load(code);
    drop(loader);
    let mut ebpf = loaded.map_err(|e| failed(BpfStep::LoadingObject, &e))?;
    for &(name, kind, _) in &ITERATORS {
        iter_mut(&mut ebpf, name)?
            .load(kind, &btf)
            .map_err(|e| refused_by_aya(name, e))?;
    }
    Ok(Box::new(ebpf))
}
