//! `gpufree check` in each consumer's words: a person's text, JSON,
//! node-problem-detector (one line of at most 80 characters), the Nagios
//! plugin API (status line and performance data) and Slurm's health check
//! (one short reason). Each consumer's exit codes are chosen where every
//! other is, in `cli/error/mod.rs`, from the [`Format`] and the level.

use crate::model::{CheckOutcome, Condition, Level, Problem, Snapshot};
use crate::safe::fit;
use crate::units::gib;
use serde::Serialize;
use std::io::{self, Write};

/// The formats (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// For a person.
    Text,
    /// One JSON document.
    Json,
    /// node-problem-detector's custom plugin protocol.
    Npd,
    /// The Nagios plugin API (Icinga, Naemon, Sensu).
    Nagios,
    /// A reason for `scontrol update ... state=drain`.
    Slurm,
}

/// node-problem-detector's default limit on a plugin's output.
pub const NPD_MAX: usize = 80;
/// A Slurm drain reason kept short enough that `sinfo -R` shows it whole.
pub const SLURM_MAX: usize = 100;

/// Writes `o` (of `s`, with `leak_min` for Nagios's thresholds) in `format`.
pub fn write<W: Write>(
    w: &mut W,
    format: Format,
    o: &CheckOutcome,
    s: &Snapshot,
    leak_min: u64,
) -> io::Result<()> {
    let o = &worded(o);
    let head = headline(o, s);
    match format {
        Format::Npd => writeln!(w, "{}", fit_bytes(&head, NPD_MAX)),
        Format::Slurm => writeln!(w, "{}", slurm_reason(&head)),
        Format::Nagios => {
            // '|' starts the performance data: never in the text.
            let text = fit(&head, 400).replace('|', "/");
            writeln!(
                w,
                "GPU {} - {text} | {}",
                o.level.as_str(),
                perfdata(s, leak_min)
            )
        }
        Format::Json => {
            let doc = Doc {
                level: o.level,
                message: &head,
                problems: o.problems.iter().map(|p| (p, said(p, s))).collect(),
                pending: &o.pending,
            };
            // The escaping writer: a hostile name in a problem's words is
            // a \uXXXX escape, not a character the guard would rewrite
            // inside the string (which made the document invalid JSON).
            super::write_json(w, &doc)
        }
        Format::Text => {
            writeln!(w, "{}: {}", o.level.as_str(), fit(&head, 400))?;
            for p in o.problems.iter().skip(1) {
                writeln!(w, "  {}: {}", p.level.as_str(), fit(&said(p, s), 400))?;
            }
            Ok(())
        }
    }
}

#[derive(Serialize)]
struct Doc<'a> {
    level: Level,
    message: &'a str,
    #[serde(serialize_with = "problems")]
    problems: Vec<(&'a Problem, String)>,
    pending: &'a [crate::model::Pending],
}

fn problems<S: serde::Serializer>(ps: &[(&Problem, String)], s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct One<'a> {
        #[serde(flatten)]
        problem: &'a Problem,
        message: &'a str,
    }
    let all: Vec<One<'_>> = ps
        .iter()
        .map(|(problem, message)| One { problem, message })
        .collect();
    all.serialize(s)
}

/// `o` with each problem's typed causes (or how stuck it is) in words
/// where it has no `why` of its own.
fn worded(o: &CheckOutcome) -> CheckOutcome {
    let mut o = o.clone();
    for p in o.problems.iter_mut().filter(|p| p.why.is_none()) {
        if let Some(s) = &p.stuck {
            p.why = Some(super::words::check::stuck(s));
        } else if !p.causes.is_empty() {
            p.why = Some(super::words::verdict::reasons_line(&p.causes));
        }
    }
    o
}

/// A drain reason for Slurm: `gpufree: ` and `text`, escaped and cut to
/// [`SLURM_MAX`] bytes (`check --format slurm`, `why --format slurm`).
pub fn slurm_reason(text: &str) -> String {
    fit_bytes(&format!("gpufree: {text}"), SLURM_MAX)
}

/// `s` escaped and cut to at most `max` bytes (what NPD's
/// `max_output_length` and Slurm count), at a character boundary, the cut
/// marked with `...`.
fn fit_bytes(s: &str, max: usize) -> String {
    let e = crate::safe::escape(s);
    if e.len() <= max {
        return e.into_owned();
    }
    let mut end = max.saturating_sub(3);
    while !e.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &e[..end])
}

/// The most important fact first: the worst problem, then how many more;
/// with no problem, that the GPUs are fine (and any leak still within its
/// grace period).
pub fn headline(o: &CheckOutcome, s: &Snapshot) -> String {
    match o.problems.split_first() {
        Some((first, [])) => said(first, s),
        Some((first, rest)) => format!("{}; {} more", said(first, s), rest.len()),
        None => {
            let n = s.gpus.len();
            let mut line = format!("{n} GPU{} fine", if n == 1 { "" } else { "s" });
            for p in &o.pending {
                line.push_str(&format!(
                    "; GPU {}: {} unaccounted for {} s (within the grace period)",
                    p.gpu,
                    gib(p.bytes),
                    p.seconds
                ));
            }
            line
        }
    }
}

