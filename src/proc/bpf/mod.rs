//! The in-kernel holder scan: BPF programs (holders.bpf.c) walk every
//! process, every open file and every mapping in the kernel, and only the
//! matches (and one small record per process) cross into user space. This
//! module loads the committed CO-RE object, gives it the targets and reads
//! the walks; `proc/scan/from_bpf.rs` turns the records into the same
//! result the /proc scan gives.
//!
//! The object has two walks. The per-process walk (one iter/task program,
//! read by two walkers at once, that walks each process's fd table and
//! memory map itself, with kfuncs of kernel 6.7 and later, linked by
//! kfunc.rs) costs half of the iterator walk (three iterators: every
//! process, every task's open files, every task's mappings), which runs
//! where the kernel lacks or refuses the first.
//!
//! Loading is pure Rust, so neither building nor running gpufree needs
//! clang, libbpf or kernel headers. The per-process walk is relocated to
//! the running kernel with aya-obj once per boot and kept (cache/), and
//! loaded by gpufree itself (direct.rs, syscalls.rs): a one-shot command then
//! never parses the kernel's BTF. The iterator walk is loaded by aya
//! (iterators.rs).

mod cache;
mod direct;
mod iterators;
mod kfunc;
mod loaded;
mod per_process;
mod record;
mod syscalls;
mod targets;
mod unavailable;

pub use cache::pin::{dir_from as pin_dir_from, ENV as PIN_ENV};
pub use cache::prepare::prepare;
pub use cache::{dir_from as cache_dir_from, ENV as CACHE_ENV};
pub use record::{parse_all, Hold, HoldRecord, Record, TaskRecord, Unread};
pub use unavailable::Unavailable;

use super::nodes::NodeSet;
use crate::model::{BpfStep, IteratorsWhy, Relocation, WalkHow};
use loaded::Loaded;
use std::io::Read;
use std::path::Path;
use unavailable::failed;

/// What tests make of the programs ([`crate::test_hooks`]; all off in a
/// build without the `test-hooks` feature).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TestHooks {
    /// The kernel refuses the holder programs of both walks.
    pub break_verifier: bool,
    /// The iterator walk is loaded where the per-process one could be.
    pub iterator_walk: bool,
    /// The per-process walk reports every process unread.
    pub report_unread: bool,
}

impl TestHooks {
    /// As the environment sets them.
    pub fn from_env() -> TestHooks {
        TestHooks {
            break_verifier: crate::test_hooks::break_verifier(),
            iterator_walk: crate::test_hooks::iterator_walk(),
            report_unread: crate::test_hooks::report_unread(),
        }
    }
}

/// The object compiled by scripts/build-bpf.sh from holders.bpf.c.
fn object() -> &'static [u8] {
    aya::include_bytes_aligned!("holders.bpf.o")
}

/// How a walk is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// By this many readers at once, beside the other walks.
    Beside(usize),
    /// By one reader once the others have ended.
    After,
}

/// A set of walks: each program, the kind of iterator it attaches to, and
/// how it is read.
type Walks = [(&'static str, &'static str, Reading)];

/// The per-process walk: one program, read by two walkers at once (they
/// share the work: holders.bpf.c).
const PER_PROCESS: [(&str, &str, Reading); 1] = [("gpufree_walk", "task", Reading::Beside(2))];

/// The iterator walk: every open file and every mapping, then every
/// process. A leader that exits while the file walk is between a thread
/// that left its table to it and the leader itself is, when the process
/// walk comes to it, exiting with threads alive: its process is read again
/// through /proc (holders.bpf.c, `orphaned`).
const ITERATORS: [(&str, &str, Reading); 3] = [
    ("gpufree_fds", "task_file", Reading::Beside(1)),
    ("gpufree_vmas", "task_vma", Reading::Beside(1)),
    ("gpufree_tasks", "task", Reading::After),
];

/// The iterator files of one walk: those read at once, and those read
/// after them.
pub struct Started {
    /// Read at once, each by a reader of its own.
    pub beside: Vec<std::fs::File>,
    /// Read once every one of `beside` has ended.
    pub after: Vec<std::fs::File>,
}

/// As `MAX_TARGETS` in holders.h: the most nodes the walk takes (one
/// task's records, a mapping record per node among them, must fit the
/// kernel's buffer of one read).
const MAX_TARGETS: usize = 400;

/// The programs, loaded and verified once, with their targets: each walk
/// after that costs only the walk.
pub struct Programs {
    loaded: Loaded,
    /// The number of the last walk (the per-process walk's programs
    /// share its work by it).
    walk: u64,
    /// Where the walk is the one `gpufree prepare` pinned: the lock that
    /// keeps it this command's alone (cache/pin.rs).
    _pin_lock: Option<std::os::fd::OwnedFd>,
    /// Why the walk `gpufree prepare` pinned was not taken, where one is.
    pin_not_taken: Option<crate::model::CacheRefusal>,
}

impl std::fmt::Debug for Programs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Programs")
    }
}

/// Whether `dir` keeps this boot's relocation of the walk (a look at its
/// header: the load reads the whole).
pub fn relocation_kept(dir: &Path) -> bool {
    cache::kept(dir, object())
}

