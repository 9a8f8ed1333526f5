//! The one configuration step (ripgrep's "high args"): clap has parsed
//! plain values without touching the host; here, first, the privilege
//! context is decided ([`Privilege`]: may the caller steer gpufree?), then
//! the environment is read — every variable that steers where gpufree
//! looks, where its records go and what it shows, each read here once —
//! and the collection's [`Config`], the audit sinks and each command's
//! options are built, resolving users and regular expressions before
//! anything is collected. Read elsewhere, each in one place: the
//! simulator's own variables (`sim`: `GPUFREE_SIM_LIBRARY`,
//! `XDG_CACHE_HOME`; its commands are refused in secure mode), the test
//! hooks (`test_hooks/`: never in secure mode), the holder mode (`main.rs`:
//! never in secure mode), `NO_COLOR` (`cli::run`, into the one
//! `present::Printer`), and the invoker's
//! origin for the audit record (`proc/me.rs`: `SSH_CONNECTION`,
//! `SUDO_USER`, said to prove nothing).
//!
//! Secure mode (the kernel's `AT_SECURE`: setuid, setgid or file
//! capabilities; or real and effective ids that differ): the caller has
//! less privilege than gpufree, so nothing it names may steer gpufree.
//! Every `GPUFREE_*` variable but `GPUFREE_SCAN` and
//! `GPUFREE_READ_TIMEOUT` (and `DBUS_SYSTEM_BUS_ADDRESS`) is ignored, each
//! said in one line on stderr; flags that name a path, library, socket or
//! root are refused (exit 2); `sim` and `demo` (the simulator) are
//! refused; NVML is loaded by its system name only; test hooks never run.

use super::args::{CheckArgs, Command, KillArgs, SimCommand};
use super::{regex_flag, Cli, Common, Error};
use crate::act::audit::Sinks;
use crate::act::kill::UserSel;
use crate::model::{BadValue, Conflict};
use crate::proc::me::{Privilege, Secure};
use crate::snapshot::Config;
use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

/// What a command runs with: who may steer it, where it looks, where its
/// records go, and what its flags resolved to.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Decided before anything else.
    pub privilege: Privilege,
    /// The plain flags every command takes (the presenters' `--json`,
    /// `--quiet`, `--gpu`...). Its paths are read here only.
    pub common: Common,
    /// Where collection looks.
    pub collect: Config,
    /// A `--dev-dir` (or `GPUFREE_DEV_DIR`) was given: a directory without
    /// GPU nodes is a typo, not an idle host.
    pub dev_dir_given: bool,
    /// Where the audit record of a kill goes (`--audit-log` added by the
    /// command that kills).
    pub audit: Sinks,
    /// `check --state` (or `GPUFREE_CHECK_STATE`, or the default).
    pub check_state: PathBuf,
    /// `kill --match`, compiled.
    pub matcher: Option<regex::Regex>,
    /// `kill --user`, resolved.
    pub user: Option<UserSel>,
    /// `why --pattern`, with its text, compiled.
    pub pattern: Option<(String, regex::Regex)>,
    /// Where root's serve answers this user's `status` and `why`
    /// (`GPUFREE_VIEW_SOCKET`, default `/run/gpufree-view/view.sock`;
    /// `off` or empty: never asked): only for a caller who is not root and
    /// named no root, directory or library of their own.
    pub view: Option<PathBuf>,
}

/// The default of `check --state`.
pub const CHECK_STATE: &str = "/run/gpufree/check.json";

/// The variables that stay honoured in secure mode: values, not places.
const VALUES: &[&str] = &["GPUFREE_SCAN", "GPUFREE_READ_TIMEOUT"];

/// The environment gpufree reads, each variable once.
struct Env {
    vars: Vec<(String, OsString)>,
}

