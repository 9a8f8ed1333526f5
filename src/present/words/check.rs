//! The words of `check`'s typed reasons: how stuck a holder in D is
//! ([`Stuck`], a `stuck` problem's `why`).

use crate::model::Stuck;

/// `12.3 s`: a window's span.
fn over(span_ms: u64) -> String {
    format!("{:.1} s", span_ms as f64 / 1000.0)
}

/// `symbol [module]`, or the symbol alone.
fn frame(symbol: &str, module: Option<&str>) -> String {
    match module {
        Some(m) => format!("{symbol} [{m}]"),
        None => symbol.to_string(),
    }
}

/// How stuck a holder in D is, in words.
pub fn stuck(s: &Stuck) -> String {
    match s {
        Stuck::NotSampled => "in D in one look, not sampled again".into(),
        Stuck::Partly {
            in_d,
            samples,
            span_ms,
            exited,
            unread,
        } => {
            let then = if *exited {
                ", then exited".to_string()
            } else if *unread > 0 {
                format!(" ({unread} unreadable)")
            } else {
                String::new()
            };
            format!(
                "in D in {in_d} of {samples} samples over {}{then}",
                over(*span_ms)
            )
        }
        Stuck::Elsewhere { symbol, module } => format!(
            "waits in {}, not in the GPU driver",
            frame(symbol, module.as_deref())
        ),
        Stuck::Driver {
            span_ms,
            symbol,
            module,
        } => format!(
            "in D for {}, in the GPU driver: {}",
            over(*span_ms),
            frame(symbol, module.as_deref())
        ),
        Stuck::Unsaid { span_ms } => format!(
            "in D for {}; the kernel does not say where it waits",
            over(*span_ms)
        ),
    }
}
