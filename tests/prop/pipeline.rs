//! The whole pipeline over random fake /proc trees: the scan (through a
//! proc root of plain directories, files and symlinks: `openat` on them
//! works as on /proc), the simulated NVML library, the snapshot, the
//! verdict, the diagnosis and every presenter, in process; and the
//! `gpufree` binary (`status`, `status --json`, `why`) on fewer trees.
//!
//! Trees hold garbage, truncated or missing stat/status/cmdline/maps/cgroup
//! files, fds that are symlinks to device nodes, elsewhere, nowhere or
//! themselves, directories where files belong, huge numbers and hostile
//! names. The holders found must be exactly the PIDs whose fd or maps
//! points at a node (with a stat that parses), through the same rules the
//! scanner documents: a file that is missing means the process is gone, one
//! that cannot be read means it is unreadable.

use crate::cmd::{Gpufree, Output};
use crate::parsers::{stat_fields, StatFields};
use crate::snapshot::present_all;
use crate::{cases, hostile_bytes};
use gpufree::diagnose::{diagnose_with, Options};
use gpufree::model::{Snapshot, VerdictState, Via};
use gpufree::pipeline::take_judged;
use gpufree::proc::parse::parse_stat;
use gpufree::snapshot::Config;
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// Trees run in process (each a few milliseconds: files written, scanned,
/// NVML initialised from a state file).
const TREE_CASES: u32 = 300;
/// Trees run through the binary (three commands each).
const BINARY_CASES: u32 = 40;

/// The device nodes, as plain files: nvidia0, nvidia1 (GPUs 0 and 1),
/// nvidiactl and nvidia-uvm (shared).
const NODES: [&str; 4] = ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"];

/// What the tests share: the device directory, a file elsewhere, the
/// simulated library and the state file it reads.
struct World {
    _dir: tempfile::TempDir,
    dev: PathBuf,
    other_file: PathBuf,
    lib: PathBuf,
    state: PathBuf,
}

/// The state file is one for the process: one pipeline test at a time
/// writes it and reads it back.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let dev = dir.path().join("dev");
        std::fs::create_dir(&dev).unwrap();
        for n in NODES {
            std::fs::write(dev.join(n), [0u8; 64]).unwrap();
        }
        let other_file = dir.path().join("model.safetensors");
        std::fs::write(&other_file, b"weights").unwrap();
        let state = dir.path().join("state.json");
        std::fs::write(&state, br#"{"devices": []}"#).unwrap();
        // The simulated library reads its state from GPUFREE_SIM_STATE at
        // every nvmlInit: set once, before any NVML is loaded in this
        // process; each case rewrites the file.
        std::env::set_var("GPUFREE_SIM_STATE", &state);
        let lib = gpufree::sim::library_dir()
            .expect("the simulated NVML library is built (cargo build --workspace)")
            .join(gpufree::sim::NVML_SONAME);
        World {
            _dir: dir,
            dev,
            other_file,
            lib,
            state,
        }
    })
}

/// The stat file of a fake process.
#[derive(Debug, Clone)]
enum StatFile {
    Valid(StatFields),
    /// Anything, often a damaged valid line.
    Bytes(Vec<u8>),
    Missing,
    Dir,
}

/// One entry of a fake fd directory.
#[derive(Debug, Clone)]
enum Fd {
    /// A symlink to device node NODES[i].
    Node(usize),
    /// A symlink to a regular file, a directory, or /dev/null (statted,
    /// never opened).
    Elsewhere(u8),
    /// A symlink to nowhere (`socket:[4242]`, a deleted file).
    Dangling(Vec<u8>),
    /// A symlink to itself: ELOOP, an fd that cannot be examined.
    Loop,
}

#[derive(Debug, Clone)]
enum FdDir {
    Missing,
    File,
    Entries(Vec<Fd>),
}

#[derive(Debug, Clone)]
enum MapsLine {
    Node(usize),
    Elsewhere,
    Anon,
    Garbage(Vec<u8>),
}

#[derive(Debug, Clone)]
enum MapsFile {
    Missing,
    Dir,
    Lines(Vec<MapsLine>),
}

#[derive(Debug, Clone)]
struct FakeProc {
    pid: u32,
    stat: StatFile,
    status: Option<Vec<u8>>,
    cmdline: Option<Vec<u8>>,
    exe: Option<Vec<u8>>,
    cgroup: Option<Vec<u8>>,
    fds: FdDir,
    maps: MapsFile,
}

