//! `gpufree doctor` as it prints: a unit file's problems as
//! `FILE:LINE: severity: message` lines, each with its fix, or their JSON
//! document.

use super::words::doctor::{fix, message};
use super::{write_json, Printer};
use crate::doctor::Problem;
use crate::safe::{escape, fit, MESSAGE_MAX};
use serde::Serialize;
use std::io::{self, Write};
use std::path::Path;

/// One problem in words, as `doctor` prints it and its JSON document's
/// `problems` hold it: every word of the unit escaped, one line.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ProblemDoc {
    /// 1-based line number.
    pub line: usize,
    /// `error` (the unit misbehaves) or `warning` (likely to).
    pub severity: &'static str,
    /// What is wrong.
    pub message: String,
    /// What to write instead.
    pub fix: String,
}

/// The problems in words.
pub fn worded(problems: &[Problem]) -> Vec<ProblemDoc> {
    problems
        .iter()
        .map(|p| ProblemDoc {
            line: p.line,
            severity: p.severity,
            message: escape(&message(&p.mistake)).into_owned(),
            fix: escape(&fix(&p.mistake)).into_owned(),
        })
        .collect()
}

/// Writes the problems `unit` has: the JSON document (`unit`,
/// `problems`), or a line each, with its fix unless quiet.
pub fn write_doctor<W: Write>(
    w: &mut W,
    unit: &Path,
    problems: &[Problem],
    printer: &Printer,
) -> io::Result<()> {
    let problems = worded(problems);
    if printer.json() {
        return write_json(
            w,
            &serde_json::json!({ "unit": unit, "problems": problems }),
        );
    }
    let shown = escape(&unit.to_string_lossy()).into_owned();
    if problems.is_empty() && !printer.quiet() {
        writeln!(w, "{shown}: no problems found")?;
    }
    for p in &problems {
        let sev = if p.severity == "error" {
            printer.error("error")
        } else {
            printer.warn("warning")
        };
        writeln!(
            w,
            "{shown}:{}: {sev}: {}",
            p.line,
            fit(&p.message, MESSAGE_MAX)
        )?;
        if !printer.quiet() {
            writeln!(
                w,
                "    {} {}",
                printer.dim("fix:"),
                fit(&p.fix, MESSAGE_MAX)
            )?;
        }
    }
    Ok(())
}
