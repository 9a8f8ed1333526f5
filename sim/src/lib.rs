//! A simulated `libnvidia-ml.so.1`.
//!
//! This crate builds a shared library that exports the NVML C ABI (the
//! symbols, struct layouts and return codes of `nvml.h`, API version 13) and
//! serves the GPUs described by the JSON file named by `GPUFREE_SIM_STATE`.
//! The file is re-read on every `nvmlInit*`. Any NVML client can load it:
//! gpufree, nvml-wrapper, pynvml, gpustat, nvitop.
//!
//! It shares no code with gpufree's NVML backend on purpose: a bug in one
//! cannot hide the same bug in the other.
//!
//! Functions for things a simulated GPU has not got (fans, clocks, ECC,
//! encoders, MIG...) are exported and return `NVML_ERROR_NOT_SUPPORTED`, as a
//! real driver does for a board without them, rather than being left out.

#![allow(unsafe_code)] // This crate is an FFI surface: every export is `extern "C"`.
#![allow(clippy::missing_safety_doc)] // The contract of each export is nvml.h's.
#![cfg_attr(test, allow(clippy::too_many_lines))] // Tests are exempt.

pub mod state;

use state::{
    gone_log_path, pid_alive, view_device, Device, DeviceView, GoneLog, ProcessKind, State,
};
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, CStr};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// `nvmlReturn_t` values (notes/nvml.md).
mod ret {
    pub const SUCCESS: u32 = 0;
    pub const UNINITIALIZED: u32 = 1;
    pub const INVALID_ARGUMENT: u32 = 2;
    pub const NOT_SUPPORTED: u32 = 3;
    pub const NOT_FOUND: u32 = 6;
    pub const INSUFFICIENT_SIZE: u32 = 7;
    pub const DRIVER_NOT_LOADED: u32 = 9;
    pub const ARGUMENT_VERSION_MISMATCH: u32 = 25;
    pub const UNKNOWN: u32 = 999;
}

/// The opaque `nvmlDevice_t`: a pointer into a static array, one slot a device.
pub type NvmlDevice = *const u8;

const MAX_DEVICES: usize = 64;
/// Stable, non-NULL handle addresses: device `i` is `&HANDLES[i]`.
static HANDLES: [u8; MAX_DEVICES] = [0; MAX_DEVICES];

struct Lib {
    refcount: u32,
    state: Option<State>,
    path: PathBuf,
}

static LIB: Mutex<Lib> = Mutex::new(Lib {
    refcount: 0,
    state: None,
    path: PathBuf::new(),
});

fn lib() -> MutexGuard<'static, Lib> {
    LIB.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn handle_of(index: usize) -> NvmlDevice {
    HANDLES[index..].as_ptr()
}

fn index_of(handle: NvmlDevice) -> Option<usize> {
    let base = HANDLES.as_ptr() as usize;
    let addr = handle as usize;
    (addr >= base && addr < base + MAX_DEVICES).then(|| addr - base)
}

/// Runs `f` on the device behind `handle`, or returns the NVML error.
fn with_device(handle: NvmlDevice, f: impl FnOnce(&Device, &Path, usize) -> u32) -> u32 {
    let lib = lib();
    let Some(state) = lib.state.as_ref().filter(|_| lib.refcount > 0) else {
        return ret::UNINITIALIZED;
    };
    match index_of(handle).and_then(|i| state.devices.get(i).map(|d| (i, d))) {
        Some((i, dev)) => f(dev, &lib.path, i),
        None => ret::INVALID_ARGUMENT,
    }
}

/// What the device reports now, recording first-gone moments beside the state.
fn view(dev: &Device, state_path: &Path) -> DeviceView {
    let log_path = gone_log_path(state_path);
    let mut log = GoneLog::load(&log_path);
    let mut changed = false;
    let proc_root = Path::new("/proc");
    let v = view_device(
        dev,
        now_ms(),
        &|pid, start| pid_alive(proc_root, pid, start),
        &mut log,
        &mut changed,
    );
    if changed {
        log.store(&log_path);
    }
    v
}

