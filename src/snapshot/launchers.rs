//! Who started the holders and who restarts them: the argv of their
//! parents that hold nothing (their launchers), their system units'
//! restart policy and their pods' names.

use crate::model::{OwnerKind, Snapshot, UnitUnread};
use crate::proc::{parse, scan};
use crate::snapshot::config::Config;
use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::OwnedFd;

/// Reads the command lines of the holders' parents that hold nothing
/// (their launchers), each only while it is still the process the scan saw.
pub(super) fn launchers(proc_fd: &OwnedFd, snap: &mut Snapshot) {
    let ppids: BTreeSet<u32> = snap.processes.iter().map(|p| p.ppid).collect();
    for ppid in ppids {
        let Some(kin) = snap.parents.get_mut(&ppid) else {
            continue;
        };
        let Ok(dir) = scan::open_dir(proc_fd, &ppid.to_string()) else {
            continue;
        };
        let cmdline = scan::read_at(&dir, "cmdline").map(|b| parse::parse_cmdline(&b));
        if let (Ok(cmdline), Ok((start, _))) = (cmdline, scan::start_time_now(&dir)) {
            if start == kin.start_time_ticks {
                kin.cmdline = cmdline;
            }
        }
    }
}

/// Reads what may restart the holders: their system units' restart
/// policy (systemd over D-Bus where it runs, one connection for all; the
/// unit files otherwise, or for a unit systemd has not loaded) and their
/// pods' names (one directory listing).
pub(super) fn restarters(cfg: &Config, snap: &mut Snapshot) {
    let mut units = BTreeSet::new();
    let mut pods = BTreeSet::new();
    for p in &snap.processes {
        if p.owner.kind == OwnerKind::K8sPod {
            pods.insert(p.owner.id.as_str());
        }
        units.extend(p.owner.system_unit());
    }
    let units: Vec<&str> = units.into_iter().collect();
    let (mut from_bus, bus_error) = match cfg.systemd_bus.as_deref().filter(|_| !units.is_empty()) {
        Some(address) => {
            match crate::proc::restart::systemd_restarts(address, &units, cfg.read_timeout) {
                Ok(found) => (found, None),
                Err(why) => (
                    BTreeMap::new(),
                    Some(UnitUnread::Bus {
                        address: address.to_string(),
                        why,
                    }),
                ),
            }
        }
        None => (BTreeMap::new(), None),
    };
    let mut known = BTreeMap::new();
    for unit in units {
        let restart = from_bus.remove(unit).or_else(|| {
            let mut r = crate::proc::restart::unit_restart(&cfg.unit_dirs, unit)?;
            r.unreadable.extend(bus_error.clone());
            Some(r)
        });
        if let Some(r) = restart {
            known.insert(unit.to_string(), r);
        }
    }
    snap.units = known;
    if !pods.is_empty() {
        snap.pods = crate::proc::restart::pod_names(&cfg.pod_log_dir, &pods);
    }
}
