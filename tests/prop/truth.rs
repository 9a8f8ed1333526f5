//! Every sentence of every holder finding is true of the snapshot it came
//! from, over random process trees: parents alive or dead (reparented to
//! init or to a subreaper), launchers that hold nothing, shells; comm and
//! command line changed independently; memory or only device nodes. The
//! snapshot is built as the scan builds one (`orphaned` from the parent,
//! `renamed` from `model::rename_of`), diagnosed, and put in words; then:
//!
//! - the holder PIDs its words name are exactly its `pids`, plus the
//!   extras it names as such ("the next also stops K of its processes
//!   without GPU memory: A, B");
//! - the count its message starts with is the number of its `pids`, and
//!   K is the number of extras;
//! - "parent died" and "of a dead parent" only of PIDs whose parent is
//!   gone; "its parent is alive, in the tree of T" only where it is and T's
//!   is gone;
//! - a renamed finding's kind (comm only, command line rewritten, with or
//!   without comm) is what changed, and its counts of what `pkill`,
//!   `pkill -f` and `ps aux | grep` miss are what those read (comm; the
//!   command line), checked here without gpufree's own matcher;
//! - a `gpufree kill --pid ...` next kills exactly its PIDs and the extras.

use crate::{cases, Bytes};
use gpufree::diagnose::diagnose;
use gpufree::model::{
    rename_of, DeviceUse, FindingKind, Gpu, GpuMemory, Kin, Memory, NvmlProcess, NvmlProcessKind,
    NvmlStatus, Process, Rename, Snapshot, Via, Visibility,
};
use gpufree::present::json::FindingDoc;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

/// Cases: each a tree of up to 12 processes, diagnosed and worded.
const TREE_CASES: u32 = 3_000;

/// The first holder's PID: far from every other number the words hold
/// (counts, GPU indexes, MiB, the reapers 1 and 50, the launcher 60).
const FIRST: u32 = 4100;

const INIT: u32 = 1;
const SUBREAPER: u32 = 50;
const LAUNCHER: u32 = 60;
const SHELL: u32 = 70;
const GIB: u64 = 1 << 30;

/// A random tree of holders from `seed`.
fn tree(seed: u64) -> Snapshot {
    let mut r = Bytes(seed);
    let n = 1 + r.below(12);
    let mut processes: Vec<Process> = Vec::new();
    for i in 0..n {
        let pid = FIRST + i as u32;
        let ppid = match r.below(5) {
            0 => INIT,
            1 => SUBREAPER,
            2 if i > 0 => FIRST + r.below(i) as u32,
            3 => LAUNCHER,
            _ => SHELL,
        };
        let comm = if r.below(2) == 0 {
            "python3".to_string()
        } else {
            format!("worker{i}")
        };
        let cmdline: Vec<String> = if r.below(2) == 0 {
            vec!["python3".into(), "train.py".into(), format!("--rank={i}")]
        } else {
            vec![format!("trainer: rank {i}")]
        };
        let exe = Some("/usr/bin/python3.12".to_string());
        let gpu = (i % 2) as u32;
        let holds_memory = r.below(2) == 0;
        let node = |name: String, gpu: Option<u32>| DeviceUse {
            path: name,
            gpu,
            via: vec![Via::Fd],
        };
        let devices = match (holds_memory, r.below(3)) {
            (true, _) | (false, 0) => vec![
                node(format!("nvidia{gpu}"), Some(gpu)),
                node("nvidia-uvm".into(), None),
            ],
            (false, 1) => vec![node("nvidia-uvm".into(), None)],
            (false, _) => vec![node(format!("nvidia{gpu}"), Some(gpu))],
        };
        processes.push(Process {
            pid,
            ppid,
            renamed: rename_of(&comm, &cmdline, exe.as_deref()).is_some(),
            orphaned: ppid == INIT || ppid == SUBREAPER,
            comm,
            cmdline,
            exe,
            uid: 1000,
            user: "alice".into(),
            state: "S".into(),
            threads: 1,
            start_time_ticks: 100 + i as u64,
            nspid: vec![pid],
            gpu_memory: if holds_memory {
                vec![GpuMemory {
                    gpu,
                    used_bytes: Some((1 + r.below(4) as u64) * GIB),
                }]
            } else {
                Vec::new()
            },
            devices,
            ..Process::default()
        });
    }
    let gpus = (0..2).map(|g| gpu(g, &processes)).collect();
    let kin = |ppid: u32, comm: &str, cmdline: &[&str]| Kin {
        ppid,
        comm: comm.into(),
        start_time_ticks: 1,
        cmdline: cmdline.iter().map(|s| s.to_string()).collect(),
    };
    let parents = BTreeMap::from([
        (INIT, kin(0, "systemd", &["/sbin/init"])),
        (
            SUBREAPER,
            kin(INIT, "systemd", &["/lib/systemd/systemd", "--user"]),
        ),
        (LAUNCHER, kin(INIT, "python3", &["python3", "launch.py"])),
        (SHELL, kin(INIT, "bash", &["-bash"])),
    ]);
    Snapshot {
        gpus,
        processes,
        parents,
        nvml: NvmlStatus {
            available: true,
            ..NvmlStatus::default()
        },
        visibility: Visibility {
            root: true,
            ..Visibility::default()
        },
        ..Snapshot::default()
    }
}

