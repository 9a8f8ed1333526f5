//! The commands that take one snapshot and show it: `status`, `why` and
//! `metrics`.

use super::{files, shown, take_selected, verdict_outcome};
use crate::cli::args::WhyFormat;
use crate::cli::config::Settings;
use crate::cli::error::{Error, Outcome};
use crate::model::ViewCommand;
use crate::present::Printer;
use std::io::Write;

/// `gpufree status`: the table, or the JSON document.
pub(super) fn status(s: &Settings, printer: &Printer) -> Result<Outcome, Error> {
    if let Some(answered) = super::view::ask(s, ViewCommand::Status, printer) {
        return answered;
    }
    let snap = taken(s, &Default::default(), printer)?;
    let mut out = printer.guard(buffered_stdout());
    crate::present::write_status_command(&mut out, &snap, printer)?;
    out.flush()?;
    Ok(Outcome::Done)
}

/// `gpufree why [--pattern REGEX] [--format slurm]`: the findings; the outcome is the
/// verdict's.
pub(super) fn why(s: &Settings, format: WhyFormat, printer: &Printer) -> Result<Outcome, Error> {
    // The view answers in a person's words or JSON, never Slurm's line.
    if s.pattern.is_none() && format == WhyFormat::Text {
        if let Some(answered) = super::view::ask(s, ViewCommand::Why, printer) {
            return answered;
        }
    }
    let pattern = s.pattern.clone();
    let snap = taken(s, &crate::diagnose::Options { pattern }, printer)?;
    let outcome = verdict_outcome(snap.verdict.state);
    let mut out = printer.guard(buffered_stdout());
    let written = match format {
        WhyFormat::Slurm => crate::present::why::write_slurm(&mut out, &snap),
        WhyFormat::Text => crate::present::write_why_command(&mut out, &snap, printer),
    };
    shown(written.and_then(|()| out.flush()), outcome)
}

/// Standard output for one whole document: written in 64 KiB pieces, not
/// a line at a time as Rust's stdout does (a `status --json` of 3,000
/// holders is 60 lines per holder).
fn buffered_stdout() -> std::io::BufWriter<std::io::StdoutLock<'static>> {
    std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock())
}

/// The snapshot `status` and `why` show: collected here, or read back
/// from `--from`'s file.
fn taken(
    s: &Settings,
    opts: &crate::diagnose::Options,
    printer: &Printer,
) -> Result<crate::model::Snapshot, Error> {
    match &s.common.from {
        Some(path) => super::from::take_from(path, s, opts, printer),
        None => take_selected(s, opts),
    }
}

/// `gpufree metrics [--output FILE]`: the Prometheus text once, on stdout
/// or atomically into FILE.
pub(super) fn metrics(
    s: &Settings,
    output: Option<&std::path::Path>,
    label_cmdline: bool,
    printer: &Printer,
) -> Result<Outcome, Error> {
    let started = std::time::Instant::now();
    let taken = crate::units::unix_now();
    let snap = take_selected(s, &Default::default())?;
    let extra = crate::present::metrics::Extra {
        label_cmdline,
        snapshot_timestamp_seconds: Some(taken),
        snapshot_duration_seconds: Some(started.elapsed().as_secs_f64()),
        ..Default::default()
    };
    let text = crate::present::metrics::render_textfile(&snap, &extra);
    match output {
        None => printer
            .guard(std::io::stdout().lock())
            .write_all(text.as_bytes())?,
        // With command lines (which may hold secrets), for the owner only.
        Some(path) => files::write_atomically(
            path,
            text.as_bytes(),
            if label_cmdline { 0o600 } else { 0o644 },
        )
        .map_err(|source| Error::Write {
            target: format!("--output {}", path.display()),
            source,
        })?,
    }
    Ok(Outcome::Done)
}
