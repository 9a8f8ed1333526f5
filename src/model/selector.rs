//! Why a selector the user typed cannot be used, as values: `--gpu` that
//! names no GPU (or a UUID prefix that names several) and `kill --unit`
//! that names several owners. Usage errors; their sentences are made in
//! `present/words/selector.rs`.

use super::OwnerKind;

/// Why `--gpu` selects nothing usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuMiss {
    /// The selector names nothing here; what there is, to choose from.
    NoSuch {
        /// The selector as typed (`9`, `GPU-3f2a`, `0:1`).
        selector: String,
        /// What there is here.
        here: Here,
    },
    /// A UUID prefix that names several GPUs or MIG devices.
    Several {
        /// The prefix as typed.
        selector: String,
        /// MIG devices (a `MIG-` UUID) rather than GPUs.
        mig: bool,
    },
}

/// What a `--gpu` selector could have named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Here {
    /// The GPUs' indexes (a GPU selector).
    Gpus(Vec<u32>),
    /// The MIG devices, each its GPU and its GPU instance (a MIG selector).
    Mig(Vec<(u32, u32)>),
}

/// `kill --unit` that names more than one owner among the holders: an
/// ambiguous prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitMiss {
    /// The unit as typed.
    pub unit: String,
    /// The owners it names, in order.
    pub owners: Vec<UnitOwner>,
}

/// One owner an ambiguous `--unit` names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct UnitOwner {
    /// Its kind.
    pub kind: OwnerKind,
    /// Its id.
    pub id: String,
    /// Its readable name.
    pub name: String,
}

/// A `--gpu` selector that does not parse: a usage error, its words made
/// in `present/words/proc.rs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadSelector {
    /// Nothing but blanks.
    Empty,
    /// Has a `:` but is no PCI bus id (nor `GPU:MIG`).
    NotPci(String),
    /// None of the forms a selector takes.
    Unknown(String),
}

impl std::error::Error for BadSelector {}
