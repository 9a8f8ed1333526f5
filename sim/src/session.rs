//! The library's session: `nvmlInit*` loads the state file and counts
//! references, `nvmlShutdown` drops them, and device handles name the loaded
//! devices. Every query goes through `with_state` or `with_device`, which
//! answer `UNINITIALIZED` outside a session.

use crate::ret;
use crate::state::{self, Device, State, Target, MAX_MIG};
use std::ffi::c_uint;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// The opaque `nvmlDevice_t`: a pointer into a static array, one slot a device.
pub type NvmlDevice = *const u8;

pub(crate) const MAX_DEVICES: usize = 64;
/// Stable, non-NULL handle addresses: device `i` is `&HANDLES[i]`.
static HANDLES: [u8; MAX_DEVICES] = [0; MAX_DEVICES];

pub(crate) struct Lib {
    pub(crate) refcount: u32,
    pub(crate) state: Option<State>,
    path: PathBuf,
}

static LIB: Mutex<Lib> = Mutex::new(Lib {
    refcount: 0,
    state: None,
    path: PathBuf::new(),
});

pub(crate) fn lib() -> MutexGuard<'static, Lib> {
    LIB.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Stable, non-NULL MIG device handles: MIG device `j` of GPU `i` is
/// `&MIG_HANDLES[i * MAX_MIG + j]`.
static MIG_HANDLES: [u8; MAX_DEVICES * MAX_MIG] = [0; MAX_DEVICES * MAX_MIG];

pub(crate) fn handle_of(index: usize) -> NvmlDevice {
    HANDLES[index..].as_ptr()
}

pub(crate) fn mig_handle_of(index: usize, mig: usize) -> NvmlDevice {
    MIG_HANDLES[index * MAX_MIG + mig..].as_ptr()
}

/// The GPU index and target a handle names, by address alone.
pub(crate) fn target_of(handle: NvmlDevice) -> Option<(usize, Target)> {
    let addr = handle as usize;
    let base = HANDLES.as_ptr() as usize;
    if addr >= base && addr < base + MAX_DEVICES {
        return Some((addr - base, Target::Whole));
    }
    let base = MIG_HANDLES.as_ptr() as usize;
    let at = addr
        .checked_sub(base)
        .filter(|&o| o < MAX_DEVICES * MAX_MIG)?;
    Some((at / MAX_MIG, Target::Mig(at % MAX_MIG)))
}

/// Runs `f` on the GPU behind `handle` and what the handle names (the
/// GPU or one of its existing MIG devices), or returns the NVML error.
pub(crate) fn with_target(
    handle: NvmlDevice,
    f: impl FnOnce(&Device, Target, &Path, usize) -> u32,
) -> u32 {
    let lib = lib();
    let Some(state) = lib.state.as_ref().filter(|_| lib.refcount > 0) else {
        return ret::UNINITIALIZED;
    };
    let found = target_of(handle).and_then(|(i, t)| {
        let dev = state.devices.get(i)?;
        match t {
            Target::Mig(j) if dev.mig_mode != Some(true) || j >= dev.mig.len() => None,
            _ => Some((i, t, dev)),
        }
    });
    match found {
        Some((i, t, dev)) => f(dev, t, &lib.path, i),
        None => ret::INVALID_ARGUMENT,
    }
}

/// Runs `f` on the GPU behind a whole-GPU `handle`; a MIG device's handle
/// answers NOT_SUPPORTED (a call MIG devices do not take).
pub(crate) fn with_device(handle: NvmlDevice, f: impl FnOnce(&Device, &Path, usize) -> u32) -> u32 {
    with_target(handle, |d, t, path, i| match t {
        Target::Whole => f(d, path, i),
        Target::Mig(_) => ret::NOT_SUPPORTED,
    })
}

fn init() -> u32 {
    let mut lib = lib();
    let Some(path) = std::env::var_os("GPUFREE_SIM_STATE") else {
        eprintln!("gpufree-nvml-sim: GPUFREE_SIM_STATE is not set: no simulated GPUs");
        return ret::DRIVER_NOT_LOADED;
    };
    let path = PathBuf::from(path);
    match State::load(&path) {
        Ok(state) if state.devices.len() > MAX_DEVICES => {
            eprintln!(
                "gpufree-nvml-sim: {}: more than {MAX_DEVICES} devices",
                path.display()
            );
            ret::UNKNOWN
        }
        Ok(state) => {
            state::hang(&state.hang_ms, "init");
            lib.state = Some(state);
            lib.path = path;
            lib.refcount += 1;
            ret::SUCCESS
        }
        Err(e) => {
            eprintln!("gpufree-nvml-sim: {e}");
            ret::UNKNOWN
        }
    }
}

/// `nvmlInit_v2`.
#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> u32 {
    init()
}

/// `nvmlInit` (the v1 name, still called by old clients).
#[no_mangle]
pub extern "C" fn nvmlInit() -> u32 {
    init()
}

/// `nvmlInitWithFlags`: pynvml's `nvmlInit()` calls this one.
#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> u32 {
    init()
}

/// `nvmlShutdown`, reference-counted like the real one.
#[no_mangle]
pub extern "C" fn nvmlShutdown() -> u32 {
    let mut lib = lib();
    if lib.refcount == 0 {
        return ret::UNINITIALIZED;
    }
    lib.refcount -= 1;
    if lib.refcount == 0 {
        lib.state = None;
    }
    ret::SUCCESS
}

pub(crate) fn with_state(f: impl FnOnce(&State) -> u32) -> u32 {
    let lib = lib();
    match lib.state.as_ref().filter(|_| lib.refcount > 0) {
        Some(state) => f(state),
        None => ret::UNINITIALIZED,
    }
}
