//! `gpufree bundle`: one archive for a bug report or an incident review.
//! One collection, its command lines and environments removed unless
//! asked (`model::Keep`) and judged again, written as `status --json`
//! (`why --json` is the same document), `status` and `why` as printed;
//! the versions (gpufree's, the driver's as NVML said, `/proc/version`,
//! the NVIDIA driver's version file) and the holders' unit files, read
//! through the collector; the last records of `--audit-log` and the tail
//! of `--recording`, each line redacted alike; a MANIFEST listing every
//! file and what was left out, also printed.
//!
//! Where it writes: a file created new, mode 0600, never through a link
//! (`paths::create_new`); in secure mode (setuid, file capabilities) only
//! the caller's own stdout (`--out -`, `config.rs` refuses the rest), and
//! no unit file is read for the caller.

mod archive;
mod read;
mod recording;

use super::args::BundleArgs;
use super::{take_selected_by, Error, Outcome, Settings};
use crate::model::{redact_unit, Bundle, Content, Keep, LeftItem, LeftWhy, Snapshot, VersionFile};
use crate::present::words::front::no_gpu;
use crate::present::{Printer, PrinterBuilder};
use crate::proc::bundle::FileRead;
use crate::snapshot::Collector;
use crate::snapshot::SnapshotError;
use read::Copied;
use std::io::Write;
use std::path::{Path, PathBuf};

/// `gpufree bundle`: the archive written, its listing printed. (Its usage
/// errors, `--json` and `--out -` on a terminal, are refused in
/// `config.rs` before anything is collected.)
pub(super) fn run_bundle(
    s: &Settings,
    args: &BundleArgs,
    printer: &Printer,
) -> Result<Outcome, Error> {
    let keep = Keep {
        cmdlines: args.with_cmdlines,
        env: args.with_env,
    };
    let (b, dir, now, collected) = assemble(s, args, keep)?;
    let mut manifest = Vec::new();
    crate::present::bundle::write_manifest(&mut manifest, &dir, &b)?;
    let gz = archive::tar_gz(&dir, &b.with_manifest(manifest.clone()), now)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{dir}.tar.gz")));
    let to_stdout = out.as_os_str() == "-";
    deliver(&out, to_stdout, &gz)?;
    if !printer.quiet() {
        listing(printer, &manifest, (!to_stdout).then_some(out.as_path()))?;
    }
    // Written without a collection: the listing says why; exit 3, as a
    // collection that failed.
    Ok(if collected {
        Outcome::Done
    } else {
        Outcome::Unknown
    })
}

/// What [`assemble`] made: the members but the manifest, the archive's
/// directory name, its time in seconds, and whether a collection is in it.
type Assembled = (Bundle, String, u64, bool);

/// One collection, redacted as `keep` says and judged again, and every
/// member but the manifest; the archive's directory name and its time
/// (the collection's), in seconds. Where there is no GPU to collect, what
/// the caller named still goes in ([`uncollected`]).
fn assemble(s: &Settings, args: &BundleArgs, keep: Keep) -> Result<Assembled, Error> {
    let (c, mut snap) = match take_selected_by(s, &Default::default()) {
        Ok(taken) => taken,
        Err(Error::Snapshot(SnapshotError::NoGpu { nvml, dev_dir })) => {
            return uncollected(args, keep, no_gpu(&nvml, &dev_dir));
        }
        Err(e) => return Err(e),
    };
    snap.redact(keep);
    crate::pipeline::judge_with(&mut snap, &Default::default());
    let mut b = Bundle::default();
    let versions = c.version_files();
    let kernel = versions
        .iter()
        .any(|(f, (_, got))| *f == VersionFile::Kernel && got.is_ok());
    documents(&mut b, &snap, kernel.then(|| VersionFile::Kernel.member()))?;
    version_files(&mut b, versions);
    unit_files(&mut b, &c, &snap, keep, s.privilege.secure.is_some())?;
    copied(&mut b, args, keep)?;
    left_as_asked(&mut b, keep);
    let now = snap.taken_unix_ms.unwrap_or_else(crate::units::unix_now_ms) / 1000;
    let dir = dir_name(snap.host.as_deref(), now);
    Ok((b, dir, now, true))
}

