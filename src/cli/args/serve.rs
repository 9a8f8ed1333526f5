//! The options of `gpufree serve`.

use super::help::{DO, OUTPUT, TIMING};
use super::{refresh_interval, serve_timeout};
use clap::Args;
use std::path::PathBuf;

/// `gpufree serve` flags.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (e.g. a pod's IP and a port; `[::1]:9835` for IPv6).
    #[arg(help_heading = OUTPUT, long, value_name = "ADDR", default_value = "127.0.0.1:9835")]
    pub listen: String,
    /// How often to take a snapshot (at least 100ms).
    #[arg(help_heading = TIMING, long, value_name = "DUR", default_value = "10s", value_parser = refresh_interval)]
    pub interval: std::time::Duration,
    /// Add each holder's command line as a label (needs the next flag).
    ///
    /// Every holder's argv, tokens and passwords included, served to anyone who can connect to
    /// --listen. Refused (exit 2) without --expose-cmdlines-over-http.
    #[arg(help_heading = OUTPUT, long)]
    pub label_cmdline: bool,
    /// Say yes to what --label-cmdline exposes.
    ///
    /// Every holder's command line served over HTTP to anyone who can connect to --listen (the
    /// `metrics --output` file with them is 0600; this has no such guard).
    #[arg(help_heading = OUTPUT, long, requires = "label_cmdline")]
    pub expose_cmdlines_over_http: bool,
    /// At most this many open connections (default 1024).
    ///
    /// The default is lowered to fit the open-file limit; past it a new one displaces the longest
    /// idle one, or is refused with 503 when all are answering.
    #[arg(help_heading = DO, long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: Option<u32>,
    /// A request head must arrive within this long.
    ///
    /// From the connection's start, or from the first byte of a later
    /// request.
    #[arg(help_heading = TIMING, long, value_name = "DUR", default_value = "10s", value_parser = serve_timeout)]
    pub header_timeout: std::time::Duration,
    /// Close a kept-alive connection idle this long.
    ///
    /// Also one whose client does not take its response.
    #[arg(help_heading = TIMING, long, value_name = "DUR", default_value = "60s", value_parser = serve_timeout)]
    pub idle_timeout: std::time::Duration,
    /// Also answer users who are not root on this local socket.
    ///
    /// Mode 0666; /run/gpufree-view/view.sock, where their `gpufree status` and
    /// `why` look): what this serve sees, with other users' command lines,
    /// environments and executables removed. Run as root, or as the shipped
    /// unit's service user (contrib/systemd/gpufree-serve.service).
    #[arg(help_heading = OUTPUT, long, value_name = "PATH")]
    pub view_socket: Option<PathBuf>,
}
