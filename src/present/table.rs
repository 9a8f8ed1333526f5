//! The `gpufree status` table: per GPU the memory split (used, accounted to
//! visible processes, unaccounted), then the holders grouped by GPU, then
//! the findings with their next commands.

use super::columns::{command, exes, narrow, wrap, write_wrapped};
use super::words::gpu_list;
use super::{flags, Printer};
use crate::model::{DeviceUse, Lookup, MigListings, MpsGpu, MpsRole, Process, Severity};
use crate::model::{Snapshot, Via};
use crate::safe::{escape, fit, pad, MESSAGE_MAX, TEXT_MAX};
use crate::units::mib;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};

fn via(d: &DeviceUse) -> String {
    let name = d.path.rsplit('/').next().unwrap_or(&d.path);
    let how: Vec<&str> = d
        .via
        .iter()
        .map(|v| match v {
            Via::Fd => "fd",
            Via::Mmap => "mmap",
        })
        .collect();
    format!("{name}:{}", how.join("+"))
}

fn owner(p: &Process) -> String {
    let owner = p.owner.described();
    if owner.is_empty() {
        "-".into()
    } else {
        fit(&owner, OWNER_MAX)
    }
}

/// Column limits: a field longer than this is cut with `…`.
pub(crate) const USER_MAX: usize = 16;
pub(crate) const COMM_MAX: usize = 24;
const DEVICES_MAX: usize = 48;
const OWNER_MAX: usize = 48;

/// One holder row's cells.
fn row(p: &Process, gpu: Option<u32>) -> [String; 7] {
    let memory = match gpu {
        Some(g) => p
            .gpu_memory
            .iter()
            .find(|m| m.gpu == g)
            .map(|m| m.used_bytes.map_or("n/a".into(), mib))
            .unwrap_or_else(|| "-".into()),
        None => "-".into(),
    };
    let nodes: Vec<String> = p
        .devices
        .iter()
        .filter(|d| d.gpu.is_none() || d.gpu == gpu)
        .map(via)
        .collect();
    [
        p.pid.to_string(),
        fit(&p.user, USER_MAX),
        fit(&p.comm, COMM_MAX),
        memory,
        if nodes.is_empty() {
            "-".into()
        } else {
            fit(&nodes.join(" "), DEVICES_MAX)
        },
        owner(p),
        flags(p),
    ]
}

/// What the rows' details read, indexed once per table: the holders, the
/// GPUs under MPS and who NVML lists on each MIG device.
struct Rows<'a> {
    look: Lookup<'a>,
    mps: Vec<MpsGpu>,
    mig: MigListings,
    /// The renamed holders of each executable, to say a shared one once.
    exes: BTreeMap<String, Vec<u32>>,
    /// The executables already said.
    said: RefCell<BTreeSet<String>>,
}

fn write_rows<W: Write>(
    w: &mut W,
    at: &Rows<'_>,
    printer: &Printer,
    header: [&str; 7],
    rows: &[([String; 7], &Process)],
) -> io::Result<()> {
    let mut width = header.map(str::len);
    for (r, _) in rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(crate::safe::width(c));
        }
    }
    narrow(&mut width, printer.width());
    let line = |cells: [&str; 7]| {
        let mut s = String::from("  ");
        for (i, c) in cells.iter().enumerate() {
            if i == 6 {
                s.push_str(c);
            } else {
                s.push_str(&pad(&fit(c, width[i]), width[i]));
                s.push_str("  ");
            }
        }
        fit(s.trim_end(), printer.room(0, 20))
    };
    writeln!(w, "{}", printer.dim(&line(header)))?;
    for (r, p) in rows {
        let cells = [&*r[0], &*r[1], &*r[2], &*r[3], &*r[4], &*r[5], &*r[6]];
        let text = line(cells);
        writeln!(
            w,
            "{}",
            if p.renamed || p.orphaned {
                printer.warn(&text)
            } else {
                text
            }
        )?;
        write_details(w, at, p, printer)?;
    }
    Ok(())
}