/// The processes of `p`: `PID 1 a, 2 b, 3 c and 4 more`.
fn who(p: &Problem) -> String {
    let named: Vec<String> = p
        .processes
        .iter()
        .take(3)
        .map(|(pid, comm)| format!("{pid} {comm}"))
        .collect();
    let more = p.processes.len().saturating_sub(3);
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!("PID {}{tail}", named.join(", "))
}

/// One problem in words.
pub fn said(p: &Problem, snap: &Snapshot) -> String {
    let on = p.gpu.map(|g| format!("GPU {g}: ")).unwrap_or_default();
    let who = || who(p);
    let n = p.processes.len();
    let s = if n == 1 { "" } else { "s" };
    match p.condition {
        Condition::Nvml => format!("{on}NVML: {}", p.why.as_deref().unwrap_or("unavailable")),
        Condition::Stuck if p.level == Level::Critical => {
            format!("{n} holder{s} stuck in the driver (D state): {}", who())
        }
        Condition::Stuck => format!(
            "{n} holder{s} in D state, not stuck in the driver: {} ({})",
            who(),
            p.why.as_deref().unwrap_or("not sampled")
        ),
        Condition::Leak => format!(
            "{on}{} unaccounted for {} min",
            gib(p.bytes),
            p.seconds.unwrap_or(0) / 60
        ),
        Condition::Leftover if p.bytes > 0 => {
            format!(
                "{on}{} held by {n} leftover process{} ({})",
                gib(p.bytes),
                if n == 1 { "" } else { "es" },
                who()
            )
        }
        Condition::Leftover => format!(
            "{on}{n} leftover process{} hold{} device nodes ({})",
            if n == 1 { "" } else { "es" },
            if n == 1 { "s" } else { "" },
            who()
        ),
        Condition::Zombie => format!("{n} zombie holder{s} ({})", who()),
        Condition::Idle => format!(
            "{on}{} held by {n} idle holder{s}, no GPU activity in the window ({})",
            gib(p.bytes),
            who()
        ),
        Condition::Daemon => format!(
            "{on}{} held by {n} protected daemon{s} beyond the idle slack ({})",
            gib(p.bytes),
            who()
        ),
        Condition::Pod => from_finding(p, snap)
            .unwrap_or_else(|| format!("{on}a pod's allocation does not match its holders")),
        Condition::ResetRequired => {
            from_finding(p, snap).unwrap_or_else(|| format!("{on}the driver says it needs a reset"))
        }
        Condition::Xid => xid(p, snap),
        Condition::Unknown => format!(
            "{on}unknown: {}",
            match (&p.why, p.causes.is_empty()) {
                (Some(why), _) => why.clone(),
                (None, false) => super::words::verdict::reasons_line(&p.causes),
                (None, true) => "part of the state could not be seen".into(),
            }
        ),
    }
}

/// The message of the finding a problem comes from (`pod`,
/// `reset-required`).
fn from_finding(p: &Problem, snap: &Snapshot) -> Option<String> {
    snap.findings
        .iter()
        .find(|f| {
            Some(f.kind()) == p.finding && f.gpus.first().copied() == p.gpu && f.bytes == p.bytes
        })
        .map(|f| super::words::words(f).message)
}

/// `GPU 0: Xid 48 (double-bit (uncorrectable) ECC error), 2 reports, the
/// last at ...; NVIDIA's action: reset the GPU`.
fn xid(p: &Problem, snap: &Snapshot) -> String {
    let n = p.xid.unwrap_or(0);
    let reports: Vec<&crate::model::XidReport> = snap
        .gpus
        .iter()
        .filter(|g| Some(g.index) == p.gpu)
        .filter_map(|g| g.driver_evidence.as_ref())
        .flat_map(|e| e.xids.iter().filter(|x| x.xid == n))
        .collect();
    let last = reports
        .last()
        .map(|x| super::words::xid_report(x))
        .unwrap_or_else(|| format!("Xid {n}"));
    let pids = if p.processes.is_empty() {
        String::new()
    } else {
        format!(" ({})", who(p))
    };
    format!(
        "{}{last}{pids}, {} in the kernel log; NVIDIA's action: {}",
        p.gpu.map(|g| format!("GPU {g}: ")).unwrap_or_default(),
        crate::present::next::count(reports.len(), "report", "reports"),
        super::words::xid_action(crate::model::Xid::lookup(n).action)
    )
}

/// Nagios performance data per GPU: used and unaccounted bytes, the
/// unaccounted with `leak_min` as its warning and critical thresholds.
fn perfdata(s: &Snapshot, leak_min: u64) -> String {
    s.gpus
        .iter()
        .filter(|g| g.memory.known)
        .map(|g| {
            let (i, m) = (g.index, &g.memory);
            format!(
                "gpu{i}_used={}B;;;0;{} gpu{i}_unaccounted={}B;{leak_min};{leak_min};0;{}",
                m.used_bytes, m.total_bytes, m.unaccounted_bytes, m.total_bytes
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}