/// An NVML process entry of the simulated state.
#[derive(Debug, Clone)]
struct Listed {
    gpu: usize,
    pid: u32,
    used: u64,
    kind: &'static str,
}

#[derive(Debug, Clone)]
struct Tree {
    procs: Vec<FakeProc>,
    /// Entries of the proc root that are no PID (`self`, `0042`, `-1`,
    /// `4294967296`, invalid UTF-8), each holding a node like a process.
    aliases: Vec<Vec<u8>>,
    /// None: no NVML library. Some(n): the simulator with n GPUs.
    gpus: Option<usize>,
    listed: Vec<Listed>,
}

fn pid() -> impl Strategy<Value = u32> {
    prop_oneof![8 => 100u32..140, 1 => Just(1u32), 1 => any::<u32>()]
        .prop_filter("not the test process", |p| *p != std::process::id())
}

fn stat_file() -> impl Strategy<Value = StatFile> {
    prop_oneof![
        8 => stat_fields().prop_map(StatFile::Valid),
        2 => stat_fields().prop_flat_map(|f| crate::mutate(f.line())).prop_map(StatFile::Bytes),
        1 => hostile_bytes(30).prop_map(StatFile::Bytes),
        1 => Just(StatFile::Missing),
        1 => Just(StatFile::Dir),
    ]
}

fn fd() -> impl Strategy<Value = Fd> {
    prop_oneof![
        4 => (0..NODES.len()).prop_map(Fd::Node),
        3 => (0u8..3).prop_map(Fd::Elsewhere),
        2 => prop_oneof![
            Just(b"socket:[4242]".to_vec()),
            Just(b"/tmp/gone (deleted)".to_vec()),
            hostile_bytes(8).prop_map(|mut b| {
                b.retain(|&c| c != 0);
                b.insert(0, b'/');
                b
            }),
        ]
        .prop_map(Fd::Dangling),
        1 => Just(Fd::Loop),
    ]
}

fn fd_dir() -> impl Strategy<Value = FdDir> {
    prop_oneof![
        8 => proptest::collection::vec(fd(), 0..5).prop_map(FdDir::Entries),
        1 => Just(FdDir::Missing),
        1 => Just(FdDir::File),
    ]
}

fn maps_file() -> impl Strategy<Value = MapsFile> {
    let line = prop_oneof![
        3 => (0..NODES.len()).prop_map(MapsLine::Node),
        2 => Just(MapsLine::Elsewhere),
        2 => Just(MapsLine::Anon),
        1 => hostile_bytes(20).prop_map(MapsLine::Garbage),
    ];
    prop_oneof![
        8 => proptest::collection::vec(line, 0..5).prop_map(MapsFile::Lines),
        1 => Just(MapsFile::Missing),
        1 => Just(MapsFile::Dir),
    ]
}

fn maybe_bytes(max: usize) -> impl Strategy<Value = Option<Vec<u8>>> {
    proptest::option::weighted(0.8, hostile_bytes(max))
}

fn status_file() -> impl Strategy<Value = Option<Vec<u8>>> {
    proptest::option::weighted(
        0.8,
        prop_oneof![
            (any::<u32>(), proptest::collection::vec(any::<u32>(), 0..4)).prop_map(|(uid, ns)| {
                let ns: Vec<String> = ns.iter().map(u32::to_string).collect();
                format!(
                    "Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nNSpid:\t{}\n",
                    ns.join("\t")
                )
                .into_bytes()
            }),
            hostile_bytes(30),
        ],
    )
}

fn cgroup_file() -> impl Strategy<Value = Option<Vec<u8>>> {
    proptest::option::weighted(
        0.8,
        prop_oneof![
            proptest::sample::select(vec![
                "0::/system.slice/vllm.service\n",
                "0::/user.slice/user-1000.slice/session-3.scope\n",
                "0::/kubepods.slice/kubepods-pod1234abcd_5678_90ab_cdef_1234567890ab.slice/cri-containerd-3f2a1b4c5d6e7f8091a2b3c4d5e6f708.scope\n",
                "4:memory:/slurm/uid_1000/job_4242/step_0\n",
                "0::/\n",
            ])
            .prop_map(|s| s.as_bytes().to_vec()),
            hostile_bytes(30),
        ],
    )
}

fn fake_proc() -> impl Strategy<Value = FakeProc> {
    (
        pid(),
        stat_file(),
        status_file(),
        maybe_bytes(20),
        maybe_bytes(12),
        cgroup_file(),
        fd_dir(),
        maps_file(),
    )
        .prop_map(
            |(pid, stat, status, cmdline, exe, cgroup, fds, maps)| FakeProc {
                pid,
                stat,
                status,
                cmdline,
                exe,
                cgroup,
                fds,
                maps,
            },
        )
}

