//! The `gpufree status` table: per GPU the memory split (used, accounted to
//! visible processes, unaccounted), then the holders grouped by GPU, then
//! the findings with their next commands.

use super::{flags, Paint};
use crate::diagnose::gpu_list;
use crate::model::{DeviceUse, Process, Severity, Snapshot, Via};
use crate::units::mib;
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
    if p.owner.name.is_empty() {
        "-".into()
    } else {
        p.owner.name.clone()
    }
}

/// `s` padded with spaces to `width` characters, on the left when
/// `right` aligns it right. Unlike a format width, which panics above
/// 65,535, any width works (a field can be that long).
fn pad(s: &str, width: usize, right: bool) -> String {
    let fill = " ".repeat(width.saturating_sub(s.chars().count()));
    if right {
        fill + s
    } else {
        format!("{s}{fill}")
    }
}

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
        p.user.clone(),
        p.comm.clone(),
        memory,
        if nodes.is_empty() {
            "-".into()
        } else {
            nodes.join(" ")
        },
        owner(p),
        flags(p),
    ]
}

fn write_rows<W: Write>(
    w: &mut W,
    paint: &Paint,
    header: [&str; 7],
    rows: &[([String; 7], &Process)],
) -> io::Result<()> {
    let mut width = header.map(str::len);
    for (r, _) in rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let line = |cells: [&str; 7]| {
        let mut s = String::from("  ");
        for (i, c) in cells.iter().enumerate() {
            if i == 6 {
                s.push_str(c);
            } else {
                s.push_str(&pad(c, width[i], false));
                s.push_str("  ");
            }
        }
        s.trim_end().to_string()
    };
    writeln!(w, "{}", paint.dim(&line(header)))?;
    for (r, p) in rows {
        let cells = [&*r[0], &*r[1], &*r[2], &*r[3], &*r[4], &*r[5], &*r[6]];
        let text = line(cells);
        writeln!(
            w,
            "{}",
            if p.renamed || p.orphaned {
                paint.warn(&text)
            } else {
                text
            }
        )?;
        let joined = p.cmdline_joined();
        if !joined.is_empty() && joined != p.comm {
            writeln!(w, "      {} {}", paint.dim("cmdline:"), joined)?;
        }
        if p.renamed {
            writeln!(
                w,
                "      {} {}",
                paint.dim("exe:"),
                p.exe.as_deref().unwrap_or("?")
            )?;
        }
    }
    Ok(())
}

const HEADER: [&str; 7] = ["PID", "USER", "COMM", "MEMORY", "DEVICES", "OWNER", "FLAGS"];

