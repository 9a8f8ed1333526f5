//! The loaded object: the per-process walk, loaded by gpufree itself
//! (direct.rs), or the iterator walk, loaded by aya (iterators.rs); its
//! maps and programs by name, whichever it is.

use super::direct::{self, Direct};
use super::per_process::Relocation;
use super::unavailable::{failed, missing};
use super::{Unavailable, Walks, ITERATORS, PER_PROCESS};
use crate::model::{BpfPart, BpfStep, IteratorsWhy};
use aya::maps::Map;
use aya::programs::{Iter, ProgramError};
use aya::Ebpf;
use std::os::fd::{AsFd, BorrowedFd};

/// The walk loaded.
pub enum Loaded {
    /// The per-process walk, and how its relocation was had.
    PerProcess {
        /// The walk.
        walk: Direct,
        /// How its relocation was had.
        relocation: Relocation,
    },
    /// The iterator walk, and why the per-process one is not loaded.
    Iterators {
        /// The object aya loaded.
        ebpf: Box<Ebpf>,
        /// Why not the per-process walk.
        why: IteratorsWhy,
    },
}

impl Loaded {
    /// Its programs, each with the kind of iterator it attaches to and how
    /// it is read.
    pub fn walks(&self) -> &'static Walks {
        match self {
            Loaded::PerProcess { .. } => &PER_PROCESS,
            Loaded::Iterators { .. } => &ITERATORS,
        }
    }

    /// Its map `name`.
    pub fn map_mut(&mut self, name: &str) -> Result<&mut Map, Unavailable> {
        let map = match self {
            Loaded::PerProcess { walk, .. } => walk.maps.get_mut(name),
            Loaded::Iterators { ebpf, .. } => ebpf.map_mut(name),
        };
        map.ok_or_else(|| missing(BpfPart::Map, name))
    }

    /// Its program `name`, loaded.
    pub fn program(&self, name: &'static str) -> Result<BorrowedFd<'_>, Unavailable> {
        match self {
            Loaded::PerProcess { walk, .. } if name == direct::PROGRAM => Ok(walk.program.as_fd()),
            Loaded::PerProcess { .. } => Err(missing(BpfPart::Program, name)),
            Loaded::Iterators { ebpf, .. } => {
                let program = ebpf
                    .program(name)
                    .ok_or_else(|| missing(BpfPart::Program, name))?;
                let iter: &Iter = program
                    .try_into()
                    .map_err(|e: ProgramError| failed(BpfStep::Object, &e))?;
                let fd = iter.fd().map_err(|e| failed(BpfStep::Object, &e))?;
                Ok(fd.as_fd())
            }
        }
    }
}

/// The iterator program `name` of `ebpf`, to load.
pub fn iter_mut<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut Iter, Unavailable> {
    ebpf.program_mut(name)
        .ok_or_else(|| missing(BpfPart::Program, name))?
        .try_into()
        .map_err(|e: ProgramError| failed(BpfStep::Object, &e))
}