fn listed() -> impl Strategy<Value = Listed> {
    (
        0usize..2,
        pid(),
        prop_oneof![
            Just(u64::MAX),
            (u64::MAX - (1 << 40))..=u64::MAX,
            0u64..(100 << 30)
        ],
        proptest::sample::select(vec!["compute", "graphics", "mps"]),
    )
        .prop_map(|(gpu, pid, used, kind)| Listed {
            gpu,
            pid,
            used,
            kind,
        })
}

fn tree() -> impl Strategy<Value = Tree> {
    (
        // At least one: a proc root that lists no process is refused
        // (ScanError::NoProcesses; tests/it/blind.rs).
        proptest::collection::vec(fake_proc(), 1..8),
        proptest::collection::vec(
            prop_oneof![
                Just(b"self".to_vec()),
                Just(b"0042".to_vec()),
                Just(b"-1".to_vec()),
                Just(b"4294967296".to_vec()),
                Just(b"12\xff".to_vec()),
                Just(b"1 2".to_vec()),
            ],
            0..2,
        ),
        proptest::option::weighted(0.8, 1usize..3),
        proptest::collection::vec(listed(), 0..5),
    )
        .prop_map(|(mut procs, aliases, gpus, listed)| {
            // One directory per PID.
            let mut seen = BTreeSet::new();
            procs.retain(|p| seen.insert(p.pid));
            Tree {
                procs,
                aliases,
                gpus,
                listed,
            }
        })
}

fn os(b: &[u8]) -> &std::ffi::OsStr {
    std::ffi::OsStr::from_bytes(b)
}

fn write_proc(dir: &Path, p: &FakeProc, w: &World) {
    std::fs::create_dir_all(dir).unwrap();
    match &p.stat {
        StatFile::Valid(f) => std::fs::write(dir.join("stat"), f.line()).unwrap(),
        StatFile::Bytes(b) => std::fs::write(dir.join("stat"), b).unwrap(),
        StatFile::Missing => {}
        StatFile::Dir => std::fs::create_dir(dir.join("stat")).unwrap(),
    }
    for (name, content) in [
        ("status", &p.status),
        ("cmdline", &p.cmdline),
        ("cgroup", &p.cgroup),
    ] {
        if let Some(c) = content {
            std::fs::write(dir.join(name), c).unwrap();
        }
    }
    if let Some(target) = &p.exe {
        let mut t = target.clone();
        t.retain(|&c| c != 0);
        if t.is_empty() {
            std::fs::write(dir.join("exe"), b"not a link").unwrap();
        } else {
            std::os::unix::fs::symlink(os(&t), dir.join("exe")).unwrap();
        }
    }
    match &p.fds {
        FdDir::Missing => {}
        FdDir::File => std::fs::write(dir.join("fd"), b"").unwrap(),
        FdDir::Entries(fds) => {
            let fd_dir = dir.join("fd");
            std::fs::create_dir(&fd_dir).unwrap();
            for (i, f) in fds.iter().enumerate() {
                let link = fd_dir.join(i.to_string());
                let target: PathBuf = match f {
                    Fd::Node(n) => w.dev.join(NODES[*n]),
                    Fd::Elsewhere(0) => w.other_file.clone(),
                    Fd::Elsewhere(1) => PathBuf::from("/"),
                    Fd::Elsewhere(_) => PathBuf::from("/dev/null"),
                    Fd::Dangling(b) => PathBuf::from(os(b)),
                    Fd::Loop => link.clone(),
                };
                std::os::unix::fs::symlink(target, &link).unwrap();
            }
        }
    }
    match &p.maps {
        MapsFile::Missing => {}
        MapsFile::Dir => std::fs::create_dir(dir.join("maps")).unwrap(),
        MapsFile::Lines(lines) => {
            let mut text = Vec::new();
            for l in lines {
                let (path, anon) = match l {
                    MapsLine::Node(n) => (w.dev.join(NODES[*n]), false),
                    MapsLine::Elsewhere => (w.other_file.clone(), false),
                    MapsLine::Anon => (PathBuf::new(), true),
                    MapsLine::Garbage(b) => {
                        text.extend(b.iter().filter(|&&c| c != b'\n'));
                        text.push(b'\n');
                        continue;
                    }
                };
                let (major, minor, ino) = if anon {
                    (0, 0, 0)
                } else {
                    let m = std::fs::metadata(&path).unwrap();
                    (
                        rustix::fs::major(m.dev()),
                        rustix::fs::minor(m.dev()),
                        m.ino(),
                    )
                };
                text.extend(
                    format!(
                        "7f0000000000-7f0000001000 rw-s 00000000 {major:02x}:{minor:02x} {ino}          {}\n",
                        path.display()
                    )
                    .bytes(),
                );
            }
            std::fs::write(dir.join("maps"), text).unwrap();
        }
    }
}

