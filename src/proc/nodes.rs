//! GPU device nodes under the device directory (default `/dev`): NVIDIA
//! (`nvidiaN`, `nvidiactl`, `nvidia-uvm`, `nvidia-uvm-tools`,
//! `nvidia-modeset`, `nvidia-caps/*`), DRM (`dri/card*`, `dri/renderD*`) and
//! AMD (`kfd`). Nodes are only `stat`ed, never opened: opening one runs the
//! driver's open.

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

/// The nodes and the indexes the scanner matches against.
#[derive(Debug, Clone, Default)]
pub struct NodeSet {
    /// All nodes found.
    pub nodes: Vec<Node>,
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
    /// Finds the GPU nodes under `dev_dir`. A missing directory or
    /// subdirectory simply has no nodes; other errors name the path.
    pub fn discover(dev_dir: &Path) -> std::io::Result<NodeSet> {
        let mut set = NodeSet::default();
        for sub in ["", "nvidia-caps", "dri"] {
            let dir = dev_dir.join(sub);
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !sub.is_empty() => continue,
                Err(e) => {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("cannot list {}: {e}", dir.display()),
                    ))
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
                // stat (following a symlink), never open.
                let Ok(meta) = std::fs::metadata(entry.path()) else {
                    continue;
                };
                if meta.is_dir() {
                    continue;
                }
                let rdev = meta.file_type().is_char_device().then(|| meta.rdev());
                set.nodes.push(Node {
                    rel,
                    path: entry.path(),
                    kind,
                    dev: meta.dev(),
                    ino: meta.ino(),
                    rdev,
                });
            }
        }
        set.nodes.sort_by(|a, b| a.rel.cmp(&b.rel));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_gpu_nodes_and_nothing_else() {
        assert_eq!(classify("nvidia0"), Some(NodeKind::NvidiaGpu(0)));
        assert_eq!(classify("nvidia15"), Some(NodeKind::NvidiaGpu(15)));
        assert_eq!(classify("nvidiactl"), Some(NodeKind::NvidiaShared));
        assert_eq!(classify("nvidia-uvm-tools"), Some(NodeKind::NvidiaShared));
        assert_eq!(
            classify("nvidia-caps/nvidia-cap1"),
            Some(NodeKind::NvidiaCap)
        );
        assert_eq!(classify("dri/card1"), Some(NodeKind::DriCard));
        assert_eq!(classify("dri/renderD128"), Some(NodeKind::DriRender));
        assert_eq!(classify("kfd"), Some(NodeKind::Kfd));
        for no in [
            "nvidia",
            "nvidiax",
            "nvidia-smi",
            "null",
            "dri/by-path",
            "dri/card",
            "sda1",
        ] {
            assert_eq!(classify(no), None, "{no}");
        }
    }

    #[test]
    fn discovers_plain_files_in_a_test_device_directory() {
        let dir = tempfile::tempdir().unwrap();
        for n in ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "null"] {
            std::fs::write(dir.path().join(n), b"x").unwrap();
        }
        std::fs::create_dir(dir.path().join("dri")).unwrap();
        std::fs::write(dir.path().join("dri/renderD128"), b"x").unwrap();
        let set = NodeSet::discover(dir.path()).unwrap();
        let rels: Vec<&str> = set.nodes.iter().map(|n| n.rel.as_str()).collect();
        assert_eq!(
            rels,
            [
                "dri/renderD128",
                "nvidia-uvm",
                "nvidia0",
                "nvidia1",
                "nvidiactl"
            ]
        );
        let n0 = &set.nodes[2];
        assert_eq!(set.match_stat(n0.dev, n0.ino, None), Some(2));
        assert_eq!(set.match_stat(n0.dev, n0.ino + 100_000, None), None);
    }

    #[test]
    fn missing_device_directory_is_an_error_naming_it() {
        let e = NodeSet::discover(Path::new("/nonexistent/gpufree-dev")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/gpufree-dev"), "{e}");
    }
}
