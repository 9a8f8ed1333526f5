//! The targets the walk looks for, given to its maps: each node by
//! (superblock, inode) and by device number, and the prefilter that spares
//! most files those lookups.

use super::loaded::Loaded;
use super::unavailable::failed;
use super::Unavailable;
use crate::model::BpfStep;
use crate::proc::nodes::NodeSet;
use aya::maps::HashMap;

/// File systems where `stat`'s device number is the superblock's, so that
/// a regular-file target matches by inode: tmpfs, ramfs, ext2/3/4, xfs.
const SAME_DEV_FS: [i64; 4] = [0x0102_1994, 0x8584_58f6, 0xef53, 0x5846_5342];

/// The kernel's own encoding of a device number (`MKDEV`): major in the
/// top 12 bits, minor in the low 20.
fn kernel_dev(dev: u64) -> u32 {
    (rustix::fs::major(dev) << 20) | (rustix::fs::minor(dev) & 0xf_ffff)
}

/// A superblock's bit in the prefilter (holders.bpf.c: `dev_slot`).
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

/// Gives the programs `loaded` the targets `nodes` (in place of any they
/// had): every node by (superblock, inode), and the character and block
/// nodes also by device number; then their prefilter. Where the targets
/// differ from those the maps held (a pinned walk's last command's), the
/// targets' epoch is bumped: a mapping result the walk kept names targets
/// by their index, and is then not taken (holders.bpf.c: `kept_maps`).
pub fn give(loaded: &mut Loaded, nodes: &NodeSet) -> Result<(), Unavailable> {
    let index = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
    let idents = nodes
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| ([u64::from(kernel_dev(n.dev)), n.ino], index(i)));
    let idents = as_in_map(idents.collect());
    let rdevs = nodes
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| Some((kernel_dev(n.rdev?), index(i))));
    let rdevs = as_in_map(rdevs.collect());
    // The epoch first: a command stopped after it wrote other targets but
    // before it bumped the epoch would leave the next one with these
    // targets taking results kept for the last ones.
    let (held_idents, held_rdevs) = (held(loaded, "by_ident")?, held(loaded, "by_rdev")?);
    if held_idents != idents || held_rdevs != rdevs {
        bump_epoch(loaded)?;
        replace(loaded, "by_ident", &held_idents, idents)?;
        replace(loaded, "by_rdev", &held_rdevs, rdevs)?;
    }
    let map = loaded.map_mut(".bss")?;
    aya::maps::Array::<_, [u8; PREFILTER]>::try_from(map)
        .and_then(|mut a| a.set(0, prefilter(nodes), 0))
        .map_err(|e| failed(BpfStep::Map(".bss".into()), &e))
}

/// Bumps the targets' epoch (`walk_number[1]`).
fn bump_epoch(loaded: &mut Loaded) -> Result<(), Unavailable> {
    let map = loaded.map_mut("walk_number")?;
    aya::maps::Array::<_, u64>::try_from(map)
        .and_then(|mut a| {
            let epoch = a.get(&1, 0)?;
            a.set(1, epoch.wrapping_add(1), 0)
        })
        .map_err(|e| failed(BpfStep::Map("walk_number".into()), &e))
}

/// Fails for a regular-file target on a file system whose `stat` device
/// number may not be its superblock's (the walk matches those by inode).
pub fn same_dev(nodes: &NodeSet) -> Result<(), Unavailable> {
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

/// `entries` as a hash map holds them: by key, the last of one key.
fn as_in_map<K: Ord + Copy>(mut entries: Vec<(K, u32)>) -> Vec<(K, u32)> {
    entries.reverse();
    entries.sort_by_key(|e| e.0);
    entries.dedup_by(|a, b| a.0 == b.0);
    entries
}

/// What the hash map `name` holds, by key.
fn held<K: aya::Pod + Ord>(
    loaded: &mut Loaded,
    name: &'static str,
) -> Result<Vec<(K, u32)>, Unavailable> {
    let err = |e: aya::maps::MapError| failed(BpfStep::Map(name.into()), &e);
    let map: HashMap<_, K, u32> = HashMap::try_from(loaded.map_mut(name)?).map_err(err)?;
    let mut held: Vec<(K, u32)> = map.iter().collect::<Result<_, _>>().map_err(err)?;
    held.sort_unstable_by_key(|e| e.0);
    Ok(held)
}

/// Puts `entries` in the hash map `name`, in place of `old`, what it held.
fn replace<K: aya::Pod + Ord>(
    loaded: &mut Loaded,
    name: &'static str,
    old: &[(K, u32)],
    entries: Vec<(K, u32)>,
) -> Result<(), Unavailable> {
    let err = |e: aya::maps::MapError| failed(BpfStep::Map(name.into()), &e);
    let mut map: HashMap<_, K, u32> = HashMap::try_from(loaded.map_mut(name)?).map_err(err)?;
    for (key, _) in old {
        map.remove(key).map_err(err)?;
    }
    for (key, target) in entries {
        map.insert(key, target, 0).map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::as_in_map;

    /// Two nodes of one device number (a container's copy of a node): the
    /// map keeps the last one written, and so does the comparison that
    /// decides whether the targets changed.
    #[test]
    fn as_in_map_keeps_the_last_target_of_a_key_sorted_by_key() {
        let written = vec![(7u32, 0), (3, 1), (7, 2), (5, 3), (7, 4)];
        assert_eq!(as_in_map(written), vec![(3, 1), (5, 3), (7, 4)]);
        // Another order of the same nodes is another set of targets.
        let reordered = vec![(7u32, 4), (3, 1), (5, 3), (7, 0)];
        assert_ne!(
            as_in_map(reordered),
            as_in_map(vec![(7u32, 0), (3, 1), (5, 3), (7, 4)])
        );
    }
}
