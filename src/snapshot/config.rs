//! Where a collection looks: the roots, the library, the limits, the
//! files and sockets it may read. The defaults are the system's usual
//! places and read nothing; the command line's configuration step
//! (`cli/config.rs`) fills in flags and environment variables.

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
    /// Where `gpufree prepare` keeps the in-kernel walk loaded for the
    /// boot's one-shot commands (`GPUFREE_BPF_PIN`, default
    /// `/sys/fs/bpf/gpufree`; `off`: nowhere).
    pub bpf_pin: Option<PathBuf>,
    /// Hide from this user what only root may read of other users'
    /// processes ([`crate::model::Snapshot::hide_from`]): a gpufree in
    /// secure mode shows its caller no more than root's view would.
    pub hide_from: Option<u32>,
    /// The kernel log read for Xid reports by one-shot commands
    /// (`GPUFREE_KMSG`, default `/dev/kmsg`; `off`: None, not read).
    pub kmsg: Option<PathBuf>,
    /// How far back each NVML read asks for per-process utilisation
    /// samples (`--idle-window`): a look into the driver's buffer, not a
    /// wait.
    pub idle_window: Duration,
}

/// The idle window when none is given.
pub const DEFAULT_IDLE_WINDOW: Duration = Duration::from_secs(5);

/// The read timeout when none is given.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(5);

impl Default for Config {
    fn default() -> Self {
        Config {
            proc_root: PathBuf::from("/proc"),
            dev_dir: PathBuf::from("/dev"),
            sys_root: PathBuf::from("/sys"),
            nvml_lib: None,
            others: false,
            read_timeout: DEFAULT_READ_TIMEOUT,
            unit_dirs: crate::proc::restart::unit_dirs(None),
            pod_log_dir: PathBuf::from(crate::proc::restart::POD_LOG_DIR),
            systemd_bus: None,
            mig_minors: None,
            kubelet_socket: PathBuf::from(crate::kubelet::DEFAULT_SOCKET),
            scan: crate::proc::scan::ScanChoice::Auto,
            long_lived: false,
            bpf_cache: crate::proc::bpf::cache_dir_from(None),
            bpf_pin: crate::proc::bpf::pin_dir_from(None),
            hide_from: None,
            kmsg: Some(PathBuf::from(crate::proc::kmsg::DEFAULT_KMSG)),
            idle_window: DEFAULT_IDLE_WINDOW,
        }
    }
}
