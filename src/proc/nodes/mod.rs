//! GPU device nodes under the device directory (default `/dev`): NVIDIA
//! (`nvidiaN`, `nvidiactl`, `nvidia-uvm`, `nvidia-uvm-tools`,
//! `nvidia-modeset`, `nvidia-caps/*`), DRM (`dri/card*`, `dri/renderD*`) and
//! AMD (`kfd`). Nodes are only `lstat`ed (and a link `stat`ed), never
//! opened: opening one runs the driver's open.
//!
//! A name is not enough: the device directory comes from the command line
//! or the environment, and a node there decides whose processes are
//! holders (and so whom `kill` signals). An entry with a GPU node's name is
//! a node only when it is
//!
//! - a character device of the major the kernel registered for its name's
//!   driver ([`majors`]: `<proc root>/devices`; where that cannot be read,
//!   only the fixed majors 195 and 226 are known);
//! - a link to such a character device (a container runtime's link to a
//!   real GPU node), matched as the device it leads to;
//! - a regular file itself, not through a link: a test's device directory
//!   of plain files, matched by identity only.
//!
//! Anything else (a link to a regular file, to /dev/null or to a
//! directory; a character device of another driver; a directory, FIFO,
//! socket or block device) is refused and kept in [`NodeSet::refused`]
//! with why, never silently dropped: its name says holders of a real GPU
//! node may go unseen, and the verdict says so.

pub mod majors;

pub use majors::{parse_devices, DevicesError, Driver, Majors};

use crate::model::{DevDirUnlisted, FileKind, LinkEnd, LinkTarget, NodeRefusal};
use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// What a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// `/dev/nvidiaN`: one GPU, by minor number.
    NvidiaGpu(u32),
    /// `nvidiactl`, `nvidia-uvm`, `nvidia-uvm-tools`, `nvidia-modeset`.
    NvidiaShared,
    /// `nvidia-caps/*` (MIG capabilities).
    NvidiaCap,
    /// `dri/cardN`.
    DriCard,
    /// `dri/renderDN`.
    DriRender,
    /// `kfd` (AMD).
    Kfd,
}

impl NodeKind {
    /// The driver whose major a node of this kind (named `rel`) has.
    pub fn driver(self, rel: &str) -> Driver {
        match self {
            NodeKind::NvidiaGpu(_) => Driver::NvidiaFrontend,
            NodeKind::NvidiaShared if rel.starts_with("nvidia-uvm") => Driver::NvidiaUvm,
            NodeKind::NvidiaShared => Driver::NvidiaFrontend,
            NodeKind::NvidiaCap => Driver::NvidiaCaps,
            NodeKind::DriCard | NodeKind::DriRender => Driver::Drm,
            NodeKind::Kfd => Driver::Kfd,
        }
    }
}

/// One device node.
#[derive(Debug, Clone)]
pub struct Node {
    /// Path relative to the device directory, e.g. `nvidia0`, `dri/card1`.
    pub rel: String,
    /// Full path.
    pub path: PathBuf,
    /// What it is.
    pub kind: NodeKind,
    /// `st_dev` of the node itself.
    pub dev: u64,
    /// `st_ino` of the node itself.
    pub ino: u64,
    /// Device number, for character devices.
    pub rdev: Option<u64>,
}

/// An entry with a GPU node's name that is not a GPU node (module docs):
/// never matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Path relative to the device directory, e.g. `nvidia0`.
    pub rel: String,
    /// Full path.
    pub path: PathBuf,
    /// What its name says it is.
    pub kind: NodeKind,
    /// What it is instead (in words: "a link to /dev/null, a character
    /// device of major 1 (mem), not the nvidia-frontend driver's 195").
    pub why: NodeRefusal,
}

/// The nodes and the indexes the scanner matches against.
#[derive(Debug, Clone, Default)]
pub struct NodeSet {
    /// All nodes found.
    pub nodes: Vec<Node>,
    /// The entries with a node's name that are not GPU nodes, with why.
    pub refused: Vec<Refused>,
    by_ident: HashMap<(u64, u64), usize>,
    by_rdev: HashMap<u64, usize>,
    by_maps: HashMap<(u32, u32, u64), usize>,
    by_dev_path: HashMap<Vec<u8>, usize>,
    inodes: std::collections::HashSet<u64>,
}

/// Classifies a path relative to the device directory.
pub fn classify(rel: &str) -> Option<NodeKind> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match rel {
        "nvidiactl" | "nvidia-uvm" | "nvidia-uvm-tools" | "nvidia-modeset" => {
            Some(NodeKind::NvidiaShared)
        }
        "kfd" => Some(NodeKind::Kfd),
        _ => {
            if let Some(n) = rel.strip_prefix("nvidia").filter(|n| digits(n)) {
                n.parse().ok().map(NodeKind::NvidiaGpu)
            } else if rel
                .strip_prefix("nvidia-caps/")
                .is_some_and(|n| !n.contains('/'))
            {
                Some(NodeKind::NvidiaCap)
            } else if rel.strip_prefix("dri/card").is_some_and(digits) {
                Some(NodeKind::DriCard)
            } else if rel.strip_prefix("dri/renderD").is_some_and(digits) {
                Some(NodeKind::DriRender)
            } else {
                None
            }
        }
    }
}