/// A holder's lines under its row: its command line (when it is not its
/// name), its executable (renamed), its MPS role, MIG devices and DRM
/// clients.
fn write_details<W: Write>(
    w: &mut W,
    at: &Rows<'_>,
    p: &Process,
    printer: &Printer,
) -> io::Result<()> {
    let s = at.look.snapshot();
    let joined = p.cmdline_joined();
    if !joined.is_empty() && joined != p.comm {
        let room = printer.room(15, 20).min(TEXT_MAX);
        writeln!(
            w,
            "      {} {}",
            printer.dim("cmdline:"),
            command(&joined, room)
        )?;
    }
    if p.renamed {
        write_exe(w, at, p, printer)?;
    }
    if let Some(role) = mps_role(at, p) {
        writeln!(w, "      {} {role}", printer.dim("mps:"))?;
    }
    if let Some(on) = super::mig::held(s, &at.mig, p) {
        writeln!(w, "      {} {}", printer.dim("mig:"), fit(&on, TEXT_MAX))?;
    }
    if let Some(clients) = super::drm::shared(p) {
        writeln!(
            w,
            "      {} {}",
            printer.dim("drm:"),
            fit(&clients, TEXT_MAX)
        )?;
    }
    Ok(())
}

/// A renamed holder's executable; one that several renamed holders share
/// is said once, under the first of them, with their PIDs.
fn write_exe<W: Write>(w: &mut W, at: &Rows<'_>, p: &Process, printer: &Printer) -> io::Result<()> {
    let exe = p.exe.as_deref().unwrap_or("?");
    let pids = at.exes.get(exe).map_or(&[][..], Vec::as_slice);
    let line = if pids.len() > 1 {
        if !at.said.borrow_mut().insert(exe.to_string()) {
            return Ok(());
        }
        let renamed: usize = at.exes.values().map(Vec::len).sum();
        if pids.len() == renamed {
            format!("{exe} (all {renamed} renamed holders)")
        } else {
            let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
            format!("{exe} (renamed holders {})", pids.join(", "))
        }
    } else {
        exe.to_string()
    };
    let room = printer.room(11, 20).min(TEXT_MAX);
    writeln!(w, "      {} {}", printer.dim("exe:"), fit(&line, room))
}

/// What a holder is to NVIDIA MPS, in words: a client of which server,
/// the server of which GPUs, or the control daemon.
fn mps_role(at: &Rows<'_>, p: &Process) -> Option<String> {
    let role = at.look.mps_role(p)?;
    let gpus = &at.mps;
    let lines: Vec<String> = match role {
        MpsRole::Control => vec![
            "control daemon: protected; `echo quit | nvidia-cuda-mps-control` stops MPS once no client is left".into(),
        ],
        MpsRole::Server => gpus
            .iter()
            .filter(|m| m.servers.contains(&p.pid))
            .map(|m| match m.clients.len() {
                0 => format!("server of GPU {}: no client; protected", m.gpu),
                n => format!(
                    "server of GPU {}: holds the memory of its {n} {} ({}); protected",
                    m.gpu,
                    if n == 1 { "client" } else { "clients" },
                    mib(m.client_bytes)
                ),
            })
            .collect(),
        MpsRole::Client => gpus
            .iter()
            .filter(|m| m.clients.binary_search(&p.pid).is_ok())
            .map(|m| match m.server() {
                Some(server) => format!("client of server {server} on GPU {}", m.gpu),
                None => format!("client on GPU {} (its server is not visible here)", m.gpu),
            })
            .collect(),
    };
    Some(lines.join("; ")).filter(|l| !l.is_empty())
}

const HEADER: [&str; 7] = ["PID", "USER", "COMM", "MEMORY", "DEVICES", "OWNER", "FLAGS"];

/// Writes the status table of `s`; quiet (`status -q`), without its
/// findings and the footer line (what was scanned).
pub fn write_status<W: Write>(w: &mut W, s: &Snapshot, printer: &Printer) -> io::Result<()> {
    if s.misses_nvml() {
        writeln!(
            w,
            "{} {}; showing device-node holders only",
            printer.warn("NVML unavailable:"),
            fit(
                &s.nvml
                    .error
                    .as_ref()
                    .map_or_else(|| "unknown reason".into(), ToString::to_string),
                TEXT_MAX
            )
        )?;
    }
    super::gpus::write_gpus(w, s, printer)?;
    write_unavailable(w, s, printer)?;
    let at = Rows {
        look: Lookup::new(s),
        mps: s.mps(),
        mig: MigListings::of(&s.gpus),
        exes: exes(s),
        said: RefCell::default(),
    };
    for g in &s.gpus {
        write_holders_of(w, &at, g.index, printer)?;
    }
    write_shared_only(w, &at, printer)?;
    write_not_visible(w, s, printer)?;
    if !printer.quiet() {
        write_findings(w, s, printer)?;
        write_footer(w, s, printer)?;
    }
    Ok(())
}

