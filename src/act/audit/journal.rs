//! The system log: the journal's native protocol
//! (<https://systemd.io/JOURNAL_NATIVE_PROTOCOL/>), and syslog where the
//! journal cannot be reached.
//!
//! Written by hand rather than through a crate: `systemd-journal-logger`
//! and `tracing-journald` both send to the fixed path
//! `/run/systemd/journal/socket`, so no test could point them at a socket
//! of its own (`GPUFREE_JOURNAL_SOCKET`), and both go through a logging
//! facade gpufree does not otherwise use. The protocol is small: one
//! datagram of `KEY=value\n` lines; a value holding a newline is sent in
//! the binary-safe form `KEY\n<length, 64-bit little-endian><value>\n`, so
//! no value (a process's comm or command line is its own choice) can
//! start a field of its own; a datagram too large for the socket goes as
//! a sealed memfd instead, as libsystemd does.

use crate::model::{AuditRecord, AuditTarget, KillResult};
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixDatagram;
use std::path::Path;

/// syslog's `authpriv` facility: the record names command lines, which may
/// hold secrets.
const FACILITY: u8 = 10;

/// The syslog severity of a record: notice when the memory came back (or
/// was not waited for), warning otherwise.
fn severity(r: &AuditRecord) -> u8 {
    match r.outcome.result {
        KillResult::Released | KillResult::NotWaited => 5,
        KillResult::NotReleased | KillResult::Unknown => 4,
    }
}

fn pids(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
}

/// The journal fields of `r` (`line` is its JSON line, `GPUFREE_RECORD`;
/// `message` its one line in words, `MESSAGE`):
/// the standard ones, then `GPUFREE_*` for the run, the outcome and each
/// target (`GPUFREE_TARGET_<n>_*`, n from 0 in the record's order).
pub(super) fn fields(r: &AuditRecord, line: &str, message: &str) -> Vec<(String, String)> {
    let who = &r.invoker;
    let o = &r.outcome;
    let mut f: Vec<(String, String)> = Vec::new();
    let mut put = |k: &str, v: String| f.push((k.to_string(), v));
    put("MESSAGE", message.to_string());
    put("PRIORITY", severity(r).to_string());
    put("SYSLOG_IDENTIFIER", "gpufree".into());
    put("SYSLOG_FACILITY", FACILITY.to_string());
    put("MESSAGE_ID", super::MESSAGE_ID.into());
    put("GPUFREE_COMMAND", r.command.clone());
    put("GPUFREE_UID", who.uid.to_string());
    put("GPUFREE_EUID", who.euid.to_string());
    put("GPUFREE_USER", who.user.clone());
    let optional = [
        ("GPUFREE_LOGIN_UID", who.login_uid.map(|u| u.to_string())),
        ("GPUFREE_TTY", who.tty.clone()),
        ("GPUFREE_SSH", who.ssh.clone()),
        ("GPUFREE_SUDO_USER", who.sudo_user.clone()),
        (
            "GPUFREE_SECONDS_AFTER_EXIT",
            o.seconds_after_exit.map(|s| format!("{s:.3}")),
        ),
    ];
    for (k, v) in optional {
        if let Some(v) = v {
            put(k, v);
        }
    }
    put("GPUFREE_ARGV", who.argv.join(" "));
    put("GPUFREE_SIGNAL", r.signal.clone());
    let all: Vec<u32> = r.targets.iter().map(|t| t.pid).collect();
    put("GPUFREE_TARGET_PIDS", pids(&all));
    put("GPUFREE_SIGNALLED_PIDS", pids(&o.signalled));
    put("GPUFREE_SURVIVORS", pids(&o.survivors));
    put("GPUFREE_KILLED_HARD", pids(&o.killed_hard));
    put("GPUFREE_IDENTITY_CHANGED", pids(&o.identity_changed));
    put("GPUFREE_OUTCOME", o.result.as_str().to_string());
    put("GPUFREE_RELEASED", o.released.to_string());
    put("GPUFREE_VERDICT", o.verdict.as_str().into());
    put("GPUFREE_REASONS", o.reasons.join("; "));
    put(
        "GPUFREE_SECONDS_TO_RELEASE",
        format!("{:.3}", o.seconds_to_release),
    );
    put("GPUFREE_ROUNDS", o.rounds.to_string());
    // journald drops an entry of 1024 fields or more without a word
    // (ENTRY_FIELD_COUNT_MAX): fields of their own for the first targets
    // only; every target is in GPUFREE_RECORD.
    for (i, t) in r.targets.iter().enumerate().take(MAX_TARGET_FIELDS) {
        target_fields(&mut f, i, t);
    }
    f.push(("GPUFREE_RECORD".into(), line.trim_end().to_string()));
    f
}

