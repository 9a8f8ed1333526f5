//! gpufree itself as /proc shows it: its ancestors (never a kill's
//! targets), the clock ticks since boot (comparable with start times), who
//! runs it (for the audit record of a kill), and with which privilege
//! ([`Privilege`]: whether its caller may steer it).

use super::parse::parse_stat;

/// The PIDs of the running process's ancestors, parent first, up to init
/// (at most 256: a loop in a damaged /proc ends there).
pub fn ancestors() -> Vec<u32> {
    let mut ancestors = Vec::new();
    let mut pid = std::process::id();
    for _ in 0..256 {
        let Some(ppid) = std::fs::read(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|b| parse_stat(&b).ok())
            .map(|s| s.ppid)
        else {
            break;
        };
        if ppid == 0 {
            break;
        }
        ancestors.push(ppid);
        pid = ppid;
    }
    ancestors
}

/// gpufree's user namespace (the target of `/proc/self/ns/user`, e.g.
/// `user:[4026531837]`), read once; None when unreadable.
pub fn user_namespace() -> Option<&'static std::ffi::OsStr> {
    static NS: std::sync::OnceLock<Option<std::ffi::OsString>> = std::sync::OnceLock::new();
    NS.get_or_init(|| {
        std::fs::read_link("/proc/self/ns/user")
            .ok()
            .map(Into::into)
    })
    .as_deref()
}

/// The clock ticks since boot now, comparable with start times; None when
/// /proc/uptime cannot be read.
pub fn uptime_ticks() -> Option<u64> {
    let tps = rustix::param::clock_ticks_per_second();
    let text = std::fs::read_to_string("/proc/uptime").ok()?;
    // "SECONDS.CENTISECONDS", read as integers: through f64, 12345.67 s
    // became 1234566 ticks, one before the tick it is.
    let (secs, centis) = text.split_whitespace().next()?.split_once('.')?;
    let (secs, centis) = (secs.parse::<u64>().ok()?, centis.parse::<u64>().ok()?);
    Some(secs * tps + centis * tps / 100)
}

/// Who is running gpufree, as an audit record names them: its UIDs, the
/// login UID, the terminal, the SSH client and sudo's user, and its
/// command line. Nothing here fails: what cannot be read is left out.
pub fn invoker() -> crate::model::Invoker {
    let uid = rustix::process::getuid().as_raw();
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    crate::model::Invoker {
        pid: std::process::id(),
        uid,
        euid: rustix::process::geteuid().as_raw(),
        user: uzers::get_user_by_uid(uid).map_or_else(
            || uid.to_string(),
            |u| u.name().to_string_lossy().into_owned(),
        ),
        login_uid: std::fs::read("/proc/self/loginuid")
            .ok()
            .and_then(|b| parse_loginuid(&b)),
        tty: terminal(),
        ssh: ssh_origin(env("SSH_CONNECTION").as_deref())
            .or_else(|| ssh_origin(env("SSH_CLIENT").as_deref())),
        sudo_user: env("SUDO_USER"),
        argv: std::env::args_os()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
    }
}

/// The host's name (uname's nodename).
pub fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// The terminal of stdin, or else of stderr.
fn terminal() -> Option<String> {
    let stdin = std::io::stdin();
    let stderr = std::io::stderr();
    let name = rustix::termios::ttyname(&stdin, Vec::new())
        .or_else(|_| rustix::termios::ttyname(&stderr, Vec::new()))
        .ok()?;
    Some(name.to_string_lossy().into_owned())
}

/// Who gpufree runs as and whether its caller has less privilege than it
/// has: decided once per process ([`Privilege::of_process`]), before any
/// environment variable or path is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Privilege {
    /// The real UID: the caller.
    pub uid: u32,
    /// Why the caller may not steer gpufree, if it may not.
    pub secure: Option<Secure>,
}