/// No GPU here to collect (no NVIDIA library, no device node: `why`, in
/// words): the archive still holds the files the caller named (a
/// recording, the audit records), for a report from a host whose driver
/// is the trouble, and says the collection is left out and why.
fn uncollected(args: &BundleArgs, keep: Keep, why: String) -> Result<Assembled, Error> {
    let mut b = Bundle::default();
    b.leave(LeftItem::Collection, LeftWhy::Unreadable { error: why });
    copied(&mut b, args, keep)?;
    left_as_asked(&mut b, keep);
    let now = crate::units::unix_now_ms() / 1000;
    let dir = dir_name(Some(&crate::proc::me::hostname()), now);
    Ok((b, dir, now, false))
}

/// What every bundle leaves out unless asked: the journal's records,
/// command lines and environments.
fn left_as_asked(b: &mut Bundle, keep: Keep) {
    b.leave(LeftItem::JournalRecords, LeftWhy::NotRead);
    if !keep.cmdlines {
        b.leave(LeftItem::Cmdlines, LeftWhy::NotAsked);
    }
    if !keep.env {
        b.leave(LeftItem::Environments, LeftWhy::NotAsked);
    }
}

/// Writes the archive to `out`, or to stdout (`--out -`).
fn deliver(out: &Path, to_stdout: bool, gz: &[u8]) -> Result<(), Error> {
    if to_stdout {
        let mut o = std::io::stdout().lock();
        o.write_all(gz)?;
        o.flush()?;
        return Ok(());
    }
    archive::write_new(out, gz).map_err(|source| Error::Write {
        target: format!("--out {}", out.display()),
        source,
    })
}

/// The listing on stdout (stderr when stdout is the archive), and where
/// the archive went.
fn listing(printer: &Printer, manifest: &[u8], out: Option<&Path>) -> std::io::Result<()> {
    let mut w: Box<dyn Write> = match out {
        Some(_) => Box::new(std::io::stdout().lock()),
        None => Box::new(std::io::stderr().lock()),
    };
    let mut g = printer.guard(&mut w);
    g.write_all(manifest)?;
    if let Some(path) = out {
        crate::present::bundle::write_written(&mut g, path)?;
    }
    g.flush()
}

/// The collection's documents: status --json and why --json (one
/// document), status and why as printed, the versions (pointing at
/// `kernel`, the kernel's version file's member, where it was read).
fn documents(b: &mut Bundle, snap: &Snapshot, kernel: Option<&str>) -> Result<(), Error> {
    let json = PrinterBuilder::new().json(true).build();
    let text = PrinterBuilder::new().build();
    let mut doc = Vec::new();
    crate::present::write_status_command(&mut doc, snap, &json)?;
    b.add("status.json", Content::StatusJson, doc.clone());
    b.add("why.json", Content::WhyJson, doc);
    let mut status = Vec::new();
    crate::present::write_status_command(&mut text.guard(&mut status), snap, &text)?;
    b.add("status.txt", Content::StatusText, status);
    let mut why = Vec::new();
    crate::present::write_why_command(&mut text.guard(&mut why), snap, &text)?;
    b.add("why.txt", Content::WhyText, why);
    let mut versions = Vec::new();
    crate::present::bundle::write_versions(&mut versions, snap, kernel)?;
    b.add("versions.txt", Content::Versions, versions);
    Ok(())
}

/// The kernel's and the NVIDIA driver's version files, as the collector
/// read them.
fn version_files(b: &mut Bundle, versions: Vec<(VersionFile, FileRead)>) {
    for (file, (path, read)) in versions {
        let source = path.display().to_string();
        match read {
            Ok(bytes) => b.add(file.member(), Content::HostFile { source }, bytes),
            Err(why) => b.leave(LeftItem::Path(source), why),
        }
    }
}