/// Writes the tree under `root` and the simulator's state.
fn write_tree(root: &Path, t: &Tree, w: &World) {
    for p in &t.procs {
        write_proc(&root.join(p.pid.to_string()), p, w);
    }
    for a in &t.aliases {
        // Shaped like a holder, so that reading it would show.
        let fake = FakeProc {
            pid: 0,
            stat: StatFile::Bytes(b"7 (alias) S 1 1 1 0 0 0 0 0 0 0 0 0 0 0 0 1 0 5".to_vec()),
            status: None,
            cmdline: None,
            exe: None,
            cgroup: None,
            fds: FdDir::Entries(vec![Fd::Node(0)]),
            maps: MapsFile::Lines(Vec::new()),
        };
        write_proc(&root.join(os(a)), &fake, w);
    }
    let devices: Vec<Value> = (0..t.gpus.unwrap_or(0))
        .map(|i| {
            let procs: Vec<Value> = t
                .listed
                .iter()
                .filter(|l| l.gpu == i)
                .map(|l| json!({"pid": l.pid, "used_bytes": l.used, "type": l.kind, "visible": "always"}))
                .collect();
            json!({
                "name": "NVIDIA H200", "uuid": format!("GPU-{i}"), "pci_bus_id": format!("00000000:{:02X}:00.0", i + 1),
                "minor_number": i, "memory_total_bytes": u64::MAX, "processes": procs,
            })
        })
        .collect();
    std::fs::write(
        &w.state,
        serde_json::to_vec(&json!({ "devices": devices })).unwrap(),
    )
    .unwrap();
}

/// What the scan must make of one fake process.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    /// Not a process (a file missing: it exited mid-scan).
    Gone,
    /// Counted, named as unreadable.
    Unreadable,
    /// Read whole; holds no node.
    Clean,
    /// Holds these nodes (index into NODES -> (fd, mmap)).
    Holds(BTreeMap<usize, (bool, bool)>),
}

/// The stat a process shows, when it parses.
fn parsed_stat(p: &FakeProc) -> Option<gpufree::proc::parse::Stat> {
    match &p.stat {
        StatFile::Valid(f) => Some(parse_stat(&f.line()).unwrap()),
        StatFile::Bytes(b) => parse_stat(b).ok(),
        _ => None,
    }
}

fn expect(p: &FakeProc) -> Expect {
    let stat = match &p.stat {
        // A stat or maps missing from a process whose directory is there
        // is a read that failed, not a process gone: counted unreadable.
        StatFile::Missing => return Expect::Unreadable,
        StatFile::Dir => return Expect::Unreadable,
        _ => match parsed_stat(p) {
            Some(s) => s,
            None => return Expect::Unreadable,
        },
    };
    let fds = match &p.fds {
        FdDir::Missing => return Expect::Gone,
        FdDir::File => return Expect::Unreadable,
        FdDir::Entries(f) => f,
    };
    let lines = match &p.maps {
        MapsFile::Missing => return Expect::Unreadable,
        MapsFile::Dir => return Expect::Unreadable,
        MapsFile::Lines(l) => l,
    };
    let mut uses: BTreeMap<usize, (bool, bool)> = BTreeMap::new();
    for f in fds {
        if let Fd::Node(n) = f {
            uses.entry(*n).or_default().0 = true;
        }
    }
    for l in lines {
        if let MapsLine::Node(n) = l {
            uses.entry(*n).or_default().1 = true;
        }
    }
    if !uses.is_empty() {
        return Expect::Holds(uses);
    }
    if stat.threads > 1 && (fds.is_empty() || lines.is_empty()) {
        return Expect::Gone; // its live threads are looked for in task/: none
    }
    if fds.iter().any(|f| matches!(f, Fd::Loop)) {
        return Expect::Unreadable;
    }
    Expect::Clean
}

