//! The words of idle holders (issue 29): who holds memory with no GPU
//! activity over the window, what framework shape each has, and that the
//! busy holders beside them are left out of the kill; and, said once,
//! where the driver could not tell.

use crate::model::{IdleHolders, IdleShape, IdleUnknown, Reading, Role};
use crate::present::next::{count, gpus_phrase, memory, one_or, who};
use crate::safe::escape;
use crate::units::{gib, seconds};

/// The `idle-holders` finding.
pub(super) fn idle(i: &IdleHolders, gpus: &[u32], bytes: u64) -> (String, Vec<String>) {
    let n = i.holders.len();
    let busy = match i.busy {
        0 => String::new(),
        b => format!(
            "; the {} there {} not in this kill",
            count(b, "busy holder", "busy holders"),
            one_or(b, "is", "are")
        ),
    };
    let message = format!(
        "{} {} {} on {} with no GPU activity (SM, memory, encoder, decoder) in the last {}{busy}",
        count(n, "idle holder", "idle holders"),
        one_or(n, "holds", "hold"),
        gib(bytes),
        gpus_phrase(gpus),
        window(i.window_ms),
    );
    let details = i
        .holders
        .iter()
        .map(|h| {
            // A kernel its role already names is not named twice.
            let named = h.who.role == Some(Role::JupyterKernel);
            let shape = match h.shape {
                Some(IdleShape::JupyterKernel) if named => format!(" ({KERNEL_KEEPS})"),
                Some(s) => format!(" ({})", shape(s)),
                None => String::new(),
            };
            let since = h
                .since_unix_ms
                .map(|ms| format!(" since {}", super::fault::utc(ms / 1000)))
                .unwrap_or_default();
            format!("{}: {}, idle{since}{shape}", who(&h.who), memory(&h.memory))
        })
        .collect();
    (message, details)
}

/// The window as people read it: `5s`, or the driver's whole buffer.
fn window(ms: u64) -> String {
    match ms {
        0 => "the samples the driver keeps".into(),
        ms => seconds(ms as f64 / 1000.0),
    }
}

/// What a Jupyter kernel's idleness means.
const KERNEL_KEEPS: &str = "its notebook keeps the memory until the kernel is shut down";

/// What an idle holder's framework shape says of it.
fn shape(s: IdleShape) -> &'static str {
    match s {
        IdleShape::JupyterKernel => {
            "a Jupyter kernel: its notebook keeps the memory until the kernel is shut down"
        }
        IdleShape::RayIdleWorker => {
            "a Ray worker the raylet keeps idle (ray::IDLE): the memory stays until it exits"
        }
        IdleShape::NotebookServer => "a notebook server",
    }
}

/// The `idle-unknown` finding: why no holder of these GPUs is called idle.
pub(super) fn unknown(u: &IdleUnknown) -> (String, Vec<String>) {
    let why = match &u.reading {
        Reading::Failed(why) => format!("failed ({})", escape(&super::nvml::described(why))),
        Reading::Value(()) => "kept no sample of some of them in the window while the GPU was in use (or its own utilisation is not given), or they are MPS clients".into(),
        Reading::NotSupported => "is not supported by this driver or GPU".into(),
    };
    (
        format!(
            "{}: whether the holders are idle is unknown: nvmlDeviceGetProcessUtilization {why}, so none is called idle",
            gpus_phrase(&u.gpus)
        ),
        Vec::new(),
    )
}
