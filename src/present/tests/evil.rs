//! The hostile-names corpus of tests/it/evil.rs as one snapshot value.

use super::fixtures::{base, gpu, node, unit};
use crate::model::{GpuMemory, Owner, Process, Snapshot, Via};

/// The hostile names of tests/it/evil.rs (one corpus for both: the
/// presenters' goldens and the real binary's).
#[path = "../../../tests/corpus/evil.rs"]
mod names;
pub(super) use names::corpus;

/// Bytes as the collector keeps them: UTF-8 as it is, any other byte as
/// `\xNN` text.
fn text(bytes: &[u8]) -> String {
    bytes
        .utf8_chunks()
        .map(|c| {
            let bad: String = c.invalid().iter().map(|b| format!("\\x{b:02x}")).collect();
            format!("{}{bad}", c.valid())
        })
        .collect()
}

/// PID of the first hostile holder; the others follow.
pub(super) const FIRST_EVIL: u32 = 4100;
/// Each hostile holder's memory.
const EVIL_BYTES: u64 = 1 << 30;

/// One hostile holder: its comm (the first 15 bytes), its command line
/// and its unit all carry the name; a name with a line break breaks its
/// cgroup line, so that one has no unit and is an orphan of PID 1.
fn evil_holder(i: u32, name: &[u8]) -> Process {
    let whole = text(name);
    let unit_name: String = String::from_utf8_lossy(name)
        .chars()
        .filter(|c| *c != '/')
        .take(200)
        .collect();
    let owned = !name.contains(&b'\n');
    let root = i.is_multiple_of(2);
    Process {
        pid: FIRST_EVIL + i,
        ppid: 1,
        comm: text(&name[..name.len().min(15)]),
        cmdline: vec![whole.clone(), "--serve".into(), whole],
        exe: Some("/usr/bin/python3".into()),
        uid: if root { 0 } else { 65534 },
        user: if root { "root" } else { "nobody" }.into(),
        state: "S".into(),
        start_time_ticks: 1000 + u64::from(FIRST_EVIL + i),
        threads: 1,
        nspid: vec![FIRST_EVIL + i],
        renamed: true,
        orphaned: !owned,
        gpu_memory: vec![GpuMemory {
            gpu: 0,
            used_bytes: Some(EVIL_BYTES),
        }],
        devices: vec![node("nvidia0", Some(0), &[Via::Fd])],
        owner: if owned {
            unit(&format!("{unit_name}.service"))
        } else {
            Owner::default()
        },
        ..Process::default()
    }
}

/// One H200 with a hostile name, held by one process per corpus entry.
pub(super) fn evil() -> Snapshot {
    let names = corpus();
    let procs: Vec<Process> = (0u32..)
        .zip(&names)
        .map(|(i, n)| evil_holder(i, n))
        .collect();
    let listed: Vec<(u32, u64)> = procs.iter().map(|p| (p.pid, EVIL_BYTES)).collect();
    let used = EVIL_BYTES * listed.len() as u64;
    let mut g = gpu(
        0,
        "NVIDIA \u{1b}[5mH200\u{202e}",
        143_771 << 20,
        used,
        &listed,
    );
    g.uuid = "GPU-\u{1b}]0;uuid\u{7}\u{202e}".into();
    base(vec![g], procs, 57)
}
