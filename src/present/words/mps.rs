//! The words of a GPU under NVIDIA MPS: the server holds its clients'
//! memory; stop the clients first, then quit MPS through its control
//! daemon; what killing the server would do to the clients.

use crate::model::{MpsServed, Next};
use crate::present::next::{count, next_line, one_or, who};
use crate::units::mib;

/// `echo quit | nvidia-cuda-mps-control`.
fn quit() -> String {
    next_line(&Next::QuitMps)
}

fn bytes(b: Option<u64>) -> String {
    b.map_or("n/a".into(), mib)
}

/// A GPU under MPS: who holds what, in which order to stop them.
pub(super) fn mps(m: &MpsServed) -> (String, Vec<String>) {
    (message(m), details(m))
}

fn message(m: &MpsServed) -> String {
    let server = match &m.servers[..] {
        [] => "its MPS server (not visible here)".to_string(),
        [(w, _)] => format!("MPS server {} ({})", w.pid, w.comm),
        many => format!("{} MPS servers", many.len()),
    };
    let n = m.clients.len() + m.unseen_clients.len();
    if n == 0 {
        return format!(
            "GPU {} runs under MPS with no client: {server} holds only its own context; stop MPS with `{}`",
            m.gpu,
            quit()
        );
    }
    format!(
        "GPU {} runs under MPS: {server} holds the memory of its {} ({}); stop the {} first (each one's memory is freed as it exits), then MPS with `{}`; killing the server instead ends the CUDA {} of every client, which {} and {} {} GPU state",
        m.gpu,
        count(n, "client", "clients"),
        mib(m.client_bytes),
        one_or(n, "client", "clients"),
        quit(),
        one_or(n, "context", "contexts"),
        one_or(n, "fails", "fail"),
        one_or(n, "loses", "lose"),
        one_or(n, "its", "their"),
    )
}

fn details(m: &MpsServed) -> Vec<String> {
    let n = m.clients.len() + m.unseen_clients.len();
    let theirs = if n == 0 {
        ""
    } else {
        ", the clients' memory in its context"
    };
    let mut details: Vec<String> = m
        .servers
        .iter()
        .map(|(w, b)| {
            format!(
                "server {}: {} on GPU {} of its own{theirs}; protected",
                who(w),
                bytes(*b),
                m.gpu,
            )
        })
        .collect();
    details.extend(
        m.clients
            .iter()
            .map(|(w, b)| format!("client {}: {} on GPU {}", who(w), bytes(*b), m.gpu)),
    );
    if !m.unseen_clients.is_empty() {
        let pids: Vec<String> = m.unseen_clients.iter().map(u32::to_string).collect();
        details.push(format!(
            "{} NVML lists that this /proc does not show: {}",
            count(pids.len(), "client", "clients"),
            pids.join(", ")
        ));
    }
    details.extend(m.controls.iter().map(|w| {
        format!(
            "control daemon {}: protected; `{}` stops it and its servers once no client is left",
            who(w),
            quit()
        )
    }));
    details
}
