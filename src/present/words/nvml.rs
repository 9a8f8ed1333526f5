//! The words of NVML's state and of the library it loads: why NVML is
//! unavailable ([`NvmlDown`], JSON's `nvml.error`) and the call its
//! thread hangs in ([`Step`]); why a driver reading failed (JSON's
//! `driver_evidence` `{"failed": ...}`); why Xid events are not watched
//! ([`XidDown`]); why a directory for the simulated library is refused
//! (`sim::Refused`) and why root may not load a library
//! (`paths::Unloadable`).

use super::unavailable::failure;
use crate::model::{mig_label, Failure, NvmlDown, Step, XidDown};
use crate::paths::Unloadable;
use crate::sim::{Refusal, Refused};
use std::fmt;

/// Why an NVML call failed, as NVML's state and the driver's readings
/// say it (as [`failure`], but RESET_REQUIRED named).
pub fn described(f: &Failure) -> String {
    match f {
        Failure::ResetRequired => "RESET_REQUIRED: the GPU needs a reset".into(),
        f => failure(f),
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Idle => f.write_str("idle"),
            Step::Load => f.write_str("dlopen of the library"),
            Step::Call { call } => f.write_str(call),
            Step::Handle { gpu } => write!(f, "nvmlDeviceGetHandleByIndex({gpu})"),
            Step::OnGpu { call, gpu } => write!(f, "{call} on GPU {gpu}"),
            Step::MigHandle { gpu, mig } => {
                write!(f, "nvmlDeviceGetMigDeviceHandleByIndex({mig}) on GPU {gpu}")
            }
            Step::MigIds { gpu, mig } => {
                write!(f, "the ids of MIG device {}", mig_label(*gpu, *mig))
            }
            Step::OnMig { call, gpu, mig } => {
                write!(f, "{call} on MIG device {}", mig_label(*gpu, *mig))
            }
            Step::Processes {
                kind,
                gpu,
                mig: None,
            } => {
                let kind = format!("{kind:?}").to_lowercase();
                write!(f, "the {kind} process list of GPU {gpu}")
            }
            Step::Processes {
                kind,
                gpu,
                mig: Some(mig),
            } => write!(
                f,
                "the {kind:?} process list of MIG device {}",
                mig_label(*gpu, *mig)
            ),
        }
    }
}

/// Where the library `library` was looked for, and the flag that names
/// another: a bare name is the dynamic loader's search, a path was given.
fn looked(library: &str) -> &'static str {
    if library.contains('/') {
        "given by --nvml-lib or GPUFREE_NVML_LIB"
    } else {
        "searched in LD_LIBRARY_PATH, /etc/ld.so.cache, /lib, /usr/lib; \
         name it with --nvml-lib or GPUFREE_NVML_LIB"
    }
}

impl fmt::Display for NvmlDown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const HUNG: &str = "NVML did not answer within";
        const LATE: &str = "NVML was not read before the deadline";
        match self {
            NvmlDown::NoLibrary { library, error } => {
                let error = error
                    .strip_prefix("a libloading error occurred: ")
                    .unwrap_or(error);
                write!(
                    f,
                    "no NVIDIA library ({library}, {}): {error}",
                    looked(library)
                )
            }
            NvmlDown::InitFailed { library, failure } => {
                write!(f, "NVML init failed ({library}): {}", described(failure))
            }
            NvmlDown::NoThread { error } => write!(f, "cannot start the NVML thread: {error}"),
            NvmlDown::Stopped => f.write_str("the NVML thread has stopped"),
            // Between calls: the thread did not take the request up.
            NvmlDown::Hung {
                step: Step::Idle,
                after,
            } => write!(f, "{HUNG} {:.1} s", after.as_secs_f64()),
            NvmlDown::Hung { step, after } => write!(
                f,
                "{HUNG} {:.1} s ({step} hangs in the driver)",
                after.as_secs_f64()
            ),
            // Between calls: the read had not begun.
            NvmlDown::Late { step: Step::Idle } => f.write_str(LATE),
            NvmlDown::Late { step } => write!(f, "{LATE} ({step} was still running)"),
        }
    }
}

impl fmt::Display for XidDown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            XidDown::NoThread { error } => write!(f, "cannot start the Xid thread: {error}"),
            XidDown::Late => f.write_str("NVML's event API did not answer in time"),
            XidDown::Nvml(failure) => f.write_str(&described(failure)),
            XidDown::NotReported { gpu } => write!(f, "GPU {gpu} does not report Xid events"),
            XidDown::Gpu { gpu, failure } => write!(f, "GPU {gpu}: {}", described(failure)),
            XidDown::NoGpu => f.write_str("no GPU"),
        }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self.at.display();
        match self.why {
            Refusal::Relative => write!(f, "{at}: not an absolute path"),
            Refusal::DotDot => write!(f, "{at}: a path through .."),
            Refusal::Link => write!(f, "{at}: a link, or not a directory"),
            Refusal::NotPrivate => write!(
                f,
                "{at}: not a private directory of this user (not its own, or others may write it)"
            ),
            Refusal::NotWritable => write!(f, "{at}: not writable"),
            Refusal::InSticky => write!(
                f,
                "{at}: in a directory anyone may write, and not this user's own 0700 directory"
            ),
            Refusal::NotOurs => write!(
                f,
                "{at}: neither root's nor this user's, or others may write it"
            ),
            Refusal::Errno(e) => write!(f, "{at}: {e}"),
        }
    }
}