impl Env {
    /// The process's `GPUFREE_*` variables and `DBUS_SYSTEM_BUS_ADDRESS`.
    fn read() -> Env {
        Env {
            vars: std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v)))
                .filter(|(k, _)| k.starts_with("GPUFREE_") || k == BUS_VAR)
                .collect(),
        }
    }

    fn get(&self, name: &str) -> Option<OsString> {
        self.vars
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    /// In secure mode, drops every variable but [`VALUES`], saying each in
    /// one line on stderr.
    fn secure(self, why: Secure) -> Env {
        let (kept, ignored): (Vec<_>, Vec<_>) = self
            .vars
            .into_iter()
            .partition(|(k, _)| VALUES.contains(&k.as_str()));
        for (k, _) in ignored {
            let _ = crate::present::notice::write_ignored(&mut std::io::stderr(), &k, why.why());
        }
        Env { vars: kept }
    }
}

/// The system bus's address variable (systemd's restart policies are
/// asked there).
const BUS_VAR: &str = "DBUS_SYSTEM_BUS_ADDRESS";

/// The settings of a parsed command line: the privilege context first,
/// then the environment, then the flags.
pub fn settings(cli: &Cli) -> Result<Settings, Error> {
    let privilege = Privilege::of_process();
    let mut env = Env::read();
    if let Some(why) = privilege.secure {
        env = env.secure(why);
        refuse_steering(cli, why)?;
    }
    refuse_conflicts(cli, std::io::stdout().is_terminal())?;
    super::from::refuse(cli, privilege.secure.is_some())?;
    let common = &cli.common;
    let dev_dir = common
        .dev_dir
        .clone()
        .or_else(|| env.path("GPUFREE_DEV_DIR"));
    let mut collect = Config {
        // What only root may read of other users' processes stays hidden
        // from a caller with less privilege than gpufree has.
        hide_from: privilege.secure.map(|_| privilege.uid),
        ..collect_config(common, &env, dev_dir.clone())?
    };
    if let Some(lib) = collect
        .nvml_lib
        .clone()
        .filter(|_| rustix::process::geteuid().is_root())
    {
        // Root loads the resolved path it checked, never one a link could
        // later lead elsewhere.
        let checked = crate::paths::root_loadable(&lib).map_err(|why| Error::Library {
            path: lib,
            why: why.to_string(),
        })?;
        collect.nvml_lib = Some(checked);
    }
    let (matcher, user) = match &cli.command {
        Some(Command::Kill(args)) => kill_selectors(args)?,
        _ => (None, None),
    };
    let pattern = match &cli.command {
        Some(Command::Why {
            pattern: Some(text),
            ..
        }) => Some((text.clone(), regex_flag("--pattern", text)?)),
        _ => None,
    };
    Ok(Settings {
        // A snapshot from a file asks no one.
        view: view_socket(&env, privilege, &collect, dev_dir.is_some())
            .filter(|_| cli.common.from.is_none()),
        privilege,
        common: common.clone(),
        collect,
        dev_dir_given: dev_dir.is_some(),
        audit: audit_sinks(cli, &env),
        check_state: match &cli.command {
            Some(Command::Check(CheckArgs { state: Some(s), .. })) => s.clone(),
            _ => env
                .path("GPUFREE_CHECK_STATE")
                .unwrap_or_else(|| PathBuf::from(CHECK_STATE)),
        },
        matcher,
        user,
        pattern,
    })
}

/// Where collection looks: each flag, else its variable, else the
/// system's place.
fn collect_config(common: &Common, env: &Env, dev_dir: Option<PathBuf>) -> Result<Config, Error> {
    let given = |flag: &Option<PathBuf>, var: &str| flag.clone().or_else(|| env.path(var));
    let d = Config::default();
    Ok(Config {
        proc_root: given(&common.proc_root, "GPUFREE_PROC_ROOT").unwrap_or(d.proc_root),
        dev_dir: dev_dir.unwrap_or(d.dev_dir),
        sys_root: env.path("GPUFREE_SYS_ROOT").unwrap_or(d.sys_root),
        nvml_lib: given(&common.nvml_lib, "GPUFREE_NVML_LIB"),
        read_timeout: read_timeout(common, env)?,
        unit_dirs: env
            .get("GPUFREE_UNIT_PATH")
            .map_or(d.unit_dirs, |p| crate::proc::restart::unit_dirs(Some(p))),
        pod_log_dir: env.path("GPUFREE_POD_LOG_DIR").unwrap_or(d.pod_log_dir),
        systemd_bus: env
            .string("GPUFREE_SYSTEMD_BUS")
            .or_else(|| crate::proc::restart::systemd_bus(env.string(BUS_VAR))),
        mig_minors: env.path("GPUFREE_MIG_MINORS"),
        kubelet_socket: given(&common.kubelet_socket, "GPUFREE_KUBELET_SOCKET")
            .unwrap_or(d.kubelet_socket),
        scan: scan(common, env)?,
        bpf_cache: crate::proc::bpf::cache_dir_from(env.get(crate::proc::bpf::CACHE_ENV)),
        bpf_pin: crate::proc::bpf::pin_dir_from(env.get(crate::proc::bpf::PIN_ENV)),
        kmsg: match env.get("GPUFREE_KMSG") {
            Some(v) if v.is_empty() || v == "off" => None,
            Some(_) => env.path("GPUFREE_KMSG"),
            None => d.kmsg.clone(),
        },
        idle_window: common.idle_window.unwrap_or(d.idle_window),
        ..d
    })
}

