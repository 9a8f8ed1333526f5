//! Who owns each holder: its cgroup path, read as `proc::owner` reads it,
//! and where the kernel's cgroup v2 hierarchy says that path was handed
//! to a user (the first directory on it not root's: a `Delegate=` subtree,
//! a directory an administrator chowned), that boundary too. Names below
//! it are the user's to make; they never name root's container, pod, job
//! or unit.

use crate::model::Owner;
use crate::proc::owner;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The owners of one snapshot's holders, the hierarchy's directories
/// looked at once each.
pub(super) struct Owners {
    /// The cgroup v2 hierarchy (`<sys root>/fs/cgroup`, or its `unified`
    /// beside v1 controllers); None where there is none to read.
    root: Option<PathBuf>,
    /// Each directory's owner, by path below the root.
    seen: HashMap<String, Option<u32>>,
}

impl Owners {
    /// The owners read against the cgroup v2 hierarchy under `sys_root`.
    pub(super) fn new(sys_root: &Path) -> Owners {
        let cgroup2 =
            |p: &Path| rustix::fs::statfs(p).is_ok_and(|s| s.f_type == libc::CGROUP2_SUPER_MAGIC);
        let base = sys_root.join("fs/cgroup");
        let root = [base.clone(), base.join("unified")]
            .into_iter()
            .find(|p| cgroup2(p));
        Owners {
            root,
            seen: HashMap::new(),
        }
    }

    /// The cgroup path and owner from the bytes of `/proc/PID/cgroup`.
    pub(super) fn of(&mut self, cgroup: &[u8]) -> (String, Owner) {
        let Some(path) = owner::cgroup_path(cgroup) else {
            return (String::new(), Owner::default());
        };
        let delegated = if owner::cgroup_v2_path(cgroup).as_deref() == Some(path.as_str()) {
            self.first_not_roots(&path)
        } else {
            None
        };
        let owner = owner::owner_delegated(&path, delegated);
        (path, owner)
    }

    /// The first directory of `path` (from the top, 0-based) whose owner
    /// is not root, and that owner.
    fn first_not_roots(&mut self, path: &str) -> Option<(usize, u32)> {
        let root = self.root.as_ref()?;
        let parts: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        let mut prefix = String::new();
        for (i, part) in parts.iter().enumerate() {
            prefix.push('/');
            prefix.push_str(part);
            let uid = *self.seen.entry(prefix.clone()).or_insert_with(|| {
                std::fs::symlink_metadata(root.join(&prefix[1..]))
                    .ok()
                    .map(|m| m.uid())
            });
            match uid {
                Some(0) => {}
                Some(uid) => return Some((i, uid)),
                // Gone (the process moved, or left): nothing more to say.
                None => return None,
            }
        }
        None
    }
}
