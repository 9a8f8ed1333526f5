//! What the host says about restarting a holder: a systemd unit's
//! `Restart=` (systemd's own answer over D-Bus where it runs, else its unit
//! file and drop-ins, read the way systemd layers them), and a Kubernetes
//! pod's namespace and name (the kubelet's log directory for the pod's
//! UID).
//!
//! Every string comes from a file or a process someone else controls: unit
//! names and pod names are checked against the characters their systems
//! allow before any path or command is built from them.

use crate::model::{BusFailure, RestartSource, UnitRestart, UnitUnread};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where systemd looks for system units, in its order of precedence.
const UNIT_DIRS: &[&str] = &[
    "/etc/systemd/system.control",
    "/run/systemd/system.control",
    "/run/systemd/transient",
    "/run/systemd/generator.early",
    "/etc/systemd/system",
    "/etc/systemd/system.attached",
    "/run/systemd/system",
    "/run/systemd/system.attached",
    "/run/systemd/generator",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
    "/run/systemd/generator.late",
];

/// The values `Restart=` takes.
const RESTART_VALUES: &[&str] = &[
    "no",
    "always",
    "on-success",
    "on-failure",
    "on-abnormal",
    "on-abort",
    "on-watchdog",
];

/// The most of one unit file or drop-in that is read; a longer one is
/// named as unreadable (a `Restart=` past the cut would be missed).
const FILE_MAX: u64 = 1024 * 1024;

/// The unit directories: `path` (colon-separated, as `GPUFREE_UNIT_PATH`
/// gives it, for tests and unusual layouts) or systemd's own list.
pub fn unit_dirs(path: Option<std::ffi::OsString>) -> Vec<PathBuf> {
    match path {
        Some(p) => std::env::split_paths(&p).collect(),
        None => UNIT_DIRS.iter().map(PathBuf::from).collect(),
    }
}

/// Whether `name` is a unit name systemd accepts (so no path can be made
/// of it): letters, digits and `:-_.\@`, with a known suffix.
pub fn is_unit_name(name: &str) -> bool {
    name.len() <= 255
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b":-_.\\@".contains(&b))
        && [".service", ".scope", ".socket", ".mount", ".slice"]
            .iter()
            .any(|s| name.ends_with(s))
}

/// A regular file's text (invalid UTF-8 replaced, as systemd reads bytes),
/// at most [`FILE_MAX`] bytes; never blocks on a FIFO or a device.
/// Ok(None) when there is no such file; Err (with why) when there is one
/// that could not be read whole.
fn read_file(path: &Path) -> Result<Option<String>, UnitUnread> {
    use std::os::unix::fs::OpenOptionsExt;
    let shown = || path.display().to_string();
    let why = |e: std::io::Error| UnitUnread::Io {
        path: shown(),
        error: e.to_string(),
    };
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(why(e)),
    };
    if !f.metadata().map_err(why)?.is_file() {
        return Err(UnitUnread::NotRegular { path: shown() });
    }
    let mut bytes = Vec::new();
    f.take(FILE_MAX + 1).read_to_end(&mut bytes).map_err(why)?;
    if bytes.len() as u64 > FILE_MAX {
        return Err(UnitUnread::TooLarge {
            path: shown(),
            max: FILE_MAX,
        });
    }
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// The last `Restart=` and `RestartSec=` of a unit file's `[Service]`
/// section, applied over `into` (an empty value resets to the default).
fn apply(text: &str, into: &mut (Option<String>, Option<String>)) {
    let mut service = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            service = line == "[Service]";
            continue;
        }
        let Some((key, value)) = line.split_once('=').filter(|_| service) else {
            continue;
        };
        let value = value.trim();
        let slot = match key.trim() {
            // systemd ignores a value it does not know: so does this.
            "Restart" if value.is_empty() || RESTART_VALUES.contains(&value) => &mut into.0,
            "RestartSec" => &mut into.1,
            _ => continue,
        };
        *slot = (!value.is_empty()).then(|| value.chars().take(64).collect());
    }
}

/// `Restart=` of system unit `unit`, from its unit file in `dirs` (the
/// first that has it; a template instance falls back to its template) and
/// its drop-ins (`UNIT.d/*.conf` in every directory, in file-name order, a
/// name in an earlier directory hiding the same name in a later one).
/// None when the name is not a unit name or no directory has the unit.
pub fn unit_restart(dirs: &[PathBuf], unit: &str) -> Option<UnitRestart> {
    if !is_unit_name(unit) {
        return None;
    }
    let template = unit.split_once('@').and_then(|(head, rest)| {
        let suffix = rest.rsplit_once('.')?.1;
        Some(format!("{head}@.{suffix}"))
    });
    let names: Vec<&str> = std::iter::once(unit).chain(template.as_deref()).collect();
    // A file that exists but cannot be read may hold the policy: said,
    // never skipped silently.
    let mut unreadable = Vec::new();
    let mut read = |p: &Path| match read_file(p) {
        Ok(t) => t,
        Err(e) => {
            unreadable.push(e);
            None
        }
    };
    let (main, text) = names.iter().find_map(|n| {
        dirs.iter().find_map(|d| {
            let p = d.join(n);
            read(&p).map(|t| (p, t))
        })
    })?;
    let mut values = (None, None);
    apply(&text, &mut values);
    let mut dropins: std::collections::BTreeMap<std::ffi::OsString, PathBuf> = Default::default();
    for n in names.iter().rev() {
        for d in dirs.iter().rev() {
            let Ok(entries) = std::fs::read_dir(d.join(format!("{n}.d"))) else {
                continue;
            };
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().ends_with(".conf") {
                    dropins.insert(e.file_name(), e.path());
                }
            }
        }
    }
    let mut sources = vec![main.display().to_string()];
    for path in dropins.values() {
        if let Some(t) = read(path) {
            apply(&t, &mut values);
            sources.push(path.display().to_string());
        }
    }
    Some(UnitRestart {
        restart: values.0.unwrap_or_else(|| "no".into()),
        restart_sec: values.1,
        source: RestartSource::Files(sources),
        unreadable,
    })
}

