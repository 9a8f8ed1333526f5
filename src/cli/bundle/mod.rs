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

use super::args::BundleArgs;
use super::{take_selected_by, Error, Outcome, Settings};
use crate::model::{redact_unit, Bundle, Content, Keep, LeftWhy, Snapshot};
use crate::present::{Printer, PrinterBuilder};
use crate::snapshot::Collector;
use std::io::Write;
use std::path::{Path, PathBuf};

/// `gpufree bundle`: the archive written, its listing printed.
pub(super) fn run_bundle(
    s: &Settings,
    args: &BundleArgs,
    printer: &Printer,
) -> Result<Outcome, Error> {
    let keep = Keep {
        cmdlines: args.with_cmdlines,
        env: args.with_env,
    };
    let (c, mut snap) = take_selected_by(s, &Default::default())?;
    snap.redact(keep);
    crate::pipeline::judge_with(&mut snap, &Default::default());
    let mut b = Bundle::default();
    documents(&mut b, &snap)?;
    host_files(&mut b, &c, &snap, keep, s.privilege.secure.is_some());
    copied(&mut b, args, keep)?;
    b.leave("the journal's audit records", LeftWhy::Journal);
    if !keep.cmdlines {
        b.leave("command lines", LeftWhy::Cmdlines);
    }
    if !keep.env {
        b.leave("environments", LeftWhy::Environments);
    }
    let now = crate::units::unix_now_ms() / 1000;
    let dir = format!("bundle-{}-{}", host_word(&snap), time_word(now));
    let mut manifest = Vec::new();
    b.members.insert(
        0,
        crate::model::Member {
            name: "MANIFEST".into(),
            content: Content::Manifest,
            bytes: Vec::new(),
            cut: None,
        },
    );
    crate::present::bundle::write_manifest(&mut manifest, &dir, &b)?;
    b.members[0].bytes.clone_from(&manifest);
    let gz = archive::tar_gz(&dir, &b, now)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{dir}.tar.gz")));
    let to_stdout = out.as_os_str() == "-";
    if to_stdout && std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        use clap::CommandFactory;
        return Err(Error::Args(super::Cli::command().error(
            clap::error::ErrorKind::ArgumentConflict,
            "bundle --out -: stdout is a terminal; redirect it to a file or a pipe",
        )));
    }
    if to_stdout {
        let mut o = std::io::stdout().lock();
        o.write_all(&gz)?;
        o.flush()?;
    } else {
        archive::write_new(&out, &gz).map_err(|source| Error::Write {
            target: format!("--out {}", out.display()),
            source,
        })?;
    }
    if !printer.quiet() {
        listing(printer, &manifest, (!to_stdout).then_some(out.as_path()))?;
    }
    Ok(Outcome::Done)
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
/// document), status and why as printed, the versions.
fn documents(b: &mut Bundle, snap: &Snapshot) -> Result<(), Error> {
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
    crate::present::bundle::write_versions(&mut versions, snap)?;
    b.add("versions.txt", Content::Versions, versions);
    Ok(())
}

/// What the collector reads of the host for a bundle: the version files
/// and the holders' unit files (not in secure mode), the latter without
/// the lines `keep` does not keep.
fn host_files(b: &mut Bundle, c: &Collector, snap: &Snapshot, keep: Keep, secure: bool) {
    for (path, read) in c.version_files() {
        let source = path.display().to_string();
        let name = if source.ends_with("nvidia/version") {
            "nvidia-driver-version.txt"
        } else {
            "proc-version.txt"
        };
        match read {
            Ok(bytes) => b.add(name, Content::HostFile { source }, bytes),
            Err(why) => b.leave(source, why),
        }
    }
    if secure {
        b.leave("the holders' unit files", LeftWhy::Secure);
        return;
    }
    let (read, left) = c.unit_files(snap);
    b.left_out.extend(left);
    let mut doctor = Vec::new();
    let mut total = 0u64;
    for (unit, (path, got)) in read {
        let source = path.display().to_string();
        let bytes = match got {
            Ok(bytes) if total + bytes.len() as u64 > UNITS_TOTAL_MAX => {
                b.leave(
                    source,
                    LeftWhy::TooLarge {
                        max: UNITS_TOTAL_MAX,
                    },
                );
                continue;
            }
            Ok(bytes) => bytes,
            Err(why) => {
                b.leave(source, why);
                continue;
            }
        };
        total += bytes.len() as u64;
        let text = redact_unit(&String::from_utf8_lossy(&bytes), keep);
        // Doctor reads the copy in the archive: what it quotes of an
        // Exec line is only there when the command lines are kept.
        let problems = crate::doctor::check(&text);
        let plain = PrinterBuilder::new().build();
        let _ = crate::present::doctor::write_doctor(&mut doctor, &path, &problems, &plain);
        let name = format!("units{}", member_path(&path));
        b.add(name, Content::Unit { unit, source }, text.into_bytes());
    }
    if !doctor.is_empty() {
        b.add("doctor.txt", Content::Doctor, doctor);
    }
}

/// The most bytes of unit files one bundle takes, all units together.
const UNITS_TOTAL_MAX: u64 = 8 << 20;

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
        (
            "--audit-log",
            &args.audit_log,
            read::AUDIT_MAX,
            "audit.jsonl",
        ),
        (
            "--recording",
            &args.recording,
            read::RECORDING_MAX,
            "recording.jsonl",
        ),
    ];
    for (flag, path, max, name) in named {
        let Some(path) = path else {
            let what = match flag {
                "--audit-log" => "the audit log's records",
                _ => "a recording",
            };
            let flag = flag.to_string();
            b.leave(what, LeftWhy::NotGiven { flag });
            continue;
        };
        let (bytes, cut) = read::tail(path, max).map_err(|why| Error::BundleInput {
            flag,
            path: path.clone(),
            why,
        })?;
        let mut copy = Vec::new();
        let dropped =
            crate::present::bundle::write_redacted_lines(&mut copy, &bytes, cut.is_some(), keep)?;
        let source = path.display().to_string();
        if dropped > 0 {
            b.leave(source.clone(), LeftWhy::NotJson { lines: dropped });
        }
        let content = match flag {
            "--audit-log" => Content::Audit { source },
            _ => Content::Recording { source },
        };
        b.add(name, content, copy);
        if let Some(m) = b.members.last_mut() {
            m.cut = cut;
        }
    }
    Ok(())
}

/// The host's name as a file name's word: letters, digits, `.`, `-`,
/// `_`; anything else `_`.
fn host_word(snap: &Snapshot) -> String {
    let host = snap.host.as_deref().unwrap_or("host");
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
