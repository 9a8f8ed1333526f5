//! Where a task in uninterruptible sleep (D) waits, as the kernel says it:
//! `/proc/PID/stack` (root only; one frame a line, innermost first, each
//! `[<0>] symbol+0xoff/0xsize` and ` [module]` for a module's code) and
//! `/proc/PID/wchan` (the function it sleeps in, `0` where the kernel does
//! not say). Pure parsers over bytes, and whether the wait is a GPU
//! driver's ([`classify`]).
//!
//! A D state alone says little: a vfork parent waits in D for its child
//! (`kernel_clone`), an NFS or Lustre read in D for its server
//! (`rpc_wait_bit_killable`), a FUSE request interrupted by a signal for
//! its daemon (`request_wait_answer`). Only a wait inside a GPU driver
//! holds the GPU where no one but the driver can end it.

use crate::model::Wait;

/// A name kept from the kernel is cut to this many bytes.
const MAX_NAME: usize = 200;

/// One frame of `/proc/PID/stack`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The function, without its offset.
    pub symbol: String,
    /// Its module (`nvidia_uvm`), where it is a module's; None for the
    /// kernel's own code (built-in drivers included).
    pub module: Option<String>,
}

/// Parses `/proc/PID/stack`: one [`Frame`] per line that has a symbol,
/// innermost first. Lines it cannot read are left out.
pub fn parse_stack(bytes: &[u8]) -> Vec<Frame> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(parse_frame)
        .collect()
}

/// `[<0>] uvm_va_space_destroy+0x1c/0x80 [nvidia_uvm]`: the address
/// (hidden as `0` since Linux 4.17), the symbol with its offset and size,
/// and the module in brackets where the code is a module's.
fn parse_frame(line: &str) -> Option<Frame> {
    let rest = line.trim_start();
    let rest = match rest.strip_prefix("[<") {
        Some(r) => r.split_once(">]")?.1,
        None => rest,
    };
    let mut words = rest.split_whitespace();
    let at = words.next()?;
    let symbol = at.split_once('+').map_or(at, |(s, _)| s);
    if symbol.is_empty() || symbol.starts_with('[') {
        return None;
    }
    let module = words
        .next()
        .and_then(|m| m.strip_prefix('[')?.strip_suffix(']'))
        .filter(|m| !m.is_empty())
        .map(cut);
    Some(Frame {
        symbol: cut(symbol),
        module,
    })
}

/// Parses `/proc/PID/wchan`: the symbol, or None where it is `0` or empty
/// (not sleeping, not permitted, or no symbol known).
pub fn parse_wchan(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let symbol = text.trim();
    (!symbol.is_empty() && symbol != "0").then(|| cut(symbol))
}

fn cut(s: &str) -> String {
    let mut end = s.len().min(MAX_NAME);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Whether `module` (as a stack names it, dashes as underscores) is a GPU
/// driver's: NVIDIA's (`nvidia`, `nvidia_uvm`, `nvidia_modeset`,
/// `nvidia_drm`, `nvidia_peermem`), nouveau, AMD's (`amdgpu`, `amdkfd`,
/// `amdxcp`; the ROCm packages' `amdttm`, `amd_sched`, `amddrm_*`),
/// Intel's (`i915`, `xe`), or the DRM core and the memory managers and
/// schedulers they share (`drm`, `drm_*`, `ttm`, `gpu_sched`).
pub fn is_gpu_module(module: &str) -> bool {
    const MODULES: &[&str] = &[
        "nvidia",
        "nvidia_uvm",
        "nvidia_modeset",
        "nvidia_drm",
        "nvidia_peermem",
        "nouveau",
        "amdgpu",
        "amdkfd",
        "amdxcp",
        "amdttm",
        "amd_sched",
        "i915",
        "xe",
        "drm",
        "ttm",
        "gpu_sched",
    ];
    MODULES.contains(&module) || module.starts_with("drm_") || module.starts_with("amddrm_")
}

/// Whether a wchan `symbol` (no module known) is a GPU driver's function,
/// by the prefixes those drivers use: NVIDIA's UVM (`uvm_`), its kernel
/// interface (`nv_`, `nvidia_`, `os_`: `os_acquire_mutex`), modeset
/// (`nvkms_`, and camel case `nvPushKickoff`), the resource manager's
/// obfuscated names in the closed driver (`_nv012345rm`); amdgpu and its
/// KFD (`amdgpu_`, `kfd_`), nouveau, i915, xe, the DRM core and TTM.
/// Conservative: a name it does not know is not the GPU's (the open
/// driver's resource manager has no common prefix: there only the stack
/// tells).
pub fn is_gpu_symbol(symbol: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "uvm_", "nv_", "nvidia_", "nvkms_", "os_", "amdgpu_", "kfd_", "nouveau_", "i915_", "xe_",
        "drm_", "ttm_",
    ];
    let b = symbol.as_bytes();
    let closed_rm = symbol.starts_with("_nv") && b.get(3).is_some_and(u8::is_ascii_digit);
    let nv_camel = symbol.starts_with("nv") && b.get(2).is_some_and(u8::is_ascii_uppercase);
    closed_rm || nv_camel || PREFIXES.iter().any(|p| symbol.starts_with(p))
}

/// Frames at and past which a wait belongs to a page fault: whatever the
/// faulting code (a GPU driver pinning user pages), the fault waits for
/// the page's file system or memory.
const FAULT_FRAMES: &[&str] = &["handle_mm_fault", "__handle_mm_fault"];

/// Where a task in D waits, from its `stack` (where readable) or else its
/// `wchan` (either None where unreadable).
///
/// From the stack, innermost frame first, the first frame of a module
/// decides: a GPU driver's module means the GPU driver, any other module
/// (`nfs`, `sunrpc`, `fuse`, `lustre`) elsewhere; a page fault's frame
/// reached first means elsewhere (a driver faulting in a user page waits
/// for that page's file system); a stack with no module frame at all is
/// the kernel's own wait (`kernel_clone` for a vfork parent), elsewhere.
/// Elsewhere names the innermost frame: what it waits in. Without a
/// stack, a wchan symbol with a GPU driver's prefix ([`is_gpu_symbol`])
/// means the GPU driver, any other symbol elsewhere, and `0` or nothing
/// [`Wait::Unsaid`].
pub fn classify(stack: Option<&[u8]>, wchan: Option<&[u8]>) -> Wait {
    let frames = stack.map(parse_stack).unwrap_or_default();
    if let Some(inner) = frames.first() {
        let elsewhere = || Wait::Elsewhere {
            symbol: inner.symbol.clone(),
            module: inner.module.clone(),
        };
        for f in &frames {
            if FAULT_FRAMES.contains(&f.symbol.as_str()) {
                return elsewhere();
            }
            match &f.module {
                Some(m) if is_gpu_module(m) => {
                    return Wait::Driver {
                        symbol: f.symbol.clone(),
                        module: f.module.clone(),
                    }
                }
                Some(_) => return elsewhere(),
                None => {}
            }
        }
        return elsewhere();
    }
    match wchan.and_then(parse_wchan) {
        Some(symbol) if is_gpu_symbol(&symbol) => Wait::Driver {
            symbol,
            module: None,
        },
        Some(symbol) => Wait::Elsewhere {
            symbol,
            module: None,
        },
        None => Wait::Unsaid,
    }
}

#[cfg(test)]
mod tests;
