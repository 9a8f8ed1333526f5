//! A snapshot as a user who is not root may see it: what `ps` and
//! `nvidia-smi` already show of other users' processes (PID, user, comm,
//! state, memory, devices, owner, flags) and nothing only root may read
//! (their command lines, environments, executables, what their memory
//! maps hold). Root's `gpufree serve` answers users on its view's socket
//! so, and a gpufree in secure mode (setuid, file capabilities) shows its
//! caller no more. The snapshot is judged after [`Snapshot::hide_from`],
//! so no finding carries what was removed.
//!
//! Also the view's wire format: one [`ViewRequest`] line, answered by one
//! [`ViewAnswer`] line and the output.

use super::{NotProtected, Process, Snapshot, VerdictState};
use serde::{Deserialize, Serialize};

/// Where a snapshot came from: root's serve, for a user.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ViewFrom {
    /// The socket `gpufree serve --view-socket` answered on.
    pub socket: String,
    /// The user it answered (from the socket's peer credentials).
    pub uid: u32,
    /// The user serve runs as: root, or the shipped unit's service user.
    #[serde(default)]
    pub server_uid: u32,
    /// How old the snapshot answered from was, in seconds (serve takes one
    /// every `--interval`).
    #[serde(default)]
    pub age_seconds: f64,
}

/// What [`Snapshot::hide_from`] removes, in `visibility.hidden`'s words.
const HIDDEN: [&str; 5] = [
    "other users' command lines",
    "other users' environments",
    "other users' executables",
    "what other users' memory maps hold",
    "launchers' command lines",
];

impl Snapshot {
    /// Keeps of other users' processes only what `uid` may see of them
    /// ([`seen_by_another`]), drops every launcher's command line (a
    /// parent holding nothing is kept without its owner's id) and every
    /// other process's, and says so in `visibility.hidden`. Root (uid 0)
    /// sees everything. The verdicts and findings are the caller's to
    /// make again.
    pub fn hide_from(&mut self, uid: u32) {
        if uid == 0 {
            return;
        }
        for p in self.processes.iter_mut().filter(|p| p.uid != uid) {
            *p = seen_by_another(p);
        }
        for kin in self.parents.values_mut() {
            kin.cmdline.clear();
        }
        self.others.clear();
        self.findings.clear();
        self.visibility.hidden = HIDDEN.iter().map(|s| (*s).to_string()).collect();
    }
}

/// What another user may see of `p`: a list of what is shown, never of
/// what is removed, so a field added later stays hidden until it is
/// listed here (where it waits in the kernel, `wchan`, is root's to read). A protected daemon keeps its executable (a system
/// program's path names it: comm is cut at 15 bytes), and a refusal of
/// protection keeps its reason, not the variable's value or the mapped
/// file that made it.
pub fn seen_by_another(p: &Process) -> Process {
    Process {
        pid: p.pid,
        ppid: p.ppid,
        pgid: p.pgid,
        sid: p.sid,
        comm: p.comm.clone(),
        exe: p.exe.clone().filter(|_| p.protected),
        uid: p.uid,
        user: p.user.clone(),
        state: p.state.clone(),
        start_time_ticks: p.start_time_ticks,
        threads: p.threads,
        nspid: p.nspid.clone(),
        renamed: p.renamed,
        orphaned: p.orphaned,
        gpu_memory: p.gpu_memory.clone(),
        devices: p.devices.clone(),
        drm_clients: p.drm_clients.clone(),
        owner: p.owner.clone(),
        cgroup: p.cgroup.clone(),
        protected: p.protected,
        protection: p.protection,
        not_protected: p.not_protected.as_ref().map(without_evidence),
        ..Process::default()
    }
}

/// A refusal of protection without what it read from the process.
fn without_evidence(n: &NotProtected) -> NotProtected {
    match n {
        NotProtected::Preload { variable, .. } => NotProtected::Preload {
            variable: variable.clone(),
            value: String::new(),
        },
        NotProtected::ForeignCode { .. } => NotProtected::ForeignCode {
            path: String::new(),
        },
        other => other.clone(),
    }
}

/// The view protocol's version.
pub const VIEW_VERSION: u32 = 1;