/// The values of the object's global constants, by name.
pub type Globals = [(&'static str, Vec<u8>)];

/// The object's constants (its .rodata, which the verifier sees): what
/// `hooks` make of the programs.
fn constants(hooks: TestHooks) -> Vec<(&'static str, Vec<u8>)> {
    let flag = |on: bool| u32::from(on).to_ne_bytes().to_vec();
    vec![
        ("break_verifier", flag(hooks.break_verifier)),
        ("report_unread", flag(hooks.report_unread)),
        ("keep_maps", flag(cfg!(target_arch = "x86_64"))),
    ]
}

impl Programs {
    /// Loads the object for `nodes`: the per-process walk, relocated to
    /// this kernel (from this boot's cache in `cache`, or afresh from the
    /// kernel's BTF, then kept there), or where it cannot run the iterator
    /// walk; and fills the target maps. `hooks`: what tests make of them.
    /// `pins`: where `gpufree prepare` keeps the walk loaded (a one-shot
    /// command's; None: load one): taken, where it can be, with no load
    /// at all.
    pub fn load(
        nodes: &NodeSet,
        hooks: TestHooks,
        cache: Option<&Path>,
        pins: Option<&Path>,
    ) -> Result<Programs, Unavailable> {
        if nodes.nodes.len() > MAX_TARGETS {
            return Err(Unavailable::TooManyNodes {
                nodes: nodes.nodes.len(),
                max: MAX_TARGETS,
            });
        }
        targets::same_dev(nodes)?;
        let pinned = pins
            .filter(|_| hooks == TestHooks::default())
            .map(|dir| cache::pin::take(dir, object()));
        let (pinned, pin_not_taken) = match pinned {
            Some(Ok(taken)) => (Some(taken), None),
            Some(Err(why)) => (None, why),
            None => (None, None),
        };
        let (loaded, lock) = match pinned {
            Some(taken) => {
                let relocation = Relocation::Pinned;
                let loaded = Loaded::PerProcess {
                    walk: taken.walk,
                    relocation,
                };
                (loaded, Some(taken.lock))
            }
            None => (load_own(hooks, cache)?, None),
        };
        let mut programs = Programs {
            loaded,
            walk: 0,
            _pin_lock: lock,
            pin_not_taken,
        };
        targets::give(&mut programs.loaded, nodes)?;
        programs.walk = programs.last_walk()?;
        Ok(programs)
    }

    /// Why the walk `gpufree prepare` pinned was not taken, where one is.
    pub fn pin_not_taken(&self) -> Option<&crate::model::CacheRefusal> {
        self.pin_not_taken.as_ref()
    }

    /// The number of the last walk of these programs (0: none; a pinned
    /// walk's last command's).
    fn last_walk(&mut self) -> Result<u64, Unavailable> {
        let map = self.loaded.map_mut("walk_number")?;
        aya::maps::Array::<_, u64>::try_from(&*map)
            .and_then(|a| a.get(&0, 0))
            .map_err(|e| failed(BpfStep::Map("walk_number".into()), &e))
    }
}

/// Loads the programs for this command: the per-process walk, or where it
/// cannot run the iterator walk.
fn load_own(hooks: TestHooks, cache: Option<&Path>) -> Result<Loaded, Unavailable> {
    let globals = constants(hooks);
    if hooks.iterator_walk {
        let ebpf = iterators::load(&globals, None)?;
        return Ok(Loaded::Iterators {
            ebpf,
            why: IteratorsWhy::TestHook,
        });
    }
    match per_process::load(&globals, cache, cache::Maker::Command) {
        Ok((walk, relocation)) => Ok(Loaded::PerProcess { walk, relocation }),
        Err(not) => {
            if let IteratorsWhy::Load(e @ Unavailable::NotPermitted(_)) = not.why {
                return Err(e);
            }
            let ebpf = iterators::load(&globals, not.btf)?;
            Ok(Loaded::Iterators { ebpf, why: not.why })
        }
    }
}

impl Programs {
    /// Which walk is loaded, and how (for `visibility`): how the
    /// per-process walk's relocation was had, or why the iterator walk
    /// runs instead.
    pub fn how(&self) -> WalkHow {
        match &self.loaded {
            Loaded::PerProcess { relocation, .. } => WalkHow::PerProcess(relocation.clone()),
            Loaded::Iterators { why, .. } => WalkHow::Iterators(why.clone()),
        }
    }

    /// Starts the walks: one iterator file per reader, each read with
    /// [`read_walk`].
    pub fn start(&mut self) -> Result<Started, Unavailable> {
        self.walk += 1;
        let map = self.loaded.map_mut("walk_number")?;
        aya::maps::Array::<_, u64>::try_from(map)
            .and_then(|mut a| a.set(0, self.walk, 0))
            .map_err(|e| failed(BpfStep::Map("walk_number".into()), &e))?;
        let mut files = Started {
            beside: Vec::new(),
            after: Vec::new(),
        };
        for &(name, _, read) in self.loaded.walks() {
            let program = self.loaded.program(name)?;
            let (readers, into) = match read {
                Reading::Beside(n) => (n, &mut files.beside),
                Reading::After => (1, &mut files.after),
            };
            for _ in 0..readers {
                let file = syscalls::iter_file(program);
                into.push(file.map_err(|e| failed(BpfStep::CreatingIterator, &e))?);
            }
        }
        Ok(files)
    }
}

/// Reads one walk to its end. The kernel answers EAGAIN after a million
/// objects that wrote nothing (it keeps its place): read again.
pub fn read_walk(mut file: std::fs::File) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(64 * 1024);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
}