/// Where root's view is asked for a user's `status` and `why`: never for
/// root, nor for a user who names a root, directory or library of their
/// own (they look there).
fn view_socket(
    env: &Env,
    privilege: Privilege,
    collect: &Config,
    dev_dir: bool,
) -> Option<PathBuf> {
    let d = Config::default();
    let own_look = collect.proc_root != d.proc_root
        || collect.nvml_lib.is_some()
        || collect.sys_root != d.sys_root
        || collect.mig_minors.is_some()
        // A kernel log of their own (not `off`, which names none).
        || (collect.kmsg.is_some() && collect.kmsg != d.kmsg)
        || dev_dir;
    match env.get("GPUFREE_VIEW_SOCKET") {
        Some(v) if v.is_empty() || v == "off" => None,
        Some(v) => Some(PathBuf::from(v)),
        None => Some(PathBuf::from(super::view::DEFAULT_VIEW_SOCKET)),
    }
    .filter(|_| privilege.uid != 0 && !own_look)
}

/// `--read-timeout`, else `GPUFREE_READ_TIMEOUT`, else the default.
fn read_timeout(common: &Common, env: &Env) -> Result<Duration, Error> {
    match (common.read_timeout, env.string("GPUFREE_READ_TIMEOUT")) {
        (Some(d), _) => Ok(d),
        (None, Some(v)) => super::args::read_timeout(&v)
            .map_err(|why| Error::Variable("GPUFREE_READ_TIMEOUT", why)),
        (None, None) => Ok(crate::snapshot::DEFAULT_READ_TIMEOUT),
    }
}

/// `--scan`, else `GPUFREE_SCAN`, else auto.
fn scan(common: &Common, env: &Env) -> Result<crate::proc::scan::ScanChoice, Error> {
    use crate::proc::scan::ScanChoice;
    match (common.scan, env.string("GPUFREE_SCAN")) {
        (Some(s), _) => Ok(s),
        (None, Some(v)) => ScanChoice::named(&v).ok_or_else(|| {
            let names = ScanChoice::ALL.map(ScanChoice::as_str).to_vec();
            Error::Variable("GPUFREE_SCAN", BadValue::NotOneOf { text: v, names })
        }),
        (None, None) => Ok(ScanChoice::Auto),
    }
}

/// The journal's and syslog's sockets (`GPUFREE_JOURNAL_SOCKET`,
/// `GPUFREE_SYSLOG_SOCKET`; set empty: not written there), and the
/// command's `--audit-log`.
fn audit_sinks(cli: &Cli, env: &Env) -> Sinks {
    use crate::act::audit::{JOURNAL_SOCKET, SYSLOG_SOCKET};
    let socket = |var: &str, default: &str| match env.get(var) {
        Some(v) if v.is_empty() => None,
        Some(v) => Some(PathBuf::from(v)),
        None => Some(PathBuf::from(default)),
    };
    Sinks {
        journal: socket("GPUFREE_JOURNAL_SOCKET", JOURNAL_SOCKET),
        syslog: socket("GPUFREE_SYSLOG_SOCKET", SYSLOG_SOCKET),
        file: match &cli.command {
            Some(Command::Kill(KillArgs { audit_log, .. }) | Command::Watch { audit_log, .. }) => {
                audit_log.clone()
            }
            _ => None,
        },
    }
}