/// What a user asks the view: one line of JSON.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ViewRequest {
    /// [`VIEW_VERSION`].
    pub version: u32,
    /// `status` or `why`.
    pub command: ViewCommand,
    /// The `--gpu` selectors, as typed.
    #[serde(default)]
    pub gpu: Vec<String>,
    /// `--json`.
    #[serde(default)]
    pub json: bool,
    /// `--quiet`.
    #[serde(default)]
    pub quiet: bool,
    /// Colours (the caller's terminal wants them).
    #[serde(default)]
    pub color: bool,
}

/// The commands the view answers.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ViewCommand {
    /// `gpufree status`.
    Status,
    /// `gpufree why`.
    Why,
}

/// The first line of an answer: the verdict the output shows, or why the
/// command could not run (the output is then empty). The caller's exit
/// code follows from it as from its own scan.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ViewAnswer {
    /// The selected GPUs' verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<VerdictState>,
    /// How old the snapshot answered from was, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_seconds: Option<f64>,
    /// Why the command could not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ViewError>,
}

/// Why the view could not answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ViewError {
    /// Whose mistake: the request's (a bad `--gpu`), or the server's
    /// state (no fresh snapshot).
    pub kind: ViewErrorKind,
    /// In one line.
    pub message: String,
}

/// Whose mistake a view's error is.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ViewErrorKind {
    /// The request's: a usage error.
    Usage,
    /// The server cannot answer now: its snapshot is missing or stale.
    Unavailable,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Owner, OwnerKind, Protection};

    /// Every field of another user's process that could carry a secret is
    /// filled with one; none survives, the rest does.
    #[test]
    fn another_user_sees_no_field_that_could_carry_a_secret() {
        let secret = "SECRET";
        let p = Process {
            pid: 7,
            comm: "python3".into(),
            cmdline: vec![secret.into()],
            exe: Some(format!("/home/{secret}/python3")),
            uid: 1000,
            user: "alice".into(),
            owner: Owner {
                kind: OwnerKind::SystemdUnit,
                id: "vllm.service".into(),
                name: "vllm.service".into(),
                claims: None,
            },
            environment: [("TORCHELASTIC_RUN_ID".to_string(), secret.to_string())].into(),
            not_protected: Some(NotProtected::Preload {
                variable: "LD_PRELOAD".into(),
                value: format!("/home/{secret}/evil.so"),
            }),
            ..Process::default()
        };
        let seen = seen_by_another(&p);
        let text = serde_json::to_string(&seen).unwrap();
        assert!(!text.contains(secret), "{text}");
        assert_eq!(
            (seen.pid, seen.uid, seen.comm.as_str()),
            (7, 1000, "python3")
        );
        assert_eq!(seen.owner, p.owner);
        let mut mapped = p.clone();
        mapped.not_protected = Some(NotProtected::ForeignCode {
            path: format!("/home/{secret}/x.so"),
        });
        assert!(!serde_json::to_string(&seen_by_another(&mapped))
            .unwrap()
            .contains(secret));
        // A protected daemon keeps the executable that names it.
        let daemon = Process {
            protected: true,
            protection: Some(Protection::System),
            exe: Some("/usr/bin/nvidia-cuda-mps-control".into()),
            ..Process::default()
        };
        assert_eq!(seen_by_another(&daemon).exe, daemon.exe);
    }

    #[test]
    fn hide_from_keeps_the_callers_own_and_says_what_it_hid() {
        let mine = Process {
            pid: 1,
            uid: 1000,
            cmdline: vec!["mine".into()],
            ..Process::default()
        };
        let theirs = Process {
            pid: 2,
            uid: 1001,
            cmdline: vec!["theirs".into()],
            ..Process::default()
        };
        let mut s = Snapshot {
            processes: vec![mine.clone(), theirs],
            ..Snapshot::default()
        };
        let mut root = s.clone();
        root.hide_from(0);
        assert_eq!(root, s, "root sees everything");
        s.hide_from(1000);
        assert_eq!(s.processes[0], mine);
        assert!(s.processes[1].cmdline.is_empty());
        assert_eq!(s.visibility.hidden.len(), HIDDEN.len());
    }
}