/// The NVML calls that failed, each with why.
fn write_unavailable<W: Write>(w: &mut W, s: &Snapshot, printer: &Printer) -> io::Result<()> {
    for u in &s.unavailable {
        let gpu = u.gpu.map(|g| format!("GPU {g} ")).unwrap_or_default();
        writeln!(
            w,
            "{}",
            printer.dim(&format!(
                "{gpu}{}: unavailable: {}",
                fit(&super::words::unavailable::what(u), TEXT_MAX),
                fit(&super::words::unavailable::why(u), TEXT_MAX)
            ))
        )?;
    }
    Ok(())
}

/// The holders of GPU `gpu` under a heading that counts them; nothing
/// when it has none.
fn write_holders_of<W: Write>(
    w: &mut W,
    at: &Rows<'_>,
    gpu: u32,
    printer: &Printer,
) -> io::Result<()> {
    let s = at.look.snapshot();
    let holders: Vec<&Process> = s.processes.iter().filter(|p| p.touches_gpu(gpu)).collect();
    if holders.is_empty() {
        return Ok(());
    }
    let with_memory = holders
        .iter()
        .filter(|p| p.gpu_memory.iter().any(|m| m.gpu == gpu))
        .count();
    writeln!(w)?;
    writeln!(
        w,
        "{}",
        printer.bold(&format!(
            "GPU {gpu}: {with_memory} holding memory, {} holding its device node",
            holders.len() - with_memory
        ))
    )?;
    let rows: Vec<([String; 7], &Process)> =
        holders.iter().map(|p| (row(p, Some(gpu)), *p)).collect();
    write_rows(w, at, printer, HEADER, &rows)
}

/// The holders of shared driver nodes only (none of the GPUs).
fn write_shared_only<W: Write>(w: &mut W, at: &Rows<'_>, printer: &Printer) -> io::Result<()> {
    let s = at.look.snapshot();
    let shared: Vec<&Process> = s
        .processes
        .iter()
        .filter(|p| s.gpus.iter().all(|g| !p.touches_gpu(g.index)))
        .collect();
    if shared.is_empty() {
        return Ok(());
    }
    writeln!(w)?;
    writeln!(
        w,
        "{}",
        printer.bold(&format!(
            "Shared driver nodes only (nvidiactl, nvidia-uvm...): {} holding no GPU's own node",
            shared.len()
        ))
    )?;
    let rows: Vec<([String; 7], &Process)> = shared.iter().map(|p| (row(p, None), *p)).collect();
    write_rows(w, at, printer, HEADER, &rows)
}

/// The PIDs NVML lists that this /proc does not have.
fn write_not_visible<W: Write>(w: &mut W, s: &Snapshot, printer: &Printer) -> io::Result<()> {
    let pids = &s.visibility.nvml_pids_not_visible;
    if pids.is_empty() {
        return Ok(());
    }
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    writeln!(w)?;
    writeln!(
        w,
        "{} {}",
        printer.warn("NVML PIDs not in this /proc:"),
        pids.join(", ")
    )
}

/// Each finding's message and next command (`why` gives the evidence).
fn write_findings<W: Write>(w: &mut W, s: &Snapshot, printer: &Printer) -> io::Result<()> {
    if s.findings.is_empty() {
        return Ok(());
    }
    writeln!(w)?;
    for f in &s.findings {
        let tag = match f.severity {
            Severity::Error => printer.error("error"),
            Severity::Warning => printer.warn("warn "),
            Severity::Info => printer.dim("info "),
        };
        let said = super::words::words(f);
        write_wrapped(w, &tag, 6, &fit(&said.message, MESSAGE_MAX), printer)?;
        if !said.next.is_empty() {
            writeln!(w, "      {} {}", printer.dim("next:"), escape(&said.next))?;
        }
    }
    Ok(())
}

/// What was scanned: processes, unreadable ones, GPUs, the device dir.
fn write_footer<W: Write>(w: &mut W, s: &Snapshot, printer: &Printer) -> io::Result<()> {
    let v = &s.visibility;
    let mut text = format!("scanned {} processes", v.processes_scanned);
    if v.processes_unreadable > 0 {
        text.push_str(&format!(", {} unreadable", v.processes_unreadable));
    }
    let gpus: Vec<u32> = s.gpus.iter().map(|g| g.index).collect();
    let gpus = if gpus.is_empty() {
        "none".into()
    } else {
        gpu_list(&gpus)
    };
    text.push_str(&format!("; GPUs {gpus}; device dir {}", escape(&s.dev_dir)));
    let room = printer.room(0, 20);
    for line in wrap(&text, room, room) {
        writeln!(w, "{}", printer.dim(&line))?;
    }
    Ok(())
}