/// Checks a snapshot of `t` against what each fake process must give.
fn check_snapshot(t: &Tree, s: &Snapshot) -> Result<(), TestCaseError> {
    let nvml = t.gpus.is_some();
    let listed: BTreeSet<u32> = t
        .listed
        .iter()
        .filter(|l| t.gpus.is_some_and(|n| l.gpu < n))
        .map(|l| l.pid)
        .collect();
    let by_pid: BTreeMap<u32, &FakeProc> = t.procs.iter().map(|p| (p.pid, p)).collect();
    // Holders: exactly the processes whose fd or maps reaches a node.
    let mut want: BTreeMap<u32, BTreeMap<String, Vec<Via>>> = BTreeMap::new();
    for p in &t.procs {
        if let Expect::Holds(uses) = expect(p) {
            let nodes = uses
                .into_iter()
                .map(|(n, (fd, mmap))| {
                    let mut via = Vec::new();
                    if fd {
                        via.push(Via::Fd);
                    }
                    if mmap {
                        via.push(Via::Mmap);
                    }
                    (NODES[n].to_string(), via)
                })
                .collect();
            want.insert(p.pid, nodes);
        }
    }
    let got: BTreeMap<u32, BTreeMap<String, Vec<Via>>> = s
        .processes
        .iter()
        .filter(|p| !p.devices.is_empty())
        .map(|p| {
            let nodes = p
                .devices
                .iter()
                .map(|d| {
                    let name = d.path.rsplit('/').next().unwrap_or_default().to_string();
                    (name, d.via.clone())
                })
                .collect();
            (p.pid, nodes)
        })
        .collect();
    prop_assert_eq!(&got, &want, "holders");
    // A process without a node is there only because NVML lists it.
    for p in s.processes.iter().filter(|p| p.devices.is_empty()) {
        prop_assert!(
            listed.contains(&p.pid),
            "PID {} holds nothing and is not listed",
            p.pid
        );
    }
    // Unreadable: what the scan could not read, and the listed PIDs whose
    // stat could not be read when pinned.
    let mut unreadable: BTreeSet<u32> = t
        .procs
        .iter()
        .filter(|p| expect(p) == Expect::Unreadable)
        .map(|p| p.pid)
        .collect();
    unreadable.extend(
        t.procs
            .iter()
            .filter(|p| listed.contains(&p.pid) && !matches!(p.stat, StatFile::Missing))
            .filter(|p| parsed_stat(p).is_none())
            .map(|p| p.pid),
    );
    let got_unreadable: BTreeSet<u32> = s.visibility.unreadable.iter().map(|u| u.pid).collect();
    prop_assert_eq!(got_unreadable, unreadable, "unreadable");
    let scanned = t.procs.iter().filter(|p| expect(p) != Expect::Gone).count();
    prop_assert_eq!(s.visibility.processes_scanned as usize, scanned, "scanned");
    // Every GPU a live, unprotected holder touches is busy.
    for g in &s.gpus {
        let held = s.processes.iter().any(|p| {
            p.is_live() && !p.protected && p.devices.iter().any(|d| d.gpu == Some(g.index))
        });
        if held {
            prop_assert_eq!(g.verdict.state, VerdictState::Busy, "GPU {}", g.index);
        }
    }
    // NVML's memory, the largest of its listings of a PID (the lists
    // describe one memory; a known size beats "not available"), goes to
    // the holder it names; never to a process that holds no node (unless
    // a zombie or under MPS, whose memory is still its own).
    if nvml {
        for p in &s.processes {
            for m in &p.gpu_memory {
                // u64::MAX is NVML's "not available".
                let largest = t
                    .listed
                    .iter()
                    .filter(|l| l.pid == p.pid && l.gpu as u32 == m.gpu)
                    .map(|l| (l.used != u64::MAX).then_some(l.used))
                    .max()
                    .flatten();
                prop_assert_eq!(m.used_bytes, largest, "PID {} GPU {}", p.pid, m.gpu);
            }
        }
        for pid in &s.visibility.nvml_pids_stale {
            let p = by_pid[pid];
            prop_assert!(
                matches!(expect(p), Expect::Clean),
                "stale PID {pid}: {:?}",
                expect(p)
            );
        }
    } else {
        prop_assert!(s.processes.iter().all(|p| p.gpu_memory.is_empty()));
    }
    Ok(())
}

/// `t` written as a fake proc root in a new temporary directory (kept
/// while the returned guard lives).
fn written(t: &Tree, w: &World) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proc");
    std::fs::create_dir(&root).unwrap();
    write_tree(&root, t, w);
    (dir, root)
}