/// The fields of target `i`: `GPUFREE_TARGET_<i>_*`.
fn target_fields(f: &mut Vec<(String, String)>, i: usize, t: &AuditTarget) {
    let mut put = |k: &str, v: String| f.push((format!("GPUFREE_TARGET_{i}_{k}"), v));
    put("PID", t.pid.to_string());
    put("START_TIME", t.start_time_ticks.to_string());
    put("COMM", t.comm.clone());
    put("CMDLINE", t.cmdline.join(" "));
    put("EXE", t.exe.clone().unwrap_or_default());
    put("UID", t.uid.map(|u| u.to_string()).unwrap_or_default());
    put("USER", t.user.clone());
    put("OWNER", t.owner.name.clone());
    put("REASON", t.reason.clone());
    put("ROUND", t.round.to_string());
    put("SIGNALS", t.signals.join(" "));
    put("OUTCOME", t.outcome.as_str().into());
    if let Some(d) = &t.detail {
        put("DETAIL", d.clone());
    }
}

/// One datagram of the native protocol: `KEY=value\n`, or for a value
/// holding a newline `KEY\n<le64 length><value>\n`. The keys are
/// gpufree's own (upper case, digits, `_`).
pub(super) fn encode(fields: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in fields {
        out.extend_from_slice(k.as_bytes());
        if v.contains('\n') {
            out.push(b'\n');
            out.extend_from_slice(&(v.len() as u64).to_le_bytes());
        } else {
            out.push(b'=');
        }
        out.extend_from_slice(v.as_bytes());
        out.push(b'\n');
    }
    out
}

/// Sends one datagram to the journal's socket at `path`; one too large
/// for a datagram goes as a sealed memfd.
pub(super) fn send(path: &Path, datagram: &[u8]) -> io::Result<()> {
    let sock = unbound()?;
    match sock.send_to(datagram, path) {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EMSGSIZE | libc::ENOBUFS)) => {
            send_memfd(&sock, path, datagram)
        }
        Err(e) => Err(e),
    }
}

/// The protocol's way for a large entry: the datagram's bytes in a memfd,
/// sealed, passed with SCM_RIGHTS in an otherwise empty datagram.
fn send_memfd(sock: &UnixDatagram, path: &Path, datagram: &[u8]) -> io::Result<()> {
    use rustix::fs::{fcntl_add_seals, memfd_create, MemfdFlags, SealFlags};
    use rustix::net::{
        sendmsg_addr, SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix,
    };
    let fd = memfd_create(
        "gpufree-audit",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?;
    let mut file = std::fs::File::from(fd);
    file.write_all(datagram)?;
    fcntl_add_seals(
        &file,
        SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE | SealFlags::SEAL,
    )?;
    let addr = SocketAddrUnix::new(path)?;
    let fds = [file.as_fd()];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other("no room for the memfd's descriptor"));
    }
    sendmsg_addr(sock, &addr, &[], &mut control, SendFlags::empty())?;
    Ok(())
}

/// Sends the record to the syslog socket at `path` as one line: the
/// message, then the JSON record (which escapes every control character).
pub(super) fn syslog(path: &Path, r: &AuditRecord, line: &str, message: &str) -> io::Result<()> {
    let pri = u16::from(FACILITY) * 8 + u16::from(severity(r));
    let text = format!(
        "<{pri}>gpufree[{}]: {} GPUFREE_RECORD={}",
        r.invoker.pid,
        message,
        line.trim_end()
    );
    unbound()?.send_to(text.as_bytes(), path)?;
    Ok(())
}

/// How many targets get journal fields of their own (13 each, with about
/// 30 for the record: well under journald's 1024).
const MAX_TARGET_FIELDS: usize = 48;

/// A datagram socket whose send gives up after a second: a log daemon that
/// stopped reading (its queue full) never holds gpufree.
fn unbound() -> io::Result<UnixDatagram> {
    let sock = UnixDatagram::unbound()?;
    sock.set_write_timeout(Some(std::time::Duration::from_secs(1)))?;
    Ok(sock)
}
