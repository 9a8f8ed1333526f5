//! `nvmlReturn_t`: the codes the simulator returns (notes/nvml.md) and
//! `nvmlErrorString`, the text a client prints for each.

use std::ffi::{c_char, CStr};

pub const SUCCESS: u32 = 0;
pub const UNINITIALIZED: u32 = 1;
pub const INVALID_ARGUMENT: u32 = 2;
pub const NOT_SUPPORTED: u32 = 3;
pub const NOT_FOUND: u32 = 6;
pub const INSUFFICIENT_SIZE: u32 = 7;
pub const DRIVER_NOT_LOADED: u32 = 9;
pub const TIMEOUT: u32 = 10;
#[cfg(test)]
pub const GPU_IS_LOST: u32 = 15;
#[cfg(test)]
pub const RESET_REQUIRED: u32 = 16;
pub const ARGUMENT_VERSION_MISMATCH: u32 = 25;
pub const UNKNOWN: u32 = 999;

/// `nvmlErrorString`: static strings, as the real library returns.
#[no_mangle]
pub extern "C" fn nvmlErrorString(result: u32) -> *const c_char {
    let s: &'static CStr = match result {
        0 => c"Success",
        1 => c"Uninitialized",
        2 => c"Invalid Argument",
        3 => c"Not Supported",
        4 => c"Insufficient Permissions",
        6 => c"Not Found",
        7 => c"Insufficient Size",
        9 => c"Driver Not Loaded",
        10 => c"Timeout",
        13 => c"Function Not Found",
        15 => c"GPU is lost",
        16 => c"GPU requires restart",
        25 => c"Argument version mismatch",
        _ => c"Unknown Error",
    };
    s.as_ptr()
}
