//! The GPU table of `status`: a row per GPU and per MIG device under it.

use super::Printer;
use crate::model::{Gpu, Memory, Snapshot, VerdictState};
use crate::safe::{fit, pad, pad_left};
use crate::units::mib;
use std::io::{self, Write};

/// NVML names are at most 96 bytes (NVML_DEVICE_NAME_V2_BUFFER_SIZE).
const NAME_MAX: usize = 96;

/// The rows of `g` and then of each of its MIG devices (`0:1`, indented),
/// each with whether it stands out (not free, or memory unaccounted).
fn rows_of(g: &Gpu) -> Vec<([String; 6], bool)> {
    let striking =
        |state: VerdictState, m: &Memory| state != VerdictState::Free || m.unaccounted_bytes > 0;
    let drm = g.vendor != crate::model::Vendor::Nvidia;
    let own = gpu_row(
        &g.index.to_string(),
        &g.name,
        &g.memory,
        g.verdict.state,
        drm,
    );
    let mut rows = vec![(own, striking(g.verdict.state, &g.memory))];
    for m in &g.mig_devices {
        let label = format!(" {}", crate::model::mig_label(g.index, m.index));
        let row = gpu_row(&label, &m.name, &m.memory, m.verdict.state, false);
        rows.push((row, striking(m.verdict.state, &m.memory)));
    }
    rows
}

/// One row's cells (a GPU's or a MIG device's): label, name, used /
/// total, accounted, unaccounted, verdict. A DRM GPU whose driver
/// publishes no use (`drm`: i915, xe) still says its total where sysfs
/// does and what its holders' clients account for, as JSON does; only
/// the use and what is unaccounted are unknown.
fn gpu_row(label: &str, name: &str, m: &Memory, verdict: VerdictState, drm: bool) -> [String; 6] {
    let (used, accounted, unaccounted) = if m.known {
        (
            format!("{} / {}", mib(m.used_bytes), mib(m.total_bytes)),
            mib(m.accounted_bytes),
            mib(m.unaccounted_bytes),
        )
    } else if drm {
        let used = if m.total_bytes > 0 {
            format!("unknown / {}", mib(m.total_bytes))
        } else {
            "unknown".into()
        };
        (used, mib(m.accounted_bytes), "unknown".into())
    } else {
        ("unknown".into(), "-".into(), "-".into())
    };
    [
        label.to_string(),
        fit(name, NAME_MAX),
        used,
        accounted,
        unaccounted,
        verdict.as_str().to_string(),
    ]
}

const GPU_HEADER: [&str; 6] = [
    "GPU",
    "NAME",
    "USED / TOTAL",
    "ACCOUNTED",
    "UNACCOUNTED",
    "VERDICT",
];

/// The GPU table: one row per GPU (and per MIG device under it), numbers
/// aligned right; a row that is not free or has unaccounted memory stands
/// out.
pub(super) fn write_gpus<W: Write>(w: &mut W, s: &Snapshot, printer: &Printer) -> io::Result<()> {
    let rows: Vec<([String; 6], bool)> = s.gpus.iter().flat_map(rows_of).collect();
    let mut width = GPU_HEADER.map(str::len);
    for (r, _) in &rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(crate::safe::width(c));
        }
    }
    if let Some(limit) = printer.width() {
        // Names give way first, as nvidia-smi's do: `NVIDIA H100 80G…`.
        let over = (width.iter().sum::<usize>() + 2 * 5).saturating_sub(limit);
        width[1] -= over.min(width[1].saturating_sub(GPU_HEADER[1].len().max(12)));
    }
    let fmt = |c: [&str; 6]| {
        format!(
            "{}  {}  {}  {}  {}  {}",
            pad(c[0], width[0]),
            pad(&fit(c[1], width[1]), width[1]),
            pad_left(c[2], width[2]),
            pad_left(c[3], width[3]),
            pad_left(c[4], width[4]),
            c[5],
        )
    };
    writeln!(w, "{}", printer.bold(&fmt(GPU_HEADER)))?;
    for (r, striking) in &rows {
        let text = fmt([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]]);
        writeln!(w, "{}", if *striking { printer.warn(&text) } else { text })?;
    }
    Ok(())
}