fn config(root: &Path, t: &Tree, w: &World) -> Config {
    Config {
        proc_root: root.to_path_buf(),
        dev_dir: w.dev.clone(),
        nvml_lib: Some(if t.gpus.is_some() {
            w.lib.clone()
        } else {
            PathBuf::from("/nonexistent/libnvidia-ml.so.1")
        }),
        others: true,
        read_timeout: Duration::from_secs(10),
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(cases(TREE_CASES))]

    #[test]
    fn random_proc_trees_through_the_whole_pipeline(t in tree(), pattern in crate::re("[a-z.*()]{0,5}")) {
        let _one = one_at_a_time();
        let w = world();
        let (_dir, root) = written(&t, w);
        let s = take_judged(&config(&root, &t, w)).unwrap();
        check_snapshot(&t, &s)?;
        if let Ok(re) = regex::Regex::new(&pattern) {
            diagnose_with(&s, &Options { pattern: Some((pattern.clone(), re)) });
        }
        present_all(&s)?;
    }
}

/// `gpufree ARGS` over a fake tree, against the simulator when it has GPUs.
fn run_binary(root: &Path, t: &Tree, w: &World, args: &[&str]) -> Output {
    let cfg = config(root, t, w);
    Gpufree::new(args)
        .proc_root(&cfg.proc_root)
        .dev(&cfg.dev_dir)
        .nvml_lib(cfg.nvml_lib.unwrap())
        .sim_state(&w.state)
        .run()
}

proptest! {
    #![proptest_config(cases(BINARY_CASES))]

    #[test]
    fn random_proc_trees_through_the_binary(t in tree()) {
        let _one = one_at_a_time();
        let w = world();
        let (_dir, root) = written(&t, w);
        let out = run_binary(&root, &t, w, &["status", "--json"]);
        prop_assert_eq!(out.code, 0, "{}", out.report());
        let s: Snapshot = serde_json::from_slice(&out.stdout_bytes)
            .map_err(|e| TestCaseError::fail(format!("not JSON: {e}")))?;
        check_snapshot(&t, &s)?;
        for args in [&["status"][..], &["why"], &["why", "--json"]] {
            let out = run_binary(&root, &t, w, args);
            prop_assert!(!out.stderr.contains("panicked"), "{}", out.report());
            // why: 0 free, 1 busy, 3 unknown.
            prop_assert!(matches!(out.code, 0 | 1 | 3), "{}", out.report());
            if args.contains(&"--json") {
                prop_assert!(serde_json::from_slice::<Value>(&out.stdout_bytes).is_ok(), "{args:?}");
            }
        }
    }
}

/// NVML listing one PID on two lists (compute and graphics, as a C+G
/// process is; or an MPS client in the compute and MPS lists) describes one
/// memory, not two: the largest listing counts, once, never a sum (which
/// also overflowed in a debug build with sizes near u64::MAX).
#[test]
fn a_pid_nvml_lists_twice_is_counted_once_even_with_huge_memory() {
    let _one = one_at_a_time();
    let w = world();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proc");
    let holder = FakeProc {
        pid: 120,
        stat: StatFile::Valid(StatFields {
            pid: 120,
            comm: b"python3".to_vec(),
            state: 'S',
            ppid: 1,
            pgid: 1,
            sid: 1,
            threads: 1,
            start_time: 5,
            arg_area: None,
        }),
        status: None,
        cmdline: Some(b"python3\0serve.py\0".to_vec()),
        exe: None,
        cgroup: None,
        fds: FdDir::Entries(vec![Fd::Node(0)]),
        maps: MapsFile::Lines(Vec::new()),
    };
    let t = Tree {
        procs: vec![holder],
        aliases: Vec::new(),
        gpus: Some(1),
        listed: [("compute", u64::MAX - 1), ("graphics", 5 << 20)]
            .into_iter()
            .map(|(kind, used)| Listed {
                gpu: 0,
                pid: 120,
                used,
                kind,
            })
            .collect(),
    };
    std::fs::create_dir(&root).unwrap();
    write_tree(&root, &t, w);
    let s = take_judged(&config(&root, &t, w)).unwrap();
    assert!(s.nvml.available, "{:?}", s.nvml);
    assert_eq!(s.processes.len(), 1, "{s:#?}");
    assert_eq!(s.processes[0].gpu_memory[0].used_bytes, Some(u64::MAX - 1));
    assert_eq!(s.gpus[0].memory.accounted_bytes, u64::MAX - 1);
    assert_eq!(s.verdict.state, VerdictState::Busy);
}
