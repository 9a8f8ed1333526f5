//! The words of the driver's own evidence (issue 29): a GPU that needs a
//! reset or a reboot with each sign named, an application's fault with
//! its process, what was heard when nothing was reported, and whether a
//! reset gpufree prints is reported or inferred.

use crate::model::{
    AppFault, Basis, DriverFault, FaultCode, Heard, LogHeard, Need, Reading, RecoveryAction, Sign,
    Xid, XidAction, XidReport,
};
use crate::present::next::{gpus_phrase, who};
use crate::safe::escape;
use crate::units::span;

/// A GPU the driver says needs a reset or a reboot, first of all.
pub(super) fn driver_fault(d: &DriverFault) -> (String, Vec<String>) {
    let signs = signs(&d.signs);
    match d.need {
        Need::Reset => (
            format!(
                "GPU {} needs a reset: {signs}; its memory comes back only after it",
                d.gpu
            ),
            super::unseen::reset_plan(d.gpu, &d.blockers),
        ),
        Need::Reboot => {
            let mut details = vec![
                "printed for the operator, never run by gpufree; a GPU the driver has lost cannot be reset from here".to_string(),
            ];
            details.extend(d.blockers.iter().map(|(w, _)| {
                format!(
                    "{} holds it and cannot release it before the reboot: no kill frees it",
                    who(w)
                )
            }));
            (
                format!(
                    "GPU {} needs a reboot of the node: {signs}; no process holding it can release its memory before, so none is told to stop",
                    d.gpu
                ),
                details,
            )
        }
    }
}

/// An Xid the catalog puts on the application, naming its process.
pub(super) fn app_fault(a: &AppFault) -> (String, Vec<String>) {
    let x = &a.xid;
    let pid = x.pid.unwrap_or(0);
    let named = x
        .comm
        .as_deref()
        .map(|c| format!(" ({})", escape(c)))
        .unwrap_or_default();
    let head = format!(
        "GPU {}: {} by PID {pid}{named}: the application's fault, not the driver's, and no reset is needed",
        a.gpu,
        xid(x)
    );
    let now = match (&a.who, a.holds) {
        (Some(w), true) => format!("{} still holds the GPU: restart or end it", who(w)),
        (Some(w), false) => format!("{} still runs but no longer holds the GPU", who(w)),
        (None, _) if a.unread => {
            format!("PID {pid} could not be read: whether it still runs is unknown")
        }
        (None, _) => {
            format!("PID {pid} no longer runs (or names a process started after the report)")
        }
    };
    (format!("{head}; {now}"), Vec::new())
}

/// Memory is held and the driver reported nothing that needs a reset: said
/// only from what answered, else that it could not be heard.
pub(super) fn heard(h: &Heard) -> (String, Vec<String>) {
    let on = gpus_phrase(&h.gpus);
    let details = vec![
        format!("kernel log: {}", log(&h.log)),
        format!("NVML recovery action: {}", recovery(&h.recovery)),
    ];
    let message = if h.answered() {
        format!("{on}: no driver fault reported since boot: a reset is not the fix")
    } else {
        format!(
            "{on}: whether the driver reported a fault is unknown (kernel log {}; NVML recovery action {}): gpufree cannot tell whether a reset would help",
            log(&h.log),
            recovery(&h.recovery)
        )
    };
    (message, details)
}

fn log(l: &LogHeard) -> String {
    match l {
        LogHeard::Whole => "read to its end, no Xid that needs a reset on these GPUs".into(),
        LogHeard::Part => "read in part (records lost or the read cut short)".into(),
        LogHeard::NotRead => "not read by this command".into(),
        LogHeard::Failed { error, denied } => format!(
            "could not be read ({})",
            escape(&super::proc::kmsg_failed(error, *denied))
        ),
    }
}

fn recovery(r: &Reading<RecoveryAction>) -> String {
    match r {
        Reading::Value(a) => action(*a),
        Reading::NotSupported => "not supported by this driver or GPU".into(),
        Reading::Failed(why) => format!("failed ({})", escape(&super::nvml::described(why))),
    }
}

