//! What `gpufree prepare` did, as values: this boot's relocation of the
//! in-kernel per-process walk kept in its cache (`GPUFREE_BPF_CACHE`) and
//! loaded back from there, nothing to keep, or why nothing was kept. The
//! words are made in `present/words/prepare.rs`.

use super::scan::{CacheRefusal, IteratorsWhy, Relocation};
use serde::{Deserialize, Serialize};

/// What `prepare` did where it ran to its end.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Prepared {
    /// This boot's relocation is kept, and a command's load from the file
    /// was made and verified.
    Kept(KeptFile),
    /// There is nothing to keep.
    Nothing(NothingToKeep),
}

/// This boot's relocation, kept in its cache file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KeptFile {
    /// The cache file.
    pub file: String,
    /// How the first load had the relocation: from a file already there
    /// (`kept`: made by a command, `prepared`: by `prepare`), or made from
    /// the kernel's BTF and written (`made`, with why the file there was
    /// not used).
    pub found: Relocation,
    /// That load, in milliseconds (the relocation's cost where made).
    pub load_ms: f64,
    /// The load from the file, as the next command loads it, in
    /// milliseconds (the first load itself where the file was there).
    pub check_ms: f64,
    /// The walk kept loaded for this boot's one-shot commands: pinned, or
    /// why not.
    pub pin: WalkPin,
}

/// The walk `prepare` keeps loaded for the boot's one-shot commands.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WalkPin {
    /// Pinned in this directory (or a whole set of its pins was there).
    Pinned(String),
    /// `GPUFREE_BPF_PIN` is `off` (or empty), or a test hook changed the
    /// walk.
    Off,
    /// Not pinned, for this reason (commands then load it from the file).
    NotPinned(CacheRefusal),
}

/// Why there is nothing to keep.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum NothingToKeep {
    /// `GPUFREE_BPF_CACHE` is `off` (or empty).
    Off,
    /// The kernel lacks the per-process walk's kfunc (older than 6.7):
    /// commands load the iterator walk, which keeps no relocation.
    NoKfunc(String),
}

/// Why `prepare` kept nothing.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PrepareFailure {
    /// Only root keeps the relocation.
    NotRoot,
    /// The per-process walk did not load here.
    NotLoaded(IteratorsWhy),
    /// The relocation loaded but was not written to the cache.
    NotKept(CacheRefusal),
    /// Written, but the load after it did not take it from the file (how
    /// that load had its relocation).
    NotReadBack(Relocation),
}
