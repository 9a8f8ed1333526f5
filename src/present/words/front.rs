//! The words of the front ends' own refusals and messages, from typed
//! values: a duration or size that is not one (`units::Error`), a flag's
//! or variable's value that cannot be used ([`BadValue`]), a flag that
//! contradicts its command ([`Conflict`]), a unit file
//! `doctor` cannot read ([`UnitFileWhy`]); `kill`'s spinner; whether a
//! user's view is believed; a kill's audit record in one line; a
//! Prometheus answer the fleet view refuses; why `kill`'s watch for
//! restarts stopped early and how a target changed before its signal
//! (their JSON too); what a newcomer's first failures ask them to do: no
//! GPU at all ([`no_gpu`]), a device directory without GPU nodes
//! ([`no_gpu_node`]).

use crate::model::{
    AuditRecord, BadValue, Change, Conflict, Floor, Held, KillResult, LabelsOver, UnitFileWhy,
    WatchFailed,
};
use crate::safe::fit;
use std::fmt;
use std::path::Path;

impl fmt::Display for crate::units::Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::units::Error as E;
        match self {
            E::NotADuration(s) => write!(f, "'{s}' is not a duration (like 10s, 200ms, 2m)"),
            E::NeedsUnit(s) => write!(f, "'{s}' needs a unit (like 10s or 200ms)"),
            E::DurationUnit { text, unit } => {
                write!(f, "'{text}': unknown unit '{unit}' (use ms, s, m or h)")
            }
            E::NotASize(s) => write!(f, "'{s}' is not a size (like 512MiB, 2GiB, 0)"),
            E::SizeUnit { text, unit } => write!(
                f,
                "'{text}': unknown unit '{unit}' (use B, KiB, MiB, GiB, TiB, KB, MB, GB)"
            ),
            E::OutOfRange(s) => write!(f, "'{s}' is out of range"),
        }
    }
}

/// Why a flag has its floor.
fn floor(why: Floor) -> &'static str {
    match why {
        Floor::Kill => "too short to signal, wait and check the release",
        Floor::Read => "every read would time out",
        Floor::Request => "no request could arrive in time",
        Floor::Spins => "an interval that short only spins",
        Floor::LookBack => "the look back steps by 1m",
        Floor::Answer => "no answer could arrive in time",
        Floor::Sample => "no sample would fall inside it",
    }
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Conflict::MetricsJson => {
                "metrics --json: metrics writes Prometheus's text format (what a scraper \
                 reads); the JSON document is status --json"
            }
            Conflict::BundleJson => {
                "bundle --json: the bundle is an archive; its status.json is status --json"
            }
            Conflict::BundleToTerminal => {
                "bundle --out -: stdout is a terminal; redirect it to a file or a pipe"
            }
        })
    }
}

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadValue::Unit(e) => e.fmt(f),
            BadValue::Below {
                text,
                min_ms,
                floor: why,
            } => {
                let min = if min_ms.is_multiple_of(1000) {
                    format!("{}s", min_ms / 1000)
                } else {
                    format!("{min_ms}ms")
                };
                write!(f, "'{text}' is below {min}: {}", floor(*why))
            }
            BadValue::Signal(s) => write!(
                f,
                "'{s}' is not one of TERM, INT, HUP, QUIT, USR1, USR2, KILL"
            ),
            BadValue::NotOneOf { text, names } => {
                write!(f, "'{text}' is not one of {}", names.join(", "))
            }
        }
    }
}

impl fmt::Display for UnitFileWhy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnitFileWhy::Io(e) => e.fmt(f),
            UnitFileWhy::NotRegular => f.write_str("not a regular file"),
            UnitFileWhy::TooLarge { bytes, max } => write!(
                f,
                "{bytes} bytes: larger than any unit file ({max} at most)"
            ),
        }
    }
}

/// `kill`'s spinner while the memory is awaited.
pub const RELEASE_WAIT: &str = "waiting for the GPU memory to come back";

/// `kill`'s spinner once it knows what is still held.
pub fn still_held(held: &[Held]) -> String {
    let held: Vec<String> = held.iter().map(super::target::held).collect();
    format!("waiting for the GPU memory: {}", fit(&held.join("; "), 160))
}

