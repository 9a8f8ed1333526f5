//! NVML's event API for Xid critical errors: `nvmlEventSetCreate`,
//! `nvmlDeviceGetSupportedEventTypes`, `nvmlDeviceRegisterEvents`,
//! `nvmlEventSetWait_v2`, `nvmlEventSetFree`. A set registered on a
//! device is delivered that device's `xid_events` as if they arrived
//! just after it registered: in order, oldest (`seconds_ago` largest)
//! first across devices, each once. Other event types are NOT_SUPPORTED.

use crate::out::write;
use crate::ret;
use crate::session::{handle_of, lib, with_device, NvmlDevice};
use std::collections::BTreeMap;
use std::ffi::{c_uint, c_ulonglong};
use std::sync::Mutex;

/// `nvmlEventTypeXidCriticalError`.
pub const XID_CRITICAL_ERROR: c_ulonglong = 8;

/// The opaque `nvmlEventSet_t`.
pub type NvmlEventSet = *mut u8;

/// `nvmlEventData_t` (32 bytes).
#[repr(C)]
pub struct EventData {
    pub(crate) device: NvmlDevice,
    pub(crate) event_type: c_ulonglong,
    pub(crate) event_data: c_ulonglong,
    pub(crate) gpu_instance_id: c_uint,
    pub(crate) compute_instance_id: c_uint,
}

/// A set: the devices registered (by index) and how many of each one's
/// events it was given.
#[derive(Default)]
struct Set {
    delivered: BTreeMap<usize, usize>,
}

/// The live sets, by address.
static SETS: Mutex<BTreeMap<usize, Set>> = Mutex::new(BTreeMap::new());

fn sets() -> std::sync::MutexGuard<'static, BTreeMap<usize, Set>> {
    SETS.lock().unwrap_or_else(|p| p.into_inner())
}

/// `nvmlEventSetCreate`.
#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut NvmlEventSet) -> u32 {
    if lib().refcount == 0 {
        return ret::UNINITIALIZED;
    }
    if set.is_null() {
        return ret::INVALID_ARGUMENT;
    }
    let handle = Box::into_raw(Box::new(0u8));
    sets().insert(handle as usize, Set::default());
    // SAFETY: `set` is non-NULL and points to the caller's handle.
    unsafe { write(set, handle) }
}

/// `nvmlEventSetFree`.
#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetFree(set: NvmlEventSet) -> u32 {
    if sets().remove(&(set as usize)).is_none() {
        return ret::INVALID_ARGUMENT;
    }
    // SAFETY: `set` was made by Box::into_raw in nvmlEventSetCreate and
    // was live until removed just now: freed once.
    drop(unsafe { Box::from_raw(set) });
    ret::SUCCESS
}

/// `nvmlDeviceGetSupportedEventTypes`: Xid critical errors.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(
    dev: NvmlDevice,
    types: *mut c_ulonglong,
) -> u32 {
    with_device(dev, |d, _, _| match d.injected("events") {
        Some(e) => e,
        // SAFETY: `types` points to the caller's unsigned long long.
        None => unsafe { write(types, XID_CRITICAL_ERROR) },
    })
}

/// `nvmlDeviceRegisterEvents`.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceRegisterEvents(
    dev: NvmlDevice,
    types: c_ulonglong,
    set: NvmlEventSet,
) -> u32 {
    with_device(dev, |d, _, index| {
        if let Some(e) = d.injected("events") {
            return e;
        }
        if types & !XID_CRITICAL_ERROR != 0 {
            return ret::NOT_SUPPORTED;
        }
        match sets().get_mut(&(set as usize)) {
            Some(s) => {
                s.delivered.entry(index).or_insert(0);
                ret::SUCCESS
            }
            None => ret::INVALID_ARGUMENT,
        }
    })
}

/// The next event for `set`: (device index, Xid), marked delivered.
fn next(set: usize) -> Result<Option<(usize, u64)>, u32> {
    let lib = lib();
    let Some(state) = lib.state.as_ref().filter(|_| lib.refcount > 0) else {
        return Err(ret::UNINITIALIZED);
    };
    let mut sets = sets();
    let Some(s) = sets.get_mut(&set) else {
        return Err(ret::INVALID_ARGUMENT);
    };
    let best = s
        .delivered
        .iter()
        .filter_map(|(&i, &n)| {
            let e = state.devices.get(i)?.xid_events.get(n)?;
            Some((std::cmp::Reverse(e.seconds_ago), i, e.xid))
        })
        .min();
    Ok(best.map(|(_, i, xid)| {
        *s.delivered.entry(i).or_insert(0) += 1;
        (i, xid)
    }))
}

/// `nvmlEventSetWait_v2`: the next event, or TIMEOUT after `timeout_ms`.
#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: NvmlEventSet,
    data: *mut EventData,
    timeout_ms: c_uint,
) -> u32 {
    if data.is_null() {
        return ret::INVALID_ARGUMENT;
    }
    match next(set as usize) {
        Err(e) => e,
        Ok(Some((i, xid))) => {
            let event = EventData {
                device: handle_of(i),
                event_type: XID_CRITICAL_ERROR,
                event_data: xid,
                gpu_instance_id: c_uint::MAX,
                compute_instance_id: c_uint::MAX,
            };
            // SAFETY: `data` is non-NULL and points to the caller's struct.
            unsafe { write(data, event) }
        }
        Ok(None) => {
            // Nothing more will come: wait as asked, without the locks.
            std::thread::sleep(std::time::Duration::from_millis(u64::from(timeout_ms)));
            ret::TIMEOUT
        }
    }
}