unsafe fn write_cstr(buf: *mut c_char, len: c_uint, s: &str) -> u32 {
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

unsafe fn write<T>(ptr: *mut T, value: T) -> u32 {
    if ptr.is_null() {
        return ret::INVALID_ARGUMENT;
    }
    // SAFETY: non-NULL and, per nvml.h, pointing to a T owned by the caller.
    unsafe { ptr.write_unaligned(value) };
    ret::SUCCESS
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
        13 => c"Function Not Found",
        15 => c"GPU is lost",
        25 => c"Argument version mismatch",
        _ => c"Unknown Error",
    };
    s.as_ptr()
}

fn with_state(f: impl FnOnce(&State) -> u32) -> u32 {
    let lib = lib();
    match lib.state.as_ref().filter(|_| lib.refcount > 0) {
        Some(state) => f(state),
        None => ret::UNINITIALIZED,
    }
}

/// `nvmlSystemGetDriverVersion`.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> u32 {
    // SAFETY: the caller's buffer contract is nvml.h's.
    with_state(|s| unsafe { write_cstr(version, length, &s.driver_version) })
}

/// `nvmlSystemGetNVMLVersion`: CUDA major version, a dot, the driver version.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> u32 {
    with_state(|s| {
        let v = format!("{}.{}", s.cuda_driver_version / 1000, s.driver_version);
        // SAFETY: the caller's buffer contract is nvml.h's.
        unsafe { write_cstr(version, length, &v) }
    })
}

/// `nvmlSystemGetCudaDriverVersion`.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(v: *mut c_int) -> u32 {
    // SAFETY: `v` points to an int owned by the caller.
    with_state(|s| unsafe { write(v, s.cuda_driver_version) })
}

/// `nvmlSystemGetCudaDriverVersion_v2`.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(v: *mut c_int) -> u32 {
    // SAFETY: as for the unversioned call.
    unsafe { nvmlSystemGetCudaDriverVersion(v) }
}

/// `nvmlSystemGetProcessName`: the first argument of the process's cmdline,
/// else its comm, as the real library reports.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetProcessName(
    pid: c_uint,
    name: *mut c_char,
    length: c_uint,
) -> u32 {
    with_state(|_| {
        let dir = Path::new("/proc").join(pid.to_string());
        let from_cmdline = std::fs::read(dir.join("cmdline")).ok().and_then(|c| {
            let first = c.split(|&b| b == 0).next().unwrap_or_default();
            (!first.is_empty()).then(|| String::from_utf8_lossy(first).into_owned())
        });
        let from_comm = || {
            std::fs::read_to_string(dir.join("comm"))
                .ok()
                .map(|s| s.trim_end().to_string())
        };
        match from_cmdline.or_else(from_comm) {
            // SAFETY: the caller's buffer contract is nvml.h's.
            Some(n) => unsafe { write_cstr(name, length, &n) },
            None => ret::NOT_FOUND,
        }
    })
}

/// `nvmlDeviceGetCount_v2`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> u32 {
    // SAFETY: `count` points to an unsigned int owned by the caller.
    with_state(|s| {
        state::hang(&s.hang_ms, "device_count");
        // SAFETY: as above.
        unsafe { write(count, s.devices.len() as c_uint) }
    })
}

/// `nvmlDeviceGetCount` (v1 name).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount(count: *mut c_uint) -> u32 {
    // SAFETY: as for `_v2`.
    unsafe { nvmlDeviceGetCount_v2(count) }
}

/// `nvmlDeviceGetHandleByIndex_v2`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, out: *mut NvmlDevice) -> u32 {
    with_state(|s| {
        if (index as usize) < s.devices.len() {
            // SAFETY: `out` points to a handle owned by the caller.
            unsafe { write(out, handle_of(index as usize)) }
        } else {
            ret::INVALID_ARGUMENT
        }
    })
}

/// `nvmlDeviceGetHandleByIndex` (v1 name).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(index: c_uint, out: *mut NvmlDevice) -> u32 {
    // SAFETY: as for `_v2`.
    unsafe { nvmlDeviceGetHandleByIndex_v2(index, out) }
}

unsafe fn handle_where(
    key: *const c_char,
    out: *mut NvmlDevice,
    hit: impl Fn(&Device, &str) -> bool,
) -> u32 {
    if key.is_null() {
        return ret::INVALID_ARGUMENT;
    }
    // SAFETY: nvml.h's contract: a NUL-terminated string.
    let key = unsafe { CStr::from_ptr(key) }
        .to_string_lossy()
        .into_owned();
    with_state(|s| match s.devices.iter().position(|d| hit(d, &key)) {
        // SAFETY: `out` points to a handle owned by the caller.
        Some(i) => unsafe { write(out, handle_of(i)) },
        None => ret::NOT_FOUND,
    })
}