/// `kill --match` compiled and `kill --user` resolved, before anything is
/// collected: a typo costs no scan.
fn kill_selectors(args: &KillArgs) -> Result<(Option<regex::Regex>, Option<UserSel>), Error> {
    let matcher = match &args.matcher {
        Some(m) => Some(regex_flag("--match", m)?),
        None => None,
    };
    let user = match &args.user {
        None => None,
        Some(u) => Some(match u.parse() {
            Ok(uid) => UserSel::Uid(uid),
            Err(_) if uzers::get_user_by_name(u).is_none() => {
                return Err(Error::NoSuchUser(u.clone()))
            }
            Err(_) => UserSel::Name(u.clone()),
        }),
    };
    Ok((matcher, user))
}

/// In secure mode, refuses what would let the caller steer gpufree: a
/// flag naming a path, library, socket or root, and the commands that
/// run the simulator.
fn refuse_steering(cli: &Cli, why: Secure) -> Result<(), Error> {
    let refused = |what: &'static str| Err(Error::Steering { what, why });
    for (given, flag) in cli.common.host_paths() {
        if given {
            return refused(flag);
        }
    }
    match &cli.command {
        Some(Command::Kill(KillArgs {
            audit_log: Some(_), ..
        })) => refused("--audit-log"),
        Some(Command::Watch {
            audit_log: Some(_), ..
        }) => refused("--audit-log"),
        // A setuid replay would read a file of its caller's choosing.
        Some(Command::Watch {
            replay: Some(_), ..
        }) => refused("--replay"),
        Some(Command::Check(CheckArgs { state: Some(_), .. })) => refused("--state"),
        Some(Command::Metrics {
            output: Some(_), ..
        }) => refused("--output"),
        // A setuid record would append to a file of its caller's choosing.
        Some(Command::Record(_)) => refused("record"),
        // A setuid serve would bind any port for its caller.
        Some(Command::Serve(_)) => refused("serve"),
        // It needs no privilege; a setuid one would connect anywhere for
        // its caller.
        Some(Command::Fleet(_)) => refused("fleet"),
        Some(Command::Doctor { .. }) => refused("doctor --unit"),
        Some(Command::Man { dir: Some(_) }) => refused("man --dir"),
        Some(Command::Sim(SimCommand::Lib | SimCommand::Exec { .. })) => refused("sim"),
        Some(Command::Demo { .. }) => refused("demo"),
        // A setuid copy writes no file: the archive goes to the caller's
        // own stdout, and it reads no file the caller names.
        Some(Command::Bundle(b)) if b.out.as_ref().is_none_or(|o| o.as_os_str() != "-") => {
            refused("bundle without --out -")
        }
        Some(Command::Bundle(b)) if b.recording.is_some() => refused("--recording"),
        Some(Command::Bundle(b)) if b.audit_log.is_some() => refused("--audit-log"),
        _ => Ok(()),
    }
}

/// Refuses a flag that contradicts its command or where its output goes
/// (`stdout_terminal`), before anything is collected.
fn refuse_conflicts(cli: &Cli, stdout_terminal: bool) -> Result<(), Error> {
    let conflict = |c: Conflict| {
        use clap::CommandFactory;
        Err(Error::Args(
            Cli::command().error(clap::error::ErrorKind::ArgumentConflict, c),
        ))
    };
    match &cli.command {
        Some(Command::Metrics { .. }) if cli.common.json => conflict(Conflict::MetricsJson),
        Some(Command::Bundle(_)) if cli.common.json => conflict(Conflict::BundleJson),
        Some(Command::Bundle(b))
            if stdout_terminal && b.out.as_ref().is_some_and(|o| o.as_os_str() == "-") =>
        {
            conflict(Conflict::BundleToTerminal)
        }
        _ => Ok(()),
    }
}

impl Env {
    fn path(&self, name: &str) -> Option<PathBuf> {
        self.get(name).map(PathBuf::from)
    }

    fn string(&self, name: &str) -> Option<String> {
        self.get(name).map(|v| v.to_string_lossy().into_owned())
    }
}
