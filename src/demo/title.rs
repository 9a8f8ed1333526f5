//! Renaming the current process the way setproctitle (and so vLLM) does:
//! `prctl(PR_SET_NAME)` for comm (15 bytes), and the title written over the
//! argv area, padded with NULs, so /proc/PID/cmdline shows it. Used by the
//! demo's and the tests' holder processes to reproduce the incident.

#![allow(unsafe_code)] // Writing the argv area is what setproctitle does.

use crate::proc::parse::parse_stat;
use std::ffi::CString;

/// Renames the calling process: comm becomes the first 15 bytes of `title`,
/// the command line becomes `title`. Call it from a single-threaded process
/// that no longer needs `std::env::args` (which reads the same memory).
pub fn set_process_title(title: &str) -> std::io::Result<()> {
    let comm: Vec<u8> = title.bytes().filter(|&b| b != 0).take(15).collect();
    let comm = CString::new(comm).map_err(std::io::Error::other)?;
    rustix::thread::set_name(&comm)?;
    let stat = std::fs::read("/proc/self/stat")?;
    let stat = parse_stat(&stat).map_err(std::io::Error::other)?;
    let Some((start, end)) = stat.arg_area.filter(|(s, e)| e > s && *s != 0) else {
        return Err(std::io::Error::other("/proc/self/stat shows no argv area"));
    };
    let len = (end - start) as usize;
    let n = title.len().min(len - 1);
    // SAFETY: [arg_start, arg_end) is this process's own argv area, mapped
    // writable on its stack by the kernel at exec; nothing but std's saved
    // argv pointers refers to it, and the caller no longer reads them. We
    // write exactly `len` bytes inside it.
    unsafe {
        let area = start as usize as *mut u8;
        std::ptr::copy_nonoverlapping(title.as_ptr(), area, n);
        std::ptr::write_bytes(area.add(n), 0, len - n);
    }
    Ok(())
}