/// Writes the status table of `s`.
pub fn write_status<W: Write>(w: &mut W, s: &Snapshot, paint: &Paint) -> io::Result<()> {
    if !s.nvml.available {
        writeln!(
            w,
            "{} {}; showing device-node holders only",
            paint.warn("NVML unavailable:"),
            s.nvml.error.as_deref().unwrap_or("unknown reason")
        )?;
    }
    // GPUs.
    let gpu_rows: Vec<[String; 6]> = s
        .gpus
        .iter()
        .map(|g| {
            let m = &g.memory;
            let state = g.verdict.state.as_str().to_string();
            if m.known {
                [
                    g.index.to_string(),
                    g.name.clone(),
                    format!("{} / {}", mib(m.used_bytes), mib(m.total_bytes)),
                    mib(m.accounted_bytes),
                    mib(m.unaccounted_bytes),
                    state,
                ]
            } else {
                [
                    g.index.to_string(),
                    g.name.clone(),
                    "unknown".into(),
                    "-".into(),
                    "-".into(),
                    state,
                ]
            }
        })
        .collect();
    let head = [
        "GPU",
        "NAME",
        "USED / TOTAL",
        "ACCOUNTED",
        "UNACCOUNTED",
        "VERDICT",
    ];
    let mut width = head.map(str::len);
    for r in &gpu_rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let fmt = |c: [&str; 6]| {
        format!(
            "{}  {}  {}  {}  {}  {}",
            pad(c[0], width[0], false),
            pad(c[1], width[1], false),
            pad(c[2], width[2], true),
            pad(c[3], width[3], true),
            pad(c[4], width[4], true),
            c[5],
        )
    };
    writeln!(w, "{}", paint.bold(&fmt(head)))?;
    for (r, g) in gpu_rows.iter().zip(&s.gpus) {
        let text = fmt([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]]);
        writeln!(
            w,
            "{}",
            if g.verdict.state != crate::model::VerdictState::Free || g.memory.unaccounted_bytes > 0
            {
                paint.warn(&text)
            } else {
                text
            }
        )?;
    }
    for u in &s.unavailable {
        let gpu = u.gpu.map(|g| format!("GPU {g} ")).unwrap_or_default();
        writeln!(
            w,
            "{}",
            paint.dim(&format!("{gpu}{}: unavailable: {}", u.what, u.why))
        )?;
    }

    // Holders, grouped by GPU.
    for g in &s.gpus {
        let holders: Vec<&Process> = s
            .processes
            .iter()
            .filter(|p| p.touches_gpu(g.index))
            .collect();
        if holders.is_empty() {
            continue;
        }
        let with_memory = holders
            .iter()
            .filter(|p| p.gpu_memory.iter().any(|m| m.gpu == g.index))
            .count();
        writeln!(w)?;
        writeln!(
            w,
            "{}",
            paint.bold(&format!(
                "GPU {}: {} holding memory, {} holding its device node",
                g.index,
                with_memory,
                holders.len() - with_memory
            ))
        )?;
        let rows: Vec<([String; 7], &Process)> = holders
            .iter()
            .map(|p| (row(p, Some(g.index)), *p))
            .collect();
        write_rows(w, paint, HEADER, &rows)?;
    }
    let shared: Vec<&Process> = s
        .processes
        .iter()
        .filter(|p| s.gpus.iter().all(|g| !p.touches_gpu(g.index)))
        .collect();
    if !shared.is_empty() {
        writeln!(w)?;
        writeln!(
            w,
            "{}",
            paint.bold("Shared driver nodes only (nvidiactl, nvidia-uvm...):")
        )?;
        let rows: Vec<([String; 7], &Process)> =
            shared.iter().map(|p| (row(p, None), *p)).collect();
        write_rows(w, paint, HEADER, &rows)?;
    }
    if !s.visibility.nvml_pids_not_visible.is_empty() {
        let pids: Vec<String> = s
            .visibility
            .nvml_pids_not_visible
            .iter()
            .map(u32::to_string)
            .collect();
        writeln!(w)?;
        writeln!(
            w,
            "{} {}",
            paint.warn("NVML PIDs not in this /proc:"),
            pids.join(", ")
        )?;
    }

    // Findings.
    if !s.findings.is_empty() {
        writeln!(w)?;
        for f in &s.findings {
            let tag = match f.severity {
                Severity::Error => paint.error("error"),
                Severity::Warning => paint.warn("warn "),
                Severity::Info => paint.dim("info "),
            };
            writeln!(w, "{tag} {}", f.message)?;
            if !f.next.is_empty() {
                writeln!(w, "      {} {}", paint.dim("next:"), f.next)?;
            }
        }
    }
    let v = &s.visibility;
    writeln!(
        w,
        "{}",
        paint.dim(&format!(
            "scanned {} processes{}; GPUs {}; device dir {}",
            v.processes_scanned,
            if v.processes_unreadable > 0 {
                format!(", {} unreadable", v.processes_unreadable)
            } else {
                String::new()
            },
            if s.gpus.is_empty() {
                "none".into()
            } else {
                gpu_list(&s.gpus.iter().map(|g| g.index).collect::<Vec<_>>())
            },
            s.dev_dir
        ))
    )?;
    Ok(())
}