/// `nvmlDeviceGetHandleByUUID`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    out: *mut NvmlDevice,
) -> u32 {
    // SAFETY: nvml.h's contract.
    unsafe { handle_where(uuid, out, |d, k| d.uuid == k) }
}

/// `nvmlDeviceGetHandleByPciBusId_v2`: full or legacy (short) bus id.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    bus: *const c_char,
    out: *mut NvmlDevice,
) -> u32 {
    // SAFETY: nvml.h's contract.
    unsafe {
        handle_where(bus, out, |d, k| {
            let p = Pci::parse(&d.pci_bus_id);
            k.eq_ignore_ascii_case(&p.bus_id()) || k.eq_ignore_ascii_case(&p.legacy())
        })
    }
}

/// `nvmlDeviceGetHandleByPciBusId` (v1 name).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId(
    bus: *const c_char,
    out: *mut NvmlDevice,
) -> u32 {
    // SAFETY: as for `_v2`.
    unsafe { nvmlDeviceGetHandleByPciBusId_v2(bus, out) }
}

/// `nvmlDeviceGetName`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    dev: NvmlDevice,
    name: *mut c_char,
    length: c_uint,
) -> u32 {
    with_device(dev, |d, _, _| match d.injected("name") {
        Some(e) => e,
        // SAFETY: the caller's buffer contract is nvml.h's.
        None => unsafe { write_cstr(name, length, &d.name) },
    })
}

/// `nvmlDeviceGetUUID`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    dev: NvmlDevice,
    uuid: *mut c_char,
    length: c_uint,
) -> u32 {
    with_device(dev, |d, _, _| match d.injected("uuid") {
        Some(e) => e,
        // SAFETY: the caller's buffer contract is nvml.h's.
        None => unsafe { write_cstr(uuid, length, &d.uuid) },
    })
}

/// `nvmlDeviceGetIndex`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(dev: NvmlDevice, index: *mut c_uint) -> u32 {
    // SAFETY: `index` points to an unsigned int owned by the caller.
    with_device(dev, |_, _, i| unsafe { write(index, i as c_uint) })
}

/// `nvmlDeviceGetMinorNumber`: N of /dev/nvidiaN.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(dev: NvmlDevice, minor: *mut c_uint) -> u32 {
    with_device(dev, |d, _, _| match d.injected("minor_number") {
        Some(e) => e,
        // SAFETY: `minor` points to an unsigned int owned by the caller.
        None => unsafe { write(minor, d.minor_number) },
    })
}

/// `nvmlDeviceIsMigDeviceHandle`: simulated GPUs are never MIG instances.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(dev: NvmlDevice, is_mig: *mut c_uint) -> u32 {
    // SAFETY: `is_mig` points to an unsigned int owned by the caller.
    with_device(dev, |_, _, _| unsafe { write(is_mig, 0) })
}

/// `nvmlPciInfo_t` (68 bytes).
#[repr(C)]
pub struct PciInfo {
    bus_id_legacy: [u8; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [u8; 32],
}

struct Pci {
    domain: u32,
    bus: u32,
    device: u32,
}

impl Pci {
    /// Parses `DDDDDDDD:BB:DD.F` (or with a 4-digit domain); bad parts are 0.
    fn parse(s: &str) -> Pci {
        let mut parts = s.split([':', '.']);
        let mut next = || {
            parts
                .next()
                .and_then(|p| u32::from_str_radix(p, 16).ok())
                .unwrap_or(0)
        };
        Pci {
            domain: next(),
            bus: next(),
            device: next(),
        }
    }
    fn bus_id(&self) -> String {
        format!("{:08X}:{:02X}:{:02X}.0", self.domain, self.bus, self.device)
    }
    fn legacy(&self) -> String {
        format!("{:04X}:{:02X}:{:02X}.0", self.domain, self.bus, self.device)
    }
}

fn fill<const N: usize>(s: &str) -> [u8; N] {
    let mut out = [0u8; N];
    let n = s.len().min(N - 1);
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
    out
}

/// `nvmlDeviceGetPciInfo_v3`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(dev: NvmlDevice, pci: *mut PciInfo) -> u32 {
    with_device(dev, |d, _, _| {
        if let Some(e) = d.injected("pci_info") {
            return e;
        }
        let p = Pci::parse(&d.pci_bus_id);
        let info = PciInfo {
            bus_id_legacy: fill(&p.legacy()),
            domain: p.domain,
            bus: p.bus,
            device: p.device,
            pci_device_id: (0x2BB1 << 16) | 0x10DE,
            pci_sub_system_id: 0,
            bus_id: fill(&p.bus_id()),
        };
        // SAFETY: `pci` points to an nvmlPciInfo_t owned by the caller.
        unsafe { write(pci, info) }
    })
}

