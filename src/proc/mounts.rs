//! The mount table (`/proc/self/mountinfo`), read as bytes: which file
//! system holds a path.

/// The file system type of the mount that holds the absolute, normalised
/// `path` (the last mount at the longest mount point that is `path` or
/// one of its parents), from /proc/self/mountinfo. Mount points with
/// escaped characters (a space, `\040`) match no path: their children
/// count as their parent mount's.
pub fn fstype_at<'a>(mountinfo: &'a [u8], path: &[u8]) -> Option<&'a [u8]> {
    let mut best: Option<(usize, &[u8])> = None;
    for line in mountinfo.split(|&b| b == b'\n') {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == b"-") else {
            continue;
        };
        let (Some(point), Some(fstype)) = (fields.get(4), fields.get(sep + 1)) else {
            continue;
        };
        let holds = path
            .strip_prefix(*point)
            .is_some_and(|rest| point.ends_with(b"/") || rest.is_empty() || rest.starts_with(b"/"));
        if holds && best.is_none_or(|(len, _)| point.len() >= len) {
            best = Some((point.len(), fstype));
        }
    }
    best.map(|(_, fstype)| fstype)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paths_file_system_is_its_deepest_mounts() {
        let info = b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
            30 22 0:5 / /run rw - tmpfs tmpfs rw\n\
            31 30 0:6 / /run/user/0 rw - fuse.sshfs x rw\n\
            32 22 0:7 / /runner rw - nfs4 srv:/x rw\n\
            33 30 0:8 / /run rw - ramfs ramfs rw\n";
        let at = |p: &[u8]| fstype_at(info, p);
        assert_eq!(
            at(b"/run/gpufree"),
            Some(&b"ramfs"[..]),
            "the last mount on /run"
        );
        assert_eq!(at(b"/run/user/0/cache"), Some(&b"fuse.sshfs"[..]));
        assert_eq!(at(b"/runner/cache"), Some(&b"nfs4"[..]), "not /run's");
        assert_eq!(at(b"/run"), Some(&b"ramfs"[..]));
        assert_eq!(at(b"/var/cache"), Some(&b"ext4"[..]));
        assert_eq!(fstype_at(b"garbage\n", b"/run"), None);
    }
}