/// Why gpufree runs in secure mode: its caller has less privilege than it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secure {
    /// The kernel says so (`AT_SECURE`): a setuid or setgid binary, or one
    /// with file capabilities, run by someone who lacks them.
    Kernel,
    /// The real and effective user or group ids differ.
    Ids,
}

impl Privilege {
    /// This process's, decided at its first use and the same ever after
    /// (the binary's main asks before anything else).
    pub fn of_process() -> Privilege {
        static DECIDED: std::sync::OnceLock<Privilege> = std::sync::OnceLock::new();
        *DECIDED.get_or_init(|| {
            use rustix::process::{getegid, geteuid, getgid, getuid};
            let (uid, euid) = (getuid().as_raw(), geteuid().as_raw());
            let ids_differ = uid != euid || getgid() != getegid();
            let secure = if at_secure() {
                Some(Secure::Kernel)
            } else if ids_differ {
                Some(Secure::Ids)
            } else {
                None
            };
            Privilege { uid, secure }
        })
    }
}

impl Secure {
    /// Why, in words: "setuid, setgid or file capabilities".
    pub fn why(self) -> &'static str {
        match self {
            Secure::Kernel => {
                "gpufree runs with privileges its caller lacks (setuid, setgid or file capabilities)"
            }
            Secure::Ids => "gpufree runs with real and effective ids that differ",
        }
    }
}

/// Whether this process may read other users' executables and memory maps
/// (root, or `CAP_SYS_PTRACE`): where it may, a process whose executable
/// it could not read is no other user's beyond its reach (a zombie leader
/// whose threads run, say), and its name proves nothing.
pub fn reads_others() -> bool {
    static READS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *READS.get_or_init(|| {
        rustix::process::geteuid().is_root()
            || rustix::thread::capabilities(None).is_ok_and(|c| {
                c.effective
                    .contains(rustix::thread::CapabilitySet::SYS_PTRACE)
            })
    })
}

/// Whether the kernel started this program in secure-execution mode
/// (`AT_SECURE` in the auxiliary vector): set for setuid and setgid
/// programs and for programs with file capabilities, as the dynamic
/// loader reads it to ignore `LD_PRELOAD` and `LD_LIBRARY_PATH`.
#[allow(unsafe_code)]
fn at_secure() -> bool {
    // SAFETY: getauxval reads the auxiliary vector the kernel gave the
    // process; it has no preconditions, touches no memory of ours and is
    // thread-safe (it returns 0 for an absent entry).
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// `/proc/self/loginuid`: a UID, or None for unset (`4294967295`, -1).
pub fn parse_loginuid(b: &[u8]) -> Option<u32> {
    std::str::from_utf8(b)
        .ok()?
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|&u| u != u32::MAX)
}

/// The client of `SSH_CONNECTION` (`CLIENT PORT SERVER PORT`) or
/// `SSH_CLIENT` (`CLIENT PORT SERVERPORT`): `CLIENT PORT`.
pub fn ssh_origin(v: Option<&str>) -> Option<String> {
    let mut words = v?.split_ascii_whitespace();
    let (client, port) = (words.next()?, words.next()?);
    Some(format!("{client} {port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_uid_unset_is_none() {
        assert_eq!(parse_loginuid(b"1000"), Some(1000));
        assert_eq!(parse_loginuid(b"4294967295"), None);
        assert_eq!(parse_loginuid(b"x"), None);
        assert_eq!(parse_loginuid(b"\xff"), None);
    }

    #[test]
    fn ssh_origin_is_the_client_address_and_port() {
        assert_eq!(
            ssh_origin(Some("10.0.0.7 52311 10.0.0.1 22")).as_deref(),
            Some("10.0.0.7 52311")
        );
        assert_eq!(
            ssh_origin(Some("fe80::1 40000 22")).as_deref(),
            Some("fe80::1 40000")
        );
        assert_eq!(ssh_origin(Some("lonely")), None);
        assert_eq!(ssh_origin(None), None);
    }
}