impl NodeSet {
    /// Finds the GPU nodes under `dev_dir`, judging each character
    /// device by `majors` (module docs). A missing directory or
    /// subdirectory simply has no nodes; other errors name the path.
    pub fn discover(dev_dir: &Path, majors: &Majors) -> Result<NodeSet, DevDirUnlisted> {
        let mut set = NodeSet::default();
        for sub in ["", "nvidia-caps", "dri"] {
            let dir = dev_dir.join(sub);
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !sub.is_empty() => continue,
                Err(e) => {
                    return Err(DevDirUnlisted {
                        dir: dir.display().to_string(),
                        error: e.to_string(),
                    })
                }
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let rel = if sub.is_empty() {
                    name
                } else {
                    format!("{sub}/{name}")
                };
                let Some(kind) = classify(&rel) else { continue };
                let path = entry.path();
                match examine(&path, kind.driver(&rel), majors) {
                    Examined::Node(meta) => set.nodes.push(Node {
                        rel,
                        path,
                        kind,
                        dev: meta.dev(),
                        ino: meta.ino(),
                        rdev: meta.file_type().is_char_device().then(|| meta.rdev()),
                    }),
                    Examined::Refused(why) => set.refused.push(Refused {
                        rel,
                        path,
                        kind,
                        why,
                    }),
                    Examined::Gone => {}
                }
            }
        }
        set.nodes.sort_by(|a, b| a.rel.cmp(&b.rel));
        set.refused.sort_by(|a, b| a.rel.cmp(&b.rel));
        set.reindex(dev_dir == Path::new("/dev"));
        Ok(set)
    }

    fn reindex(&mut self, real_dev: bool) {
        self.by_ident.clear();
        self.by_rdev.clear();
        self.by_maps.clear();
        self.by_dev_path.clear();
        self.inodes.clear();
        for (i, n) in self.nodes.iter().enumerate() {
            self.by_ident.insert((n.dev, n.ino), i);
            self.inodes.insert(n.ino);
            if let Some(r) = n.rdev {
                self.by_rdev.insert(r, i);
            }
            let major = rustix::fs::major(n.dev);
            let minor = rustix::fs::minor(n.dev);
            self.by_maps.insert((major, minor, n.ino), i);
            // A container's own node for the same device shows in maps only by
            // its path; only meaningful when scanning the real /dev.
            if real_dev {
                self.by_dev_path
                    .insert(format!("/dev/{}", n.rel).into_bytes(), i);
            }
        }
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node an fd's `stat` result refers to: by identity, or for a
    /// character device by device number (a container's own node).
    pub fn match_stat(&self, dev: u64, ino: u64, rdev: Option<u64>) -> Option<usize> {
        self.by_ident
            .get(&(dev, ino))
            .or_else(|| rdev.and_then(|r| self.by_rdev.get(&r)))
            .copied()
    }

    /// The node a maps line refers to: by the filesystem device and inode of
    /// the node, else (scanning the real /dev) by its path.
    pub fn match_maps(&self, major: u32, minor: u32, inode: u64, path: &[u8]) -> Option<usize> {
        self.by_maps
            .get(&(major, minor, inode))
            .or_else(|| {
                let path = path.strip_suffix(b" (deleted)").unwrap_or(path);
                self.by_dev_path.get(path)
            })
            .copied()
    }

    /// Whether a maps line with this inode and path may be a node: the fast
    /// pre-filter that spares the full parse of most lines.
    pub fn maps_candidate(&self, inode: u64, line: &[u8]) -> bool {
        inode != 0
            && (self.inodes.contains(&inode)
                || (!self.by_dev_path.is_empty() && line.windows(5).any(|w| w == b"/dev/")))
    }
}

/// What an entry with a node's name turned out to be.
enum Examined {
    /// A node: its metadata (a link's target's, for a link).
    Node(std::fs::Metadata),
    /// Not a GPU node: what it is.
    Refused(NodeRefusal),
    /// Removed since the directory was listed.
    Gone,
}

/// `lstat`s `path` (never opens it) and judges it by the module's rules;
/// a link is `stat`ed, and its target is what is judged and matched.
fn examine(path: &Path, driver: Driver, majors: &Majors) -> Examined {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Examined::Gone,
        Err(e) => return Examined::Refused(NodeRefusal::Unexamined(e.to_string())),
    };
    let ft = meta.file_type();
    if ft.is_file() {
        return Examined::Node(meta);
    }
    if ft.is_char_device() {
        return match majors.check(driver, meta.rdev()) {
            Ok(()) => Examined::Node(meta),
            Err(why) => Examined::Refused(NodeRefusal::Device(why)),
        };
    }
    if !ft.is_symlink() {
        return Examined::Refused(NodeRefusal::NotDevice(what(&meta)));
    }
    let target = std::fs::read_link(path).map_or_else(
        |e| LinkTarget::Unreadable(e.to_string()),
        |t| LinkTarget::Path(t.display().to_string()),
    );
    // The target as it is now: what is judged is what would be matched.
    let to = match std::fs::metadata(path) {
        Ok(m) if m.file_type().is_char_device() => match majors.check(driver, m.rdev()) {
            Ok(()) => return Examined::Node(m),
            Err(why) => LinkEnd::Device(why),
        },
        Ok(m) => LinkEnd::NotDevice {
            kind: what(&m),
            driver: driver.name().to_string(),
        },
        Err(e) => LinkEnd::Unfollowed(e.to_string()),
    };
    Examined::Refused(NodeRefusal::Link { target, to })
}

/// What a file that is not a character device is.
fn what(meta: &std::fs::Metadata) -> FileKind {
    let ft = meta.file_type();
    if ft.is_file() {
        FileKind::Regular
    } else if ft.is_dir() {
        FileKind::Directory
    } else if ft.is_block_device() {
        FileKind::Block
    } else if ft.is_fifo() {
        FileKind::Fifo
    } else if ft.is_socket() {
        FileKind::Socket
    } else if ft.is_symlink() {
        FileKind::Link
    } else {
        FileKind::Other
    }
}

#[cfg(test)]
mod tests;