/// Why a view's server of uid `server` (not root) is not believed: its
/// socket is not in a directory of its own under /run (`dir` None), or
/// `dir` is not that user's own, writable by no one else.
pub fn untrusted_view(server: u32, dir: Option<&Path>) -> String {
    let why = match dir {
        None => "the socket is not in a directory of its own under /run".to_string(),
        Some(d) => format!(
            "{} is not that user's own directory under /run, writable by no one else",
            d.display()
        ),
    };
    format!("its server runs as uid {server}, not root, and {why}")
}

/// What a view's socket sent is not an answer: serde's reason `e`.
pub fn not_an_answer(e: &dyn fmt::Display) -> String {
    format!("not a view's answer: {e}")
}

/// A view request of protocol `asked`, which this serve (`speaks`) does
/// not serve.
pub fn view_version(asked: u32, speaks: u32) -> String {
    format!("view protocol version {asked} not served (this serve speaks {speaks})")
}

/// The view's answer could not be rendered: the writer's error `e`.
pub fn answer_not_written(e: &dyn fmt::Display) -> String {
    format!("the answer could not be written: {e}")
}

/// The view's answer failed (its thread panicked).
pub const ANSWER_FAILED: &str = "the answer failed";

/// The view answers from no snapshot older than `/healthz` allows.
pub const SNAPSHOT_STALE: &str =
    "serve's last good snapshot is stale (its collections fail; see its log)";

/// The view has no snapshot to answer from yet.
pub const NO_SNAPSHOT: &str = "serve has no snapshot yet";

/// The view's request could not be read: the error `e`.
pub fn request_unread(e: &dyn fmt::Display) -> String {
    format!("reading the request: {e}")
}

/// The view's request is longer than `max` bytes.
pub fn request_too_long(max: usize) -> String {
    format!("a request is at most {max} bytes")
}

/// The view's request is not one: serde's reason `e`.
pub fn not_a_request(e: &dyn fmt::Display) -> String {
    format!("not a view request: {e}")
}

/// `--view-socket`: a live server answers at the path.
pub const SOCKET_ANSWERED: &str = "another server answers there";

/// `--view-socket`: a socket at the path that could not be asked whether
/// it is live (`e`).
pub fn socket_in_use(e: &dyn fmt::Display) -> String {
    format!("a socket in use is there ({e}): not replaced")
}

/// `--view-socket`: something not this user's socket is at the path.
pub const SOCKET_NOT_MINE: &str = "something other than this user's socket is there: not replaced";

/// A kill's audit record in one line (the journal's `MESSAGE`, syslog's
/// text): who, what, and what came of it. Every
/// string from a process or the environment is escaped.
pub fn audit_message(r: &AuditRecord) -> String {
    let who = &r.invoker;
    let mut from = format!("UID {} ({})", who.uid, who.user);
    if let Some(s) = &who.sudo_user {
        from.push_str(&format!(" via sudo from {s}"));
    }
    if let Some(s) = &who.ssh {
        from.push_str(&format!(" over SSH from {s}"));
    }
    if let Some(t) = &who.tty {
        from.push_str(&format!(" on {t}"));
    }
    let named: Vec<String> = r
        .targets
        .iter()
        .take(8)
        .map(|t| format!("{} {} {}", t.pid, t.comm, t.outcome.as_str()))
        .collect();
    let more = r.targets.len().saturating_sub(named.len());
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    let end = match r.outcome.result {
        KillResult::Released => format!(
            "memory released after {:.2} s",
            r.outcome.seconds_to_release
        ),
        KillResult::NotReleased => "memory not released".into(),
        KillResult::NotWaited => "release not waited for".into(),
        KillResult::Unknown => "release unknown".into(),
    };
    let text = format!(
        "gpufree {} by {from}: SIG{} to {} of {} targets ({}{more}): {end}",
        r.command,
        r.signal,
        r.outcome.signalled.len(),
        r.targets.len(),
        named.join(", ")
    );
    crate::safe::fit(&text, crate::safe::MESSAGE_MAX)
}

impl fmt::Display for LabelsOver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a series with over {} labels", self.0)
    }
}

