//! The mount table (`/proc/self/mountinfo`) and a descriptor's mount
//! (`/proc/self/fdinfo/N`), read as bytes: which file system a mount is.

/// The mount id in a descriptor's fdinfo (its `mnt_id:` line).
pub fn mnt_id_of_fdinfo(fdinfo: &[u8]) -> Option<u64> {
    fdinfo.split(|&b| b == b'\n').find_map(|line| {
        let value = line.strip_prefix(b"mnt_id:")?;
        std::str::from_utf8(value).ok()?.trim().parse().ok()
    })
}

/// The file system type of the mount whose id is `id` (mountinfo's first
/// field, as statx's `STATX_MNT_ID` gives it).
pub fn fstype_of(mountinfo: &[u8], id: u64) -> Option<&[u8]> {
    for line in mountinfo.split(|&b| b == b'\n') {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let this = fields
            .first()
            .and_then(|f| std::str::from_utf8(f).ok())
            .and_then(|f| f.parse::<u64>().ok());
        if this != Some(id) {
            continue;
        }
        let sep = fields.iter().position(|f| *f == b"-")?;
        return fields.get(sep + 1).copied();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mounts_file_system_is_found_by_its_id() {
        let info = b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
            30 22 0:5 / /run rw - tmpfs tmpfs rw\n\
            31 30 0:6 / /run/a\\040b rw shared:1 - fuse.sshfs x rw\n\
            32 22 0:7 / /runner rw - nfs4 srv:/x rw\n";
        assert_eq!(fstype_of(info, 30), Some(&b"tmpfs"[..]));
        assert_eq!(
            fstype_of(info, 31),
            Some(&b"fuse.sshfs"[..]),
            "optional fields"
        );
        assert_eq!(fstype_of(info, 32), Some(&b"nfs4"[..]));
        assert_eq!(fstype_of(info, 3), None);
        assert_eq!(fstype_of(b"garbage\n30\n", 30), None);
        let fdinfo = b"pos:\t0\nflags:\t012000000\nmnt_id:\t31\nino:\t2\n";
        assert_eq!(mnt_id_of_fdinfo(fdinfo), Some(31));
        assert_eq!(mnt_id_of_fdinfo(b"pos:\t0\n"), None);
    }
}