/// GPU `index` with NVML's listing of the memory `processes` hold on it.
fn gpu(index: u32, processes: &[Process]) -> Gpu {
    let listed: Vec<NvmlProcess> = processes
        .iter()
        .flat_map(|p| p.gpu_memory.iter().map(move |m| (p.pid, m)))
        .filter(|(_, m)| m.gpu == index)
        .map(|(pid, m)| NvmlProcess {
            pid,
            used_bytes: m.used_bytes,
            kind: NvmlProcessKind::Compute,
        })
        .collect();
    let used: u64 = listed.iter().filter_map(|p| p.used_bytes).sum();
    Gpu {
        index,
        name: "NVIDIA H200".into(),
        uuid: format!("GPU-{index}"),
        pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + index),
        minor_number: Some(index),
        memory: Memory {
            total_bytes: 140 * GIB,
            used_bytes: used,
            accounted_bytes: used,
            known: true,
            ..Memory::default()
        },
        nvml_processes: listed,
        ..Gpu::default()
    }
}

/// The holder PIDs a text names (numbers of the tree's range).
fn named(text: &str, holders: &BTreeSet<u32>) -> BTreeSet<u32> {
    text.split(|c: char| !c.is_ascii_digit())
        .filter_map(|t| t.parse::<u32>().ok())
        .filter(|p| holders.contains(p))
        .collect()
}

/// The extras a group's message names as such.
fn extras(message: &str) -> BTreeSet<u32> {
    message
        .split_once("of its processes without GPU memory: ")
        .map(|(_, list)| {
            list.split(", ")
                .map(|p| p.trim().parse().unwrap())
                .collect()
        })
        .unwrap_or_default()
}

/// The count a phrase like "`pkill -f python3` ... miss X" gives, of `n`.
fn how_many(phrase: &str, n: usize) -> usize {
    let phrase = phrase.trim_start();
    if phrase.starts_with("none") {
        0
    } else if phrase.starts_with("all of them") || phrase.starts_with("it") {
        n
    } else {
        phrase
            .split(' ')
            .next()
            .and_then(|k| k.parse().ok())
            .unwrap_or_else(|| panic!("no count in {phrase:?}"))
    }
}

