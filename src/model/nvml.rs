//! NVML's state as values: why it is unavailable ([`NvmlDown`]), the
//! call its thread was in ([`Step`]) when it did not answer in time, and
//! why Xid events are not watched ([`XidDown`]). The
//! words are made in `present/words/nvml.rs`; JSON's `nvml.error` is
//! those words, `nvml.cause` this value.

use super::{Failure, NvmlProcessKind};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::time::Duration;

/// What the NVML thread is doing: the call it is in, named by its NVML
/// function and what it asks about.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// Between calls, waiting for a request.
    #[default]
    Idle,
    /// Loading the library (`dlopen`).
    Load,
    /// An NVML function of the library itself (`nvmlInit_v2`).
    Call {
        /// The function.
        call: Cow<'static, str>,
    },
    /// `nvmlDeviceGetHandleByIndex` of a GPU.
    Handle {
        /// The GPU's index.
        gpu: u32,
    },
    /// An NVML function on a GPU.
    OnGpu {
        /// The function.
        call: Cow<'static, str>,
        /// The GPU's index.
        gpu: u32,
    },
    /// `nvmlDeviceGetMigDeviceHandleByIndex` of a MIG slot.
    MigHandle {
        /// The GPU's index.
        gpu: u32,
        /// The slot.
        mig: u32,
    },
    /// The UUID and instance ids of a MIG device.
    MigIds {
        /// The GPU's index.
        gpu: u32,
        /// The slot.
        mig: u32,
    },
    /// An NVML function on a MIG device.
    OnMig {
        /// The function.
        call: Cow<'static, str>,
        /// The GPU's index.
        gpu: u32,
        /// The slot.
        mig: u32,
    },
    /// One of a GPU's (or, with `mig`, a MIG device's) process lists.
    Processes {
        /// Which.
        kind: NvmlProcessKind,
        /// The GPU's index.
        gpu: u32,
        /// The MIG slot, for a MIG device's list.
        mig: Option<u32>,
    },
}

impl Step {
    /// An NVML function of the library itself.
    pub fn call(call: &'static str) -> Step {
        Step::Call {
            call: Cow::Borrowed(call),
        }
    }

    /// An NVML function on GPU `gpu`.
    pub fn on_gpu(call: &'static str, gpu: u32) -> Step {
        Step::OnGpu {
            call: Cow::Borrowed(call),
            gpu,
        }
    }
}

/// Why NVML is unavailable.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum NvmlDown {
    /// The library could not be loaded.
    NoLibrary {
        /// The library tried.
        library: String,
        /// The loader's error.
        error: String,
    },
    /// The library loaded but did not initialise.
    InitFailed {
        /// The library.
        library: String,
        /// Why.
        failure: Failure,
    },
    /// The thread NVML is called on could not be started.
    NoThread {
        /// The system's error.
        error: String,
    },
    /// The thread has stopped.
    Stopped,
    /// NVML did not answer within `after`: `step` hangs in the driver.
    Hung {
        /// What the thread was in ([`Step::Idle`]: it had not taken the
        /// request up).
        step: Step,
        /// How long it was waited for.
        after: Duration,
    },
    /// The command's deadline came before NVML was read.
    Late {
        /// What the thread was still in ([`Step::Idle`]: the read had
        /// not begun).
        step: Step,
    },
}

/// Why Xid events are not watched, or stopped being (its words are
/// present's).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum XidDown {
    /// The watcher's thread could not be started.
    NoThread {
        /// The system's error.
        error: String,
    },
    /// The registration was not answered in the time given.
    Late,
    /// NVML failed (its library, its count, the event set, the wait).
    Nvml(Failure),
    /// GPU `gpu` does not report Xid events.
    NotReported {
        /// Its index.
        gpu: u32,
    },
    /// Registering GPU `gpu` failed.
    Gpu {
        /// Its index.
        gpu: u32,
        /// Why.
        failure: Failure,
    },
    /// NVML has no GPU.
    NoGpu,
}
