//! The per-process walk loaded by gpufree itself, not by aya's loader.
//!
//! aya 0.14's loader parses the kernel's whole BTF as it is made, and
//! relocates the object against it on every load: together more than the
//! walk's whole budget in a one-shot command (README's performance
//! section). Here the two steps come apart:
//! - [`relocate`] makes a copy of the object whose instructions already
//!   carry this kernel's field offsets and type ids, with aya-obj's
//!   relocation: once per boot, kept by cache/;
//! - [`load`] loads such a copy with aya-obj's parse, map and call
//!   relocations, aya's maps and syscalls.rs's calls: no kernel BTF at all.

use super::syscalls::{self, IterProgram};
use super::unavailable::{failed, missing, refused_by_kernel, Unavailable};
use super::Globals;
use crate::model::{BpfPart, BpfStep};
use aya::maps::{Map, MapData};
use aya::Btf;
use aya_obj::generated::bpf_insn;
use aya_obj::{EbpfSectionKind, Object};
use object::{Object as _, ObjectSection};
use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// The per-process walk's program.
pub const PROGRAM: &str = "gpufree_walk";

/// The per-process walk, loaded and verified: its maps by name and its
/// program.
pub struct Direct {
    /// The object's maps, by name.
    pub maps: HashMap<String, Map>,
    /// The walk's program.
    pub program: OwnedFd,
}

/// The bytes of `insns`, as the kernel reads them (little-endian).
fn insn_bytes(insns: &[bpf_insn]) -> Vec<u8> {
    let mut out = Vec::with_capacity(insns.len() * 8);
    for i in insns {
        out.push(i.code);
        out.push(i.dst_reg() | i.src_reg() << 4);
        out.extend_from_slice(&i.off.to_le_bytes());
        out.extend_from_slice(&i.imm.to_le_bytes());
    }
    out
}

/// The object in `bytes`, parsed (from an 8-byte aligned copy: the ELF
/// reader reads its headers in place).
fn parse(bytes: &[u8]) -> Result<Object, Unavailable> {
    let (buf, at) = aligned(bytes);
    Object::parse(&buf[at..]).map_err(|e| object_error(&e))
}

/// `code` copied to an 8-byte aligned start: the buffer and where the copy
/// starts in it.
pub fn aligned(code: &[u8]) -> (Vec<u8>, usize) {
    let mut buf = vec![0u8; code.len() + 8];
    let at = (8 - buf.as_ptr() as usize % 8) % 8;
    buf[at..at + code.len()].copy_from_slice(code);
    buf.truncate(at + code.len());
    (buf, at)
}