/// Checks one finding's words against the snapshot.
fn check(s: &Snapshot, f: &FindingDoc) -> Result<(), String> {
    let by_pid: BTreeMap<u32, &Process> = s.processes.iter().map(|p| (p.pid, p)).collect();
    let holders: BTreeSet<u32> = by_pid.keys().copied().collect();
    let pids: BTreeSet<u32> = f.pids.iter().copied().collect();
    let extra = extras(&f.message);
    let all_words = format!("{}\n{}", f.message, f.details.join("\n"));
    let said = named(&all_words, &holders);
    let want: BTreeSet<u32> = pids.union(&extra).copied().collect();
    if said != want {
        return Err(format!("names {said:?}, its pids and extras are {want:?}"));
    }
    let first: usize = f
        .message
        .split(' ')
        .next()
        .and_then(|c| c.parse().ok())
        .ok_or("the message starts with no count")?;
    if first != pids.len() {
        return Err(format!("counts {first}, has {} pids", pids.len()));
    }
    if let Some(k) = f.message.split("the next also stops ").nth(1) {
        if how_many(k, 0) != extra.len() {
            return Err(format!("says {k:?}, names {} extras", extra.len()));
        }
    }
    if f.next.starts_with("gpufree kill --pid") {
        let killed: BTreeSet<u32> = f
            .next
            .split(' ')
            .collect::<Vec<_>>()
            .windows(2)
            .filter(|w| w[0] == "--pid")
            .map(|w| w[1].parse().unwrap())
            .collect();
        if killed != want {
            return Err(format!("kills {killed:?}, names {want:?}"));
        }
    }
    let orphan = |p: u32| by_pid.get(&p).is_some_and(|q| q.orphaned);
    if f.message.contains("of a dead parent") || f.message.contains("whose parent died") {
        if let Some(p) = pids.iter().find(|p| !orphan(**p)) {
            return Err(format!("says a dead parent, but {p}'s parent lives"));
        }
    }
    for line in &f.details {
        let Some(p) = named(line.split(' ').next().unwrap_or(""), &holders).pop_first() else {
            continue;
        };
        if line.contains("its parent died") && !orphan(p) {
            return Err(format!("says {p}'s parent died: {line}"));
        }
        if let Some(t) = line.split("in the tree of ").nth(1) {
            let t: u32 = t.split(',').next().unwrap().parse().unwrap();
            let parent_alive = by_pid.contains_key(&by_pid[&p].ppid);
            if orphan(p) || !parent_alive || !orphan(t) {
                return Err(format!("{p} in the tree of {t}: {line}"));
            }
        }
    }
    if f.kind == FindingKind::RenamedHolders {
        renamed(&by_pid, &pids, &f.message)?;
    }
    Ok(())
}

/// A renamed finding: the kind of change, and what each pkill misses.
fn renamed(by_pid: &BTreeMap<u32, &Process>, pids: &BTreeSet<u32>, m: &str) -> Result<(), String> {
    let n = pids.len();
    let changes: Vec<Rename> = pids
        .iter()
        .map(|p| {
            let q = by_pid[p];
            rename_of(&q.comm, &q.cmdline, q.exe.as_deref()).ok_or(format!("{p} did not change"))
        })
        .collect::<Result<_, _>>()?;
    let comm_only = m.contains("changed only");
    if comm_only != changes.iter().all(|c| *c == Rename::Comm)
        || (!comm_only && !changes.iter().all(|c| c.cmdline()))
    {
        return Err(format!("{changes:?}: {m}"));
    }
    if m.contains("comm unchanged") && changes.iter().any(|c| c.comm()) {
        return Err(format!("{changes:?}: {m}"));
    }
    if (m.contains("and their comm") || m.contains("and its comm"))
        && !changes.iter().all(|c| c.comm())
    {
        return Err(format!("{changes:?}: {m}"));
    }
    // What procps reads: comm for plain pkill, the command line for -f
    // and for `ps aux`.
    let comm_miss = pids
        .iter()
        .filter(|p| !by_pid[p].comm.contains("python3"))
        .count();
    let f_miss = pids
        .iter()
        .filter(|p| !by_pid[p].cmdline.join(" ").contains("python3"))
        .count();
    let f_said = m
        .split("`ps aux | grep python3` miss")
        .nth(1)
        .ok_or(format!("no pkill -f count: {m}"))?;
    let comm_said = m
        .split("(comm) misses")
        .nth(1)
        .or_else(|| m.split("`ps -e` miss").nth(1))
        .ok_or(format!("no pkill count: {m}"))?;
    if how_many(f_said, n) != f_miss || how_many(comm_said, n) != comm_miss {
        return Err(format!(
            "misses {f_miss} by cmdline, {comm_miss} by comm: {m}"
        ));
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(TREE_CASES))]

    #[test]
    fn every_holder_finding_says_only_what_is_true_of_its_tree(seed in any::<u64>()) {
        let s = tree(seed);
        for f in diagnose(&s) {
            if !matches!(
                f.kind(),
                FindingKind::LiveHolders
                    | FindingKind::Orphans
                    | FindingKind::RenamedHolders
                    | FindingKind::DeviceHolders
            ) {
                continue;
            }
            let doc = FindingDoc::new(&f);
            if let Err(e) = check(&s, &doc) {
                prop_assert!(false, "{e}\n{doc:#?}\nprocesses: {:#?}", s.processes
                    .iter()
                    .map(|p| (p.pid, p.ppid, &p.comm, p.cmdline.join(" "), p.memory_bytes(), p.orphaned))
                    .collect::<Vec<_>>());
            }
        }
    }
}
