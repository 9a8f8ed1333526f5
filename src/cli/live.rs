//! The commands that keep running or run something else: `watch`,
//! `serve`, `record`, `demo` and `sim`.

use super::{collector, take_selected};
use crate::cli::args::{RecordArgs, ServeArgs, SimCommand};
use crate::cli::config::Settings;
use crate::cli::error::{Error, Outcome};
use crate::present::notice::write_listening;
use crate::present::Printer;
use crate::snapshot::Config;
use std::io::Write;

/// `gpufree watch`: the live view, on a terminal only; in colour as the
/// printer decided (`--no-color`, `NO_COLOR`).
pub(super) fn watch(
    s: &Settings,
    (interval, scan_every): (std::time::Duration, std::time::Duration),
    printer: &Printer,
) -> Result<Outcome, Error> {
    use std::io::IsTerminal;
    let common = &s.common;
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(Error::NoTerminal);
    }
    let first = take_selected(s, &Default::default())?;
    let opts = crate::watch::Options {
        interval,
        scan_every,
        gpus: if common.gpu.is_empty() {
            None
        } else {
            // What the first look selected, MIG devices included.
            Some(crate::snapshot::resolve(&first.gpus, &common.gpu).map_err(Error::Selector)?)
        },
        audit: s.audit.clone(),
        color: printer.color(),
    };
    let cfg = Config {
        long_lived: true,
        ..s.collect.clone()
    };
    crate::watch::run(cfg, opts)?;
    Ok(Outcome::Done)
}

/// `gpufree serve`: Prometheus metrics over HTTP until stopped.
pub(super) fn serve(s: &Settings, args: &ServeArgs) -> Result<Outcome, Error> {
    let common = &s.common;
    if args.label_cmdline && !args.expose_cmdlines_over_http {
        return Err(Error::CmdlinesExposed(args.listen.clone()));
    }
    // Each collection asks the driver back to the one before (a second
    // more for its own time), so no stretch between two goes unasked and
    // "idle since" spans every collection that found a holder idle.
    let cfg = Config {
        long_lived: true,
        idle_window: s
            .collect
            .idle_window
            .max(args.interval + std::time::Duration::from_secs(1)),
        ..s.collect.clone()
    };
    let c = collector(s, cfg, None)?;
    let opts = crate::serve::Options {
        listen: args.listen.clone(),
        interval: args.interval,
        label_cmdline: args.label_cmdline,
        gpus: common.gpu.clone(),
        max_connections: args
            .max_connections
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        header_timeout: args.header_timeout,
        idle_timeout: args.idle_timeout,
        view_socket: args.view_socket.clone(),
    };
    let quiet = common.quiet;
    let view = args.view_socket.clone();
    crate::serve::serve(c, &opts, |addr| {
        if !quiet {
            let _ = write_listening(&mut std::io::stderr(), addr, view.as_deref());
        }
    })?;
    Ok(Outcome::Done)
}

/// `gpufree record`: the timeline into `--out` until SIGINT or SIGTERM,
/// then its last record.
pub(super) fn record(s: &Settings, args: &RecordArgs) -> Result<Outcome, Error> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    // As serve's: each collection asks the driver back to the one before.
    let cfg = Config {
        long_lived: true,
        idle_window: s
            .collect
            .idle_window
            .max(args.interval + std::time::Duration::from_secs(1)),
        ..s.collect.clone()
    };
    let c = collector(s, cfg, None)?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    // A handler that cannot be set leaves the default: the process ends
    // on the signal, every line written whole (each is one write).
    let _ = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst));
    let opts = crate::record::Options {
        out: args.out.clone(),
        interval: args.interval,
        full_every: args.full_every,
        scan_every: args.scan_every,
        bounds: crate::record::Bounds {
            max_size: args.max_size,
            max_age_ms: args
                .max_age
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            keep: args.keep,
        },
        audit_log: args.audit_log.clone(),
        gpus: s.common.gpu.clone(),
    };
    crate::record::record(c, &opts, &stop)?;
    Ok(Outcome::Done)
}

/// `gpufree demo`: the reference incident; survivors when the GPUs did
/// not come back.
pub(super) fn demo(s: &Settings, hold: bool, printer: &Printer) -> Result<Outcome, Error> {
    let opts = crate::demo::Options {
        config: s.collect.clone(),
        hold,
        printer: *printer,
    };
    Ok(if crate::demo::run(&opts)? {
        Outcome::Done
    } else {
        Outcome::Survivors
    })
}

/// `gpufree sim lib` prints the library's directory; `gpufree sim exec`
/// becomes its command and returns only when that could not start.
pub(super) fn sim(cmd: SimCommand, printer: &Printer) -> Result<Outcome, Error> {
    match cmd {
        SimCommand::Lib => {
            let dir = crate::sim::library_dir()?;
            let mut out = printer.guard(std::io::stdout().lock());
            writeln!(out, "{}", dir.display())?;
            Ok(Outcome::Done)
        }
        SimCommand::Exec { state, cmd } => Err(crate::sim::exec(&state, &cmd).into()),
    }
}