/// `nvmlDeviceGetPciInfo_v2` (same layout).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v2(dev: NvmlDevice, pci: *mut PciInfo) -> u32 {
    // SAFETY: as for `_v3`.
    unsafe { nvmlDeviceGetPciInfo_v3(dev, pci) }
}

/// `nvmlDeviceGetPciInfo` (same layout).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo(dev: NvmlDevice, pci: *mut PciInfo) -> u32 {
    // SAFETY: as for `_v3`.
    unsafe { nvmlDeviceGetPciInfo_v3(dev, pci) }
}

/// `nvmlMemory_t`.
#[repr(C)]
pub struct Memory {
    total: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
pub struct MemoryV2 {
    version: c_uint,
    total: c_ulonglong,
    reserved: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

/// `nvmlMemory_v2`: `sizeof(nvmlMemory_v2_t) | 2 << 24`.
const MEMORY_V2_VERSION: c_uint = 0x0200_0028;

/// `nvmlDeviceGetMemoryInfo`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(dev: NvmlDevice, mem: *mut Memory) -> u32 {
    with_device(dev, |d, path, _| {
        if let Some(e) = d.injected("memory_info") {
            return e;
        }
        let used = view(d, path).used_bytes;
        let m = Memory {
            total: d.memory_total_bytes,
            free: d.memory_total_bytes - used,
            used,
        };
        // SAFETY: `mem` points to an nvmlMemory_t owned by the caller.
        unsafe { write(mem, m) }
    })
}

/// `nvmlDeviceGetMemoryInfo_v2`: checks the struct version like the driver.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(dev: NvmlDevice, mem: *mut MemoryV2) -> u32 {
    if mem.is_null() {
        return ret::INVALID_ARGUMENT;
    }
    // SAFETY: non-NULL, pointing to the caller's nvmlMemory_v2_t.
    if unsafe { std::ptr::addr_of!((*mem).version).read_unaligned() } != MEMORY_V2_VERSION {
        return ret::ARGUMENT_VERSION_MISMATCH;
    }
    with_device(dev, |d, path, _| {
        if let Some(e) = d.injected("memory_info") {
            return e;
        }
        let used = view(d, path).used_bytes;
        let m = MemoryV2 {
            version: MEMORY_V2_VERSION,
            total: d.memory_total_bytes,
            reserved: 0,
            free: d.memory_total_bytes - used,
            used,
        };
        // SAFETY: as checked above.
        unsafe { write(mem, m) }
    })
}

/// Writes the processes of `kind` with the `_v3`/`_v2` (24-byte) or v1
/// (16-byte) record, following the count protocol of nvml.h.
unsafe fn running(
    dev: NvmlDevice,
    count: *mut c_uint,
    infos: *mut u8,
    kind: ProcessKind,
    stride: usize,
) -> u32 {
    if count.is_null() {
        return ret::INVALID_ARGUMENT;
    }
    with_device(dev, |d, path, _| {
        let call = match kind {
            ProcessKind::Compute => "compute_processes",
            ProcessKind::Graphics => "graphics_processes",
            ProcessKind::Mps => "mps_processes",
        };
        if let Some(e) = d.injected(call) {
            return e;
        }
        let list: Vec<(u32, u64)> = view(d, path)
            .processes
            .into_iter()
            .filter(|p| p.2 == kind)
            .map(|p| (p.0, p.1))
            .collect();
        // SAFETY: `count` is non-NULL and points to the caller's counter.
        let room = unsafe { count.read_unaligned() } as usize;
        // SAFETY: as above.
        unsafe { count.write_unaligned(list.len() as c_uint) };
        if list.is_empty() {
            return ret::SUCCESS;
        }
        if room < list.len() {
            return ret::INSUFFICIENT_SIZE;
        }
        if infos.is_null() {
            return ret::INVALID_ARGUMENT;
        }
        for (i, (pid, used)) in list.iter().enumerate() {
            // SAFETY: the caller gave room for `room` >= list.len() records of
            // `stride` bytes; we write within record i only.
            unsafe {
                let rec = infos.add(i * stride);
                rec.cast::<u32>().write_unaligned(*pid);
                rec.add(4).cast::<u32>().write_unaligned(0);
                rec.add(8).cast::<u64>().write_unaligned(*used);
                if stride == 24 {
                    rec.add(16).cast::<u32>().write_unaligned(u32::MAX);
                    rec.add(20).cast::<u32>().write_unaligned(u32::MAX);
                }
            }
        }
        ret::SUCCESS
    })
}

