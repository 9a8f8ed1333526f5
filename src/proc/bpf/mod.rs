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
mod unavailable;

pub use cache::pin::{dir_from as pin_dir_from, ENV as PIN_ENV};
pub use cache::prepare::prepare;
pub use cache::{dir_from as cache_dir_from, ENV as CACHE_ENV};
pub use record::{parse_all, Hold, HoldRecord, Record, TaskRecord, Unread};
pub use unavailable::Unavailable;

use super::nodes::NodeSet;
use crate::model::{BpfStep, IteratorsWhy, Relocation, WalkHow};
use aya::maps::HashMap;
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

/// File systems where `stat`'s device number is the superblock's, so that
/// a regular-file target matches by inode: tmpfs, ramfs, ext2/3/4, xfs.
const SAME_DEV_FS: [i64; 4] = [0x0102_1994, 0x8584_58f6, 0xef53, 0x5846_5342];

/// The kernel's own encoding of a device number (`MKDEV`): major in the
/// top 12 bits, minor in the low 20.
fn kernel_dev(dev: u64) -> u32 {
    (rustix::fs::major(dev) << 20) | (rustix::fs::minor(dev) & 0xf_ffff)
}

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
    ]
}

/// A superblock's bit in the prefilter (holders.bpf.c: `dev_bit`).
fn dev_bit(dev: u32) -> u64 {
    1 << ((dev ^ (dev >> 20) ^ (dev >> 8)) & 63)
}

/// The program's prefilter for `nodes` (holders.bpf.c: `struct
/// prefilter`, its .bss, written after the load): a bit per target's
/// inode, superblock and major.
fn prefilter(nodes: &NodeSet) -> [u8; PREFILTER] {
    let mut ino_bits = 0u64;
    let mut dev_bits = 0u64;
    let mut major_bits = [0u64; 64];
    for n in &nodes.nodes {
        ino_bits |= 1 << (n.ino % 64);
        dev_bits |= dev_bit(kernel_dev(n.dev));
        if let Some(rdev) = n.rdev {
            let major = (kernel_dev(rdev) >> 20) as usize;
            major_bits[major / 64] |= 1 << (major % 64);
        }
    }
    let mut out = [0u8; PREFILTER];
    let words = [ino_bits, dev_bits].into_iter().chain(major_bits);
    for (into, w) in out.chunks_exact_mut(8).zip(words) {
        into.copy_from_slice(&w.to_ne_bytes());
    }
    out
}

/// The bytes of `struct prefilter`.
const PREFILTER: usize = 8 * 66;

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
        same_dev_targets(nodes)?;
        let pinned = pins
            .filter(|_| hooks == TestHooks::default())
            .and_then(|dir| cache::pin::take(dir, object()).ok());
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
        };
        programs.fill_targets(nodes)?;
        programs.walk = programs.last_walk()?;
        Ok(programs)
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

    /// Gives the programs the targets (in place of any they had): every
    /// node by (superblock, inode), and the character and block nodes also
    /// by device number; then their prefilter.
    fn fill_targets(&mut self, nodes: &NodeSet) -> Result<(), Unavailable> {
        let index = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
        let idents = nodes
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| ([u64::from(kernel_dev(n.dev)), n.ino], index(i)));
        fill(&mut self.loaded, "by_ident", idents)?;
        let rdevs = nodes
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| Some((kernel_dev(n.rdev?), index(i))));
        fill(&mut self.loaded, "by_rdev", rdevs)?;
        let map = self.loaded.map_mut(".bss")?;
        aya::maps::Array::<_, [u8; PREFILTER]>::try_from(map)
            .and_then(|mut a| a.set(0, prefilter(nodes), 0))
            .map_err(|e| failed(BpfStep::Map(".bss".into()), &e))
    }
}

/// Fails for a regular-file target on a file system whose `stat` device
/// number may not be its superblock's (the walk matches those by inode).
fn same_dev_targets(nodes: &NodeSet) -> Result<(), Unavailable> {
    for n in nodes.nodes.iter().filter(|n| n.rdev.is_none()) {
        // f_type's type differs between targets (i64 on x86-64).
        #[allow(clippy::unnecessary_cast)]
        let same_dev =
            rustix::fs::statfs(&n.path).is_ok_and(|f| SAME_DEV_FS.contains(&(f.f_type as i64)));
        if !same_dev {
            return Err(Unavailable::ForeignFs(n.path.display().to_string()));
        }
    }
    Ok(())
}

/// Puts `entries` in the hash map `name`, in place of what it held.
fn fill<K: aya::Pod>(
    loaded: &mut Loaded,
    name: &'static str,
    entries: impl Iterator<Item = (K, u32)>,
) -> Result<(), Unavailable> {
    let map = loaded.map_mut(name)?;
    let mut map: HashMap<_, K, u32> =
        HashMap::try_from(map).map_err(|e| failed(BpfStep::Map(name.into()), &e))?;
    let held: Vec<K> = map
        .keys()
        .collect::<Result<_, _>>()
        .map_err(|e| failed(BpfStep::Map(name.into()), &e))?;
    for key in &held {
        map.remove(key)
            .map_err(|e| failed(BpfStep::Map(name.into()), &e))?;
    }
    for (key, target) in entries {
        map.insert(key, target, 0)
            .map_err(|e| failed(BpfStep::Map(name.into()), &e))?;
    }
    Ok(())
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