/// NVML's name of a recovery action.
fn action(a: RecoveryAction) -> String {
    match a {
        RecoveryAction::None => "NONE".into(),
        RecoveryAction::GpuReset => "GPU_RESET".into(),
        RecoveryAction::NodeReboot => "NODE_REBOOT".into(),
        RecoveryAction::DrainP2p => "DRAIN_P2P".into(),
        RecoveryAction::DrainAndReset => "DRAIN_AND_RESET".into(),
        RecoveryAction::Other(n) => format!("{n} (newer than this gpufree)"),
    }
}

/// The signs joined: `NVML recovery action GPU_RESET; Xid 48 (...) at ...`.
pub fn signs(signs: &[Sign]) -> String {
    signs.iter().map(sign).collect::<Vec<_>>().join("; ")
}

fn sign(s: &Sign) -> String {
    match s {
        Sign::Recovery(a) => format!("NVML recovery action {}", action(*a)),
        Sign::Returned(r) => format!("NVML's {} read returned {}", escape(&r.call), code(r.code)),
        Sign::RemapPending => "a row remap pending (nvmlDeviceGetRemappedRows)".into(),
        Sign::RemapFailure => "a row remap failed (nvmlDeviceGetRemappedRows)".into(),
        Sign::PagesPending => "retired pages pending".into(),
        Sign::Xid(x) => xid(x),
    }
}

/// An NVML return's name, read through one helper.
fn code(c: FaultCode) -> &'static str {
    match c {
        FaultCode::ResetRequired => "RESET_REQUIRED",
        FaultCode::GpuIsLost => "GPU_IS_LOST",
    }
}

/// NVIDIA's recommended action for an Xid, in words.
pub fn xid_action(a: XidAction) -> &'static str {
    match a {
        XidAction::Ignore => "none",
        XidAction::RestartApp => "restart the application",
        XidAction::ResetGpu => "reset the GPU",
        XidAction::RebootNode => "reboot the node",
        XidAction::ContactSupport => "contact NVIDIA support",
        XidAction::SeeTable => "see NVIDIA's Xid table",
    }
}

/// A verdict's reason where the driver says, now, that the GPU needs a
/// reset or a reboot: no job can use it before.
pub fn driver_needs(need: Need) -> &'static str {
    match need {
        Need::Reset => {
            "the driver says it needs a reset before any job can use it (see `gpufree why`)"
        }
        Need::Reboot => {
            "the driver says the node needs a reboot before any job can use it (see `gpufree why`)"
        }
    }
}

/// One Xid report: `Xid 48 (meaning) at 2025-12-05 12:03:01 UTC`.
pub fn xid_report(x: &XidReport) -> String {
    xid(x)
}

/// `Xid 48 (double-bit (uncorrectable) ECC error) at 2026-12-05 12:03:01 UTC`.
fn xid(x: &XidReport) -> String {
    let when = match x.at_unix_ms {
        Some(ms) => utc(ms / 1000),
        None => format!("{} after boot", span(x.since_boot_us as f64 / 1e6)),
    };
    format!("Xid {} ({}) at {when}", x.xid, Xid::lookup(x.xid).meaning)
}

/// Seconds since the epoch as `YYYY-MM-DD HH:MM:SS UTC`.
pub(super) fn utc(secs: u64) -> String {
    let c = crate::units::civil(secs);
    let (h, mi, s) = c.hms;
    format!(
        "{:04}-{:02}-{:02} {h:02}:{mi:02}:{s:02} UTC",
        c.year, c.month, c.day
    )
}

/// Whether a reset gpufree prints is backed by the driver: the line said
/// before the reset plan of an unaccounted-memory finding.
pub(super) fn basis(gpu: u32, b: &Basis) -> String {
    match b {
        Basis::Reported(s) => format!("reported by the driver: {}", signs(s)),
        Basis::Inferred => format!(
            "inferred, not reported: no evidence from the driver names a fault on GPU {gpu}; check the kernel log (`dmesg | grep -i xid`, as root) and `nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT -i {gpu}` before a reset"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn the_civil_date_of_epoch_seconds() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_764_936_181), "2025-12-05 12:03:01 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
    }
}