/// Whether `s` is a DNS-1123 label (a Kubernetes namespace).
pub fn is_dns_label(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Whether `s` is a DNS-1123 subdomain (a Kubernetes object name).
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// The D-Bus address of the system bus where systemd runs (its runtime
/// directory `/run/systemd/system` exists): `address` (the environment's
/// `DBUS_SYSTEM_BUS_ADDRESS`), or the standard socket. None where systemd
/// does not run: unit files only.
pub fn systemd_bus(address: Option<String>) -> Option<String> {
    Path::new("/run/systemd/system")
        .is_dir()
        .then(|| address.unwrap_or_else(|| "unix:path=/run/dbus/system_bus_socket".into()))
}

/// Asks systemd over D-Bus at `address` for the restart policy of each
/// of `units` (its Service's `Restart` and `RestartUSec`, and
/// `NRestarts`), all within `timeout`. A unit systemd has not loaded is
/// left out (its files may still say); Err when the bus cannot be asked.
pub fn systemd_restarts(
    address: &str,
    units: &[&str],
    timeout: std::time::Duration,
) -> Result<std::collections::BTreeMap<String, UnitRestart>, BusFailure> {
    // A thread of its own: a caller inside an async runtime (serve) could
    // not block on another one.
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| BusFailure::NoRuntime(e.to_string()))?;
                rt.block_on(async {
                    tokio::time::timeout(timeout, ask_systemd(address, units))
                        .await
                        .map_err(|_| BusFailure::NoAnswer(timeout))?
                        .map_err(|e| BusFailure::Failed(e.to_string()))
                })
            })
            .join()
            .unwrap_or(Err(BusFailure::Panicked))
    })
}

async fn ask_systemd(
    address: &str,
    units: &[&str],
) -> zbus::Result<std::collections::BTreeMap<String, UnitRestart>> {
    const SYSTEMD: &str = "org.freedesktop.systemd1";
    let conn = zbus::connection::Builder::address(address)?.build().await?;
    let service = zbus::names::InterfaceName::from_static_str("org.freedesktop.systemd1.Service")?;
    let mut found = std::collections::BTreeMap::new();
    for &unit in units {
        let reply = conn
            .call_method(
                Some(SYSTEMD),
                "/org/freedesktop/systemd1",
                Some("org.freedesktop.systemd1.Manager"),
                "GetUnit",
                &(unit,),
            )
            .await;
        let path: zbus::zvariant::OwnedObjectPath = match reply {
            Ok(m) => m.body().deserialize()?,
            Err(zbus::Error::MethodError(name, _, _))
                if name.as_str() == "org.freedesktop.systemd1.NoSuchUnit" =>
            {
                continue;
            }
            Err(e) => return Err(e),
        };
        let props = zbus::fdo::PropertiesProxy::builder(&conn)
            .destination(SYSTEMD)?
            .path(path)?
            .build()
            .await?;
        let get = |name: &'static str| props.get(service.clone(), name);
        let restart = String::try_from(get("Restart").await?)?;
        let usec = u64::try_from(get("RestartUSec").await?)?;
        let restarts = get("NRestarts")
            .await
            .ok()
            .and_then(|v| u32::try_from(v).ok());
        found.insert(
            unit.to_string(),
            UnitRestart {
                restart: restart.chars().take(64).collect(),
                restart_sec: Some(if usec % 1_000_000 == 0 {
                    format!("{}s", usec / 1_000_000)
                } else {
                    format!("{}ms", usec / 1000)
                }),
                source: RestartSource::Systemd { restarts },
                unreadable: Vec::new(),
            },
        );
    }
    Ok(found)
}

/// Where the kubelet keeps pods' logs, one directory per pod named
/// `NAMESPACE_NAME_UID`: the pod's identity as the node's root wrote it
/// (never a tenant-controlled string such as a container's HOSTNAME).
pub const POD_LOG_DIR: &str = "/var/log/pods";

/// The namespace and name of each pod in `uids`, from the kubelet's log
/// directories under `dir`; pods without a well-formed one are left out.
pub fn pod_names(
    dir: &Path,
    uids: &std::collections::BTreeSet<&str>,
) -> std::collections::BTreeMap<String, crate::model::PodName> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Default::default();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let mut parts = name.splitn(3, '_');
            let (ns, pod, uid) = (parts.next()?, parts.next()?, parts.next()?);
            (uids.contains(uid) && is_dns_label(ns) && is_dns_subdomain(pod)).then(|| {
                let id = crate::model::PodName {
                    namespace: ns.to_string(),
                    name: pod.to_string(),
                };
                (uid.to_string(), id)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