macro_rules! process_lists {
    ($($name:ident => $kind:ident, $stride:expr;)*) => {$(
        /// A running-processes list of nvml.h (count protocol, 24- or 16-byte records).
        #[no_mangle]
        pub unsafe extern "C" fn $name(dev: NvmlDevice, count: *mut c_uint, infos: *mut u8) -> u32 {
            // SAFETY: nvml.h's count/array contract, checked in `running`.
            unsafe { running(dev, count, infos, ProcessKind::$kind, $stride) }
        }
    )*};
}

process_lists! {
    nvmlDeviceGetComputeRunningProcesses_v3 => Compute, 24;
    nvmlDeviceGetGraphicsRunningProcesses_v3 => Graphics, 24;
    nvmlDeviceGetMPSComputeRunningProcesses_v3 => Mps, 24;
    nvmlDeviceGetComputeRunningProcesses_v2 => Compute, 24;
    nvmlDeviceGetGraphicsRunningProcesses_v2 => Graphics, 24;
    nvmlDeviceGetMPSComputeRunningProcesses_v2 => Mps, 24;
    nvmlDeviceGetComputeRunningProcesses => Compute, 16;
    nvmlDeviceGetGraphicsRunningProcesses => Graphics, 16;
    nvmlDeviceGetMPSComputeRunningProcesses => Mps, 16;
}

macro_rules! not_supported {
    ($($name:ident)*) => {$(
        /// Not supported on a simulated GPU (`NVML_ERROR_NOT_SUPPORTED`). The
        /// arguments are ignored, which the C calling convention allows.
        #[no_mangle]
        pub extern "C" fn $name() -> u32 {
            if lib().refcount == 0 { ret::UNINITIALIZED } else { ret::NOT_SUPPORTED }
        }
    )*};
}

