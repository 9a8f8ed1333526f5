//! The live view's colours follow the printer's choice.

use super::draw::bars;
use crate::model::{Gpu, Memory, VerdictState};

fn busy_gpu() -> Gpu {
    let mut g = Gpu {
        memory: Memory {
            total_bytes: 100 << 20,
            used_bytes: 60 << 20,
            accounted_bytes: 50 << 20,
            unaccounted_bytes: 10 << 20,
            known: true,
            ..Memory::default()
        },
        ..Gpu::default()
    };
    g.verdict.state = VerdictState::Busy;
    g
}

#[test]
fn bars_are_coloured_only_when_the_printer_says_so() {
    let g = busy_gpu();
    let coloured = bars(20, &g, true);
    assert!(
        coloured[0].spans.iter().any(|s| s.style.fg.is_some()),
        "{coloured:?}"
    );
    let plain = bars(20, &g, false);
    assert!(
        plain[0].spans.iter().all(|s| s.style.fg.is_none()),
        "--no-color and NO_COLOR: no colour at all: {plain:?}"
    );
    // The same text either way.
    let text = |l: &ratatui::text::Line<'_>| l.to_string();
    assert_eq!(text(&coloured[0]), text(&plain[0]));
}