impl fmt::Display for WatchFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a snapshot failed: {}", self.error)
    }
}

/// `kill --json`'s `restart_watch_error`: the sentence.
impl serde::Serialize for WatchFailed {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::LetGo => f.write_str(
                "no longer holds a GPU device node (it exec'd another program or let go)",
            ),
            Change::Unchecked(Some(why)) => write!(f, "could not be checked again ({why})"),
            Change::Unchecked(None) => f.write_str("could not be checked again"),
        }
    }
}

/// `kill --json`'s `changed[].why` and `unchecked[].why`: the sentence.
impl serde::Serialize for Change {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl fmt::Display for crate::model::Sink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::model::Sink;
        match self {
            Sink::Journal(p) => write!(f, "journal {}", p.display()),
            Sink::Syslog(p) => write!(f, "syslog {}", p.display()),
            Sink::File(p) => write!(f, "--audit-log {}", p.display()),
        }
    }
}

/// `audit record not written: journal PATH: why; syslog PATH: why`.
impl fmt::Display for crate::model::AuditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let each: Vec<String> = self
            .failed
            .iter()
            .map(|(sink, e)| format!("{sink}: {e}"))
            .collect();
        write!(f, "audit record not written: {}", each.join("; "))
    }
}

/// The GPU device nodes gpufree looks for in a device directory.
const NODES: &str = "nvidia*, dri/card*, dri/renderD*, kfd";

/// Neither NVML (`nvml`: why) nor a GPU device node in `dev_dir`: what
/// was looked at, and the next step on a GPU host, in a container and
/// without a GPU.
pub fn no_gpu(nvml: &str, dev_dir: &str) -> String {
    format!(
        "no GPU here: {nvml}, and no GPU device nodes ({NODES}) in {dev_dir}; \
         on a GPU host, check that the NVIDIA driver is loaded (nvidia-smi) and name the \
         directory of its device nodes with --dev-dir (in a container, mount the host's \
         /dev and driver libraries); without a GPU, \
         `gpufree demo` shows a simulated host"
    )
}

/// A `--dev-dir` given by hand that holds no GPU node while NVML sees
/// GPUs: what was looked for, and where the nodes usually are.
pub fn no_gpu_node(dev_dir: &Path) -> String {
    format!(
        "--dev-dir {}: no GPU device node there ({NODES}), while NVML sees GPUs; \
         name the directory that holds them (/dev, or the host's /dev mounted in a container)",
        dev_dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_read_as_they_always_did() {
        use crate::units::{parse_duration, parse_size};
        let said = |e: crate::units::Error| e.to_string();
        assert_eq!(
            said(parse_duration("10").unwrap_err()),
            "'10' needs a unit (like 10s or 200ms)"
        );
        assert_eq!(
            said(parse_duration("5y").unwrap_err()),
            "'5y': unknown unit 'y' (use ms, s, m or h)"
        );
        assert_eq!(
            said(parse_size("5XB").unwrap_err()),
            "'5XB': unknown unit 'XB' (use B, KiB, MiB, GiB, TiB, KB, MB, GB)"
        );
        let below = |min_ms, floor| {
            BadValue::Below {
                text: "5ms".into(),
                min_ms,
                floor,
            }
            .to_string()
        };
        assert_eq!(
            below(100, Floor::Kill),
            "'5ms' is below 100ms: too short to signal, wait and check the release"
        );
        assert_eq!(
            below(60_000, Floor::LookBack),
            "'5ms' is below 60s: the look back steps by 1m"
        );
        assert_eq!(
            UnitFileWhy::TooLarge { bytes: 9, max: 4 }.to_string(),
            "9 bytes: larger than any unit file (4 at most)"
        );
        assert_eq!(
            untrusted_view(4242, None),
            "its server runs as uid 4242, not root, and the socket is not in a directory of its own under /run"
        );
        assert_eq!(
            Change::Unchecked(Some("permission denied".into())).to_string(),
            "could not be checked again (permission denied)"
        );
        assert_eq!(
            serde_json::to_value(WatchFailed {
                error: "EMFILE".into()
            })
            .unwrap(),
            "a snapshot failed: EMFILE"
        );
    }
}
