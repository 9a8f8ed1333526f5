//! Where a collection looks: the roots, the library, the limits, the
//! files and sockets it may read (each from its flag or environment
//! variable, else the system's usual place).

use std::path::PathBuf;
use std::time::Duration;

/// Where to look.
#[derive(Debug, Clone)]
pub struct Config {
    /// The proc root (default `/proc`).
    pub proc_root: PathBuf,
    /// The device directory (default `/dev`).
    pub dev_dir: PathBuf,
    /// The sysfs root (`GPUFREE_SYS_ROOT`, default `/sys`): DRM cards and
    /// the KFD ([`crate::sysfs`]).
    pub sys_root: PathBuf,
    /// The NVML library; None for the system's.
    pub nvml_lib: Option<PathBuf>,
    /// Also collect every other process briefly (for `why --pattern`).
    pub others: bool,
    /// How long any one read (a process's fds and maps, an NVML call) may
    /// take before it counts as timed out (`GPUFREE_READ_TIMEOUT`).
    pub read_timeout: Duration,
    /// Where system unit files are read (`GPUFREE_UNIT_PATH`, else
    /// systemd's own list).
    pub unit_dirs: Vec<PathBuf>,
    /// Where the kubelet keeps one log directory per pod
    /// (`GPUFREE_POD_LOG_DIR`, else `/var/log/pods`).
    pub pod_log_dir: PathBuf,
    /// The D-Bus address where systemd answers (`GPUFREE_SYSTEMD_BUS`;
    /// else the system bus where systemd runs); None: unit files only.
    pub systemd_bus: Option<String>,
    /// The driver's MIG capability table (`GPUFREE_MIG_MINORS`); None:
    /// `driver/nvidia-caps/mig-minors` under the proc root.
    pub mig_minors: Option<PathBuf>,
    /// The kubelet's pod-resources socket (`GPUFREE_KUBELET_SOCKET`, else
    /// its usual path), read when it exists.
    pub kubelet_socket: PathBuf,
    /// Which walk finds the holders (`--scan`, `GPUFREE_SCAN`).
    pub scan: crate::proc::scan::ScanChoice,
    /// The command collects again and again (watch, serve, wait): the
    /// in-kernel walk's load is paid once.
    pub long_lived: bool,
    /// Where this boot's relocation of the in-kernel walk is kept
    /// (`GPUFREE_BPF_CACHE`, default `/run/gpufree`; `off`: nowhere).
    pub bpf_cache: Option<PathBuf>,
}

/// The read timeout when none is given.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(5);

impl Default for Config {
    fn default() -> Self {
        Config {
            proc_root: PathBuf::from("/proc"),
            dev_dir: PathBuf::from("/dev"),
            sys_root: std::env::var_os("GPUFREE_SYS_ROOT")
                .map_or_else(|| PathBuf::from("/sys"), PathBuf::from),
            nvml_lib: None,
            others: false,
            read_timeout: DEFAULT_READ_TIMEOUT,
            unit_dirs: crate::proc::restart::unit_dirs(std::env::var_os("GPUFREE_UNIT_PATH")),
            pod_log_dir: std::env::var_os("GPUFREE_POD_LOG_DIR").map_or_else(
                || PathBuf::from(crate::proc::restart::POD_LOG_DIR),
                PathBuf::from,
            ),
            systemd_bus: std::env::var("GPUFREE_SYSTEMD_BUS")
                .ok()
                .or_else(crate::proc::restart::systemd_bus),
            mig_minors: std::env::var_os("GPUFREE_MIG_MINORS").map(PathBuf::from),
            kubelet_socket: std::env::var_os("GPUFREE_KUBELET_SOCKET").map_or_else(
                || PathBuf::from(crate::kubelet::DEFAULT_SOCKET),
                PathBuf::from,
            ),
            scan: crate::proc::scan::ScanChoice::Auto,
            long_lived: false,
            bpf_cache: crate::proc::bpf::cache_dir_from(std::env::var_os(
                crate::proc::bpf::CACHE_ENV,
            )),
        }
    }
}
