//! Who owns each holder: its cgroup path, read as `proc::owner` reads it,
//! and where the kernel's cgroup hierarchy says that path was handed to
//! someone other than root (the first directory on it not root's — a
//! `Delegate=` subtree, a directory an administrator chowned — or one that
//! a group or anyone may write, where others make the directories below),
//! that boundary too. Names below it are theirs to make; they never name
//! root's container, pod, job or unit.

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
    /// The v1 hierarchies a path may come from (`name=systemd`, `memory`,
    /// `devices`), where mounted.
    v1: Vec<(&'static str, PathBuf)>,
    /// Each directory's owner, group and mode, by path below the root.
    seen: HashMap<String, Option<(u32, u32, u32)>>,
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
        let cgroup1 =
            |p: &Path| rustix::fs::statfs(p).is_ok_and(|s| s.f_type == libc::CGROUP_SUPER_MAGIC);
        let v1 = [
            ("name=systemd", "systemd"),
            ("memory", "memory"),
            ("devices", "devices"),
        ]
        .into_iter()
        .map(|(controller, dir)| (controller, base.join(dir)))
        .filter(|(_, p)| cgroup1(p))
        .collect();
        Owners {
            root,
            v1,
            seen: HashMap::new(),
        }
    }

    /// The cgroup path and owner from the bytes of `/proc/PID/cgroup`.
    pub(super) fn of(&mut self, cgroup: &[u8]) -> (String, Owner) {
        let Some((controllers, path)) = owner::cgroup_line(cgroup) else {
            return (String::new(), Owner::default());
        };
        let delegated = self
            .hierarchy_of(controllers.as_deref())
            .and_then(|root| self.first_handed(&root, &path));
        let owner =
            owner::owner_delegated(&path, delegated.as_ref().map(|(k, w)| (*k, w.as_str())));
        (path, owner)
    }

    /// The hierarchy whose directories a path names, by its line's v1
    /// `controllers` (None: v2's `0::`), where mounted.
    fn hierarchy_of(&self, controllers: Option<&str>) -> Option<PathBuf> {
        let Some(controllers) = controllers else {
            return self.root.clone();
        };
        self.v1
            .iter()
            .find(|(c, _)| controllers.split(',').any(|x| x == *c))
            .map(|(_, root)| root.clone())
    }

    /// The first directory of `path` (from the top, 0-based) handed to
    /// someone other than root — owned by another user, or writable by a
    /// group or anyone — and who (`uid 4242`, `group 4242`, `anyone`).
    fn first_handed(&mut self, root: &Path, path: &str) -> Option<(usize, String)> {
        let parts: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        let mut prefix = String::new();
        for (i, part) in parts.iter().enumerate() {
            prefix.push('/');
            prefix.push_str(part);
            let key = format!("{}{prefix}", root.display());
            let seen = *self.seen.entry(key).or_insert_with(|| {
                std::fs::symlink_metadata(root.join(&prefix[1..]))
                    .ok()
                    .map(|m| (m.uid(), m.gid(), m.mode()))
            });
            match seen {
                // Gone (the process moved, or left): nothing more to say.
                None => return None,
                Some((uid, ..)) if uid != 0 => return Some((i, format!("uid {uid}"))),
                Some((_, _, mode)) if mode & 0o002 != 0 => return Some((i, "anyone".into())),
                Some((_, gid, mode)) if mode & 0o020 != 0 => {
                    return Some((i, format!("group {gid}")))
                }
                Some(_) => {}
            }
        }
        None
    }
}