not_supported! {
    nvmlDeviceGetFanSpeed nvmlDeviceGetFanSpeed_v2 nvmlDeviceGetNumFans
    nvmlDeviceGetTemperature nvmlDeviceGetTemperatureV nvmlDeviceGetTemperatureThreshold
    nvmlDeviceGetPowerUsage nvmlDeviceGetEnforcedPowerLimit nvmlDeviceGetPowerManagementLimit
    nvmlDeviceGetPowerManagementLimitConstraints nvmlDeviceGetPowerManagementDefaultLimit
    nvmlDeviceGetTotalEnergyConsumption nvmlDeviceGetPowerState nvmlDeviceGetPerformanceState
    nvmlDeviceGetUtilizationRates nvmlDeviceGetEncoderUtilization nvmlDeviceGetDecoderUtilization
    nvmlDeviceGetJpgUtilization nvmlDeviceGetOfaUtilization
    nvmlDeviceGetEncoderSessions nvmlDeviceGetEncoderStats nvmlDeviceGetFBCStats nvmlDeviceGetFBCSessions
    nvmlDeviceGetClockInfo nvmlDeviceGetMaxClockInfo nvmlDeviceGetClock nvmlDeviceGetApplicationsClock
    nvmlDeviceGetMaxCustomerBoostClock nvmlDeviceGetSupportedMemoryClocks nvmlDeviceGetSupportedGraphicsClocks
    nvmlDeviceGetCurrentClocksThrottleReasons nvmlDeviceGetCurrentClocksEventReasons
    nvmlDeviceGetSupportedClocksThrottleReasons nvmlDeviceGetSupportedClocksEventReasons
    nvmlDeviceGetPcieThroughput nvmlDeviceGetPcieSpeed nvmlDeviceGetPcieReplayCounter
    nvmlDeviceGetCurrPcieLinkGeneration nvmlDeviceGetCurrPcieLinkWidth
    nvmlDeviceGetMaxPcieLinkGeneration nvmlDeviceGetMaxPcieLinkWidth nvmlDeviceGetGpuMaxPcieLinkGeneration
    nvmlDeviceGetDisplayActive nvmlDeviceGetDisplayMode nvmlDeviceGetPersistenceMode
    nvmlDeviceGetTotalEccErrors nvmlDeviceGetDetailedEccErrors nvmlDeviceGetEccMode
    nvmlDeviceGetMemoryErrorCounter nvmlDeviceGetRetiredPages nvmlDeviceGetRetiredPages_v2
    nvmlDeviceGetRetiredPagesPendingStatus nvmlDeviceGetRemappedRows
    nvmlDeviceGetComputeMode nvmlDeviceGetCudaComputeCapability nvmlDeviceGetArchitecture
    nvmlDeviceGetMigMode nvmlDeviceGetMaxMigDeviceCount nvmlDeviceGetMigDeviceHandleByIndex
    nvmlDeviceGetDeviceHandleFromMigDeviceHandle nvmlDeviceGetGpuInstanceId nvmlDeviceGetComputeInstanceId
    nvmlDeviceGetProcessUtilization nvmlDeviceGetProcessesUtilizationInfo nvmlDeviceGetSamples
    nvmlDeviceGetBAR1MemoryInfo nvmlDeviceGetBrand nvmlDeviceGetSerial nvmlDeviceGetVbiosVersion
    nvmlDeviceGetBoardPartNumber nvmlDeviceGetBoardId nvmlDeviceGetMultiGpuBoard
    nvmlDeviceGetInforomVersion nvmlDeviceGetInforomImageVersion nvmlDeviceGetInforomConfigurationChecksum
    nvmlDeviceGetDriverModel nvmlDeviceGetDriverModel_v2 nvmlDeviceGetAccountingMode
    nvmlDeviceGetAccountingStats nvmlDeviceGetAccountingPids nvmlDeviceGetAccountingBufferSize
    nvmlDeviceGetNvLinkState nvmlDeviceGetNvLinkVersion nvmlDeviceGetNvLinkCapability
    nvmlDeviceGetNvLinkRemotePciInfo_v2 nvmlDeviceGetNvLinkErrorCounter
    nvmlDeviceGetGpuOperationMode nvmlDeviceGetVirtualizationMode nvmlDeviceGetHostVgpuMode
    nvmlDeviceGetSupportedVgpus nvmlDeviceGetCreatableVgpus nvmlDeviceGetActiveVgpus
    nvmlDeviceGetMemoryBusWidth nvmlDeviceGetNumGpuCores nvmlDeviceGetIrqNum
    nvmlDeviceGetAttributes nvmlDeviceGetAttributes_v2 nvmlDeviceGetFieldValues
    nvmlDeviceGetTopologyCommonAncestor nvmlDeviceGetTopologyNearestGpus nvmlDeviceGetP2PStatus
    nvmlDeviceGetBridgeChipInfo nvmlDeviceGetAutoBoostedClocksEnabled nvmlDeviceGetAPIRestriction
    nvmlDeviceGetViolationStatus nvmlDeviceGetGspFirmwareMode nvmlDeviceGetGspFirmwareVersion
    nvmlDeviceGetMemoryAffinity nvmlDeviceGetCpuAffinity nvmlDeviceGetCpuAffinityWithinScope
    nvmlDeviceGetDynamicPstatesInfo nvmlDeviceGetThermalSettings nvmlDeviceGetMinMaxFanSpeed
    nvmlDeviceGetTargetFanSpeed nvmlDeviceGetFanControlPolicy_v2 nvmlDeviceGetPowerSource
    nvmlDeviceGetGpcClkVfOffset nvmlDeviceGetMemClkVfOffset nvmlDeviceGetDefaultApplicationsClock
    nvmlDeviceGetComputeRunningProcessesDetail nvmlDeviceGetCurrentDriverModel
    nvmlSystemGetTopologyGpuSet nvmlSystemGetHicVersion nvmlUnitGetCount
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod abi;
