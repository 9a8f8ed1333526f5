//! Writing answers into the caller's memory: NUL-terminated strings into a
//! sized buffer and values through a pointer, NULL checked as nvml.h asks.

use crate::ret;
use std::ffi::{c_char, c_uint};

pub(crate) unsafe fn write_cstr(buf: *mut c_char, len: c_uint, s: &str) -> u32 {
    if buf.is_null() {
        return ret::INVALID_ARGUMENT;
    }
    let bytes = s.as_bytes();
    if (len as usize) < bytes.len() + 1 {
        return ret::INSUFFICIENT_SIZE;
    }
    // SAFETY: the caller gave `len` writable bytes at `buf`; we write
    // bytes.len() + 1 <= len of them.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), bytes.len());
        *buf.add(bytes.len()) = 0;
    }
    ret::SUCCESS
}

pub(crate) unsafe fn write<T>(ptr: *mut T, value: T) -> u32 {
    if ptr.is_null() {
        return ret::INVALID_ARGUMENT;
    }
    // SAFETY: non-NULL and, per nvml.h, pointing to a T owned by the caller.
    unsafe { ptr.write_unaligned(value) };
    ret::SUCCESS
}