impl fmt::Display for Unloadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unloadable::Unread { path, error } => write!(f, "{}: {error}", path.display()),
            Unloadable::NotRoots { path } => write!(
                f,
                "{} is not root's alone: root runs no code someone else chose",
                path.display()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::NvmlProcessKind;
    use std::path::PathBuf;
    use std::time::Duration;

    /// Each step in the words the watchdog used before they were typed.
    #[test]
    fn each_step_in_words() {
        let cases = [
            (Step::Idle, "idle"),
            (Step::Load, "dlopen of the library"),
            (Step::call("nvmlInit_v2"), "nvmlInit_v2"),
            (Step::Handle { gpu: 3 }, "nvmlDeviceGetHandleByIndex(3)"),
            (
                Step::on_gpu("nvmlDeviceGetRemappedRows", 1),
                "nvmlDeviceGetRemappedRows on GPU 1",
            ),
            (
                Step::MigHandle { gpu: 1, mig: 2 },
                "nvmlDeviceGetMigDeviceHandleByIndex(2) on GPU 1",
            ),
            (Step::MigIds { gpu: 1, mig: 2 }, "the ids of MIG device 1:2"),
            (
                Step::OnMig {
                    call: "nvmlDeviceGetMemoryInfo".into(),
                    gpu: 1,
                    mig: 2,
                },
                "nvmlDeviceGetMemoryInfo on MIG device 1:2",
            ),
            (
                Step::Processes {
                    kind: NvmlProcessKind::Compute,
                    gpu: 0,
                    mig: None,
                },
                "the compute process list of GPU 0",
            ),
            (
                Step::Processes {
                    kind: NvmlProcessKind::Graphics,
                    gpu: 0,
                    mig: Some(1),
                },
                "the Graphics process list of MIG device 0:1",
            ),
        ];
        for (step, words) in cases {
            assert_eq!(step.to_string(), words);
        }
    }

    #[test]
    fn why_nvml_is_down_in_words() {
        let hung = |step| NvmlDown::Hung {
            step,
            after: Duration::from_millis(5_040),
        };
        let cases = [
            (
                NvmlDown::NoLibrary {
                    library: "libnvidia-ml.so.1".into(),
                    error: "no such file".into(),
                },
                "no NVIDIA library (libnvidia-ml.so.1, searched in LD_LIBRARY_PATH, /etc/ld.so.cache, /lib, /usr/lib; name it with --nvml-lib or GPUFREE_NVML_LIB): no such file",
            ),
            (
                NvmlDown::InitFailed {
                    library: "/x/libnvidia-ml.so.1".into(),
                    failure: Failure::ResetRequired,
                },
                "NVML init failed (/x/libnvidia-ml.so.1): RESET_REQUIRED: the GPU needs a reset",
            ),
            (
                NvmlDown::NoThread {
                    error: "out of memory".into(),
                },
                "cannot start the NVML thread: out of memory",
            ),
            (NvmlDown::Stopped, "the NVML thread has stopped"),
            (hung(Step::Idle), "NVML did not answer within 5.0 s"),
            (
                hung(Step::call("nvmlInit_v2")),
                "NVML did not answer within 5.0 s (nvmlInit_v2 hangs in the driver)",
            ),
            (
                NvmlDown::Late { step: Step::Idle },
                "NVML was not read before the deadline",
            ),
            (
                NvmlDown::Late {
                    step: Step::on_gpu("nvmlDeviceGetMemoryInfo", 0),
                },
                "NVML was not read before the deadline (nvmlDeviceGetMemoryInfo on GPU 0 was still running)",
            ),
        ];
        for (down, words) in cases {
            assert_eq!(down.to_string(), words);
        }
    }

    #[test]
    fn a_failed_reading_names_reset_required_as_before() {
        assert_eq!(
            described(&Failure::ResetRequired),
            "RESET_REQUIRED: the GPU needs a reset"
        );
        assert_eq!(
            described(&Failure::GpuIsLost),
            "GPU_IS_LOST: the GPU fell off the bus"
        );
    }

    #[test]
    fn why_xid_events_are_not_watched_in_words() {
        let cases = [
            (
                XidDown::NoThread {
                    error: "busy".into(),
                },
                "cannot start the Xid thread: busy",
            ),
            (XidDown::Late, "NVML's event API did not answer in time"),
            (
                XidDown::Nvml(Failure::NoPermission),
                "NO_PERMISSION (run as root to see it)",
            ),
            (
                XidDown::NotReported { gpu: 2 },
                "GPU 2 does not report Xid events",
            ),
            (
                XidDown::Gpu {
                    gpu: 1,
                    failure: Failure::GpuIsLost,
                },
                "GPU 1: GPU_IS_LOST: the GPU fell off the bus",
            ),
            (XidDown::NoGpu, "no GPU"),
        ];
        for (down, words) in cases {
            assert_eq!(down.to_string(), words);
        }
    }

    #[test]
    fn refused_directories_and_libraries_in_words() {
        let at = |why| Refused {
            at: PathBuf::from("/tmp/x"),
            why,
        };
        assert_eq!(at(Refusal::DotDot).to_string(), "/tmp/x: a path through ..");
        assert_eq!(
            at(Refusal::Errno(rustix::io::Errno::ACCESS)).to_string(),
            format!("/tmp/x: {}", rustix::io::Errno::ACCESS)
        );
        assert_eq!(
            Unloadable::NotRoots {
                path: PathBuf::from("/home/a/lib.so")
            }
            .to_string(),
            "/home/a/lib.so is not root's alone: root runs no code someone else chose"
        );
    }
}
