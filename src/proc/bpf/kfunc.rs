//! Calls of kernel functions (kfuncs) in the object, linked by hand.
//!
//! The per-process walk calls four kfuncs (the open-coded mapping iterator
//! and `bpf_rdonly_cast`). A kfunc call is a `call` instruction whose
//! source register is `BPF_PSEUDO_KFUNC_CALL` and whose immediate is the
//! function's id in the running kernel's BTF; a loader links it from the
//! object's extern declaration. aya 0.14 (the newest aya this project's
//! Rust toolchain builds) does not, so the program calls a helper with a
//! placeholder number instead (`KFUNC(n)` in kernel.h) and this module
//! rewrites each such call, in a copy of the object, into the kfunc call
//! for the running kernel. Written by hand because no loader this project
//! can build does it; it touches only `call` instructions of the object's
//! code sections whose immediate is one of the placeholders.

use aya::Btf;
use aya_obj::btf::BtfKind;
use aya_obj::generated::BPF_PSEUDO_KFUNC_CALL;
use object::elf::SHF_EXECINSTR;
use object::{Object, ObjectSection, SectionFlags};

/// `BPF_JMP | BPF_CALL`: the opcode of a call.
const CALL: u8 = 0x85;
/// The placeholders' range (kernel.h: `KFUNC(n)` is this plus n).
const PLACEHOLDERS: std::ops::Range<u32> = 0x7ff0_0000..0x7ff1_0000;
/// The program's placeholders and the kfuncs they stand for.
const KFUNCS: [(u32, &str); 4] = [
    (0x7ff0_0001, "bpf_iter_task_vma_new"),
    (0x7ff0_0002, "bpf_iter_task_vma_next"),
    (0x7ff0_0003, "bpf_iter_task_vma_destroy"),
    (0x7ff0_0004, "bpf_rdonly_cast"),
];

/// Why the kfunc calls could not be linked: the kernel has none of one,
/// or the object is not one this module can link (unreadable, or calling
/// a placeholder it does not know: a program newer than this loader).
pub use crate::model::LinkFailure as LinkError;

/// A copy of `object` whose placeholder calls call the kfuncs of the
/// kernel whose BTF is `btf`.
pub fn link(object: &[u8], btf: &Btf) -> Result<Vec<u8>, LinkError> {
    let mut ids = Vec::with_capacity(KFUNCS.len());
    for (placeholder, name) in KFUNCS {
        let id = btf
            .id_by_type_name_kind(name, BtfKind::Func)
            .map_err(|_| LinkError::NoKfunc(name.to_string()))?;
        ids.push((placeholder, id));
    }
    let file = object::File::parse(object).map_err(|e| LinkError::Object(e.to_string()))?;
    let mut out = object.to_vec();
    let mut linked = 0;
    for section in file.sections() {
        let is_code = matches!(section.flags(),
            SectionFlags::Elf { sh_flags } if sh_flags & u64::from(SHF_EXECINSTR) != 0);
        let Some((offset, size)) = section.file_range().filter(|_| is_code) else {
            continue;
        };
        let range = usize::try_from(offset)
            .ok()
            .zip(usize::try_from(size).ok())
            .and_then(|(at, n)| out.get_mut(at..at.checked_add(n)?))
            .ok_or(LinkError::CodePastEnd)?;
        linked += link_calls(range, &ids)?;
    }
    if linked == 0 {
        return Err(LinkError::NoKfuncCall);
    }
    Ok(out)
}

/// Rewrites the placeholder calls among `code`'s instructions (a call of
/// a helper, no offset, whose number is a placeholder); how many. A
/// placeholder it does not know is an error, not a call left to fail.
fn link_calls(code: &mut [u8], ids: &[(u32, u32)]) -> Result<usize, LinkError> {
    let mut n = 0;
    for insn in code.chunks_exact_mut(8) {
        let imm = u32::from_le_bytes([insn[4], insn[5], insn[6], insn[7]]);
        if (insn[0], insn[1], insn[2], insn[3]) != (CALL, 0, 0, 0) || !PLACEHOLDERS.contains(&imm) {
            continue;
        }
        let (_, id) = ids
            .iter()
            .find(|(p, _)| *p == imm)
            .ok_or(LinkError::Placeholder(imm))?;
        insn[1] = (BPF_PSEUDO_KFUNC_CALL as u8) << 4;
        insn[4..8].copy_from_slice(&id.to_le_bytes());
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_placeholder_calls_become_kfunc_calls() {
        let insn = |op: u8, regs: u8, imm: u32| {
            let mut i = vec![op, regs, 0, 0];
            i.extend_from_slice(&imm.to_le_bytes());
            i
        };
        let mut code = [
            insn(CALL, 0, 0x7ff0_0002),    // a placeholder call
            insn(CALL, 0, 113),            // a helper call
            insn(0xb7, 0x01, 0x7ff0_0002), // r1 = the placeholder: not a call
            insn(CALL, 0x10, 0x7ff0_0002), // a call of a subprogram
        ]
        .concat();
        assert_eq!(link_calls(&mut code, &[(0x7ff0_0002, 4242)]).unwrap(), 1);
        assert_eq!(&code[..8], &insn(CALL, 0x20, 4242)[..]);
        assert_eq!(
            &code[8..],
            &[
                insn(CALL, 0, 113),
                insn(0xb7, 1, 0x7ff0_0002),
                insn(CALL, 0x10, 0x7ff0_0002)
            ]
            .concat()[..]
        );
    }
}