/// The holders' unit files as the collector reads them (not in secure
/// mode), without the lines `keep` does not keep, and doctor of each.
fn unit_files(
    b: &mut Bundle,
    c: &Collector,
    snap: &Snapshot,
    keep: Keep,
    secure: bool,
) -> Result<(), Error> {
    if secure {
        b.leave(LeftItem::UnitFiles, LeftWhy::Secure);
        return Ok(());
    }
    let (read, left) = c.unit_files(snap);
    b.left_out.extend(left);
    let plain = PrinterBuilder::new().build();
    let mut doctor = Vec::new();
    for (unit, (path, got)) in read {
        let source = path.display().to_string();
        // The total of all units' bytes was bounded while reading.
        let bytes = match got {
            Ok(bytes) => bytes,
            Err(why) => {
                b.leave(LeftItem::Path(source), why);
                continue;
            }
        };
        let mark = crate::present::words::bundle::LEFT_OUT_MARK;
        let text = redact_unit(&String::from_utf8_lossy(&bytes), keep, mark);
        // Doctor reads the copy in the archive: what it quotes of an
        // Exec line is only there when the command lines are kept.
        let problems = crate::doctor::check(&text);
        crate::present::doctor::write_doctor(&mut doctor, &path, &problems, &plain)?;
        let name = format!("units{}", member_path(&path));
        b.add(name, Content::Unit { unit, source }, text.into_bytes());
    }
    if !doctor.is_empty() {
        b.add("doctor.txt", Content::Doctor, doctor);
    }
    Ok(())
}

/// `path` as a member's path below a directory: `/` then its normal
/// components (no root, no `..`).
fn member_path(path: &Path) -> String {
    use std::path::Component;
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(format!("/{}", n.to_string_lossy())),
            _ => None,
        })
        .collect()
}

/// The files the caller named: the audit log's last records and the
/// recording's tail, each line redacted; neither named, said.
fn copied(b: &mut Bundle, args: &BundleArgs, keep: Keep) -> Result<(), Error> {
    let named = [
        (Copied::AuditLog, &args.audit_log),
        (Copied::Recording, &args.recording),
    ];
    for (copied, path) in named {
        let Some(path) = path else {
            b.leave(copied.left(), LeftWhy::NotAsked);
            continue;
        };
        let (bytes, cut) = read::tail(path, copied.max()).map_err(|why| Error::BundleInput {
            flag: copied.flag(),
            path: path.clone(),
            why,
        })?;
        let mut copy = Vec::new();
        let source = path.display().to_string();
        // A recording is redacted by its records' types, so that its copy
        // replays; any other file's lines by the allowlist.
        let lines = read::whole_lines(&bytes, cut.is_some());
        let typed = copied == Copied::Recording && crate::model::is_recording(lines);
        let left = if typed && !(keep.cmdlines && keep.env) {
            let records = recording::write_redacted_recording(&mut copy, lines, keep)?;
            LeftWhy::NotReplayable { records }
        } else {
            let lines = crate::present::bundle::write_redacted_lines(&mut copy, lines, keep)?;
            LeftWhy::NotJson { lines }
        };
        if matches!(
            left,
            LeftWhy::NotReplayable { records: 1.. } | LeftWhy::NotJson { lines: 1.. }
        ) {
            b.leave(LeftItem::Path(source.clone()), left);
        }
        b.add_tail(copied.member(), copied.content(source), copy, cut);
    }
    Ok(())
}

/// The archive's directory: `bundle-HOST-TIME`, of the host named (where
/// one is) at `secs`.
fn dir_name(host: Option<&str>, secs: u64) -> String {
    format!("bundle-{}-{}", host_word(host), time_word(secs))
}

/// The host's name as a file name's word: letters, digits, `.`, `-`,
/// `_`; anything else `_`.
fn host_word(host: Option<&str>) -> String {
    let host = host.unwrap_or("host");
    let w: String = host
        .chars()
        .take(64)
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '-' | '_' => c,
            _ => '_',
        })
        .collect();
    match w.trim_start_matches('.') {
        "" => "host".into(),
        t => t.into(),
    }
}

/// `secs` as `YYYYMMDDTHHMMSSZ`.
fn time_word(secs: u64) -> String {
    let c = crate::units::civil(secs);
    let (h, m, s) = c.hms;
    format!(
        "{:04}{:02}{:02}T{h:02}{m:02}{s:02}Z",
        c.year, c.month, c.day
    )
}
