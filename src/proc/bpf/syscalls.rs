//! The bpf(2) calls gpufree makes itself: for the per-process walk's own
//! loader (direct.rs), loading the object's BTF and a program and filling
//! and freezing a data map; and for both walks, opening an iterator on a
//! loaded program (one path for the program aya loaded and the one it did
//! not). Written by hand because aya keeps its own calls to itself
//! (`aya::sys` exports none of them) and its loader parses the kernel's
//! whole BTF before it does anything (aya-rs/aya#1172); the attribute
//! layouts are the kernel's, from aya-obj's bindings.

use aya_obj::generated::{bpf_attach_type, bpf_attr, bpf_cmd, bpf_prog_type};
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Calls bpf(`cmd`, `attr`): its non-negative answer, or the error.
///
/// # Safety
///
/// Each pointer in `attr` for `cmd` points at memory that is live for the
/// call and as long as its length field says (the kernel reads, or for a
/// log writes, that many bytes).
#[allow(unsafe_code)]
unsafe fn bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<i64> {
    // SAFETY: `attr` is a whole, initialised bpf_attr of the size passed;
    // its pointers are the caller's promise.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_int,
            std::ptr::from_mut(attr),
            std::mem::size_of::<bpf_attr>(),
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Calls bpf(`cmd`, `attr`) for a `cmd` whose answer is a new file
/// descriptor.
///
/// # Safety
///
/// As [`bpf`].
#[allow(unsafe_code)]
unsafe fn bpf_fd(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<OwnedFd> {
    // SAFETY: the caller's promise, passed on.
    let fd = unsafe { bpf(cmd, attr) }?;
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("bpf() gave no descriptor"))?;
    // SAFETY: these commands answer a descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A bpf_attr of zeros, as the kernel wants the fields a command does not
/// use.
#[allow(unsafe_code)]
fn zeroed() -> bpf_attr {
    // SAFETY: bpf_attr is a union of plain integers and arrays of them.
    unsafe { std::mem::zeroed() }
}

/// A pointer as the kernel's 64-bit field.
fn ptr<T>(p: *const T) -> u64 {
    p as usize as u64
}

/// Loads the BTF `btf` (the object's own: its types and functions).
#[allow(unsafe_code)]
pub fn load_btf(btf: &[u8]) -> io::Result<OwnedFd> {
    let mut attr = zeroed();
    // SAFETY: only this command's member of the union is written.
    let u = unsafe { &mut attr.__bindgen_anon_7 };
    u.btf = ptr(btf.as_ptr());
    u.btf_size = u32::try_from(btf.len()).map_err(|_| io::Error::other("BTF too large"))?;
    // SAFETY: `btf` is live and `btf_size` bytes long.
    unsafe { bpf_fd(bpf_cmd::BPF_BTF_LOAD, &mut attr) }
}

/// An iterator program to load.
pub struct IterProgram<'a> {
    /// Its name (the kernel keeps 15 bytes of it).
    pub name: &'a str,
    /// Its instructions, 8 bytes each.
    pub insns: &'a [u8],
    /// Its license.
    pub license: &'a CStr,
    /// The object's BTF, with its function and line records (the
    /// record size and the records).
    pub btf: BorrowedFd<'a>,
    /// Function records: their size and the records.
    pub func_info: (u32, &'a [u8]),
    /// Line records: their size and the records.
    pub line_info: (u32, &'a [u8]),
    /// The id of the kernel's `bpf_iter_<kind>` function it attaches to.
    pub attach_btf_id: u32,
}

/// The number of records of `size` bytes in `bytes`.
fn count((size, bytes): (u32, &[u8])) -> u32 {
    u32::try_from(bytes.len() / size.max(1) as usize).unwrap_or(u32::MAX)
}

/// Loads `p`, the kernel's verifier deciding; on a refusal, the error and
/// the verifier's log (loaded a second time to get it).
#[allow(unsafe_code)]
pub fn load_iter(p: &IterProgram<'_>) -> Result<OwnedFd, (io::Error, String)> {
    let mut attr = zeroed();
    {
        // SAFETY: only this command's member of the union is written.
        let u = unsafe { &mut attr.__bindgen_anon_3 };
        u.prog_type = bpf_prog_type::BPF_PROG_TYPE_TRACING as u32;
        u.expected_attach_type = bpf_attach_type::BPF_TRACE_ITER as u32;
        u.insns = ptr(p.insns.as_ptr());
        u.insn_cnt = u32::try_from(p.insns.len() / 8).unwrap_or(u32::MAX);
        u.license = ptr(p.license.as_ptr());
        for (to, from) in u.prog_name.iter_mut().zip(p.name.bytes().take(15)) {
            *to = from as libc::c_char;
        }
        u.prog_btf_fd = p.btf.as_raw_fd() as u32;
        if !p.func_info.1.is_empty() {
            (u.func_info_rec_size, u.func_info) = (p.func_info.0, ptr(p.func_info.1.as_ptr()));
            u.func_info_cnt = count(p.func_info);
        }
        if !p.line_info.1.is_empty() {
            (u.line_info_rec_size, u.line_info) = (p.line_info.0, ptr(p.line_info.1.as_ptr()));
            u.line_info_cnt = count(p.line_info);
        }
        u.attach_btf_id = p.attach_btf_id;
    }
    // The kernel answers EAGAIN to a load a signal interrupted (libbpf
    // tries five times too).
    // SAFETY (each load): the instructions, license, name and records are
    // `p`'s, live for the call, their counts from their lengths; the log
    // is `log`, live, `log_size` bytes.
    let mut tries = 0;
    let first = loop {
        match unsafe { bpf_fd(bpf_cmd::BPF_PROG_LOAD, &mut attr) } {
            Ok(fd) => return Ok(fd),
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && tries < 4 => tries += 1,
            Err(e) => break e,
        }
    };
    if first.raw_os_error() == Some(libc::EPERM) {
        return Err((first, String::new()));
    }
    // Its reason is the line before its statistics (BPF_LOG_STATS); a
    // longer log keeps its last lines, which hold it.
    let mut log = vec![0u8; 1 << 20];
    {
        // SAFETY: only this command's member of the union is written.
        let u = unsafe { &mut attr.__bindgen_anon_3 };
        (u.log_level, u.log_buf) = (1 | 4, ptr(log.as_mut_ptr()));
        u.log_size = u32::try_from(log.len()).unwrap_or(u32::MAX);
    }
    // SAFETY: as above.
    if let Ok(fd) = unsafe { bpf_fd(bpf_cmd::BPF_PROG_LOAD, &mut attr) } {
        return Ok(fd);
    }
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    Err((first, String::from_utf8_lossy(&log[..end]).into_owned()))
}

/// Writes `value` at key 0 of the array map `map`, whose values are
/// `value_size` bytes, then freezes it when `freeze` (the program then
/// reads it as constants).
#[allow(unsafe_code)]
pub fn set_data(
    map: BorrowedFd<'_>,
    value: &[u8],
    value_size: usize,
    freeze: bool,
) -> io::Result<()> {
    // (Its caller says which sizes differed.)
    if value.len() != value_size {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    let key = 0u32;
    let mut attr = zeroed();
    {
        // SAFETY: only this command's member of the union is written.
        let u = unsafe { &mut attr.__bindgen_anon_2 };
        u.map_fd = map.as_raw_fd() as u32;
        u.key = ptr(&raw const key);
        u.__bindgen_anon_1.value = ptr(value.as_ptr());
    }
    // SAFETY: the key is 4 bytes and live; the value is the map's value
    // size (checked above) and live.
    unsafe { bpf(bpf_cmd::BPF_MAP_UPDATE_ELEM, &mut attr) }?;
    if freeze {
        let mut attr = zeroed();
        attr.__bindgen_anon_2.map_fd = map.as_raw_fd() as u32;
        // SAFETY: no pointer.
        unsafe { bpf(bpf_cmd::BPF_MAP_FREEZE, &mut attr) }?;
    }
    Ok(())
}

/// A new iterator of the iterator program `prog`: the file whose reads run
/// it. (Its link is closed here: the iterator keeps what it needs.)
#[allow(unsafe_code)]
pub fn iter_file(prog: BorrowedFd<'_>) -> io::Result<std::fs::File> {
    let mut attr = zeroed();
    {
        // SAFETY: only this command's member of the union is written.
        let u = unsafe { &mut attr.link_create };
        u.__bindgen_anon_1.prog_fd = prog.as_raw_fd() as u32;
        u.attach_type = bpf_attach_type::BPF_TRACE_ITER as u32;
    }
    // SAFETY: no pointer (an iterator takes no target).
    let link = unsafe { bpf_fd(bpf_cmd::BPF_LINK_CREATE, &mut attr) }?;
    let mut attr = zeroed();
    attr.iter_create.link_fd = link.as_raw_fd() as u32;
    // SAFETY: no pointer.
    let iter = unsafe { bpf_fd(bpf_cmd::BPF_ITER_CREATE, &mut attr) }?;
    Ok(std::fs::File::from(iter))
}

/// The `bpf_attr` of BPF_OBJ_PIN or BPF_OBJ_GET for `name` in the
/// directory `dir` (BPF_F_PATH_FD: the name is looked up from the
/// descriptor, never from a path walked again).
#[allow(unsafe_code)]
fn obj_attr(dir: BorrowedFd<'_>, name: &CStr, fd: u32) -> bpf_attr {
    let mut attr = zeroed();
    // SAFETY: only these commands' member of the union is written.
    let u = unsafe { &mut attr.__bindgen_anon_4 };
    u.pathname = ptr(name.as_ptr());
    u.bpf_fd = fd;
    u.file_flags = aya_obj::generated::BPF_F_PATH_FD;
    u.path_fd = dir.as_raw_fd();
    attr
}

/// Pins the program or map `fd` as `name` in the BPF file system
/// directory `dir`.
#[allow(unsafe_code)]
pub fn obj_pin(fd: BorrowedFd<'_>, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    let mut attr = obj_attr(dir, name, fd.as_raw_fd() as u32);
    // SAFETY: `name` is live for the call and NUL-terminated.
    unsafe { bpf(bpf_cmd::BPF_OBJ_PIN, &mut attr) }.map(drop)
}

/// The program or map pinned as `name` in the BPF file system directory
/// `dir`.
#[allow(unsafe_code)]
pub fn obj_get(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    let mut attr = obj_attr(dir, name, 0);
    // SAFETY: as obj_pin.
    unsafe { bpf_fd(bpf_cmd::BPF_OBJ_GET, &mut attr) }
}