/// A step's error, as why the walk cannot run.
fn object_error(e: &(dyn std::error::Error + 'static)) -> Unavailable {
    failed(BpfStep::Object, e)
}

/// A copy of `linked` (the object, its kfunc calls linked: kfunc.rs)
/// relocated to the kernel whose BTF is `btf`: each function's
/// instructions written back where the ELF keeps them.
pub fn relocate(linked: &[u8], btf: &Btf) -> Result<Vec<u8>, Unavailable> {
    let (buf, at) = aligned(linked);
    let mut obj = Object::parse(&buf[at..]).map_err(|e| object_error(&e))?;
    obj.relocate_btf(btf)
        .map_err(|e| failed(BpfStep::Relocating, &e))?;
    let file = object::File::parse(&buf[at..]).map_err(|e| object_error(&e))?;
    let mut out = linked.to_vec();
    for f in obj.functions.values() {
        let code = insn_bytes(&f.instructions);
        let range = file
            .section_by_index(f.section_index)
            .ok()
            .and_then(|s| s.file_range())
            .and_then(|(at, size)| {
                let start = usize::try_from(at).ok()?.checked_add(f.section_offset)?;
                let end = start.checked_add(code.len())?;
                (end <= usize::try_from(at + size).ok()?).then_some(start..end)
            });
        let Some(into) = range.and_then(|r| out.get_mut(r)) else {
            return Err(Unavailable::OutsideSection {
                function: f.name.clone(),
            });
        };
        into.copy_from_slice(&code);
    }
    Ok(out)
}

/// Loads the per-process walk from `relocated` (made by [`relocate`] for
/// this kernel): `attach_btf_id` is the kernel's `bpf_iter_task`, `globals`
/// the object's constants. The kernel's verifier decides.
pub fn load(
    relocated: &[u8],
    attach_btf_id: u32,
    globals: &Globals,
) -> Result<Direct, Unavailable> {
    let mut obj = parse(relocated)?;
    let values = globals
        .iter()
        .map(|(name, bytes)| (*name, (bytes.as_slice(), true)))
        .collect();
    obj.patch_map_data(values).map_err(|e| object_error(&e))?;
    let features = aya::features();
    let btf_bytes = match features.btf() {
        Some(f) => obj
            .fixup_and_sanitize_btf(f)
            .map_err(|e| object_error(&e))?
            .map(aya_obj::btf::Btf::to_bytes),
        None => None,
    };
    let btf = btf_bytes
        .ok_or(Unavailable::NoObjectBtf)
        .and_then(|b| syscalls::load_btf(&b).map_err(|e| failed(BpfStep::LoadingBtf, &e)))?;
    let maps = create_maps(&mut obj, &btf)?;
    let text: HashSet<usize> = obj.functions.keys().map(|(section, _)| *section).collect();
    let fds = maps
        .iter()
        .map(|(name, data, m)| (name.as_str(), data.fd().as_fd().as_raw_fd(), m));
    obj.relocate_maps(fds, &text)
        .and_then(|()| obj.relocate_calls(&text))
        .map_err(|e| failed(BpfStep::Relocating, &e))?;
    obj.sanitize_functions(features);
    let program = load_program(&obj, &btf, attach_btf_id)?;
    let maps = maps
        .into_iter()
        .map(|(name, data, _)| Ok((name, Map::from_map_data(data)?)))
        .collect::<Result<_, aya::maps::MapError>>()
        .map_err(|e| failed(BpfStep::Maps, &e))?;
    Ok(Direct { maps, program })
}

/// Each map created, by name, with the object's description of it.
type CreatedMaps = Vec<(String, MapData, aya_obj::Map)>;

/// Maps created for `obj`'s maps, their data written (its constants
/// frozen).
fn create_maps(obj: &mut Object, btf: &OwnedFd) -> Result<CreatedMaps, Unavailable> {
    let mut maps = Vec::new();
    for (name, m) in obj.maps.drain() {
        let data = MapData::create(m.clone(), &name, Some(btf.as_fd()))
            .map_err(|e| failed(BpfStep::CreatingMap, &e))?;
        if !m.data().is_empty() {
            let frozen = m.section_kind() == EbpfSectionKind::Rodata;
            let size = usize::try_from(m.value_size()).unwrap_or(0);
            if m.data().len() != size {
                return Err(Unavailable::MapSize {
                    bytes: m.data().len(),
                    value_size: size,
                });
            }
            syscalls::set_data(data.fd().as_fd(), m.data(), size, frozen)
                .map_err(|e| failed(BpfStep::FillingMap, &e))?;
        }
        maps.push((name, data, m));
    }
    Ok(maps)
}

/// Loads [`PROGRAM`] of `obj`, its maps and calls relocated.
fn load_program(obj: &Object, btf: &OwnedFd, attach_btf_id: u32) -> Result<OwnedFd, Unavailable> {
    let program = obj
        .programs
        .get(PROGRAM)
        .ok_or_else(|| missing(BpfPart::Program, PROGRAM))?;
    let f = obj
        .functions
        .get(&program.function_key())
        .ok_or_else(|| missing(BpfPart::Program, PROGRAM))?;
    let insns = insn_bytes(&f.instructions);
    let func_info = f.func_info.func_info_bytes();
    let line_info = f.line_info.line_info_bytes();
    let rec = |size: usize| u32::try_from(size).unwrap_or(0);
    syscalls::load_iter(&IterProgram {
        name: PROGRAM,
        insns: &insns,
        license: &program.license,
        btf: btf.as_fd(),
        func_info: (rec(f.func_info_rec_size), &func_info),
        line_info: (rec(f.line_info_rec_size), &line_info),
        attach_btf_id,
    })
    .map_err(|(e, log)| refused_by_kernel(PROGRAM, &e, &log))
}
