//! `kill --json`'s document: the snapshot after, the plan and the report,
//! each reason in words (`reason`, `reasons`) beside its typed value
//! (`cause`, `causes`); and the end of a kill as its printer asks
//! ([`write_kill_command`]: the document, the report's text, or nothing).

use super::write_report;
use crate::model::{Held, Plan, PlanEntry, Report, Skipped, Snapshot};
use crate::present::json::SnapshotDoc;
use crate::present::words::target::{held, left, target};
use crate::present::words::verdict::reasons;
use crate::present::Printer;
use serde::Serialize;
use std::io::{self, Write};

/// The document `kill --json` prints: the status after, the plan, the
/// outcome.
#[derive(Serialize)]
struct KillDoc<'a> {
    #[serde(flatten)]
    snapshot: SnapshotDoc<'a>,
    plan: PlanDoc<'a>,
    kill: ReportDoc<'a>,
}

/// The plan: each target and each process left out with its reason in
/// words beside its cause.
#[derive(Debug, Serialize)]
struct PlanDoc<'a> {
    targets: Vec<EntryDoc<'a>>,
    skipped: Vec<SkippedDoc<'a>>,
}

impl<'a> PlanDoc<'a> {
    fn new(plan: &'a Plan) -> PlanDoc<'a> {
        PlanDoc {
            targets: plan.targets.iter().map(EntryDoc::new).collect(),
            skipped: skipped(&plan.skipped),
        }
    }
}

/// A target: SPEC.md's `reason` in words, `cause` typed.
#[derive(Debug, Serialize)]
struct EntryDoc<'a> {
    #[serde(flatten)]
    entry: &'a PlanEntry,
    reason: String,
}

impl<'a> EntryDoc<'a> {
    fn new(entry: &'a PlanEntry) -> EntryDoc<'a> {
        EntryDoc {
            entry,
            reason: target(&entry.why),
        }
    }
}

/// A process left out: SPEC.md's `reason` in words, `cause` typed.
#[derive(Debug, Serialize)]
struct SkippedDoc<'a> {
    #[serde(flatten)]
    skipped: &'a Skipped,
    reason: String,
}

fn skipped(ks: &[Skipped]) -> Vec<SkippedDoc<'_>> {
    let doc = |k| SkippedDoc {
        skipped: k,
        reason: left(&k.why),
    };
    ks.iter().map(doc).collect()
}

/// `kill --json`'s `kill` object: the report, its `reasons` in words
/// beside their typed `causes`, and what it left out.
#[derive(Debug, Serialize)]
pub struct ReportDoc<'a> {
    #[serde(flatten)]
    report: &'a Report,
    reasons: Vec<String>,
    skipped: Vec<SkippedDoc<'a>>,
    still_holding: Vec<String>,
    still_holding_causes: &'a [Held],
}

impl<'a> ReportDoc<'a> {
    /// The document of `r`.
    pub fn new(r: &'a Report) -> ReportDoc<'a> {
        ReportDoc {
            report: r,
            reasons: reasons(&r.reasons),
            skipped: skipped(&r.skipped),
            still_holding: r.still_holding.iter().map(held).collect(),
            still_holding_causes: &r.still_holding,
        }
    }
}

/// A kill that ran, as its end is written: the snapshot its verdict was
/// made from (with `--no-wait`, the plan's), the plan, the report, and
/// whether the release was waited for.
pub struct Killed<'a> {
    /// The snapshot the verdict was made from.
    pub after: &'a Snapshot,
    /// The plan signalled.
    pub plan: &'a Plan,
    /// What the kill did.
    pub report: &'a Report,
    /// The release was waited for (not `--no-wait`).
    pub waited: bool,
}

/// Writes the end of a kill: the JSON document, or (unless quiet) the
/// report's text.
pub fn write_kill_command<W: Write>(
    w: &mut W,
    killed: &Killed<'_>,
    printer: &Printer,
) -> io::Result<()> {
    if printer.json() {
        write_kill_json(w, killed.after, killed.plan, killed.report)
    } else if !printer.quiet() {
        write_report(w, killed.report, killed.waited, printer)
    } else {
        Ok(())
    }
}

/// Writes `kill --json`'s document: the snapshot the verdict was made
/// from, the plan and what the kill did.
pub fn write_kill_json<W: Write>(
    w: &mut W,
    snap: &Snapshot,
    plan: &Plan,
    report: &Report,
) -> io::Result<()> {
    let doc = KillDoc {
        snapshot: SnapshotDoc::new(snap),
        plan: PlanDoc::new(plan),
        kill: ReportDoc::new(report),
    };
    crate::present::write_json(w, &doc)
}

/// Writes the document of a kill that signalled nothing (a dry run, or a
/// refusal): the plan, and what it skipped.
pub fn write_plan_json<W: Write>(w: &mut W, snap: &Snapshot, plan: &Plan) -> io::Result<()> {
    let report = Report {
        skipped: plan.skipped.clone(),
        ..Report::default()
    };
    write_kill_json(w, snap, plan, &report)
}
